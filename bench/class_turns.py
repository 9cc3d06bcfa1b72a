"""A second turn against one, from class evaluations' own episodes: for each row (shape and
variant) run with one turn and with more (`coteam eval --task class --turns 2`, greedy, so the
first turn of a two-turn episode is the one-turn episode), the method level and class level after
the last turn against after one, paired by class (Wilcoxon and sign tests, McNemar's for whole
classes), how many classes took a second turn, and the critical-path tokens and wall time each
costs (ratio of the means). A later turn rewrites the methods whose test classes failed, shown
the tests' verdict on them: the same tests that judge it, so its gain says what feedback from
the tests buys, not what the agents know alone.

Usage: python bench/class_turns.py EVAL_FOLDER [EVAL_FOLDER ...] [--agents 4] [--turns 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.class_team import team_size  # noqa: E402
from agents.kinds.classes import class_problem  # noqa: E402


def episodes(folders: list[str], agents: int) -> dict[tuple, dict]:
    """(row name, class, turn limit) -> the episode (sample 0), the team of `agents` (a class of
    fewer methods: its smaller team) and every single form."""
    found = {}
    for folder in folders:
        for line in (Path(folder) / "episodes.jsonl").open(encoding="utf-8"):
            row = json.loads(line)
            problem = class_problem(row["task_id"])
            if row["sample"] or len(row["dealt"]) != team_size(problem, row["shape"], agents):
                continue
            name = f"{row['shape']}@{row.get('variant', 'base')}"
            found[(name, row["task_id"], row.get("turns", 1))] = row
    return found


def compare(one: list[dict], more: list[dict]) -> dict:
    """Paired figures of the same classes after one turn (`one`) and after the last (`more`)."""
    from scipy.stats import binomtest, wilcoxon

    def share(row: dict) -> float:
        return row["test_classes_passed"] / max(1, len(row["test_classes"]))

    diffs = [share(b) - share(a) for a, b in zip(one, more, strict=True)]
    better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    nonzero = [d for d in diffs if d]
    gained = sum(
        b["class_passed"] and not a["class_passed"] for a, b in zip(one, more, strict=True)
    )
    lost = sum(a["class_passed"] and not b["class_passed"] for a, b in zip(one, more, strict=True))
    return {
        "classes": len(one),
        "second_turn": sum(len(r["methods"]) > sum(map(len, r["dealt"])) for r in more),
        "method_one": statistics.mean(map(share, one)),
        "method_more": statistics.mean(map(share, more)),
        "better": better,
        "worse": worse,
        "sign_p": binomtest(better, better + worse).pvalue if better + worse else 1.0,
        "wilcoxon_p": wilcoxon(nonzero).pvalue if nonzero else 1.0,
        "class_one": statistics.mean(float(r["class_passed"]) for r in one),
        "class_more": statistics.mean(float(r["class_passed"]) for r in more),
        "mcnemar_p": binomtest(gained, gained + lost).pvalue if gained + lost else 1.0,
        "tokens_x": statistics.mean(r["critical_path_tokens"] for r in more)
        / max(1e-9, statistics.mean(r["critical_path_tokens"] for r in one)),
        "wall_x": statistics.mean(r["wall_s"] for r in more)
        / max(1e-9, statistics.mean(r["wall_s"] for r in one)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="`coteam eval --task class` output folders")
    parser.add_argument("--agents", type=int, default=2, help="the teams' size (default 2)")
    parser.add_argument("--turns", type=int, default=2, help="the turn limit to compare (2)")
    args = parser.parse_args()
    found = episodes(args.folders, args.agents)
    print(
        f"| row (team of {args.agents}) | classes | took turn 2 | method level, 1 turn -> "
        f"{args.turns} | better / worse (sign p, Wilcoxon p) | class level (McNemar p) | "
        "critical-path tokens x | wall x |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted({key[0] for key in found}):
        classes = sorted(
            task for (row, task, turns) in found
            if row == name and turns == 1 and (name, task, args.turns) in found
        )  # fmt: skip
        if not classes:
            continue
        c = compare(
            [found[(name, t, 1)] for t in classes], [found[(name, t, args.turns)] for t in classes]
        )
        print(
            f"| {name} | {c['classes']} | {c['second_turn']} | {c['method_one']:.3f} -> "
            f"{c['method_more']:.3f} | {c['better']} / {c['worse']} ({c['sign_p']:.3g}, "
            f"{c['wilcoxon_p']:.3g}) | {c['class_one']:.3f} -> {c['class_more']:.3f} "
            f"({c['mcnemar_p']:.3g}) | {c['tokens_x']:.2f} | {c['wall_x']:.2f} |"
        )


if __name__ == "__main__":
    main()
