"""The learner against the real server: hot-swap under load, a learner killed mid-step, and a
small real `coteam train` run through the CLI."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import store
from agents.kinds import work_of
from agents.serving.models import model_provenance
from agents.serving.policy import PolicyClient, PolicyError, Request
from agents.tasks import split_tasks
from agents.team.crossing import recombine
from agents.team.episode import run_episode
from agents.team.graph import Sampling, TeamSettings
from app.commands_train import adapter_record
from learner.config import MAGRPOConfig, TrainArgs
from learner.registry import (
    ensure_loaded,
    promote,
    publish_candidate,
    rollback,
    served_versions,
)
from learner.rewards import score_group
from learner.train import rollout_group, train, training_tasks
from tests.conftest import COLOUR, adapters_as_found

pytestmark = pytest.mark.integration

PROMPT = COLOUR


@pytest.fixture(autouse=True)
def server_as_found(vllm_server, policy):
    """Each test leaves the shared server's adapters as it found them."""
    with adapters_as_found(vllm_server, policy):
        yield


def test_hot_swap_under_load_drops_no_request(policy, two_versions, home):
    db_path = home / "coteam.db"
    with store.open_db(db_path) as db:
        for folder in two_versions:
            publish_candidate(db, 3, folder, kind="coding")
        promote(db, policy, 3, 1)
    outcomes, stop = [], threading.Event()

    def users():  # like the app: each new episode asks the registry which version serves
        with store.open_db(db_path) as db:
            while not stop.is_set():
                name = ensure_loaded(db, policy, 4, "coding")[3]
                try:
                    [c] = policy.generate([Request(PROMPT, adapter=name, max_tokens=12)])
                    outcomes.append((name, c.text))
                except PolicyError as e:
                    outcomes.append((name, e))

    threads = [threading.Thread(target=users) for _ in range(3)]
    for t in threads:
        t.start()
    while len(outcomes) < 6:
        time.sleep(0.2)
    with store.open_db(db_path) as db:
        promote(db, policy, 3, 2)
    swapped_at = len(outcomes)
    deadline = time.monotonic() + 300
    while sum(name == "agent4-v2" for name, _ in outcomes) < 6:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()

    failures = [o for o in outcomes if isinstance(o[1], Exception)]
    assert not failures, failures
    [v1_text] = {text for name, text in outcomes if name == "agent4-v1"}
    [v2_text] = {text for name, text in outcomes if name == "agent4-v2"}
    assert v1_text != v2_text
    assert all(
        name == "agent4-v2" for name, _ in outcomes[swapped_at + 3 :]
    )  # after in-flight ones
    assert {"agent4-v1", "agent4-v2"} <= set(policy.list_adapters())  # v1 kept for rollback

    with store.open_db(db_path) as db:
        assert rollback(db, policy, 3, "coding")["version"] == 1
        assert ensure_loaded(db, policy, 4, "coding")[3] == "agent4-v1"
    [c] = policy.generate([Request(PROMPT, adapter="agent4-v1", max_tokens=12)])
    assert c.text == v1_text


