"""Teams against the real vLLM server on the real model, checked in a real database."""

import ast
import json
import os
import subprocess
import sys

import pytest

import store
from agents.serving.models import model_provenance
from agents.tasks import humaneval_task, xsum_tasks
from agents.team.episode import run_episode
from agents.team.graph import Sampling, TeamSettings
from learner.registry import CARD, SHIPPED
from tests.conftest import adapters_as_found

pytestmark = pytest.mark.integration

SHORT = Sampling(temperature=0.0, top_p=1.0, max_tokens=192)


def test_two_agent_coding_episode(policy, tmp_path):
    events = []
    result = run_episode(
        humaneval_task(0),
        policy,
        TeamSettings(shape="parallel", agents=2, sampling=SHORT),
        db=tmp_path / "coteam.db",
        on_event=events.append,
    )
    with store.open_db(tmp_path / "coteam.db") as db:
        episode = store.get_episode(db, result.episode_id)
    assert episode["status"] == "ok" and episode["roles"] == ["helper", "entry"]
    assert episode["task"]["source_id"] == "HumanEval/0"
    assert episode["final_output"] == result.output
    ast.parse(result.output)  # the combiner's module parses
    assert "def has_close_elements" in result.output
    assert len(episode["turns"]) == 2
    for row, step in zip(episode["turns"], result.steps, strict=True):
        assert json.loads(row["observation"]) == step["messages"]
        assert row["completion"] == step["text"] and step["text"].strip()
        assert 0 < row["completion_tokens"] <= SHORT.max_tokens and row["prompt_tokens"] > 0
        assert row["latency_s"] > 0
    assert episode["completion_tokens"] == sum(s["completion_tokens"] for s in result.steps)
    # tokens really streamed, from both agents
    streamed = {e["agent"] for e in events if e["event"] == "token"}
    assert streamed == {0, 1}


def test_three_agent_writing_episode(policy, tmp_path):
    task = xsum_tasks()[0]
    result = run_episode(
        task,
        policy,
        TeamSettings(
            shape="parallel",
            agents=3,
            sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=128),
        ),
        db=tmp_path / "coteam.db",
    )
    with store.open_db(tmp_path / "coteam.db") as db:
        episode = store.get_episode(db, result.episode_id)
    assert episode["status"] == "ok" and episode["team_size"] == 3
    assert episode["roles"] == ["summary", "background", "elaboration"]
    assert [t["agent"] for t in episode["turns"]] == [0, 1, 2]
    sections = [t["completion"].strip() for t in episode["turns"]]
    assert all(sections)
    assert episode["final_output"] == "\n\n".join(sections)
    # each agent was shown the article and its own role, nothing of the others' text
    for row, section in zip(episode["turns"], sections, strict=True):
        observation = json.loads(row["observation"])
        assert task.prompt in observation[1]["content"]
        for other in sections:
            if other != section:
                assert other not in observation[1]["content"]


def test_cli_episode_json_serves_the_active_team_unless_told_base(
    vllm_server, policy, model_path, tmp_path
):
    """`coteam episode` on a new installation serves the shipped trained team, as the app does
    (when the shipped card's base model is the one served), and `--base` the base model."""
    db_path = tmp_path / "cli.db"
    env = dict(os.environ, COTEAM_HOME=str(tmp_path / "home"))
    command = [
        sys.executable, "-m", "app.cli", "episode", "--task", "coding", "--problem", "2",
        "--shape", "single", "--json", "--vllm-url", vllm_server.url, "--db", str(db_path),
        "--model", str(model_path),
    ]  # fmt: skip
    card = json.loads((SHIPPED / CARD).read_text()) if (SHIPPED / CARD).is_file() else None
    trained_on_this = card and card["base_model"]["sha256"] == (
        model_provenance(model_path) or {}
    ).get("sha256")
    with adapters_as_found(vllm_server, policy):
        done = subprocess.run(
            [*command, "--turns", "2", "--greedy", "--max-tokens", "160"],
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        base = subprocess.run(
            [*command, "--base", "--max-tokens", "8"],
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert base.returncode == 0, base.stderr
    assert json.loads(base.stdout)["agents"][0]["adapter"] is None
    summary = json.loads(done.stdout)
    assert summary["shape"] == "single" and summary["task"]["source_id"] == "HumanEval/2"
    [agent] = summary["agents"]
    assert agent["role"] == "solo"
    assert agent["adapter"] == ("agent1-v1" if trained_on_this else None)
    assert agent["text"] and agent["completion_tokens"] > 0 and agent["latency_s"] > 0
    assert agent["text"].startswith(agent["opening"])  # what the environment began it with
    assert 1 <= summary["turns"] <= 2 and summary["wall_time_s"] > 0
    # the problem's tests ran in the sandbox, as on the page: success means they all passed
    assert summary["tests"]["total"] == len(summary["tests"]["results"]) == 3
    assert summary["success"] == (summary["tests"]["passed"] == 3)
    assert -1 <= summary["reward"] <= 1  # scored and recorded as the page scores it
    wrong_key = subprocess.run(
        [*command, "--base", "--max-tokens", "8"],
        capture_output=True, text=True, timeout=600,
        env=env | {"COTEAM_VLLM_API_KEY": "not-the-key"},
    )  # fmt: skip
    assert wrong_key.returncode == 1 and "Traceback" not in wrong_key.stderr
    assert "refused the API key (HTTP 401): set COTEAM_VLLM_API_KEY" in wrong_key.stderr
    no_key = {k: v for k, v in env.items() if k != "COTEAM_VLLM_API_KEY"}
    refused = subprocess.run(
        [*command, "--base", "--max-tokens", "8"], capture_output=True, text=True, timeout=600,
        env=no_key,
    )  # fmt: skip
    assert "asks for an API key and none was given: set COTEAM_VLLM_API_KEY" in refused.stderr
    with store.open_db(db_path) as db:
        before = store.count_episodes(db)
    for flags, said in (
        (["--adapter", "1=banana-v9"], "adapter 'banana-v9' is not on the server"),
        (["--adapter", "1=agent1-v9"], "'agent1-v9' is not a version in this database"),
        (["--adapter", "7=agent1-v1"], "--adapter names agent 7, but the team has 1"),
    ):  # refused before the episode starts: nothing recorded, no traceback
        bad = subprocess.run(
            [*command, "--base", "--max-tokens", "8", *flags], capture_output=True, text=True,
            timeout=600, env=env,
        )  # fmt: skip
        assert bad.returncode == 1 and said in bad.stderr and "Traceback" not in bad.stderr
    with store.open_db(db_path) as db:
        assert store.count_episodes(db) == before
    doctor = subprocess.run(
        [sys.executable, "-m", "app.cli", "doctor", "--vllm-url", vllm_server.url],
        capture_output=True, text=True, timeout=600,
        env=env | {"COTEAM_VLLM_API_KEY": "not-the-key"},
    )  # fmt: skip
    assert "FAIL  the vLLM server at" in doctor.stdout and "Traceback" not in doctor.stderr
    with store.open_db(db_path) as db:
        episode = store.get_episode(db, summary["episode_id"])
    assert episode["final_output"] == summary["output"]
    assert episode["reward"] == pytest.approx(summary["reward"])
    assert episode["status"] == "ok" and len(episode["turns"]) == summary["turns"]
