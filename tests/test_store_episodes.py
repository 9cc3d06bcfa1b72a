"""Tasks and episodes: recording as they run, failures, rewards, and the history pages."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

import store
from store.db import current_owner


def dead_owner() -> str:
    """An owner string naming a process of this host that has exited."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return f"{socket.gethostname()}:{int(child.stdout)}:0.00"


def record(db, task_id, *, shape="parallel", roles=("helper", "main"), versions=None, **kwargs):
    episode_id = store.start_episode(
        db, task_id, shape=shape, roles=list(roles), adapter_versions=versions, **kwargs
    )
    for agent in range(len(roles)):
        store.add_turn(db, episode_id, turn=0, agent=agent, observation="o", completion="c")
    store.finish_episode(db, episode_id, f"output {episode_id}")
    return episode_id


def test_task_with_source_id_is_created_once(db):
    first = store.create_task(db, "coding", "p", source="humaneval", source_id="HumanEval/0")
    again = store.create_task(db, "coding", "p", source="humaneval", source_id="HumanEval/0")
    other = store.create_task(db, "coding", "p", source="humaneval", source_id="HumanEval/1")
    assert first == again != other
    assert store.get_task(db, first)["source_id"] == "HumanEval/0"
    with pytest.raises(store.NotFound):
        store.get_task(db, 999)
    with pytest.raises(ValueError, match="kind"):
        store.create_task(db, " ", "no kind")


def test_episode_is_recorded_as_it_runs(db, task_id):
    episode_id = store.start_episode(
        db,
        task_id,
        shape="parallel",
        roles=["helper", "main"],
        adapter_versions=[3, 0],
        group_id="g",
        sample_index=1,
        params={"temperature": 0.8},
    )
    assert store.get_episode(db, episode_id)["status"] == "running"
    store.add_turn(
        db,
        episode_id,
        turn=0,
        agent=0,
        observation="o0",
        completion="c0",
        prompt_tokens=10,
        completion_tokens=5,
        latency_s=0.25,
    )
    store.add_turn(
        db,
        episode_id,
        turn=0,
        agent=1,
        observation="o1",
        completion="c1",
        prompt_tokens=12,
        completion_tokens=7,
    )
    store.add_turn(
        db,
        episode_id,
        turn=1,
        agent=1,
        observation="o2",
        completion="c2",
        prompt_tokens=20,
        completion_tokens=3,
    )
    store.finish_episode(db, episode_id, "joined", wall_time_s=1.5)

    episode = store.get_episode(db, episode_id)
    assert episode["status"] == "ok" and episode["error"] is None
    assert episode["final_output"] == "joined"
    assert (episode["turn_count"], episode["prompt_tokens"], episode["completion_tokens"]) == (
        2,
        42,
        15,
    )
    assert episode["wall_time_s"] == 1.5 and episode["finished_at"] >= episode["started_at"]
    assert episode["roles"] == ["helper", "main"] and episode["adapter_versions"] == [3, 0]
    assert episode["params"] == {"temperature": 0.8}
    assert (episode["group_id"], episode["sample_index"], episode["team_size"]) == ("g", 1, 2)
    assert episode["task"]["metadata"] == {"entry": "add"}
    assert [(t["turn"], t["agent"], t["completion"]) for t in episode["turns"]] == [
        (0, 0, "c0"),
        (0, 1, "c1"),
        (1, 1, "c2"),
    ]


def test_finished_episode_takes_no_more_writes(db, task_id):
    episode_id = record(db, task_id)
    with pytest.raises(store.InvalidState, match="no longer running"):
        store.add_turn(db, episode_id, turn=1, agent=0, observation="o", completion="late")
    with pytest.raises(store.InvalidState):
        store.finish_episode(db, episode_id, "twice")
    assert store.fail_episode(db, episode_id, "too late") is False
    assert store.get_episode(db, episode_id)["status"] == "ok"


@pytest.mark.parametrize(
    ("turn", "agent", "message"),
    [(0, 2, "agents 0 to 1"), (-1, 0, "start at 0"), (0, 0, "already has turn 0 of agent 0")],
)
def test_bad_turns_are_refused(db, task_id, turn, agent, message):
    episode_id = store.start_episode(db, task_id, shape="parallel", roles=["a", "b"])
    store.add_turn(db, episode_id, turn=0, agent=0, observation="o", completion="c")
    with pytest.raises(ValueError, match=message):
        store.add_turn(db, episode_id, turn=turn, agent=agent, observation="o", completion="c")
    assert len(store.get_episode(db, episode_id)["turns"]) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"roles": []}, "1 to 4 agents"),
        ({"roles": ["a"] * 5}, "1 to 4 agents"),
        ({"roles": ["a", ""]}, "non-empty"),
        ({"roles": ["a", "b"], "adapter_versions": [1]}, "2 roles but 1 adapter"),
        ({"roles": ["a"], "adapter_versions": [-1]}, "integers >= 0"),
        ({"roles": ["a"], "shape": ""}, "team shape"),
    ],
)
def test_bad_episodes_are_refused(db, task_id, kwargs, message):
    kwargs = {"shape": "parallel", **kwargs}
    with pytest.raises(ValueError, match=message):
        store.start_episode(db, task_id, **kwargs)
    assert db["episodes"].count == 0


