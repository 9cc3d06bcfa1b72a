"""The adapter registry: register, activate, roll back, reject, lineage."""

from __future__ import annotations

import json
import sqlite3

import pytest

import store
from agents.serving.policy import PolicyError
from learner import registry


def states(db, agent=0):
    return {a["version"]: a["state"] for a in store.adapter_lineage(db, agent)}


def test_register_numbers_versions_per_agent(db):
    first = store.register_adapter(db, 0, "adapters/agent0/v1", metrics={"loss": 1.2})
    second = store.register_adapter(db, 0, "adapters/agent0/v2", parent=1)
    other = store.register_adapter(db, 1, "adapters/agent1/v1")
    assert (first["version"], second["version"], other["version"]) == (1, 2, 1)
    assert first["state"] == "candidate" and first["metrics"] == {"loss": 1.2}
    assert (second["parent_version"], second["path"]) == (1, "adapters/agent0/v2")
    assert store.register_adapter(db, 0, "adapters/agent0/v7", version=7)["version"] == 7
    assert store.active_adapters(db, "coding") == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"agent": 0, "parent": 9}, "no adapter version 9 to be the parent"),
        ({"agent": 0, "version": 1}, "already has an adapter version 1"),
        ({"agent": 0, "version": 0}, "numbered from 1"),
        ({"agent": -1}, "numbered from 0"),
        ({"agent": 1, "parent": 1}, "agent2 has no adapter version 1"),
    ],
)
def test_bad_registrations_are_refused(db, kwargs, message):
    store.register_adapter(db, 0, "v1")
    with pytest.raises(store.AdapterError, match=message):
        store.register_adapter(db, path="vX", **kwargs)
    assert db["adapters"].count == 1


def test_activate_retires_the_previous_one(db):
    for version in (1, 2):
        store.register_adapter(db, 0, f"v{version}", parent=version - 1 or None)
    store.register_adapter(db, 1, "agent1-v1")
    store.activate_adapter(db, 0, 1)
    store.activate_adapter(db, 1, 1)
    active = store.activate_adapter(db, 0, 2)
    assert active["state"] == "active" and active["activated_at"]
    assert states(db) == {1: "retired", 2: "active"}
    assert store.get_adapter(db, 0, 1)["retired_at"]
    assert {agent: a["version"] for agent, a in store.active_adapters(db, "coding").items()} == {
        0: 2,
        1: 1,
    }
    assert store.activate_adapter(db, 0, 2)["activated_at"] == active["activated_at"]


