"""The rating page's side of the abuse limits: the server says who rated, not the browser."""

from __future__ import annotations

import gradio as gr
import pytest
from starlette.requests import Request

import store
from app import rating
from app.context import AppContext


def request(host: str, session: str, username: str | None = None) -> gr.Request:
    scope = {"type": "http", "client": (host, 5000), "headers": []}
    return gr.Request(Request(scope), username=username, session_hash=session)


@pytest.fixture
def ctx(tmp_path):
    return AppContext(None, db_path=tmp_path / "coteam.db")


@pytest.fixture
def episode(ctx):
    with store.open_db(ctx.db_path) as db:
        task = store.create_task(db, "coding", "def f(): ...")
        episode = store.start_episode(db, task, shape="single", roles=["coder"])
        store.add_turn(db, episode, turn=0, agent=0, observation="o", completion="c")
        store.finish_episode(db, episode, "def f(): return 1")
    return episode


def test_the_rater_is_the_servers_identity_not_the_browsers_session():
    one, again = request("10.0.0.1", "session-a"), request("10.0.0.1", "session-b")
    assert rating.rater_of(one).identity == rating.rater_of(again).identity  # new session, same
    assert rating.rater_of(one).session != rating.rater_of(again).session
    assert rating.rater_of(one).identity != rating.rater_of(request("10.0.0.2", "s")).identity
    assert "10.0.0.1" not in rating.rater_of(one).identity  # the address is not stored
    assert rating.rater_of(request("10.0.0.1", "s", username="ann")).identity == "user:ann"


def test_a_new_session_does_not_escape_the_hourly_limit(ctx, episode):
    ctx.rating_limits = store.RatingLimits(per_session=5, per_hour=2)
    with store.open_db(ctx.db_path) as db:
        task = store.get_episode(db, episode)["task_id"]
        other = store.start_episode(db, task, shape="single", roles=["coder"])
        store.finish_episode(db, other, "def f(): pass")
    said = [
        rating.save_rating(ctx, e, "thumbs", "x", rating.rater_of(request("10.0.0.1", s)), value=v)
        for e, s, v in [(episode, "s1", 1), (other, "s2", -1), (episode, "s3", -1)]
    ]
    third = rating.save_rating(
        ctx, other, "score", "x", rating.rater_of(request("10.0.0.1", "s4")), value=2
    )
    with store.open_db(ctx.db_path) as db:
        stored = [(r["episode_id"], r["kind"], r["value"], r["counts"]) for r in db["ratings"].rows]
    # the third thumbs replaced the first (same person, same thing): 2 in the hour so far
    assert sorted(stored) == [(episode, "thumbs", -1.0, 1), (other, "score", 2.0, 0),
                              (other, "thumbs", -1.0, 1)]  # fmt: skip
    assert all("✓ Saved" in s and "will not steer" not in s for s in said)
    assert "✓ Saved" in third and "will not steer training" in third  # kept, and said so
