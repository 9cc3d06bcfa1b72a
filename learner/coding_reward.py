"""The coding reward, a plain function returning its components by name: MAGRPO's levels for
a team's code (helper author defines its function, entry author defines the entry, the module
parses, fraction of test asserts passed), cooperation only when the entry function calls
(`ast.Call`) the function its helper author wrote, and the share of agents that wrote another
agent's part (a role violation); with the AST checks it is made of."""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Sequence

from agents.testrun import TestReport, run_tests
from learner.reward_config import RewardWeights

THIN_WRAPPER = 0.5  # cooperation left when the entry function is only `return aux(...)`
BUILTINS = frozenset(dir(builtins))


def coding_reward(
    codes: Sequence[str],
    owners: Sequence[Sequence[str]],
    entry_point: str,
    program: str,
    report: TestReport | None = None,
    tests: str | None = None,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
) -> dict[str, float]:
    """Score a team's code: `codes[i]` is agent i's code (out of its fences), `owners[i]` the
    functions its role writes, `program` the module the combiner built from them.

    `report` is the environment's test run on `program`; without one, `tests` (if given) are run
    here. Components: the points `helper_defined`, `entry_defined`, `parses` (the module parses
    and defines the entry function), `tests`; `structure`
    (definition and parse points over those possible, in [0, 1]); `quality` (all points over
    those possible); `cooperation` (share of the helper authors' functions that the entry author's
    function calls and does not define itself; half for a thin wrapper); `coordination`
    (cooperation · (floor + (1 − floor) · tests passed)); `helper_called` (1 when every helper
    author's function is called); `role_violations` (share of agents that defined another role's
    function, nested ones included); `asserts_passed` / `asserts_total`.
    """
    w = weights
    entry_owner = _owner(owners, entry_point)
    entry_code = codes[entry_owner] if entry_owner is not None else "\n\n".join(codes)
    helpers = [
        (i, name)
        for i, names in enumerate(owners)
        for name in names
        if i != entry_owner and name != entry_point and not name.startswith("test_")
    ]
    r: dict[str, float] = {}
    r["helper_defined"] = (
        w.helper_defined * sum(defines_with_return(codes[i], h) for i, h in helpers) / len(helpers)
        if helpers
        else 0.0
    )
    r["entry_defined"] = w.entry_defined * defines_with_return(entry_code, entry_point)
    # the joined module parses and still holds the entry function (the combiner cuts a broken
    # part back to the prefix that parses)
    r["parses"] = w.parses * bool(r["entry_defined"] and defines_with_return(program, entry_point))
    if r["parses"] and report is None and tests:
        report = run_tests(program, tests, entry_point)
    passed = report.fraction if r["parses"] and report is not None else 0.0
    r["tests"] = w.tests * passed
    r["asserts_passed"] = float(report.passed) if report else 0.0
    r["asserts_total"] = float(report.total) if report else 0.0
    definition_points = (w.helper_defined if helpers else 0.0) + w.entry_defined + w.parses
    earned = r["helper_defined"] + r["entry_defined"] + r["parses"]
    r["structure"] = earned / definition_points
    r["quality"] = (earned + r["tests"]) / (definition_points + w.tests)

    own_defs = defined_names(entry_code)
    uses = [
        0.0
        if h in own_defs or not defines_with_return(codes[i], h)
        else helper_call(entry_code, entry_point, h)
        for i, h in helpers
    ]
    r["cooperation"] = sum(uses) / len(uses) if uses else 0.0
    r["helper_called"] = float(bool(uses) and all(u > 0 for u in uses))
    r["coordination"] = r["cooperation"] * (
        w.cooperation_floor + (1 - w.cooperation_floor) * passed
    )
    violators = role_violations(codes, owners)
    r["role_violations"] = len(violators) / len(codes) if codes else 0.0
    return r


def _owner(owners: Sequence[Sequence[str]], name: str) -> int | None:
    found = [i for i, names in enumerate(owners) if name in names]
    return found[0] if found else None


def role_violations(codes: Sequence[str], owners: Sequence[Sequence[str]]) -> dict[int, list[str]]:
    """Agent -> the functions it implemented (at any depth) that another agent's role owns. A
    copy of the contract's stub (only a docstring, `...` or `pass`) implements nothing."""
    owned_by = {name: i for i, names in enumerate(owners) for name in names}
    found = {}
    for i, code in enumerate(codes):
        theirs = sorted(n for n in defined_names(code, stubs=False) if owned_by.get(n, i) != i)
        if theirs:
            found[i] = theirs
    return found


