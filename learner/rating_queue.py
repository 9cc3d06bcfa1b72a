"""Pairs to rate: for a task, the two stored answers that differ most.

An A/B vote teaches the preference model only where it is not a tie, and two answers sampled
for one task are often alike (the same article or problem pulls them the same way): in the
simulated-rater runs of issue 14, 35-37 of 50 votes on freshly sampled pairs were ties. The store
already holds several answers to many tasks (every training rollout is G answers to one task;
every A/B run is two), so the queue offers, for each task its rater has not compared yet, the
two of its most recent finished answers (at most `CANDIDATES`) that the sentence-embedding
model finds least alike, and skips a task whose answers are all the same text (a certain tie).
Measured for one taste (docs/TRAINING.md, "Pairs that differ: the rating queue"): 34 of 100
such pairs were not ties, against 30 expected of a random pair of the same answers: a small
gain; the queue's worth is rating without waiting, on answers the store already has.

The History tab's "Rate two stored answers" takes the next pair from here, and `bench/ratings.py
--candidates K` rates the pairs it picks. A vote is stored as any A/B vote (`store.add_rating`,
kind `pairwise`), with the rater and limits of the page.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlite_utils import Database

from learner.preference import sentence_embedding
from store.db import rows

CANDIDATES = 8  # a task's most recent answers compared; a training step stores G = 4 a task


@dataclass(frozen=True)
class RatingPair:
    """Two finished answers to one task (episode ids, left shown first) and how unlike they
    are (1 − the cosine of their sentence embeddings)."""

    task_id: int
    left: int
    right: int
    distance: float


def most_different(texts: list[str]) -> tuple[int, int, float]:
    """The indices of the two texts whose sentence embeddings are least alike, and their
    distance (1 − cosine). Needs two texts or more."""
    if len(texts) < 2:
        raise ValueError("a pair needs two texts or more")
    vectors = sentence_embedding(texts)
    similarity = vectors @ vectors.T
    i, j = min(itertools.combinations(range(len(texts)), 2), key=lambda p: similarity[p])
    return i, j, round(float(1.0 - similarity[i, j]), 6)


def pairs_to_rate(
    db: Database,
    rater: str | None = None,
    *,
    limit: int = 1,
    task_ids: list[int] | None = None,
    kind: str | None = None,
    candidates: int = CANDIDATES,
) -> list[RatingPair]:
    """Up to `limit` pairs, one per task, newest tasks first: tasks with two or more finished
    answers that `rater` (None: ratings without a rater) has not yet compared in an A/B vote,
    optionally only `task_ids` or tasks of `kind` ("coding", "writing")."""
    if limit < 1 or candidates < 2:
        raise ValueError("limit must be >= 1 and candidates >= 2")
    finished = "e.status = 'ok' AND trim(coalesce(e.final_output, '')) <> ''"
    tasks = rows(
        db,
        f"""
        SELECT e.task_id FROM episodes e JOIN tasks t ON t.id = e.task_id
        WHERE {finished} AND (:kind IS NULL OR t.kind = :kind)
          AND e.task_id NOT IN (
            SELECT v.task_id FROM ratings r JOIN episodes v ON v.id = r.episode_id
            WHERE r.kind = 'pairwise' AND r.rater IS :rater)
        GROUP BY e.task_id HAVING count(*) >= 2 ORDER BY max(e.id) DESC
        """,
        {"kind": kind, "rater": rater},
    )
    wanted = set(task_ids) if task_ids is not None else None
    pairs = []
    for task_id in (t["task_id"] for t in tasks):
        if wanted is not None and task_id not in wanted:
            continue
        found = rows(
            db,
            f"SELECT e.id, e.final_output FROM episodes e WHERE e.task_id = :task AND {finished} "
            "ORDER BY e.id DESC LIMIT :candidates",
            {"task": task_id, "candidates": candidates},
        )
        texts = [a["final_output"] for a in found]
        if len(set(texts)) < 2:  # nothing to choose between
            continue
        i, j, distance = most_different(texts)
        left, right = sorted((found[i]["id"], found[j]["id"]))
        pairs.append(RatingPair(task_id, left, right, distance))
        if len(pairs) == limit:
            break
    return pairs
