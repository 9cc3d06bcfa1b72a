"""The one test runner: splits a task's tests, judges them on a program in the sandbox, reports.

`run_tests(program, test_code, entry_point) -> TestReport` is what the team, the learner's reward,
the gate, `coteam eval`, the page and `coteam check` call. Two sandboxed processes take part:

- the program's (`agents/judge/harness/candidate.py`): loads the program and answers calls of its
  functions with plain values; it never sees the tests;
- the judge's (`agents/judge/harness/judge.py`): holds the task's given code and the tests, never the
  program; it runs every test statement, loops, helpers and `math.isclose` included, with its
  own builtins, each call of the program being a request to the other process whose answer must
  be plain data of exact types (agents/judge/harness/codec.py).

Only the judge writes the results, on a pipe the program does not hold; a program that exits
early or runs out of time fails the tests not yet judged. Every line read back is validated;
nothing the program prints or does can decide its score or raise here.
"""

from __future__ import annotations

import ast
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agents.judge.limits import Limits
from agents.judge.parsing import parse
from agents.judge.result import SandboxError, SandboxResult
from agents.judge.sandbox import run_untrusted

HARNESS = Path(__file__).parent / "harness"
MAX_LINE_CHARS = 2_000
# Seconds a counted test may run. HumanEval's own harness gives a whole check 3 s; the MAGRPO
# authors give each test 10 s and stop after 3 timeouts, so one looping program held a training
# step (every group waits for its slowest test run) or a person's test result for 30 s and more.
# Every canonical HumanEval solution passes its tests at 3 s per test on a busy 2-core CPU.
TEST_TIMEOUT_S = 3.0
# Seconds the judge waits for the program's process to start and load, beyond one test's time
STARTUP_S = 10.0


@dataclass
class AssertResult:
    source: str
    passed: bool
    message: str = ""  # why it failed: the assert's message, or the exception, from the judge


@dataclass
class TestReport:
    """How many of a task's tests a program passed; `fraction` is the MAGRPO test score."""

    __test__ = False  # not a pytest class

    passed: int
    total: int
    results: list[AssertResult]
    timeouts: int
    error: str  # the program failed to load, or the sandbox stopped it: the reason
    sandbox: SandboxResult | None = field(default=None, repr=False)  # the program's run
    rejected_lines: int = 0  # lines read back from the judge that were malformed or unknown

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """Every counted test passed (pass@1's criterion); False when there were none."""
        return self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict:
        """Plain data for JSON (`coteam check --json`)."""
        return {
            "passed": self.passed,
            "total": self.total,
            "fraction": self.fraction,
            "error": self.error,
            "tests": [
                {"source": r.source, "passed": r.passed, "message": r.message} for r in self.results
            ],
        }


def split_check(
    test_code: str, entry_point: str | None = None
) -> tuple[str, list[tuple[str, bool]]]:
    """Split test code into module-level set-up and test statements, in order.

    HumanEval form (a `def check(candidate)`): the set-up is the code around `check`, the
    statements are those of its body. Plain form (top-level asserts that call `entry_point` by
    name): no set-up, the statements are the module's. Returns (setup, [(source, counts)]): a
    statement counts as a test when it holds an assert that uses the candidate (or `entry_point`);
    the others (imports, variables, `assert True`) only prepare.
    """
    setup, candidate, statements = _parse_tests(test_code, entry_point)
    return setup, [(ast.unparse(s), counts) for s, counts in statements]


def _parse_tests(
    test_code: str, entry_point: str | None
) -> tuple[str, str, list[tuple[ast.stmt, bool]]]:
    try:
        tree = parse(test_code)
    except SyntaxError as e:
        raise ValueError(f"the test code does not parse: {e}") from e
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is not None and check.args.args:
        candidate = check.args.args[0].arg
        setup = ast.unparse([n for n in tree.body if n is not check])
        body = check.body
    elif entry_point:
        candidate, setup, body = entry_point, "", tree.body
    else:
        raise ValueError("the tests have no `def check(candidate)` and no entry point was named")
    statements = []
    for statement in body:
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(statement))
        statements.append((statement, has_assert and _uses(statement, candidate)))
    return setup, candidate, statements


