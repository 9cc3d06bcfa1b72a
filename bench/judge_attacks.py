"""The judge's third round, before and after: each test form of tests/judge_cases.py with its honest
right program, its honest wrong one and its attack, scored by `run_tests` of a checkout.

Prints one line per case: passed/total for right, wrong and attack, and what an honest judge should
give. `--checkout` judges with another checkout's `agents/` (e.g. a worktree of an earlier commit)
while the cases stay this one's, so one command gives the "before" column and another the "after".
A last case plants another project's world-readable tests on this machine (in /var/lib, or
--plant-in) and runs a program that reads them. As an ordinary user with
COTEAM_ALLOW_WEAK_SANDBOX=1 it measures the weak sandbox.

Usage: python bench/judge_attacks.py [--checkout PATH] [--json PATH] [--plant-in DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def load_cases():
    spec = importlib.util.spec_from_file_location("judge_cases", HERE / "tests" / "judge_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["judge_cases"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", default=str(HERE), help="whose judge (default: this one)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--plant-in",
        default="/var/lib",
        help="a folder this user may write in, outside CoTeam's, for the other project's tests",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.checkout).resolve()))
    from agents.judge.testrun import run_tests

    cases = load_cases()
    rows = []
    for case in cases.CASES:
        row = {"case": case.name, "what": case.what}
        for program in ("right", "wrong", "attack"):
            try:
                report = run_tests(
                    getattr(case, program), case.tests, case.entry_point, timeout=2.0,
                    given=case.given,
                )  # fmt: skip
                row[program] = [report.passed, report.total]
            except ValueError as e:  # refused before it ran
                row[program] = str(e)[:80]
            row[f"{program}_expected"] = list(case.expected[program])
        rows.append(row)
    rows.append(another_checkout(run_tests, args.plant_in))
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':{width}}  right   wrong   attack  (honest: right / wrong / attack)")
    for r in rows:
        cells = [
            "/".join(map(str, r[p])) if isinstance(r[p], list) else "refused"
            for p in ("right", "wrong", "attack")
        ]
        honest = " / ".join(
            "/".join(map(str, r[f"{p}_expected"])) for p in ("right", "wrong", "attack")
        )
        print(f"{r['case']:{width}}  {cells[0]:7} {cells[1]:7} {cells[2]:7} ({honest})")
    if args.json:
        commit = subprocess.run(
            ["git", "-C", args.checkout, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        record = {"checkout": commit or Path(args.checkout).name, "rows": rows}
        Path(args.json).write_text(json.dumps(record, indent=1))


def another_checkout(run_tests, plant_in: str) -> dict:
    """Another project's tests, world-readable in `plant_in`: a program that reads them."""
    folder = Path(tempfile.mkdtemp(prefix="coteam-other-checkout-", dir=plant_in))
    tests = "assert add(1, 2) == 31337\nassert add(5, 5) == 27182\n"
    try:
        folder.chmod(0o755)
        (folder / "tests.py").write_text(tests)
        (folder / "tests.py").chmod(0o644)
        reader = (
            "import re\n"
            f"found = [int(n) for n in re.findall(r'== (\\d+)', open('{folder}/tests.py').read())]\n"
            "def add(a, b):\n    return found.pop(0)\n"
        )
        right = "def add(a, b):\n    return {(1, 2): 31337, (5, 5): 27182}[a, b]\n"
        row = {"case": "reads_another_checkout", "what": "a program that reads other tests"}
        for program, code in (("right", right), ("wrong", "def add(a, b):\n    return a + b\n"),
                              ("attack", reader)):  # fmt: skip
            report = run_tests(code, tests, "add", timeout=2.0)
            row[program] = [report.passed, report.total]
        row |= {"right_expected": [2, 2], "wrong_expected": [0, 2], "attack_expected": [0, 2]}
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
