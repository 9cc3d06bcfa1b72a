"""Sandbox benchmark: what each isolation layer costs per run, and the test runner on HumanEval.

Times, in one process and interleaved (so the machine's load hits every variant alike):
    trivial   `print(1)` in the full sandbox, and with the syscall filter or the cgroup switched
              off, printed as ratios against the full sandbox
    humaneval `run_tests` (the judge in one sandbox, the program in another) on the first N
              HumanEval problems' canonical solutions, with the problem's given code: how many
              pass (all should) and seconds per problem

Usage: python bench/sandbox.py [--runs 20] [--problems 164] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.judge import sandbox  # noqa: E402
from agents.judge.testrun import run_tests  # noqa: E402
from agents.tasks import humaneval_tasks  # noqa: E402


def time_trivial(runs: int) -> dict[str, float]:
    """Median seconds of one trivial run per variant."""
    variants = {
        "full": {},
        "no syscall filter": {"agents.judge.sandbox._seccomp_config": lambda: None},
        "no cgroup": {"agents.judge.limits.RunCgroups.create": lambda limits: None},
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    sandbox.run_untrusted("print(1)")  # the interpreter probe runs once, outside the timing
    for _ in range(runs):
        for name, patches in variants.items():
            with contextmanagers(patches):
                start = time.perf_counter()
                result = sandbox.run_untrusted("print(1)")
                times[name].append(time.perf_counter() - start)
            assert result.ok, result.reason
    return {name: statistics.median(t) for name, t in times.items()}


def contextmanagers(patches: dict) -> ExitStack:
    """mock.patch for each dotted name, entered together."""
    stack = ExitStack()
    for name, value in patches.items():
        stack.enter_context(mock.patch(name, value))
    return stack


def time_humaneval(problems: int) -> dict:
    """The canonical solutions through `run_tests`: how many pass all their tests, which do not
    (and why), and seconds per problem."""
    tasks = humaneval_tasks()[:problems]
    failed = {}
    start = time.perf_counter()
    for task in tasks:
        report = run_tests(
            task.prompt + task.reference, task.tests, task.entry_point, given=task.preamble
        )
        if report.passed != report.total or not report.total:
            failing = [r.message for r in report.results if not r.passed]
            failed[task.source_id] = report.error or (failing[:1] or ["no tests"])[0]
    elapsed = time.perf_counter() - start
    return {
        "problems": len(tasks),
        "all_passed": len(tasks) - len(failed),
        "failed": failed,
        "seconds_per_problem": elapsed / len(tasks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    trivial = time_trivial(args.runs)
    for name, seconds in trivial.items():
        ratio = seconds / trivial["full"]
        print(f"trivial run, {name:18s} {seconds * 1000:7.1f} ms  ({ratio:.2f}x full)")
    humaneval = time_humaneval(args.problems)
    print(
        f"HumanEval canonical solutions: {humaneval['all_passed']} of {humaneval['problems']} "
        f"pass every test, {humaneval['seconds_per_problem']:.3f} s a problem"
    )
    for task_id, why in humaneval["failed"].items():
        print(f"  {task_id}: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps({"trivial": trivial, "humaneval": humaneval}))


if __name__ == "__main__":
    main()
