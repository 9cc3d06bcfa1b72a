"""The statistics of an evaluation: what each metric means, pass@k, means with t-intervals,
Welch and paired t-tests, Holm's adjustment, the time-on-consistency regression, and `summarize`,
which turns a run's episode records into results.json.

Statistics: each group's metrics are averaged per task first (over the K samples), and every
mean, CI and test is over tasks, so samples of one task are not counted as independent.
Two-sided Welch t-tests (scipy.stats.ttest_ind, equal_var=False) of each multi-agent shape
against each baseline and of each trained variant against the base (and its team shapes against
the base's baselines), with Cohen's d, Hedges' g, Holm-adjusted p-values per metric, and beside
them a paired t-test and a sign test on the shared tasks, with the smallest pass@1 difference
the sign test can detect at the discordance seen. The regression of completion time on
consistency, T = α + βC, is fitted over the multi-agent episodes (scipy.stats.linregress).
"""

from __future__ import annotations

import datetime as dt
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy import stats

BASELINES = ("single", "naive_concat", "sequential_pipeline", "one_round_discussion")

# -- what each metric means ------------------------------------------------------------------

# metric -> (heading in the report, which task kind has it)
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pass": ("pass@1", ("coding", "writing")),
    "tests": ("tests passed", ("coding",)),
    "reference": ("reference agreement", ("writing",)),
    "consistency": ("consistency", ("coding", "writing")),
    "helper_called": ("entry calls the helper", ("coding",)),
    "helper_alone": ("helper's aux alone passes", ("coding",)),
    "role_violations": ("role violations", ("coding",)),
    "critical_tokens": ("critical-path tokens", ("coding", "writing")),
    "redundancy": ("redundancy", ("writing",)),
    "document_redundancy": ("document redundancy", ("writing",)),
    "repeats_dropped": ("repeats left out", ("writing",)),
    "structure": ("structure", ("coding", "writing")),
    "turns": ("turns", ("coding", "writing")),
    "time_s": ("time (s)", ("coding", "writing")),
    "time_vs_single": ("time / single", ("coding", "writing")),
    "word_time_vs_single": ("time per word / single", ("writing",)),
    "tokens": ("tokens", ("coding", "writing")),
    "reward": ("joint reward", ("coding", "writing")),
}

# what a training step records of its sampled answers, as shares over them, with its words on the
# run's curve and step line: the answer passed (tests, or the writing verdict), and where the
# task's reward scores it (a coding team's), the entry author's own code calls the helper's
# function and an agent wrote another role's function
SAMPLED_SHARES: dict[str, str] = {
    "pass_rate": "passed",
    "helper_called": METRICS["helper_called"][0],
    "role_violations": METRICS["role_violations"][0],
}
DEFINITIONS = {
    "coding": {
        "pass": "all counted test asserts of the task pass (sandboxed run of HumanEval's check, "
        "one assert at a time, 3 s each); pass@k by the unbiased estimator",
        "tests": "fraction of the task's counted test asserts that pass",
        "consistency": "cooperation: the coding reward's coordination component in [0, 1] - "
        "the share of helper authors' functions the entry author's function calls and uses the "
        "result of, times 0.25 + 0.75 · tests passed; not defined for `single`",
        "helper_called": "1 if the entry author's function calls (ast.Call) every function its "
        "helper author(s) wrote, and does not define or shadow it itself; not defined for `single`",
        "helper_alone": "a team of a helper and an entry author: 1 if the helper's `aux` alone "
        "passes the tests, joined with an entry function that only returns `aux(...)` (written by "
        "the evaluation, not an agent); beside pass@1 it shows what the entry author's own code "
        "added (a pass `aux` alone lacks) or broke; not defined for other shapes",
        "role_violations": "share of the team's agents that defined a function another role owns "
        "(nested definitions included); not defined for `single`",
        "critical_tokens": "output tokens on the critical path: per turn, the longest agent's "
        "output (agents acting at once), every agent's in a pipeline",
        "structure": "1 if the team's module parses and defines the entry function with a "
        "return (and `aux` with a return, for a team of 2 or more), else 0",
        "turns": "turns the episode took (it stops at success or at the turn limit)",
        "time_s": "completion time: the episode's wall time in seconds, first request to "
        "the last agent's answer",
        "tokens": "output tokens of every agent call in the episode",
        "reward": "joint reward R = 0.6·quality + 0.3·coordination + 0.1·speed·quality − "
        "0.3·role violations, speed = 1 − critical-path tokens / the single agent's budget "
        "(stored with the episode)",
    },
    "writing": {
        "pass": "the environment's success: every section non-empty and inside its role's "
        "word bounds, and no two sections overlapping (content-word Jaccard) above 0.5",
        "reference": "agreement with the human reference: mean of ROUGE-1 F1, ROUGE-L F1 and "
        "the embedding cosine of the whole text and the reference",
        "consistency": "mean pairwise cosine between the sections' mean sentence embeddings "
        "(all-MiniLM-L6-v2), clipped at 0; not defined for `single`",
        "redundancy": "how much the two most overlapping sections repeat each other: the larger "
        "of word-trigram containment and the share of the shorter section's sentences with a "
        "near-duplicate (cosine ≥ 0.9) in the other; 0 is best; read consistency beside it "
        "(copies are perfectly consistent); not defined for `single`",
        "structure": "the writing reward's length score: mean over sections of 1 inside the "
        "role's word bounds, falling linearly to 0 at 0 words and at twice the maximum",
        "document_redundancy": "long-form only: the redundancy of the document the reader "
        "gets, its sections after the environment left out each sentence that repeats an "
        "earlier one (embedding cosine ≥ 0.9; agents.team.sentences.drop_repeats)",
        "repeats_dropped": "long-form only: share of the writers' sentences left out of the "
        "document as repeats",
        "turns": "turns the episode took",
        "time_s": "completion time: the episode's wall time in seconds",
        "tokens": "output tokens of every agent call in the episode",
        "critical_tokens": "output tokens on the critical path: per turn, the longest "
        "section's output (agents acting at once), every agent's in a pipeline",
        "reward": "joint reward R = 0.6·quality + 0.3·coordination + 0.1·speed·quality, "
        "speed = 1 − critical-path tokens / the single agent's budget",
    },
}
TIME_VS_SINGLE = (
    "mean over tasks of the episode's wall time divided by `single`'s on the same task (same "
    "variant, or the first variant's (the base model's) where this one's `single` did not run; "
    "same run); only when `single` ran. Every shape meets the same load: with `--concurrency` "
    "N the groups in flight make at most N requests at once (a team's agents working side by "
    "side count one each), and at least one group"
)
for _kind in DEFINITIONS.values():
    _kind["time_vs_single"] = TIME_VS_SINGLE