def test_episode_of_unknown_task_is_refused(db):
    with pytest.raises(store.NotFound, match="no task 42"):
        store.start_episode(db, 42, shape="single", roles=["writer"])


def test_recording_episode_marks_failure_and_reraises(db, task_id):
    with (
        pytest.raises(ConnectionError),
        store.recording_episode(db, task_id, shape="single", roles=["writer"]) as episode_id,
    ):
        store.add_turn(db, episode_id, turn=0, agent=0, observation="o", completion="c")
        raise ConnectionError("the vLLM server went away")
    episode = store.get_episode(db, episode_id)
    assert episode["status"] == "failed"
    assert episode["error"] == "ConnectionError: the vLLM server went away"
    assert episode["turn_count"] == 1 and episode["finished_at"] is not None


def test_recording_episode_without_finish_is_failed_not_running(db, task_id):
    with store.recording_episode(db, task_id, shape="single", roles=["writer"]) as episode_id:
        pass
    episode = store.get_episode(db, episode_id)
    assert (episode["status"], episode["error"]) == (
        "failed",
        "the recording ended without finish_episode()",
    )


def test_recording_episode_that_finishes_is_ok(db, task_id):
    with store.recording_episode(db, task_id, shape="single", roles=["writer"]) as episode_id:
        store.finish_episode(db, episode_id, "done")
    assert store.get_episode(db, episode_id)["status"] == "ok"


def test_rewards_are_stored_and_replaced(db, task_id):
    episode_id = record(db, task_id)
    store.record_rewards(
        db, episode_id, {"quality": 0.5, "speed": 1.0}, 0.6, {"quality": 0.8, "speed": 0.2}
    )
    store.record_rewards(db, episode_id, {"quality": 1.0}, 0.9, {"quality": 1.0})
    episode = store.get_episode(db, episode_id)
    assert episode["rewards"] == {"quality": 1.0}
    assert (episode["reward"], episode["reward_weights"]) == (0.9, {"quality": 1.0})


@pytest.mark.parametrize(
    ("components", "joint"),
    [({"quality": float("nan")}, 1.0), ({"quality": 1.0}, "high"), ({"": 1.0}, 1.0)],
)
def test_bad_rewards_are_refused(db, task_id, components, joint):
    episode_id = record(db, task_id)
    with pytest.raises(ValueError):
        store.record_rewards(db, episode_id, components, joint, {"quality": 1.0})
    assert store.get_episode(db, episode_id)["rewards"] == {}
    with pytest.raises(store.NotFound):
        store.record_rewards(db, 999, {"quality": 1.0}, 1.0, {"quality": 1.0})


def test_interrupted_episodes_of_dead_processes_are_marked_failed(db, task_id):
    mine = store.start_episode(db, task_id, shape="single", roles=["w"])
    orphan = store.start_episode(db, task_id, shape="single", roles=["w"])
    remote = store.start_episode(db, task_id, shape="single", roles=["w"])
    db["episodes"].update(orphan, {"owner": dead_owner()})
    db["episodes"].update(remote, {"owner": "another-host:123:1.00"})
    assert current_owner() == store.get_episode(db, mine)["owner"]

    assert store.mark_interrupted_episodes(db) == [orphan]
    episode = store.get_episode(db, orphan)
    assert episode["status"] == "failed" and episode["error"].startswith("interrupted")
    assert store.get_episode(db, mine)["status"] == "running"
    assert store.get_episode(db, remote)["status"] == "running"
    assert store.mark_interrupted_episodes(db, all_running=True) == [mine, remote]


def test_one_recovery_call_fails_the_episodes_and_runs_of_a_dead_process(db, task_id):
    dead = dead_owner()
    alive = store.start_episode(db, task_id, shape="single", roles=["w"])
    episode = store.start_episode(db, task_id, shape="single", roles=["w"])
    run = store.start_training_run(db, "cli")
    db["episodes"].update(episode, {"owner": dead})
    db["training_runs"].update(run, {"owner": dead})

    assert store.recover_interrupted(db) == {"episodes": [episode], "runs": [run]}
    assert store.get_episode(db, episode)["status"] == "failed"
    assert store.get_training_run(db, run)["state"] == "failed"
    assert store.get_episode(db, alive)["status"] == "running"
    assert store.recover_interrupted(db) == {"episodes": [], "runs": []}  # nothing left to do


