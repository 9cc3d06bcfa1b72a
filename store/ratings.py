"""Ratings people give to what the team produced, and the preference pairs they imply.

A rating is about one finished episode's output, or with `agent=i` about agent i's part of it.
Kinds and the fields each one takes (every other field must be left out):

- `thumbs`   value +1 or -1
- `score`    value, a whole number from 1 to 5
- `comment`  text, at most `MAX_COMMENT_CHARS`
- `edit`     text: the person's corrected output, preferred over the original
- `pairwise` other_episode_id and choice: the episode is the left (A) output, the other the
             right (B) one, both answers to the same task; choice is left, right, tie or both_bad

`add_rating` checks all of it before writing and raises `InvalidRating` (a `ValueError`) with
the reason, leaving the database unchanged. `preference_pairs` turns ratings into
chosen/rejected pairs for a reward model or DPO.

One person must not be able to drive training. The rater is who the server says it is (the
app passes its own identity, never a value the browser chose), and:
- duplicates collapse: a rater's new verdict on the same thing (same episode, kind and agent;
  for A/B the same two episodes in either order) replaces the old one;
- limits: past `RatingLimits.per_session` ratings in one session or `per_hour` ratings by one
  rater in the last hour, a rating is still stored but with `counts = 0`: it neither moves the
  training schedule (`ratings_toward_schedule`) nor teaches the preference model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlite_utils import Database

from store.db import InvalidInput, StoreError, check_storable_text, now, rows, write_transaction

KINDS = ("thumbs", "score", "comment", "edit", "pairwise")
CHOICES = ("left", "right", "tie", "both_bad")
MAX_COMMENT_CHARS = 10_000
MAX_EDIT_CHARS = 200_000  # an edited program or essay, not a data dump
MAX_RATER_CHARS = 200

# which optional fields each kind takes; the rest must be None
_FIELDS = {
    "thumbs": {"value"},
    "score": {"value"},
    "comment": {"text"},
    "edit": {"text"},
    "pairwise": {"choice", "other_episode_id"},
}


class InvalidRating(StoreError, ValueError):
    """A rating was refused; the message says which rule it broke. Nothing was written."""


@dataclass(frozen=True)
class RatingLimits:
    """How many of one rater's ratings count: per browser session, and per rolling hour."""

    per_session: int = 60  # a person may rate the 50 answers a retrain learns a taste from
    per_hour: int = 120


def add_rating(
    db: Database,
    episode_id: int,
    kind: str,
    *,
    value: float | None = None,
    text: str | None = None,
    choice: str | None = None,
    other_episode_id: int | None = None,
    agent: int | None = None,
    rater: str | None = None,
    session: str | None = None,
    limits: RatingLimits = RatingLimits(),  # noqa: B008
) -> int:
    """Validate and store one rating of a finished episode by `rater` in `session`; return
    its id. See the module docstring for what each kind takes, and how duplicates and limits
    work (the row's `counts` says whether it counts). Raises `InvalidRating`.
    """
    if kind not in KINDS:
        raise InvalidRating(f"unknown rating kind {kind!r}; expected one of {', '.join(KINDS)}")
    given = {"value": value, "text": text, "choice": choice, "other_episode_id": other_episode_id}
    extra = sorted(name for name, v in given.items() if v is not None and name not in _FIELDS[kind])
    if extra:
        raise InvalidRating(f"a {kind} rating takes no {', '.join(extra)}")
    for name, given_name in (("rater", rater), ("session", session)):
        if given_name is not None and (
            not isinstance(given_name, str) or len(given_name) > MAX_RATER_CHARS
        ):
            raise InvalidRating(f"{name} must be a name of at most {MAX_RATER_CHARS} characters")
    value = _check_value(kind, value)
    _check_text(kind, text)
    with write_transaction(db):
        episode = _rated_episode(db, episode_id)
        if agent is not None:
            if kind == "pairwise":
                raise InvalidRating("a pairwise rating compares whole outputs; leave agent out")
            if isinstance(agent, bool) or not isinstance(agent, int):
                raise InvalidRating(f"agent must be an agent number, got {agent!r}")
            if not 0 <= agent < episode["team_size"]:
                raise InvalidRating(
                    f"episode {episode_id} has agents 0 to {episode['team_size'] - 1}, not {agent}"
                )
        if kind == "pairwise":
            _check_pair(db, episode, other_episode_id, choice)
        _collapse_duplicates(db, rater, episode_id, kind, agent, other_episode_id)
        counts = _within_limits(db, rater, session, limits)
        row = {
            "episode_id": episode_id,
            "agent": agent,
            "kind": kind,
            "value": value,
            "text": text,
            "choice": choice,
            "other_episode_id": other_episode_id,
            "rater": rater,
            "session": session,
            "counts": int(counts),
            "created_at": now(),
        }
        return db["ratings"].insert(row).last_pk


