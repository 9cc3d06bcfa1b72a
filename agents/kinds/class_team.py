"""The class team: LangGraph graphs that divide a class's methods among agents, each agent acting
on its own view; its episodes and their joint reward (the class kind's problems, dealing,
openings, merging and judge are in agents/kinds/classes.py).

Shapes: `single` (one agent, each method from the skeleton alone), `single_incremental` (one
agent, each method seeing the ones it wrote before: ClassEval's incremental strategy),
`parallel` (the team: every agent at once, each writing its dealt methods from the skeleton),
`parallel_incremental` (the team, each agent seeing the methods it wrote before, its own only),
`sequential_pipeline` (agent k also sees the methods of agents before it) and
`one_round_discussion` (drafts, then each agent revises its methods seeing the team's drafts). Every shape begins
each method's reply with the same opening, has the same budget per method and the same judge.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypedDict

from agents.kinds.classes import (
    ClassProblem,
    ClassProblemError,
    ClassReport,
    Merged,
    class_node,
    deal,
    judge_class,
    merge,
    method_nodes,
    opening,
    passed_in_full,
)
from agents.team.graph import GREEDY, Settled, TeamSettings
from agents.team.roles import CLASS_SHAPES

# -- the class team ------------------------------------------------------------------------------

SINGLE_FORMS = ("single", "single_incremental")  # one agent writes every method
# the shapes where an agent sees the methods it wrote before (its own: a local view)
INCREMENTAL = ("single_incremental", "parallel_incremental")
SYSTEM = (
    "You are a careful Python developer. You write one method of a class at a time, exactly as "
    "its docstring specifies, and you use the class's other methods and fields as the skeleton "
    "documents them."
)
# the same for every shape and agent: an untrained team writes each method as one agent would,
# and what a trained agent does differently is its own (its adapter)
ASK = (
    "Write the method `{method}` of `{class_name}`. Use the other methods of the class where "
    "its docstring calls for them. Reply with the method only."
)
CLASS_MAX_TOKENS = 256  # each method's reply, unless a person or a run says otherwise
CLASS_GREEDY = replace(GREEDY, max_tokens=CLASS_MAX_TOKENS)  # evaluation's, and the default
# characters of a method's view (the skeleton or the class as merged, on a later turn the tests'
# verdict, methods already written, opening): with the reply's budget, within the 0.5B model's
# 2,048-token window (about 3.3 characters a token of code; the server refuses a longer prompt)
PROMPT_CHARS = 5800
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
class ClassTeam(Settled):
    """What stays fixed during a class episode: the problem, the team's settings (shape, turns,
    sampling: agents/team/graph.py `TeamSettings`), the methods dealt to each agent, each
    agent's adapter (None: the base model), the policy."""

    problem: ClassProblem
    settings: TeamSettings
    dealt: list[list[str]]
    adapters: list[str | None]
    policy: object  # anything with `generate(requests, on_token) -> completions`


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
    turn: int = 0
    completion: Any = field(default=None, repr=False)  # the server's Completion (token ids)


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
    max_tokens: int = CLASS_MAX_TOKENS  # each method's budget

    @property
    def success(self) -> bool:
        """Whether the whole class passed (every test class)."""
        return self.verdict.all_passed

    @property
    def turns(self) -> int:
        return 1 + max((s.turn for s in self.steps), default=0)

    @property
    def output(self) -> str:
        return self.merged.program

    def calls(self, agent: int | None = None, turn: int | None = None) -> list:
        """Agent `agent`'s calls of turn `turn` (one per method it wrote; every call: None), as
        the server returned them (`Completion`, with token ids when the team asked for
        `logprobs`)."""
        return [
            s.completion
            for s in self.steps
            if (agent is None or s.agent == agent) and (turn is None or s.turn == turn)
        ]

    @property
    def agent_tokens(self) -> list[int]:
        return [
            sum(s.completion_tokens for s in self.steps if s.agent == a)
            for a in range(len(self.dealt))
        ]

    @property
    def critical_path_tokens(self) -> int:
        """The most tokens one agent wrote in a turn (its methods one after another), summed
        over the turns."""
        turns = {s.turn for s in self.steps}
        return sum(
            max(
                sum(s.completion_tokens for s in self.steps if s.agent == a and s.turn == t)
                for a in range(len(self.dealt))
            )
            for t in turns
        )

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