def test_start_episode_accepts_an_unregistered_adapter_as_none(db, task_id):
    episode_id = store.start_episode(
        db, task_id, shape="parallel", roles=["a", "b"], adapter_versions=[None, 2]
    )
    assert store.get_episode(db, episode_id)["adapter_versions"] == [None, 2]
    found = store.list_episodes(db, store.EpisodeFilter(adapter=(1, 2)))
    assert [e["id"] for e in found] == [episode_id]
    assert store.count_episodes(db, store.EpisodeFilter(adapter=(0, 0))) == 0


def test_list_and_count_filter_and_page(db):
    code = store.create_task(db, "coding", "code it")
    prose = store.create_task(db, "writing", "write it")
    a = record(db, code, versions=[1, 0])
    b = record(db, code, shape="sequential_pipeline", versions=[2, 0])
    c = record(db, prose, shape="single", roles=["writer"], group_id="g")
    running = store.start_episode(db, prose, shape="single", roles=["writer"])
    store.add_rating(db, a, "score", value=5)
    store.add_rating(db, a, "score", value=4)
    store.add_rating(db, b, "score", value=2)
    store.add_rating(db, c, "comment", text="nice")

    def ids(limit=50, offset=0, **filters):
        where = store.EpisodeFilter(**filters)
        listed = [e["id"] for e in store.list_episodes(db, where, limit=limit, offset=offset)]
        if offset == 0 and limit >= 4:
            assert store.count_episodes(db, where) == len(listed)
        return listed

    assert ids() == [running, c, b, a]
    assert ids(task_kind="coding") == [b, a]
    assert ids(task_id=prose) == [running, c]
    assert ids(shape="single") == [running, c]
    assert ids(status="running") == [running]
    assert ids(rated=True) == [c, b, a]
    assert ids(rated=False) == [running]
    assert ids(min_score=4) == [a]
    assert ids(adapter=(0, 2)) == [b]
    assert ids(adapter=(1, 0)) == [b, a]
    assert ids(group_id="g") == [c]
    assert ids(task_kind="coding", min_score=1) == [b, a]
    assert ids(limit=2) == [running, c]
    assert ids(limit=2, offset=2) == [b, a]
    assert ids(limit=2, offset=4) == []

    row = store.list_episodes(db, store.EpisodeFilter(task_kind="coding"), limit=1, offset=1)[0]
    assert (row["id"], row["task_kind"], row["prompt"]) == (a, "coding", "code it")
    assert (row["rating_count"], row["mean_score"], row["adapter_versions"]) == (2, 4.5, [1, 0])
    with pytest.raises(ValueError):
        store.list_episodes(db, limit=-1)


def test_get_episodes_keeps_order_and_skips_missing(db, task_id):
    first, second = record(db, task_id), record(db, task_id)
    store.add_rating(db, first, "pairwise", other_episode_id=second, choice="left")
    both = store.get_episodes(db, [second, 999, first])
    assert [e["id"] for e in both] == [second, first]
    # a pairwise rating shows on both sides
    assert [len(e["ratings"]) for e in both] == [1, 1]
    with pytest.raises(store.NotFound):
        store.get_episode(db, 999)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prompt": "Sort \udc80 the list"}, "unpaired surrogate"),
        ({"prompt": "ok", "metadata": {"score": float("nan")}}, "plain JSON"),
        ({"prompt": "ok", "metadata": {"note": "\ud800"}}, "plain JSON"),
    ],
)
def test_unstorable_task_input_is_refused_with_a_clear_message(db, fields, message):
    with pytest.raises(store.InvalidInput, match=message):
        store.create_task(db, "coding", **fields)
    assert db["tasks"].count == 0


def test_the_verdict_and_each_check_are_kept_with_the_episode(db, task_id):
    checks = [
        {"name": "assert f(1) == 2", "passed": True, "message": ""},
        {"name": "assert f(2) == 4", "passed": False, "message": "AssertionError: 3 != 4"},
    ]
    judged = store.start_episode(db, task_id, shape="single", roles=["coder"])
    store.finish_episode(db, judged, "def f(x): ...", passed=False, checks=checks)
    unjudged = store.start_episode(db, task_id, shape="single", roles=["coder"])
    store.finish_episode(db, unjudged, "def f(x): ...")
    one, two = store.get_episodes(db, [judged, unjudged])
    assert (one["passed"], one["checks"]) == (False, checks)
    assert (two["passed"], two["checks"]) == (None, [])
    listed = {e["id"]: e["passed"] for e in store.list_episodes(db)}
    assert listed[judged] is False and listed[unjudged] is None
    bad = store.start_episode(db, task_id, shape="single", roles=["coder"])
    with pytest.raises(ValueError, match="a check needs name, passed"):
        store.finish_episode(db, bad, "x", checks=[{"name": "t", "passed": "yes", "message": ""}])
    assert store.get_episode(db, bad)["status"] == "running"  # refused whole: nothing written
