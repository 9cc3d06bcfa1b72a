"""A person's own long-form request: do the writers repeat each other without a curated outline?

The curated long-form set gives every document an outline whose briefs are facts (each Wikipedia
section's first sentence). A person who types a request and names no sections gets the fixed
default outline (`agents.tasks.DEFAULT_OUTLINE`). For N long-form tasks of a split, each request
is written greedily, through a managed vLLM server, as:

    curated   the set's outline
    default   the request alone, as a person's own request with no sections (the default
              outline: four kinds of section, each later one begun with its lead)
    briefs-only  the default outline as it was before its leads: Introduction, Background, Main
              points, Conclusion, with briefs alone
    request-title  the default outline titled by the request as typed, as a plain request was
              until 2026-12-06 (since, by what it is about: `agents.tasks.request_subject`)
    subject-briefs  the default outline (its headings and leads) with each brief naming the
              subject the request asks about ("The origins and history of Achilles: ...")
    planned   (--plan) the request with the outline planned in one call first
              (`agents.team.outline.plan_outline`: the model names the parts in JSON held to a
              schema by the server's grammar, the environment writes their briefs and leads;
              its time is added to the episode's, its tokens to the critical path); a plan
              without four distinct headings falls back to the default outline and is counted

by the team (`parallel`, --agents writers) and by `single`, and every document is scored by the
one scoring path (`learner.episode.play`, the set's article as the reference for every
variant). Prints per variant and shape: redundancy between sections (mean, documents at or under
the issue's 0.3), reference agreement, words, critical-path tokens and seconds; the issue's
checks on each document (`checks`: parts that name the subject the request asks about, parts
but the first that open the document or but the last that close it, sentences written in two
parts); then paired Wilcoxon tests of the team's redundancy across variants and against
single's.

Usage: python bench/own_outline.py [--split held_out] [--limit 12] [--agents 4] [--plan]
                                   [--variants curated,default,briefs-only] [--no-single]
                                   [--max-tokens 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy.stats import wilcoxon  # noqa: E402
from tqdm import tqdm  # noqa: E402

from agents.serving.models import DEFAULT_MODEL  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402
from agents.tasks import (  # noqa: E402
    DEFAULT_OUTLINE,
    LEAD_MARK,
    LONGFORM_SECTIONS,
    Task,
    TaskError,
    longform_prompt_task,
    longform_tasks,
    request_subject,
)
from agents.team.graph import GREEDY, TeamSettings  # noqa: E402
from agents.team.outline import plan_outline  # noqa: E402
from learner.episode import EpisodeSetup, play  # noqa: E402

# The default outline before it had leads (until 2026-11-28): four parts by their briefs alone
BRIEFS_ONLY = (
    "Introduction: What the topic is and why it matters to the reader.\n"
    "Background: The history, context or basic ideas a reader needs first.\n"
    "Main points: The core facts, arguments or steps, with one concrete example.\n"
    "Conclusion: What follows from it: consequences, open questions or advice."
)


# a part that opens the document ("In this article, we will explore") or closes it ("In
# conclusion"): the issue's check that only the first and the last part do so
OPENS = re.compile(
    r"\b(in this (article|explainer|essay|piece|guide|document|section)\b|"
    r"this (article|explainer|essay|piece|guide) (will|explores|covers|looks|discusses)|"
    r"we will (explore|discuss|look|examine|delve)|let'?s (explore|dive|take a look))",
    re.I,
)
CLOSES = re.compile(r"\b(in conclusion|in summary|to sum up|to conclude|in closing)\b", re.I)
SENTENCE_WORDS = 5  # a shared sentence has at least this many words


def checks(document: str, subject: str) -> dict:
    """The issue's checks on a document's parts (its `## ` sections): the share of parts that
    name the subject (its words, case aside), parts but the first that open the document or
    but the last that close it, and sentences of `SENTENCE_WORDS` words or more in two parts."""
    parts = [p for p in re.split(r"^## .*$", document, flags=re.M)[1:] if p.strip()]
    if not parts:
        return {"on_subject": 0.0, "stray_openings": 0, "shared_sentences": 0}
    words = [w for w in re.findall(r"\w+", subject.lower()) if len(w) > 2] or [subject.lower()]
    named = sum(all(w in p.lower() for w in words) for p in parts)
    stray = sum(bool(OPENS.search(p)) for p in parts[1:]) + sum(
        bool(CLOSES.search(p)) for p in parts[:-1]
    )
    seen: dict[str, set[int]] = {}
    for k, part in enumerate(parts):
        for sentence in re.split(r"(?<=[.!?])\s+", part):
            key = " ".join(re.findall(r"\w+", sentence.lower()))
            if len(key.split()) >= SENTENCE_WORDS:
                seen.setdefault(key, set()).add(k)
    shared = sum(len(where) > 1 for where in seen.values())
    return {"on_subject": named / len(parts), "stray_openings": stray, "shared_sentences": shared}


# DEFAULT_OUTLINE's briefs, each naming the subject ({s}); its headings and leads kept
SUBJECT_BRIEFS = (
    "A plain definition of {s} and who it matters to. Only this section defines {s}.",
    "The origins and history of {s}: when, where and who, with dates.",
    "One thing most readers do not know about {s}, explained.",
    "What {s} means for people now: effects, open debates, what to watch next.",
)


def subject_briefs(request: str) -> Task:
    """A person's own `request` with the default outline whose briefs name its subject."""
    subject = request_subject(request)
    lines = [
        f"{heading}: {brief.format(s=subject)}" + (f"{LEAD_MARK}{lead}" if lead else "")
        for (heading, _, lead), brief in zip(DEFAULT_OUTLINE, SUBJECT_BRIEFS, strict=True)
    ]
    return longform_prompt_task(request, "\n".join(lines))


