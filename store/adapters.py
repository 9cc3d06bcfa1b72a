"""The adapter registry: every LoRA adapter version of every agent, and which one is active.

States: `candidate` (registered, not yet served), `active` (the one new requests use, one per
agent and kind of work at most - the database enforces it), `retired` (was active, replaced or
rolled back; still on disk for rollback) and `rejected` (a candidate the promotion gate turned
down). Agent k with no active adapter of a kind runs the base model on that kind of work
(version 0 in episodes).

Kinds (`WORK_KINDS`): every version is trained on "coding", "writing" or "class", and serves only that
kind of work: a team trained on code answers Co-code, one trained on writing Co-write, each
with its own active version, promotion and rollback.

Versions are numbered from 1 per agent. `parent` is the version the adapter was trained from
(None: from the base model). Activation remembers the version it replaced, so
`rollback_adapter` undoes activations one at a time, like popping a stack:

    register_adapter(db, 0, "adapters/agent1/v3", parent=2)      # candidate (coding)
    activate_adapter(db, 0, 3)                                    # v2 -> retired, v3 active
    rollback_adapter(db, 0, "coding")                             # v3 -> retired, v2 active

Names: the store numbers a team's agents from 0; people (the page, the CLI, server names and the
registry's folders) from 1, by `agent_label`: version N of the store's agent 0 is served as
`agent1-vN` (`adapter_name`, `parse_adapter_name`). A training run serves each step's adapters
under scratch names (`training_adapter_name`), which are no registered version, so the episodes
they play are recorded with version None, not 0 (the base model): `recorded_version`. This is the
one place that builds or reads these names.
"""

from __future__ import annotations

import json
import re

from sqlite_utils import Database

from store.db import NotFound, StoreError, decode_json, now, rows, write_transaction

_REGISTERED = re.compile(r"agent([1-9]\d*)-v(\d+)")
WORK_KINDS = ("coding", "writing", "class")


def agent_label(agent: int) -> str:
    """How people know the store's agent `agent` (numbered from 0): `agent1` for agent 0."""
    return f"agent{agent + 1}"


def adapter_name(agent: int, version: int) -> str:
    """The server's name for version `version` of agent `agent`'s adapter: `agent1-v3` is
    version 3 of agent 0 (the page's agent 1)."""
    return f"{agent_label(agent)}-v{version}"


def parse_adapter_name(name: str | None) -> tuple[int, int] | None:
    """`agentK-vN` -> (K - 1, N), the store's agent and version; None for any other name (the
    base model, a scratch adapter)."""
    match = _REGISTERED.fullmatch(name or "")
    return (int(match.group(1)) - 1, int(match.group(2))) if match else None


def training_adapter_name(run_folder: str, step: int, agent: int) -> str:
    """The scratch name of agent `agent`'s adapter after step `step` of a training run whose
    scratch folder is `run_folder` (unique per run: a shared server may know older runs)."""
    return f"{run_folder}-s{step}-{agent_label(agent)}"


def recorded_version(name: str | None) -> int | None:
    """The adapter version an episode served by `name` records: 0 for the base model (no name),
    N for `agentK-vN`, None for any other adapter (a training run's scratch adapter)."""
    if name is None:
        return 0
    parsed = parse_adapter_name(name)
    return parsed[1] if parsed else None


def version_label(version: int | None) -> str:
    """How a recorded adapter version reads in the UI: `base`, `v3`, or `training` (None)."""
    if version is None:
        return "training"
    return f"v{version}" if version else "base"


class AdapterError(StoreError, ValueError):
    """A registry change that does not make sense (unknown parent, activating a rejected one)."""


