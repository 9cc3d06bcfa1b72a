"""The report of an evaluation, DIR/report.md with its Markdown tables and PNG plots, and the
reward curve of a training run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np

from learner.eval_stats import METRICS, SAMPLED_SHARES

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# -- evaluation report -----------------------------------------------------------------------

PLOT_METRICS = ("pass", "tests", "reference", "consistency", "redundancy", "structure", "time_s")
PLOT_METRICS += ("tokens",)


def write_report(summary: dict, out_dir: str | Path, records: Sequence[dict]) -> list[Path]:
    """Write DIR/report.md and the PNG plots from a summary and its episode records; return the
    files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pictures = _plots(summary, records, out_dir)
    report = out_dir / "report.md"
    report.write_text(report_markdown(summary, [p.name for p in pictures]))
    return [report, *pictures]


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _cell(stat: dict, digits: int = 3) -> str:
    if stat["mean"] is None:
        return "–"
    if stat["ci_low"] is None:
        return _fmt(stat["mean"], digits)
    half = (stat["ci_high"] - stat["ci_low"]) / 2
    return f"{_fmt(stat['mean'], digits)} ± {_fmt(half, digits)}"


def _label(shape: str, variant: str, summary: dict) -> str:
    return shape if len(summary["config"]["variants"]) == 1 else f"{shape} [{variant}]"


