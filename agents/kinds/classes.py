"""Class-level co-coding: a class whose methods share an interface and call each other (ClassEval).

This kind of work is kept whole here: its problems (the 64 vendored ClassEval classes, mended, and
a person's own skeleton with unittest tests), its splits, how it deals the methods to agents,
each method's opening, how the agents' methods merge into the skeleton, and the judge's verdict
per test class.

- A problem is a skeleton (imports, the class docstring, a working constructor, every other
  method's signature and docstring) and unittest test classes, one per method (plus, for most, a
  `...TestMain` using several together). `ClassProblem.methods` are the methods the team writes:
  every method but `__init__`, in the skeleton's order.
- Dealing (`deal`): the methods round the agents in the skeleton's order, so every agent gets at
  least one and neighbours (which often call each other) go to different agents; a team is never
  larger than the class's methods.
- Opening (`opening`): each method's reply is begun with that method's head exactly as the
  skeleton gives it (its decorators and `def` line), and nothing more.
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
import json
import operator
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

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

    def program(self, body: str) -> str:
        """A whole module: the imports, then `body` (a class)."""
        return (self.imports + "\n\n" if self.imports else "") + body


def mend(task_id: str, skeleton: str) -> str:
    """The three skeletons that do not parse as given, mended (assets/tasks/classeval/README.md)."""
    skeleton = skeleton.replace("“”“", '"""').replace("”“”", '"""')
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
    methods = tuple(m for m in _method_nodes(classes[0]) if m != "__init__")
    if not methods:
        raise ClassProblemError("the class has no method to write besides its constructor")
    return ClassProblem(
        task_id="user", class_name=classes[0].name, skeleton=skeleton, tests=tests,
        imports=imports, methods=methods,
    )  # fmt: skip


def _method_nodes(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _class_node(source: str, name: str) -> ast.ClassDef | None:
    return next(
        (n for n in parse(source).body if isinstance(n, ast.ClassDef) and n.name == name), None
    )


def deal(problem: ClassProblem, agents: int) -> list[list[str]]:
    """The methods each agent writes: round the agents in the skeleton's order; a team never
    larger than the class's methods, every agent at least one."""
    if agents < 1:
        raise ClassProblemError("a team needs at least one agent")
    agents = min(agents, len(problem.methods))
    return [list(problem.methods[k::agents]) for k in range(agents)]


def opening(problem: ClassProblem, method: str) -> str:
    """The method's head exactly as the skeleton gives it: its decorators and its `def` line(s),
    indented as in the class, ending with a newline."""
    node = _method_nodes(_class_node(problem.skeleton, problem.class_name))[method]
    lines = problem.skeleton.splitlines()
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    last = node.body[0].lineno - 1 if node.body else node.lineno
    head = lines[first:last]
    while head and not head[-1].rstrip().endswith(":"):  # a docstring's line, not the head's
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
    skeleton_class = _class_node(problem.skeleton, problem.class_name)
    methods = _method_nodes(skeleton_class)
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


@dataclass
class ClassReport:
    """The judge's verdict on a class: `test_classes` maps each test class to (passed, total)
    tests; a test class passes when all its tests do (ClassEval's method level), the class when
    every test class does (its class level)."""

    report: TestReport
    test_classes: dict[str, tuple[int, int]]

    @property
    def classes_passed(self) -> int:
        return sum(p == t and t > 0 for p, t in self.test_classes.values())

    @property
    def all_passed(self) -> bool:
        return bool(self.test_classes) and self.classes_passed == len(self.test_classes)

    @property
    def fraction(self) -> float:
        return self.classes_passed / len(self.test_classes) if self.test_classes else 0.0


def judge_class(problem: ClassProblem, program: str, timeout: float = 3.0) -> ClassReport:
    """Run the class's unittest classes on `program` through the judge (agents/judge/testrun.py)."""
    report = run_tests(
        program, problem.tests, problem.class_name, timeout=timeout, max_timeouts=5,
        given=problem.imports, shared=True,
    )  # fmt: skip
    counts = {name: (f["passed"], f["total"]) for name, f in report.test_classes().items()}
    return ClassReport(report, counts)