def register_adapter(
    db: Database,
    agent: int,
    path: str,
    *,
    version: int | None = None,
    parent: int | None = None,
    metrics: dict | None = None,
    training_run_id: int | None = None,
    kind: str = "coding",
) -> dict:
    """Register a finished adapter folder as a candidate; return its row.

    `version` defaults to the agent's next number. `parent` must be a registered version of the
    same agent, or None for an adapter trained from the base model. `kind` is the work it was
    trained on (`WORK_KINDS`), the only work it will serve.
    """
    if isinstance(agent, bool) or not isinstance(agent, int) or agent < 0:
        raise AdapterError(f"agents are numbered from 0, got {agent!r}")
    if kind not in WORK_KINDS:
        raise AdapterError(
            f"an adapter is trained on one kind of work ({', '.join(WORK_KINDS)}), not {kind!r}"
        )
    with write_transaction(db):
        if version is None:
            version = (
                1
                + rows(
                    db,
                    "SELECT coalesce(max(version), 0) AS v FROM adapters WHERE agent = ?",
                    [agent],
                )[0]["v"]
            )
        elif not isinstance(version, int) or version < 1:
            raise AdapterError(f"adapter versions are numbered from 1, got {version!r}")
        elif _find(db, agent, version):
            raise AdapterError(f"{agent_label(agent)} already has an adapter version {version}")
        if parent is not None and not _find(db, agent, parent):
            raise AdapterError(
                f"{agent_label(agent)} has no adapter version {parent} to be the parent"
            )
        db["adapters"].insert(
            {
                "agent": agent,
                "version": version,
                "path": str(path),
                "parent_version": parent,
                "training_run_id": training_run_id,
                "metrics": json.dumps(metrics or {}),
                "state": "candidate",
                "kind": kind,
                "created_at": now(),
            }
        )
        return get_adapter(db, agent, version)


def get_adapter(db: Database, agent: int, version: int) -> dict:
    """One adapter's row (metrics decoded); raises `NotFound`."""
    found = _find(db, agent, version)
    if not found:
        raise NotFound(f"{agent_label(agent)} has no adapter version {version}")
    return found


def update_adapter_metrics(db: Database, agent: int, version: int, metrics: dict) -> dict:
    """Merge evaluation metrics into an adapter's metrics; return the row."""
    with write_transaction(db):
        adapter = get_adapter(db, agent, version)
        merged = {**adapter["metrics"], **metrics}
        db["adapters"].update(adapter["id"], {"metrics": json.dumps(merged)})
        return get_adapter(db, agent, version)


def activate_adapter(db: Database, agent: int, version: int) -> dict:
    """Make a version the agent's active adapter for its kind of work (the previous active one
    of that kind is retired).

    Any registered version but a rejected one can be activated; activating the active one
    changes nothing. Returns the activated row.
    """
    with write_transaction(db):
        target = get_adapter(db, agent, version)
        if target["state"] == "active":
            return target
        if target["state"] == "rejected":
            raise AdapterError(
                f"{agent_label(agent)} adapter v{version} was rejected; it cannot be active"
            )
        current = _active(db, agent, target["kind"])
        if current:
            _set_state(db, current, "retired")
        _set_state(
            db, target, "active", previous_active_version=current["version"] if current else None
        )
        return get_adapter(db, agent, version)


def rollback_target(db: Database, agent: int, kind: str) -> dict | None:
    """The version `rollback_adapter` would reactivate: the one the active adapter of `kind`
    replaced, else its parent (of the same kind), else None (the base model). Raises
    `AdapterError` if no adapter of that kind is active."""
    current = _active(db, agent, kind)
    if not current:
        raise AdapterError(f"{agent_label(agent)} has no active {kind} adapter to roll back")
    for version in (current["previous_active_version"], current["parent_version"]):
        if version is not None:
            target = get_adapter(db, agent, version)
            if target["state"] != "rejected" and target["kind"] == kind:
                return target
    return None


def rollback_adapter(db: Database, agent: int, kind: str) -> dict | None:
    """Retire the agent's active adapter of `kind` and reactivate the one it replaced.

    Falls back to its parent if nothing was active before it, and to the base model (returns
    None) if there is no parent either. Raises `AdapterError` if none of that kind is active.
    """
    with write_transaction(db):
        target = rollback_target(db, agent, kind)
        _set_state(db, _active(db, agent, kind), "retired")
        if target is None:
            return None
        # keep the target's own previous_active_version: a second rollback goes further back
        _set_state(db, target, "active")
        return get_adapter(db, agent, target["version"])


