"""`coteam export`: the episodes and preference pairs as files the `datasets` library loads.

`export_dataset(db, "jsonl" | "parquet", out)` writes two files into the folder `out`:

- `episodes.<ext>`: one row per finished episode (running ones are left out) with its task,
  turns, reward components and ratings nested in it (`EPISODES_SCHEMA`);
- `preferences.<ext>`: one row per chosen/rejected pair implied by the ratings, with `prompt`,
  `chosen`, `rejected` as TRL's preference trainers expect (`PREFERENCES_SCHEMA`).

    datasets.load_dataset("json", data_files=str(out / "episodes.jsonl"), split="train")
    datasets.load_dataset("parquet", data_files=str(out / "preferences.parquet"), split="train")

Open-ended mappings (reward components, weights) become lists of {name, value} rows, and free
JSON (task metadata, sampling params) a JSON string, so every row has the same columns. Parquet
files carry the schema; `datasets` infers a JSONL file's schema from its first 10 MB, so for a
large JSONL export whose first rows never use some field, pass
`features=datasets.Features.from_arrow_schema(EPISODES_SCHEMA)` or export Parquet.

The export reads one snapshot of the database, so it is consistent while the app keeps
writing, and each file appears under its final name only once complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlite_utils import Database
from tqdm import tqdm

from store.db import read_snapshot, rows
from store.episodes import get_episodes
from store.ratings import preference_pairs

FORMATS = ("jsonl", "parquet")
BATCH_SIZE = 200  # episodes read and written at a time: bounded memory on any size of export
PROGRESS_DELAY_S = 1.0  # small exports finish before a bar would appear

_NAMED_VALUE = pa.struct([("name", pa.string()), ("value", pa.float64())])
_TURN = pa.struct(
    [
        ("turn", pa.int64()),
        ("agent", pa.int64()),
        ("role", pa.string()),
        ("observation", pa.string()),
        ("completion", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_s", pa.float64()),
    ]
)
_CHECK = pa.struct([("name", pa.string()), ("passed", pa.bool_()), ("message", pa.string())])
_RATING = pa.struct(
    [
        ("id", pa.int64()),
        ("episode_id", pa.int64()),
        ("agent", pa.int64()),
        ("kind", pa.string()),
        ("value", pa.float64()),
        ("text", pa.string()),
        ("choice", pa.string()),
        ("other_episode_id", pa.int64()),
        ("rater", pa.string()),
        ("created_at", pa.string()),
    ]
)
EPISODES_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("task_id", pa.int64()),
        ("task_kind", pa.string()),
        ("task_source", pa.string()),
        ("prompt", pa.string()),
        ("task_metadata", pa.string()),
        ("shape", pa.string()),
        ("team_size", pa.int64()),
        ("roles", pa.list_(pa.string())),
        ("adapter_versions", pa.list_(pa.int64())),
        ("group_id", pa.string()),
        ("sample_index", pa.int64()),
        ("params", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("final_output", pa.string()),
        ("turn_count", pa.int64()),
        ("wall_time_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("started_at", pa.string()),
        ("finished_at", pa.string()),
        ("passed", pa.bool_()),
        ("checks", pa.list_(_CHECK)),
        ("reward", pa.float64()),
        ("reward_weights", pa.list_(_NAMED_VALUE)),
        ("rewards", pa.list_(_NAMED_VALUE)),
        ("turns", pa.list_(_TURN)),
        ("ratings", pa.list_(_RATING)),
    ]
)
PREFERENCES_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("source", pa.string()),
        ("task_id", pa.int64()),
        ("chosen_episode_id", pa.int64()),
        ("rejected_episode_id", pa.int64()),
        ("agent", pa.int64()),
    ]
)


def export_dataset(db: Database, fmt: str, out: str | Path, *, progress: bool = True) -> dict:
    """Write `episodes.<fmt>` and `preferences.<fmt>` into the folder `out` (created if needed).

    `fmt` is 'jsonl' or 'parquet'. A progress bar (stderr) appears on exports that take more
    than a second, unless `progress=False`. Returns the row counts and the two paths:
    {"episodes": n, "preferences": m, "episodes_path": ..., "preferences_path": ...}.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / f"episodes.{fmt}"
    preferences_path = out / f"preferences.{fmt}"
    with read_snapshot(db):
        total = rows(db, "SELECT count(*) AS n FROM episodes WHERE status <> 'running'")[0]["n"]
        bar = tqdm(
            total=total,
            unit="episode",
            desc="episodes",
            delay=PROGRESS_DELAY_S,
            disable=not progress,
        )
        with bar:
            batches = (_tick(bar, batch) for batch in _episode_batches(db))
            episodes = _write(fmt, episodes_path, EPISODES_SCHEMA, batches)
        pairs = tqdm(
            preference_pairs(db), unit="pair", desc="preferences", delay=1.0, disable=not progress
        )
        preferences = _write(fmt, preferences_path, PREFERENCES_SCHEMA, _batched(pairs))
    return {
        "episodes": episodes,
        "preferences": preferences,
        "episodes_path": str(episodes_path),
        "preferences_path": str(preferences_path),
    }


