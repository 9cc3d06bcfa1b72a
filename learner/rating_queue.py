"""Pairs to rate: for a task, the two stored answers whose vote should teach the most.

An A/B vote teaches the preference model only where it is not a tie, and two answers sampled
for one task are often alike in what the rater cares about: in the simulated-rater runs of issue
14, 35-37 of 50 votes on freshly sampled pairs were ties. The store already holds several
answers to many tasks (every training rollout is G answers to one task; every A/B run is two),
so the queue offers, for each task its rater has not compared yet, two of its most recent
finished answers (at most `CANDIDATES`), and skips a task whose answers are all the same text
(a certain tie). Which two:

- once the store has ratings of the task's kind, the two that the preference model the retrain
  learns from them scores furthest apart, when that spread says one answer wins with
  probability 0.55 or more: what the votes so far have taught decides where the next vote is
  likely to be decisive, and the vote tells the model whether it was right. The model is
  `learner.preference`'s, fitted here at its fixed penalty `L2` (one fit, not the retrain's
  cross-validation: 2-3 s for the next pair at 40 votes on a busy 2-core CPU);
- otherwise (no ratings yet, or a model that tells the candidates apart by less) the two the
  sentence-embedding model finds least alike.

Measured for one taste (docs/runs/training-log.md, "Pairs the preference model picks";
`bench/rating_pairs.py`): of 50 votes over the same 8 sampled summaries a task, 27-31 were
decisive with the model's pairs against 17 with the least-alike pair, 14 with the first two
sampled and 15-20 with a random pair (38 tasks had a decisive pair at all); for a taste in code
(commented programs) 40-42 against 22, 17 and 19-26 (45 possible). The page never shows the
rater which answer the model expects to win.

The History tab's "Rate two stored answers" takes the next pair from here, and `bench/ratings.py
--candidates K` rates the pairs it picks, one vote at a time. A vote is stored as any A/B vote
(`store.add_rating`, kind `pairwise`), with the rater and limits of the page.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlite_utils import Database

from agents.tasks import evaluation_split
from learner.preference import (
    L2,
    PreferenceModel,
    fit_preference_model,
    preference_examples,
    sentence_embedding,
)
from store.db import rows

CANDIDATES = 8  # a task's most recent answers compared; a training step stores G = 4 a task
DECISIVE_SPREAD = 0.2  # σ(0.2) = 0.55: the model's pair when it expects one answer to win so often


@dataclass(frozen=True)
class RatingPair:
    """Two finished answers to one task (episode ids, left shown first), how unlike they are
    (1 − the cosine of their sentence embeddings) and what picked them: "preference" (the
    preference model's scores differ most) or "unlike" (the least alike)."""

    task_id: int
    left: int
    right: int
    distance: float
    picked_by: str = "unlike"


def pick_pair(
    texts: list[str], model: PreferenceModel | None = None
) -> tuple[int, int, float, str]:
    """The pair to rate among `texts` (two or more): its indices, how unlike the two are
    (1 − the cosine of their sentence embeddings) and what picked it: the two that `model`
    scores furthest apart when their spread reaches DECISIVE_SPREAD ("preference"), else the
    two least alike ("unlike")."""
    if len(texts) < 2:
        raise ValueError("a pair needs two texts or more")
    vectors = sentence_embedding(texts)
    similarity = vectors @ vectors.T
    pairs = list(itertools.combinations(range(len(texts)), 2))
    (i, j), picked_by = min(pairs, key=lambda p: similarity[p]), "unlike"
    if model is not None:
        scores = model.raw_score(texts)
        a, b = max(pairs, key=lambda p: abs(scores[p[0]] - scores[p[1]]))
        if abs(scores[a] - scores[b]) >= DECISIVE_SPREAD:
            (i, j), picked_by = (a, b), "preference"
    return i, j, round(float(1.0 - similarity[i, j]), 6), picked_by


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
    optionally only `task_ids` or tasks of `kind` ("coding", "writing"), never a validation or
    held-out task of a curated set (`agents.tasks.evaluation_split`). The pair of a task is
    `pick_pair`'s, with the preference model fitted on every stored rating of the task's kind
    (one fit per kind and call)."""
    if limit < 1 or candidates < 2:
        raise ValueError("limit must be >= 1 and candidates >= 2")
    finished = "e.status = 'ok' AND trim(coalesce(e.final_output, '')) <> ''"
    tasks = rows(
        db,
        f"""
        SELECT e.task_id, t.kind, t.source, t.source_id
        FROM episodes e JOIN tasks t ON t.id = e.task_id
        WHERE {finished} AND (:kind IS NULL OR t.kind = :kind)
          AND e.task_id NOT IN (
            SELECT v.task_id FROM ratings r JOIN episodes v ON v.id = r.episode_id
            WHERE r.kind = 'pairwise' AND r.rater IS :rater)
        GROUP BY e.task_id HAVING count(*) >= 2 ORDER BY max(e.id) DESC
        """,
        {"kind": kind, "rater": rater},
    )
    wanted = set(task_ids) if task_ids is not None else None
    pairs, models = [], {}
    for task in tasks:
        task_id, task_kind = task["task_id"], task["kind"]
        if wanted is not None and task_id not in wanted:
            continue
        if evaluation_split(task["source"], task["source_id"]):
            continue  # a validation or held-out problem: its votes would never be learnt
        found = rows(
            db,
            f"SELECT e.id, e.final_output FROM episodes e WHERE e.task_id = :task AND {finished} "
            "ORDER BY e.id DESC LIMIT :candidates",
            {"task": task_id, "candidates": candidates},
        )
        texts = [a["final_output"] for a in found]
        if len(set(texts)) < 2:  # nothing to choose between
            continue
        if task_kind not in models:
            models[task_kind] = fit_preference_model(preference_examples(db, task_kind), l2=L2)
        i, j, distance, picked_by = pick_pair(texts, models[task_kind])
        left, right = sorted((found[i]["id"], found[j]["id"]))
        pairs.append(RatingPair(task_id, left, right, distance, picked_by))
        if len(pairs) == limit:
            break
    return pairs
