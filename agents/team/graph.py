"""Agent teams as LangGraph graphs (`run_episode`, agents/team/episode.py, runs one and records it).

A team is a Dec-POMDP: agent i acts on its own observation o_i (its role prompt, the task, its
own last answer and the environment's feedback to it) and the team is judged on one joint
result. `observe` is the one place that decides what an agent sees; the shapes differ only in
who acts when and which teammates' work `observe` is allowed to show:

    parallel              every agent acts at once on its own view (what MAGRPO trains)
      START ─Send×n─▶ agent ─▶ combine ─▶ environment ─Send×n─▶ agent … ─▶ END
    single                the same graph with one agent
    naive_concat          the same graph; no coordinated roles, parts joined as they are
    sequential_pipeline   agent k also sees what agents 0..k-1 wrote this turn
      START ─▶ agent_0 ─▶ agent_1 ─▶ … ─▶ combine ─▶ environment ─▶ agent_0 … ─▶ END
    one_round_discussion  independent drafts, then each revises once after seeing the others'
      START ─Send×n─▶ draft ─▶ share_drafts ─Send×n─▶ revise ─▶ combine ─▶ environment ─▶ …

After every turn the environment node (agents/team/feedback.py) turns the combined result into
feedback for each agent's next observation; the episode ends on success or at the turn limit.

Agents acting at once are Send tasks, which LangGraph runs in threads: their requests reach the
server together and it batches them. Nodes stream per-agent tokens through LangGraph's "custom"
stream mode; `run_episode` reads the "updates" stream to record each agent's turn.

The policy is anything with `generate(requests, on_token) -> completions`, like `PolicyClient`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Annotated, Any, Protocol, TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from agents.kinds import Work, work_of
from agents.serving.policy import Completion, Request
from agents.tasks import Task
from agents.team.combine import CombinedCode
from agents.team.feedback import Assessment, CodeChecker, parse_check
from agents.team.result import Step
from agents.team.roles import (
    DEFAULT_MAX_TOKENS,
    FEEDBACK,
    NO_FEEDBACK,
    OWN_DRAFT,
    PREVIOUS_ANSWER,
    TEAMMATE_PART,
    TEAMMATES_BEFORE,
    TEAMMATES_DRAFTS,
    Role,
    fill,
    frame_echo,
    token_share,
)
from agents.team.writer import continuing, earliest, without_stray_hash

Event = dict[str, Any]


class Policy(Protocol):
    def generate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]: ...


@dataclass(frozen=True)
class Sampling:
    """How agents sample; the defaults are the reference baselines' (RESEARCH.md)."""

    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None  # with a seed, agent i samples with seed + i
    logprobs: bool = False  # return token ids and sampling log-probabilities (for the learner)
    # > 1 discourages repeating what is already in the context (the model card's value is 1.1);
    # greedy long-form writing otherwise falls into loops
    repetition_penalty: float = 1.0


GREEDY = Sampling(temperature=0.0, top_p=1.0)  # for evaluation


def judged_sampling(
    samples: int,
    max_tokens: int,
    seed: int | None = None,
    temperature: float = Sampling.temperature,
    top_p: float = Sampling.top_p,
    repetition_penalty: float = Sampling.repetition_penalty,
) -> Sampling:
    """How the gate and evaluation sample an answer: greedy when a task gets one answer, else
    at `temperature` and `top_p` (the app's, `Sampling`'s defaults: T = 0.8, top-p 0.95) from
    `seed` (a run's task i: `seed + 1000 i`, `TeamSettings.for_task`; a group's answer g:
    `seed + 100 g`, `TeamSettings.for_sample`)."""
    if samples == 1:
        return replace(GREEDY, max_tokens=max_tokens, repetition_penalty=repetition_penalty)
    return Sampling(
        temperature, top_p, max_tokens, seed=seed, repetition_penalty=repetition_penalty
    )