def method_messages(
    team: ClassTeam, agent: int, method: str, seen: list[MethodStep], feedback: str = "",
    merged: str = "",
) -> list[dict]:  # fmt: skip
    """One agent's view when it writes `method`: the skeleton (the interface it shares with its
    teammates), the methods its shape shows it (`seen`), on a later turn the class as merged
    (its teammates' code) and the judge's verdict on its own methods, the ask, and the reply
    begun with the method's head."""
    problem = team.problem
    parts = [f"The class, as a skeleton:\n```python\n{problem.skeleton.strip()}\n```"]
    begun = opening(problem, method)  # parses the skeleton: once a request
    if merged and len(merged) + len(feedback) < PROMPT_CHARS - len(begun):
        parts = [f"The class as your team wrote it:\n```python\n{merged.strip()}\n```"]
    if feedback := fitted(feedback, PROMPT_CHARS - len(parts[0]) - len(begun)):
        parts.append(feedback)
    room = PROMPT_CHARS - len(parts[0]) - sum(len(p) + 2 for p in parts[1:]) - len(begun)
    shown = []
    for step in reversed(seen):  # the latest first; the oldest left out when they do not fit
        room -= len(step.text) + 2
        if room < 0:
            break
        shown.insert(0, step.text.rstrip())
    if shown:
        written = "\n\n".join(shown)
        parts.append(f"Methods already written:\n```python\n{written}\n```")
    mine = team.dealt[agent]
    who = (
        "" if len(team.dealt) == 1 else f"; you write {', '.join(mine)}, your teammates the others"
    )
    parts.append(ASK.format(method=method, class_name=problem.class_name, who=who))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
        {"role": "assistant", "content": begun},
    ]


def fitted(note: str, room: int) -> str:
    """`note`'s first lines that fit in `room` characters (none but its first: nothing): a long
    class leaves a later turn's verdict less room, and the view must stay in the window."""
    lines = note.splitlines()
    kept = len(lines)
    while kept > 1 and len("\n".join(lines[:kept])) > room:
        kept -= 1
    return "\n".join(lines[:kept]) if kept > 1 else ""


def verdict_note(team: ClassTeam, agent: int, verdict: ClassReport) -> str:
    """What the judge said of an agent's own methods (and of the tests of several together)."""
    mine = set(team.dealt[agent])
    lines = []
    for test_class, (passed, total) in verdict.test_classes.items():
        method = team.problem.test_classes.get(test_class)
        if method is not None and method not in mine:
            continue
        first = verdict.first_failure(test_class)
        what = f"`{method}`" if method else "several methods together"
        lines.append(
            f"- {test_class} ({what}): {passed} of {total} tests passed"
            + (f"; first failure: {first[:200]}" if first else "")
        )
    return "The tests' verdict on your methods:\n" + "\n".join(lines)


def _failing(team: ClassTeam, agent: int, verdict: ClassReport) -> list[str]:
    """The agent's methods whose test class did not pass (all of them on the first turn)."""
    if verdict is None:
        return list(team.dealt[agent])
    failed = {
        team.problem.test_classes.get(name)
        for name, (passed, total) in verdict.test_classes.items()
        if passed < total
    }
    return [m for m in team.dealt[agent] if m in failed]