_SAME_VERDICT = """rater = ? AND kind = ? AND agent IS ? AND (
    (episode_id = ? AND other_episode_id IS ?) OR (episode_id = ? AND other_episode_id = ?))"""


def has_verdict(
    db: Database,
    rater: str | None,
    episode_id: int,
    kind: str,
    agent: int | None = None,
    other_episode_id: int | None = None,
) -> bool:
    """Whether `rater` has already rated the same thing (what a new rating would replace)."""
    if rater is None:
        return False  # ratings with no rater (scripts, the CLI) are each their own
    pair = (episode_id, other_episode_id)
    params = [rater, kind, agent, *pair, *reversed(pair)]
    return bool(db.execute(f"SELECT 1 FROM ratings WHERE {_SAME_VERDICT}", params).fetchone())


def _collapse_duplicates(
    db: Database, rater: str | None, episode_id: int, kind: str, agent, other_episode_id
) -> None:
    """Delete the rater's earlier verdict on the same thing."""
    if rater is None:
        return
    pair = (episode_id, other_episode_id)
    db.execute(
        f"DELETE FROM ratings WHERE {_SAME_VERDICT}",
        [rater, kind, agent, *pair, *reversed(pair)],
    )


def _within_limits(
    db: Database, rater: str | None, session: str | None, limits: RatingLimits
) -> bool:
    """Whether a new rating by `rater` in `session` stays within `limits` (so it counts)."""
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="milliseconds")
    checks = [
        ("session", session, "1", [], limits.per_session),
        ("rater", rater, "created_at > ?", [hour_ago], limits.per_hour),
    ]
    for column, who, since, params, limit in checks:
        if who is None:
            continue
        [(n,)] = db.execute(
            f"SELECT count(*) FROM ratings WHERE {column} = ? AND counts AND {since}",
            [who, *params],
        ).fetchall()
        if n >= limit:
            return False
    return True


def get_rating(db: Database, rating_id: int) -> dict:
    """One rating as stored (`counts`: whether it steers training, inside the rating limits)."""
    return db["ratings"].get(rating_id)


def count_ratings(db: Database, since: str = "") -> int:
    """How many ratings were made after `since` (an ISO time; "": all of them)."""
    return db["ratings"].count_where("created_at > ?", [since])


def ratings_toward_schedule(db: Database, since: str) -> int:
    """How many ratings made after `since` count toward the training schedule."""
    [(n,)] = db.execute(
        "SELECT count(*) FROM ratings WHERE created_at > ? AND counts AND kind <> 'comment'",
        [since],
    ).fetchall()
    return n


def _check_value(kind: str, value: Any) -> float | None:
    if kind not in ("thumbs", "score"):
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "thumbs" and not (number and value in (1, -1)):
        raise InvalidRating(f"a thumbs rating is +1 or -1, got {value!r}")
    if kind == "score" and not (
        number and 1 <= value <= 5 and value == int(value)  # range first: 10**400 can't be a float
    ):
        raise InvalidRating(f"a score is a whole number from 1 to 5, got {value!r}")
    return float(value)


def _check_text(kind: str, text: Any) -> None:
    if kind not in ("comment", "edit"):
        return
    limit = MAX_COMMENT_CHARS if kind == "comment" else MAX_EDIT_CHARS
    if not isinstance(text, str) or not text.strip():
        raise InvalidRating(f"a {kind} rating needs non-empty text")
    if len(text) > limit:
        raise InvalidRating(f"a {kind} is at most {limit:,} characters, got {len(text):,}")
    try:
        check_storable_text(kind, text)
    except InvalidInput as e:
        raise InvalidRating(str(e)) from None


def _rated_episode(db: Database, episode_id: Any) -> dict:
    is_id = isinstance(episode_id, int) and not isinstance(episode_id, bool)
    found = rows(db, "SELECT * FROM episodes WHERE id = ?", [episode_id]) if is_id else []
    if not found:
        raise InvalidRating(f"there is no episode {episode_id!r} to rate")
    if found[0]["status"] == "running":
        raise InvalidRating(f"episode {episode_id} is still running; rate it once it has finished")
    return found[0]


