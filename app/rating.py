"""Ratings from the page: thumbs on an agent's part or on the result, a 1-5 score with a comment,
an edited result (saved as the preferred output) and A/B votes. Each one is written to the store
at once (one fresh connection per call: event functions run in Gradio's worker threads) and the
page says what was saved, with the rating's id, or why it was not."""

from __future__ import annotations

import gradio as gr

import store
from app.context import AppContext

VOTES = {
    "left": "A (left) is better",
    "right": "B (right) is better",
    "tie": "a tie",
    "both_bad": "both are bad",
}


def save_rating(
    ctx: AppContext,
    episode_id: int | None,
    kind: str,
    what: str,
    rater: str | None = None,
    **fields,
) -> str:
    """Store one rating of `episode_id` and return the confirmation (or the refusal) to show;
    `what` says in words what was rated ("thumbs up on agent 1's part")."""
    if episode_id is None:
        return refuse("there is no finished episode to rate yet: run one first")
    try:
        with store.open_db(ctx.db_path) as db:
            rating_id = store.add_rating(db, episode_id, kind, rater=rater, **fields)
    except store.InvalidRating as e:
        return refuse(str(e))
    gr.Info(f"Saved rating #{rating_id}")
    return f"✓ Saved rating #{rating_id}: {what} (episode {episode_id})."


def save_score_and_comment(
    ctx: AppContext, episode_id: int | None, score: int | None, comment: str, rater: str | None
) -> str:
    """The score and the comment of the rating panel: each is its own rating row."""
    comment = (comment or "").strip()
    if score is None and not comment:
        return refuse("choose a score from 1 to 5, or write a comment, before saving")
    lines = []
    if score is not None:
        lines.append(
            save_rating(ctx, episode_id, "score", f"score {score}/5", rater, value=int(score))
        )
    if comment:
        lines.append(save_rating(ctx, episode_id, "comment", "your comment", rater, text=comment))
    return "\n\n".join(lines)


def save_edit(ctx: AppContext, episode_id: int | None, edited: str, rater: str | None) -> str:
    """The person's version of the result, kept as the preferred output."""
    if episode_id is None:
        return refuse("there is no finished episode to edit yet: run one first")
    with store.open_db(ctx.db_path) as db:
        original = store.get_episode(db, episode_id)["final_output"] or ""
    if (edited or "").strip() == original.strip():
        return refuse("your version is the same as the team's: change the result first")
    return save_rating(
        ctx, episode_id, "edit", "your edited version, as the preferred output", rater, text=edited
    )


def save_vote(ctx: AppContext, pair: tuple[int, int] | None, choice: str, rater: str | None) -> str:
    """An A/B vote: the left episode against the right one, on the same task."""
    if not pair:
        return refuse("run an A/B comparison first; the vote is about its two results")
    left, right = pair
    return save_rating(
        ctx, left, "pairwise", f"{VOTES[choice]} ({left} vs {right})", rater,
        choice=choice, other_episode_id=right,
    )  # fmt: skip


def refuse(reason: str) -> str:
    gr.Warning(f"Not saved: {reason}")
    return f"⚠ Not saved: {reason}."


def rater_of(request: gr.Request | None) -> str | None:
    """Who rated: the browser session (the app has no user accounts)."""
    session = getattr(request, "session_hash", None)
    return f"web:{session[:12]}" if session else None
