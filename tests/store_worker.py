"""Writers for the store's multi-process tests: `python -m tests.store_worker MODE DB [ARGS]`.

Modes:
- `record DB WRITER COUNT GO_FILE`: wait for GO_FILE to exist, record COUNT episodes, exit 0;
- `loop DB`: record episodes until killed, printing each finished episode's id;
- `hold DB`: start an episode, then open a write transaction, add large turns until the
  uncommitted pages spill into the WAL file, print `holding <id>` and wait to be killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sqlite_utils import Database

import store
from store.db import write_transaction

TURNS, AGENTS = 2, 2
REWARD_WEIGHTS = {"quality": 0.6, "speed": 0.2, "coordination": 0.2}


def record_one(db: Database, writer: int, index: int) -> int:
    """Record one complete episode of `writer` the way the team does, with rewards and ratings.

    Writes: 2 tasks (get-or-create), 1 episode, TURNS * AGENTS turns, 3 reward components, a
    score rating and, from the second episode on, a pairwise rating against the previous one.
    """
    store.create_task(db, "writing", "one task everyone shares", source="test", source_id="shared")
    task_id = store.create_task(
        db, "coding", f"task of writer {writer}", source="test", source_id=f"writer-{writer}"
    )
    group = f"writer-{writer}"
    with store.recording_episode(
        db, task_id, shape="parallel", roles=["helper", "main"], group_id=group, sample_index=index
    ) as episode_id:
        for turn in range(TURNS):
            for agent in range(AGENTS):
                store.add_turn(
                    db,
                    episode_id,
                    turn=turn,
                    agent=agent,
                    observation=f"writer {writer} episode {index} turn {turn} agent {agent}",
                    completion="def helper():\n    return 1\n" * 8,
                    prompt_tokens=50,
                    completion_tokens=40,
                    latency_s=0.01,
                )
        store.finish_episode(db, episode_id, f"output of writer {writer} episode {index}")
    store.record_rewards(
        db,
        episode_id,
        {"quality": 1.0, "speed": 0.5, "coordination": 0.25},
        joint=0.75,
        weights=REWARD_WEIGHTS,
    )
    store.add_rating(db, episode_id, "score", value=1 + index % 5, rater=f"writer {writer}")
    if index > 0:
        previous = store.list_episodes(db, store.EpisodeFilter(group_id=group), limit=2)[1]["id"]
        store.add_rating(db, previous, "pairwise", other_episode_id=episode_id, choice="right")
    return episode_id


def wait_for(go_file: Path) -> None:
    """Block until the test creates `go_file`, so every writer starts at the same moment."""
    while not go_file.exists():
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    mode, db_path = argv[0], Path(argv[1])
    db = store.open_db(db_path)
    if mode == "record":
        writer, count, go_file = int(argv[2]), int(argv[3]), Path(argv[4])
        wait_for(go_file)
        for index in range(count):
            record_one(db, writer, index)
    elif mode == "loop":
        index = 0
        while True:
            print(record_one(db, 0, index), flush=True)
            index += 1
    elif mode == "hold":
        task_id = store.create_task(db, "writing", "held")
        episode_id = store.start_episode(db, task_id, shape="single", roles=["writer"])
        db.execute("PRAGMA cache_size = 16")  # 16 pages: the open transaction must spill to the WAL
        with write_transaction(db):
            for turn in range(300):
                store.add_turn(
                    db,
                    episode_id,
                    turn=turn,
                    agent=0,
                    observation="o" * 4000,
                    completion="c" * 4000,
                )
            print(f"holding {episode_id}", flush=True)
            time.sleep(600)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
