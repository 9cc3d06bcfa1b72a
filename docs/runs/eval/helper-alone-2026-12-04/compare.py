"""Per team variant: pass@1 of the team, of the helper's `aux` alone and of `single` (base model)
on the problems all three ran, with the sign tests of the evaluation log's "What the entry
author's own code adds". Later files' records replace earlier ones of the same problem, shape and
variant.

Usage: python compare.py EPISODES.jsonl [EPISODES.jsonl ...]
"""

import json
import statistics
import sys
from collections import defaultdict

from scipy.stats import binomtest


def sign_p(a: int, b: int) -> float | None:
    return binomtest(a, a + b).pvalue if a + b else None


records = []
for path in sys.argv[1:]:
    with open(path) as lines:
        records += [json.loads(line) for line in lines]
by_task = defaultdict(dict)
for r in records:
    by_task[r["task"]][(r["shape"], r["variant"])] = r
single = ("single", "base")
variants = sorted({k for v in by_task.values() for k in v if k[0] == "parallel"})
for key in variants:
    tasks = [t for t, v in by_task.items() if key in v and single in v]
    team = [bool(by_task[t][key]["pass"]) for t in tasks]
    alone = [bool(by_task[t][key]["helper_alone"]) for t in tasks]
    one = [bool(by_task[t][single]["pass"]) for t in tasks]
    n = len(tasks)
    gained = sum(t and not a for t, a in zip(team, alone, strict=True))
    lost = sum(a and not t for t, a in zip(team, alone, strict=True))
    alone_up = sum(a and not s for a, s in zip(alone, one, strict=True))
    alone_down = sum(s and not a for a, s in zip(alone, one, strict=True))
    print(
        f"{key[1]} team, {n} problems: pass@1 team {sum(team) / n:.3f}, aux alone "
        f"{sum(alone) / n:.3f}, single {sum(one) / n:.3f}"
    )
    print(
        f"  the entry author's own code: gained {gained}, lost {lost} (p = {sign_p(gained, lost)})"
    )
    print(
        f"  aux alone against single: {alone_up} / {alone_down} (p = {sign_p(alone_up, alone_down)})"
    )
    calls = statistics.mean(by_task[t][key]["helper_called"] for t in tasks)
    path = statistics.mean(by_task[t][key]["critical_tokens"] for t in tasks)
    path_single = statistics.mean(by_task[t][single]["critical_tokens"] for t in tasks)
    print(
        f"  entry calls the helper {calls:.3f}; critical path {path:.1f} against {path_single:.1f}"
    )
