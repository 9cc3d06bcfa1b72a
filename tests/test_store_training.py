"""Training runs (progress, cancel, interruption) and picking the episodes they learn from."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

import store


def finished(db, task_id, versions=(0, 0), group_id=None, kind_of_feedback="reward"):
    episode_id = store.start_episode(
        db,
        task_id,
        shape="parallel",
        roles=["helper", "main"],
        adapter_versions=list(versions),
        group_id=group_id,
    )
    store.add_turn(db, episode_id, turn=0, agent=0, observation="o", completion="c")
    store.finish_episode(db, episode_id, "out")
    if kind_of_feedback == "reward":
        store.record_rewards(db, episode_id, {"quality": 1.0}, 1.0, {"quality": 1.0})
    elif kind_of_feedback == "rating":
        store.add_rating(db, episode_id, "thumbs", value=1)
    return episode_id


def test_run_reports_progress_and_finishes(db):
    run_id = store.start_training_run(db, "manual", config={"lr": 1e-5})
    assert (
        store.update_training_run(
            db, run_id, progress=0.5, message="step 5/10", metrics={"loss": 2.0}
        )
        == "running"
    )
    assert store.update_training_run(db, run_id, metrics={"reward": 0.3}) == "running"
    run = store.get_training_run(db, run_id)
    assert (run["state"], run["progress"], run["message"]) == ("running", 0.5, "step 5/10")
    assert run["metrics"] == {"loss": 2.0, "reward": 0.3} and run["config"] == {"lr": 1e-5}

    store.finish_training_run(db, run_id, metrics={"loss": 1.0})
    run = store.get_training_run(db, run_id)
    assert (run["state"], run["progress"], run["error"]) == ("ok", 1.0, None)
    assert run["metrics"] == {"loss": 1.0, "reward": 0.3} and run["finished_at"]
    with pytest.raises(store.InvalidState):
        store.finish_training_run(db, run_id)


def test_progress_outside_zero_to_one_is_refused(db):
    run_id = store.start_training_run(db, "manual")
    with pytest.raises(ValueError, match="0 to 1"):
        store.update_training_run(db, run_id, progress=1.5)
    assert store.get_training_run(db, run_id)["progress"] == 0


def test_one_run_at_a_time(db):
    first = store.start_training_run(db, "schedule")
    with pytest.raises(store.TrainingRunBusy, match=f"training run {first} is still running"):
        store.start_training_run(db, "manual")
    assert store.fail_training_run(db, first, "out of memory") is True
    second = store.start_training_run(db, "manual")
    assert [r["id"] for r in store.list_training_runs(db)] == [second, first]
    assert store.get_training_run(db, first)["error"] == "out of memory"


def test_cancel_is_seen_by_the_next_update(db):
    run_id = store.start_training_run(db, "manual")
    assert store.cancel_training_run(db, run_id, "stopped from the admin tab") is True
    assert store.update_training_run(db, run_id, progress=0.9) == "cancelled"
    run = store.get_training_run(db, run_id)
    assert (run["state"], run["progress"]) == ("cancelled", 0)
    assert store.cancel_training_run(db, run_id) is False
    assert store.fail_training_run(db, run_id, "late") is False
    with pytest.raises(store.NotFound):
        store.get_training_run(db, 999)


def test_interrupted_runs_of_dead_processes_are_failed(db):
    run_id = store.start_training_run(db, "schedule")
    assert store.mark_interrupted_runs(db) == []  # this process is alive
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    db["training_runs"].update(
        run_id, {"owner": f"{socket.gethostname()}:{child.stdout.strip()}:1.00"}
    )
    assert store.mark_interrupted_runs(db) == [run_id]
    run = store.get_training_run(db, run_id)
    assert run["state"] == "failed" and run["error"].startswith("interrupted")
    store.start_training_run(db, "schedule")  # the slot is free again


def test_training_data_is_finished_rated_or_rewarded_and_unused(db, task_id):
    rewarded = finished(db, task_id)
    rated = finished(db, task_id, kind_of_feedback="rating")
    finished(db, task_id, kind_of_feedback=None)  # neither: not training data
    failed = store.start_episode(db, task_id, shape="single", roles=["w"])
    store.record_rewards(db, failed, {"quality": 0.0}, 0.0, {"quality": 1.0})
    store.fail_episode(db, failed, "crashed")

    assert [e["id"] for e in store.training_data(db)] == [rewarded, rated]
    assert [e["id"] for e in store.training_data(db, rated_only=True)] == [rated]
    assert store.training_data(db, task_kind="writing") == []
    picked = store.training_data(db, limit=1)[0]
    assert picked["turns"][0]["completion"] == "c" and picked["rewards"] == {"quality": 1.0}


def test_claimed_episodes_are_used_until_their_run_fails(db, task_id):
    first, second = finished(db, task_id), finished(db, task_id)
    run_id = store.start_training_run(db, "schedule")
    assert [e["id"] for e in store.claim_training_data(db, run_id, limit=1)] == [first]
    assert [e["id"] for e in store.training_data(db)] == [second]
    assert store.get_training_run(db, run_id)["episode_count"] == 1

    store.cancel_training_run(db, run_id)  # a cancelled run gives its episodes back
    assert [e["id"] for e in store.training_data(db)] == [first, second]

    run_id = store.start_training_run(db, "schedule")
    assert len(store.claim_training_data(db, run_id)) == 2
    store.finish_training_run(db, run_id)
    assert store.training_data(db) == []
    with pytest.raises(store.InvalidState):
        store.claim_training_data(db, run_id)


def test_training_data_by_adapter_versions(db, task_id):
    old = finished(db, task_id, versions=(1, 1))
    new = finished(db, task_id, versions=(2, 1))
    assert [e["id"] for e in store.training_data(db, adapter_versions=[2, 1])] == [new]
    assert [e["id"] for e in store.training_data(db, adapter_versions=(1, 1))] == [old]
    assert store.training_data(db, adapter_versions=[2]) == []


def test_a_limit_never_splits_a_group(db, task_id):
    group = [finished(db, task_id, group_id="task-1-draw-7") for _ in range(3)]
    loner = finished(db, task_id)
    assert [e["id"] for e in store.training_data(db, limit=1)] == group
    assert [e["id"] for e in store.training_data(db, limit=4)] == [*group, loner]