def _check_pair(db: Database, episode: dict, other_episode_id: Any, choice: Any) -> None:
    if choice not in CHOICES:
        raise InvalidRating(f"a pairwise choice is one of {', '.join(CHOICES)}, got {choice!r}")
    if other_episode_id is None:
        raise InvalidRating("a pairwise rating needs other_episode_id, the right-hand output")
    if other_episode_id == episode["id"]:
        raise InvalidRating("a pairwise rating compares two different episodes")
    other = _rated_episode(db, other_episode_id)
    if other["task_id"] != episode["task_id"]:
        raise InvalidRating(
            f"episodes {episode['id']} and {other_episode_id} answer different tasks "
            f"({episode['task_id']} and {other['task_id']}); A/B compares answers to one task"
        )


def preference_pairs(db: Database) -> Iterator[dict]:
    """Chosen/rejected pairs implied by the ratings, as dicts ready for a preference dataset.

    Keys: prompt, chosen, rejected, source, task_id, chosen_episode_id, rejected_episode_id,
    agent. Sources: `pairwise` (left or right picked; ties and both_bad give no pair), `edit`
    (the edited text over the original; for an agent's edit, over that agent's last completion,
    with that agent's observation as the prompt), `score` and `thumbs` (between finished
    episodes of the same task with a higher mean team score / positive versus negative net
    thumbs). Team-level pairs have agent None and the task's prompt.
    """
    yield from rows(
        db,
        """
        SELECT t.prompt,
            CASE r.choice WHEN 'left' THEN a.final_output ELSE b.final_output END AS chosen,
            CASE r.choice WHEN 'left' THEN b.final_output ELSE a.final_output END AS rejected,
            'pairwise' AS source, t.id AS task_id,
            CASE r.choice WHEN 'left' THEN a.id ELSE b.id END AS chosen_episode_id,
            CASE r.choice WHEN 'left' THEN b.id ELSE a.id END AS rejected_episode_id,
            NULL AS agent
        FROM ratings r
        JOIN episodes a ON a.id = r.episode_id
        JOIN episodes b ON b.id = r.other_episode_id
        JOIN tasks t ON t.id = a.task_id
        WHERE r.kind = 'pairwise' AND r.choice IN ('left', 'right')
            AND a.final_output IS NOT NULL AND b.final_output IS NOT NULL
        ORDER BY r.id
        """,
    )
    yield from rows(
        db,
        """
        SELECT t.prompt, r.text AS chosen, e.final_output AS rejected, 'edit' AS source,
            t.id AS task_id, e.id AS chosen_episode_id, e.id AS rejected_episode_id,
            NULL AS agent
        FROM ratings r
        JOIN episodes e ON e.id = r.episode_id
        JOIN tasks t ON t.id = e.task_id
        WHERE r.kind = 'edit' AND r.agent IS NULL
            AND e.final_output IS NOT NULL AND r.text <> e.final_output
        UNION ALL
        SELECT tu.observation AS prompt, r.text AS chosen, tu.completion AS rejected,
            'edit' AS source, e.task_id, e.id, e.id, r.agent
        FROM ratings r
        JOIN episodes e ON e.id = r.episode_id
        JOIN turns tu ON tu.episode_id = e.id AND tu.agent = r.agent AND tu.turn = (
            SELECT max(turn) FROM turns WHERE episode_id = e.id AND agent = r.agent)
        WHERE r.kind = 'edit' AND r.agent IS NOT NULL AND r.text <> tu.completion
        ORDER BY chosen_episode_id, agent
        """,
    )
    for kind, summary, better in [
        ("score", "avg(r.value)", "a.summary > b.summary"),
        ("thumbs", "sum(r.value)", "a.summary > 0 AND b.summary < 0"),
    ]:
        yield from rows(
            db,
            f"""
            WITH rated AS (
                SELECT e.id, e.task_id, e.final_output, {summary} AS summary
                FROM episodes e JOIN ratings r ON r.episode_id = e.id
                WHERE r.kind = '{kind}' AND r.agent IS NULL AND e.final_output IS NOT NULL
                GROUP BY e.id
            )
            SELECT t.prompt, a.final_output AS chosen, b.final_output AS rejected,
                '{kind}' AS source, t.id AS task_id, a.id AS chosen_episode_id,
                b.id AS rejected_episode_id, NULL AS agent
            FROM rated a
            JOIN rated b ON b.task_id = a.task_id AND {better}
            JOIN tasks t ON t.id = a.task_id
            ORDER BY a.id, b.id
            """,
        )
