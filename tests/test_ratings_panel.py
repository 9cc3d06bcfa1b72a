"""What your ratings changed: the admin panel's table and pairs, and the "answered by" line."""

from __future__ import annotations

import pytest

import store
from app.context import AppContext
from app.ratings_panel import answered_by, pairs_markdown, rating_changes


@pytest.fixture
def ctx(tmp_path):
    return AppContext(None, db_path=tmp_path / "coteam.db")


def answer(db, task, output, versions):
    episode = store.start_episode(
        db, task, shape="parallel", roles=["helper", "main"], adapter_versions=versions
    )
    store.finish_episode(db, episode, output)
    return episode


def test_each_version_shows_its_ratings_its_held_out_change_and_answers_before_after(ctx):
    with store.open_db(ctx.db_path) as db:
        gate = {"candidate_score": 0.7, "active_score": 0.5}
        store.register_adapter(db, 0, "/a/v1", metrics={"ratings_learnt": 4, "gate": gate})
        v2 = {"ratings_learnt": 9, "preference_skill": 0.1, "preference_weight": 0.32,
              "gate": {"candidate_score": 0.6, "active_score": 0.7}}  # fmt: skip
        store.register_adapter(db, 0, "/a/v2", parent=1, metrics=v2)
        store.register_adapter(db, 1, "/b/v1")  # never gated, trained before ratings counted
        shared, only_new = (store.create_task(db, "coding", p) for p in ("def f():", "def g():"))
        answer(db, shared, "base answer", [0, 0])
        answer(db, shared, "v1 answer", [1, 1])
        v2_answer = answer(db, shared, "v2 answer", [2, 1])
        store.record_rewards(db, v2_answer, {"asserts_passed": 3, "asserts_total": 4}, 0.5, {})
        answer(db, only_new, "v2 alone", [2, 0])
        [pair] = store.answers_before_after(db, 0, 2, 3)
        assert (pair["prompt"], pair["before"], pair["after"]) == (
            "def f():",
            "v1 answer",
            "v2 answer",
        )
        assert pair["after_rewards"] == {"asserts_passed": 3.0, "asserts_total": 4.0}
        assert (
            store.answers_before_after(db, 0, 1, 3)[0]["before"] == "base answer"
        )  # parent: the base
        rated = answer(db, shared, "served", [2, 0])
        store.record_rewards(db, rated, {"asserts_passed": 4, "asserts_total": 4}, 0.9, {})

    table = rating_changes(ctx)["data"]
    assert [row[0] for row in table] == ["agent2-v1", "agent1-v2", "agent1-v1"]
    assert table[1][3:] == [9, 0.32, 0.6, 0.7, -0.1] and table[2][3:] == [4, None, 0.7, 0.5, 0.2]
    assert table[0][3:] == [None, None, None, None, None]

    shown = pairs_markdown(ctx, "agent1-v2")
    assert "Before (v1)" in shown and "v1 answer" in shown and "served" in shown  # the latest
    assert shown.startswith(
        "**agent1-v2** learnt from 9 rating(s) (their weight in its reward: 0.32)"
    )
    assert (
        "scored 0.600 against 0.700" in shown and "After (agent1-v2, tests passed 4 of 4)" in shown
    )
    assert "Before (the base model, tests passed 4 of 4)" in pairs_markdown(ctx, "agent2-v1")
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, "/a/v3", parent=2)
    assert "No prompt" in pairs_markdown(ctx, "agent1-v3")
    assert "no adapter version agent5-v1" in pairs_markdown(ctx, "agent5-v1")

    said = answered_by(ctx, rated)
    assert "agent 1: agent1-v2, trained" in said and "from 9 rating(s)" in said
    assert "agent 2: base model" in said


def test_the_answered_by_line_says_where_each_version_came_from_and_why_the_base(ctx):
    card = {"versions": {"0": {"training_run": {"config": {"task": "coding"}}}}}
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, "/a/v1", metrics={"source": "shipped", "card": card})
        store.activate_adapter(db, 0, 1)
        run = store.start_training_run(db, "manual", config={"task": "coding"})
        store.register_adapter(db, 1, "/b/v1", training_run_id=run)
        coding, writing = (
            store.create_task(db, "coding", "def f():"),
            store.create_task(db, "writing", "Write about tides."),
        )
        coded = answer(db, coding, "code", [1, 1])
        chose_base = answer(db, coding, "code", [0, 1])
        written = answer(db, writing, "text", [0, 0])
    said = answered_by(ctx, coded)
    assert "agent 1: agent1-v1, the shipped coding team" in said
    assert "agent 2: agent2-v1, trained here" in said and "on coding" in said
    # the base model chosen over an active version needs no reason; one on writing does
    assert "agent 1: base model;" in answered_by(ctx, chose_base)
    said = answered_by(ctx, written)
    assert "agent 1: base model (no writing version of it is active)" in said
    assert "agent 2: base model (no writing version of it is active)." in said


def test_the_panel_shows_nothing_until_the_admin_tab_is_unlocked(ctx):
    import gradio as gr

    from app.ratings_panel import RatingsPanel

    panel = RatingsPanel(ctx)
    with pytest.raises(gr.Error, match="Unlock"):
        panel.show(False)
    with pytest.raises(gr.Error, match="Unlock"):
        panel.show_pairs(False, "agent1-v1")
    assert panel.show_when_unlocked(False) == (gr.skip(), gr.skip())
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, "/a/v1", metrics={"ratings_learnt": 3})
    table, pick = panel.show_when_unlocked(True)
    assert table["data"][0][:1] == ["agent1-v1"] and pick["value"] == "agent1-v1"
