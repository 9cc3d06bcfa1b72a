"""Opening the database and migrating its schema, on real files in a temporary folder."""

from __future__ import annotations

import sqlite3
import threading

import pytest

import store
from store import schema
from store.db import open_db, write_transaction


def table_names(db) -> set[str]:
    return set(db.table_names())


def test_open_sets_up_wal_busy_timeout_and_foreign_keys(tmp_path):
    with open_db(tmp_path / "coteam.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert store.schema_version(db) == schema.LATEST_VERSION


def test_default_path_is_under_coteam_home(tmp_path, monkeypatch):
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path / "home"))
    with open_db() as db:
        store.create_task(db, "writing", "hello")
    assert (tmp_path / "home" / "coteam.db").is_file()


def test_fresh_database_records_every_migration_once(tmp_path):
    path = tmp_path / "coteam.db"
    open_db(path).close()
    with open_db(path) as db:  # a second open finds nothing to do
        applied = [row["version"] for row in db.query("SELECT version FROM schema_version")]
    assert applied == list(range(1, schema.LATEST_VERSION + 1))


def test_first_schema_upgrades_in_place_keeping_its_data(tmp_path):
    path = tmp_path / "coteam.db"
    with open_db(path, migrate=False) as db:
        assert store.migrate_schema(db, target=1) == 1
        assert "training_runs" not in table_names(db)
        task_id = store.create_task(db, "coding", "write add()")
        episode_id = store.start_episode(db, task_id, shape="single", roles=["coder"])
        store.add_turn(db, episode_id, turn=0, agent=0, observation="o", completion="c")
        store.finish_episode(db, episode_id, "def add(a, b): return a + b")
        # a version-1 row, as the code of that version wrote it (today's has more columns)
        db["ratings"].insert(
            {"episode_id": episode_id, "kind": "thumbs", "value": 1, "created_at": "2026-01-01"}
        )

    with open_db(path) as db:
        assert store.schema_version(db) == schema.LATEST_VERSION
        assert {"training_runs", "training_examples", "adapters"} <= table_names(db)
        episode = store.get_episode(db, episode_id)
        assert episode["final_output"] == "def add(a, b): return a + b"
        assert [(r["kind"], r["counts"]) for r in episode["ratings"]] == [("thumbs", 1)]
        # the upgraded file works with the tables the upgrade added
        run_id = store.start_training_run(db, "manual")
        assert [e["id"] for e in store.claim_training_data(db, run_id)] == [episode_id]
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_newer_database_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "coteam.db"
    with open_db(path) as db:
        db.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (?, 'from the future')",
            [schema.LATEST_VERSION + 1],
        )
        before = list(db.query("SELECT * FROM sqlite_master ORDER BY name"))

    with pytest.raises(store.SchemaTooNew, match="newer CoTeam") as refused:
        open_db(path)
    assert str(path) in str(refused.value)

    conn = sqlite3.connect(path)
    after = conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall()
    versions = [row[0] for row in conn.execute("SELECT version FROM schema_version")]
    conn.close()
    assert [tuple(row.values()) for row in before] == after
    assert versions[-1] == schema.LATEST_VERSION + 1


def test_failed_migration_leaves_the_old_version(tmp_path, monkeypatch):
    path = tmp_path / "coteam.db"
    open_db(path).close()
    broken = [*schema.MIGRATIONS, ["CREATE TABLE half_done (x)", "THIS IS NOT SQL"]]
    monkeypatch.setattr(schema, "MIGRATIONS", broken)

    with pytest.raises(sqlite3.OperationalError):
        open_db(path)

    monkeypatch.undo()
    with open_db(path) as db:
        assert store.schema_version(db) == schema.LATEST_VERSION
        assert "half_done" not in table_names(db)


def test_unknown_target_version_is_refused(tmp_path):
    with open_db(tmp_path / "coteam.db") as db, pytest.raises(ValueError, match="no schema"):
        store.migrate_schema(db, target=schema.LATEST_VERSION + 1)


def test_write_transaction_commits_all_or_nothing(tmp_path):
    with open_db(tmp_path / "coteam.db") as db:
        with pytest.raises(RuntimeError), write_transaction(db):
            store.create_task(db, "writing", "kept only if the block succeeds")
            raise RuntimeError("boom")
        assert db["tasks"].count == 0
        with write_transaction(db):
            store.create_task(db, "writing", "one")
            store.create_task(db, "writing", "two")
        assert db["tasks"].count == 2


def test_a_connection_belongs_to_its_thread(tmp_path):
    db = open_db(tmp_path / "coteam.db")
    errors = []

    def use_from_another_thread():
        try:
            store.create_task(db, "writing", "from the wrong thread")
        except sqlite3.ProgrammingError as error:
            errors.append(error)

    thread = threading.Thread(target=use_from_another_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert db["tasks"].count == 0
    db.close()