def _episode_batches(db: Database) -> Iterator[list[dict]]:
    last_id = 0
    while True:  # keyset paging: each batch starts after the last id seen
        ids = [
            row["id"]
            for row in rows(
                db,
                "SELECT id FROM episodes WHERE status <> 'running' AND id > ? ORDER BY id LIMIT ?",
                [last_id, BATCH_SIZE],
            )
        ]
        if not ids:
            return
        yield [_episode_record(episode) for episode in get_episodes(db, ids)]
        last_id = ids[-1]


def _episode_record(episode: dict) -> dict:
    """One `get_episode` dict in the shape of `EPISODES_SCHEMA`."""
    task = episode["task"]
    return {
        "id": episode["id"],
        "task_id": task["id"],
        "task_kind": task["kind"],
        "task_source": task["source"],
        "prompt": task["prompt"],
        "task_metadata": json.dumps(task["metadata"], ensure_ascii=False),
        "shape": episode["shape"],
        "team_size": episode["team_size"],
        "roles": episode["roles"],
        "adapter_versions": episode["adapter_versions"],
        "group_id": episode["group_id"],
        "sample_index": episode["sample_index"],
        "params": json.dumps(episode["params"], ensure_ascii=False),
        "status": episode["status"],
        "error": episode["error"],
        "final_output": episode["final_output"],
        "turn_count": episode["turn_count"],
        "wall_time_s": episode["wall_time_s"],
        "prompt_tokens": episode["prompt_tokens"],
        "completion_tokens": episode["completion_tokens"],
        "started_at": episode["started_at"],
        "finished_at": episode["finished_at"],
        "passed": episode["passed"],
        "checks": [{field: check[field] for field in _CHECK.names} for check in episode["checks"]],
        "reward": episode["reward"],
        "reward_weights": [
            {"name": name, "value": float(weight)}
            for name, weight in (episode["reward_weights"] or {}).items()
        ],
        "rewards": [{"name": name, "value": value} for name, value in episode["rewards"].items()],
        "turns": [
            {
                "turn": turn["turn"],
                "agent": turn["agent"],
                "role": episode["roles"][turn["agent"]],
                "observation": turn["observation"],
                "completion": turn["completion"],
                "prompt_tokens": turn["prompt_tokens"],
                "completion_tokens": turn["completion_tokens"],
                "latency_s": turn["latency_s"],
            }
            for turn in episode["turns"]
        ],
        "ratings": [
            {field: rating[field] for field in _RATING.names} for rating in episode["ratings"]
        ],
    }


def _write(fmt: str, path: Path, schema: pa.Schema, batches: Iterable[list[dict]]) -> int:
    """Write the batches of rows to `path` (via a temporary name); return the row count."""
    partial = path.with_name(path.name + ".partial")
    count = 0
    if fmt == "jsonl":
        with partial.open("w", encoding="utf-8") as file:
            for batch in batches:
                file.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in batch)
                count += len(batch)
    else:
        with pq.ParquetWriter(partial, schema) as writer:
            for batch in batches:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
    partial.replace(path)
    return count


def _tick(bar: tqdm, batch: list[dict]) -> list[dict]:
    bar.update(len(batch))
    return batch


def _batched(items: Iterable[dict]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for item in items:
        batch.append(item)
        if len(batch) == BATCH_SIZE:
            yield batch
            batch = []
    if batch:
        yield batch