def reject_adapter(db: Database, agent: int, version: int) -> dict:
    """Mark a candidate the promotion gate turned down as rejected; return its row."""
    with write_transaction(db):
        adapter = get_adapter(db, agent, version)
        if adapter["state"] != "candidate":
            raise AdapterError(
                f"only a candidate can be rejected; agent {agent} v{version} is {adapter['state']}"
            )
        _set_state(db, adapter, "rejected")
        return get_adapter(db, agent, version)


def adapter_lineage(db: Database, agent: int) -> list[dict]:
    """Every adapter version of an agent, oldest first, with its parent and state."""
    found = rows(db, "SELECT * FROM adapters WHERE agent = ? ORDER BY version", [agent])
    return [decode_json(row, "metrics") for row in found]


def adapter_agents(db: Database) -> list[int]:
    """The agents that have at least one adapter version registered, in order."""
    return [row["agent"] for row in db.query("SELECT DISTINCT agent FROM adapters ORDER BY agent")]


def active_adapters(db: Database, kind: str) -> dict[int, dict]:
    """The active adapter of each agent that has one for `kind` of work, as {agent: row}."""
    found = rows(
        db, "SELECT * FROM adapters WHERE state = 'active' AND kind = ? ORDER BY agent", [kind]
    )
    return {row["agent"]: decode_json(row, "metrics") for row in found}


def answers_before_after(db: Database, agent: int, version: int, limit: int) -> list[dict]:
    """Prompts answered both by this version of `agent` and by the one before it (its parent,
    or the base model), newest task first: `prompt`, `before`, `after` (the latest ok answers)
    and their episodes' ids and reward components (`before_rewards`, `after_rewards`: {name:
    value}). The gate runs both teams on the same validation tasks, so every gated version has
    some."""
    parent = get_adapter(db, agent, version)["parent_version"] or 0
    by = "json_extract(e.adapter_versions, '$[' || :agent || ']')"
    latest = (
        "SELECT id FROM episodes e WHERE e.task_id = t.id AND e.status = 'ok' AND {by} = {v}"
        " ORDER BY e.id DESC LIMIT 1"
    )
    found = rows(
        db,
        f"""
        SELECT t.prompt, b.id AS before_id, b.final_output AS before,
            a.id AS after_id, a.final_output AS after
        FROM tasks t
        JOIN episodes b ON b.id = ({latest.format(by=by, v=":parent")})
        JOIN episodes a ON a.id = ({latest.format(by=by, v=":version")})
        ORDER BY t.id DESC LIMIT :limit
        """,
        {"agent": agent, "version": version, "parent": parent, "limit": limit},
    )
    ids = [pair[f"{side}_id"] for pair in found for side in ("before", "after")]
    rewards: dict[int, dict] = {i: {} for i in ids}
    marks = ", ".join("?" * len(ids))
    for r in rows(db, f"SELECT * FROM rewards WHERE episode_id IN ({marks})", ids) if ids else ():
        rewards[r["episode_id"]][r["name"]] = r["value"]
    for pair in found:
        for side in ("before", "after"):
            pair[f"{side}_rewards"] = rewards[pair[f"{side}_id"]]
    return found


def _find(db: Database, agent: int, version: int) -> dict | None:
    found = rows(db, "SELECT * FROM adapters WHERE agent = ? AND version = ?", [agent, version])
    return decode_json(found[0], "metrics") if found else None


def _active(db: Database, agent: int, kind: str) -> dict | None:
    found = rows(
        db,
        "SELECT * FROM adapters WHERE agent = ? AND kind = ? AND state = 'active'",
        [agent, kind],
    )
    return found[0] if found else None


def _set_state(db: Database, adapter: dict, state: str, **extra: object) -> None:
    stamp = {"active": "activated_at", "retired": "retired_at"}.get(state)
    updates = {"state": state, **extra}
    if stamp:
        updates[stamp] = now()
    db["adapters"].update(adapter["id"], updates)