DEFINITIONS["writing"]["word_time_vs_single"] = (
    "mean over tasks of the episode's wall time per word written divided by `single`'s on the "
    "same task: the speed at equal length (a single writer that stops early is fast by writing "
    "less); only when `single` ran"
)
# The long-form set (4-section documents, agents/team/outline.py) measures structure and redundancy
# on the document's sections, for `single` too.
LONGFORM_DEFINITIONS = {
    "structure": "structure compliance: share of the outline's 4 sections written non-empty, "
    "under their heading, by their owner and by no one else (agents.team.outline)",
    "redundancy": "the long-form reward's redundancy between the document's sections (worst "
    "pair): the larger of copied trigrams / near-duplicate sentences and paraphrase (mean "
    "nearest-sentence cosine mapped from 0.65-0.80 onto 0-1); 0 is best; for `single` too",
}


# -- statistics ------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 − C(n−c, k)/C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean, sample standard deviation and the t-interval of the mean (None where undefined)."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci_low": None, "ci_high": None}
    mean = float(x.mean())
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "ci_low": None, "ci_high": None}
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half}


def welch_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """Two-sided Welch t-test of mean(a) vs mean(b), with Welch's df, Cohen's d (pooled sd)
    and Hedges' g = d·(1 − 3/(4(n_a + n_b) − 9)). Undefined values are None."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(x), len(y)
    out = {"n_a": na, "n_b": nb, "mean_a": _mean(x), "mean_b": _mean(y)}
    out |= dict.fromkeys(("diff", "rel_change", "t", "df", "p", "cohens_d", "hedges_g"))
    if na < 2 or nb < 2:
        return out
    out["diff"] = out["mean_a"] - out["mean_b"]
    if out["mean_b"]:
        out["rel_change"] = out["diff"] / abs(out["mean_b"])
    va, vb = x.var(ddof=1), y.var(ddof=1)
    if va + vb > 0:
        with warnings.catch_warnings():  # nearly equal values: scipy warns, the result stands
            warnings.simplefilter("ignore", RuntimeWarning)
            result = stats.ttest_ind(x, y, equal_var=False)
        out["t"], out["p"] = float(result.statistic), float(result.pvalue)
        se2 = va / na + vb / nb
        out["df"] = float(se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)))
        pooled = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
        out["cohens_d"] = out["diff"] / pooled
        out["hedges_g"] = out["cohens_d"] * (1 - 3 / (4 * (na + nb) - 9))
    elif out["diff"] == 0:  # two constant, equal groups
        out["t"], out["p"], out["cohens_d"], out["hedges_g"] = 0.0, 1.0, 0.0, 0.0
    else:  # two constant, different groups: t and d are infinite
        out["p"] = 0.0
    return out


def paired_p(pairs: Sequence[tuple[float, float]]) -> float | None:
    """p of a two-sided paired t-test on (a, b) pairs (the same tasks); None where undefined."""
    if len(pairs) < 2:
        return None
    d = np.asarray([a - b for a, b in pairs], dtype=float)
    if not d.any():
        return 1.0
    if d.std(ddof=1) == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs]).pvalue)


def sign_test(pairs: Sequence[tuple[float, float]], alpha: float = 0.05) -> dict:
    """The sign test over paired per-task values: the tasks where `a` is higher, where `b` is,
    the exact two-sided binomial p over those (None when none differ), and `detectable`: the
    smallest difference of the means this test would call significant at `alpha` with as many
    discordant tasks as these, when every value is 0 or 1 (pass@1 greedy): k of the d
    discordant tasks one way, (2k − d) / n. None when no split of d is significant (or the
    values are not 0/1)."""
    a_higher = sum(a > b for a, b in pairs)
    b_higher = sum(b > a for a, b in pairs)
    d = a_higher + b_higher
    p = float(stats.binomtest(a_higher, d).pvalue) if d else None
    binary = bool(pairs) and all(v in (0, 1) for pair in pairs for v in pair)
    k = next((k for k in range(d // 2 + 1, d + 1) if stats.binomtest(k, d).pvalue < alpha), None)
    detectable = (2 * k - d) / len(pairs) if binary and k is not None else None
    return {"a_higher": a_higher, "b_higher": b_higher, "sign_p": p, "detectable": detectable}


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None stays None)."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted: list[float | None] = [None] * len(pvalues)
    running, m = 0.0, len(indexed)
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def regression(x: Sequence[float], y: Sequence[float]) -> dict | None:
    """Least squares y = α + βx with r², the slope's p and standard error; None with fewer than
    3 points or no spread in x."""
    if len(x) < 3 or len(set(x)) < 2:
        return None
    fit = stats.linregress(x, y)
    return {
        "alpha": float(fit.intercept),
        "beta": float(fit.slope),
        "r2": float(fit.rvalue**2),
        "p": float(fit.pvalue),
        "stderr": float(fit.stderr),
        "n": len(x),
    }


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


# -- summary ---------------------------------------------------------------------------------


def per_task(records: Iterable[dict], metric: str) -> dict[str, float]:
    """task -> the mean of `metric` over its samples (tasks where it is undefined are left out)."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.get(metric) is not None:
            by_task[r["task"]].append(float(r[metric]))
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def with_word_time(record: dict) -> dict:
    """The record with `word_time_s`, its wall time per word of text, where it wrote any."""
    words = sum(record.get("words") or [])
    if not words or record.get("time_s") is None:
        return record
    return {**record, "word_time_s": record["time_s"] / words}


