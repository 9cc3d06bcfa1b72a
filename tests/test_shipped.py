"""The trained team CoTeam ships with (assets/adapters): registered as version 1 on a new
installation serving its base model, and nowhere else; served by the real vLLM server."""

import json
from dataclasses import replace

import pytest

import store
from agents.feedback import sandbox_check
from agents.models import PROVENANCE_FILE
from agents.tasks import humaneval_tasks
from agents.team import GREEDY, run_episode
from app.commands_train import adapter_record
from learner.registry import SHIPPED, ensure_loaded, publish_candidate, register_shipped
from learner.rewards import score_episode

MANIFEST = json.loads((SHIPPED / "shipped.json").read_text())


def model_folder(tmp_path, sha256: str):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / PROVENANCE_FILE).write_text(json.dumps({"preset": "x", "sha256": sha256}))
    return folder


def test_the_shipped_adapters_are_small_bf16_peft_folders_with_a_card():
    from safetensors import safe_open

    assert (SHIPPED / MANIFEST["card"]).is_file()
    for agent in range(MANIFEST["agents"]):
        folder = SHIPPED / f"agent{agent}"
        config = json.loads((folder / "adapter_config.json").read_text())
        assert config["peft_type"] == "LORA" and config["r"] == 8
        weights = folder / "adapter_model.safetensors"
        assert weights.stat().st_size < 8 << 20  # a few MB, in git
        with safe_open(weights, "pt") as f:
            assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.bfloat16"}  # noqa: SIM118


def test_a_new_installation_serves_the_shipped_team_as_version_1(home, tmp_path):
    with store.open_db(home / "coteam.db") as db:
        rows = register_shipped(db, model_folder(tmp_path, MANIFEST["model_gguf_sha256"]))
        assert [(r["agent"], r["version"], r["state"]) for r in rows] == [
            (0, 1, "active"),
            (1, 1, "active"),
        ]
        listed = [adapter_record(r) for a in (0, 1) for r in store.adapter_lineage(db, a)]
        assert {r["source"] for r in listed} == {"shipped"}
        assert register_shipped(db, tmp_path / "model") == []  # once: not a new installation now


def test_another_model_or_a_registry_with_history_is_left_alone(home, tmp_path):
    with store.open_db(home / "coteam.db") as db:
        assert register_shipped(db, model_folder(tmp_path, "0" * 64)) == []  # another base model
        assert register_shipped(db, tmp_path / "no-provenance") == []
        assert store.adapter_lineage(db, 0) == []
        publish_candidate(db, 1, SHIPPED / "agent1")  # a user's own history: not a new install
        assert register_shipped(db, tmp_path / "model") == []
        assert store.active_adapters(db) == {}


@pytest.mark.integration
def test_the_real_server_serves_the_shipped_team_on_a_held_out_problem(policy, model_path, home):
    """The shipped adapters match the real base model, load into the real server, and the team
    they make divides a held-out problem: the entry function calls the helper's function."""
    with store.open_db(home / "coteam.db") as db:
        assert len(register_shipped(db, model_path)) == 2  # the provisioned model is the base
        names = ensure_loaded(db, policy, 2)
    assert names == ["agent0-v1", "agent1-v1"]
    try:
        [task] = [t for t in humaneval_tasks("held_out") if t.source_id == "HumanEval/0"]
        result = run_episode(
            task, policy, shape="parallel", agents=2, adapters=names,
            sampling=replace(GREEDY, max_tokens=192), checker=sandbox_check,
            db=home / "coteam.db",
        )  # fmt: skip
        assert result.output
        scored = score_episode(result, db=home / "coteam.db")
        assert scored.components["helper_called"] == 1.0, result.output
        with store.open_db(home / "coteam.db") as db:
            assert store.get_episode(db, result.episode_id)["adapter_versions"] == [1, 1]
    finally:
        for name in names:
            policy.unload_adapter(name)
