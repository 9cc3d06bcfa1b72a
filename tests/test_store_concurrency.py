"""Many writers at once, and writers killed mid-write, against a real database file.

Writers in other processes run `tests/store_worker.py`; see its docstring for the modes.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import store
from tests.store_worker import AGENTS, TURNS, record_one, wait_for

ROOT = Path(__file__).resolve().parent.parent
PROCESS_WRITERS = THREAD_WRITERS = 10
EPISODES_PER_WRITER = 6
HANG_GUARD_S = 120  # only stops a hung test; no assertion depends on time


def start_worker(*args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store_worker", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(process: subprocess.Popen) -> str:
    """The worker's next line of output; fails the test if the worker died or hung."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=HANG_GUARD_S):
            process.kill()
            pytest.fail("the worker printed nothing")
    line = process.stdout.readline()
    if not line:
        pytest.fail(f"the worker exited early:\n{process.stderr.read()}")
    return line.strip()


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()  # reaped: its pid is gone, as after a real crash
    process.stdout.close()
    process.stderr.close()


def integrity(db) -> str:
    return db.execute("PRAGMA integrity_check").fetchone()[0]


def test_twenty_writers_in_threads_and_processes_lose_nothing(tmp_path):
    path, go = tmp_path / "coteam.db", tmp_path / "go"
    store.open_db(path).close()  # the app has created the file before anyone records
    errors: list[BaseException] = []
    done = threading.Event()

    def thread_writer(writer: int) -> None:
        try:
            with store.open_db(path) as db:  # one connection per thread
                wait_for(go)
                for index in range(EPISODES_PER_WRITER):
                    record_one(db, writer, index)
        except BaseException as error:
            errors.append(error)

    def reader() -> None:
        try:
            with store.open_db(path) as db:
                wait_for(go)
                while not done.is_set():  # the history view, refreshed while everyone writes
                    store.list_episodes(db, store.EpisodeFilter(rated=True), limit=20)
                    store.count_episodes(db, store.EpisodeFilter(task_kind="coding"))
        except BaseException as error:
            errors.append(error)

    processes = [
        start_worker("record", path, writer, EPISODES_PER_WRITER, go)
        for writer in range(PROCESS_WRITERS)
    ]
    threads = [
        threading.Thread(target=thread_writer, args=(writer,))
        for writer in range(PROCESS_WRITERS, PROCESS_WRITERS + THREAD_WRITERS)
    ]
    watcher = threading.Thread(target=reader)
    for thread in [*threads, watcher]:
        thread.start()
    go.touch()
    outputs = [process.communicate(timeout=HANG_GUARD_S) for process in processes]
    for thread in threads:
        thread.join(HANG_GUARD_S)
    done.set()
    watcher.join(HANG_GUARD_S)

    assert errors == []
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert "database is locked" not in stderr
        assert process.returncode == 0, stderr

    writers = PROCESS_WRITERS + THREAD_WRITERS
    per_writer = EPISODES_PER_WRITER
    with store.open_db(path) as db:
        assert integrity(db) == "ok"
        assert db["tasks"].count == 1 + writers  # get-or-create raced, one row each
        assert db["episodes"].count == writers * per_writer
        assert store.count_episodes(db, store.EpisodeFilter(status="ok")) == writers * per_writer
        assert db["turns"].count == writers * per_writer * TURNS * AGENTS
        assert db["rewards"].count == writers * per_writer * 3
        assert db["ratings"].count == writers * (per_writer + per_writer - 1)
        for writer in range(writers):
            episodes = store.list_episodes(db, store.EpisodeFilter(group_id=f"writer-{writer}"))
            assert sorted(e["sample_index"] for e in episodes) == list(range(per_writer))
            assert {e["final_output"] for e in episodes} == {
                f"output of writer {writer} episode {i}" for i in range(per_writer)
            }


def test_processes_racing_to_create_a_new_database(tmp_path):
    path, go = tmp_path / "new" / "coteam.db", tmp_path / "go"
    processes = [start_worker("record", path, writer, 2, go) for writer in range(6)]
    go.touch()
    outputs = [process.communicate(timeout=HANG_GUARD_S) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr
    with store.open_db(path) as db:
        versions = [row["version"] for row in db.query("SELECT version FROM schema_version")]
        assert versions == list(range(1, store.LATEST_VERSION + 1))
        assert db["episodes"].count == 12
        assert integrity(db) == "ok"


def test_process_killed_inside_a_write_transaction(tmp_path):
    path = tmp_path / "coteam.db"
    with store.open_db(path) as db:
        kept = store.create_task(db, "writing", "written before the crash")
    worker = start_worker("hold", path)
    episode_id = int(read_line(worker).removeprefix("holding "))
    # the uncommitted turns have spilled into the WAL: the kill lands mid-write on disk
    assert Path(f"{path}-wal").stat().st_size > 1_000_000
    kill(worker)

    with store.open_db(path) as db:
        assert integrity(db) == "ok"
        assert store.get_task(db, kept)["prompt"] == "written before the crash"
        episode = store.get_episode(db, episode_id)
        assert episode["turns"] == []  # none of the killed transaction survives
        assert episode["status"] == "running"  # until someone notices its writer is gone
        assert store.mark_interrupted_episodes(db) == [episode_id]
        assert store.get_episode(db, episode_id)["status"] == "failed"
        # the dead writer's lock is gone: writing goes on at once
        store.create_task(db, "writing", "written after the crash")


@pytest.mark.parametrize("episodes_before_kill", [3, 11])
def test_process_killed_while_recording_in_a_loop(tmp_path, episodes_before_kill):
    path = tmp_path / "coteam.db"
    store.open_db(path).close()
    worker = start_worker("loop", path)
    finished = [int(read_line(worker)) for _ in range(episodes_before_kill)]
    kill(worker)  # somewhere in the next episode's writes

    with store.open_db(path) as db:
        assert integrity(db) == "ok"
        interrupted = store.mark_interrupted_episodes(db)
        assert len(interrupted) <= 1
        episodes = store.get_episodes(db, [e["id"] for e in store.list_episodes(db, limit=1000)])
        assert {e["id"] for e in episodes} >= set(finished)
        for episode in episodes:
            assert episode["status"] in ("ok", "failed")
            if episode["status"] == "ok":  # finished means complete
                assert len(episode["turns"]) == TURNS * AGENTS
            else:
                assert episode["id"] in interrupted
            if episode["reward"] is not None:  # rewards are all or nothing
                assert len(episode["rewards"]) == 3
        assert store.count_episodes(db, store.EpisodeFilter(status="running")) == 0
