"""`coteam eval --task class`: class teams against one agent on ClassEval classes, paired.

Every shape writes every class of the split with the same openings (each method begun with its
head), the same budget per method and the same judge (agents/kinds/classes.py). `single` comes in
two forms, each method from the skeleton alone and incremental (each method seeing the ones
written before it); every team is compared with the better of the two on the split, paired by
class:

- method level: the share of the class's test classes that pass (as ClassEval counts), per class;
  Wilcoxon's signed-rank test on the per-class differences, and the sign test on the classes one
  side does better on;
- class level: whether every test class passes; the exact McNemar test (a binomial test on the
  classes only one side passes);
- critical-path tokens (the most any one agent wrote) and wall time per class: the ratio of the
  means, team over single.

Variants (`--adapters NAME=agent1-v3,agent2-v3`) run every shape with those adapter versions (agent
k's the k-th; a single agent the first); a variant's rows are `shape@NAME`, paired like any team
against the better single form of the base model (the untrained start: the same openings, budget
and judge).

Writes `episodes.jsonl` (one line per class, shape, variant, team size and sample: the episode's
summary; a run started again, or with another `--agents`, skips what is there), and
`results-agentsN-samplesK.json` and `report-agentsN-samplesK.md` to `out`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from agents.kinds.class_team import SINGLE_FORMS, run_class_episode, team_size
from agents.kinds.classes import class_splits, passed_in_full
from agents.team.graph import TeamSettings, judged_sampling
from agents.team.roles import CLASS_SHAPES
from learner.config import BASE_VARIANT, checked_temperature

SPLITS = {"heldout": "held_out", "train": "train", "all": None}


def class_eval_problems(split: str = "heldout", fold: str | None = None, limit: int | None = None):
    """The classes of a split (or of fold "F/K"), in order."""
    parts = class_splits(fold)
    key = SPLITS[split]
    problems = [p for part in parts.values() for p in part] if key is None else parts[key]
    if key is None:
        order = {p.task_id: i for i, p in enumerate(sorted(problems, key=_number))}
        problems = sorted(problems, key=lambda p: order[p.task_id])
    return problems[:limit] if limit else problems


def trained_on_held_out(trained: str | None, fold: str | None) -> bool:
    """Whether the classes trained on under split `trained` (a fold, or None: the fixed split)
    include any held out under `fold`: the fixed split's train classes are none of fold 1/4's or
    2/4's held-out ones, for one."""
    parts = class_splits(fold)
    held_out = {p.task_id for p in parts["held_out"]}
    return any(p.task_id in held_out for p in class_splits(trained)["train"])


def _number(problem) -> int:
    return int(problem.task_id.rsplit("_", 1)[1]) if problem.task_id[-1].isdigit() else 0


