"""What people prefer, learnt from every stored rating, as a reward for fresh samples.

Ratings arrive a few at a time, about outputs of older adapters, so they are not trained on
directly (the store keeps neither the sampling log-probs nor the finish reason, so an
importance weight against the producing policy cannot be computed). Instead a small
Bradley–Terry model learns a score s(x) = w·φ(x) + b over the output's sentence embedding
φ(x) (all-MiniLM-L6-v2, `learner.writing_reward.embed_texts`), and every new rollout is scored
by it:

    pairs    P(a ≻ b) = σ(s(a) − s(b))    A/B votes (a tie: ½), edited ≻ original,
                                          and score/thumbs-rated outputs of the same task
    singles  P(good | x) = σ(s(x))        a score 1–5 → 0…1, thumbs → 1 / 0, both_bad → 0

fit by L-BFGS on the mean log-loss of both plus an L2 penalty, so a rating of a task with one
episode still counts. The learner blends it with the automatic reward by one formula,

    R = (1 − w_h) · R_auto + w_h · σ(s(x))        (`rewards.blend_human`, w_h = `RewardWeights.human`)

Nothing is consumed: each run refits on all ratings in the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit
from sqlite_utils import Database

from store.db import rows

L2 = 1e-2  # keeps w small when a handful of ratings would otherwise fit exactly


@dataclass
class PreferenceExamples:
    """Texts and what the ratings say about them: pairs (i ≻ j with probability p) and singles."""

    texts: list[str] = field(default_factory=list)
    pairs: list[tuple[int, int, float]] = field(default_factory=list)
    singles: list[tuple[int, float]] = field(default_factory=list)
    rating_ids: set[int] = field(default_factory=set)  # every rating that gave an example
    _index: dict[str, int] = field(default_factory=dict)

    def text_index(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.texts)
            self.texts.append(text)
        return self._index[text]


def preference_examples(db: Database, task_kind: str | None = None) -> PreferenceExamples:
    """Every rating in the store that says something about preference, as examples.

    `task_kind` ('coding' or 'writing', matching `tasks.kind`) keeps one kind of task; comments
    carry no verdict and are left out, and so are ratings past the rating limits (they are
    kept but do not count, see `store.ratings`). An agent's own rating is about its last
    completion."""
    where = "AND t.kind = :kind" if task_kind else ""
    ratings = rows(
        db,
        f"""
        SELECT r.id, r.kind, r.value, r.text, r.choice, r.agent, r.episode_id,
            e.task_id, e.final_output AS output, o.final_output AS other_output,
            (SELECT tu.completion FROM turns tu WHERE tu.episode_id = e.id AND tu.agent = r.agent
             ORDER BY tu.turn DESC LIMIT 1) AS agent_output
        FROM ratings r
        JOIN episodes e ON e.id = r.episode_id
        JOIN tasks t ON t.id = e.task_id
        LEFT JOIN episodes o ON o.id = r.other_episode_id
        WHERE r.kind <> 'comment' AND r.counts {where}
        ORDER BY r.id
        """,
        {"kind": task_kind},
    )
    examples = PreferenceExamples()
    verdicts: dict[tuple[int, int | None], list[float]] = defaultdict(list)  # (task, agent)
    by_text: dict[int, list[float]] = defaultdict(list)
    for r in ratings:
        own = r["agent_output"] if r["agent"] is not None else r["output"]
        if not own:
            continue
        x = examples.text_index(own)
        if r["kind"] == "pairwise":
            if not r["other_output"]:
                continue
            y = examples.text_index(r["other_output"])
            if r["choice"] == "both_bad":
                examples.singles += [(x, 0.0), (y, 0.0)]
            else:
                examples.pairs.append((x, y, {"left": 1.0, "right": 0.0, "tie": 0.5}[r["choice"]]))
        elif r["kind"] == "edit":
            examples.pairs.append((examples.text_index(r["text"]), x, 1.0))
        else:
            unit = (r["value"] - 1) / 4 if r["kind"] == "score" else float(r["value"] > 0)
            examples.singles.append((x, unit))
            if x not in by_text:
                verdicts[(r["task_id"], r["agent"])].append(x)
            by_text[x].append(unit)
        examples.rating_ids.add(r["id"])
    # outputs of one task rated on the absolute scales: the better-rated one is preferred
    for members in verdicts.values():
        for i in members:
            for j in members:
                if np.mean(by_text[i]) > np.mean(by_text[j]):
                    examples.pairs.append((i, j, 1.0))
    return examples


@dataclass
class PreferenceModel:
    """s(x) = w·φ(x) + b over unit sentence embeddings; `rating_ids` are the ratings it learnt."""

    weights: np.ndarray
    bias: float
    rating_ids: frozenset[int]

    def preference_score(self, texts: Sequence[str]) -> np.ndarray:
        """How much people would like each text, σ(s(x)) in (0, 1)."""
        from learner.writing_reward import embed_texts

        if not texts:
            return np.zeros(0)
        return expit(embed_texts(list(texts)) @ self.weights + self.bias)


def fit_preference_model(examples: PreferenceExamples, l2: float = L2) -> PreferenceModel | None:
    """The Bradley–Terry model of the module docstring, or None when no rating gives an example."""
    from learner.writing_reward import embed_texts

    if not examples.pairs and not examples.singles:
        return None
    features = np.asarray(embed_texts(examples.texts), dtype=np.float64)
    return fit_on_features(features, examples, l2)


def fit_on_features(
    features: np.ndarray, examples: PreferenceExamples, l2: float = L2
) -> PreferenceModel:
    """Fit w, b on given feature rows (one per text of `examples`); the loss is the docstring's."""
    dim = features.shape[1]
    pairs = np.asarray(examples.pairs, dtype=np.float64).reshape(-1, 3)
    singles = np.asarray(examples.singles, dtype=np.float64).reshape(-1, 2)
    diff = features[pairs[:, 0].astype(int)] - features[pairs[:, 1].astype(int)]
    single_x = features[singles[:, 0].astype(int)]

    def loss_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:dim], theta[dim]
        loss, grad = l2 * (w @ w + b * b), 2 * l2 * theta
        for x, y, with_bias in ((diff, pairs[:, 2], False), (single_x, singles[:, 1], True)):
            if len(y):
                z = x @ w + (b if with_bias else 0.0)  # b cancels in a difference
                loss -= np.mean(y * log_expit(z) + (1 - y) * log_expit(-z))
                residual = (expit(z) - y) / len(y)
                grad[:dim] += x.T @ residual
                grad[dim] += residual.sum() if with_bias else 0.0
        return float(loss), grad

    theta = minimize(loss_and_grad, np.zeros(dim + 1), jac=True, method="L-BFGS-B").x
    return PreferenceModel(theta[:dim], float(theta[dim]), frozenset(examples.rating_ids))


def load_preference_model(db: Database, task_kind: str | None = None) -> PreferenceModel | None:
    """Fit the preference model on every rating of `task_kind` in the store (None: no ratings)."""
    return fit_preference_model(preference_examples(db, task_kind))