def _write_methods(
    team: ClassTeam, agent: int, before: list[MethodStep], turn: int = 0,
    verdict: ClassReport | None = None, merged: str = "",
) -> list[MethodStep]:  # fmt: skip
    """Agent `agent` writes its methods one after another (on a later turn, those whose tests
    failed); what it sees besides the skeleton: its own earlier methods (`INCREMENTAL`),
    the agents' before it (sequential_pipeline), and on a later turn the merged class and the
    verdict on its methods."""
    from langgraph.config import get_stream_writer

    from agents.serving.policy import Request

    try:
        write = get_stream_writer()
    except RuntimeError:  # outside a graph
        write = lambda event: None  # noqa: E731
    note = verdict_note(team, agent, verdict) if verdict is not None else ""
    steps: list[MethodStep] = []
    for method in _failing(team, agent, verdict):
        seen = []
        if team.shape in INCREMENTAL:
            seen = steps
        elif team.shape == "sequential_pipeline":
            seen = [s for s in before if s.turn == turn]
        messages = method_messages(team, agent, method, seen, note, merged)
        begun = messages[-1]["content"]
        # the opening is the environment's (the skeleton's head of the method), not a token
        write(
            {
                "event": "agent_start",
                "agent": agent,
                "method": method,
                "turn": turn,
                "opening": begun,
            }
        )
        request = Request(
            messages=messages,
            adapter=team.adapters[agent],
            agent=agent,
            max_tokens=team.sampling.max_tokens,
            temperature=team.sampling.temperature,
            top_p=team.sampling.top_p,
            seed=None if team.sampling.seed is None else team.sampling.seed + agent,
            stop=STOPS,
            stop_when=method_end,
            logprobs=team.sampling.logprobs,
        )
        stream = lambda _, piece: write({"event": "token", "agent": agent, "text": piece})  # noqa: E731
        [completion] = team.policy.generate([request], on_token=stream)
        steps.append(
            MethodStep(
                agent, method, begun, begun + completion.text, completion.completion_tokens,
                completion.latency_s, completion.finish_reason, turn, completion,
            )
        )  # fmt: skip
    return steps


class ClassState(TypedDict):
    """A class episode's state: every method written so far (every turn), the merged class and
    its verdict, and the turn."""

    steps: Annotated[list, operator.add]
    merged: Any
    verdict: Any
    turn: int


def merge_and_judge(
    problem: ClassProblem, dealt: list[list[str]], steps: list[MethodStep]
) -> tuple[Merged, ClassReport]:
    """Each method's latest version (of the steps, in order) merged into the skeleton by its
    agent's reply, and the judge's verdict on the class."""
    latest: dict[str, MethodStep] = {}
    for step in steps:
        latest[step.method] = step
    replies = [
        "\n".join(s.text for s in latest.values() if s.agent == a) for a in range(len(dealt))
    ]
    merged = merge(problem, replies, dealt)
    return merged, judge_class(problem, merged.program)


def recombine_classes(episodes: list[ClassEpisode], pick: tuple[int, ...]) -> ClassEpisode:
    """The class that agent i's methods of episode pick[i] make together (cross pairing, one
    turn of the `parallel` team: an agent's methods are written from the skeleton alone, or
    with its own earlier ones in `parallel_incremental`, so any agent's sample can go with any
    teammate's), merged and judged as an episode's are."""
    first = episodes[pick[0]]
    if first.shape not in ("parallel", "parallel_incremental") or first.turns != 1:
        raise ClassProblemError("only one turn of the parallel class team recombines")
    steps = [s for agent, g in enumerate(pick) for s in episodes[g].steps if s.agent == agent]
    merged, verdict = merge_and_judge(first.problem, first.dealt, steps)
    wall = max(episodes[g].wall_s for g in pick)
    return ClassEpisode(
        first.problem, first.shape, first.dealt, steps, merged, verdict, wall, first.max_tokens
    )