def defined_names(code: str, stubs: bool = True) -> set[str]:
    """Every function and class `code` defines, nested ones included (a broken reply: the
    names after `def` found by text); with `stubs=False`, not those whose body is only a
    docstring, `...` or `pass`."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(re.findall(r"^\s*def\s+(\w+)\s*\(", code, re.M))
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and (stubs or not _is_stub(n))
    }


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        for s in node.body
    )


def parses(code: str) -> bool:
    """Whether `code` is valid Python (the structure points' first condition)."""
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def defines_with_return(code: str, name: str) -> bool:
    """Whether `code` defines a top-level function `name` that returns a value."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        # as in MAGRPO's text check: a broken answer still earns its definition points
        match = re.search(rf"^def\s+{re.escape(name)}\s*\(.*?(?=^\S|\Z)", code, re.M | re.S)
        return bool(match) and re.search(r"\breturn\b\s*\S", match.group(0)) is not None
    function = _function(tree, name)
    return function is not None and any(
        isinstance(node, ast.Return) and node.value is not None for node in ast.walk(function)
    )


def helper_call(entry_code: str, entry_point: str, helper: str) -> float:
    """How the entry function uses the helper function `helper`: 1 when it calls it (an
    `ast.Call` of that name, or passes it on, e.g. `map(helper, xs)`) and uses the result; 0.5
    when it only passes the result on (`return helper(...)`, `result = helper(...)` then
    `return result`, with or without a constant fallback: `_adds_nothing`); 0
    when it never calls it, only calls it as a bare statement or into names it does not read
    (dropping the result), or binds the name itself (a parameter, a local variable, a nested
    function), so that the name is not the helper's."""
    try:
        function = _function(ast.parse(entry_code), entry_point)
    except SyntaxError:
        function = None
    if function is None or helper in _bound_names(function):
        return 0.0
    calls = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == helper
    ]
    passed_on = any(
        isinstance(arg, ast.Name) and arg.id == helper
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        for arg in n.args
    )
    # a call whose value is thrown away: a bare statement, or stored in names not read before
    # they are stored again (the entry author's begun reply holds `result = aux(...)`; solving
    # alone after it, even into a new `result`, is no use of the helper)
    dropped = {
        id(n.value)
        for n in ast.walk(function)
        if (isinstance(n, ast.Expr) and n.value in calls)
        or (
            isinstance(n, ast.Assign | ast.AnnAssign)
            and n.value in calls
            and not _read(function, n)
        )
    }
    if not passed_on and all(id(c) in dropped for c in calls):
        return 0.0
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return THIN_WRAPPER if _adds_nothing(body, helper, calls, set()) else 1.0


def _adds_nothing(body: list[ast.stmt], helper: str, calls: list, results: set[str]) -> bool:
    """Whether a function body only passes the helper's result on: it stores helper calls in
    names, and returns that result or a constant, choosing between them by tests of the result
    alone — `return aux(x)`; `result = aux(x)`, `return result`; and the hedges a trained entry
    author learnt to add for the cooperation a wrapper does not earn (`return result if result
    else []`, `return result or 0`, `if not result: return None`). A test or a value that reads
    anything else (an argument, another function, an operation on the result) is work of its
    own."""
    for statement in body:
        if isinstance(statement, ast.Assign) and statement.value in calls:
            results |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, ast.Return):
            if statement.value is not None and not _passes_on(statement.value, calls, results):
                return False
        elif isinstance(statement, ast.If):
            if not _tests_result(statement.test, results):
                return False
            if not _adds_nothing(statement.body, helper, calls, results):
                return False
            if not _adds_nothing(statement.orelse, helper, calls, results):
                return False
        elif not isinstance(statement, ast.Pass):
            return False
    return True


def _passes_on(value: ast.expr, calls: list, results: set[str]) -> bool:
    """The helper's result, a copy of it (`list(result)`, `result[:]`), a constant, or a choice
    between them by a test of the result (or a choice between two equal values)."""
    if value in calls or (isinstance(value, ast.Name) and value.id in results):
        return True
    if isinstance(value, ast.IfExp):
        if ast.dump(value.body) == ast.dump(value.orelse):
            return _passes_on(value.body, calls, results)
        return (
            _tests_result(value.test, results)
            and _passes_on(value.body, calls, results)
            and _passes_on(value.orelse, calls, results)
        )
    if _is_copy(value):
        copied = value.value if isinstance(value, ast.Subscript) else value.args[0]
        return _passes_on(copied, calls, results)
    if isinstance(value, ast.BoolOp):
        return all(_passes_on(v, calls, results) for v in value.values)
    return _is_constant(value)


def _tests_result(test: ast.expr, results: set[str]) -> bool:
    """A condition on the helper's result alone: `result`, `not result`, `result is None`,
    `len(result) == 0`, built from the result, constants and builtins (`True` included)."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    return all(n in results or n in BUILTINS for n in names)


COPIES = frozenset({"list", "tuple", "copy", "deepcopy"})


def _is_copy(value: ast.expr) -> bool:
    """`list(v)`, `tuple(v)`, `copy(v)`, `copy.deepcopy(v)` or `v[:]`: the same value again."""
    if isinstance(value, ast.Subscript):
        s = value.slice
        return isinstance(s, ast.Slice) and s.lower is s.upper is s.step is None
    if not isinstance(value, ast.Call) or len(value.args) != 1 or value.keywords:
        return False
    f = value.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name in COPIES


def _is_constant(value: ast.expr) -> bool:
    """A literal: `0`, `""`, `None`, `[]`, `(1, 2)`, `{}`, `-1`."""
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub | ast.UAdd):
        return _is_constant(value.operand)
    if isinstance(value, ast.List | ast.Tuple | ast.Set):
        return all(_is_constant(e) for e in value.elts)
    if isinstance(value, ast.Dict):
        return all(k is not None and _is_constant(k) for k in value.keys) and all(
            _is_constant(v) for v in value.values
        )
    return False


def _read(function: ast.FunctionDef | ast.AsyncFunctionDef, assign: ast.stmt) -> bool:
    """Whether a name `assign` stores is read after it, before that name is stored again (in
    source order: a good enough reading of the data flow for a small function)."""
    names = [
        n for n in ast.walk(assign) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    ]
    after = assign.end_lineno or assign.lineno
    for name in names:
        uses = [
            (n.lineno, isinstance(n.ctx, ast.Load))
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and n.id == name.id and n.lineno > after
        ]
        stored_again = min((line for line, load in uses if not load), default=None)
        if any(load and (stored_again is None or line <= stored_again) for line, load in uses):
            return True
    return False


def _bound_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a function binds locally: parameters, assignments, loop targets, nested defs,
    imports (a local `aux` hides the module's)."""
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if node is function:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node  # the last definition wins, as when the module runs
    return found
