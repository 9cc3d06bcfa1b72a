"""Can the preference model carry a rater's taste into training? Measured on stored episodes.

A simulated rater (bench/ratings.py's: it prefers the answer with a checkable property, or
flips a coin) votes on N A/B pairs of answers to the same task, taken from a store's coding
episodes (`--task coding`, programs) or writing episodes (`--task summary`, co-written
summaries); any database: a training run's holds G samples of every task it drew. The
preference model (learner/preference.py) is fit on those votes, then scores the episodes of
other tasks, and this prints:

    AUC           how well its score separates programs with the property from those without
                  (0.5: it learnt nothing; 1: perfectly)
    L2            the penalty cross-validation chose (learner/preference.py)
    spread        the within-task standard deviation of the preference term that enters the
                  reward (`PreferenceModel.group_preference`: the sample's probability of being
                  preferred to another of its group), against the automatic reward's own
                  within-task spread: the advantage is reward − group mean, so a term that barely
                  varies inside a group cannot move the policy, however right it is (nan
                  where the episodes were not scored)
    σ spread      the same for the term the reward used before: σ(s(x)), L2 fixed at 1e-2
    gap           mean preference term of programs with the property minus those without

--features model uses the preference model's own φ (`learner.preference.features`: the
sentence embedding beside the hashed word unigrams and bigrams the output has); --features
counts the same with the words' counts at unit length (φ until 2026-11-27), --features
embedding the sentence embedding alone (φ before the words), to compare.

Usage: python bench/preference.py --db FILE [--task coding|summary] [--rater prefers|none]
                                  [--property NAME, a property of bench/ratings.py]
                                  [--ratings 20,50,100] [--seed 0]
                                  [--features model|counts|embedding]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from ratings import PROPERTIES, vote  # noqa: E402
from scipy.special import expit  # noqa: E402
from scipy.stats import mannwhitneyu  # noqa: E402

import store  # noqa: E402
from learner.preference import (  # noqa: E402
    PreferenceExamples,
    features,
    fit_on_features,
    sentence_embedding,
    win_rates,
)
from store.db import rows  # noqa: E402

KINDS = {"coding": "coding", "summary": "writing"}  # bench/ratings.py's task -> tasks.kind


def episodes_by_task(db_path: str, task: str = "coding") -> dict[int, list[dict]]:
    """The store's finished episodes of `task`, grouped by task; `reward` is None where the
    episode was not scored (bench/rating_pairs.py --sample stores answers unscored)."""
    with store.open_db(db_path) as db:
        found = rows(
            db,
            """SELECT e.task_id, e.final_output AS output, e.reward FROM episodes e
               JOIN tasks t ON t.id = e.task_id
               WHERE t.kind = :kind AND e.status = 'ok' AND e.final_output <> ''""",
            {"kind": KINDS[task]},
        )
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in found:
        groups[r["task_id"]].append(r)
    return {t: g for t, g in groups.items() if len(g) >= 2}


def simulated_votes(groups, tasks, n: int, rater: str, has, rng: random.Random):
    """Up to N A/B votes, each on two answers to one task that no other vote shows, as the
    page's A/B mode samples two fresh answers (tasks in turn, each task's answers paired at
    random; until 2026-11-27 an answer could be in several pairs, which cross-validation then
    saw on both sides of a fold)."""
    examples = PreferenceExamples()
    shuffled = {t: rng.sample(groups[t], len(groups[t])) for t in tasks}
    deepest = max(len(answers) for answers in shuffled.values())
    pairs = [(t, i) for i in range(0, deepest - 1, 2) for t in tasks if i + 1 < len(shuffled[t])]
    for k, (task, i) in enumerate(pairs[:n]):
        left, right = shuffled[task][i], shuffled[task][i + 1]
        choice = vote(rater, has, left["output"], right["output"], rng)
        examples.add_vote(left["output"], right["output"], choice)
        examples.rating_ids.add(k)
    return examples


FEATURES = {  # the model's φ, and the φ of earlier runs: with the words' counts, without words
    "model": features,
    "counts": lambda texts: features(texts, counts=True),
    "embedding": sentence_embedding,
}


def measure(
    groups, fit_tasks, test_tasks, n: int, rater: str, has, seed: int, phi=FEATURES["model"]
) -> dict:
    examples = simulated_votes(groups, fit_tasks, n, rater, has, random.Random(seed))
    decisive = sum(p != 0.5 for _, _, p in examples.pairs)
    rows = phi(examples.texts)
    model = fit_on_features(rows, examples)  # the penalty by cross-validation
    before = fit_on_features(rows, examples, l2=1e-2)
    test = [[e["output"] for e in groups[t]] for t in test_tasks]
    vectors = [phi(texts) for texts in test]
    liked = [win_rates(v @ model.weights) for v in vectors]  # = model.group_preference(texts)
    sigma = [expit(v @ before.weights + before.bias) for v in vectors]
    labels = np.array([has(t) for texts in test for t in texts])
    scores = np.concatenate([v @ model.weights for v in vectors])
    auc, gap = float("nan"), 0.0
    if labels.any() and (~labels).any():
        u = mannwhitneyu(scores[labels], scores[~labels]).statistic
        auc = float(u / (labels.sum() * (~labels).sum()))
        h = np.concatenate(liked)
        gap = float(h[labels].mean() - h[~labels].mean())
    scored = [[e["reward"] for e in groups[t] if e["reward"] is not None] for t in test_tasks]
    auto = np.mean([np.std(r) for r in scored if len(r) >= 2] or [np.nan])
    return {
        "ratings": len(examples.pairs), "decisive": decisive, "l2": model.l2, "skill": model.skill, "auc": auc,
        "spread": float(np.mean([np.std(h) for h in liked])),
        "sigma_spread": float(np.mean([np.std(h) for h in sigma])),
        "auto_spread": float(auto), "gap": gap, "with_property": float(labels.mean()),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="a store with episodes (G per task)")
    parser.add_argument("--task", choices=sorted(KINDS), default="coding")
    parser.add_argument("--rater", choices=["prefers", "none"], default="prefers")
    parser.add_argument(
        "--property",
        choices=sorted({p for props in PROPERTIES.values() for p in props}),
        help="the rater's taste (default: commented for coding, attributed for summary)",
    )
    parser.add_argument("--ratings", default="20,50,100", help="comma-separated N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--features",
        choices=sorted(FEATURES),
        default="model",
        help="the model's own φ (default: embedding and words present), the words' counts "
        "instead, or the embedding alone",
    )
    args = parser.parse_args()
    args.property = args.property or {"coding": "commented", "summary": "attributed"}[args.task]
    if args.property not in PROPERTIES[args.task]:
        parser.error(f"--task {args.task} has the properties {', '.join(PROPERTIES[args.task])}")
    groups = episodes_by_task(args.db, args.task)
    if len(groups) < 4:
        parser.error(
            f"{args.db} has {len(groups)} {args.task} tasks with 2+ episodes; 4 are needed"
        )
    tasks = sorted(groups)
    random.Random(args.seed).shuffle(tasks)
    fit_tasks, test_tasks = tasks[: len(tasks) // 2], tasks[len(tasks) // 2 :]
    print(
        f"{sum(map(len, groups.values()))} episodes of {len(groups)} tasks: votes on "
        f"{len(fit_tasks)}, measured on {len(test_tasks)}; rater {args.rater} ({args.property}); "
        f"features: {args.features}"
    )
    print(
        "ratings  decisive     L2  skill   AUC   spread  σ spread  auto spread   gap   (with property)"
    )
    for n in (int(x) for x in args.ratings.split(",")):
        m = measure(
            groups,
            fit_tasks,
            test_tasks,
            n,
            args.rater,
            PROPERTIES[args.task][args.property],
            args.seed,
            FEATURES[args.features],
        )
        print(
            f"{m['ratings']:7d}  {m['decisive']:8d}  {m['l2']:5.0e}  {m['skill']:5.2f}  {m['auc']:5.2f}  {m['spread']:6.3f}"
            f"  {m['sigma_spread']:8.3f}"
            f"  {m['auto_spread']:11.3f}  {m['gap']:+.3f}   ({100 * m['with_property']:.0f}%)"
        )


if __name__ == "__main__":
    main()
