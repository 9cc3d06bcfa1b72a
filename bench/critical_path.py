"""How short a class team's critical path can be, from a class evaluation's own episodes: for
each team size, the best any deal could do with the methods one agent wrote (`single`, the
same openings and budget; each method's tokens kept, the methods split among the agents so the
busiest writes least) and the bound no deal passes (the longest method), against `single`'s
tokens and the team's measured critical path, as the evaluation reports them (mean tokens per
class, ratio of means).

Usage: python bench/critical_path.py EVAL_FOLDER [--variant base] [--sizes 2,3,4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.kinds.classes import class_problem, deal  # noqa: E402


def busiest(split: tuple[int, ...], sizes: list[int]) -> int:
    """The most any agent gets when method i goes to agent `split[i]`."""
    loads = [0] * (max(split) + 1)
    for agent, size in zip(split, sizes, strict=True):
        loads[agent] += size
    return max(loads)


def splits(methods: int, agents: int):
    """Every way to give each of `methods` methods to one of `agents` agents."""
    return product(range(min(agents, methods)), repeat=methods)


def best_split(tokens: list[int], agents: int) -> int:
    """The fewest tokens the busiest of `agents` writes, over every way to split the methods."""
    return min(busiest(split, tokens) for split in splits(len(tokens), agents))


def by_docstring(methods: list[dict], agents: int) -> int:
    """The busiest agent's tokens when the methods are split to balance their openings' lengths
    (the skeleton's stub and docstring: the one size known before a method is written)."""
    sizes = [len(m["opening"]) for m in methods]
    split = min(splits(len(methods), agents), key=lambda s: busiest(s, sizes))
    return busiest(split, [m["tokens"] for m in methods])


def by_the_deal(task_id: str, methods: list[dict], agents: int) -> int:
    """The busiest agent's tokens when the methods are dealt as a team deals them
    (agents/kinds/classes.py `deal`)."""
    tokens = {m["method"]: m["tokens"] for m in methods}
    dealt = deal(class_problem(task_id), min(agents, len(methods)))
    return max(sum(tokens[name] for name in names) for names in dealt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a `coteam eval --task class` output folder")
    parser.add_argument("--variant", default="base", help="whose episodes (default base)")
    parser.add_argument("--sizes", default="2,3,4", help="team sizes (default 2,3,4)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (Path(args.folder) / "episodes.jsonl").open()]
    rows = [r for r in rows if r.get("variant", "base") == args.variant and r["sample"] == 0]
    methods = {r["task_id"]: r["methods"] for r in rows if r["shape"] == "single"}
    single = {task: [m["tokens"] for m in ms] for task, ms in methods.items()}
    if not single:
        raise SystemExit(f"no `single` episodes of {args.variant!r} in {args.folder}")
    total = statistics.mean(sum(t) for t in single.values())
    longest = statistics.mean(max(t) for t in single.values())
    print(f"{len(single)} classes; `single` writes {total:.0f} tokens a class (mean)")
    print(f"bound of any team (the longest method): {longest:.0f} tokens, {longest / total:.3f}x")
    for size in (int(s) for s in args.sizes.split(",")):
        best = statistics.mean(best_split(t, size) for t in single.values())
        docs = statistics.mean(by_docstring(ms, size) for ms in methods.values())
        ours = statistics.mean(by_the_deal(task, ms, size) for task, ms in methods.items())
        line = (
            f"team of {size}: single's methods, the best split {best / total:.3f}x, "
            f"the team's deal {ours / total:.3f}x, by docstring length {docs / total:.3f}x"
        )
        measured = [
            r["critical_path_tokens"]
            for r in rows
            if r["shape"] == "parallel"
            and len(r["dealt"]) == min(size, len(r["methods"]))
            and r["task_id"] in single
        ]
        if len(measured) == len(single):
            mean = statistics.mean(measured)
            line += f"; the team measured {mean / total:.3f}x"
        print(line)


if __name__ == "__main__":
    main()
