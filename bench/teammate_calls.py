"""Calls between teammates in a class evaluation: for each team row (shape and variant) of an
evaluation's episodes, the methods whose docstring implies a call to a teammate's method
(ClassEval's method dependencies, dealt to another agent), how many of them the team's code
calls, and how many of those pass their test class: the class reward's coordination count
(agents/kinds/class_team.py `teammate_calls`, `passing_methods`).

With `--db DB --run N` it counts the same over a class training run's sampled episodes instead,
in `--chunks` parts in the order they were played, with Fisher's exact test of the first part's
share of implied calls written against the last's, on the classes both played (a pass over the
train split is 16 steps: two parts of a 32-step run play the same classes): whether training
moved the team to call its teammates; and each part's coordination credit as the class reward
pays it (each written call by the share of its method's tests that pass, over the implied
calls), whatever reward the run was trained on.

Usage: python bench/teammate_calls.py EVAL_FOLDER
       python bench/teammate_calls.py --db TEAM.db --run 3 --chunks 2
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.class_team import (  # noqa: E402
    method_shares,
    passing_methods,
    team_size,
    teammate_calls,
)
from agents.kinds.classes import class_problem  # noqa: E402

# a test class's count as an episode's kept checks write it (ClassReport.checks)
COUNT = re.compile(r"(\d+) of (\d+) tests passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="a `coteam eval --task class` output folder")
    parser.add_argument("--sizes", default="2,3,4", help="team sizes (default 2,3,4)")
    parser.add_argument("--db", help="a database a class training run wrote (with --run)")
    parser.add_argument("--run", type=int, help="the training run whose sampled episodes to count")
    parser.add_argument("--chunks", type=int, default=4, help="parts of the run (default 4)")
    args = parser.parse_args()
    if args.db and args.run:
        training_trend(args.db, args.run, args.chunks)
        return
    if not args.folder:
        parser.error("give an evaluation folder, or --db and --run")
    rows = [json.loads(line) for line in (Path(args.folder) / "episodes.jsonl").open()]
    rows = [r for r in rows if len(r["dealt"]) > 1 and r["sample"] == 0]  # one agent: no teammate
    classes = {r["task_id"] for r in rows}
    problems = {task: class_problem(task) for task in classes}
    for size in (int(s) for s in args.sizes.split(",")):
        # a class of fewer methods than `size` is played by the smaller team (`team_size`; a
        # row's `methods` also holds a later turn's rewrites, so it does not count them)
        of_size = [
            r for r in rows
            if len(r["dealt"]) == team_size(problems[r["task_id"]], r["shape"], size)
        ]  # fmt: skip
        if {r["task_id"] for r in of_size} != classes:
            continue  # no team of this size ran on every class
        counts: dict[str, Counter] = {}
        for row in of_size:
            problem = problems[row["task_id"]]
            tally = counts.setdefault(f"{row['shape']}@{row.get('variant', 'base')}", Counter())
            passing = passing_methods(problem, row["test_classes"])
            for method, called in teammate_calls(problem, row["dealt"], row["program"]).items():
                tally["implied"] += 1
                tally["called"] += called
                tally["called and passing"] += called and method in passing
        for team, tally in counts.items():
            print(
                f"team of {size}, {team}: {tally['implied']} methods imply a teammate's call; the "
                f"code calls {tally['called']}, of which {tally['called and passing']} pass their "
                "tests"
            )


def training_trend(db_path: str, run: int, chunks: int) -> None:
    """Implied teammate calls written (and passing) in a training run's sampled team episodes,
    in `chunks` parts in the order played (`print_trend`)."""
    from store import open_db

    with open_db(db_path) as db:
        found = list(db.query("select * from training_runs where id = ?", [run]))
        if not found:
            raise SystemExit(f"no training run {run} in {db_path}")
        span = found[0]
        rows = list(
            db.query(
                "select e.params, e.final_output, e.checks, t.source_id from episodes e "
                "join tasks t on t.id = e.task_id where e.shape like 'class_%' and e.team_size > 1 "
                "and e.started_at >= ? and e.started_at <= ? order by e.id",
                [span["started_at"], span["finished_at"] or "9999"],
            )
        )
    tallies = []
    for row in rows:
        params = json.loads(row["params"] or "{}")
        if not params.get("temperature"):  # the gate's greedy episodes
            continue
        problem = class_problem(row["source_id"])
        counts = {c["name"]: COUNT.match(c["message"]) for c in json.loads(row["checks"] or "[]")}
        outcome = {name: (int(m[1]), int(m[2])) for name, m in counts.items() if m}
        shares, passing = method_shares(problem, outcome), passing_methods(problem, outcome)
        calls = teammate_calls(problem, params["dealt"], row["final_output"] or "")
        tallies.append((
            row["source_id"], len(calls), sum(calls.values()),
            sum(c and m in passing for m, c in calls.items()),
            sum(shares.get(m, 0.0) for m, c in calls.items() if c),
        ))  # fmt: skip
    if not tallies:
        print(f"run {run}: no sampled team episodes of classes in {db_path}")
        return
    size = -(-len(tallies) // max(1, chunks))
    print_trend(run, [tallies[i : i + size] for i in range(0, len(tallies), size)])


def print_trend(run: int, parts: list[list[tuple]]) -> None:
    """Each part's tallies (class, implied, written, passing, credit), and Fisher's exact test of
    the share written, first part against last, on the classes both parts played (parts of
    different classes would compare the classes, not the training)."""
    from scipy.stats import fisher_exact

    print(
        f"run {run}: {sum(map(len, parts))} sampled team episodes in {len(parts)} parts, in play order"
    )
    for i, part in enumerate(parts, 1):
        implied, called, passing, credit = (sum(t[k] for t in part) for k in (1, 2, 3, 4))
        share, paid = (called / implied, credit / implied) if implied else (0.0, 0.0)
        print(
            f"part {i} ({len(part)} episodes): {implied} implied calls, {called} written "
            f"({share:.1%}), {passing} of them passing; coordination credit {paid:.3f}"
        )
    common = {t[0] for t in parts[0]} & {t[0] for t in parts[-1]}
    if not common:
        print("the first and last parts played no class in common: no test (ask for fewer parts)")
        return
    table = [
        [
            sum(t[2] for t in part if t[0] in common),
            sum(t[1] - t[2] for t in part if t[0] in common),
        ]
        for part in (parts[0], parts[-1])
    ]
    p = fisher_exact(table).pvalue
    print(
        f"written, first part against last on the {len(common)} classes both played: "
        f"{table[0][0]} of {sum(table[0])} against {table[1][0]} of {sum(table[1])}, "
        f"Fisher's exact p = {p:.3g}"
    )


if __name__ == "__main__":
    main()
