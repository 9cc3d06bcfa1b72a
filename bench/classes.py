"""The class judge on ClassEval's canonical classes: how many pass every test class, which do not
and why, and the seconds per class (every vendored class, merged as its canonical solution).

Usage: python bench/classes.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.classes import class_problems, judge_class  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    rows, start = [], time.monotonic()
    for problem in class_problems():
        began = time.monotonic()
        verdict = judge_class(problem, problem.program(problem.solution))
        failing = [r for r in verdict.report.results if not r.passed]
        rows.append(
            {
                "task_id": problem.task_id,
                "test_classes_passed": verdict.classes_passed,
                "test_classes": len(verdict.test_classes),
                "seconds": round(time.monotonic() - began, 2),
                "first_failure": f"{failing[0].source}: {failing[0].message}"[:200]
                if failing
                else "",
            }
        )
    passed = sum(r["test_classes_passed"] == r["test_classes"] for r in rows)
    methods = sum(r["test_classes_passed"] for r in rows), sum(r["test_classes"] for r in rows)
    seconds = (time.monotonic() - start) / len(rows)
    for r in rows:
        if r["first_failure"]:
            print(
                f"{r['task_id']}: {r['test_classes_passed']}/{r['test_classes']}  {r['first_failure']}"
            )
    print(
        f"ClassEval canonical classes: {passed} of {len(rows)} pass every test class; "
        f"test classes {methods[0]}/{methods[1]}; {seconds:.2f} s a class"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "passed": passed}, indent=1))


if __name__ == "__main__":
    main()
