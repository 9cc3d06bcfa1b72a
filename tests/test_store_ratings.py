"""Ratings: every kind stored, every validation rule refused with nothing written, and pairs."""

from __future__ import annotations

import re

import pytest

import store
from store.ratings import MAX_COMMENT_CHARS, MAX_RATER_CHARS


def finished(db, task_id, output="output", roles=("helper", "main")):
    episode_id = store.start_episode(db, task_id, shape="parallel", roles=list(roles))
    for agent in range(len(roles)):
        for turn in range(2):
            store.add_turn(
                db,
                episode_id,
                turn=turn,
                agent=agent,
                observation=f"sees {agent}/{turn}",
                completion=f"says {agent}/{turn}",
            )
    store.finish_episode(db, episode_id, output)
    return episode_id


@pytest.fixture
def episodes(db):
    """Two finished episodes of one task, one of another task, one still running."""
    task = store.create_task(db, "writing", "write a poem")
    other_task = store.create_task(db, "writing", "write a letter")
    return {
        "a": finished(db, task, "poem A"),
        "b": finished(db, task, "poem B"),
        "other": finished(db, other_task, "letter"),
        "running": store.start_episode(db, task, shape="single", roles=["writer"]),
    }


def test_every_kind_is_stored(db, episodes):
    a, b = episodes["a"], episodes["b"]
    ids = [
        store.add_rating(db, a, "thumbs", value=1, rater="ann"),
        store.add_rating(db, a, "thumbs", value=-1, agent=1),
        store.add_rating(db, a, "score", value=5),
        store.add_rating(db, a, "score", value=3.0, agent=0),
        store.add_rating(db, a, "comment", text="lovely rhyme"),
        store.add_rating(db, a, "edit", text="poem A, improved"),
        store.add_rating(db, a, "pairwise", other_episode_id=b, choice="both_bad"),
    ]
    ratings = store.get_episode(db, a)["ratings"]
    assert [r["id"] for r in ratings] == ids
    assert [(r["kind"], r["value"], r["agent"]) for r in ratings[:4]] == [
        ("thumbs", 1.0, None),
        ("thumbs", -1.0, 1),
        ("score", 5.0, None),
        ("score", 3.0, 0),
    ]
    assert ratings[0]["rater"] == "ann" and ratings[0]["created_at"]
    assert ratings[5]["text"] == "poem A, improved"
    assert (ratings[6]["other_episode_id"], ratings[6]["choice"]) == (b, "both_bad")


