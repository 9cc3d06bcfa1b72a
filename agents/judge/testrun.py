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
import builtins
import json
import keyword
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agents.judge.limits import Limits
from agents.judge.parsing import parse
from agents.judge.result import SandboxError, SandboxResult
from agents.judge.sandbox import run_untrusted, shared_folder

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
    test_class: str | None = None  # a unittest test's class


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
            "test_classes": self.test_classes(),
        }

    def test_classes(self) -> dict[str, dict]:
        """Each unittest test class's figures: its tests passed and in all, and whether all passed
        (as ClassEval counts a method); empty for tests of other forms."""
        classes: dict[str, dict] = {}
        for r in self.results:
            if r.test_class is not None:
                figures = classes.setdefault(r.test_class, {"passed": 0, "total": 0})
                figures["passed"] += r.passed
                figures["total"] += 1
        for figures in classes.values():
            figures["all_passed"] = figures["passed"] == figures["total"]
        return classes


def split_check(
    test_code: str, entry_point: str | None = None
) -> tuple[str, list[tuple[str, bool]]]:
    """The tests' set-up and their statements in order, each with whether it counts as a test
    (see `plan_tests` for the rule); the test functions and test methods they hold are not
    listed here."""
    plan = plan_tests(test_code, entry_point)
    return plan.setup, [
        (payload, unit is not None) for unit, kind, payload in plan.steps if kind == "run"
    ]


@dataclass
class TestPlan:
    """What the judge runs: the set-up, the name the tests give the entry point, and the steps in
    order as [unit number or None, kind, payload], where kind is "run" (a statement), "call" (a
    pytest-style test function's name) or "unittest" ("Class.method"); `units` shows each counted
    test; `bind` names the functions the tests call that they do not define (the program's)."""

    __test__ = False  # not a pytest class

    setup: str
    candidate: str
    steps: list[list]
    units: list[str]
    bind: list[str]
    groups: list[str | None] = field(default_factory=list)  # each unit's unittest class


def plan_tests(test_code: str, entry_point: str | None = None) -> TestPlan:
    """Split test code into set-up and counted tests, in the forms people write them.

    - HumanEval's `def check(candidate)`: the module's other statements are the set-up (a
      top-level call of `check` is left out: the judge runs its body); each statement of its
      body is a step.
    - Plain asserts at the top level (the entry point named): each top-level statement is a step.
    - pytest-style functions: each top-level `def test_*()` without required parameters is one
      test, called after the module's statements.
    - unittest: each `test*` method of each top-level `unittest.TestCase` class is one test, run
      by the judge's own unittest (setUp and tearDown included).

    A step counts as a test when it holds an assert that is not a constant (`assert True` never
    fails) or is a call on its own (`expect(candidate(1), 2)`), and it reaches the program: it
    names the candidate, the entry point, a function the tests call but do not define, or a name
    a statement that names one of these binds or uses (`result = candidate(5)`, an argument the
    program may change, a helper that calls it). Every
    other step prepares (an import, an assignment, a definition, `assert len(xs) == 3`); one that
    raises fails the whole run. Raises ValueError
    when the tests do not parse or hold no test.
    """
    try:
        tree = parse(test_code)
    except SyntaxError as e:
        raise ValueError(f"the test code does not parse: {e}") from e
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is not None and check.args.args:
        candidate = check.args.args[0].arg
        setup = ast.unparse([n for n in tree.body if n is not check and not _calls_check(n)])
        body, module = check.body, []
    elif entry_point:
        candidate, setup, body, module = entry_point, "", tree.body, tree.body
    else:
        raise ValueError("the tests have no `def check(candidate)` and no entry point was named")
    bind = sorted(free_names(tree) - {candidate})
    program = _reaching(body, {candidate, entry_point or candidate, *bind})
    steps: list[list] = []
    units: list[str] = []
    groups: list[str | None] = []

    def add(counts: bool, kind: str, payload: str, shown: str) -> None:
        steps.append([len(units) if counts else None, kind, payload])
        if counts:
            units.append(shown)
            groups.append(payload.split(".")[0] if kind == "unittest" else None)

    for statement in body:
        if isinstance(statement, ast.ClassDef | ast.FunctionDef) and statement in module:
            add(False, "run", ast.unparse(statement), "")  # defined here, run below
            continue
        source = ast.unparse(statement)
        add(_counts(statement) and _names(statement) & program, "run", source, source)
    for node in module:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and _no_params(node):
            add(True, "call", node.name, f"{node.name}()")
        elif isinstance(node, ast.ClassDef) and _is_test_case(node):
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name.startswith("test"):
                    add(
                        True, "unittest", f"{node.name}.{method.name}", f"{node.name}.{method.name}"
                    )
    if not units:
        raise ValueError(
            "the tests hold no test: asserts, a `def check(candidate)`, `def test_*()` functions "
            "or unittest.TestCase classes"
        )
    return TestPlan(setup, candidate, steps, units, bind, groups)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _reaching(statements: list[ast.stmt], program: set[str]) -> set[str]:
    """`program` and every name a statement that names one of them binds or uses, to a fixed
    point: a variable assigned from the candidate's answer, an argument the program may change,
    a helper whose body calls it, and so on."""
    reached = set(program)
    while True:
        grown = set(reached)
        for statement in statements:
            if _names(statement) & grown:
                grown |= defined_names(statement) | _names(statement)
        if grown == reached:
            return reached
        reached = grown


