"""Calls between teammates in a class evaluation: for each team row (shape and variant) of an
evaluation's episodes, the methods whose docstring implies a call to a teammate's method
(ClassEval's method dependencies, dealt to another agent), how many of them the team's code
calls, and how many of those pass their test class: the class reward's coordination count
(agents/kinds/class_team.py `teammate_calls`, `passing_methods`).

Usage: python bench/teammate_calls.py EVAL_FOLDER
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.class_team import passing_methods, team_size, teammate_calls  # noqa: E402
from agents.kinds.classes import class_problem  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a `coteam eval --task class` output folder")
    parser.add_argument("--sizes", default="2,3,4", help="team sizes (default 2,3,4)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (Path(args.folder) / "episodes.jsonl").open()]
    rows = [r for r in rows if len(r["dealt"]) > 1 and r["sample"] == 0]  # one agent: no teammate
    classes = {r["task_id"] for r in rows}
    problems = {task: class_problem(task) for task in classes}
    for size in (int(s) for s in args.sizes.split(",")):
        # a class of fewer methods than `size` is played by the smaller team (`team_size`; a
        # row's `methods` also holds a later turn's rewrites, so it does not count them)
        of_size = [
            r for r in rows
            if len(r["dealt"]) == team_size(problems[r["task_id"]], r["shape"], size)
        ]  # fmt: skip
        if {r["task_id"] for r in of_size} != classes:
            continue  # no team of this size ran on every class
        counts: dict[str, Counter] = {}
        for row in of_size:
            problem = problems[row["task_id"]]
            tally = counts.setdefault(f"{row['shape']}@{row.get('variant', 'base')}", Counter())
            passing = passing_methods(problem, row["test_classes"])
            for method, called in teammate_calls(problem, row["dealt"], row["program"]).items():
                tally["implied"] += 1
                tally["called"] += called
                tally["called and passing"] += called and method in passing
        for team, tally in counts.items():
            print(
                f"team of {size}, {team}: {tally['implied']} methods imply a teammate's call; the "
                f"code calls {tally['called']}, of which {tally['called and passing']} pass their "
                "tests"
            )


if __name__ == "__main__":
    main()
