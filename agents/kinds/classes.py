"""Class-level co-coding: a class whose methods share an interface and call each other (ClassEval).

This kind of work is kept whole here: its problems (the 64 vendored ClassEval classes, mended, and
a person's own skeleton with unittest tests), its splits, how it deals the methods to agents,
each method's opening, how the agents' methods merge into the skeleton, and the judge's verdict
per test class.

- A problem is a skeleton (imports, the class docstring, a working constructor, every other
  method's signature and docstring) and unittest test classes, one per method (plus, for most, a
  `...TestMain` using several together). `ClassProblem.methods` are the methods the team writes:
  every method but `__init__`, in the skeleton's order.
- Dealing (`deal`): the methods round the agents in the skeleton's order, then swapped between
  agents while a swap puts more of the docstring-implied calls between different agents (a
  teammate's method called as documented is the cooperation); every agent gets at least one, the
  counts differ by at most one, and a team is never larger than the class's methods.
- Opening (`opening`): each method's reply is begun with that method exactly as the skeleton
  gives it (its decorators, `def` line and docstring), and nothing more.
- Merging (`merge`): each agent's reply is parsed; the methods it was dealt replace the
  skeleton's by name; any other method it wrote is dropped and reported, never chosen.
- Judging (`judge_class`): the tests run in the judge's process with its own `unittest`; the
  class is the program's (agents/judge/harness/judge.py: handles). A test class passes when all
  its tests pass, as ClassEval counts; the class passes when every test class does.

Data: assets/tasks/classeval/ (CC BY-NC 4.0, its own licence and README there).
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from agents.judge.parsing import parse
from agents.judge.testrun import TestReport, run_tests

DATA = Path(__file__).resolve().parents[2] / "assets" / "tasks" / "classeval" / "classeval-64.jsonl"
FOLD_VALIDATION_EVERY = 3  # under a fold, every third class not held out is the gate's
HELD_OUT_EVERY = 4  # the fixed split: classes 0, 4, 8, ... held out, 1, 5, 9, ... validation


class ClassProblemError(ValueError):
    """A class problem could not be made from what was given; the message says what to change."""


@dataclass(frozen=True)
class ClassProblem:
    """One class to write: `skeleton` is what every agent sees, `tests` its unittest classes,
    `imports` the module's imports (the tests may use them too), `methods` the methods the team
    writes, in the skeleton's order, `test_classes` which test class tests which method."""

    task_id: str
    class_name: str
    skeleton: str
    tests: str
    imports: str = ""
    methods: tuple[str, ...] = ()
    test_classes: dict = field(default_factory=dict)  # test class -> method (or None: several)
    calls: dict = field(default_factory=dict)  # method -> the other methods it calls (upstream)
    solution: str | None = None  # the canonical class, when known

    @property
    def source_id(self) -> str:
        """The problem's id in its set (as a training run's task order keeps it)."""
        return self.task_id

    def program(self, body: str) -> str:
        """A whole module: the imports, then `body` (a class)."""
        return (self.imports + "\n\n" if self.imports else "") + body


def mend(task_id: str, skeleton: str) -> str:
    """The skeletons that do not give their class as given, mended (assets/tasks/classeval/README.md):
    three that do not parse, and one wrapped whole in a string."""
    skeleton = skeleton.replace("“”“", '"""').replace("”“”", '"""')
    stripped = skeleton.strip()
    if stripped.startswith("'''") and stripped.endswith("'''") and stripped.count("'''") == 2:
        skeleton = stripped[3:-3].strip("\n") + "\n"
    if task_id == "ClassEval_22":
        marker = "    def get_students_by_major(self, major):"
        skeleton = skeleton.replace(marker, '        """\n\n' + marker, 1)
    return skeleton


@functools.cache
def class_problems() -> tuple[ClassProblem, ...]:
    """The 64 vendored ClassEval classes, in the file's order, mended."""
    problems = []
    with DATA.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            methods = [m for m in row["methods_info"]]
            problems.append(
                ClassProblem(
                    task_id=row["task_id"],
                    class_name=row["class_name"],
                    skeleton=mend(row["task_id"], row["skeleton"]),
                    tests=row["test"],
                    imports="\n".join(row["import_statement"]),
                    methods=tuple(m["method_name"] for m in methods),
                    test_classes={
                        name: next(
                            (m["method_name"] for m in methods if m["test_class"] == name), None
                        )
                        for name in row["test_classes"]
                    },
                    calls={
                        m["method_name"]: tuple(m["dependencies"]["method_dependencies"])
                        for m in methods
                    },
                    solution=row["solution_code"],
                )
            )
    return tuple(problems)


