"""One report over the K folds of HumanEval: every problem held out once.

A k-fold evaluation is K runs of `coteam eval --fold F/K`, each in its own folder, each variant
on the team trained on that fold (`coteam train --fold F/K`, from the base model); no run sees a
problem its team trained on (`learner.evaluate.check_held_out`). `pool_folds` reads the K
folders, checks that they are one design (the same settings and variant names, the K different
folds of one K, nothing missing) and writes one results.json and report over all their problems,
with the same statistics as a single run: the paired tests then pair all 164 problems.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from agents.tasks import parse_fold
from learner.config import EvalConfig, EvalError
from learner.eval_stats import summarize
from learner.evaluate import eval_tasks, read_records, settings_clash
from learner.report import write_report

NOT_SHARED = ("fold", "variants", "sampling", "runs", "asked")  # what the K runs may differ in


def _run_settings(folder: Path) -> dict:
    """The run's episode settings (config.json) with its task limit, shapes and concurrency
    and the episodes it asked for (results.json)."""
    paths = [folder / "config.json", folder / "results.json"]
    if not all(path.is_file() for path in paths):
        raise EvalError(f"{folder} holds no finished evaluation: run its `coteam eval` there")
    settings, results = (json.loads(path.read_text()) for path in paths)
    asked = results["episodes"] + results["missing"]
    return (
        settings
        | {k: results["config"][k] for k in ("limit", "shapes", "concurrency")}
        | {"asked": asked}
    )


def _check_design(folders: Sequence[Path], settings: list[dict]) -> list[str]:
    """The folds of the runs, in order, if they are the K folds of one design; else EvalError."""
    folds = [s.get("fold") for s in settings]
    parsed = [parse_fold(f) for f in folds]
    counts = {p[1] for p in parsed if p}
    if None in parsed or len(counts) != 1 or len(set(folds)) != len(folds):
        raise EvalError(
            "--pool takes the folders of runs on different folds of one K (each from "
            f"`coteam eval --fold F/K`), not folds {', '.join(str(f) for f in folds)}"
        )
    if len(folds) != counts.pop():
        raise EvalError(f"--pool needs every fold of the design; given {', '.join(folds)}")
    team = {name: len(adapters) for name, adapters in settings[0]["variants"].items()}
    for folder, other in zip(folders[1:], settings[1:], strict=True):
        clash = settings_clash(settings[0], other, ignore=NOT_SHARED)
        if {name: len(adapters) for name, adapters in other["variants"].items()} != team:
            clash.append("variants")
        if clash:
            raise EvalError(f"{folder} was run with other settings ({', '.join(clash)})")
    return folds


def pool_folds(folders: Sequence[str | Path], out_dir: str | Path, command: str = "") -> dict:
    """Write out_dir/results.json and report.md over the runs of all K folds; return the
    summary. A variant's adapters are listed per fold ("agent1-v2 (1/2) / agent1-v5 (2/2)")."""
    folders = [Path(f) for f in folders]
    settings = [_run_settings(f) for f in folders]
    folds = _check_design(folders, settings)
    fields = {f.name for f in dataclasses.fields(EvalConfig)} - set(NOT_SHARED)
    shared = {k: v for k, v in settings[0].items() if k in fields}
    records = []
    for folder in folders:
        records += read_records(folder / "episodes.jsonl")
    variants = {
        name: tuple(
            " / ".join(
                f"{s['variants'][name][i] or 'base'} ({f})"
                for s, f in zip(settings, folds, strict=True)
            )
            for i in range(len(adapters))
        )
        for name, adapters in settings[0]["variants"].items()
    }
    configs = [EvalConfig(**shared, fold=fold) for fold in folds]
    tasks = [task for config in configs for task in eval_tasks(config)]
    numbers = sorted(int(t.source_id.removeprefix("HumanEval/")) for t in tasks)
    order = {f"HumanEval/{n}": i for i, n in enumerate(numbers)}
    for record in records:  # one index over all the folds' problems, in the problems' order
        record["task_index"] = order.get(record["task"], len(order))
    pooled = dataclasses.replace(configs[0], variants=variants)
    pooled.fold = " + ".join(folds)  # recorded as run: K folds, each problem held out once
    asked = sum(s["asked"] for s in settings)
    summary = summarize(records, pooled, asked, command=command)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_report(summary, out_dir, records)
    return summary