def run_train(server_url, model_path, db_path, home, *extra, task_limit=2):
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "train", "--vllm-url", server_url, "--model", str(model_path), "--db", str(db_path),
         "--group-size", "2", "--tasks-per-step", "1", "--task-limit", str(task_limit), "--max-tokens", "48",
         *extra],
        env={**os.environ, "COTEAM_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def test_two_databases_share_one_server_and_each_serves_its_own_versions(
    vllm_server, policy, two_versions, tmp_path
):
    """The app's database and a terminal's, each with its own `agent1-v1` (different adapters),
    on one server through two clients (two processes): each is served its own version, through
    a promotion, an unloading of old versions and a rollback on one of them."""
    purple, orange = two_versions
    app_db, cli_db = tmp_path / "app" / "coteam.db", tmp_path / "cli" / "coteam.db"
    cli = PolicyClient(vllm_server.url, api_key=vllm_server.api_key)

    def answer(client, db_path):
        with store.open_db(db_path) as db:
            [name] = ensure_loaded(db, client, 1, "coding")
        [c] = client.generate([Request(PROMPT, adapter=name, max_tokens=12)])
        return name, c.text

    for db_path, folders, client in (
        (app_db, (purple, orange, purple), policy),
        (cli_db, (orange,), cli),
    ):
        with store.open_db(db_path) as db:
            for folder in folders:
                publish_candidate(db, 0, folder, kind="coding")
            promote(db, client, 0, 1)
    (name, app_text), (cli_name, cli_text) = answer(policy, app_db), answer(cli, cli_db)
    assert name == cli_name == "agent1-v1" and app_text != cli_text
    with store.open_db(app_db) as db:
        promote(db, policy, 0, 2)
        promote(db, policy, 0, 3)  # the app's v1 is unloaded: neither active nor the one before
        assert set(served_versions(db, policy, 0)) == {2, 3}
    assert answer(cli, cli_db) == ("agent1-v1", cli_text)  # the terminal's v1 still serves
    assert answer(policy, app_db) == ("agent1-v3", app_text)
    with store.open_db(app_db) as db:
        rollback(db, policy, 0, "coding")
    assert answer(policy, app_db) == ("agent1-v2", cli_text)  # the same folder as the terminal's
    assert answer(PolicyClient(vllm_server.url, api_key=vllm_server.api_key), cli_db)[1] == cli_text
    with store.open_db(cli_db) as db:
        assert set(served_versions(db, cli, 0)) == {1}


def test_killing_the_learner_mid_step_leaves_the_active_version_serving(
    vllm_server, policy, model_path, two_versions, home
):
    db_path = home / "coteam.db"
    with store.open_db(db_path) as db:
        publish_candidate(db, 2, two_versions[0], kind="coding")
        promote(db, policy, 2, 1)
    learner = run_train(
        vllm_server.url, model_path, db_path, home, "--steps", "3", "--agents", "3", "--no-gate"
    )
    output = []
    for line in learner.stdout:  # kill it during step 2, after step 1's adapters went live
        output.append(line)
        if line.startswith("step 1:"):
            time.sleep(5)
            learner.send_signal(signal.SIGKILL)
            break
    learner.wait()
    assert learner.returncode == -signal.SIGKILL, "".join(output)

    versions = sorted(p.name for p in (home / "adapters" / "agent3").iterdir())
    assert versions == ["v1"], versions  # no partial or unfinished version
    with store.open_db(db_path) as db:
        assert {a: r["version"] for a, r in store.active_adapters(db, "coding").items()} == {2: 1}
        [run] = store.list_training_runs(db)
        assert run["state"] == "running"  # as the killed process left it ...
        store.mark_interrupted_runs(db)  # ... until the next start marks it
        assert store.get_training_run(db, run["id"])["state"] != "running"
        assert ensure_loaded(db, policy, 3, "coding") == [None, None, "agent3-v1"]
    [c] = policy.generate([Request(PROMPT, adapter="agent3-v1", max_tokens=8)])
    assert c.text


def test_a_run_trains_on_from_a_rejected_version_named_by_from(
    vllm_server, policy, model_path, two_versions, home
):
    """`coteam train --from agent1-v1` trains on from a version the gate rejected instead of the
    serving one: the run's episodes are answered by it, the run's candidate records it as its
    parent, the serving version stays active, and the server unloads it after the run (it was
    loaded for the run alone)."""
    db_path = home / "coteam.db"
    with store.open_db(db_path) as db:
        for folder in two_versions:
            publish_candidate(db, 0, folder, kind="coding")
        store.reject_adapter(db, 0, 1)
        promote(db, policy, 0, 2)
    learner = run_train(
        vllm_server.url, model_path, db_path, home, "--steps", "1", "--no-gate",
        "--from", "agent1-v1", task_limit=1,
    )  # fmt: skip
    out, _ = learner.communicate(timeout=1200)
    assert learner.returncode == 0, out
    with store.open_db(db_path) as db:
        [run] = store.list_training_runs(db)
        assert run["state"] == "ok" and run["config"]["start_from"] == "agent1-v1"
        lineage = {r["version"]: r for r in store.adapter_lineage(db, 0)}
        assert lineage[3]["parent_version"] == 1 and lineage[3]["state"] == "candidate"
        assert store.active_adapters(db, "coding")[0]["version"] == 2
        sampled = [e for e in store.list_episodes(db, limit=100) if e["group_id"]]
        episodes = store.get_episodes(db, [e["id"] for e in sampled])
    assert len(episodes) == 2 and all(e["adapter_versions"] == [1, 0] for e in episodes), [
        e["adapter_versions"] for e in episodes
    ]
    with store.open_db(db_path) as db:  # v1 was loaded for the run alone
        assert set(served_versions(db, policy, 0)) == {2}