def summarize(
    records: Sequence[dict],
    config: Any,
    expected: int,
    command: str = "",
) -> dict:
    """Everything the report shows, as one JSON-ready dict (results.json). `config` is the run's
    `learner.evaluate.EvalConfig` (not imported: evaluate imports this module); `expected` the
    episodes the run asked for (`config.episode_count(tasks)` for one invocation over `tasks`
    tasks), what the report counts as missing."""
    kind = config.task
    metrics = [m for m, (_, kinds) in METRICS.items() if kind in kinds]
    records = [with_word_time(r) for r in records]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["shape"], r["variant"])].append(r)
    order = [(s, v) for v in config.variants for s in config.shapes if (s, v) in groups]
    index = {r["task"]: r["task_index"] for r in records}
    tasks = sorted(index, key=index.get)

    table = _group_table(groups, order, metrics, config)
    derived = {"time_vs_single", "word_time_vs_single"}  # from the groups, not of each record
    # a metric no episode has (a journal from before it was measured) is neither tested nor listed
    measured = [m for m in metrics if m in derived or any(r.get(m) is not None for r in records)]
    constant = [m for m in measured if m not in derived and len({r.get(m) for r in records}) == 1]
    tested = [m for m in measured if m not in constant]  # e.g. turns with a turn limit of 1: none
    tests = _tests(groups, _comparisons(config), tested)
    fits = _fits(records, groups, order)
    return _clean(
        {
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": command,
            # where the episodes ran (a journal from before this was recorded has none)
            "machines": sorted({r["machine"] for r in records if r.get("machine")}),
            "config": asdict(config),
            "kind": kind,
            "tasks": tasks,
            "episodes": len(records),
            "missing": expected - len(records),
            "definitions": {
                m: (LONGFORM_DEFINITIONS if config.writing_set == "longform" else {}).get(
                    m, DEFINITIONS[kind][m]
                )
                for m in metrics
            },
            "groups": table,
            "tests": tests,
            "untested": {m: records[0].get(m) for m in constant},
            "regression": fits,
        }
    )