def class_problem(ident: str | int) -> ClassProblem:
    """A vendored class by its ClassEval id ("ClassEval_3" or "3") or class name."""
    text = str(ident).removeprefix("ClassEval_")
    for problem in class_problems():
        if problem.task_id == f"ClassEval_{text}" or problem.class_name == str(ident):
            return problem
    ids = ", ".join(p.task_id.removeprefix("ClassEval_") for p in class_problems())
    raise ClassProblemError(f"no class problem {ident!r}: the vendored ClassEval ids are {ids}")


def class_splits(fold: str | None = None) -> dict[str, list[ClassProblem]]:
    """The classes of each split, by class (never by method): the fixed split (held out every
    HELD_OUT_EVERY-th class, validation the next, train the rest), or fold "F/K" (held out: index
    mod K = F - 1; of the rest, every FOLD_VALIDATION_EVERY-th the gate's)."""
    from agents.tasks import parse_fold

    problems = class_problems()
    parsed = parse_fold(fold)
    if parsed is None:
        split = {"held_out": [], "validation": [], "train": []}
        for i, problem in enumerate(problems):
            part = {0: "held_out", 1: "validation"}.get(i % HELD_OUT_EVERY, "train")
            split[part].append(problem)
        return split
    number, count = parsed
    held_out = [p for i, p in enumerate(problems) if i % count == number - 1]
    rest = [p for i, p in enumerate(problems) if i % count != number - 1]
    validation = rest[FOLD_VALIDATION_EVERY - 1 :: FOLD_VALIDATION_EVERY]
    train = [p for p in rest if p not in validation]
    return {"held_out": held_out, "validation": validation, "train": train}


def user_class_problem(skeleton: str, tests: str) -> ClassProblem:
    """A person's own class: a skeleton (one top-level class, its methods' signatures and
    docstrings) and unittest tests."""
    try:
        tree = parse(skeleton)
    except SyntaxError as e:
        raise ClassProblemError(
            f"the skeleton is not valid Python (line {e.lineno}: {e.msg})"
        ) from e
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if len(classes) != 1:
        raise ClassProblemError("the skeleton needs exactly one top-level class")
    try:
        parse(tests)
    except SyntaxError as e:
        raise ClassProblemError(f"the tests are not valid Python (line {e.lineno}: {e.msg})") from e
    imports = "\n".join(
        ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
    )
    methods = tuple(m for m in method_nodes(classes[0]) if m != "__init__")
    if not methods:
        raise ClassProblemError("the class has no method to write besides its constructor")
    return ClassProblem(
        task_id="user", class_name=classes[0].name, skeleton=skeleton, tests=tests,
        imports=imports, methods=methods,
    )  # fmt: skip