def _calls_check(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
    )


def _counts(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Call)
    return any(
        isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant)
        for n in ast.walk(statement)
    )


def _no_params(function: ast.FunctionDef) -> bool:
    args = function.args
    return not (
        args.posonlyargs
        or args.args[: len(args.args) - len(args.defaults)]
        or any(d is None for d in args.kw_defaults)
    )


def _is_test_case(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base) in ("TestCase", "unittest.TestCase") for base in node.bases)


def defined_names(tree: ast.AST) -> set[str]:
    """Every name the code binds anywhere: assignments, definitions, imports, parameters."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
    return names


def free_names(tree: ast.AST) -> set[str]:
    """The names the code reads but never binds, builtins left out: functions of the program."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - defined_names(tree) - set(dir(builtins))


def check_entry_point(entry_point: str, test_code: str, given: str = "") -> None:
    """ValueError unless `entry_point` can name the program's function under test: an identifier
    that is neither a builtin nor a name the tests or the task's given code define (the judge
    binds it to the program, and must never re-bind the tests' own helpers or builtins)."""
    if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
        raise ValueError(f"the entry point {entry_point!r} is not a Python name")
    if entry_point in dir(builtins):
        raise ValueError(f"the entry point {entry_point!r} is a builtin's name")
    for what, code in (("tests", test_code), ("given code", given)):
        try:
            tree = parse(code)
        except SyntaxError as e:
            raise ValueError(f"the {what} do not parse: {e}") from e
        if check_def := next(
            (
                n
                for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == "check" and n.args.args
            ),
            None,
        ):
            tree = ast.Module([n for n in tree.body if n is not check_def], [])
        if entry_point in defined_names(tree):
            raise ValueError(f"the entry point {entry_point!r} is a name the {what} define")


def run_tests(
    program: str,
    test_code: str,
    entry_point: str,
    timeout: float = TEST_TIMEOUT_S,
    max_timeouts: int = 3,
    limits: Limits | None = None,
    given: str = "",
    shared: bool | None = None,
) -> TestReport:
    """Judge a task's tests on `program`, one test at a time (see the module's docstring).

    `given` is the task's own code the tests may use (HumanEval's helpers such as `poly` or
    `encode_cyclic`, `Task.preamble`): the judge runs its own copy, never the program's. Each
    counted test (see `split_check`) gets `timeout` seconds; after `max_timeouts` timeouts the
    rest count as failed (as in MAGRPO). Both processes run with `limits`, by default enough wall
    time for every timeout. Raises ValueError when the tests do not parse; never for anything the
    program does. With `shared` (by default: when the tests hold unittest classes or pytest
    functions), both processes work in one scratch folder (tests that write a file for the
    program to read, or read what it wrote), which holds nothing of the tests but what they
    write there. Raises ValueError as well for an entry point that is a builtin's name or one
    the tests or `given` define (see `check_entry_point`).
    """
    check_entry_point(entry_point, test_code, given)
    plan = plan_tests(test_code, entry_point)
    if limits is None:
        budget = timeout * (max_timeouts + 1) + STARTUP_S
        limits = Limits(wall_seconds=budget, cpu_seconds=int(budget) + 1)
    if shared is None:
        shared = any(kind in ("call", "unittest") for _, kind, _ in plan.steps)
    if not shared:
        return _judge(program, plan, entry_point, given, timeout, max_timeouts, limits, None)
    with shared_folder(limits) as folder:
        return _judge(program, plan, entry_point, given, timeout, max_timeouts, limits, folder)