def _group_table(groups: dict, order: list, metrics: list[str], config: Any) -> list[dict]:
    """One entry per shape and variant: its metrics' means with their intervals, pass@k, and
    its wall time (per word, for writing) against single's on the same task."""
    table = []
    for shape, variant in order:
        rows = groups[(shape, variant)]
        entry = {
            "shape": shape,
            "variant": variant,
            "tasks": len({r["task"] for r in rows}),
            "episodes": len(rows),
            "metrics": {m: mean_ci(list(per_task(rows, m).values())) for m in metrics},
            "pass_at_k": _pass_at_k(rows, config),
        }
        reference = next(iter(config.variants))  # the base model, as `_comparisons` has it
        single = groups.get(("single", variant)) or groups.get(("single", reference))
        for field, metric in (("time_s", "time_vs_single"), ("word_time_s", "word_time_vs_single")):
            if single and metric in metrics:
                base, own = per_task(single, field), per_task(rows, field)
                ratios = [own[t] / base[t] for t in own if base.get(t)]
                entry["metrics"][metric] = mean_ci(ratios)
        table.append(entry)
    return table


def _comparisons(config: Any) -> list[tuple[str, tuple, tuple]]:
    """What is tested against what: each team shape against each baseline (same variant), each
    variant against the first (same shape), and each other variant's team shapes against the
    first variant's baselines (a trained team against one agent on the base model: what a person
    gains over one untrained agent)."""
    comparisons = []
    for variant in config.variants:
        for shape in config.shapes:
            if shape == "single":
                continue
            for baseline in BASELINES:
                if baseline != shape and baseline in config.shapes:
                    comparisons.append(("shape_vs_baseline", (shape, variant), (baseline, variant)))
    reference = next(iter(config.variants))
    for variant in list(config.variants)[1:]:
        for shape in config.shapes:
            comparisons.append(("variant_vs_base", (shape, variant), (shape, reference)))
            if shape in BASELINES:
                continue
            for baseline in BASELINES:
                if baseline in config.shapes:
                    comparisons.append(
                        ("variant_vs_base_baseline", (shape, variant), (baseline, reference))
                    )
    return comparisons


def _tests(groups: dict, comparisons: list, metrics: list[str]) -> list[dict]:
    """Per metric, each comparison's Welch and paired tests, Holm-adjusted within the metric."""
    tests = []
    for metric in metrics:
        family = []
        for comparison, a, b in comparisons:
            if a not in groups or b not in groups:
                continue
            va, vb = per_task(groups[a], metric), per_task(groups[b], metric)
            if not va or not vb:
                continue
            result = welch_test(list(va.values()), list(vb.values()))
            shared = [(va[t], vb[t]) for t in va if t in vb]
            family.append(
                {
                    "metric": metric,
                    "comparison": comparison,
                    "shape": a[0],
                    "variant": a[1],
                    "baseline": b[0],
                    "baseline_variant": b[1],
                    **result,
                    "paired_p": paired_p(shared),
                    **sign_test(shared),
                }
            )
        for test, adjusted in zip(family, holm([t["p"] for t in family]), strict=True):
            test["p_holm"] = adjusted
        tests += family
    return tests


def _fits(records: Sequence[dict], groups: dict, order: list) -> dict:
    """Time against consistency: pooled over the teams, and per shape and variant."""
    team_records = [r for r in records if r.get("consistency") is not None]
    fits = {
        "pooled": regression(
            [r["consistency"] for r in team_records], [r["time_s"] for r in team_records]
        )
    }
    for shape, variant in order:
        rows = [r for r in groups[(shape, variant)] if r.get("consistency") is not None]
        if not rows:  # single: consistency is not defined
            continue
        fits[f"{shape}/{variant}"] = regression(
            [r["consistency"] for r in rows], [r["time_s"] for r in rows]
        )
    return fits


def _pass_at_k(rows: Sequence[dict], config: Any) -> dict[str, dict]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(bool(r["pass"]))
    out = {}
    for k in sorted({1, *config.ks, config.samples}):
        values = [pass_at_k(len(v), sum(v), k) for v in by_task.values() if len(v) >= k]
        if values:
            out[str(k)] = mean_ci(values)
    return out


def _clean(value: Any) -> Any:
    """JSON-ready: NaN and infinities become None, tuples lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.floating | np.integer):
        return _clean(value.item())
    return value
