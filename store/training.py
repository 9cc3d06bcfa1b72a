"""Training runs and the episodes each one learns from.

A run goes `running` -> `ok` | `failed` | `cancelled`; only one runs at a time (the database
enforces it). The learner's loop, with the admin UI able to cancel it from another process:

    run_id = start_training_run(db, "schedule", config=asdict(args))
    episodes = claim_training_data(db, run_id, adapter_versions=[3, 2])
    for step in ...:
        if update_training_run(db, run_id, progress=step / steps, metrics={...}) != "running":
            break                                  # cancelled meanwhile
    finish_training_run(db, run_id, metrics={...})

Training data is the finished ('ok') episodes that are rated or rewarded and not yet used by a
run that is running or succeeded: a failed or cancelled run gives its episodes back.
`recover_interrupted()`, run at start-up, fails the runs and episodes whose process died.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlite_utils import Database

from store.db import (
    InvalidState,
    NotFound,
    StoreError,
    current_owner,
    decode_json,
    fail_orphaned,
    now,
    rows,
    write_transaction,
)
from store.episodes import get_episodes, mark_interrupted_episodes

RUN_JSON = ("config", "metrics")


class TrainingRunBusy(StoreError):
    """Another training run is still running."""


def start_training_run(db: Database, trigger: str, *, config: dict | None = None) -> int:
    """Record the start of a training run (why: e.g. 'schedule', 'manual'); return its id.

    Raises `TrainingRunBusy` if a run is already running.
    """
    if not isinstance(trigger, str) or not trigger:
        raise ValueError("a training run needs a trigger, e.g. 'schedule' or 'manual'")
    with write_transaction(db):
        running = rows(db, "SELECT id, owner FROM training_runs WHERE state = 'running'")
        if running:
            raise TrainingRunBusy(
                f"training run {running[0]['id']} is still running (in {running[0]['owner']})"
            )
        stamp = now()
        row = {
            "trigger": trigger,
            "state": "running",
            "config": json.dumps(config or {}),
            "owner": current_owner(),
            "started_at": stamp,
            "updated_at": stamp,
        }
        return db["training_runs"].insert(row).last_pk


def update_training_run(
    db: Database,
    run_id: int,
    *,
    progress: float | None = None,
    message: str | None = None,
    metrics: dict | None = None,
) -> str:
    """Report progress (0 to 1), a status line and metrics (merged into earlier ones).

    Returns the run's state; anything but 'running' (e.g. cancelled from the UI) means stop.
    A run that is no longer running is left unchanged.
    """
    if progress is not None and not 0 <= progress <= 1:
        raise ValueError(f"progress runs from 0 to 1, got {progress!r}")
    with write_transaction(db):
        run = get_training_run(db, run_id)
        if run["state"] != "running":
            return run["state"]
        updates: dict = {"updated_at": now()}
        if progress is not None:
            updates["progress"] = progress
        if message is not None:
            updates["message"] = message
        if metrics:
            updates["metrics"] = json.dumps({**run["metrics"], **metrics})
        db["training_runs"].update(run_id, updates)
        return "running"


def finish_training_run(db: Database, run_id: int, *, metrics: dict | None = None) -> None:
    """Mark a running run 'ok' (progress 1), merging in its final metrics."""
    with write_transaction(db):
        run = get_training_run(db, run_id)
        if run["state"] != "running":
            raise InvalidState(f"training run {run_id} is {run['state']}, no longer running")
        _end_run(db, run, "ok", metrics=metrics, progress=1.0)


def fail_training_run(db: Database, run_id: int, error: str) -> bool:
    """Mark a running run 'failed' with the error; return False if it had already ended."""
    return _end_if_running(db, run_id, "failed", error=error)


def cancel_training_run(db: Database, run_id: int, reason: str | None = None) -> bool:
    """Mark a running run 'cancelled'; return False if it had already ended.

    The learner sees it at its next `update_training_run`, and the episodes go back to the pool.
    """
    return _end_if_running(db, run_id, "cancelled", error=reason)


def get_training_run(db: Database, run_id: int) -> dict:
    """One run as a dict (config and metrics decoded, plus `episode_count`); raises `NotFound`."""
    found = rows(
        db,
        "SELECT r.*, (SELECT count(*) FROM training_examples x WHERE x.run_id = r.id)"
        " AS episode_count FROM training_runs r WHERE r.id = ?",
        [run_id],
    )
    if not found:
        raise NotFound(f"no training run {run_id}")
    return decode_json(found[0], *RUN_JSON)


def list_training_runs(db: Database, *, limit: int = 20, offset: int = 0) -> list[dict]:
    """A page of training runs, newest first."""
    found = rows(
        db,
        "SELECT r.*, (SELECT count(*) FROM training_examples x WHERE x.run_id = r.id)"
        " AS episode_count FROM training_runs r ORDER BY r.id DESC LIMIT ? OFFSET ?",
        [limit, offset],
    )
    return [decode_json(row, *RUN_JSON) for row in found]


def mark_interrupted_runs(db: Database, *, all_running: bool = False) -> list[int]:
    """Fail the 'running' runs whose process is gone (all of them with `all_running`); ids."""

    def fail(run: dict) -> None:
        error = f"interrupted: the process running it ({run['owner']}) stopped"
        _end_run(db, decode_json(run, *RUN_JSON), "failed", error=error)

    return fail_orphaned(db, "training_runs", "state", fail, all_running=all_running)


def recover_interrupted(db: Database, *, all_running: bool = False) -> dict[str, list[int]]:
    """Fail every episode and training run a killed process left 'running' (run at start-up);
    return the ids of each kind, e.g. `{"episodes": [4], "runs": []}`."""
    return {
        "episodes": mark_interrupted_episodes(db, all_running=all_running),
        "runs": mark_interrupted_runs(db, all_running=all_running),
    }


def _end_if_running(db: Database, run_id: int, state: str, *, error: str | None) -> bool:
    with write_transaction(db):
        run = get_training_run(db, run_id)
        if run["state"] != "running":
            return False
        _end_run(db, run, state, error=error)
        return True


def _end_run(
    db: Database,
    run: dict,
    state: str,
    *,
    error: str | None = None,
    metrics: dict | None = None,
    progress: float | None = None,
) -> None:
    stamp = now()
    updates: dict = {"state": state, "error": error, "updated_at": stamp, "finished_at": stamp}
    if metrics:
        updates["metrics"] = json.dumps({**run["metrics"], **metrics})
    if progress is not None:
        updates["progress"] = progress
    db["training_runs"].update(run["id"], updates)


# -- training data ---------------------------------------------------------------------------


def training_data(
    db: Database,
    *,
    adapter_versions: Sequence[int] | None = None,
    task_kind: str | None = None,
    rated_only: bool = False,
    limit: int | None = None,
) -> list[dict]:
    """The episodes available for training, oldest first, as `get_episode` dicts; reads only.

    Available: status 'ok', rated or rewarded (rated only with `rated_only`), and not used by
    a running or successful run. `adapter_versions` keeps the episodes produced by exactly that
    team of versions (on-policy data). Groups stay whole: if `limit` cuts a group of samples
    (same `group_id`), its other available members come too.
    """
    return get_episodes(db, _available_ids(db, adapter_versions, task_kind, rated_only, limit))


def claim_training_data(
    db: Database,
    run_id: int,
    *,
    adapter_versions: Sequence[int] | None = None,
    task_kind: str | None = None,
    rated_only: bool = False,
    limit: int | None = None,
) -> list[dict]:
    """Pick the training data as `training_data` does and mark it used by the run, atomically.

    The run must be running. If it later fails or is cancelled, the episodes become available
    again.
    """
    with write_transaction(db):
        run = get_training_run(db, run_id)
        if run["state"] != "running":
            raise InvalidState(f"training run {run_id} is {run['state']}, no longer running")
        ids = _available_ids(db, adapter_versions, task_kind, rated_only, limit)
        db["training_examples"].insert_all({"run_id": run_id, "episode_id": i} for i in ids)
        return get_episodes(db, ids)


def _available_ids(
    db: Database,
    adapter_versions: Sequence[int] | None,
    task_kind: str | None,
    rated_only: bool,
    limit: int | None,
) -> list[int]:
    if limit is not None and limit < 0:
        raise ValueError("limit cannot be negative")
    rated = (
        "EXISTS (SELECT 1 FROM ratings r WHERE r.episode_id = e.id OR r.other_episode_id = e.id)"
    )
    clauses = [
        "e.status = 'ok'",
        rated if rated_only else f"(e.reward IS NOT NULL OR {rated})",
        """NOT EXISTS (SELECT 1 FROM training_examples x JOIN training_runs run
            ON run.id = x.run_id WHERE x.episode_id = e.id AND run.state IN ('running', 'ok'))""",
    ]
    params: dict = {"limit": -1 if limit is None else limit}  # LIMIT -1: no limit
    if adapter_versions is not None:
        clauses.append("json(e.adapter_versions) = json(:versions)")
        params["versions"] = json.dumps(list(adapter_versions))
    if task_kind is not None:
        clauses.append("t.kind = :task_kind")
        params["task_kind"] = task_kind
    available = f"""
        SELECT e.id, e.group_id FROM episodes e JOIN tasks t ON t.id = e.task_id
        WHERE {" AND ".join(clauses)}"""
    picked = rows(db, f"{available} ORDER BY e.id LIMIT :limit", params)
    ids = [row["id"] for row in picked]
    groups = sorted({row["group_id"] for row in picked if row["group_id"] is not None})
    if groups and limit is not None:
        marks = ", ".join(f":group{i}" for i in range(len(groups)))
        group_params = {f"group{i}": group for i, group in enumerate(groups)}
        rest = rows(
            db,
            f"{available} AND e.group_id IN ({marks}) ORDER BY e.id",
            {**params, **group_params},
        )
        known = set(ids)
        ids += [row["id"] for row in rest if row["id"] not in known]
    return ids
