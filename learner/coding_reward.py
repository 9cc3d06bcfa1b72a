"""The coding reward, a plain function returning its components by name: MAGRPO's levels for
a team's code (helper author defines its function, entry author defines the entry, the module
parses, fraction of test asserts passed), cooperation only when the entry function calls
(`ast.Call`) the function its helper author wrote, and the share of agents that wrote another
agent's part (a role violation); with the AST checks it is made of."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from agents.judge.parsing import parse
from agents.judge.testrun import TestReport, run_tests
from agents.tasks import Task
from agents.team.combine import combine_code
from learner.reward_config import RewardWeights


def coding_reward(
    codes: Sequence[str],
    owners: Sequence[Sequence[str]],
    entry_point: str,
    program: str,
    report: TestReport | None = None,
    tests: str | None = None,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    given: str = "",
) -> dict[str, float]:
    """Score a team's code: `codes[i]` is agent i's code (out of its fences), `owners[i]` the
    functions its role writes, `program` the module the combiner built from them.

    `report` is the environment's test run on `program`; without one, `tests` (if given) are run
    here, with the task's `given` code (`Task.preamble`). Components: the points `helper_defined`, `entry_defined`, `parses` (the module parses
    and defines the entry function), `tests`; `structure`
    (definition and parse points over those possible, in [0, 1]); `quality` (all points over
    those possible); `cooperation` (share of the helper authors' functions that the entry author's
    function calls and does not define itself, using the result); `coordination`
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
        report = run_tests(program, tests, entry_point, given=given)
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
        tree = parse(code)
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
        parse(code)
    except SyntaxError:
        return False
    return True


def defines_with_return(code: str, name: str) -> bool:
    """Whether `code` defines a top-level function `name` that returns a value."""
    try:
        tree = parse(code)
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
    `ast.Call` of that name, or passes it on, e.g. `map(helper, xs)`) and uses the result,
    `return helper(...)` included; 0 when it never calls it, only calls it as a bare statement
    or into names it does not read (dropping the result), or binds the name itself (a
    parameter, a local variable, a nested function), so that the name is not the helper's.

    There is no discount for an entry function that only returns the helper's result: two
    training runs learnt to escape each syntactic test of "work of its own" with code that
    changes nothing the tests check (`return result if result else []` in 32 of 32 held-out
    answers; then `return result if result != f else f`, a recursive fallback, an argument
    fallback). A helper that does all the work is paid for by the speed term instead: the
    critical path is then as long as a single agent's (docs/runs/training-log.md, runs 2 and 3)."""
    try:
        function = _function(parse(entry_code), entry_point)
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
    # they are stored again (the scaffolded entry author's begun reply holds `result = aux(...)`;
    # solving alone after it, even into a new `result`, is no use of the helper)
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
    return 1.0


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


def helper_alone_passes(task: Task, helper_reply: str) -> bool:
    """Whether the helper author's `aux` alone passes the task's tests: its reply joined, as the
    team's replies are, with an entry function that only returns `aux(...)`, written here (by the
    evaluation, not by an agent; the contract gives `aux` the entry function's signature). Beside
    the team's own pass, it shows what the entry author's code did: a pass `aux` alone lacks is
    its work, a fail where `aux` alone passes its harm."""
    arguments = "*args, **kwargs"
    wrapper = f"def {task.entry_point}({arguments}):\n    return aux({arguments})\n"
    owners = [("aux",), (task.entry_point,)]
    module = combine_code([helper_reply, wrapper], owners, task.preamble, task.prompt)
    if module.error:
        return False
    report = run_tests(module.code, task.tests, task.entry_point, given=task.preamble)
    return report.all_passed