# -- the class team ------------------------------------------------------------------------------

CLASS_SHAPES = ("single", "single_incremental", "parallel", "sequential_pipeline")
SYSTEM = (
    "You are a careful Python developer. You write one method of a class at a time, exactly as "
    "its docstring specifies, and you use the class's other methods and fields as the skeleton "
    "documents them."
)
ASK = (
    "Write the method `{method}` of `{class_name}`. Use the other methods of the class where "
    "its docstring calls for them{who}. Reply with the method only."
)
# a method's reply ends where the model leaves the block, or (`method_end`) the method
STOPS = ["\n```"]


def method_end(text: str) -> int | None:
    """Where a method's body ends in the completion so far: at the first whole line indented
    no more than the method's head (another member, the class left), else None."""
    position = 0
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            return None
        if line.strip() and len(line) - len(line.lstrip()) <= 4:
            return position
        position += len(line)
    return None


@dataclass(frozen=True)
class ClassTeam:
    """What stays fixed during a class episode: the problem, the shape, the methods dealt to each
    agent, each agent's adapter (None: the base model), how it samples, the policy."""

    problem: ClassProblem
    shape: str
    dealt: list[list[str]]
    adapters: list[str | None]
    policy: object  # anything with `generate(requests, on_token) -> completions`
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None


@dataclass
class MethodStep:
    """One method an agent wrote: what it was begun with (`opening`, the environment's) and the
    whole method (`text`, opening included); tokens are the agent's own."""

    agent: int
    method: str
    opening: str
    text: str
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None


@dataclass
class ClassEpisode:
    """A class episode: each method's step, the merged class and its verdict."""

    problem: ClassProblem
    shape: str
    dealt: list[list[str]]
    steps: list[MethodStep]
    merged: Merged
    verdict: ClassReport
    wall_s: float
    max_tokens: int = 256  # each method's budget

    @property
    def agent_tokens(self) -> list[int]:
        return [
            sum(s.completion_tokens for s in self.steps if s.agent == a)
            for a in range(len(self.dealt))
        ]

    @property
    def critical_path_tokens(self) -> int:
        """The most tokens one agent wrote (its methods one after another)."""
        return max(self.agent_tokens, default=0)

    def summary(self) -> dict:
        """Plain data for `coteam episode --task class --json`."""
        return {
            "task_id": self.problem.task_id,
            "class_name": self.problem.class_name,
            "shape": self.shape,
            "dealt": self.dealt,
            "methods": [
                {
                    "agent": s.agent + 1,
                    "method": s.method,
                    "opening": s.opening,
                    "text": s.text,
                    "tokens": s.completion_tokens,
                }
                for s in self.steps
            ],  # fmt: skip
            "program": self.merged.program,
            "dropped": [[agent + 1, name] for agent, name in self.merged.dropped],
            "test_classes": {k: list(v) for k, v in self.verdict.test_classes.items()},
            "test_classes_passed": self.verdict.classes_passed,
            "class_passed": self.verdict.all_passed,
            "error": self.verdict.report.error,
            "critical_path_tokens": self.critical_path_tokens,
            "wall_s": round(self.wall_s, 2),
        }


def method_messages(team: ClassTeam, agent: int, method: str, seen: list[MethodStep]) -> list[dict]:
    """One agent's view when it writes `method`: the skeleton (the interface it shares with its
    teammates), the methods its shape shows it (`seen`), the ask, and the reply begun with the
    method's head."""
    problem = team.problem
    parts = [f"The class, as a skeleton:\n```python\n{problem.skeleton.strip()}\n```"]
    if seen:
        written = "\n\n".join(s.text.rstrip() for s in seen)
        parts.append(f"Methods already written:\n```python\n{written}\n```")
    mine = team.dealt[agent]
    who = (
        "" if len(team.dealt) == 1 else f"; you write {', '.join(mine)}, your teammates the others"
    )
    parts.append(ASK.format(method=method, class_name=problem.class_name, who=who))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
        {"role": "assistant", "content": opening(problem, method)},
    ]


