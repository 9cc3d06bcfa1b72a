"""HumanEval 0-31, held out for the shipped team (run 16, the fixed split) and for exactly one
fold's team (the even problems fold 1's, the odd fold 2's): the 72-step fold teams against the
shipped team, paired over the 32 problems (sign tests). Every arm greedy, with the same start,
budget and judge.

    python compare.py ../run16-heldout/episodes.jsonl \
        ../folds-continued-2026-12-03/fold1-episodes.jsonl \
        ../folds-continued-2026-12-03/fold2-episodes.jsonl

(the shipped team's evaluation, then each fold's `coteam eval --fold F/2` with the 72-step team
as `continued`); output.txt is what it printed."""

import json
import statistics
import sys

from scipy.stats import binomtest

KEYS = ("pass", "helper_called", "reward", "critical_tokens")


def arm(rows: list[dict], shape: str, variant: str) -> dict[str, dict]:
    """{problem: episode} of one arm on HumanEval 0-31."""
    return {
        r["task"]: r
        for r in rows
        if r["shape"] == shape and r["variant"] == variant and int(r["task"].split("/")[1]) < 32
    }


def main(shipped: str, *folds: str) -> None:
    def read(path: str) -> list[dict]:
        with open(path) as f:
            return [json.loads(line) for line in f]

    ship, fold = read(shipped), [r for path in folds for r in read(path)]
    arms = {
        "shipped team (run 16)": arm(ship, "parallel", "trained"),
        "fold teams, 72 steps": arm(fold, "parallel", "continued"),
        "untrained team": arm(fold, "parallel", "base"),
        "single, base model": arm(fold, "single", "base"),
    }
    for name, a in arms.items():
        means = {k: statistics.mean(r.get(k) or 0 for r in a.values()) for k in KEYS}
        print(f"{name:22s} n={len(a)} " + " ".join(f"{k}={v:.3f}" for k, v in means.items()))
    a, b = arms["fold teams, 72 steps"], arms["shipped team (run 16)"]
    for key in KEYS:
        higher = sum(a[t][key] > b[t][key] for t in a)
        lower = sum(a[t][key] < b[t][key] for t in a)
        p = binomtest(higher, higher + lower).pvalue if higher + lower else 1.0
        print(f"fold teams vs shipped, {key}: {higher} higher, {lower} lower, sign p = {p:.3g}")


if __name__ == "__main__":
    main(*sys.argv[1:])
