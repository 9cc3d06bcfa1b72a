"""Tasks and episodes: what the team was asked, what each agent saw and said, and the rewards.

An episode is recorded as it runs, each step its own committed transaction, so a crash leaves a
row that says so rather than a half-written one:

    with recording_episode(db, task_id, shape="parallel", roles=["helper", "main"]) as episode_id:
        add_turn(db, episode_id, turn=0, agent=0, observation=obs, completion=text, ...)
        ...
        finish_episode(db, episode_id, final_output=joined)
    record_rewards(db, episode_id, {"quality": 0.8, ...}, joint=0.7, weights={"quality": 1.0})

An exception inside the block marks the episode 'failed' with the error; a process killed
outright leaves it 'running', and `mark_interrupted_episodes()` (run at start-up) finds the rows
whose recording process is gone and marks them failed.

Agents are numbered from 0 within their team; `adapter_versions[i]` is the adapter version agent
i ran (0 is the base model, None an unregistered adapter such as a training run's scratch one,
see `store.adapters.recorded_version`). Reading: `get_episode` (everything about one episode),
`get_episodes` (many, in one go), `list_episodes` / `count_episodes` (filtered pages for the UI).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from store.db import (
    InvalidState,
    NotFound,
    check_storable_json,
    check_storable_text,
    current_owner,
    decode_json,
    fail_orphaned,
    now,
    rows,
    seconds_since,
    write_transaction,
)

MAX_TEAM_SIZE = 4
MAX_ERROR_CHARS = 20_000  # a traceback is useful; a runaway one must not bloat the file
EPISODE_JSON = ("roles", "adapter_versions", "params", "reward_weights", "checks")


# -- tasks -----------------------------------------------------------------------------------


def create_task(
    db: Database,
    kind: str,
    prompt: str,
    *,
    source: str = "user",
    source_id: str | None = None,
    metadata: dict | None = None,
) -> int:
    """Add a task and return its id.

    `kind` is e.g. 'writing' or 'coding'; `metadata` holds what the checker needs (tests, entry
    point). With a `source_id`, the task is created once: the same (source, source_id) again
    returns the existing id, so a curated set can be imported repeatedly.
    """
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError("a task needs a kind, e.g. 'writing' or 'coding'")
    if not isinstance(prompt, str):
        raise ValueError("a task's prompt must be text")
    check_storable_text("prompt", prompt)
    if metadata is not None:
        check_storable_json("task's metadata", metadata)
    with write_transaction(db):
        if source_id is not None:
            existing = rows(
                db,
                "SELECT id FROM tasks WHERE source = ? AND source_id = ?",
                [source, source_id],
            )
            if existing:
                return existing[0]["id"]
        row = {
            "kind": kind,
            "prompt": prompt,
            "source": source,
            "source_id": source_id,
            "metadata": json.dumps(metadata or {}),
            "created_at": now(),
        }
        return db["tasks"].insert(row).last_pk


def get_task(db: Database, task_id: int) -> dict:
    """One task as a dict (metadata decoded); raises `NotFound`."""
    found = rows(db, "SELECT * FROM tasks WHERE id = ?", [task_id])
    if not found:
        raise NotFound(f"no task {task_id}")
    return decode_json(found[0], "metadata")


# -- recording an episode --------------------------------------------------------------------


def start_episode(
    db: Database,
    task_id: int,
    *,
    shape: str,
    roles: Sequence[str],
    adapter_versions: Sequence[int | None] | None = None,
    group_id: str | None = None,
    sample_index: int = 0,
    params: dict | None = None,
) -> int:
    """Record that a team started on a task; return the new episode's id (status 'running').

    `roles[i]` is agent i's role, so the team size is `len(roles)`; `adapter_versions[i]` the
    adapter version it runs (default: all 0, the base model; None: an adapter that is no
    registered version, e.g. a training run's scratch adapter). `group_id` and `sample_index`
    tie together the G joint samples drawn for one task; `params` holds sampling settings.
    """
    roles = list(roles)
    if not 1 <= len(roles) <= MAX_TEAM_SIZE:
        raise ValueError(f"a team has 1 to {MAX_TEAM_SIZE} agents, got {len(roles)} roles")
    if not all(isinstance(role, str) and role for role in roles):
        raise ValueError(f"roles must be non-empty strings, got {roles!r}")
    versions = list(adapter_versions) if adapter_versions is not None else [0] * len(roles)
    if len(versions) != len(roles):
        raise ValueError(f"{len(roles)} roles but {len(versions)} adapter versions")
    if not all(v is None or (isinstance(v, int) and v >= 0) for v in versions):
        raise ValueError(
            f"adapter versions are integers >= 0 (0 = base) or None (unregistered), got {versions!r}"
        )
    if not isinstance(shape, str) or not shape:
        raise ValueError("an episode needs a team shape, e.g. 'parallel'")
    with write_transaction(db):
        get_task(db, task_id)
        row = {
            "task_id": task_id,
            "shape": shape,
            "team_size": len(roles),
            "roles": json.dumps(roles),
            "adapter_versions": json.dumps(versions),
            "group_id": group_id,
            "sample_index": sample_index,
            "params": json.dumps(params or {}),
            "status": "running",
            "owner": current_owner(),
            "started_at": now(),
        }
        return db["episodes"].insert(row).last_pk


def add_turn(
    db: Database,
    episode_id: int,
    *,
    turn: int,
    agent: int,
    observation: str,
    completion: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    latency_s: float = 0.0,
) -> int:
    """Record what agent `agent` saw and wrote at turn `turn` (both from 0); return the row id."""
    if not isinstance(turn, int) or turn < 0:
        raise ValueError(f"turn numbers start at 0, got {turn!r}")
    if not isinstance(observation, str) or not isinstance(completion, str):
        raise ValueError("a turn's observation and completion must be text")
    if prompt_tokens < 0 or completion_tokens < 0 or not latency_s >= 0:
        raise ValueError("token counts and latency cannot be negative")
    with write_transaction(db):
        episode = _episode_row(db, episode_id)
        _require_running(episode)
        _require_agent(episode, agent)
        clash = rows(
            db,
            "SELECT 1 FROM turns WHERE episode_id = ? AND turn = ? AND agent = ?",
            [episode_id, turn, agent],
        )
        if clash:
            raise ValueError(f"episode {episode_id} already has turn {turn} of agent {agent}")
        row = {
            "episode_id": episode_id,
            "turn": turn,
            "agent": agent,
            "observation": observation,
            "completion": completion,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "latency_s": latency_s,
            "created_at": now(),
        }
        return db["turns"].insert(row).last_pk


def finish_episode(
    db: Database,
    episode_id: int,
    final_output: str,
    *,
    wall_time_s: float | None = None,
    passed: bool | None = None,
    checks: Sequence[dict] = (),
) -> None:
    """Mark a running episode 'ok' with its final output; turns and tokens are totalled here.

    `wall_time_s` defaults to the time since `start_episode`. `passed` is the environment's
    verdict on the output (None: not judged) and `checks` what it is made of, each a dict with
    `name`, `passed` and `message` (a program's tests, a class's test classes, a document's
    checks per part).
    """
    if not isinstance(final_output, str):
        raise ValueError("the final output must be text")
    for check in checks:
        if not {"name", "passed", "message"} <= set(check) or not isinstance(check["passed"], bool):
            raise ValueError(f"a check needs name, passed (a bool) and message, got {check!r}")
    with write_transaction(db):
        episode = _episode_row(db, episode_id)
        _require_running(episode)
        _close_episode(db, episode, "ok", final_output=final_output, wall_time_s=wall_time_s)
        if passed is not None or checks:  # else the schema's: not judged, no checks
            verdict = {"passed": None if passed is None else int(passed)}
            db["episodes"].update(episode_id, verdict | {"checks": json.dumps(list(checks))})


def fail_episode(
    db: Database, episode_id: int, error: str, *, final_output: str | None = None
) -> bool:
    """Mark a running episode 'failed' with the error; return False if it had already ended."""
    with write_transaction(db):
        episode = _episode_row(db, episode_id)
        if episode["status"] != "running":
            return False
        _close_episode(db, episode, "failed", final_output=final_output, error=error)
        return True


@contextlib.contextmanager
def recording_episode(
    db: Database,
    task_id: int,
    *,
    shape: str,
    roles: Sequence[str],
    adapter_versions: Sequence[int | None] | None = None,
    group_id: str | None = None,
    sample_index: int = 0,
    params: dict | None = None,
) -> Iterator[int]:
    """Start an episode, yield its id, and mark it failed if the block raises.

    Call `finish_episode` inside the block; a block that ends without it also leaves the
    episode failed, never 'running'. Cancellation (KeyboardInterrupt, a closed generator)
    counts as an error.
    """
    episode_id = start_episode(
        db,
        task_id,
        shape=shape,
        roles=roles,
        adapter_versions=adapter_versions,
        group_id=group_id,
        sample_index=sample_index,
        params=params,
    )
    try:
        yield episode_id
    except BaseException as error:
        fail_episode(
            db, episode_id, f"{type(error).__name__}: {error}" if str(error) else repr(error)
        )
        raise
    if _episode_row(db, episode_id)["status"] == "running":
        fail_episode(db, episode_id, "the recording ended without finish_episode()")


def record_rewards(
    db: Database,
    episode_id: int,
    components: dict[str, float],
    joint: float,
    weights: dict[str, float],
) -> None:
    """Store an episode's reward components and the joint reward made from them with `weights`.

    Replaces any earlier rewards of the episode (a reward may be recomputed, e.g. once a person
    has rated it), in one transaction.
    """
    for name, value in [*components.items(), *weights.items(), ("joint", joint)]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"reward names are non-empty strings, got {name!r}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"reward {name!r} must be a finite number, got {value!r}")
    with write_transaction(db):
        _episode_row(db, episode_id)
        db.execute("DELETE FROM rewards WHERE episode_id = ?", [episode_id])
        db["rewards"].insert_all(
            {"episode_id": episode_id, "name": name, "value": float(value)}
            for name, value in components.items()
        )
        db.execute(
            "UPDATE episodes SET reward = ?, reward_weights = ? WHERE id = ?",
            [float(joint), json.dumps(weights), episode_id],
        )


def mark_interrupted_episodes(db: Database, *, all_running: bool = False) -> list[int]:
    """Mark failed the 'running' episodes whose recording process is gone; return their ids.

    Run it at start-up. With `all_running=True` every running episode is marked, e.g. when
    the recording processes lived on another host that is known to be down.
    """

    def fail(episode: dict) -> None:
        error = f"interrupted: the process recording it ({episode['owner']}) stopped"
        _close_episode(db, episode, "failed", error=error)

    return fail_orphaned(db, "episodes", "status", fail, all_running=all_running)


def _close_episode(
    db: Database,
    episode: dict,
    status: str,
    *,
    final_output: str | None = None,
    error: str | None = None,
    wall_time_s: float | None = None,
) -> None:
    totals = rows(
        db,
        "SELECT count(DISTINCT turn) AS turn_count, coalesce(sum(prompt_tokens), 0) AS prompt,"
        " coalesce(sum(completion_tokens), 0) AS completion FROM turns WHERE episode_id = ?",
        [episode["id"]],
    )[0]
    updates = {
        "status": status,
        "final_output": final_output,
        "error": error[:MAX_ERROR_CHARS] if error is not None else None,
        "turn_count": totals["turn_count"],
        "prompt_tokens": totals["prompt"],
        "completion_tokens": totals["completion"],
        "wall_time_s": wall_time_s
        if wall_time_s is not None
        else seconds_since(episode["started_at"]),
        "finished_at": now(),
    }
    db["episodes"].update(episode["id"], updates)


def _episode_out(row: dict) -> dict:
    """An episode row as callers see it: its JSON decoded, its verdict a bool (or None)."""
    episode = decode_json(row, *EPISODE_JSON)
    episode["passed"] = None if episode["passed"] is None else bool(episode["passed"])
    return episode


def _episode_row(db: Database, episode_id: int) -> dict:
    found = rows(db, "SELECT * FROM episodes WHERE id = ?", [episode_id])
    if not found:
        raise NotFound(f"no episode {episode_id}")
    return found[0]


def _require_running(episode: dict) -> None:
    if episode["status"] != "running":
        raise InvalidState(f"episode {episode['id']} is {episode['status']}, no longer running")


def _require_agent(episode: dict, agent: Any) -> None:
    if (
        not isinstance(agent, int)
        or isinstance(agent, bool)
        or not 0 <= agent < episode["team_size"]
    ):
        raise ValueError(
            f"episode {episode['id']} has agents 0 to {episode['team_size'] - 1}, not {agent!r}"
        )


# -- reading episodes ------------------------------------------------------------------------


def get_episode(db: Database, episode_id: int) -> dict:
    """Everything about one episode: its task, turns, reward components and ratings.

    Raises `NotFound`. The dict has the episode's columns (JSON decoded), plus `task` (dict),
    `turns` (list, by turn then agent), `rewards` ({name: value}) and `ratings` (list, both
    those on this episode and pairwise ones where it is the right-hand side).
    """
    found = get_episodes(db, [episode_id])
    if not found:
        raise NotFound(f"no episode {episode_id}")
    return found[0]


def get_episodes(db: Database, episode_ids: Sequence[int]) -> list[dict]:
    """Like `get_episode` for many ids at once (missing ids are skipped), in the order given."""
    ids = list(dict.fromkeys(episode_ids))
    found: dict[int, dict] = {}
    for start in range(0, len(ids), 500):  # keep each IN (...) list well under SQLite's limit
        chunk = ids[start : start + 500]
        in_chunk = set(chunk)
        marks = ", ".join("?" * len(chunk))
        for row in rows(db, f"SELECT * FROM episodes WHERE id IN ({marks})", chunk):
            episode = _episode_out(row)
            episode.update(turns=[], rewards={}, ratings=[])
            found[row["id"]] = episode
        tasks = {
            task["id"]: decode_json(task, "metadata")
            for task in rows(
                db,
                f"SELECT * FROM tasks WHERE id IN (SELECT task_id FROM episodes "
                f"WHERE id IN ({marks}))",
                chunk,
            )
        }
        for episode_id in chunk:
            if episode_id in found:
                found[episode_id]["task"] = tasks[found[episode_id]["task_id"]]
        for turn in rows(
            db,
            f"SELECT * FROM turns WHERE episode_id IN ({marks}) ORDER BY turn, agent",
            chunk,
        ):
            found[turn["episode_id"]]["turns"].append(turn)
        for reward in rows(
            db, f"SELECT * FROM rewards WHERE episode_id IN ({marks}) ORDER BY name", chunk
        ):
            found[reward["episode_id"]]["rewards"][reward["name"]] = reward["value"]
        for rating in rows(
            db,
            f"SELECT * FROM ratings WHERE episode_id IN ({marks}) "
            f"OR other_episode_id IN ({marks}) ORDER BY id",
            chunk + chunk,
        ):
            for side in ("episode_id", "other_episode_id"):
                if rating[side] in in_chunk and rating[side] in found:
                    found[rating[side]]["ratings"].append(rating)
    return [found[i] for i in ids if i in found]


@dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes `list_episodes` and `count_episodes` look at (None: no filter on it).

    `rated`: True has any rating, False none; `min_score`: mean team-level 1-5 score at least
    this; `adapter=(agent, version)`: that agent ran that adapter version (0: the base model).
    """

    task_kind: str | None = None
    task_id: int | None = None
    shape: str | None = None
    status: str | None = None
    rated: bool | None = None
    min_score: float | None = None
    adapter: tuple[int, int] | None = None
    group_id: str | None = None

    def where(self) -> tuple[str, dict]:
        """The SQL WHERE clause (on `episodes e JOIN tasks t`) and its parameters."""
        clauses, params = [], {}
        for name, column in [
            ("task_kind", "t.kind"),
            ("task_id", "e.task_id"),
            ("shape", "e.shape"),
            ("status", "e.status"),
            ("group_id", "e.group_id"),
        ]:
            if getattr(self, name) is not None:
                clauses.append(f"{column} = :{name}")
                params[name] = getattr(self, name)
        rated_sql = "EXISTS (SELECT 1 FROM ratings r WHERE r.episode_id = e.id OR r.other_episode_id = e.id)"
        if self.rated is not None:
            clauses.append(rated_sql if self.rated else f"NOT {rated_sql}")
        if self.min_score is not None:
            clauses.append(
                "(SELECT avg(r.value) FROM ratings r WHERE r.episode_id = e.id"
                " AND r.kind = 'score' AND r.agent IS NULL) >= :min_score"
            )
            params["min_score"] = self.min_score
        if self.adapter is not None:
            agent, version = self.adapter
            clauses.append("json_extract(e.adapter_versions, '$[' || :agent || ']') = :version")
            params.update(agent=agent, version=version)
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def list_episodes(
    db: Database, where: EpisodeFilter | None = None, *, limit: int = 50, offset: int = 0
) -> list[dict]:
    """One page of the episodes `where` selects (default: all), newest first, for the history view.

    Rows carry the episode's columns plus `task_kind`, `prompt`, `rating_count` and
    `mean_score`; no turns (see `get_episode`).
    """
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset cannot be negative")
    clause, params = (where or EpisodeFilter()).where()
    page = rows(
        db,
        f"""
        SELECT e.*, t.kind AS task_kind, t.prompt AS prompt,
            (SELECT count(*) FROM ratings r
             WHERE r.episode_id = e.id OR r.other_episode_id = e.id) AS rating_count,
            (SELECT avg(r.value) FROM ratings r
             WHERE r.episode_id = e.id AND r.kind = 'score' AND r.agent IS NULL) AS mean_score
        FROM episodes e JOIN tasks t ON t.id = e.task_id
        {clause}
        ORDER BY e.id DESC LIMIT :limit OFFSET :offset
        """,
        {**params, "limit": limit, "offset": offset},
    )
    return [_episode_out(row) for row in page]


def count_episodes(db: Database, where: EpisodeFilter | None = None) -> int:
    """How many episodes `list_episodes` would page through with the same filter."""
    clause, params = (where or EpisodeFilter()).where()
    sql = f"SELECT count(*) AS n FROM episodes e JOIN tasks t ON t.id = e.task_id {clause}"
    return rows(db, sql, params)[0]["n"]