def test_database_allows_one_active_adapter_per_agent(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2")
    store.activate_adapter(db, 0, 1)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db.execute("UPDATE adapters SET state = 'active' WHERE agent = 0 AND version = 2")
    assert states(db) == {1: "active", 2: "candidate"}


def test_rollback_undoes_activations_one_at_a_time(db):
    for version in (1, 2, 3):
        store.register_adapter(db, 0, f"v{version}", parent=version - 1 or None)
        store.activate_adapter(db, 0, version)

    assert store.rollback_adapter(db, 0, "coding")["version"] == 2
    assert states(db) == {1: "retired", 2: "active", 3: "retired"}
    assert store.rollback_adapter(db, 0, "coding")["version"] == 1
    assert store.rollback_adapter(db, 0, "coding") is None  # back to the base model
    assert store.active_adapters(db, "coding") == {}
    with pytest.raises(store.AdapterError, match="no active coding adapter"):
        store.rollback_adapter(db, 0, "coding")


def test_rollback_returns_to_what_was_active_not_the_parent(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    store.register_adapter(db, 0, "v3", parent=1)  # trained from v1 while v2 was being tried
    store.activate_adapter(db, 0, 2)
    store.activate_adapter(db, 0, 3)
    assert store.rollback_adapter(db, 0, "coding")["version"] == 2


def test_rollback_falls_back_to_the_parent(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    store.activate_adapter(db, 0, 2)  # activated first: nothing active before it
    assert store.rollback_adapter(db, 0, "coding")["version"] == 1


def test_rollback_target_names_what_rollback_will_activate_and_changes_nothing(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    with pytest.raises(store.AdapterError, match="no active coding adapter"):
        store.rollback_target(db, 0, "coding")
    store.activate_adapter(db, 0, 1)
    store.activate_adapter(db, 0, 2)
    assert store.rollback_target(db, 0, "coding")["version"] == 1
    assert states(db) == {1: "retired", 2: "active"}
    store.rollback_adapter(db, 0, "coding")
    assert store.rollback_target(db, 0, "coding") is None  # v1 replaced nothing and has no parent


def test_rejected_candidates_are_never_activated(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    store.activate_adapter(db, 0, 1)
    assert store.reject_adapter(db, 0, 2)["state"] == "rejected"
    with pytest.raises(store.AdapterError, match="rejected"):
        store.activate_adapter(db, 0, 2)
    with pytest.raises(store.AdapterError, match="only a candidate"):
        store.reject_adapter(db, 0, 1)
    assert states(db) == {1: "active", 2: "rejected"}


def test_lineage_lists_versions_with_parents(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    store.register_adapter(db, 0, "v3", parent=2)
    store.register_adapter(db, 1, "other agent")
    lineage = store.adapter_lineage(db, 0)
    assert [(a["version"], a["parent_version"]) for a in lineage] == [(1, None), (2, 1), (3, 2)]


def test_metrics_are_merged(db):
    store.register_adapter(db, 0, "v1", metrics={"loss": 0.5})
    updated = store.update_adapter_metrics(db, 0, 1, {"eval_pass_rate": 0.7})
    assert updated["metrics"] == {"loss": 0.5, "eval_pass_rate": 0.7}
    with pytest.raises(store.NotFound):
        store.update_adapter_metrics(db, 0, 9, {})


class RefusingServer:
    """A policy client whose server refuses every adapter load."""

    loaded: dict = {}

    def serves(self, name, path):
        return False

    def load_adapter(self, name, path):
        raise PolicyError(f"cannot load {name}")


def test_a_rollback_the_server_refuses_leaves_the_store_as_it_was(db):
    store.register_adapter(db, 0, "v1")
    store.register_adapter(db, 0, "v2", parent=1)
    store.activate_adapter(db, 0, 1)
    store.activate_adapter(db, 0, 2)
    with pytest.raises(PolicyError, match="agent1-v1"):
        registry.rollback(db, RefusingServer(), 0, "coding")
    assert states(db) == {1: "retired", 2: "active"}


def test_each_kind_of_work_has_its_own_active_version(db):
    """A team trained on coding answers Co-code and one trained on writing Co-write: training,
    promoting or rolling back one kind leaves the other serving; an agent with no version of a
    kind runs the base model on that kind."""
    coder = store.register_adapter(db, 0, "adapters/agent1/v1")
    writer = store.register_adapter(db, 0, "adapters/agent1/v2", kind="writing")
    other = store.register_adapter(db, 1, "adapters/agent2/v1", kind="writing")
    for row in (coder, writer, other):
        store.activate_adapter(db, row["agent"], row["version"])
    assert states(db) == {1: "active", 2: "active"}  # the writer retired no coder
    assert registry.serving_adapters(db, 2, "coding") == ["agent1-v1", None]
    assert registry.serving_adapters(db, 2, "writing") == ["agent1-v2", "agent2-v1"]
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):  # one per agent and kind
        store.register_adapter(db, 0, "adapters/agent1/v3", kind="writing")
        db.execute("UPDATE adapters SET state = 'active' WHERE agent = 0 AND version = 3")
    assert store.rollback_adapter(db, 0, "writing") is None  # the writer had no parent
    assert registry.serving_adapters(db, 2, "writing") == [None, "agent2-v1"]
    assert registry.serving_adapters(db, 2, "coding") == ["agent1-v1", None]
    with pytest.raises(store.AdapterError, match="no active writing adapter"):
        store.rollback_adapter(db, 0, "writing")
    with pytest.raises(
        store.AdapterError,
        match=r"trained on one kind of work \(coding, writing, class\), not 'essays'",
    ):
        store.register_adapter(db, 0, "v9", kind="essays")


def test_a_rollback_never_reaches_a_version_of_the_other_kind(db):
    store.register_adapter(db, 0, "v1")  # coding
    store.register_adapter(db, 0, "v2", parent=1, kind="writing")  # registered by hand so
    store.activate_adapter(db, 0, 2)
    assert store.rollback_target(db, 0, "writing") is None  # the base model, not coding's v1
    assert store.rollback_adapter(db, 0, "writing") is None
    assert states(db) == {1: "candidate", 2: "retired"}


def test_the_upgrade_gives_each_old_version_the_kind_it_was_trained_on(tmp_path):
    """Schema 4: a version of a writing run, a shipped one whose card records a writing run,
    and the rest (coding runs, registered by hand) as coding; both actives stay active."""
    path = tmp_path / "coteam.db"
    with store.open_db(path, migrate=False) as db:
        store.migrate_schema(db, target=3)
        writing = store.start_training_run(db, "manual", config={"task": "summary"})
        store.finish_training_run(db, writing)
        coding = store.start_training_run(db, "manual", config={"task": "coding"})
        card = {"versions": {"1": {"training_run": {"config": {"task": "longform"}}}}}
        for agent, run, metrics in ((0, writing, {}), (0, coding, {}), (1, None, {"card": card})):
            db["adapters"].insert(
                {"agent": agent, "path": "p", "training_run_id": run, "created_at": "2026-12-01",
                 "version": len(store.adapter_lineage(db, agent)) + 1, "metrics": json.dumps(metrics),
                 "state": "active" if agent == 1 or run == coding else "retired"}
            )  # fmt: skip
    with store.open_db(path) as db:
        assert [(r["agent"], r["version"], r["kind"]) for r in store.adapter_lineage(db, 0)] == [
            (0, 1, "writing"),
            (0, 2, "coding"),
        ]
        assert store.get_adapter(db, 1, 1)["kind"] == "writing"
        assert registry.serving_adapters(db, 2, "coding") == ["agent1-v2", None]
        assert registry.serving_adapters(db, 2, "writing") == [None, "agent2-v1"]


class RecordingServer:
    """A policy client that loads every adapter asked for and writes the loads down."""

    def __init__(self):
        self.loaded: dict[str, str] = {}

    def serves(self, name, path):
        return self.loaded.get(name) == path

    def load_adapter(self, name, path):
        self.loaded[name] = path


def test_a_run_loads_the_version_from_names_and_a_resumed_run_loads_nothing_for_it(tmp_path):
    """`--from agent1-v1` (a rejected candidate) with agent1-v2 serving: a new run loads v1 for
    itself alone (unloaded at its end) beside the serving team; resumed, the run goes on from its
    checkpoint, so v1 is only its candidates' parent and nothing is loaded for it."""
    from learner.config import TrainArgs
    from learner.train import start_team

    db_path = tmp_path / "coteam.db"
    with store.open_db(db_path) as db:
        for version in (1, 2):
            store.register_adapter(db, 0, str(tmp_path / f"v{version}"))
        store.reject_adapter(db, 0, 1)
        store.activate_adapter(db, 0, 2)
    args = TrainArgs(start_from="agent1-v1")
    server = RecordingServer()
    start, names, borrowed = start_team(args, server, db_path, resumed=False)
    assert (start[0]["version"], names, borrowed) == (1, ["agent1-v1", None], ["agent1-v1"])
    assert server.loaded == {"agent1-v2": str(tmp_path / "v2"), "agent1-v1": str(tmp_path / "v1")}
    server = RecordingServer()
    start, names, borrowed = start_team(args, server, db_path, resumed=True)
    assert (start[0]["version"], names, borrowed, server.loaded) == (1, ["agent1-v1", None], [], {})
    server = RecordingServer()  # no --from: the serving team, loaded if the server lacks it
    assert start_team(TrainArgs(), server, db_path, resumed=False)[1:] == (["agent1-v2", None], [])
    assert server.loaded == {"agent1-v2": str(tmp_path / "v2")}
