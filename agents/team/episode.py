"""Running a team and recording it: `run_episode` streams one team's graph (agents/team/graph.py)
and records each agent call in the store the moment it is done, so all database writes happen
in the caller's thread; `run_group` runs a MAGRPO group of episodes of one task at once.

Every product path plays episodes through `learner.episode.play`, which calls these with the
task kind's checker and scores what they return.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from sqlite_utils import Database

import store
from agents.kinds import team_roles
from agents.tasks import Task, save_task
from agents.team.feedback import CodeChecker, parse_check, verdict_checks
from agents.team.graph import Event, Policy, Team, TeamSettings, build_graph, initial_state
from agents.team.result import EpisodeResult
from agents.team.roles import team_size


def make_team(
    task: Task,
    policy: Policy,
    settings: TeamSettings = TeamSettings(),  # noqa: B008
    checker: CodeChecker = parse_check,
) -> Team:
    """Check the settings and put a team together (see `run_episode`)."""
    size = team_size(settings.shape, settings.agents)
    roles = team_roles(task, settings.shape, size, settings.prompts)
    if settings.turns < 1:
        raise ValueError(f"an episode has at least one turn, not {settings.turns}")
    return Team(task, settings, roles, team_adapters(settings.adapters, size), policy, checker)


def team_adapters(
    adapters: Sequence[str | None] | Mapping[int, str | None] | None, size: int
) -> list[str | None]:
    """Each agent's adapter name (None: the base model) from a list, an index -> name mapping
    (a missing agent: the base model) or None (all base); raises ValueError on a mismatch."""
    if isinstance(adapters, Mapping):
        unknown = set(adapters) - set(range(size))
        if unknown:
            named = ", ".join(str(agent + 1) for agent in sorted(unknown))
            raise ValueError(
                f"an adapter for agent {named}, but the team has {size} (agents 1 to {size})"
            )
        return [adapters.get(i) for i in range(size)]
    names = list(adapters) if adapters else [None] * size
    if len(names) != size:
        raise ValueError(f"{len(names)} adapters for a team of {size}")
    return names


def run_episode(
    task: Task,
    policy: Policy,
    settings: TeamSettings = TeamSettings(),  # noqa: B008
    *,
    checker: CodeChecker = parse_check,
    db: Database | str | Path | None = None,
    group_id: str | None = None,
    sample_index: int = 0,
    on_event: Callable[[Event], None] | None = None,
) -> EpisodeResult:
    """Run one episode of a team on `task`, record it in the store as it happens, return it.

    `settings` (agents/team/graph.py `TeamSettings`): the shape (one of SHAPES), the team size
    (2-4; `single` has 1), the turn limit, each agent's adapter on the server, role prompts
    (see agents/team/roles.py) and the sampling. `checker` judges code (default: parse-level;
    the sandbox's checker runs the tests). `db` is an open store connection of this thread, or
    a database path (None: the default one) opened here. `on_event` gets every event, in this
    thread: episode_start, agent_start, token (per-agent streamed text), agent_done (a recorded
    `Step`), turn_end (success and feedback), episode_end.
    """
    team = make_team(task, policy, settings, checker)
    emit = on_event or (lambda event: None)
    database = db if isinstance(db, Database) else store.open_db(db)
    try:
        result = _record_episode(team, database, emit, group_id, sample_index)
    finally:
        if database is not db:
            database.close()
    emit({"event": "episode_end", "episode_id": result.episode_id, "result": result})
    return result


def _record_episode(
    team: Team,
    db: Database,
    emit: Callable[[Event], None],
    group_id: str | None,
    sample_index: int,
) -> EpisodeResult:
    """Open the episode in the store, run the team's graph recording each call, close it."""
    task_id = save_task(db, team.task)
    params = {
        "sampling": asdict(team.sampling),
        "turns": team.turns,
        "adapters": team.adapters,
        "checker": getattr(team.checker, "__name__", type(team.checker).__name__),
    }
    roles = [role.name for role in team.roles]
    with store.recording_episode(
        db,
        task_id,
        shape=team.shape,
        roles=roles,
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
                "shape": team.shape,
                "roles": roles,
                "adapters": team.adapters,
            }
        )
        start = time.perf_counter()
        state = _run_graph(team, db, episode_id, emit)
        wall_time_s = time.perf_counter() - start
        last = state["assessments"][-1]
        store.finish_episode(
            db,
            episode_id,
            state["output"],
            wall_time_s=wall_time_s,
            passed=last["success"],
            checks=verdict_checks(last, [role.title for role in team.roles]),
        )
    return EpisodeResult(
        episode_id=episode_id,
        task_id=task_id,
        task=team.task,
        shape=team.shape,
        roles=team.roles,
        adapters=team.adapters,
        steps=sorted(state["steps"], key=lambda s: (s["turn"], s["round"], s["agent"])),
        output=state["output"],
        success=state["assessments"][-1]["success"],
        turns=len(state["assessments"]),
        wall_time_s=wall_time_s,
        assessments=state["assessments"],
        token_budget=team.sampling.max_tokens * team.turns,
    )


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
    settings: TeamSettings = TeamSettings(),  # noqa: B008
    *,
    checker: CodeChecker = parse_check,
    db: str | Path | None = None,
) -> list[EpisodeResult]:
    """Run `samples` episodes of one team on one task at once (a MAGRPO group), sharing a
    `group_id`; sample g is `sample_index` g, seeded `seed + 100 g` when the sampling has a seed.
    Each runs in its own thread with its own database connection (so `db` is a path), and all
    their requests reach the server together."""
    if isinstance(db, Database):
        raise ValueError("run_group opens one connection per episode: pass a database path")
    group_id = uuid.uuid4().hex
    with ThreadPoolExecutor(max_workers=samples) as pool:
        futures = [
            pool.submit(
                run_episode,
                task,
                policy,
                settings.for_sample(g),
                checker=checker,
                db=db,
                group_id=group_id,
                sample_index=g,
            )  # fmt: skip
            for g in range(samples)
        ]
        return [future.result() for future in futures]