def titled_by_request(task: Task) -> Task:
    """`task` (a person's own request) titled by the request's first line as typed."""
    title = task.prompt.strip().splitlines()[0][:120]
    return replace(task, extra=task.extra | {"title": title})


def planned_task(client, request: str, n: int) -> tuple[Task | None, str, int, float]:
    """The request as a person's own long-form task on the model's outline
    (`agents.team.outline.plan_outline`: one planning call, its reply held to JSON; None: not
    n distinct headings), the reply as written, the planning call's output tokens and seconds."""
    start = time.perf_counter()
    lines, reply, tokens = plan_outline(client, request, n)
    planned = None
    if lines is not None:
        with contextlib.suppress(TaskError):
            planned = longform_prompt_task(request, lines)
    return planned, reply, tokens, time.perf_counter() - start


def measure(client, args) -> list[dict]:
    rows = []
    tasks = longform_tasks(args.split)[: args.limit]
    sampling = replace(GREEDY, max_tokens=args.max_tokens)
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "own_outline.db"
        for task in tqdm(tasks, desc="requests", unit="request"):
            own = replace(longform_prompt_task(task.prompt), reference=task.reference)
            # variant -> (task, the planning call's reply or None, its tokens, its seconds)
            briefs = replace(
                longform_prompt_task(task.prompt, BRIEFS_ONLY), reference=task.reference
            )
            variants = {
                "curated": (task, None, 0, 0.0),
                "default": (own, None, 0, 0.0),
                "briefs-only": (briefs, None, 0, 0.0),
                "request-title": (titled_by_request(own), None, 0, 0.0),
                "subject-briefs": (
                    replace(subject_briefs(task.prompt), reference=task.reference),
                    None,
                    0,
                    0.0,
                ),
            }
            variants = {k: v for k, v in variants.items() if k in args.variants}
            usable = True
            if args.plan:
                planned, reply, tokens, seconds = planned_task(
                    client, task.prompt, LONGFORM_SECTIONS
                )
                usable = planned is not None
                planned = replace(planned or own, reference=task.reference)
                variants["planned"] = (planned, reply, tokens, seconds)
            for variant, (t, reply, plan_tokens, plan_s) in variants.items():
                for shape in (
                    ("parallel", "single")
                    if args.single and variant != "planned"
                    else ("parallel",)
                ):
                    agents = args.agents if shape == "parallel" else 1
                    setup = EpisodeSetup(t, TeamSettings(shape, agents, sampling=sampling))
                    [played] = play(setup, client, db=db)
                    result, c = played.result, played.scored.components
                    rows.append(
                        {
                            "task": task.source_id,
                            "variant": variant,
                            "shape": shape,
                            "plan": reply,
                            "plan_usable": usable if variant == "planned" else None,
                            "redundancy": c["redundancy"],
                            "reference": c["reference"],
                            "words": c["words"],
                            "critical_tokens": c["critical_tokens"] + plan_tokens,
                            "time_s": result.wall_time_s + plan_s,
                            "outline": [s["heading"] for s in t.extra["outline"]],
                            "title": t.extra["title"],
                            **checks(result.output, task.extra["title"]),
                        }
                    )
    return rows


