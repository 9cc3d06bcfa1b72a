"""One report over several class evaluations of different classes: their rows pooled, the same
figures and paired tests as one `coteam eval --task class` (learner/class_eval.py `summarize`,
`report`), so the tests pair every class of them all.

For a team that cannot be judged on every fold: a team trained on the fixed split's train classes
can be judged on fold 1/4's held-out classes (the fixed split's held-out ones) and on fold 2/4's
(the fixed split's validation classes: none trained on, though its gate judged there), never on
3/4's or 4/4's. Each folder's own results file says which classes, answers, temperature and turns
it was run with; the folders must agree on those settings and share no class.

Usage: python bench/class_pool.py FOLDER FOLDER [--samples K --temperature T] [--agents N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.classes import class_problem  # noqa: E402
from learner.class_eval import class_results, class_rows, report, results_name  # noqa: E402


def results_file(folder: Path, agents: int, samples: int, temperature: float) -> Path:
    """The results a `coteam eval --task class` with these settings wrote in `folder`."""
    path = folder / f"results-{results_name(agents, samples, temperature)}.json"
    if not path.is_file():
        sys.exit(f"{path} is missing: run that folder's `coteam eval --task class` first")
    return path


def pooled(folders: list[Path], agents: int, samples: int, temperature: float) -> dict:
    """The pooled rows' figures and paired tests, with each folder's classes and command: only
    the rows (shape and variant) every folder has."""
    rows, classes, commands, settings, names = [], [], [], set(), []
    for folder in folders:
        results = json.loads(results_file(folder, agents, samples, temperature).read_text())
        if set(results["classes"]) & set(classes):
            sys.exit(f"{folder} judges classes another folder judged: pool different classes")
        settings.add((results["max_tokens"], results["turns"]))
        problems = [class_problem(t) for t in results["classes"]]
        path = folder / "episodes.jsonl"
        found = class_rows(path, problems, samples, results["turns"], agents, temperature)
        rows += found
        names.append({r["shape"] for r in found})
        classes += results["classes"]
        commands.append(results["command"])
    if len(settings) > 1:
        sys.exit(f"the folders were run with different tokens per method or turns: {settings}")
    [(max_tokens, turns)] = settings
    shared = set.intersection(*names)
    rows = [r for r in rows if r["shape"] in shared]
    return class_results(rows, agents) | {
        "command": "; ".join(commands),
        "split": " + ".join(f.name for f in folders),
        "fold": None,
        "classes": classes,
        "samples": samples,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "turns": turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="class evaluation folders")
    parser.add_argument("--agents", type=int, default=2, help="team size (default 2)")
    parser.add_argument("--samples", type=int, default=1, help="answers a class (default 1)")
    parser.add_argument("--temperature", type=float, default=0.0, help="with --samples > 1")
    args = parser.parse_args()
    temperature = args.temperature if args.samples > 1 else 0.0
    print(report(pooled(args.folders, args.agents, args.samples, temperature)), end="")


if __name__ == "__main__":
    main()