def method_nodes(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def class_node(source: str, name: str) -> ast.ClassDef | None:
    return next(
        (n for n in parse(source).body if isinstance(n, ast.ClassDef) and n.name == name), None
    )


def deal(problem: ClassProblem, agents: int) -> list[list[str]]:
    """The methods each agent writes: round the agents in the skeleton's order, then, while
    swapping two methods of different agents puts more of the docstring-implied calls
    (`calls`) between methods of different agents, the first such swap (calling a teammate's
    method as documented is the cooperation a class asks for). Every agent gets at least one
    method and the agents' counts differ by at most one; a team is never larger than the
    class's methods; each agent writes its methods in the skeleton's order."""
    if agents < 1:
        raise ClassProblemError("a team needs at least one agent")
    agents = min(agents, len(problem.methods))
    owner = {m: k % agents for k, m in enumerate(problem.methods)}
    edges = [
        (m, d) for m in problem.methods for d in problem.calls.get(m, ())
        if d in owner and d != m
    ]  # fmt: skip

    def apart() -> int:
        return sum(owner[a] != owner[b] for a, b in edges)

    best, improved = apart(), bool(edges)
    while improved:
        improved = False
        for a, b in itertools.combinations(problem.methods, 2):
            if owner[a] == owner[b]:
                continue
            owner[a], owner[b] = owner[b], owner[a]
            if (score := apart()) > best:
                best, improved = score, True
                break
            owner[a], owner[b] = owner[b], owner[a]
    return [[m for m in problem.methods if owner[m] == k] for k in range(agents)]


def opening(problem: ClassProblem, method: str) -> str:
    """The method exactly as the skeleton gives it: its decorators, its `def` line and its
    docstring, indented as in the class, ending with a newline; the agent writes the body.
    (Begun with the `def` line alone, the 0.5B model copies the docstring and stops.)"""
    node = method_nodes(class_node(problem.skeleton, problem.class_name))[method]
    lines = problem.skeleton.splitlines()
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    head = lines[first : node.end_lineno]
    while head and not head[-1].strip():
        head.pop()
    return "\n".join(head) + "\n"


@dataclass
class Merged:
    """The class as merged: `program` the whole module, `dropped` (agent, method) pairs that an
    agent wrote but was not dealt, `missing` methods no agent wrote (the skeleton's stays)."""

    program: str
    dropped: list[tuple[int, str]]
    missing: list[str]


def merge(problem: ClassProblem, replies: list[str], dealt: list[list[str]]) -> Merged:
    """Each agent's methods into the skeleton, by name. A reply is the agent's methods as class
    members (each begun with its opening) or a class of its own; a method it was not dealt is
    dropped and reported."""
    skeleton_class = class_node(problem.skeleton, problem.class_name)
    methods = method_nodes(skeleton_class)
    written: dict[str, str] = {}
    dropped: list[tuple[int, str]] = []
    for agent, (reply, own) in enumerate(zip(replies, dealt, strict=True)):
        for name, source in _reply_methods(reply).items():
            if name in own and name not in written:
                written[name] = source
            else:
                dropped.append((agent, name))
    lines = problem.skeleton.splitlines()
    for name, node in sorted(methods.items(), key=lambda item: -item[1].lineno):
        if name not in written:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        lines[first : node.end_lineno] = textwrap.indent(written[name], "    ").splitlines()
    body = "\n".join(lines) + "\n"
    missing = [m for m in problem.methods if m not in written]
    return Merged(body, dropped, missing)


def _reply_methods(reply: str) -> dict[str, str]:
    """The methods a reply defines (top-level functions, or the members of a class it wrote),
    each as source at column 0, decorators included; a reply that does not parse as written is
    tried as class members (indented)."""
    for text in (reply, textwrap.dedent(reply), "class _Reply:\n" + textwrap.indent(reply, "    ")):
        try:
            tree = parse(text)
        except SyntaxError:
            continue
        found: dict[str, str] = {}
        for node in tree.body:
            for member in node.body if isinstance(node, ast.ClassDef) else [node]:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.setdefault(member.name, textwrap.dedent(_source(text, member)))
        return found
    return {}


def _source(text: str, node: ast.AST) -> str:
    lines = text.splitlines()
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    return "\n".join(lines[first : node.end_lineno]) + "\n"


def passed_in_full(passed: int, total: int) -> bool:
    """Whether a test class of `total` tests, `passed` of them passing, passes (ClassEval's
    method level: all its tests, and at least one)."""
    return passed == total and total > 0


@dataclass
class ClassReport:
    """The judge's verdict on a class: `test_classes` maps each test class to (passed, total)
    tests; a test class passes when all its tests do (ClassEval's method level), the class when
    every test class does (its class level)."""

    report: TestReport
    test_classes: dict[str, tuple[int, int]]

    @property
    def classes_passed(self) -> int:
        return sum(passed_in_full(p, t) for p, t in self.test_classes.values())

    @property
    def all_passed(self) -> bool:
        return bool(self.test_classes) and self.classes_passed == len(self.test_classes)

    @property
    def fraction(self) -> float:
        return self.classes_passed / len(self.test_classes) if self.test_classes else 0.0

    def first_failure(self, test_class: str) -> str:
        """The judge's message for the first test of `test_class` that failed ("" if none)."""
        return next(
            (
                r.message or ""
                for r in self.report.results
                if r.test_class == test_class and not r.passed
            ),
            "",
        )

    def checks(self) -> list[dict]:
        """The verdict as the checks it is made of, kept with the episode: each test class, its
        tests passed and its first failure (and the program's own failure, if any)."""
        checks = []
        for name, (passed, total) in self.test_classes.items():
            failure = self.first_failure(name)[:400]
            message = f"{passed} of {total} tests passed" + (
                f"; first failure: {failure}" if failure else ""
            )
            checks.append(
                {"name": name, "passed": passed_in_full(passed, total), "message": message}
            )
        if self.report.error:
            checks.append({"name": "the program", "passed": False, "message": self.report.error})
        return checks


def judge_class(problem: ClassProblem, program: str, timeout: float = 3.0) -> ClassReport:
    """Run the class's unittest classes on `program` through the judge (agents/judge/testrun.py)."""
    report = run_tests(
        program, problem.tests, problem.class_name, timeout=timeout, max_timeouts=5,
        given=problem.imports, shared=True,
    )  # fmt: skip
    counts = {name: (f["passed"], f["total"]) for name, f in report.test_classes().items()}
    return ClassReport(report, counts)
