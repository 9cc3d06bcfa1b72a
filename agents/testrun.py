"""The one test runner: splits a task's tests, runs them on a program in the sandbox, reports.

`run_tests(program, test_code, entry_point) -> TestReport` is what the team, the learner's reward,
the page and `coteam check` call. Each counted test has a `kind`:

- "compared": `assert CALL OP EXPECTED` (OP one of == != < <= > >= is, is not, in, not in) or a
  bare `assert CALL` / `assert not CALL`, where EXPECTED is a literal. The sandbox
  (`agents/harness/runner.py`, mode "calls") evaluates only CALL and prints its value as tagged
  plain data; this process rebuilds the value and applies OP with EXPECTED, which the program never sees. A
  patched harness, an `__eq__` trick, a forged or malformed line, an early exit or a huge value
  can only lose: a value missing, duplicated or not plain data is a failure.
- "inside": every other counted test (loops, helpers, expected values that are expressions)
  runs beside the program (`agents/harness/runner.py`, mode "inside"), in a separate sandbox
  run from the compared calls; a determined program could forge its result, so `weighted_fraction` counts it
  at `INSIDE_WEIGHT`.

Every line read back is validated; nothing the program prints can raise here.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass, field
from pathlib import Path

from agents.parsing import parse
from agents.sandbox import run_untrusted
from agents.sandbox_limits import Limits
from agents.sandbox_result import SandboxError, SandboxResult

HARNESS = Path(__file__).parent / "harness" / "runner.py"
INSIDE_WEIGHT = 0.5  # a test checked beside the program counts half of a compared one
MAX_LINE_CHARS = 70_000  # the harness caps a value at 65,536 characters
MAX_VALUE_NODES = 100_000
MAX_VALUE_DEPTH = 60
# Seconds a counted test may run. HumanEval's own harness gives a whole check 3 s; the MAGRPO
# authors give each test 10 s and stop after 3 timeouts, so one looping program held a training
# step (every group waits for its slowest test run) or a person's test result for 30 s and more.
# Every canonical HumanEval solution passes its tests at 3 s per test on a busy 2-core CPU (the
# slowest whole check: 1.2 s).
TEST_TIMEOUT_S = 3.0

COMPARED, INSIDE, PREPARE = "compared", "inside", "prepare"

_OPERATORS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}


@dataclass
class TestUnit:
    """One counted test: its source, its kind and, when compared, the call and the check."""

    __test__ = False  # not a pytest class

    source: str
    kind: str  # COMPARED or INSIDE
    call: str = ""  # compared: the expression the sandbox evaluates
    op: str = ""  # compared: "truthy", "falsy" or an ast comparison name ("Eq", "Lt", ...)
    expected: object = None  # compared: the literal, rebuilt here only
    flipped: bool = False  # compared: written `EXPECTED OP CALL`
    message: str = ""  # the assert's own message, if it has a literal one


@dataclass
class AssertResult:
    source: str
    passed: bool
    message: str = ""  # why it failed: the assert's message, or the exception
    kind: str = INSIDE  # COMPARED: checked here on its value; INSIDE: checked inside the sandbox


@dataclass
class TestReport:
    """How many of a task's tests a program passed; `fraction` is the MAGRPO test score."""

    __test__ = False  # not a pytest class

    passed: int
    total: int
    results: list[AssertResult]
    timeouts: int
    error: str  # the program failed to load, or the sandbox stopped it: the reason
    sandbox: SandboxResult | None = field(default=None, repr=False)
    rejected_lines: int = 0  # lines read back that were malformed, unknown or duplicated

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def weighted_fraction(self) -> float:
        """Passed tests over all, a test checked inside the sandbox weighing `INSIDE_WEIGHT`."""
        weight = {COMPARED: 1.0, INSIDE: INSIDE_WEIGHT}
        total = sum(weight[r.kind] for r in self.results)
        return sum(weight[r.kind] for r in self.results if r.passed) / total if total else 0.0

    def to_dict(self) -> dict:
        """Plain data for JSON (`coteam check --json`)."""
        return {
            "passed": self.passed,
            "total": self.total,
            "weighted_fraction": self.weighted_fraction,
            "error": self.error,
            "tests": [
                {"source": r.source, "kind": r.kind, "passed": r.passed, "message": r.message}
                for r in self.results
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


def _literal(node: ast.expr) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _classify(statement: ast.stmt, candidate: str) -> TestUnit:
    """A compared unit when the statement is `assert CALL OP LITERAL` (either side) or a bare
    `assert [not] CALL`; otherwise one checked inside the sandbox."""
    source = ast.unparse(statement)
    inside = TestUnit(source, INSIDE)
    if not isinstance(statement, ast.Assert):
        return inside
    ok, message = _literal(statement.msg) if statement.msg is not None else (True, "")
    message = str(message) if ok else ""
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, type(test.ops[0]), test.comparators[0]
        if op not in _OPERATORS:
            return inside
        if _uses(left, candidate):
            call, (is_literal, expected), flipped = left, _literal(right), False
        elif _uses(right, candidate):
            call, (is_literal, expected), flipped = right, _literal(left), True
        else:
            return inside
        if not is_literal:
            return inside
        if op in (ast.Is, ast.IsNot) and not any(expected is c for c in (None, True, False)):
            return inside  # identity of rebuilt numbers or strings means nothing
        call_source = ast.unparse(call)
        return TestUnit(
            source, COMPARED, call_source, op.__name__, expected, flipped=flipped, message=message
        )
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if _uses(test.operand, candidate):
            return TestUnit(source, COMPARED, ast.unparse(test.operand), "falsy", message=message)
        return inside
    if isinstance(test, ast.Call | ast.Name | ast.Subscript | ast.Attribute):
        return TestUnit(source, COMPARED, ast.unparse(test), "truthy", message=message)
    return inside


def plan_tests(test_code: str, entry_point: str | None = None) -> tuple[str, str, list[TestUnit]]:
    """The set-up, the candidate's name in the tests, and each counted test with its kind."""
    setup, candidate, steps = plan_steps(test_code, entry_point)
    return setup, candidate, [unit for unit in steps if unit.kind != PREPARE]


def plan_steps(test_code: str, entry_point: str | None = None) -> tuple[str, str, list[TestUnit]]:
    """As `plan_tests`, with the statements that only prepare (kind PREPARE) kept in order."""
    setup, candidate, statements = _parse_tests(test_code, entry_point)
    steps = [
        _classify(s, candidate) if counts else TestUnit(ast.unparse(s), PREPARE)
        for s, counts in statements
    ]
    return setup, candidate, steps


def run_tests(
    program: str,
    test_code: str,
    entry_point: str,
    timeout: float = TEST_TIMEOUT_S,
    max_timeouts: int = 3,
    limits: Limits | None = None,
) -> TestReport:
    """Run a task's tests against `program` in the sandbox, one test at a time.

    Each counted test (see `split_check`) gets `timeout` seconds; after `max_timeouts` timeouts
    the rest count as failed (as in MAGRPO). Compared tests and tests checked inside run in two
    separate sandbox runs with `limits`, by default enough wall time for every timeout. Raises
    ValueError when the tests do not parse; never for anything the program does.
    """
    setup, candidate, steps = plan_steps(test_code, entry_point)
    units = [unit for unit in steps if unit.kind != PREPARE]
    if limits is None:
        budget = timeout * (max_timeouts + 1) + 5
        limits = Limits(wall_seconds=budget, cpu_seconds=int(budget) + 1)
    job = {
        "program": program,
        "setup": setup,
        "entry_point": entry_point,
        "candidate": candidate,
        "per_test": timeout,
        "max_timeouts": max_timeouts,
    }
    try:
        return _run_units(job, steps, units, limits)
    except SandboxError as e:  # e.g. refused as an ordinary user: every test fails, saying why
        results = [AssertResult(u.source, False, str(e), u.kind) for u in units]
        return TestReport(0, len(units), results, 0, str(e))


def _run_units(
    job: dict, steps: list[TestUnit], units: list[TestUnit], limits: Limits
) -> TestReport:
    outcomes: dict[int, AssertResult] = {}
    errors: list[str] = []
    rejected = 0
    runs: list[SandboxResult] = []
    compared = [i for i, u in enumerate(units) if u.kind == COMPARED]
    inside = [i for i, u in enumerate(units) if u.kind == INSIDE]
    if compared:
        result = _run_harness(job | {"mode": "calls", "steps": _steps(steps, COMPARED)}, limits)
        runs.append(result)
        lines, bad, error = _read_lines(result, set(compared), [{"value"}, {"error"}])
        rejected += bad
        errors += [error] if error else []
        for i, record in lines.items():
            outcomes[i] = _judge(units[i], record)
    if inside:
        result = _run_harness(job | {"mode": "inside", "steps": _steps(steps, INSIDE)}, limits)
        runs.append(result)
        lines, bad, error = _read_lines(result, set(inside), [{"passed", "message"}])
        rejected += bad
        errors += [error] if error else []
        for i, record in lines.items():
            if type(record.get("passed")) is bool and type(record.get("message")) is str:
                outcomes[i] = AssertResult(
                    units[i].source, record["passed"], record["message"][:500], INSIDE
                )
            else:
                rejected += 1
    error = "; ".join(dict.fromkeys(errors))
    results = [
        outcomes.get(i) or AssertResult(u.source, False, error or "no result", u.kind)
        for i, u in enumerate(units)
    ]
    passed = sum(r.passed for r in results)
    timeouts = sum(r.message.startswith("timed out") for r in results)
    sandbox = runs[0] if runs else None
    return TestReport(passed, len(results), results, timeouts, error, sandbox, rejected)


def _steps(steps: list[TestUnit], kind: str) -> list[list]:
    """[unit number or None, source] for one harness: the units of `kind` (a compared unit's call
    only) and every preparing statement, in the tests' order."""
    numbered, unit = [], 0
    for step in steps:
        if step.kind == PREPARE:
            numbered.append([None, step.source])
            continue
        if step.kind == kind:
            numbered.append([unit, step.call if kind == COMPARED else step.source])
        unit += 1
    return numbered


def _run_harness(job: dict, limits: Limits) -> SandboxResult:
    harness = HARNESS.read_text(encoding="utf-8")
    return run_untrusted(harness, limits, files={"job.json": json.dumps(job)})


def _read_lines(
    result: SandboxResult, expected_units: set[int], shapes: list[set[str]]
) -> tuple[dict[int, dict], int, str]:
    """The harness's lines by unit, how many lines were rejected, and the run's error.

    A line counts only if it is a JSON object with an int `unit` this run asked for and one of
    the `shapes` of fields beside it; a unit reported twice is dropped (someone forged one of them)."""
    records: dict[int, dict] = {}
    seen: set[int] = set()
    rejected = 0
    error = ""
    for line in result.stdout.splitlines():
        try:
            if len(line) > MAX_LINE_CHARS:
                raise ValueError("line too long")
            record = json.loads(line)
        except (ValueError, RecursionError):
            rejected += 1
            continue
        if not isinstance(record, dict):
            rejected += 1
        elif set(record) in ({"load_error"}, {"stopped"}) and isinstance(
            next(iter(record.values())), str
        ):
            error = error or next(iter(record.values()))[:500]
        elif (
            type(record.get("unit")) is int
            and record["unit"] in expected_units
            and set(record) - {"unit"} in shapes
        ):
            unit = record["unit"]
            if unit in seen:
                records.pop(unit, None)
                rejected += 1
            else:
                seen.add(unit)
                records[unit] = record
        else:
            rejected += 1
    if not error and result.limit is not None:
        error = result.reason
    elif not error and result.exit_code != 0:
        last_line = result.stderr.strip().splitlines()[-1:] or [""]
        error = f"{result.reason}: {last_line[0][:300]}"
    elif not error and len(seen) < len(expected_units):
        error = "the program ended before every test ran"
    return records, rejected, error


def _judge(unit: TestUnit, record: dict) -> AssertResult:
    """Check a compared unit on the value the sandbox returned, here, with plain types only."""
    if "error" in record:
        message = record["error"] if isinstance(record["error"], str) else "malformed error"
        return AssertResult(unit.source, False, message[:500], COMPARED)
    try:
        value = decode_value(record["value"])
    except MalformedValue as e:
        return AssertResult(unit.source, False, f"the returned value was rejected: {e}", COMPARED)
    try:
        if unit.op == "truthy":
            passed = bool(value)
        elif unit.op == "falsy":
            passed = not value
        else:
            compare = _OPERATORS[getattr(ast, unit.op)]
            pair = (unit.expected, value) if unit.flipped else (value, unit.expected)
            passed = bool(compare(*pair))
    except Exception as e:  # plain values can still be incomparable (TypeError) or huge
        return AssertResult(unit.source, False, f"{type(e).__name__}: {e}"[:500], COMPARED)
    if passed:
        return AssertResult(unit.source, True, "", COMPARED)
    shown = repr(value)
    shown = shown if len(shown) <= 200 else shown[:200] + "…"
    why = f"AssertionError: {unit.message}" if unit.message else "assertion failed"
    return AssertResult(unit.source, False, f"{why} (got {shown})", COMPARED)


class MalformedValue(ValueError):
    """A value line that is not the harness's tagged plain data."""


def decode_value(encoded: object) -> object:
    """Rebuild a value from the harness's tagged form ([tag, payload], see
    `agents/harness/runner.py`) with exact plain types; raise MalformedValue for anything else."""
    budget = [MAX_VALUE_NODES]

    def walk(node: object, depth: int) -> object:
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_VALUE_DEPTH:
            raise MalformedValue("too large or too deep")
        if not (isinstance(node, list) and len(node) == 2 and isinstance(node[0], str)):
            raise MalformedValue("not a [tag, payload] pair")
        tag, payload = node
        try:
            if tag == "N" and payload is None:
                return None
            if tag == "b" and isinstance(payload, bool):
                return payload
            if tag == "i" and isinstance(payload, str):
                return int(payload)
            if tag == "f" and isinstance(payload, str):
                return float(payload)
            if tag == "c" and isinstance(payload, list) and len(payload) == 2:
                return complex(float(payload[0]), float(payload[1]))
            if tag == "s" and isinstance(payload, str):
                return payload
            if tag == "y" and isinstance(payload, str):
                return bytes.fromhex(payload)
            if tag in ("l", "t", "S", "F") and isinstance(payload, list):
                items = [walk(item, depth + 1) for item in payload]
                return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
            if tag == "d" and isinstance(payload, list):
                pairs = []
                for pair in payload:
                    if not (isinstance(pair, list) and len(pair) == 2):
                        raise MalformedValue("a dict entry is not a pair")
                    pairs.append((walk(pair[0], depth + 1), walk(pair[1], depth + 1)))
                return dict(pairs)
        except (TypeError, ValueError) as e:  # int('x'), unhashable set item, bad hex
            raise MalformedValue(f"bad {tag!r} payload: {str(e)[:100]}") from e
        raise MalformedValue(f"unknown tag {tag[:10]!r}")

    return walk(encoded, 0)