@dataclass(frozen=True)
class TeamSettings:
    """How a team plays an episode, for every kind of work and every caller (the page, the CLI,
    evaluation, training, the gate): its shape, its size (None: the shape's own), the turn limit,
    each agent's adapter (a list, or agent index -> name; None or missing: the base model), role
    prompts that override the defaults (functions and documents), and how the agents sample."""

    shape: str = "parallel"
    agents: int | None = None
    turns: int = 1
    adapters: Sequence[str | None] | Mapping[int, str | None] | None = None
    sampling: Sampling = field(default_factory=Sampling)
    prompts: dict[str, str] | None = None

    def for_task(self, index: int) -> TeamSettings:
        """The settings for the `index`-th task of a run (evaluation, the gate): seeded
        `seed + 1000 index` when the sampling has a seed, so every task has its own draws and
        every team the same ones; else the same settings."""
        return self._seeded(1000 * index)

    def for_sample(self, g: int) -> TeamSettings:
        """Sample g of a group of episodes (a MAGRPO group): seeded `seed + 100 g` when the
        sampling has a seed, else the same settings."""
        return self._seeded(100 * g)

    def _seeded(self, offset: int) -> TeamSettings:
        seed = self.sampling.seed
        return (
            self
            if seed is None
            else replace(self, sampling=replace(self.sampling, seed=seed + offset))
        )


class Settled:
    """A team with `settings` (`TeamSettings`): its shape, turn limit and sampling read there
    (a function's or a document's `Team`, a class's `ClassTeam`)."""

    settings: TeamSettings

    @property
    def shape(self) -> str:
        return self.settings.shape

    @property
    def turns(self) -> int:
        return self.settings.turns

    @property
    def sampling(self) -> Sampling:
        return self.settings.sampling


@dataclass
class Team(Settled):
    """Everything that stays fixed during an episode: the task, the settings, each agent's role
    and adapter name (None: the base model), the policy and the checker."""

    task: Task
    settings: TeamSettings
    roles: list[Role]
    adapters: list[str | None]
    policy: Policy
    checker: CodeChecker = parse_check

    @property
    def size(self) -> int:
        return len(self.roles)

    @property
    def work(self) -> Work:
        """The task's kind of work, which the nodes ask instead of branching on it."""
        return work_of(self.task)

    @property
    def rounds(self) -> int:
        """Agent calls per agent per turn."""
        return 2 if self.shape == "one_round_discussion" else 1


class View(TypedDict):
    """What one agent gets when it is sent to act: its observation and where it is."""

    agent: int
    turn: int
    round: int
    messages: list[dict]


def merge(old: dict, new: dict) -> dict:
    return {**old, **new}


class TeamState(TypedDict):
    turn: int  # the current turn, from 0
    outputs: Annotated[dict[int, str], merge]  # each agent's latest text
    steps: Annotated[list[Step], operator.add]  # every agent call so far
    feedback: list[str]  # the environment's note to each agent, for its next observation
    combined: CombinedCode | None  # coding: the joined module of the latest turn
    output: str  # the team's combined result of the latest turn
    assessments: Annotated[list[dict], operator.add]  # per turn: success, feedback, details
    done: bool


# -- what each agent sees --------------------------------------------------------------------