def _write_methods(team: ClassTeam, agent: int, before: list[MethodStep]) -> list[MethodStep]:
    """Agent `agent` writes its methods one after another; what it sees besides the skeleton:
    its own earlier methods (single_incremental), the agents' before it (sequential_pipeline)."""
    from langgraph.config import get_stream_writer

    from agents.serving.policy import Request

    try:
        write = get_stream_writer()
    except RuntimeError:  # outside a graph
        write = lambda event: None  # noqa: E731
    steps: list[MethodStep] = []
    for method in team.dealt[agent]:
        seen = []
        if team.shape == "single_incremental":
            seen = steps
        elif team.shape == "sequential_pipeline":
            seen = before
        messages = method_messages(team, agent, method, seen)
        begun = messages[-1]["content"]
        write({"event": "agent_start", "agent": agent, "method": method})
        write({"event": "token", "agent": agent, "text": begun})
        request = Request(
            messages=messages,
            adapter=team.adapters[agent],
            agent=agent,
            max_tokens=team.max_tokens,
            temperature=team.temperature,
            top_p=team.top_p,
            seed=None if team.seed is None else team.seed + agent,
            stop=STOPS,
            stop_when=method_end,
        )
        stream = lambda _, piece: write({"event": "token", "agent": agent, "text": piece})  # noqa: E731
        [completion] = team.policy.generate([request], on_token=stream)
        steps.append(
            MethodStep(
                agent, method, begun, begun + completion.text, completion.completion_tokens,
                completion.latency_s, completion.finish_reason,
            )
        )  # fmt: skip
    return steps


class ClassState(TypedDict):
    """A class episode's state: every method written so far, then the merged class and verdict."""

    steps: Annotated[list, operator.add]
    merged: Any
    verdict: Any


def class_graph(team: ClassTeam):
    """The class team as a LangGraph graph. parallel, single, single_incremental: every agent
    at once, each on its own view (START ─Send×n─▶ agent ─▶ merge); sequential_pipeline: agent
    0, then 1 seeing 0's methods, ... (START ─▶ agent_0 ─▶ agent_1 ─▶ … ─▶ merge). The merge
    node puts the methods into the skeleton and judges the class."""
    from functools import partial

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    State = ClassState

    def agent_node(view: dict) -> dict:
        return {"steps": _write_methods(team, view["agent"], [])}

    def in_line(agent: int, state: State) -> dict:
        return {"steps": _write_methods(team, agent, list(state["steps"]))}

    def merge_node(state: State) -> dict:
        replies = [
            "\n".join(s.text for s in state["steps"] if s.agent == a)
            for a in range(len(team.dealt))
        ]
        merged = merge(team.problem, replies, team.dealt)
        return {"merged": merged, "verdict": judge_class(team.problem, merged.program)}

    graph = StateGraph(State)
    graph.add_node("merge", merge_node)
    if team.shape == "sequential_pipeline":
        names = [f"agent_{k}" for k in range(len(team.dealt))]
        for k, name in enumerate(names):
            graph.add_node(name, partial(in_line, k))
        graph.add_edge(START, names[0])
        for earlier, later in zip(names, names[1:], strict=False):
            graph.add_edge(earlier, later)
        graph.add_edge(names[-1], "merge")
    else:
        graph.add_node("agent", agent_node)
        fan_out = lambda state: [Send("agent", {"agent": a}) for a in range(len(team.dealt))]  # noqa: E731
        graph.add_conditional_edges(START, fan_out, ["agent"])
        graph.add_edge("agent", "merge")
    graph.add_edge("merge", END)
    return graph.compile()


