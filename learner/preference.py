"""What people prefer, learnt from every stored rating, as a reward for fresh samples.

Ratings arrive a few at a time, about outputs of older adapters, so they are not trained on
directly (the store keeps neither the sampling log-probs nor the finish reason, so an
importance weight against the producing policy cannot be computed). Instead a small
Bradley–Terry model learns a score s(x) = w·φ(x) + b over the output's features φ(x)
(`features`): its sentence embedding (all-MiniLM-L6-v2, `agents.team.sentences.embed_texts`)
beside the words it has (word unigrams and bigrams hashed into WORD_FEATURES dimensions, each 1
when present: a word both outputs of a pair have cancels in their difference, whatever their
lengths), and every new rollout is scored by it. The words rank a taste in code far better than
the embedding alone (AUC 0.83-0.96 against 0.47-0.66 on stored programs, `bench/preference.py`);
as presence rather than unit-length counts they rank it better still, in code and in writing
(docs/runs/training-log.md, "The words as presence").

    pairs    P(a ≻ b) = σ(s(a) − s(b))    A/B votes (a tie: ½), edited ≻ original,
                                          and score/thumbs-rated outputs of the same task
    singles  P(good | x) = σ(s(x))        a score 1–5 → 0…1, thumbs → 1 / 0, both_bad → 0

fit by L-BFGS on the mean log-loss of both plus an L2 penalty, so a rating of a task with one
episode still counts. The penalty is chosen by 5-fold cross-validation of that log-loss (four
assignments of the folds, summed) over L2_GRID (the default L2 below 10 examples): ratings
that carry a taste fit a confident model, coin flips fit a flat one. What enters the reward is
Bradley–Terry's own answer for a sample of a group: the probability a person prefers it to
another sample of the same task,

    h(x_i) = mean over j ≠ i of σ(s(x_i) − s(x_j))     (½ for a sample alone)

and the reward adds it, centred among the samples the environment scored alike (the tests;
for writing its verdict; `learner.rewards.blend_human`), with a weight w_h that grows with the
evidence (`PreferenceModel.blend_weight`): `RewardWeights.human` once the model predicts
held-out votes well (its cross-validated skill reaches `RewardWeights.human_full_skill`), in
proportion below, so coin-flip votes, or a handful of votes that teach nothing yet, barely move
the team.

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

from agents.tasks import evaluation_split
from agents.team.sentences import embed_texts
from learner.reward_config import RewardWeights
from learner.rewards import rating_to_unit
from store.db import open_db, rows

WORD_FEATURES = 2**12  # hashed word 1-2-grams beside the 384 dimensions of the embedding
L2 = 1e-2  # keeps w small when a handful of ratings would otherwise fit exactly
# the penalties cross-validation chooses from; 10 and 1 let coin flips fit a flat model on φ's
# unnormalised words (norm 4-10), where 0.1 left them a spread of 0.05-0.08 in a group
L2_GRID = (10.0, 1.0, 1e-1, 1e-2, 1e-3, 1e-4)
FOLDS = 5
REPEATS = 4  # fold assignments, their held-out losses summed: one alone is luck at 50 votes


def sentence_embedding(texts: Sequence[str]) -> np.ndarray:
    """Each text's unit sentence embedding, one float64 row per text: φ's first part (a text
    already embedded in this process is not embedded again: `embed_texts`)."""
    return np.asarray(embed_texts(texts), dtype=np.float64)


def features(texts: Sequence[str], counts: bool = False) -> np.ndarray:
    """φ: each text's unit sentence embedding beside its hashed word unigrams and bigrams (split
    at white space, case kept, 1 where present, 0 elsewhere), one float64 row per text.
    `counts`: the words' counts scaled to unit length instead (φ until 2026-11-27, kept for
    bench/preference.py's comparison)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    words = HashingVectorizer(
        analyzer="word",
        token_pattern=r"\S+",
        ngram_range=(1, 2),
        n_features=WORD_FEATURES,
        alternate_sign=False,
        lowercase=False,
        binary=not counts,
        norm="l2" if counts else None,
    )
    texts = list(texts)
    return np.hstack([sentence_embedding(texts), words.transform(texts).toarray()])


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

    def add_vote(self, left: str, right: str, choice: str) -> None:
        """An A/B vote between two texts: "left", "right" or "tie" (P(left ≻ right) 1, 0, ½)."""
        x, y = self.text_index(left), self.text_index(right)
        self.pairs.append((x, y, {"left": 1.0, "right": 0.0, "tie": 0.5}[choice]))