def run_class_eval(
    policy,
    out: str | Path,
    *,
    shapes: tuple[str, ...] = ("single", "single_incremental", "parallel"),
    agents: int = 2,
    split: str = "heldout",
    fold: str | None = None,
    limit: int | None = None,
    samples: int = 1,
    max_tokens: int = 256,
    turns: int = 1,
    progress: bool = True,
    command: str = "",
    variants: dict[str, tuple[str | None, ...]] | None = None,
    temperature: float = 0.8,
) -> dict:
    """Run every (class, shape, variant, sample) not yet in `out`/episodes.jsonl, then write the
    results. `variants`: name -> each agent's adapter (the base model always runs, as "base");
    `temperature`: how K > 1 samples are drawn (top-p 0.95)."""
    variants = {BASE_VARIANT: ()} | dict(variants or {})
    unknown = [s for s in shapes if s not in CLASS_SHAPES]
    if unknown:
        raise ValueError(f"unknown class shapes {unknown}: {', '.join(CLASS_SHAPES)}")
    temperature = checked_temperature(samples, temperature)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "episodes.jsonl"
    problems = class_eval_problems(split, fold, limit)
    jobs = _jobs(
        problems, shapes, variants, _done(path),
        samples=samples, agents=agents, turns=turns, temperature=temperature,
    )  # fmt: skip
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="class episodes", unit="episode")
    with path.open("a", encoding="utf-8") as f:
        for problem, shape, variant, sample in jobs:
            sampling = judged_sampling(samples, max_tokens, 1000 * sample, temperature)
            team = TeamSettings(shape, agents, turns, variants[variant], sampling)
            episode = run_class_episode(problem, policy, team)
            row = episode.summary() | {
                "sample": sample, "turns": turns, "variant": variant, "temperature": temperature,
                "adapters": list(variants[variant]),
            }  # fmt: skip
            f.write(json.dumps(row) + "\n")
            f.flush()
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    rows = class_rows(path, problems, samples, turns, agents, temperature)
    results = class_results(rows, agents) | {
        "command": command,
        "split": split,
        "fold": fold,
        "classes": [p.task_id for p in problems],
        "samples": samples,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "turns": turns,
    }
    name = results_name(agents, samples, temperature, turns)
    (out / f"results-{name}.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (out / f"report-{name}.md").write_text(report(results), encoding="utf-8")
    return results


def _jobs(
    problems, shapes, variants, done: set, *, samples: int, agents: int, turns: int,
    temperature: float,
) -> list[tuple]:  # fmt: skip
    """(class, shape, variant, sample) of every episode the folder (`done`) lacks."""
    return [
        (problem, shape, variant, sample)
        for problem in problems
        for sample in range(samples)
        for variant in variants
        for shape in shapes  # interleaved: the machine's load falls on every shape alike
        if (
            problem.task_id, labelled(shape, variant), sample, team_size(problem, shape, agents),
            turns, temperature,
        ) not in done
    ]  # fmt: skip


def results_name(agents: int, samples: int, temperature: float, turns: int = 1) -> str:
    """What an evaluation's results and report files are named after: its team size, answers
    a class, their temperature and turns."""
    name = f"agents{agents}-samples{samples}" + (f"-t{temperature:g}" if samples > 1 else "")
    return name + (f"-turns{turns}" if turns > 1 else "")


def class_results(rows: list[dict], agents: int) -> dict:
    """The rows' figures and paired tests (`summarize`, every row name in the tables' order),
    and each variant's adapters."""
    order = {s: i for i, s in enumerate(CLASS_SHAPES)}
    labels = tuple(
        sorted({r["shape"] for r in rows}, key=lambda x: ("@" in x, order[x.split("@")[0]], x))
    )
    return summarize(rows, labels, agents) | {
        "variants": {r["shape"].split("@")[1]: r["adapters"] for r in rows if "@" in r["shape"]},
    }


def class_rows(
    path: Path, problems, samples: int, turns: int, agents: int, temperature: float
) -> list[dict]:
    """Every row the folder holds for these classes and settings, named `shape@variant` (a run
    with other --shapes or --adapters adds its rows to the same tables)."""
    by_id = {p.task_id: p for p in problems}
    return [
        r | {"shape": label(r)}
        for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if r["task_id"] in by_id and r["sample"] < samples and r.get("turns", 1) == turns
        and r.get("temperature", 0.0) == temperature
        and len(r["dealt"]) == team_size(by_id[r["task_id"]], r["shape"], agents)
    ]  # fmt: skip


def _done(path: Path) -> set[tuple]:
    """What `episodes.jsonl` holds: (class, row name, sample, team size, turns, temperature) of
    each line (a line without a temperature is greedy)."""
    done = set()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            key = (row["task_id"], label(row), row["sample"], len(row["dealt"]))
            done.add((*key, row.get("turns", 1), row.get("temperature", 0.0)))
    return done


def labelled(shape: str, variant: str) -> str:
    """A row's name in the tables: the shape, `@variant` for adapters other than the base model."""
    return shape if variant == BASE_VARIANT else f"{shape}@{variant}"


def label(row: dict) -> str:
    return labelled(row["shape"], row.get("variant", BASE_VARIANT))


def _per_class(rows: list[dict], shape: str) -> dict[str, dict]:
    """Per class (averaged over samples): method-level share, class passed, tokens, wall time;
    over all K samples: the share of test classes some sample passes, and whether one passes all
    (pass@K)."""
    found: dict[str, list[dict]] = {}
    for row in rows:
        if row["shape"] == shape:
            found.setdefault(row["task_id"], []).append(row)
    return {
        task: {
            "method": statistics.mean(
                r["test_classes_passed"] / max(1, len(r["test_classes"])) for r in rs
            ),
            "class": statistics.mean(float(r["class_passed"]) for r in rs),
            "tokens": statistics.mean(r["critical_path_tokens"] for r in rs),
            "wall": statistics.mean(r["wall_s"] for r in rs),
            "test_classes": sum(r["test_classes_passed"] for r in rs),
            "test_classes_total": sum(len(r["test_classes"]) for r in rs),
            "method_at_k": _passed_by_any(rs),
            "class_at_k": float(any(r["class_passed"] for r in rs)),
        }
        for task, rs in found.items()
    }


def _passed_by_any(rows: list[dict]) -> float:
    """The share of a class's test classes that at least one of its samples passes."""
    names = rows[0]["test_classes"]
    passed = {n for r in rows for n, (p, t) in r["test_classes"].items() if passed_in_full(p, t)}
    return len(passed & set(names)) / max(1, len(names))


def summarize(rows: list[dict], shapes: tuple[str, ...], agents: int) -> dict:
    """Each shape's figures, and each team's paired tests against the better single form."""
    from scipy.stats import binomtest

    per = {shape: _per_class(rows, shape) for shape in shapes}
    figures = {}
    for shape, classes in per.items():
        if not classes:
            continue
        figures[shape] = {
            "classes": len(classes),
            "method_level": statistics.mean(c["method"] for c in classes.values()),
            "test_classes_passed": sum(c["test_classes"] for c in classes.values()),
            "test_classes_total": sum(c["test_classes_total"] for c in classes.values()),
            "class_level": statistics.mean(c["class"] for c in classes.values()),
            "method_at_k": statistics.mean(c["method_at_k"] for c in classes.values()),
            "class_at_k": statistics.mean(c["class_at_k"] for c in classes.values()),
            "critical_path_tokens": statistics.mean(c["tokens"] for c in classes.values()),
            "wall_s": statistics.mean(c["wall"] for c in classes.values()),
        }
    singles = [s for s in SINGLE_FORMS if s in figures]
    best = max(singles, key=lambda s: figures[s]["method_level"]) if singles else None
    tests = {}
    for shape in figures:
        if shape in SINGLE_FORMS or best is None:
            continue
        shared = sorted(set(per[shape]) & set(per[best]))
        team = [per[shape][t] for t in shared]
        one = [per[best][t] for t in shared]
        diffs = [a["method"] - b["method"] for a, b in zip(team, one, strict=True)]
        at_k = [a["method_at_k"] - b["method_at_k"] for a, b in zip(team, one, strict=True)]
        better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        nonzero = [d for d in diffs if d != 0]
        only_team = sum(a["class"] > b["class"] for a, b in zip(team, one, strict=True))
        only_single = sum(a["class"] < b["class"] for a, b in zip(team, one, strict=True))
        tests[shape] = {
            "against": best,
            "classes": len(shared),
            "method_level_diff": statistics.mean(diffs) if diffs else 0.0,
            "method_at_k_diff": statistics.mean(at_k) if at_k else 0.0,
            "method_at_k_wilcoxon_p": _wilcoxon([d for d in at_k if d != 0]),
            "better": better,
            "worse": worse,
            "sign_p": binomtest(better, better + worse).pvalue if better + worse else 1.0,
            "wilcoxon_p": _wilcoxon(nonzero),
            "class_only_team": only_team,
            "class_only_single": only_single,
            "mcnemar_p": binomtest(only_team, only_team + only_single).pvalue
            if only_team + only_single
            else 1.0,
            "tokens_ratio": statistics.mean(a["tokens"] for a in team)
            / max(1e-9, statistics.mean(b["tokens"] for b in one)),
            "wall_ratio": statistics.mean(a["wall"] for a in team)
            / max(1e-9, statistics.mean(b["wall"] for b in one)),
        }
    return {"agents": agents, "figures": figures, "best_single": best, "paired": tests}


def _wilcoxon(nonzero: list[float]) -> float:
    from scipy.stats import wilcoxon

    return float(wilcoxon(nonzero).pvalue) if nonzero else 1.0


def report(results: dict) -> str:
    """The results as a Markdown table, saying what every row shares."""
    lines = [
        "# Class teams against one agent (ClassEval)",
        "",
        f"Classes: {len(results['classes'])} ({results['split']}"
        + (f", fold {results['fold']}" if results["fold"] else "")
        + f"); {results['samples']} answer(s) per class and shape"
        + (
            " (greedy)"
            if results["samples"] == 1
            else f" (T = {results.get('temperature', 0.8):g}, top-p 0.95; pass@1 is their mean)"
        )
        + f"; {results['max_tokens']} tokens per method; {results.get('turns', 1)} turn(s). "
        "Every shape: the same openings (each "
        "method begun with the skeleton's stub of it), budget and judge.",
        "",
        "| shape | method level (test classes) | class level | critical-path tokens | wall s |",
        "|---|---|---|---|---|",
    ]
    for shape, f in results["figures"].items():
        alone = shape.split("@")[0] in SINGLE_FORMS
        name = shape if alone else f"{shape} ({results['agents']} agents)"
        lines.append(
            f"| {name} | {f['method_level']:.3f} ({f['test_classes_passed']}/"
            f"{f['test_classes_total']}) | {f['class_level']:.3f} | "
            f"{f['critical_path_tokens']:.0f} | {f['wall_s']:.1f} |"
        )
    lines += ["", f"Paired against the better single form ({results['best_single']}):", ""]
    lines += [
        "| team | method-level diff | better / worse (sign p, Wilcoxon p) | class only team / "
        "only single (McNemar p) | tokens x | wall x |",
        "|---|---|---|---|---|---|",
    ]
    for shape, t in results["paired"].items():
        lines.append(
            f"| {shape} | {t['method_level_diff']:+.3f} | {t['better']} / {t['worse']} "
            f"({t['sign_p']:.3g}, {t['wilcoxon_p']:.3g}) | {t['class_only_team']} / "
            f"{t['class_only_single']} ({t['mcnemar_p']:.3g}) | {t['tokens_ratio']:.2f} | "
            f"{t['wall_ratio']:.2f} |"
        )
    lines += _at_k_lines(results) if results["samples"] > 1 else []
    named = {k: v for k, v in results.get("variants", {}).items() if v}
    if named:
        lines += ["", "Variants: " + "; ".join(f"{k} = {', '.join(v)}" for k, v in named.items())]
    if results.get("command"):
        lines += ["", f"Command: `{results['command']}`"]
    return "\n".join(lines) + "\n"


def _at_k_lines(results: dict) -> list[str]:
    """pass@K over a class's K samples: a test class some sample passes, a class some sample
    passes whole; each team paired with the better single form (Wilcoxon on the method level)."""
    k = results["samples"]
    lines = ["", f"pass@{k} (what one of the {k} samples passes):", ""]
    lines += [f"| shape | method level pass@{k} | class level pass@{k} |", "|---|---|---|"]
    for shape, f in results["figures"].items():
        lines.append(f"| {shape} | {f['method_at_k']:.3f} | {f['class_at_k']:.3f} |")
    for shape, t in results["paired"].items():
        lines.append(
            f"\n{shape} against {t['against']}: method level pass@{k} "
            f"{t['method_at_k_diff']:+.3f} (Wilcoxon p {t['method_at_k_wilcoxon_p']:.3g})"
        )
    return lines
