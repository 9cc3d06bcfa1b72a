"""Agent teams as LangGraph graphs, and `run_episode`, which runs one and records it.

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

After every turn the environment node (agents/feedback.py) turns the combined result into
feedback for each agent's next observation; the episode ends on success or at the turn limit.

Agents acting at once are Send tasks, which LangGraph runs in threads: their requests reach the
server together and it batches them. Nodes stream per-agent tokens through LangGraph's "custom"
stream mode; `run_episode` reads the "updates" stream to record each agent's turn in the store
as soon as it is done, so all database writes happen in the caller's thread. It returns an
`EpisodeResult` (agents/episode_result.py); `run_group` runs a MAGRPO group of them at once.

The policy is anything with `generate(requests, on_token) -> completions`, like `PolicyClient`.
"""

from __future__ import annotations

import json
import operator
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Protocol, TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from sqlite_utils import Database

import store
from agents.combine import CombinedCode, combine_code, combine_sections, concat_code
from agents.episode_result import EpisodeResult, Step
from agents.feedback import Assessment, CodeChecker, assess_code, assess_writing, parse_check
from agents.outline import assemble, document_sections, outline_of, writer_stop
from agents.policy import Completion, Request
from agents.roles import (
    FEEDBACK,
    NO_FEEDBACK,
    OWN_DRAFT,
    PREVIOUS_ANSWER,
    TASK_FRAMES,
    TEAMMATE_PART,
    TEAMMATES_BEFORE,
    TEAMMATES_DRAFTS,
    Role,
    fill,
    frame_echo,
    team_roles,
    token_share,
)
from agents.sentences import drop_repeats
from agents.tasks import Task, save_task
from agents.writer import continuing, earliest, go_on, without_stray_hash

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
    max_tokens: int = 256
    seed: int | None = None  # with a seed, agent i samples with seed + i
    logprobs: bool = False  # return token ids and sampling log-probabilities (for the learner)
    # > 1 discourages repeating what is already in the context (the model card's value is 1.1);
    # greedy long-form writing otherwise falls into loops
    repetition_penalty: float = 1.0


GREEDY = Sampling(temperature=0.0, top_p=1.0)  # for evaluation
MAX_TURNS = 4  # the most turns the Co-code/Co-write pages and a training run give an episode