def _judge(
    program: str,
    plan: TestPlan,
    entry_point: str,
    given: str,
    timeout: float,
    max_timeouts: int,
    limits: Limits,
    shared: str | None,
) -> TestReport:
    """The two sandboxed processes of `run_tests`, and their report."""
    units = plan.units
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
                shared=shared,
            )
        except SandboxError as e:
            served["run"] = e
        except BaseException as e:  # not the program's doing: every test fails, saying so
            served["run"] = SandboxError(f"the program's sandbox failed: {type(e).__name__}: {e}")

    judge_job = {
        "given": given,
        "setup": plan.setup,
        "steps": plan.steps,
        "bind": sorted(set(plan.bind) - defined_names(parse(given))),
        "entry_point": entry_point,
        "candidate": plan.candidate,
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
            shared=shared,
        )
    except SandboxError as e:  # e.g. refused as an ordinary user: every test fails, saying why
        judged = e
    finally:
        stop.set()
        thread.join()
    report = _report(judged, served.get("run"), units)
    for result, group in zip(report.results, plan.groups, strict=True):
        result.test_class = group
    return report


# the files each harness program is joined from, in order: one module, passed as text
HARNESS_FILES = {
    "candidate.py": ("codec.py", "candidate.py"),
    "judge.py": ("codec.py", "program.py", "guard.py", "judge.py"),
}


def _harness(name: str) -> str:
    """A harness program: the codec, then the files of its own (one module, passed as text)."""
    parts = [(HARNESS / part).read_text(encoding="utf-8") for part in HARNESS_FILES[name]]
    return "\n\n".join(parts)


def _report(
    judged: SandboxResult | SandboxError,
    program_run: SandboxResult | SandboxError,
    units: list[str],
) -> TestReport:
    """The judge's lines, validated, as a report; the reason the program's run was stopped, when a
    limit stopped it, as its error. A sandbox that failed fails every test, saying why; so does a
    line the judge would not write (malformed, unknown, a second verdict for a test) and a
    statement outside the counted tests that failed (`broken`)."""
    for failure in (judged, program_run):
        if isinstance(failure, SandboxError):
            results = [AssertResult(source, False, str(failure)) for source in units]
            return TestReport(0, len(units), results, 0, str(failure))
    outcomes: dict[int, AssertResult] = {}
    rejected = 0
    error = broken = ""
    for line in judged.stdout.splitlines():
        try:
            if len(line) > MAX_LINE_CHARS:
                raise ValueError("line too long")
            record = json.loads(line)
        except (ValueError, RecursionError):
            rejected += 1
            continue
        fields = set(record) if isinstance(record, dict) else set()
        text = next(iter(record.values())) if len(fields) == 1 else None
        if fields in ({"load_error"}, {"stopped"}) and isinstance(text, str):
            error = error or text[:500]
        elif fields == {"broken"} and isinstance(text, str):
            broken = broken or text[:500]
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
    if rejected:
        broken = (
            f"the judge's results were not its own: {rejected} line(s) malformed, unknown or a "
            "second verdict for a test; every test fails"
        )
    if broken:
        results = [AssertResult(source, False, broken) for source in units]
        return TestReport(0, len(units), results, 0, broken, program_run, rejected)
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