def run_class_episode(
    problem: ClassProblem,
    policy,
    *,
    shape: str = "parallel",
    agents: int = 2,
    adapters: list[str | None] | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_tokens: int = 256,
    seed: int | None = None,
    on_event=None,
) -> ClassEpisode:
    """One class episode: the methods dealt (one agent for the single shapes), written, merged,
    judged. Every shape begins each method's reply with the same opening and has the same token
    budget per method and the same judge."""
    import time

    if shape not in CLASS_SHAPES:
        raise ClassProblemError(f"unknown class shape {shape!r}: {', '.join(CLASS_SHAPES)}")
    size = 1 if shape.startswith("single") else agents
    dealt = deal(problem, size)
    adapters = list(adapters or []) + [None] * len(dealt)
    team = ClassTeam(
        problem, shape, dealt, adapters[: len(dealt)], policy, temperature, top_p, max_tokens, seed
    )
    start = time.monotonic()
    state = None
    for mode, chunk in class_graph(team).stream(
        {"steps": [], "merged": None, "verdict": None}, stream_mode=["custom", "values"]
    ):
        if mode == "custom" and on_event is not None:
            on_event(chunk)
        elif mode == "values":
            state = chunk
    steps = sorted(state["steps"], key=lambda s: (s.agent, problem.methods.index(s.method)))
    wall = time.monotonic() - start
    return ClassEpisode(
        problem, shape, dealt, steps, state["merged"], state["verdict"], wall, max_tokens
    )


# -- the reward ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassRewardWeights:
    """What a class episode's reward is made of (summing to 1): the test classes passed, a bonus
    for the whole class, calls to teammates' methods that the docstrings imply and whose tests
    pass, and speed (the critical path's share of the budget left)."""

    tests: float = 0.6
    whole_class: float = 0.2
    coordination: float = 0.1
    speed: float = 0.1


def teammate_calls(problem: ClassProblem, dealt: list[list[str]], program: str) -> dict[str, bool]:
    """For each method whose docstring implies a call to a method dealt to a teammate (upstream's
    `method_dependencies`), whether its code calls one of them (`self.name(`)."""
    owner = {m: a for a, methods in enumerate(dealt) for m in methods}
    node = _class_node(program, problem.class_name) if program else None
    written = _method_nodes(node) if node is not None else {}
    found = {}
    for method in problem.methods:
        implied = [
            d
            for d in problem.calls.get(method, ())
            if owner.get(d) not in (None, owner.get(method))
        ]
        if not implied:
            continue
        calls = {
            n.func.attr
            for n in ast.walk(written[method])
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"
        } if method in written else set()  # fmt: skip
        found[method] = bool(calls & set(implied))
    return found


def class_reward(
    episode: ClassEpisode,
    weights: ClassRewardWeights = ClassRewardWeights(),  # noqa: B008
) -> dict:
    """The joint reward of a class episode and its parts, each in [0, 1]. Nothing is paid for a
    method that only parses: coordination counts a teammate's method called by a method whose
    test class passes; speed is paid only in proportion to the tests passed."""
    problem, verdict = episode.problem, episode.verdict
    tests = verdict.fraction
    whole = 1.0 if verdict.all_passed else 0.0
    passing = {
        problem.test_classes.get(name) for name, (p, t) in verdict.test_classes.items() if p == t
    }
    calls = teammate_calls(problem, episode.dealt, episode.merged.program)
    coordination = (
        sum(called and method in passing for method, called in calls.items()) / len(calls)
        if calls
        else None
    )
    budget = max(len(m) for m in episode.dealt) * episode.max_tokens if episode.dealt else 1
    speed = max(0.0, 1.0 - episode.critical_path_tokens / budget) * tests
    parts = {"tests": tests, "whole_class": whole, "coordination": coordination, "speed": speed}
    used = {k: getattr(weights, k) for k, v in parts.items() if v is not None}
    total = sum(used[k] * parts[k] for k in used) / sum(used.values())
    return {"reward": total, **parts, "calls": calls}
