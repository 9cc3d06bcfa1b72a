"""Ratings from the page: thumbs on an agent's part or on the result, a 1-5 score with a comment,
an edited result (saved as the preferred output) and A/B votes. Each one is written to the store
at once (one fresh connection per call: event functions run in Gradio's worker threads) and the
page says what was saved, with the rating's id, or why it was not.

Who rated is decided here, on the server, from the request (`rater_of`): the logged-in user
when the app has accounts, else the client's address as the server saw it, hashed. The browser
session (Gradio's session hash) only groups ratings for the per-session limit; a client can
choose it, so the per-hour limit on the server's identity is what bounds one person."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import gradio as gr

import store
from app.context import AppContext

VOTES = {
    "left": "A (left) is better",
    "right": "B (right) is better",
    "tie": "a tie",
    "both_bad": "both are bad",
}


class Rater(NamedTuple):
    """Who rated (the server's identity for them) and in which browser session."""

    identity: str | None
    session: str | None


def save_rating(
    ctx: AppContext,
    episode_id: int | None,
    kind: str,
    what: str,
    rater: Rater | None = None,
    **fields,
) -> str:
    """Store one rating of `episode_id` and return the confirmation (or the refusal) to show;
    `what` says in words what was rated ("thumbs up on agent 1's part")."""
    if episode_id is None:
        return refuse("there is no finished episode to rate yet: run one first")
    identity, session = rater or (None, None)
    try:
        with store.open_db(ctx.db_path) as db:
            replaced = store.has_verdict(
                db,
                identity,
                episode_id,
                kind,
                fields.get("agent"),
                fields.get("other_episode_id"),
            )
            rating_id = store.add_rating(
                db,
                episode_id,
                kind,
                rater=identity,
                session=session,
                limits=ctx.rating_limits,
                **fields,
            )
            counts = store.get_rating(db, rating_id)["counts"]
    except store.InvalidRating as e:
        return refuse(str(e))
    gr.Info(f"Saved rating #{rating_id}")
    saved = f"✓ Saved rating #{rating_id}: {what} (episode {episode_id})."
    if replaced:
        saved += " It replaces your earlier one."
    if not counts:
        limits = ctx.rating_limits
        saved += (
            f" You have passed the limit of {limits.per_session} ratings a session or "
            f"{limits.per_hour} an hour: it is kept, but it will not steer training."
        )
    return saved


def save_score_and_comment(
    ctx: AppContext, episode_id: int | None, score: int | None, comment: str, rater: Rater | None
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


def save_edit(ctx: AppContext, episode_id: int | None, edited: str, rater: Rater | None) -> str:
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


def save_vote(
    ctx: AppContext, pair: tuple[int, int] | None, choice: str, rater: Rater | None
) -> str:
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


def rater_of(request: gr.Request | None) -> Rater:
    """Who rated, as the server knows them: the logged-in user, else the hashed client address;
    and the browser session, for the per-session limit."""
    username = getattr(request, "username", None)
    host = getattr(getattr(request, "client", None), "host", None)
    if username:
        identity = f"user:{username}"
    elif host:
        identity = "ip:" + hashlib.sha256(host.encode()).hexdigest()[:16]  # no raw addresses
    else:
        identity = None
    session = getattr(request, "session_hash", None)
    return Rater(identity, f"web:{session[:12]}" if session else None)