def results_table(summary: dict) -> str:
    """The Markdown table: one row per shape (and variant), mean ± 95% CI half-width per metric."""
    metrics = list(summary["definitions"])
    ks = [k for k in ("3", "5", "10") if any(k in g["pass_at_k"] for g in summary["groups"])]
    head = ["shape", "tasks"] + [METRICS[m][0] for m in metrics] + [f"pass@{k}" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in summary["groups"]:
        cells = [_label(g["shape"], g["variant"], summary), str(g["tasks"])]
        cells += [_cell(g["metrics"][m], 1 if m in ("time_s", "tokens") else 3) for m in metrics]
        cells += [_cell(g["pass_at_k"][k]) if k in g["pass_at_k"] else "–" for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tests_table(
    summary: dict, metrics: Sequence[str] | None = None, comparison: str | None = None
) -> str:
    """The significance tests as a Markdown table."""
    head = ["metric", "shape", "vs", "mean", "baseline mean", "diff", "rel.", "t", "df"]
    head += ["p (Welch)", "p (Holm)", "p (paired)", "Cohen's d", "Hedges' g"]
    head += ["higher / lower", "p (sign)", "detectable"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in summary["tests"]:
        if (metrics and t["metric"] not in metrics) or (
            comparison and t["comparison"] != comparison
        ):
            continue
        rel = "–" if t["rel_change"] is None else f"{t['rel_change']:+.0%}"
        cells = [
            METRICS[t["metric"]][0],
            _label(t["shape"], t["variant"], summary),
            _label(t["baseline"], t["baseline_variant"], summary),
            _fmt(t["mean_a"]),
            _fmt(t["mean_b"]),
            _fmt(t["diff"]),
            rel,
            _fmt(t["t"], 2),
            _fmt(t["df"], 1),
            _p(t["p"]),
            _p(t["p_holm"]),
            _p(t["paired_p"]),
            _fmt(t["cohens_d"], 2),
            _fmt(t["hedges_g"], 2),
            f"{t['a_higher']} / {t['b_higher']}" if "a_higher" in t else "–",
            _p(t.get("sign_p")),
            _fmt(t.get("detectable")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def regression_text(summary: dict) -> str:
    lines = [
        "| episodes | α (s) | β (s per unit C) | r² | p (β) | n |",
        "|---|---|---|---|---|---|",
    ]
    for name, fit in summary["regression"].items():
        if fit is None:
            lines.append(f"| {name} | – | – | – | – | (too few points or no spread in C) |")
        else:
            lines.append(
                f"| {name} | {_fmt(fit['alpha'], 2)} | {_fmt(fit['beta'], 2)} | "
                f"{_fmt(fit['r2'])} | {_p(fit['p'])} | {fit['n']} |"
            )
    return "\n".join(lines)


def report_markdown(summary: dict, pictures: Sequence[str] = ()) -> str:
    """The whole report.md text."""
    c = summary["config"]
    kind = summary["kind"]
    source = "HumanEval" if kind == "coding" else c["writing_set"]
    variants = "; ".join(
        f"{name}: " + (", ".join(a or "base" for a in adapters) if adapters else "base model")
        for name, adapters in c["variants"].items()
    )
    sampling = (
        "greedy"
        if c["samples"] == 1
        else f"T={c['temperature']}, top_p={c['top_p']}, "
        + ("unseeded" if c["seed"] is None else f"seeds from {c['seed']}")
    )
    out = [
        f"# Evaluation: {kind}, {source} {c['split']} split"
        + (f" of fold {c['fold']}" if c.get("fold") else ""),
        "",
        f"- command: `{summary['command']}`" if summary["command"] else "",
        f"- {len(summary['tasks'])} tasks, shapes {', '.join(c['shapes'])}; teams of {c['agents']} "
        f"(single: 1); {c['samples']} sample(s) per task ({sampling}), {c['max_tokens']} tokens "
        f"per call, turn limit {c['turns']}, concurrency {c['concurrency']}",
        f"- variants: {variants}",
        f"- episodes: {summary['episodes']}"
        + (f" ({summary['missing']} missing)" if summary["missing"] else ""),
        f"- written {summary['created']}; episodes run on "
        + ("; ".join(summary.get("machines") or []) or "a machine not recorded")
        + " (times compare within one machine)",
        "",
        "## Results",
        "",
        "Mean ± half-width of the 95% t-interval over tasks (each task's samples averaged first).",
        "",
        results_table(summary),
        "",
        "## Definitions",
        "",
        *[f"- **{METRICS[m][0]}**: {text}" for m, text in summary["definitions"].items()],
        "",
    ]
    out += _tests_section(summary)
    out += [
        "## Completion time against consistency",
        "",
        "Least squares T = α + βC over the multi-agent episodes (T: wall time in s, C: "
        "consistency), pooled and per shape (scipy.stats.linregress; p is the slope's).",
        "",
        regression_text(summary),
        "",
    ]
    if pictures:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in pictures] + [""]
    return "\n".join(line for line in out if line is not None) + "\n"


def _tests_section(summary: dict) -> list[str]:
    """The report's significance tests: how they are made, then one table per kind of comparison."""
    out = [
        "## Significance tests",
        "",
        "Two-sided Welch t-tests over per-task values (scipy.stats.ttest_ind, equal_var=False); "
        "Cohen's d with the pooled sd, Hedges' g its small-sample correction; `rel.` is "
        "(mean − baseline mean)/|baseline mean|. p (Holm) adjusts for all comparisons of a metric; "
        "p (paired) is a paired t-test on the same tasks, for reference (the tasks are shared, so "
        "it is the more sensitive one). `higher / lower`: the tasks where the shape's value is "
        "above / below the baseline's; p (sign) the exact two-sided sign test over them; "
        "`detectable`: for 0/1 metrics (pass@1 greedy), the smallest difference of the means "
        "the sign test would call significant (p < 0.05) with as many tasks differing as here "
        "(– where no split of them would be).",
        "",
    ]
    if summary.get("untested"):
        same = ", ".join(f"{METRICS[m][0]} ({v})" for m, v in summary["untested"].items())
        out += [f"Not tested, equal in every episode: {same}.", ""]
    if "parallel" in summary["config"]["shapes"]:
        out += ["### parallel (MAGRPO's shape) against each baseline", ""]
        main = {**summary, "tests": [t for t in summary["tests"] if t["shape"] == "parallel"]}
        out += [tests_table(main, comparison="shape_vs_baseline"), ""]
    others = [
        t
        for t in summary["tests"]
        if t["comparison"] == "shape_vs_baseline" and t["shape"] != "parallel"
    ]
    if others:
        out += ["### Other team shapes against the baselines", ""]
        out += [tests_table({**summary, "tests": others}), ""]
    if any(t["comparison"] == "variant_vs_base" for t in summary["tests"]):
        out += ["### Trained variants against the base", ""]
        out += [tests_table(summary, comparison="variant_vs_base"), ""]
    if any(t["comparison"] == "variant_vs_base_baseline" for t in summary["tests"]):
        out += ["### Trained teams against the base model's baselines", ""]
        out += [tests_table(summary, comparison="variant_vs_base_baseline"), ""]
    return out


def _plots(summary: dict, records: Sequence[dict], out_dir: Path) -> list[Path]:
    written = []
    groups = summary["groups"]
    labels = [_label(g["shape"], g["variant"], summary) for g in groups]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}  # same in every plot
    for metric in PLOT_METRICS:
        if metric not in summary["definitions"]:
            continue
        stats_ = [g["metrics"][metric] for g in groups]
        means = [s["mean"] if s["mean"] is not None else np.nan for s in stats_]
        errors = [
            (s["ci_high"] - s["ci_low"]) / 2 if s["ci_low"] is not None else 0.0 for s in stats_
        ]
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        ax.bar(range(len(groups)), means, yerr=errors, capsize=4, color=[color[x] for x in labels])
        ax.set_xticks(range(len(groups)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(METRICS[metric][0])
        ax.set_title(f"{METRICS[metric][0]} by team shape (mean, 95% CI)", fontsize=10)
        written.append(_save(fig, out_dir / f"{metric}.png"))

    if any(len(g["pass_at_k"]) > 1 for g in groups):  # with one sample per task: pass.png
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for g, label in zip(groups, labels, strict=True):
            ks = sorted(g["pass_at_k"], key=int)
            means = [g["pass_at_k"][k]["mean"] for k in ks]
            ax.plot([int(k) for k in ks], means, "o-", label=label, color=color[label])
        ax.set_xlabel("k")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("pass@k")
        ax.set_title("pass@k (unbiased estimator)", fontsize=10)
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / "pass_at_k.png"))

    points = _scatter_points(summary, records)
    if points:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for label, (xs, ys) in points.items():
            ax.scatter(xs, ys, s=14, alpha=0.7, label=label, color=color[label])
        fit = summary["regression"].get("pooled")
        if fit is not None:
            grid = np.linspace(0, 1, 50)
            ax.plot(
                grid,
                fit["alpha"] + fit["beta"] * grid,
                "k--",
                label=f"T = {fit['alpha']:.1f} + {fit['beta']:.1f}·C (r² {fit['r2']:.2f})",
            )
        ax.set_xlabel("consistency C")
        ax.set_ylabel("completion time T (s)")
        ax.set_title("completion time against consistency (multi-agent episodes)", fontsize=10)
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / "time_vs_consistency.png"))
    return written


def _scatter_points(summary: dict, records: Sequence[dict]) -> dict[str, tuple[list, list]]:
    """label -> (consistency, time) of each multi-agent episode of the summary."""
    wanted = {(g["shape"], g["variant"]) for g in summary["groups"]}
    tasks = set(summary["tasks"])
    points: dict[str, tuple[list, list]] = {}
    for r in records:
        if (
            (r["shape"], r["variant"]) in wanted
            and r["task"] in tasks
            and r.get("consistency") is not None
        ):
            xs, ys = points.setdefault(_label(r["shape"], r["variant"], summary), ([], []))
            xs.append(r["consistency"])
            ys.append(r["time_s"])
    return points


def _save(fig, path: Path) -> Path:
    """Lay the figure out, write it as PNG and free it."""
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


# -- training curve --------------------------------------------------------------------------


def training_curve_figure(
    history: list[dict], title: str = "MAGRPO", pass_steps: int | None = None
):
    """The curves of a run (`history` as `learner.train.train` returns it), as a matplotlib
    figure (closed, for `gr.Plot` or `savefig`): mean and best joint reward per step and, below,
    what the sampled answers did (`SAMPLED_SHARES`: the share that passed and, for a coding
    team, that called the helper and that broke a role), where the steps recorded it.

    With `pass_steps` (steps per pass over a small task set that training cycles through), the
    mean of each pass is drawn at its last step: passes see the same tasks, so they compare; a
    moving mean of 3 steps otherwise.
    """
    shown = [k for k in SAMPLED_SHARES if history and all(k in h for h in history)]
    rows = 2 if shown else 1
    fig, axes = plt.subplots(rows, 1, figsize=(6, 3.5 * rows), dpi=100, squeeze=False)
    ax = axes[0][0]
    steps, means = [h["step"] for h in history], [h["reward_mean"] for h in history]
    if history:
        ax.plot(steps, means, marker="o", label="mean joint reward")
        ax.plot(steps, [h["reward_max"] for h in history], ls="--", alpha=0.6, label="best sample")
        _smoothed(ax, steps, means, pass_steps)
    ax.set_ylabel("joint reward")
    ax.set_title(title if history else "No training run with steps yet")
    if shown:
        below = axes[1][0]
        for key in shown:
            values = [h[key] for h in history]
            (line,) = below.plot(steps, values, ls="", marker=".", alpha=0.5)
            _smoothed(below, steps, values, pass_steps, SAMPLED_SHARES[key], line.get_color())
        below.set_ylim(-0.02, 1.02)
        below.set_ylabel("share of sampled answers")
    for row in axes:
        row[0].set_xlabel("training step")
        row[0].grid(alpha=0.3)
        if history:
            row[0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def _smoothed(ax, steps, values, pass_steps, label=None, color=None) -> None:
    """The mean of each pass over the tasks at its last step, or a moving mean of 3 steps."""
    if pass_steps and len(values) >= 2 * pass_steps:
        ends = range(pass_steps, len(values) + 1, pass_steps)
        per_pass = [sum(values[end - pass_steps : end]) / pass_steps for end in ends]
        label = label or f"mean per pass over the tasks ({pass_steps} steps)"
        ax.plot([steps[e - 1] for e in ends], per_pass, marker="s", lw=2, label=label, color=color)
    elif len(values) >= 3:
        window = 3
        smooth = [
            sum(values[max(0, i - window + 1) : i + 1]) / min(i + 1, window)
            for i in range(len(values))
        ]
        label = label or f"moving mean ({window})"
        ax.plot(steps, smooth, lw=2, alpha=0.8, label=label, color=color)
    elif label:  # too few steps to smooth: the points alone, named
        ax.plot([], [], marker=".", ls="", label=label, color=color)


def plot_training_curve(
    history: list[dict], path: str | Path, title: str = "MAGRPO", pass_steps: int | None = None
) -> Path:
    """Write `training_curve_figure` of a run to `path` (a PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    training_curve_figure(history, title, pass_steps).savefig(path)
    return path
