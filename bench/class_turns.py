"""A second turn against one, from a class evaluation's own episodes: for each row (shape and
variant) run with more than one turn (`coteam eval --task class --turns 2`), the class as its
first turn left it (those methods merged and judged again: the same episode, so nothing but the
later turns differs) against the class after the last turn, paired by class: method level and
class level (Wilcoxon and sign tests, McNemar's for whole classes), how many classes took a
second turn, and the critical-path tokens it costs (ratio of the means; wall time per turn is
not recorded). A later turn rewrites the methods whose test classes failed, shown the tests'
verdict on them: the same tests that judge it, so its gain says what feedback from the tests
buys, not what the agents know alone.

Usage: python bench/class_turns.py EVAL_FOLDER [EVAL_FOLDER ...] [--agents 4] [--turns 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.class_team import MethodStep, merge_and_judge, team_size  # noqa: E402
from agents.kinds.classes import class_problem  # noqa: E402


def episodes(folders: list[str], agents: int, turns: int) -> dict[tuple, dict]:
    """(row name, class) -> the episode of `turns` turns (sample 0), the team of `agents` (a class
    of fewer methods: its smaller team) and every single form."""
    found = {}
    for folder in folders:
        for line in (Path(folder) / "episodes.jsonl").open(encoding="utf-8"):
            row = json.loads(line)
            problem = class_problem(row["task_id"])
            size = team_size(problem, row["shape"], agents)
            if row["sample"] or row.get("turns", 1) != turns or len(row["dealt"]) != size:
                continue
            found[(f"{row['shape']}@{row.get('variant', 'base')}", row["task_id"])] = row
    return found


def first_turn(row: dict) -> dict:
    """The episode as its first turn left it: every dealt method once, in the order written (the
    first turn's), merged and judged again."""
    written = sum(map(len, row["dealt"]))
    steps = [
        MethodStep(m["agent"] - 1, m["method"], m["opening"], m["text"], m["tokens"], 0.0)
        for m in row["methods"][:written]
    ]
    _, verdict = merge_and_judge(class_problem(row["task_id"]), row["dealt"], steps)
    return {
        "methods": row["methods"][:written],
        "dealt": row["dealt"],
        "test_classes": verdict.test_classes,
        "test_classes_passed": verdict.classes_passed,
        "class_passed": verdict.all_passed,
        "critical_path_tokens": max(
            sum(s.completion_tokens for s in steps if s.agent == a)
            for a in range(len(row["dealt"]))
        ),
    }


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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="`coteam eval --task class` output folders")
    parser.add_argument("--agents", type=int, default=2, help="the teams' size (default 2)")
    parser.add_argument("--turns", type=int, default=2, help="the runs' turn limit (default 2)")
    args = parser.parse_args()
    found = episodes(args.folders, args.agents, args.turns)
    print(
        f"| row (team of {args.agents}) | classes | took a second turn | method level, turn 1 -> "
        f"{args.turns} | better / worse (sign p, Wilcoxon p) | class level (McNemar p) | "
        "critical-path tokens x |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in sorted({row for row, _ in found}):
        more = [found[key] for key in sorted(found) if key[0] == name]
        c = compare([first_turn(r) for r in more], more)
        print(
            f"| {name} | {c['classes']} | {c['second_turn']} | {c['method_one']:.3f} -> "
            f"{c['method_more']:.3f} | {c['better']} / {c['worse']} ({c['sign_p']:.3g}, "
            f"{c['wilcoxon_p']:.3g}) | {c['class_one']:.3f} -> {c['class_more']:.3f} "
            f"({c['mcnemar_p']:.3g}) | {c['tokens_x']:.2f} |"
        )


if __name__ == "__main__":
    main()
