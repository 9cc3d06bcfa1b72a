"""`export_dataset`: JSONL and Parquet files that Hugging Face `datasets` loads as they are."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach for the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402

import store  # noqa: E402
from store.export import EPISODES_SCHEMA, PREFERENCES_SCHEMA, export_dataset  # noqa: E402


@pytest.fixture
def db(tmp_path):
    """Two rated episodes of one task, one failed, one still running (not exported)."""
    with store.open_db(tmp_path / "coteam.db") as db:
        task = store.create_task(db, "coding", "write add()", metadata={"entry": "add"})
        ids = []
        for output in ("def add(a, b): return a + b", "def add(a, b): return a - b"):
            episode_id = store.start_episode(
                db,
                task,
                shape="parallel",
                roles=["helper", "main"],
                adapter_versions=[2, 0],
                group_id="g",
                params={"temperature": 1.0},
            )
            for agent in (0, 1):
                store.add_turn(
                    db,
                    episode_id,
                    turn=0,
                    agent=agent,
                    observation=f"see {agent}",
                    completion=f"say {agent}",
                    prompt_tokens=5,
                    completion_tokens=3,
                    latency_s=0.1,
                )
            store.finish_episode(
                db, episode_id, output, passed="+" in output,
                checks=[{"name": "assert add(1, 2) == 3", "passed": "+" in output, "message": ""}],
            )  # fmt: skip
            store.record_rewards(
                db, episode_id, {"quality": 1.0, "speed": 0.5}, 0.85, {"quality": 0.7, "speed": 0.3}
            )
            ids.append(episode_id)
        store.add_rating(db, ids[0], "pairwise", other_episode_id=ids[1], choice="left")
        store.add_rating(db, ids[1], "edit", text="def add(a, b): return a + b  # fixed")
        store.add_rating(db, ids[0], "score", value=5, agent=1, rater="ann")
        failed = store.start_episode(db, task, shape="single", roles=["coder"])
        store.fail_episode(db, failed, "server crashed")
        store.start_episode(db, task, shape="single", roles=["coder"])  # running: left out
        yield db


def load(kind, path, tmp_path, **kwargs):
    builder = "json" if kind == "jsonl" else "parquet"
    return datasets.load_dataset(
        builder, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"), **kwargs
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_loads_with_datasets(db, tmp_path, fmt):
    counts = export_dataset(db, fmt, tmp_path / "export", progress=False)
    assert (counts["episodes"], counts["preferences"]) == (3, 2)

    episodes = load(fmt, counts["episodes_path"], tmp_path)
    assert episodes.num_rows == 3
    assert set(episodes.column_names) == set(EPISODES_SCHEMA.names)
    first = episodes[0]
    assert (first["task_kind"], first["prompt"], first["status"]) == ("coding", "write add()", "ok")
    assert json.loads(first["task_metadata"]) == {"entry": "add"}
    assert first["roles"] == ["helper", "main"] and first["adapter_versions"] == [2, 0]
    assert [(t["agent"], t["role"], t["completion"]) for t in first["turns"]] == [
        (0, "helper", "say 0"),
        (1, "main", "say 1"),
    ]
    assert {r["name"]: r["value"] for r in first["rewards"]} == {"quality": 1.0, "speed": 0.5}
    assert {r["name"]: r["value"] for r in first["reward_weights"]} == {
        "quality": 0.7,
        "speed": 0.3,
    }
    assert first["reward"] == 0.85
    # the verdict and each check, as the page showed them
    assert [e["passed"] for e in episodes] == [True, False, None]
    assert first["checks"] == [{"name": "assert add(1, 2) == 3", "passed": True, "message": ""}]
    assert sorted(r["kind"] for r in first["ratings"]) == ["pairwise", "score"]
    assert episodes[2]["status"] == "failed" and episodes[2]["error"] == "server crashed"

    pairs = load(fmt, counts["preferences_path"], tmp_path)
    assert set(pairs.column_names) == set(PREFERENCES_SCHEMA.names)
    assert [(p["source"], p["chosen"], p["rejected"]) for p in pairs] == [
        ("pairwise", "def add(a, b): return a + b", "def add(a, b): return a - b"),
        ("edit", "def add(a, b): return a + b  # fixed", "def add(a, b): return a - b"),
    ]
    assert {p["prompt"] for p in pairs} == {"write add()"}


def test_jsonl_loads_with_the_declared_features(db, tmp_path):
    counts = export_dataset(db, "jsonl", tmp_path / "export", progress=False)
    features = datasets.Features.from_arrow_schema(EPISODES_SCHEMA)
    episodes = load("jsonl", counts["episodes_path"], tmp_path, features=features)
    assert episodes.features == features and episodes.num_rows == 3


def test_export_pages_through_many_episodes(db, tmp_path, monkeypatch):
    monkeypatch.setattr("store.export.BATCH_SIZE", 2)  # several batches from a small database
    counts = export_dataset(db, "parquet", tmp_path / "export", progress=False)
    ids = load("parquet", counts["episodes_path"], tmp_path)["id"]
    assert ids == sorted(ids) and len(ids) == 3
    assert not list((tmp_path / "export").glob("*.partial"))


def test_progress_bar_is_shown_on_request(db, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("store.export.PROGRESS_DELAY_S", 0)  # as if the export were slow
    export_dataset(db, "jsonl", tmp_path / "loud")
    assert "episodes: 100%" in capsys.readouterr().err
    export_dataset(db, "jsonl", tmp_path / "quiet", progress=False)
    assert capsys.readouterr().err == ""


def test_unknown_format_is_refused(db, tmp_path):
    with pytest.raises(ValueError, match="unknown export format 'csv'"):
        export_dataset(db, "csv", tmp_path / "export")
    assert not (tmp_path / "export").exists()