REFUSED = [
    pytest.param("a", "score", {"value": 7}, "whole number from 1 to 5", id="score 7"),
    pytest.param("a", "score", {"value": 0}, "whole number from 1 to 5", id="score 0"),
    pytest.param("a", "score", {"value": 3.5}, "whole number from 1 to 5", id="score 3.5"),
    pytest.param("a", "score", {"value": "4"}, "whole number from 1 to 5", id="score as text"),
    pytest.param("a", "score", {}, "whole number from 1 to 5", id="score missing"),
    pytest.param("a", "score", {"value": float("nan")}, "1 to 5", id="score nan"),
    pytest.param("a", "thumbs", {"value": 0}, "+1 or -1", id="thumbs 0"),
    pytest.param("a", "thumbs", {"value": True}, "+1 or -1", id="thumbs True"),
    pytest.param("a", "stars", {"value": 5}, "unknown rating kind 'stars'", id="unknown kind"),
    pytest.param(999, "thumbs", {"value": 1}, "no episode 999", id="no such episode"),
    pytest.param("5", "thumbs", {"value": 1}, "no episode '5'", id="episode id as text"),
    pytest.param("running", "thumbs", {"value": 1}, "still running", id="running episode"),
    pytest.param("a", "comment", {"text": "x" * 1_000_000}, "at most 10,000", id="1 MB comment"),
    pytest.param(
        "a", "comment", {"text": "x" * (MAX_COMMENT_CHARS + 1)}, "at most", id="comment limit+1"
    ),
    pytest.param("a", "comment", {"text": "   "}, "non-empty text", id="blank comment"),
    pytest.param("a", "comment", {"text": 5}, "non-empty text", id="comment not text"),
    pytest.param("a", "edit", {}, "non-empty text", id="edit without text"),
    pytest.param("a", "edit", {"text": "y" * 300_000}, "at most 200,000", id="huge edit"),
    pytest.param("a", "comment", {"text": "ok", "value": 5}, "takes no value", id="extra value"),
    pytest.param("a", "thumbs", {"value": 1, "text": "hi"}, "takes no text", id="extra text"),
    pytest.param(
        "a", "score", {"value": 4, "choice": "left"}, "takes no choice", id="extra choice"
    ),
    pytest.param("a", "pairwise", {"choice": "left"}, "needs other_episode_id", id="no other"),
    pytest.param("a", "pairwise", {"other": "a", "choice": "left"}, "two different", id="self"),
    pytest.param("a", "pairwise", {"other": "b", "choice": "A"}, "one of left, right", id="choice"),
    pytest.param("a", "pairwise", {"other": "b"}, "one of left, right", id="choice missing"),
    pytest.param(
        "a",
        "pairwise",
        {"other": "other", "choice": "left"},
        "different tasks",
        id="pair across tasks",
    ),
    pytest.param(
        "a",
        "pairwise",
        {"other": 999, "choice": "left"},
        "no episode 999",
        id="pair with missing episode",
    ),
    pytest.param(
        "a",
        "pairwise",
        {"other": "running", "choice": "tie"},
        "still running",
        id="pair with running episode",
    ),
    pytest.param(
        "a",
        "pairwise",
        {"other": "b", "choice": "left", "agent": 0},
        "leave agent out",
        id="pair of one agent",
    ),
    pytest.param("a", "thumbs", {"value": 1, "agent": 2}, "agents 0 to 1", id="agent out of team"),
    pytest.param("a", "thumbs", {"value": 1, "agent": "0"}, "agent number", id="agent as text"),
    pytest.param(
        "a",
        "thumbs",
        {"value": 1, "rater": "r" * (MAX_RATER_CHARS + 1)},
        "rater",
        id="rater too long",
    ),
    pytest.param("a", "score", {"value": 10**400}, "whole number from 1 to 5", id="huge score"),
    pytest.param(
        "a", "comment", {"text": "fine \ud800 work"}, "unpaired surrogate", id="lone surrogate"
    ),
]


@pytest.mark.parametrize(("episode", "kind", "fields", "message"), REFUSED)
def test_bad_rating_is_refused_and_changes_nothing(db, episodes, episode, kind, fields, message):
    fields = dict(fields)
    if "other" in fields:
        other = fields.pop("other")
        fields["other_episode_id"] = episodes.get(other, other)
    before = (db.conn.total_changes, list(db.query("SELECT * FROM ratings")))

    with pytest.raises(store.InvalidRating, match=re.escape(message)) as refused:
        store.add_rating(db, episodes.get(episode, episode), kind, **fields)

    assert isinstance(refused.value, ValueError)
    assert (db.conn.total_changes, list(db.query("SELECT * FROM ratings"))) == before
    assert not db.conn.in_transaction


def test_database_constraints_back_up_the_validation(db, episodes):
    # a writer that bypasses add_rating still cannot store an impossible rating
    with pytest.raises(Exception, match="CHECK constraint failed"):
        db.execute(
            "INSERT INTO ratings (episode_id, kind, created_at) VALUES (?, 'stars', 'now')",
            [episodes["a"]],
        )
    with pytest.raises(Exception, match="FOREIGN KEY constraint failed"):
        db.execute("INSERT INTO ratings (episode_id, kind, created_at) VALUES (999, 'thumbs', 'x')")
    assert db["ratings"].count == 0