def _uses(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def plan_tests(test_code: str, entry_point: str | None = None) -> tuple[str, str, list[list]]:
    """The set-up, the candidate's name in the tests, and the statements in order as
    [unit number or None, source]: a number for each counted test, None for one that only
    prepares."""
    setup, candidate, statements = _parse_tests(test_code, entry_point)
    steps, unit = [], 0
    for statement, counts in statements:
        steps.append([unit if counts else None, ast.unparse(statement)])
        unit += counts
    return setup, candidate, steps


def run_tests(
    program: str,
    test_code: str,
    entry_point: str,
    timeout: float = TEST_TIMEOUT_S,
    max_timeouts: int = 3,
    limits: Limits | None = None,
    given: str = "",
) -> TestReport:
    """Judge a task's tests on `program`, one test at a time (see the module's docstring).

    `given` is the task's own code the tests may use (HumanEval's helpers such as `poly` or
    `encode_cyclic`, `Task.preamble`): the judge runs its own copy, never the program's. Each
    counted test (see `split_check`) gets `timeout` seconds; after `max_timeouts` timeouts the
    rest count as failed (as in MAGRPO). Both processes run with `limits`, by default enough wall
    time for every timeout. Raises ValueError when the tests do not parse; never for anything the
    program does.
    """
    setup, candidate, steps = plan_tests(test_code, entry_point)
    units = [source for unit, source in steps if unit is not None]
    if limits is None:
        budget = timeout * (max_timeouts + 1) + STARTUP_S
        limits = Limits(wall_seconds=budget, cpu_seconds=int(budget) + 1)
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    served: dict[str, SandboxResult | SandboxError] = {}
    stop = threading.Event()

    def serve() -> None:
        job = {
            "program": program,
            "requests_fd": requests_read,
            "answers_fd": answers_write,
            "per_call": timeout,
            "load_seconds": timeout,
        }
        try:
            served["run"] = run_untrusted(
                _harness("candidate.py"),
                limits,
                files={"job.json": json.dumps(job)},
                pass_fds=(requests_read, answers_write),
                stop=stop,
            )
        except SandboxError as e:
            served["run"] = e
        except BaseException as e:  # not the program's doing: every test fails, saying so
            served["run"] = SandboxError(f"the program's sandbox failed: {type(e).__name__}: {e}")

    judge_job = {
        "given": given,
        "setup": setup,
        "steps": steps,
        "entry_point": entry_point,
        "candidate": candidate,
        "per_test": timeout,
        "load_seconds": timeout + STARTUP_S,
        "max_timeouts": max_timeouts,
        "requests_fd": requests_write,
        "answers_fd": answers_read,
    }
    thread = threading.Thread(target=serve, name="candidate", daemon=True)
    thread.start()
    try:
        judged = run_untrusted(
            _harness("judge.py"),
            limits,
            stdin=json.dumps(judge_job),
            pass_fds=(requests_write, answers_read),
        )
    except SandboxError as e:  # e.g. refused as an ordinary user: every test fails, saying why
        judged = e
    finally:
        stop.set()
        thread.join()
    return _report(judged, served.get("run"), units)


def _harness(name: str) -> str:
    """A harness program: the codec, then the file's own text (one module, passed as text)."""
    codec = (HARNESS / "codec.py").read_text(encoding="utf-8")
    return codec + "\n\n" + (HARNESS / name).read_text(encoding="utf-8")


def _report(
    judged: SandboxResult | SandboxError,
    program_run: SandboxResult | SandboxError,
    units: list[str],
) -> TestReport:
    """The judge's lines, validated, as a report; the reason the program's run was stopped, when a
    limit stopped it, as its error. A sandbox that failed fails every test, saying why."""
    for failure in (judged, program_run):
        if isinstance(failure, SandboxError):
            results = [AssertResult(source, False, str(failure)) for source in units]
            return TestReport(0, len(units), results, 0, str(failure))
    outcomes: dict[int, AssertResult] = {}
    rejected = 0
    error = ""
    for line in judged.stdout.splitlines():
        try:
            if len(line) > MAX_LINE_CHARS:
                raise ValueError("line too long")
            record = json.loads(line)
        except (ValueError, RecursionError):
            rejected += 1
            continue
        fields = set(record) if isinstance(record, dict) else set()
        if fields in ({"load_error"}, {"stopped"}) and isinstance(next(iter(record.values())), str):
            error = error or next(iter(record.values()))[:500]
        elif (
            fields == {"unit", "passed", "message"}
            and type(record["unit"]) is int
            and 0 <= record["unit"] < len(units)
            and record["unit"] not in outcomes
            and type(record["passed"]) is bool
            and type(record["message"]) is str
        ):
            unit = record["unit"]
            outcomes[unit] = AssertResult(units[unit], record["passed"], record["message"][:500])
        else:
            rejected += 1
    if program_run.limit is not None:
        error = error or f"the program {program_run.reason}"
    if not error and judged.limit is not None:
        error = f"the tests {judged.reason}"
    elif not error and judged.exit_code != 0:
        error = f"the tests could not be judged: {judged.reason}"
    elif not error and len(outcomes) < len(units):
        error = "the program ended before every test ran"
    results = [
        outcomes.get(i) or AssertResult(source, False, error or "no result")
        for i, source in enumerate(units)
    ]
    passed = sum(r.passed for r in results)
    timeouts = sum(r.message.startswith("timed out") for r in results)
    return TestReport(passed, len(results), results, timeouts, error, program_run, rejected)