@dataclass
class Team:
    """Everything that stays fixed during an episode."""

    task: Task
    shape: str
    roles: list[Role]
    adapters: list[str | None]  # agent i's adapter name on the server; None: the base model
    sampling: Sampling
    turns: int
    policy: Policy
    checker: CodeChecker = parse_check

    @property
    def size(self) -> int:
        return len(self.roles)

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
    frame = TASK_FRAMES["coding" if team.task.kind == "coding" else team.task.form]
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
    write({"event": "agent_start", **where, "role": team.roles[agent].name})
    s = team.sampling
    share = token_share(team.roles[agent])
    # a reply the environment began (see `observe`) is the agent's answer with its beginning
    begun = view["messages"][-1]["content"] if view["messages"][-1]["role"] == "assistant" else ""
    long_form = team.task.form == "longform"
    outline = outline_of(team.task) if long_form else []
    # a long-form writer stops at a teammate's section or a loop; any reply, where it copies
    # one of the frames of its view (its last answer, the feedback, teammates' drafts)
    writer = writer_stop(outline, team.roles[agent].sections) if long_form else None
    stop_when = earliest(writer, frame_echo)
    request = Request(
        messages=view["messages"],
        adapter=team.adapters[agent],
        max_tokens=s.max_tokens if share is None else min(s.max_tokens, share),
        temperature=s.temperature,
        top_p=s.top_p,
        seed=None if s.seed is None else s.seed + agent,
        logprobs=s.logprobs,
        repetition_penalty=s.repetition_penalty,
        stop=list(team.roles[agent].stop) or None,
        stop_when=continuing(stop_when, begun),
    )
    if begun:
        write({"event": "token", **where, "text": begun})
    stream = lambda _, piece: write({"event": "token", **where, "text": piece})  # noqa: E731
    [completion] = team.policy.generate([request], on_token=stream)
    text = without_stray_hash(request, completion, begun + completion.text)
    if long_form and not s.logprobs:  # a writer that left a section out goes on with it
        text, completion = go_on(
            team.policy, request, team.roles[agent], outline, stop_when, text, completion, stream
        )
    step = Step(
        **where,
        role=team.roles[agent].name,
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
    if team.task.form == "longform":
        outline = outline_of(team.task)
        sections = drop_repeats(document_sections(texts, outline, [r.sections for r in team.roles]))
        return {"combined": None, "output": assemble(team.task.extra["title"], outline, sections)}
    if team.task.kind != "coding":
        return {"combined": None, "output": combine_sections(texts)}
    if team.shape == "naive_concat":
        combined = concat_code(texts)
    else:
        owners = [role.owns for role in team.roles]
        combined = combine_code(texts, owners, team.task.preamble, team.task.prompt)
    return {"combined": combined, "output": combined.code}


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
    if team.task.kind == "coding":
        return assess_code(state["combined"], team.roles, team.task, team.checker, cut_off)
    texts = [state["outputs"][i] for i in range(team.size)]
    return assess_writing(texts, team.roles, cut_off)


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


# -- running and recording an episode --------------------------------------------------------


def team_size(shape: str, agents: int | str | None = None) -> int:
    """The team's size: `agents` when given (`role_names` refuses a size the shape cannot
    have), else 1 for `single` and 2 for the other shapes."""
    return int(agents) if agents is not None else (1 if shape == "single" else 2)


def size_from_setting(shape: str, size: int | str) -> int:
    """The size a team-size setting (the page's, `coteam eval --agents`) gives `shape`: the
    setting is for the team shapes, so `single` stays one agent."""
    return team_size(shape, None if shape == "single" else size)


def make_team(
    task: Task,
    policy: Policy,
    *,
    shape: str = "parallel",
    agents: int | None = None,
    turns: int = 1,
    adapters: Sequence[str | None] | Mapping[int, str | None] | None = None,
    sampling: Sampling = Sampling(),
    prompts: dict[str, str] | None = None,
    checker: CodeChecker = parse_check,
) -> Team:
    """Check the settings and put a team together (see `run_episode` for the arguments)."""
    size = team_size(shape, agents)
    roles = team_roles(task, shape, size, prompts)
    if turns < 1:
        raise ValueError(f"an episode has at least one turn, not {turns}")
    return Team(task, shape, roles, team_adapters(adapters, size), sampling, turns, policy, checker)


def team_adapters(
    adapters: Sequence[str | None] | Mapping[int, str | None] | None, size: int
) -> list[str | None]:
    """Each agent's adapter name (None: the base model) from a list, an index -> name mapping
    (a missing agent: the base model) or None (all base); raises ValueError on a mismatch."""
    if isinstance(adapters, Mapping):
        unknown = set(adapters) - set(range(size))
        if unknown:
            raise ValueError(f"adapters for agents {sorted(unknown)}, but the team has {size}")
        return [adapters.get(i) for i in range(size)]
    names = list(adapters) if adapters else [None] * size
    if len(names) != size:
        raise ValueError(f"{len(names)} adapters for a team of {size}")
    return names


def run_episode(
    task: Task,
    policy: Policy,
    *,
    shape: str = "parallel",
    agents: int | None = None,
    turns: int = 1,
    adapters: Sequence[str | None] | Mapping[int, str | None] | None = None,
    sampling: Sampling = Sampling(),
    prompts: dict[str, str] | None = None,
    checker: CodeChecker = parse_check,
    db: Database | str | Path | None = None,
    group_id: str | None = None,
    sample_index: int = 0,
    on_event: Callable[[Event], None] | None = None,
) -> EpisodeResult:
    """Run one episode of a team on `task`, record it in the store as it happens, return it.

    `shape` is one of SHAPES; `agents` the team size (2-4; `single` has 1); `turns` the turn
    limit; `adapters` agent index -> adapter name on the server (None or missing: the base
    model); `prompts` overrides role prompts (see agents/roles.py); `checker` judges code
    (default: parse-level; the sandbox's checker runs the tests). `db` is an open store
    connection of this thread, or a database path (None: the default one) opened here.
    `on_event` gets every event, in this thread: episode_start, agent_start, token (per-agent
    streamed text), agent_done (a recorded `Step`), turn_end (success and feedback), episode_end.
    """
    team = make_team(
        task,
        policy,
        shape=shape,
        agents=agents,
        turns=turns,
        adapters=adapters,
        sampling=sampling,
        prompts=prompts,
        checker=checker,
    )
    emit = on_event or (lambda event: None)
    database = db if isinstance(db, Database) else store.open_db(db)
    try:
        task_id = save_task(database, task)
        params = {
            "sampling": asdict(sampling),
            "turns": turns,
            "adapters": team.adapters,
            "checker": getattr(checker, "__name__", type(checker).__name__),
        }
        with store.recording_episode(
            database,
            task_id,
            shape=shape,
            roles=[role.name for role in team.roles],
            adapter_versions=[store.recorded_version(name) for name in team.adapters],
            group_id=group_id,
            sample_index=sample_index,
            params=params,
        ) as episode_id:
            emit(
                {
                    "event": "episode_start",
                    "episode_id": episode_id,
                    "task_id": task_id,
                    "shape": shape,
                    "roles": [r.name for r in team.roles],
                    "adapters": team.adapters,
                }
            )
            start = time.perf_counter()
            state = _run_graph(team, database, episode_id, emit)
            wall_time_s = time.perf_counter() - start
            store.finish_episode(database, episode_id, state["output"], wall_time_s=wall_time_s)
    finally:
        if database is not db:
            database.close()
    result = EpisodeResult(
        episode_id=episode_id,
        task_id=task_id,
        task=task,
        shape=shape,
        roles=team.roles,
        adapters=team.adapters,
        steps=sorted(state["steps"], key=lambda s: (s["turn"], s["round"], s["agent"])),
        output=state["output"],
        success=state["assessments"][-1]["success"],
        turns=len(state["assessments"]),
        wall_time_s=wall_time_s,
        assessments=state["assessments"],
        token_budget=sampling.max_tokens * turns,
    )
    emit({"event": "episode_end", "episode_id": episode_id, "result": result})
    return result


def _run_graph(team: Team, db: Database, episode_id: int, emit: Callable[[Event], None]) -> dict:
    """Stream the graph; record each agent call the moment it is done; return the final state."""
    graph = build_graph(team)
    config = {"recursion_limit": team.turns * (team.size + 6) + 10}
    state: dict = {}
    for mode, chunk in graph.stream(
        initial_state(team), config, stream_mode=["custom", "updates", "values"]
    ):
        if mode == "custom":
            emit({**chunk, "episode_id": episode_id})
        elif mode == "updates":
            for update in chunk.values():
                for step in (update or {}).get("steps", []):
                    store.add_turn(
                        db,
                        episode_id,
                        turn=step["turn"] * team.rounds + step["round"],
                        agent=step["agent"],
                        observation=json.dumps(step["messages"]),
                        completion=step["text"],
                        prompt_tokens=step["prompt_tokens"],
                        completion_tokens=step["completion_tokens"],
                        latency_s=step["latency_s"],
                    )
                    emit({"event": "agent_done", "episode_id": episode_id, **step})
        else:
            state = chunk
    return state


def run_group(
    task: Task,
    policy: Policy,
    samples: int,
    *,
    db: str | Path | None = None,
    sampling: Sampling = Sampling(),
    **settings: Any,
) -> list[EpisodeResult]:
    """Run `samples` episodes of one team on one task at once (a MAGRPO group), sharing a
    `group_id`; sample g is `sample_index` g. Each runs in its own thread with its own database
    connection (so `db` is a path), and all their requests reach the server together."""
    if isinstance(db, Database):
        raise ValueError("run_group opens one connection per episode: pass a database path")
    group_id = uuid.uuid4().hex
    with ThreadPoolExecutor(max_workers=samples) as pool:
        futures = [
            pool.submit(
                run_episode,
                task,
                policy,
                db=db,
                group_id=group_id,
                sample_index=g,
                sampling=sampling
                if sampling.seed is None
                else replace(sampling, seed=sampling.seed + 100 * g),
                **settings,
            )
            for g in range(samples)
        ]
        return [future.result() for future in futures]