def test_preference_pairs_from_every_kind_of_rating(db):
    task = store.create_task(db, "writing", "write a poem")
    a, b, c = (finished(db, task, f"poem {name}") for name in "abc")
    store.add_rating(db, a, "pairwise", other_episode_id=b, choice="right")
    store.add_rating(db, a, "pairwise", other_episode_id=c, choice="tie")  # no pair
    store.add_rating(db, b, "pairwise", other_episode_id=c, choice="both_bad")  # no pair
    store.add_rating(db, c, "edit", text="poem c, edited")
    store.add_rating(db, c, "edit", text="says 1/1 better", agent=1)
    store.add_rating(db, a, "score", value=5)
    store.add_rating(db, b, "score", value=2)
    store.add_rating(db, b, "score", value=4)
    store.add_rating(db, c, "score", value=3)  # same mean as b: no pair between them
    store.add_rating(db, a, "thumbs", value=-1)
    store.add_rating(db, c, "thumbs", value=1)

    pairs = [
        (p["source"], p["prompt"], p["chosen"], p["rejected"], p["agent"])
        for p in store.preference_pairs(db)
    ]
    assert pairs == [
        ("pairwise", "write a poem", "poem b", "poem a", None),
        ("edit", "write a poem", "poem c, edited", "poem c", None),
        ("edit", "sees 1/1", "says 1/1 better", "says 1/1", 1),
        ("score", "write a poem", "poem a", "poem b", None),
        ("score", "write a poem", "poem a", "poem c", None),
        ("thumbs", "write a poem", "poem c", "poem a", None),
    ]
    ids = {
        (p["source"], p["chosen_episode_id"], p["rejected_episode_id"])
        for p in store.preference_pairs(db)
    }
    assert ("pairwise", b, a) in ids and ("thumbs", c, a) in ids


def test_a_raters_new_verdict_replaces_the_old_one(db, episodes):
    a, b = episodes["a"], episodes["b"]
    assert not store.has_verdict(db, "ip:1", a, "thumbs")
    store.add_rating(db, a, "thumbs", value=1, rater="ip:1")
    # what the page says "replaces your earlier one" for, and only that
    assert store.has_verdict(db, "ip:1", a, "thumbs")
    assert not store.has_verdict(db, "ip:2", a, "thumbs")
    assert not store.has_verdict(db, "ip:1", a, "thumbs", agent=0)
    assert not store.has_verdict(db, None, a, "thumbs")
    latest = store.add_rating(db, a, "thumbs", value=-1, rater="ip:1")
    store.add_rating(db, a, "thumbs", value=1, rater="ip:2")  # someone else: its own rating
    store.add_rating(db, a, "thumbs", value=1, rater="ip:1", agent=0)  # another thing rated
    store.add_rating(db, a, "pairwise", other_episode_id=b, choice="left", rater="ip:1")
    assert store.has_verdict(db, "ip:1", b, "pairwise", other_episode_id=a)  # either order
    vote = store.add_rating(db, b, "pairwise", other_episode_id=a, choice="tie", rater="ip:1")
    thumbs = [(r["rater"], r["agent"], r["value"]) for r in store.get_episode(db, a)["ratings"]]
    assert thumbs[:3] == [("ip:1", None, -1.0), ("ip:2", None, 1.0), ("ip:1", 0, 1.0)]
    assert store.get_episode(db, a)["ratings"][0]["id"] == latest
    votes = [r for r in db["ratings"].rows if r["kind"] == "pairwise"]
    assert [(r["id"], r["choice"]) for r in votes] == [(vote, "tie")]  # either order is one pair


def test_ratings_past_the_limits_are_kept_but_do_not_count(db, episodes):
    limits = store.RatingLimits(per_session=2, per_hour=3)
    a, b = episodes["a"], episodes["b"]
    kept = [  # five different things rated, so none replaces another
        store.add_rating(db, e, "score", value=5, rater="ip:1", session=s, limits=limits, agent=g)
        for e, s, g in [(a, "s1", None), (a, "s1", 0), (a, "s1", 1), (b, "s2", None), (b, "s3", 0)]
    ]
    store.add_rating(db, b, "score", value=5, rater="ip:2", session="s9", limits=limits)
    counts = {r["id"]: r["counts"] for r in db["ratings"].rows}
    # session s1 allows two; the rater's hour allows three in all (the third from s2)
    assert [counts[i] for i in kept] == [1, 1, 0, 1, 0]
    assert store.ratings_toward_schedule(db, since="") == 4  # 3 by ip:1, 1 by ip:2
    stored = {r["id"] for r in db["ratings"].rows}
    assert set(kept) <= stored  # nothing lost


def test_ratings_past_the_limits_do_not_teach_the_preference_model(db, episodes):
    from learner.preference import preference_examples

    limits = store.RatingLimits(per_session=1, per_hour=10)
    a, b = episodes["a"], episodes["b"]
    first = store.add_rating(db, a, "score", value=5, rater="ip:1", session="s", limits=limits)
    store.add_rating(db, b, "score", value=1, rater="ip:1", session="s", limits=limits)
    assert preference_examples(db).rating_ids == {first}