def class_graph(team: ClassTeam):
    """The class team as a LangGraph graph. parallel, parallel_incremental and the single forms:
    every agent at once, each on its own view (START ─Send×n─▶ agent ─▶ merge);
    sequential_pipeline: agent 0, then 1 seeing 0's methods, ... (START ─▶ agent_0 ─▶ agent_1 ─▶
    … ─▶ merge). The merge node puts each method's latest version into the skeleton and judges
    the class; with more turns, the agents whose methods failed write them again (─▶ agent …)
    until the class passes or the turns are spent. one_round_discussion: every agent drafts its
    methods, then revises every one of them seeing the team's drafts merged (─▶ agent ─▶ merge
    ─▶ END), one turn."""
    from functools import partial

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    discussion = team.shape == "one_round_discussion"

    def later(state: ClassState) -> dict:
        if state["verdict"] is None:
            return {"turn": 0, "verdict": None, "merged": ""}
        if discussion:  # every method revised, seeing the team's drafts (no verdict)
            return {"turn": 1, "verdict": None, "merged": state["merged"].program}
        return {
            "turn": state["turn"] + 1, "verdict": state["verdict"],
            "merged": state["merged"].program,
        }  # fmt: skip

    def agent_node(view: dict) -> dict:
        return {"steps": _write_methods(team, view["agent"], [], **view["context"])}

    def in_line(agent: int, state: ClassState) -> dict:
        return {"steps": _write_methods(team, agent, list(state["steps"]), **later(state))}

    def merge_node(state: ClassState) -> dict:
        from langgraph.config import get_stream_writer

        merged, verdict = merge_and_judge(team.problem, team.dealt, state["steps"])
        turn = max(s.turn for s in state["steps"]) if state["steps"] else 0
        done = verdict.all_passed or turn + 1 >= (2 if discussion else team.turns)
        written = {s.agent for s in state["steps"] if s.turn == turn}
        get_stream_writer()(
            {
                "event": "turn_end", "turn": turn, "success": verdict.all_passed, "done": done,
                "failing": [
                    _failing(team, a, verdict) if a in written else []
                    for a in range(len(team.dealt))
                ],
            }
        )  # fmt: skip
        return {"merged": merged, "verdict": verdict, "turn": turn}

    def fan_out(state: ClassState) -> list:
        context = later(state)
        return [Send("agent", {"agent": a, "context": context}) for a in range(len(team.dealt))]

    def again(first, state: ClassState):
        if discussion:
            return first(state) if state["turn"] == 0 else END
        if state["verdict"].all_passed or state["turn"] + 1 >= team.turns:
            return END
        return first(state)

    graph = StateGraph(ClassState)
    graph.add_node("merge", merge_node)
    if team.shape == "sequential_pipeline":
        names = [f"agent_{k}" for k in range(len(team.dealt))]
        for k, name in enumerate(names):
            graph.add_node(name, partial(in_line, k))
        graph.add_edge(START, names[0])
        for earlier, following in zip(names, names[1:], strict=False):
            graph.add_edge(earlier, following)
        graph.add_edge(names[-1], "merge")
        graph.add_conditional_edges("merge", partial(again, lambda _: names[0]), [names[0], END])
    else:
        graph.add_node("agent", agent_node)
        graph.add_conditional_edges(START, fan_out, ["agent"])
        graph.add_edge("agent", "merge")
        graph.add_conditional_edges("merge", partial(again, fan_out), ["agent", END])
    return graph.compile()


def check_class_team(shape: str, turns: int) -> None:
    """Refuse a class team that cannot be run, saying what to change."""
    if shape not in CLASS_SHAPES:
        raise ClassProblemError(
            f"{shape!r} is not a class team's shape: pick one of {', '.join(CLASS_SHAPES)}"
        )
    if shape == "one_round_discussion" and turns != 1:
        raise ClassProblemError(
            "a one-round discussion is one turn (drafts, then revisions): set the turns to 1"
        )


def team_size(problem: ClassProblem, shape: str, agents: int | None) -> int:
    """The agents a shape has on a class: one for the single forms, else `agents` (None: 2),
    never more than the class's methods."""
    return 1 if shape in SINGLE_FORMS else min(agents or 2, len(problem.methods))


def class_adapters(settings: TeamSettings, size: int) -> list[str | None]:
    """Each agent's adapter name (None: the base model) from the settings' list or agent index ->
    name mapping, for a team of `size` (a list longer than the team: the first `size`)."""
    given = settings.adapters or []
    if isinstance(given, Mapping):
        return [given.get(agent) for agent in range(size)]
    return (list(given) + [None] * size)[:size]


