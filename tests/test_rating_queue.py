"""The rating queue: for each task not yet compared by its rater, the two stored answers the
preference model scores furthest apart once there are votes, else the two the sentence-embedding
model finds least alike (a real SQLite file, the real embedding model and preference fit)."""

from __future__ import annotations

import numpy as np
import pytest

import store
from learner.preference import WORD_FEATURES, PreferenceModel
from learner.rating_queue import pairs_to_rate, pick_pair

SAID = "The minister said on Tuesday that the bridge would reopen in May, after repairs."
SAID_AGAIN = "On Tuesday the minister said the bridge would reopen in May once repaired."
GOALS = "Two late goals gave the visitors a 2-1 win in a cup tie played in heavy rain."


def answer(db, task_id, output, status="ok"):
    episode_id = store.start_episode(db, task_id, shape="parallel", roles=["a", "b"])
    if status == "ok":
        store.finish_episode(db, episode_id, output)
    elif status == "failed":
        store.fail_episode(db, episode_id, "crashed")
    return episode_id


def test_without_a_model_the_two_least_alike_are_picked():
    assert pick_pair([SAID, SAID_AGAIN, GOALS])[:2] in {(0, 2), (1, 2)}
    i, j, distance, how = pick_pair([SAID, SAID_AGAIN])
    assert how == "unlike"
    assert (i, j) == (0, 1) and 0 < distance < 0.5  # the same news, reworded
    with pytest.raises(ValueError, match="two texts"):
        pick_pair([SAID])


def test_a_task_offers_its_least_alike_answers_and_leaves_after_the_raters_vote(db):
    news, sport = store.create_task(db, "writing", "news"), store.create_task(db, "writing", "x")
    said, said_again, goals = (answer(db, news, text) for text in (SAID, SAID_AGAIN, GOALS))
    answer(db, news, "", status="ok")  # empty: never shown
    answer(db, news, None, status="failed")
    first, second = answer(db, sport, GOALS), answer(db, sport, SAID)
    pairs = pairs_to_rate(db, "ann", limit=5)
    assert [p.task_id for p in pairs] == [sport, news]  # newest answers first
    assert (pairs[0].left, pairs[0].right) == (first, second)
    assert (pairs[1].left, pairs[1].right) in {(said, goals), (said_again, goals)}
    assert pairs[1].distance > 0.5
    assert pairs_to_rate(db, "ann", limit=1) == pairs[:1]
    assert pairs_to_rate(db, "ann", limit=5, task_ids=[news]) == pairs[1:]

    store.add_rating(db, first, "pairwise", choice="left", other_episode_id=second, rater="ann")
    assert [p.task_id for p in pairs_to_rate(db, "ann", limit=5)] == [news]  # ann is done there
    assert [p.task_id for p in pairs_to_rate(db, "bob", limit=5)] == [sport, news]
    assert [p.task_id for p in pairs_to_rate(db, None, limit=5)] == [sport, news]
    assert pairs_to_rate(db, "ann", kind="coding") == []


def test_tasks_with_one_answer_or_one_text_offer_nothing(db):
    alone, same = store.create_task(db, "writing", "a"), store.create_task(db, "writing", "b")
    answer(db, alone, SAID)
    answer(db, same, GOALS)
    answer(db, same, GOALS)  # two answers, one text: a certain tie
    assert pairs_to_rate(db, limit=5) == []
    with pytest.raises(ValueError, match="limit"):
        pairs_to_rate(db, limit=0)


def test_only_the_newest_candidates_are_compared(db):
    task = store.create_task(db, "writing", "news")
    oldest = answer(db, task, GOALS)  # the most different, but past the newest two
    newer = [answer(db, task, text) for text in (SAID, SAID_AGAIN)]
    (pair,) = pairs_to_rate(db, candidates=2)
    assert (pair.left, pair.right) == tuple(newer) and oldest not in (pair.left, pair.right)


PLAIN = "The bridge will reopen in May after repairs to its deck and railings."
ATTRIBUTED = "The bridge will reopen in May after repairs to its deck, officials said."
VOTED = [  # (the attributed answer, the plain one) of other tasks, the first preferred
    ("Rents rose by 4% in the city last year, officials said.", "Rents rose by 4% in the city."),
    ("The school will close in June, officials said.", "The school will close in June."),
    ("A new line opens next spring, officials said.", "A new train line opens next spring."),
    ("The museum drew a record crowd, officials said.", "The museum drew a record crowd."),
    ("Flooding closed two roads, officials said.", "Flooding closed two roads overnight."),
    ("The match was postponed, officials said.", "The match was postponed until Sunday."),
]


def test_votes_so_far_pick_the_pair_the_preference_model_scores_furthest_apart(db):
    task = store.create_task(db, "writing", "the bridge")
    plain, goals, attributed = (answer(db, task, t) for t in (PLAIN, GOALS, ATTRIBUTED))
    (pair,) = pairs_to_rate(db, "ann", task_ids=[task])
    assert pair.picked_by == "unlike" and goals in (pair.left, pair.right)  # no votes yet

    for said, bare in VOTED:  # a taste for attributed writing, voted on other tasks
        other = store.create_task(db, "writing", said)
        first, second = answer(db, other, bare), answer(db, other, said)
        store.add_rating(
            db, first, "pairwise", choice="right", other_episode_id=second, rater="bob"
        )
    (pair,) = pairs_to_rate(db, "ann", task_ids=[task])
    assert pair.picked_by == "preference" and attributed in (pair.left, pair.right)
    assert pairs_to_rate(db, "ann", task_ids=[task], kind="coding") == []  # coding: no task
    # a model that cannot tell the answers apart (coin-flip votes fit one): the least alike
    flat = PreferenceModel(np.zeros(384 + WORD_FEATURES), 0.0, frozenset())
    i, j, _, how = pick_pair([PLAIN, GOALS, ATTRIBUTED], flat)
    assert how == "unlike" and 1 in (i, j)