def test_the_active_team_ships_and_a_new_installation_serves_it(
    policy, model_path, two_versions, home, tmp_path, monkeypatch
):
    """`coteam adapters ship` writes the active team (bf16 weights and a card naming the base
    model's sha256); a new installation registers it as each agent's version 1, active and
    listed as shipped, and the server answers with it; an installation with versions of its own,
    or one serving another base model, is left as it is."""
    import json

    from safetensors.torch import load_file

    from learner.registry import CARD, register_shipped

    trainer = tmp_path / "trainer"  # the installation that trained the team
    monkeypatch.setenv("COTEAM_HOME", str(trainer))
    with store.open_db(trainer / "coteam.db") as db:
        for agent, folder in enumerate(two_versions):
            publish_candidate(db, agent, folder, kind="coding")
            store.activate_adapter(db, agent, 1)
    shipped = tmp_path / "shipped"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "adapters", "ship", "--db", str(trainer / "coteam.db"),
         "--out", str(shipped), "--model", str(model_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    monkeypatch.setenv("COTEAM_HOME", str(home))  # a new installation
    assert done.returncode == 0, done.stderr[-2000:]
    card = json.loads((shipped / CARD).read_text())
    sha256 = model_provenance(model_path)["sha256"]
    assert card["base_model"]["sha256"] == sha256 and card["agents"] == [0, 1]
    weights = load_file(shipped / "agent2" / "adapter_model.safetensors")
    assert weights and {str(w.dtype) for w in weights.values()} == {"torch.bfloat16"}
    other_base = tmp_path / "other"
    shutil.copytree(shipped, other_base)
    (other_base / CARD).write_text(json.dumps({**card, "base_model": {"name": "x", "sha256": "0"}}))

    with store.open_db(home / "other.db") as db:
        assert register_shipped(db, model_path, other_base) == []  # another base model's
        assert store.active_adapters(db, "coding") == {}
    with store.open_db(home / "coteam.db") as db:
        rows = register_shipped(db, model_path, shipped)
        assert [(r["agent"], r["version"], r["state"]) for r in rows] == [
            (0, 1, "active"),
            (1, 1, "active"),
        ]
        assert {adapter_record(r)["source"] for r in rows} == {"shipped"}
        assert register_shipped(db, model_path, shipped) == []  # not a new installation
        names = ensure_loaded(db, policy, 2, "coding")
    assert names == ["agent1-v1", "agent2-v1"]
    base = policy.generate([Request(PROMPT, max_tokens=12)])[0].text
    answers = [policy.generate([Request(PROMPT, adapter=n, max_tokens=12)])[0] for n in names]
    assert [a.adapter for a in answers] == names
    assert base not in {a.text for a in answers}, "the shipped adapters changed nothing"
    with store.open_db(home / "coteam.db") as db:  # the base team is one rollback away
        rollback(db, policy, 0, "coding")
        assert ensure_loaded(db, policy, 2, "coding") == [None, "agent2-v1"]


def test_coteam_train_learns_from_samples_and_ratings_and_publishes(
    vllm_server, policy, model_path, home
):
    """A tiny real run of two-turn episodes (the tests' feedback between them) on a new
    installation: it trains on from the shipped team (registered as version 1 and loaded into a
    server that had never served it); rated episodes and sampled groups, steps with rewards,
    every turn's calls trained, a curve, candidates, and the gate's decision."""
    db_path = home / "coteam.db"
    # people rated two answers to the one task both steps train on (the first: its second-turn
    # prompts, with the tests' feedback, are the shorter ones; the updates' cost is the prompts')
    task = training_tasks(TrainArgs(task_limit=1))[0]
    for score in (5, 1):
        result = run_episode(
            task, policy, TeamSettings(agents=2, sampling=Sampling(max_tokens=32)), db=db_path
        )
        with store.open_db(db_path) as db:
            store.add_rating(db, result.episode_id, "score", value=score)
    learner = run_train(
        vllm_server.url, model_path, db_path, home, "--steps", "2", "--gate-tasks", "1",
        "--turns", "2", task_limit=1,
    )  # fmt: skip
    out, _ = learner.communicate(timeout=1800)
    assert learner.returncode == 0, out
    assert "step 1: mean joint reward" in out and "step 2: mean joint reward" in out
    assert "agent 1: the shipped trained adapter is version 1; training goes on from it" in out
    with store.open_db(db_path) as db:
        [run] = store.list_training_runs(db)
        assert run["state"] == "ok" and len(run["metrics"]["history"]) == 2
        assert run["metrics"]["history"][0]["ratings_learnt"] == 2  # both still counted
        # but two ratings cannot tell a taste from chance: the preference takes no share yet
        assert run["metrics"]["history"][0]["preference_skill"] == 0
        assert run["metrics"]["history"][0]["preference_weight"] == 0
        liked = db.execute("SELECT value FROM rewards WHERE name = 'human_rating'").fetchall()
        rows = {a: store.adapter_lineage(db, a) for a in (0, 1)}
        rewarded = db.execute("SELECT count(DISTINCT episode_id) FROM rewards").fetchone()[0]
        episodes = store.get_episodes(db, [e["id"] for e in store.list_episodes(db, limit=1000)])
    # step 1 samples with the shipped team; step 2 with step 1's scratch adapters (no registered
    # version) when step 1 updated them; a step without signal (all rewards of each group equal,
    # which a 2-step run can draw) leaves the shipped team serving, and says so
    scratch = [
        e for e in episodes if any(a and a.startswith("run-") for a in e["params"]["adapters"])
    ]
    if run["metrics"]["history"][0]["updated"]:
        assert len(scratch) >= 2, [e["params"]["adapters"] for e in episodes]
    else:
        assert "step 1: mean joint reward" in out and "no signal" in out, out
        assert scratch == [], [e["params"]["adapters"] for e in scratch]
    for episode in scratch:
        assert episode["adapter_versions"] == [None, None], episode["params"]["adapters"]
    shipped = [e for e in episodes if e["params"]["adapters"] == ["agent1-v1", "agent2-v1"]]
    assert len(shipped) >= 2 and all(e["adapter_versions"] == [1, 1] for e in shipped)
    # a sample that failed its first turn went on with the feedback; every call of every turn
    # (at most one per episode and turn) is trained when its turn's group has signal
    sampled = [e for e in episodes if e["group_id"]]
    turns_taken = [1 + max(t["turn"] for t in e["turns"]) for e in sampled]
    history = run["metrics"]["history"]
    assert len(sampled) == 2 * 2 and set(turns_taken) <= {1, 2}
    assert sum(turns_taken) / 4 == pytest.approx(sum(h["turns_mean"] for h in history) / 2)
    # each step says what its sampled answers did: the shares of the stored episodes' components
    called = [e["rewards"]["helper_called"] for e in sampled]
    assert sum(called) / 4 == pytest.approx(sum(h["helper_called"] for h in history) / 2)
    assert all(h["pass_rate"] in (0, 0.5, 1) and "role_violations" in h for h in history)
    assert "; sampled answers: passed " in out and ", entry calls the helper " in out
    for h in history:
        assert (
            h["calls_trained"] <= 2 * h["turns_mean"] and (h["calls_trained"] > 0) == h["updated"]
        )
    assert rewarded >= 2 * 2  # every sampled episode was scored (plus the gate's)
    assert len(liked) >= 2 * 2 and all(0 < v < 1 for (v,) in liked)  # by the people's model too
    assert (home / "runs" / "curves" / f"run-{run['id']}.png").stat().st_size > 1000
    for agent, lineage in rows.items():
        first, row = lineage  # the shipped version, and the run's candidate made from it
        assert adapter_record(first)["source"] == "shipped" and first["version"] == 1
        assert row["version"] == 2 and row["parent_version"] == 1
        assert row["state"] in ("active", "rejected") and "gate" in row["metrics"]
        assert row["metrics"]["ratings_learnt"] == 2
        assert (home / "adapters" / f"agent{agent + 1}" / "v2" / "adapter_config.json").is_file()
        if row["state"] == "active":
            with store.open_db(home / "coteam.db") as db:
                assert 2 in served_versions(db, policy, agent)
    assert run["metrics"]["promoted"] == (rows[0][1]["state"] == "active")


def test_coteam_train_on_long_form_articles_trains_every_writer_and_learns_from_co_write_ratings(
    vllm_server, policy, model_path, home
):
    """A tiny real run on the long-form set: four writers, one section each, sample and are
    scored by the long-form reward; a rating of one co-written article counts; every writer
    gets a candidate, and the gate decides on the set's own validation articles."""
    db_path = home / "coteam.db"
    train = split_tasks("longform", "train")
    result = run_episode(
        train[0], policy, TeamSettings(agents=4, sampling=Sampling(max_tokens=32)), db=db_path
    )
    with store.open_db(db_path) as db:
        store.add_rating(db, result.episode_id, "thumbs", value=1)
    learner = run_train(
        vllm_server.url, model_path, db_path, home, "--task", "longform", "--agents", "4",
        "--steps", "1", "--gate-tasks", "1",
    )  # fmt: skip
    out, _ = learner.communicate(timeout=1800)
    assert learner.returncode == 0, out
    validation = {t.source_id for t in split_tasks("longform", "validation")}
    with store.open_db(db_path) as db:
        [run] = store.list_training_runs(db)
        episodes = store.get_episodes(db, [e["id"] for e in store.list_episodes(db, limit=100)])
        scored = {
            name
            for (name,) in db.execute("SELECT DISTINCT name FROM rewards WHERE name IS NOT NULL")
        }
        rows = {a: store.adapter_lineage(db, a) for a in range(4)}
    [step] = run["metrics"]["history"]
    assert run["state"] == "ok" and step["ratings_learnt"] == 1 and step["samples"] == 2
    sampled = [e for e in episodes if e["group_id"]]
    assert len(sampled) == 2 and {e["task"]["source_id"] for e in sampled} <= {
        t.source_id for t in train
    }
    assert all(len({t["agent"] for t in e["turns"]}) == 4 for e in sampled)  # every writer wrote
    assert {"redundancy", "structure", "coverage"} <= scored  # the long-form reward scored them
    gated = [e for e in episodes if not e["group_id"] and e["id"] != result.episode_id]
    assert gated and {e["task"]["source_id"] for e in gated} <= validation
    assert step["calls_trained"] == (2 if step["updated"] else 0)
    assert step["pass_rate"] in (0, 0.5, 1) and "helper_called" not in step  # no helper here
    for agent, lineage in rows.items():  # writers 0 and 1 train on from the shipped team's agents
        row = lineage[-1]
        assert [r["version"] for r in lineage] == ([1, 2] if agent < 2 else [1])
        assert row["state"] in ("active", "rejected") and row["metrics"]["gate"]["tasks"] == 1
        folder = home / "adapters" / f"agent{agent + 1}" / f"v{row['version']}"
        assert (folder / "adapter_config.json").is_file()


def test_a_crossed_run_judges_each_mix_of_real_answers_as_the_episode_of_its_parts(
    vllm_server, policy, model_path, home
):
    """Cross pairing on the real model's sampled programs: a sample recombined with itself is its
    episode again (the same program, test verdict and reward), and a one-step crossed run
    trains on them, keeping only the episodes that ran."""
    db_path = home / "coteam.db"
    args = TrainArgs(
        steps=1, task_limit=1, publish=False,
        magrpo=MAGRPOConfig(group_size=2, tasks_per_step=1, max_new_tokens=96, joint_mode="cross"),
    )  # fmt: skip
    task = training_tasks(args)[0]
    sampling = Sampling(max_tokens=96, logprobs=True)
    results, rewards, returns, _ = rollout_group(
        task, policy, args, [None, None], sampling, db_path, None, args.weights
    )
    assert returns.shape == (2, 2)
    for g, result in enumerate(results):
        again = recombine(results, (g, g), work_of(task).checker)
        assert again.output == result.output and again.success == result.success
        passed = [r.test_report and r.test_report.passed for r in (again, result)]
        assert passed[0] == passed[1]  # None both when the program did not parse: no tests ran
        assert score_group([again])[0].reward == pytest.approx(rewards[g].item())
    outcome = train(args, policy, model_path, db_path)
    [step] = outcome["history"]
    assert step["samples"] == 2 and step["calls_trained"] in (0, 2)
    assert step["calls_trained"] == max(step["calls_by_agent"])  # each agent its own, crossed
    assert step["updated"] == (step["calls_trained"] > 0)
    with store.open_db(db_path) as db:  # the G episodes of each rollout; no crossed mix stored
        assert len(store.list_episodes(db, limit=100)) == 2 + 2


def test_coteam_train_on_classes_publishes_class_versions_and_leaves_the_coders_serving(
    vllm_server, policy, model_path, home
):
    """A tiny real run of the class team: its sampled episodes recorded, each agent's methods
    trained, candidates of kind "class" (a new installation's shipped coders stay the coding
    team, and the class run starts from the base model), the gate on a validation class."""
    db_path = home / "coteam.db"
    learner = run_train(
        vllm_server.url, model_path, db_path, home, "--task", "class", "--steps", "1",
        "--gate-tasks", "1", task_limit=1,
    )  # fmt: skip
    out, _ = learner.communicate(timeout=1800)
    assert learner.returncode == 0, out
    assert "the shipped trained adapter is version 1 (for coding)" in out
    with store.open_db(db_path) as db:
        [run] = store.list_training_runs(db)
        [step] = run["metrics"]["history"]
        episodes = store.get_episodes(db, [e["id"] for e in store.list_episodes(db, limit=100)])
        rows = {a: store.adapter_lineage(db, a) for a in (0, 1)}
        coding = store.active_adapters(db, "coding")
    first = min(episodes, key=lambda e: e["id"])  # the step's group; then the gate's episodes
    sampled = [e for e in episodes if e["group_id"] == first["group_id"]]
    assert len(sampled) == 2 and all(e["shape"] == "class_parallel" for e in sampled)
    assert {tuple(e["adapter_versions"]) for e in sampled} == {(0, 0)}  # from the base model
    gate = [e for e in episodes if e["task_id"] != first["task_id"]]
    assert {tuple(e["adapter_versions"]) for e in gate} == {(2, 2), (0, 0)}
    assert all(set(e["rewards"]) >= {"tests", "whole_class", "speed"} for e in sampled)
    methods = sum(len(json.loads(t["observation"])) for e in sampled for t in e["turns"])
    assert step["tokens_generated"] > 0 and methods >= 2 * 2
    if step["updated"]:  # every call of each agent, one per method it wrote
        assert sum(step["calls_by_agent"]) == methods
        # the update passed each call's view, not only its reply
        assert step["tokens_passed"] > step["tokens_trained"] > 0
    assert {a: r["version"] for a, r in coding.items()} == {0: 1, 1: 1}
    for lineage in rows.values():
        shipped, candidate = lineage
        assert shipped["kind"] == "coding" and candidate["kind"] == "class"
        assert candidate["parent_version"] is None  # from the base model, not the coders
        assert candidate["state"] in ("active", "rejected") and "gate" in candidate["metrics"]