def run_class_episode(
    problem: ClassProblem,
    policy,
    settings: TeamSettings = TeamSettings(sampling=CLASS_GREEDY),  # noqa: B008
    *,
    on_event=None,
) -> ClassEpisode:
    """One class episode: the methods dealt (one agent for the single shapes), written, merged,
    judged. Every shape begins each method's reply with the same opening and has the same token
    budget per method and the same judge. Role prompts (`settings.prompts`) are not a class
    team's: its one ask is the same for every agent."""
    import time

    check_class_team(settings.shape, settings.turns)
    dealt = deal(problem, team_size(problem, settings.shape, settings.agents))
    team = ClassTeam(problem, settings, dealt, class_adapters(settings, len(dealt)), policy)
    start = time.monotonic()
    state = None
    for mode, chunk in class_graph(team).stream(
        {"steps": [], "merged": None, "verdict": None, "turn": 0},
        stream_mode=["custom", "values"],
    ):
        if mode == "custom" and on_event is not None:
            on_event(chunk)
        elif mode == "values":
            state = chunk
    steps = sorted(state["steps"], key=lambda s: (s.turn, s.agent, problem.methods.index(s.method)))
    wall = time.monotonic() - start
    return ClassEpisode(
        problem, settings.shape, dealt, steps, state["merged"], state["verdict"], wall,
        settings.sampling.max_tokens,
    )  # fmt: skip


# -- the reward ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassRewardWeights:
    """What a class episode's reward is made of (summing to 1): the test classes passed, a bonus
    for the whole class, calls to teammates' methods that the docstrings imply, paid by the
    share of the calling method's tests that pass, and speed (the critical path's share of the
    budget left)."""

    tests: float = 0.5
    whole_class: float = 0.2
    coordination: float = 0.2
    speed: float = 0.1


def teammate_calls(problem: ClassProblem, dealt: list[list[str]], program: str) -> dict[str, bool]:
    """For each method whose docstring implies a call to a method dealt to a teammate (upstream's
    `method_dependencies`), whether its code calls one of them (`self.name(`)."""
    owner = {m: a for a, methods in enumerate(dealt) for m in methods}
    node = class_node(program, problem.class_name) if program else None
    written = method_nodes(node) if node is not None else {}
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


def _method_counts(problem: ClassProblem, test_classes: dict):
    """(method, passed, total) for each test class of one method of its own (`test_classes`:
    name -> (passed, total); a test class of several methods together names none)."""
    for name, (passed, total) in test_classes.items():
        if problem.test_classes.get(name):
            yield problem.test_classes[name], passed, total


def method_shares(problem: ClassProblem, test_classes: dict) -> dict[str, float]:
    """Each method's share of its test class's tests that passed."""
    return {m: p / t for m, p, t in _method_counts(problem, test_classes) if t > 0}


def passing_methods(problem: ClassProblem, test_classes: dict) -> set[str]:
    """The methods whose own test class passed in full (`passed_in_full`)."""
    return {m for m, p, t in _method_counts(problem, test_classes) if passed_in_full(p, t)}


def class_reward(
    episode: ClassEpisode,
    weights: ClassRewardWeights = ClassRewardWeights(),  # noqa: B008
) -> dict:
    """The joint reward of a class episode and its parts, each in [0, 1]. Nothing is paid for a
    method that only parses: coordination pays a teammate's implied method called by a method in
    proportion to the share of that method's tests that pass (a test class in full is what
    `tests` counts; the part of one a calling method passes is what makes the call's worth
    visible to a group of samples); speed is paid only in proportion to the tests passed."""
    problem, verdict = episode.problem, episode.verdict
    tests = verdict.fraction
    whole = 1.0 if verdict.all_passed else 0.0
    shares = method_shares(problem, verdict.test_classes)
    calls = teammate_calls(problem, episode.dealt, episode.merged.program)
    coordination = (
        sum(shares.get(method, 0.0) for method, called in calls.items() if called) / len(calls)
        if calls
        else None
    )
    budget = max(len(m) for m in episode.dealt) * episode.max_tokens if episode.dealt else 1
    speed = max(0.0, 1.0 - episode.critical_path_tokens / budget) * tests
    parts = {"tests": tests, "whole_class": whole, "coordination": coordination, "speed": speed}
    used = {k: getattr(weights, k) for k, v in parts.items() if v is not None}
    total = sum(used[k] * parts[k] for k in used) / sum(used.values())
    return {"reward": total, **parts, "calls": calls}