def report(rows: list[dict]) -> dict:
    """The table and the paired tests, printed and returned."""
    cells = {}
    for row in rows:
        cells.setdefault((row["variant"], row["shape"]), []).append(row)
    print(
        "| variant | shape | redundancy | documents <= 0.3 | reference agr. | words "
        "| critical-path tokens | time (s) | parts on the subject | stray openings/closings "
        "| shared sentences |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    table = {}
    for (variant, shape), cell in cells.items():
        mean = {k: statistics.mean(r.get(k, 0) for r in cell) for k in
                ("redundancy", "reference", "words", "critical_tokens", "time_s",
                 "on_subject")}  # fmt: skip
        mean |= {k: sum(r.get(k, 0) for r in cell) for k in ("stray_openings", "shared_sentences")}
        under = sum(r["redundancy"] <= 0.3 for r in cell)
        table[f"{variant}/{shape}"] = mean | {"under_0.3": under, "n": len(cell)}
        print(
            f"| {variant} | {shape} | {mean['redundancy']:.3f} | {under} of {len(cell)} "
            f"| {mean['reference']:.3f} | {mean['words']:.0f} | {mean['critical_tokens']:.0f} "
            f"| {mean['time_s']:.1f} | {mean['on_subject']:.2f} | {mean['stray_openings']} "
            f"| {mean['shared_sentences']} |"
        )
    if ("planned", "parallel") in cells:
        usable = sum(r["plan_usable"] for r in cells[("planned", "parallel")])
        print(
            f"planning calls that gave a usable outline: {usable} of {len(cells[('planned', 'parallel')])}"
        )
    tests = {}
    pairs = [(("default", "parallel"), ("curated", "parallel")),
             (("default", "parallel"), ("briefs-only", "parallel")),
             (("default", "parallel"), ("request-title", "parallel")),
             (("subject-briefs", "parallel"), ("default", "parallel")),
             (("default", "single"), ("briefs-only", "single")),
             (("default", "parallel"), ("default", "single")),
             (("curated", "parallel"), ("curated", "single")),
             (("planned", "parallel"), ("default", "parallel"))]  # fmt: skip
    for a, b in pairs:
        if a not in cells or b not in cells:
            continue
        x = [r["redundancy"] for r in cells[a]]
        y = [r["redundancy"] for r in cells[b]]
        diff = statistics.mean(x) - statistics.mean(y)
        p = wilcoxon(x, y).pvalue if any(u != v for u, v in zip(x, y, strict=True)) else 1.0
        name = f"{'/'.join(a)} - {'/'.join(b)}"
        tests[name] = {"redundancy_diff": diff, "p_wilcoxon": p}
        print(f"redundancy {name}: {diff:+.3f} (paired Wilcoxon p = {p:.3f})")
    return {"table": table, "tests": tests}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--split", default="held_out", choices=("train", "validation", "held_out"))
    parser.add_argument("--limit", type=int, default=12, help="long-form requests written")
    parser.add_argument("--agents", type=int, default=4, help="writers in the team (2-4)")
    parser.add_argument("--plan", action="store_true", help="also the model's own outline")
    parser.add_argument(
        "--variants",
        default="curated,default,briefs-only",
        type=lambda text: text.split(","),
        help="which outlines besides the planned one (default curated,default,briefs-only)",
    )
    parser.add_argument(
        "--no-single", dest="single", action="store_false", help="the team only, not single"
    )
    parser.add_argument("--max-tokens", type=int, default=1000, help="per agent call")
    parser.add_argument("--vllm-url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="also write the rows and figures to this file")
    args = parser.parse_args()
    if not 2 <= args.agents <= LONGFORM_SECTIONS:
        parser.error(f"--agents: 2 to {LONGFORM_SECTIONS} writers")
    start = time.perf_counter()
    with connect_or_start(args.vllm_url, ServerConfig(model=args.model)) as client:
        rows = measure(client, args)
    figures = report(rows)
    print(f"{time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "rows": rows, **figures}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