def preference_examples(
    db: Database, task_kind: str | None = None, fold: str | None = None
) -> PreferenceExamples:
    """Every rating in the store that says something about preference, as examples.

    `task_kind` ('coding' or 'writing', matching `tasks.kind`) keeps one kind of task; comments
    carry no verdict and are left out, and so are ratings past the rating limits (they are
    kept but do not count, see `store.ratings`), and so are ratings of a curated task of the
    validation or held-out split (`agents.tasks.evaluation_split`, HumanEval's by `fold`: kept
    for evaluation, never learnt). An agent's own rating is about its last completion."""
    where = "AND t.kind = :kind" if task_kind else ""
    ratings = rows(
        db,
        f"""
        SELECT r.id, r.kind, r.value, r.text, r.choice, r.agent, r.episode_id,
            e.task_id, t.source, t.source_id, e.final_output AS output,
            o.final_output AS other_output,
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
        if not own or evaluation_split(r["source"], r["source_id"], fold):
            continue
        x = examples.text_index(own)
        if r["kind"] == "pairwise":
            if not r["other_output"]:
                continue
            if r["choice"] == "both_bad":
                examples.singles += [(x, 0.0), (examples.text_index(r["other_output"]), 0.0)]
            else:
                examples.add_vote(own, r["other_output"], r["choice"])
        elif r["kind"] == "edit":
            examples.pairs.append((examples.text_index(r["text"]), x, 1.0))
        else:
            unit = rating_to_unit(r["value"]) if r["kind"] == "score" else float(r["value"] > 0)
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
    """s(x) = w·φ(x) + b over `features`; `rating_ids` are the ratings it learnt,
    `l2` the penalty cross-validation chose, `skill` how well such fits predicted held-out ratings
    (`cross_validate`: 0 chance, 1 every vote)."""

    weights: np.ndarray
    bias: float
    rating_ids: frozenset[int]
    l2: float = L2
    skill: float = 0.0

    def raw_score(self, texts: Sequence[str]) -> np.ndarray:
        """s(x): P(a ≻ b) = σ(s(a) − s(b))."""
        if not texts:
            return np.zeros(0)
        return features(texts) @ self.weights + self.bias

    def blend_weight(self, weights: RewardWeights) -> float:
        """The weight this model's verdict has in the reward (`blend_human`): `weights.human`
        once its skill reaches `weights.human_full_skill`, in proportion below (coin flips:
        about none)."""
        return weights.human * min(1.0, self.skill / weights.human_full_skill)

    def group_preference(self, texts: Sequence[str]) -> np.ndarray:
        """h for the samples of one group: each one's probability of being preferred to another
        sample of the group, in (0, 1) (½ alone)."""
        return win_rates(self.raw_score(texts))


def win_rates(scores: np.ndarray) -> np.ndarray:
    """mean over j ≠ i of σ(s_i − s_j) for each i; ½ for a group of one."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) < 2:
        return np.full(len(scores), 0.5)
    wins = expit(scores[:, None] - scores[None, :])
    return (wins.sum(axis=1) - 0.5) / (len(scores) - 1)  # less the diagonal's σ(0)


def fit_preference_model(
    examples: PreferenceExamples, l2: float | None = None
) -> PreferenceModel | None:
    """The Bradley–Terry model of the module docstring, or None when no rating gives an example;
    `l2` None: chosen by cross-validation."""
    if not examples.pairs and not examples.singles:
        return None
    return fit_on_features(features(examples.texts), examples, l2)


def fit_on_features(
    phi: np.ndarray, examples: PreferenceExamples, l2: float | None = None
) -> PreferenceModel:
    """Fit w, b on given feature rows (one per text of `examples`); the loss is the docstring's,
    with the penalty `l2` or, when None, the one of L2_GRID with the lowest cross-validated loss;
    the skill is that penalty's (`cross_validate`)."""
    pairs = np.asarray(examples.pairs, dtype=np.float64).reshape(-1, 3)
    singles = np.asarray(examples.singles, dtype=np.float64).reshape(-1, 2)
    data = _Data(
        phi[pairs[:, 0].astype(int)] - phi[pairs[:, 1].astype(int)],
        pairs[:, 2],
        phi[singles[:, 0].astype(int)],
        singles[:, 1],
    )
    l2, skill = cross_validate(data, L2_GRID if l2 is None else (l2,))
    theta = _fit(data, l2)
    return PreferenceModel(theta[:-1], float(theta[-1]), frozenset(examples.rating_ids), l2, skill)


@dataclass
class _Data:
    """Pair rows (feature differences, P(first ≻ second)) and single rows (features, P(good))."""

    diff: np.ndarray
    pair_y: np.ndarray
    single_x: np.ndarray
    single_y: np.ndarray

    def __len__(self) -> int:
        return len(self.pair_y) + len(self.single_y)

    def subset(self, keep: np.ndarray) -> _Data:
        """The examples whose index (pairs first, then singles) is in `keep` (a boolean mask)."""
        n = len(self.pair_y)
        return _Data(self.diff[keep[:n]], self.pair_y[keep[:n]],
                     self.single_x[keep[n:]], self.single_y[keep[n:]])  # fmt: skip


def _loss(theta: np.ndarray, data: _Data, l2: float) -> tuple[float, np.ndarray]:
    """The mean log-loss of pairs and of singles, plus l2·|θ|², and its gradient."""
    dim = data.diff.shape[1]
    w, b = theta[:dim], theta[dim]
    loss, grad = l2 * (w @ w + b * b), 2 * l2 * theta
    for x, y, with_bias in ((data.diff, data.pair_y, False), (data.single_x, data.single_y, True)):
        if len(y):
            z = x @ w + (b if with_bias else 0.0)  # b cancels in a difference
            loss -= np.mean(y * log_expit(z) + (1 - y) * log_expit(-z))
            residual = (expit(z) - y) / len(y)
            grad[:dim] += x.T @ residual
            grad[dim] += residual.sum() if with_bias else 0.0
    return float(loss), grad


def _fit(data: _Data, l2: float) -> np.ndarray:
    start = np.zeros(data.diff.shape[1] + 1)
    return minimize(_loss, start, args=(data, l2), jac=True, method="L-BFGS-B").x


def cross_validate(data: _Data, grid: Sequence[float] = L2_GRID) -> tuple[float, float]:
    """(penalty, skill): the penalty of `grid` whose fits predict held-out ratings best
    (FOLDS-fold, log-loss, summed over REPEATS assignments of the folds), and how well they do,
    as the share of what can be predicted:

        skill = (loss of no model − loss of the fits) / (loss of no model − labels' entropy)

    "No model" says ½ for every pair and, for single ratings, their mean in the training folds;
    the labels' entropy is what even a perfect model loses (a tie costs log 2 whatever it says).
    Clipped to [0, 1]: 0 for coin flips, a model that does worse than none, or only ties; 1 for
    a model that predicts every held-out vote. Fewer than 2·FOLDS examples: (L2, or the one
    penalty given, and 0), too few to tell a taste from chance."""
    if len(data) < 2 * FOLDS:
        return (grid[0] if len(grid) == 1 else L2), 0.0
    from sklearn.model_selection import RepeatedKFold

    held_out = {l2: 0.0 for l2 in grid}
    no_model = floor = 0.0
    folds = RepeatedKFold(n_splits=FOLDS, n_repeats=REPEATS, random_state=0)
    for train_index, _ in folds.split(np.zeros(len(data))):
        in_train = np.zeros(len(data), dtype=bool)
        in_train[train_index] = True
        train, test = data.subset(in_train), data.subset(~in_train)
        for l2 in grid:
            held_out[l2] += _loss(_fit(train, l2), test, 0.0)[0]
        base_rate = np.clip(train.single_y.mean(), 1e-3, 1 - 1e-3) if len(train.single_y) else 0.5
        constant = np.zeros(data.diff.shape[1] + 1)
        constant[-1] = np.log(base_rate / (1 - base_rate))
        no_model += _loss(constant, test, 0.0)[0]
        floor += _entropy(test)
    l2 = min(held_out, key=held_out.get)
    explainable = no_model - floor
    skill = (no_model - held_out[l2]) / explainable if explainable > 1e-9 else 0.0
    return l2, float(np.clip(skill, 0.0, 1.0))


def _entropy(data: _Data) -> float:
    """The log-loss a model that predicts every label exactly would have (`_loss`'s means)."""
    total = 0.0
    for y in (data.pair_y, data.single_y):
        if len(y):
            p = np.clip(y, 1e-12, 1 - 1e-12)
            total -= np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return float(total)


def load_preference_model(
    db: Database, task_kind: str | None = None, fold: str | None = None
) -> PreferenceModel | None:
    """Fit the preference model on every rating of `task_kind` in the store (None: no ratings),
    but those of the split's (or `fold`'s) validation and held-out tasks."""
    return fit_preference_model(preference_examples(db, task_kind, fold))


def run_preference_model(
    db_path, task_set: str, weights: RewardWeights, fold: str | None = None
) -> PreferenceModel | None:
    """The preference model a training run and its promotion gate blend into the reward, for a
    task set ("coding", or a writing set): fitted on every rating of that kind of task in the
    store at `db_path` but those of tasks the run's split (HumanEval's by `fold`) keeps for
    judging; None when ratings have no weight (`weights.human` 0) or there are none, and for
    classes (no page rates a class team's work yet)."""
    if weights.human <= 0 or task_set == "class":
        return None
    with open_db(db_path) as db:
        return load_preference_model(db, "coding" if task_set == "coding" else "writing", fold)