def observe(team: Team, state: TeamState, agent: int, round: int = 0) -> list[dict]:
    """Agent `agent`'s observation as chat messages: its role, the task, its own last answer
    and feedback, and only the teammates' work its shape shows it on purpose."""
    role, outputs = team.roles[agent], state["outputs"]
    frame = team.work.frame(team.task)
    problem = team.task.prompt if role.problem is None else role.problem
    parts = [fill(frame, prompt=problem)] if problem.strip() else []
    if role.contract:
        parts.append(role.contract)
    if state["turn"] > 0 and round == 0:
        parts.append(fill(PREVIOUS_ANSWER, text=outputs[agent]))
        note = state["feedback"][agent] or NO_FEEDBACK
        parts.append(fill(FEEDBACK, text=note))
    if team.shape == "sequential_pipeline" and agent > 0:
        before = [_teammate(team, j, outputs[j]) for j in range(agent)]
        parts.append(fill(TEAMMATES_BEFORE, text="\n\n".join(before)))
    if team.shape == "one_round_discussion" and round == 1:
        parts.append(fill(OWN_DRAFT, text=outputs[agent]))
        drafts = [_teammate(team, j, outputs[j]) for j in range(team.size) if j != agent]
        parts.append(fill(TEAMMATES_DRAFTS, text="\n\n".join(drafts)))
    parts.append(role.ask)
    messages = [
        {"role": "system", "content": role.instructions},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
    if role.reply_start:  # the environment begins the reply; the agent's model continues it
        messages.append({"role": "assistant", "content": role.reply_start})
    return messages


def _teammate(team: Team, agent: int, text: str) -> str:
    return fill(TEAMMATE_PART, title=team.roles[agent].title, text=text.strip())


# -- nodes -----------------------------------------------------------------------------------


def act(team: Team, view: View) -> dict:
    """One agent acts on its own view: a request to its adapter, tokens streamed as they come
    (a long-form writer whose reply left one of its sections out: a request more for each)."""
    agent, turn, round = view["agent"], view["turn"], view["round"]
    write = get_stream_writer()
    where = {"agent": agent, "turn": turn, "round": round}
    role = team.roles[agent]
    write({"event": "agent_start", **where, "role": role.name})
    s = team.sampling
    share = token_share(role)
    # a reply the environment began (see `observe`) is the agent's answer with its beginning
    begun = view["messages"][-1]["content"] if view["messages"][-1]["role"] == "assistant" else ""
    # a reply stops where its kind of work says (a long-form writer: at a teammate's section or
    # a loop) and, any reply, where it copies one of the frames of its view (its last answer,
    # the feedback, teammates' drafts)
    stop_when = earliest(team.work.stop_for(team.task, role), frame_echo)
    request = Request(
        messages=view["messages"],
        adapter=team.adapters[agent],
        agent=agent,
        max_tokens=s.max_tokens if share is None else min(s.max_tokens, share),
        temperature=s.temperature,
        top_p=s.top_p,
        seed=None if s.seed is None else s.seed + agent,
        logprobs=s.logprobs,
        repetition_penalty=s.repetition_penalty,
        stop=list(role.stop) or None,
        stop_when=continuing(stop_when, begun),
    )
    if begun:
        write({"event": "token", **where, "text": begun})
    stream = lambda _, piece: write({"event": "token", **where, "text": piece})  # noqa: E731
    [completion] = team.policy.generate([request], on_token=stream)
    text = without_stray_hash(request, completion, begun + completion.text)
    if not s.logprobs:  # what more its kind of work asks of it (a writer's left-out section)
        text, completion = team.work.go_on(
            team.policy, team.task, role, request, stop_when, text, completion, stream
        )
    step = Step(
        **where,
        role=role.name,
        messages=view["messages"],
        text=text,
        adapter=team.adapters[agent],
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        latency_s=completion.latency_s,
        finish_reason=completion.finish_reason,
        completion=completion,
    )
    return {"steps": [step], "outputs": {agent: text}}


def act_in_line(team: Team, agent: int, state: TeamState) -> dict:
    """sequential_pipeline's node for agent `agent`: it sees the agents before it."""
    view = View(agent=agent, turn=state["turn"], round=0, messages=observe(team, state, agent))
    return act(team, view)


def combine(team: Team, state: TeamState) -> dict:
    """Join the agents' latest parts into the team's result."""
    texts = [state["outputs"][i] for i in range(team.size)]
    combined, output = team.work.combine(team.task, team.shape, team.roles, texts)
    return {"combined": combined, "output": output}


def environment(team: Team, state: TeamState) -> dict:
    """Judge the turn's result, give each agent its feedback, and decide whether to go on."""
    latest = {step["agent"]: step for step in state["steps"] if step["turn"] == state["turn"]}
    cut_off = [latest[i]["finish_reason"] == "length" for i in range(team.size)]
    verdict = assess(team, state, cut_off)
    done = verdict.success or state["turn"] + 1 >= team.turns
    record = turn_record(state["turn"], verdict, state["output"])
    get_stream_writer()({"event": "turn_end", **record, "done": done})
    return {
        "feedback": verdict.feedback,
        "assessments": [record],
        "done": done,
        "turn": state["turn"] if done else state["turn"] + 1,
    }


def assess(team: Team, state: Mapping[str, Any], cut_off: Sequence[bool]) -> Assessment:
    """The environment's verdict on the team's latest parts (`state`'s outputs, as combined)."""
    texts = [state["outputs"][i] for i in range(team.size)]
    return team.work.assess(
        team.task, team.roles, texts, state.get("combined"), team.checker, cut_off
    )


def turn_record(turn: int, verdict: Assessment, output: str) -> dict:
    """A turn's entry in `EpisodeResult.assessments`."""
    return {
        "turn": turn,
        "success": verdict.success,
        "feedback": verdict.feedback,
        "details": verdict.details,
        "output": output,
        "report": verdict.report,
    }


def share_drafts(state: TeamState) -> dict:
    """one_round_discussion's barrier: every first draft is in before anyone revises."""
    return {}


# -- routes ----------------------------------------------------------------------------------


def send_all(team: Team, node: str, round: int, state: TeamState) -> list[Send]:
    """Fan out: every agent acts at once on its own view."""
    return [
        Send(
            node,
            View(agent=i, turn=state["turn"], round=round, messages=observe(team, state, i, round)),
        )
        for i in range(team.size)
    ]


def next_turn(first: Callable[[TeamState], Any], state: TeamState) -> Any:
    return END if state["done"] else first(state)


# -- graphs ----------------------------------------------------------------------------------


def parallel_graph(team: Team):
    """parallel, single and naive_concat: everyone at once, then combine and judge."""
    fan_out = partial(send_all, team, "agent", 0)
    graph = StateGraph(TeamState)
    graph.add_node("agent", partial(act, team))
    graph.add_node("combine", partial(combine, team))
    graph.add_node("environment", partial(environment, team))
    graph.add_conditional_edges(START, fan_out, ["agent"])
    graph.add_edge("agent", "combine")
    graph.add_edge("combine", "environment")
    graph.add_conditional_edges("environment", partial(next_turn, fan_out), ["agent", END])
    return graph.compile()


def sequential_graph(team: Team):
    """sequential_pipeline: agent 0, then 1 (seeing 0), then 2 (seeing 0 and 1), ..."""
    graph = StateGraph(TeamState)
    names = [f"agent_{k}" for k in range(team.size)]
    for k, name in enumerate(names):
        graph.add_node(name, partial(act_in_line, team, k))
    graph.add_node("combine", partial(combine, team))
    graph.add_node("environment", partial(environment, team))
    graph.add_edge(START, names[0])
    for earlier, later in zip(names, names[1:], strict=False):
        graph.add_edge(earlier, later)
    graph.add_edge(names[-1], "combine")
    graph.add_edge("combine", "environment")
    graph.add_conditional_edges(
        "environment", partial(next_turn, lambda _: names[0]), [names[0], END]
    )
    return graph.compile()


def discussion_graph(team: Team):
    """one_round_discussion: independent drafts, then each revises after seeing the others'."""
    drafts = partial(send_all, team, "draft", 0)
    graph = StateGraph(TeamState)
    graph.add_node("draft", partial(act, team))
    graph.add_node("share_drafts", share_drafts)
    graph.add_node("revise", partial(act, team))
    graph.add_node("combine", partial(combine, team))
    graph.add_node("environment", partial(environment, team))
    graph.add_conditional_edges(START, drafts, ["draft"])
    graph.add_edge("draft", "share_drafts")
    graph.add_conditional_edges("share_drafts", partial(send_all, team, "revise", 1), ["revise"])
    graph.add_edge("revise", "combine")
    graph.add_edge("combine", "environment")
    graph.add_conditional_edges("environment", partial(next_turn, drafts), ["draft", END])
    return graph.compile()


GRAPHS = {
    **dict.fromkeys(("parallel", "single", "naive_concat"), parallel_graph),
    "sequential_pipeline": sequential_graph,
    "one_round_discussion": discussion_graph,
    "scaffolded": parallel_graph,  # parallel, with the environment's scaffold in the roles
}


def requests_at_once(shape: str, size: int) -> int:
    """The model requests an episode of `shape` with `size` agents has in flight at once: one per
    agent where they work side by side, one where they take turns."""
    return 1 if shape == "sequential_pipeline" else size


def build_graph(team: Team):
    """The compiled LangGraph graph of the team's shape."""
    return GRAPHS[team.shape](team)


def initial_state(team: Team) -> TeamState:
    return TeamState(
        turn=0,
        outputs={},
        steps=[],
        feedback=[""] * team.size,
        combined=None,
        output="",
        assessments=[],
        done=False,
    )
