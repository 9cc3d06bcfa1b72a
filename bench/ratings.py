"""Do ratings change the team? A simulated rater with a checkable taste rates A/B pairs (or
single answers, with thumbs) through the store API the page uses, the learner retrains (its
preference model learns from those ratings and scores every rollout), and held-out prompts are
answered before and after.

    rating ab       (default) N A/B pairs, one per training task, as the page's A/B mode: the
                    rater picks the answer with the property, a tie when both or neither have it;
                    with --candidates K, K answers are sampled a task and the pair rated is the
                    one the History tab's rating queue offers after the votes before it (the
                    two its preference model scores furthest apart, the two least alike before
                    that model tells them apart)
    rating thumbs   N answers, one per training task, each given a thumb: up with the property,
                    down without (the control: a coin flip); every rating says something, where
                    most A/B pairs of a property that one answer in three has are ties

    rater prefers   prefers the program that has the property; a tie when both or neither do
    rater averse    prefers the program without it (the mirror of prefers)
    rater counter   (default) the counterbalanced experiment: the arms prefers and averse, from
                    one start, on the same rated episodes; the effect is their divergence on the
                    held-out prompts (drift common to both cancels). Run it with several --seed
                    values and --replot the JSON files: a paired sign test over prompts x seeds
    rater none      the control: a coin flip, no preference
    rater both      the two arms of one experiment: the same rated episodes, the same
                    start and the same before-measurement; each arm adds its own votes to its own
                    copy of the database and retrains from it, and the arms' answers after their
                    retrains are compared with each other, prompt by prompt: what the preference
                    did beyond what retraining does anyway
    rater unrated   no votes at all: the retrain on the automatic reward alone (no preference
                    model, so no blend), the drift any retrain brings
    rater all       the three arms: also the control against the unrated arm, what ratings
                    without a preference change beyond that drift

    property commented  the program has a comment (`# ...`): about a third of the untrained
                        team's programs do, so pairs disagree often enough to teach
    property typed      every function has type hints and a docstring: the untrained team's
                        programs all do (the contract's stubs have both), so nearly every
                        pair is a tie (50 ratings: 49 ties) and nothing is learnt
    property descriptive  every name the code binds has 3 characters or more (no `i`, `x`):
                        a naming taste the tests do not decide

    --task summary      the team of two writers summarizes XSum articles (a one-sentence
                        summary and its key facts) and the rater judges the writing:
    property attributed     it says who said it (a quotation, or "said", "says", "told",
                            "according to")
    property second-person  it speaks to its reader ("you", "your")
    property opens-with-the its first word is "The" (what happened, not a name): in about a
                            quarter of the untrained team's summaries, and the writing verdict
                            passes those as often as the others (docs/runs/training-log.md)

Measured on the first --held-out problems of the task set's held-out split: how often the
team's answer has the property, and pass@1 (coding: every test assert passes, run in the
sandbox; writing: the environment's success, as `coteam eval` counts it), before (the base
model) and after (the run's candidates). With --samples 1 one greedy answer per prompt; with
more, that many answers sampled at T = 0.8 (unseeded, as every run in docs/runs/training-log.md) and the
per-prompt rates. Each comparison is a sign test over the prompts whose rate changed (exact
McNemar for greedy answers). Each arm also reports what its retrain gave the update: the groups
whose samples differ in the property, and the preference term's gap there.

Everything runs in a temporary COTEAM_HOME (its own databases and adapter registries).

Usage: python bench/ratings.py [--rater counter|both|all|prefers|averse|none|unrated]
                               [--task coding|summary] [--seed 0]
                               [--property NAME] [--rating ab|thumbs] [--candidates 2]
                               [--ratings 4] [--held-out 4]
                               [--samples 1] [--concurrency 4]
                               [--steps 1] [--group-size 2] [--max-tokens 192] [--learning-rate LR]
                               [--gate] [--gate-samples 1 [4 ...]]
                               [--vllm-url URL] [--json PATH] [--plot PNG]
       python bench/ratings.py --replot JSON [JSON ...] [--plot PNG]
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import median, stdev

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy.stats import binomtest  # noqa: E402

import store  # noqa: E402
from agents.judge.parsing import parse  # noqa: E402
from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.tasks import split_tasks  # noqa: E402
from agents.team.combine import extract_code  # noqa: E402
from agents.team.graph import GREEDY, Sampling, TeamSettings  # noqa: E402
from learner.config import (  # noqa: E402
    GateSettings,
    MAGRPOConfig,
    TrainArgs,
)
from learner.episode import EpisodeSetup, play  # noqa: E402
from learner.evaluate import episode_metrics  # noqa: E402
from learner.promotion import describe_gate, gate  # noqa: E402
from learner.rating_queue import pairs_to_rate  # noqa: E402
from learner.registry import adapter_name, load_version  # noqa: E402
from learner.reward_config import RewardWeights  # noqa: E402
from learner.train import train  # noqa: E402
from learner.writing_reward import SECOND_PERSON  # noqa: E402

AGENTS = 2


def typed(program: str) -> bool:
    """Every function defined has annotated arguments, a return annotation and a docstring."""
    try:
        tree = parse(extract_code(program))
    except SyntaxError:
        return False
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    return bool(functions) and all(
        f.returns is not None
        and all(a.annotation is not None for a in f.args.args)
        and ast.get_docstring(f) is not None
        for f in functions
    )


def commented(program: str) -> bool:
    """The program has at least one comment (a `#` token, not a `#` inside a string)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(extract_code(program)).readline)
        return any(t.type == tokenize.COMMENT for t in tokens)
    except (tokenize.TokenError, SyntaxError):
        return False


def descriptive(program: str) -> bool:
    """Every name the program's code binds (an assignment, a loop's or a comprehension's
    variable, `with ... as`, `except ... as`) is at least 3 characters long (`_` aside): no `i`,
    `x` or `n`. A program that binds no name has it; one that does not parse does not."""
    try:
        tree = parse(extract_code(program))
    except SyntaxError:
        return False
    names = [
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    ]
    names += [n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name]
    return all(len(name) >= 3 for name in names if name != "_")


def attributed(text: str) -> bool:
    """The writing says who said it: a quotation, or a word of reporting ("said", "says",
    "told", "according to")."""
    return bool(QUOTED.search(text) or REPORTING.search(text))


def second_person(text: str) -> bool:
    """The writing speaks to its reader: "you" or "your" at least once."""
    return bool(SECOND_PERSON.search(text))


def opens_with_the(text: str) -> bool:
    """The summary's first word is "The": it opens with what happened, not with a name."""
    return text.lstrip().startswith("The ")


QUOTED = re.compile(r'["\u201c][^"\u201c\u201d]{3,}["\u201d]')
REPORTING = re.compile(r"\b(said|says|told|according to)\b", re.I)
# the property a rater looks for, by the curated task set the experiment runs on
PROPERTIES = {
    "coding": {"commented": commented, "typed": typed, "descriptive": descriptive},
    "summary": {
        "attributed": attributed,
        "second-person": second_person,
        "opens-with-the": opens_with_the,
    },
}
# the rater, its mirror, the coin-flip control, no ratings
ARMS = ["prefers", "averse", "none", "unrated"]
RATERS = {"counter": ["prefers", "averse"], "both": ["prefers", "none"], "all": ARMS}
# what the rater gives (--rating): answers sampled per rated task, and the name in reports
RATING_KINDS = {"ab": (2, "A/B"), "thumbs": (1, "thumbs")}


def vote(rater: str, has, left: str, right: str, rng: random.Random) -> str:
    """The simulated rater's A/B choice: left, right or tie."""
    if rater == "none":
        return rng.choice(["left", "right"])
    a, b = has(left), has(right)
    return "tie" if a == b else ("left" if a == (rater == "prefers") else "right")


def thumb(rater: str, has, output: str, rng: random.Random) -> int:
    """The simulated rater's thumb on one answer: +1 (up) or -1 (down)."""
    if rater == "none":
        return rng.choice([1, -1])
    return 1 if has(output) == (rater == "prefers") else -1


def team(task, sampling: Sampling, adapters=None) -> EpisodeSetup:
    """The team the experiment rates: two agents in parallel (`play` checks a coding team's
    program by its tests in the sandbox)."""
    return EpisodeSetup(task, TeamSettings(agents=AGENTS, adapters=adapters, sampling=sampling))


def measure(client, adapters, tasks, db_path, args, has) -> list[dict]:
    """The team's answers to the held-out tasks, --concurrency tasks at a time: for each, the
    share of answers that have the property and that pass (coding: all asserts, in the
    sandbox; writing: the environment's success). One greedy answer with --samples 1, else
    --samples answers sampled at T = 0.8."""
    # one greedy answer, or Sampling's defaults (T = 0.8, top-p 0.95), unseeded, as every run in
    # the docs
    if args.samples == 1:
        sampling = replace(GREEDY, max_tokens=args.max_tokens)
    else:
        sampling = Sampling(max_tokens=args.max_tokens)

    def one(task) -> dict:
        played = play(team(task, sampling, adapters), client, db=db_path, samples=args.samples)
        # pass as `coteam eval` counts it (coding: the sandbox's report, never the program's)
        passes = [episode_metrics(p.result, p.scored)["pass"] for p in played]
        props = [has(p.result.output) for p in played]
        return {"property": sum(props) / len(props), "pass": sum(passes) / len(passes)}

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        return list(pool.map(one, tasks))


def sign_test(before: list[float], after: list[float]) -> float:
    """Two-sided sign test over the prompts whose rate changed (for one greedy answer per prompt,
    the exact McNemar test): how lopsided the change is."""
    up = sum(1 for b, a in zip(before, after, strict=True) if a > b)
    down = sum(1 for b, a in zip(before, after, strict=True) if a < b)
    return 1.0 if up + down == 0 else binomtest(up, up + down, 0.5).pvalue


def copy_db(source: Path, dest: Path) -> None:
    """A consistent copy of a database (SQLite's online backup: the WAL included)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with store.open_db(source) as db, sqlite3.connect(dest) as out:
        db.conn.backup(out)


def queued_pair(db, answers: tuple) -> tuple | None:
    """The pair of one task's sampled answers that the rating queue (`learner.rating_queue`)
    offers now, the votes stored so far deciding it, and what picked it; None when the answers
    are one text."""
    by_id = {result.episode_id: result for result in answers}
    found = pairs_to_rate(db, limit=1, task_ids=[answers[0].task_id])
    return (by_id[found[0].left], by_id[found[0].right], found[0].picked_by) if found else None


def rate(db_path: Path, rated, rater: str, has, seed: int) -> tuple[dict, dict]:
    """The simulated rater's ratings through `store.add_rating` (the page's), one task after
    another: an A/B vote on each pair (of more answers, the pair the rating queue offers after
    the votes before it), or a thumb on each single answer. The count of each choice, and of
    what picked the queue's pairs."""
    rng, votes, picked = random.Random(seed), {}, {}
    with store.open_db(db_path) as db:
        for answers in rated:
            if len(answers) > 2:
                queued = queued_pair(db, answers)
                if queued is None:
                    continue
                *answers, how = queued
                picked[how] = picked.get(how, 0) + 1
            if len(answers) == 2:
                left, right = answers
                choice = vote(rater, has, left.output, right.output, rng)
                store.add_rating(
                    db,
                    left.episode_id,
                    "pairwise",
                    choice=choice,
                    other_episode_id=right.episode_id,
                )
            else:
                value = thumb(rater, has, answers[0].output, rng)
                store.add_rating(db, answers[0].episode_id, "thumbs", value=value)
                choice = "up" if value > 0 else "down"
            votes[choice] = votes.get(choice, 0) + 1
    return votes, picked


def rated_weights(args) -> RewardWeights:
    """The reward weights of a retrain and its gate: the defaults, with the blend's --human-weight."""
    return RewardWeights(human=args.human_weight, human_full_skill=args.human_full_skill)


def retrain(client, model_path, db_path: Path, args) -> tuple[list[str], dict, dict]:
    """One retrain from the database's ratings: its candidates' names, loaded into the server;
    what its preference model was (ratings learnt, cross-validated skill, its weight in the
    reward); and its candidates ({agent: version})."""
    train_args = TrainArgs(
        task=args.task,
        steps=args.steps,
        agents=AGENTS,
        task_limit=args.ratings,
        magrpo=MAGRPOConfig(
            group_size=args.group_size,
            tasks_per_step=2,
            max_new_tokens=args.max_tokens,
            learning_rate=args.learning_rate,
            seed=args.seed,
        ),
        weights=rated_weights(args),
    )
    outcome = train(train_args, client, model_path, db_path)
    with store.open_db(db_path) as db:
        names = []
        for agent, version in sorted(outcome["candidates"].items()):
            names.append(adapter_name(agent, version))
            load_version(client, names[-1], store.get_adapter(db, agent, version)["path"])
    last = outcome["history"][-1]
    keys = ("ratings_learnt", "preference_skill", "preference_weight")
    return names, {key: last.get(key) for key in keys}, outcome["candidates"]


def gate_retrain(client, candidates: dict, db_path: Path, args) -> list[dict]:
    """The promotion gate's decisions on a retrain's candidates against the start, as the app
    decides before serving them: the default settings (on the validation problems, with the
    retrain's reward, ratings included), with each of --gate-samples answers a task in turn."""
    decisions, weights = [], rated_weights(args)
    for samples in args.gate_samples:
        settings = GateSettings(samples=samples)
        result = gate(client, candidates, args.task, AGENTS, db_path, settings, weights)
        decisions.append(result.to_json())
        print(gate_line(decisions[-1]), flush=True)
    return decisions


def gate_line(decision: dict) -> str:
    """A gate decision (`GateResult.to_json`) in a line of the report."""
    verdict = "promoted" if decision["passed"] else "rejected"
    return f"gate: {describe_gate(decision)}: {verdict}"


def training_signal(db_path: Path, since: int, has) -> dict:
    """What the retrain's rollouts (the episodes after the first `since`) gave the update about
    the property: their groups, the informative ones (whose samples differ in the property: only
    there can the preference move the advantage towards it), and in those the mean gap, with the
    property minus without (positive: it pointed the right way), of the preference h and of
    what it added to the reward (`human_term`: h centred among the samples the environment scored
    alike, times the weight). And the pairs of samples of a group that differ in the property:
    how many, and how many of them the environment scored alike (the same tests' share or
    verdict): only those can the preference reorder (`blend_human`); the rest the environment
    ranks, whatever people prefer."""
    with store.open_db(db_path) as db:
        newest = store.list_episodes(db, limit=store.count_episodes(db) - since)
        rollouts = store.get_episodes(db, [e["id"] for e in newest])
    groups: dict[str, list[dict]] = {}
    for episode in rollouts:
        groups.setdefault(episode["group_id"], []).append(episode)
    gaps: dict[str, list[float]] = {"human_rating": [], "human_term": []}
    pairs = {"differing": 0, "scored_alike": 0}
    for members in groups.values():
        for name, found in gaps.items():
            split = {True: [], False: []}
            for e in members:
                if name in e["rewards"]:  # a preference was added to its reward
                    split[has(e["final_output"] or "")].append(e["rewards"][name])
            if split[True] and split[False]:
                mean = {k: sum(v) / len(v) for k, v in split.items()}
                found.append(mean[True] - mean[False])
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if has(a["final_output"] or "") != has(b["final_output"] or ""):
                    pairs["differing"] += 1
                    pairs["scored_alike"] += outcome(a) == outcome(b)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    return {
        "groups": len(groups),
        "informative": len(gaps["human_rating"]),
        "preference_gap": mean(gaps["human_rating"]),
        "term_gap": mean(gaps["human_term"]),
        "pairs": pairs,
    }


def outcome(episode: dict) -> float | None:
    """The environment's outcome of an episode, as `blend_human` groups them: the verdict for
    writing, the tests' share of points for a program."""
    rewards = episode["rewards"]
    found = rewards.get("verdict", rewards.get("tests"))
    return None if found is None else round(found, 6)


def rates(measured: list[dict]) -> dict:
    return {key: sum(m[key] for m in measured) / len(measured) for key in ("property", "pass")}


def experiment(client, model_path, home: Path, args) -> dict:
    """Shared: the before-measurement and the rated episodes. Then per arm (a rater): its own
    home and copy of the database, its votes, its retrain, its after-measurement."""
    has = PROPERTIES[args.task][args.property]
    raters = RATERS.get(args.rater, [args.rater])
    held_out = split_tasks(args.task, "held_out")[: args.held_out]
    t0 = time.perf_counter()
    shared = home / "shared" / "coteam.db"
    os.environ["COTEAM_HOME"] = str(shared.parent)
    before = measure(client, [None] * AGENTS, held_out, shared, args, has)
    print(f"before: {len(held_out)} held-out prompts, {rates(before)}, "
          f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip

    sampling = Sampling(max_tokens=args.max_tokens)  # T = 0.8, as the page samples A/B pairs

    answers, label = RATING_KINDS[args.rating]
    if args.rating == "ab":
        answers = args.candidates

    def sample(task) -> tuple:  # as the page samples them: an A/B pair, or one answer
        return tuple(
            p.result for p in play(team(task, sampling), client, db=shared, samples=answers)
        )

    tasks = split_tasks(args.task, "train")[: args.ratings]  # the tasks the retrain trains on
    if len(tasks) < args.ratings:
        print(f"--ratings {args.ratings}: the {args.task} training split has {len(tasks)} tasks, "
              f"one rating each", flush=True)  # fmt: skip
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        rated = list(pool.map(sample, tasks))
    print(f"sampled {answers} answer(s) for each of {len(tasks)} tasks, {len(rated)} {label} "
          f"ratings, {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip

    arms = {}
    for rater in raters:
        arm_home = home / rater
        os.environ["COTEAM_HOME"] = str(arm_home)  # its own adapter registry and runs
        db_path = arm_home / "coteam.db"
        copy_db(shared, db_path)
        votes, picked = (
            ({}, {}) if rater == "unrated" else rate(db_path, rated, rater, has, args.seed)
        )
        with store.open_db(db_path) as db:
            since = store.count_episodes(db)
        names, preference, candidates = retrain(client, model_path, db_path, args)
        signal = training_signal(db_path, since, has)  # before the gate's episodes
        if args.gate:
            preference["gates"] = gate_retrain(client, candidates, db_path, args)
        after = measure(client, names, held_out, db_path, args, has)
        for name in names:  # the next arm's candidates get the same names
            client.unload_adapter(name)
        arms[rater] = dict(votes=votes, picked_by=picked, **preference, signal=signal, after=after)
        print(f"{rater}: votes {votes}, retrain {signal}, after {rates(after)}, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    return {
        "task": args.task,
        "property": args.property,
        "ratings": len(rated),
        "rating": args.rating,
        "candidates": args.candidates if args.rating == "ab" else 1,
        "held_out": len(held_out),
        "samples": args.samples,
        "steps": args.steps,
        "group_size": args.group_size,
        "learning_rate": args.learning_rate,
        "human_weight": args.human_weight,
        "human_full_skill": args.human_full_skill,  # w_h grows with the model's skill
        "prompts": [task.source_id for task in held_out],
        "before": before,
        "arms": arms,
        "seconds": round(time.perf_counter() - t0, 1),
        "seed": args.seed,
        "code": code_revision(),  # which φ, penalties and blend the run measured
    }


def code_revision() -> str | None:
    """The commit the run's code is at (`-dirty` when changed since), None outside a checkout."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return described.stdout.strip() or None


def rating_kind(figures: dict) -> str:
    kind = RATING_KINDS[figures.get("rating", "ab")][1]  # earlier runs: A/B
    candidates = figures.get("candidates", 2)  # earlier runs: the two sampled answers
    if candidates <= 2:
        return kind
    # runs before 2026-11-28 (no "picked_by"): the least alike pair, picked before any vote
    queued = any("picked_by" in arm for arm in figures["arms"].values())
    return kind + (
        f" (the queue's pair of {candidates})" if queued else f" (least alike of {candidates})"
    )


def report(figures: dict) -> str:
    """Each arm before → after; after both retrains, the rater's arm against the control's and
    the control's against the unrated one (where the run has them)."""
    before, arms = figures["before"], figures["arms"]
    lines = [
        f"{figures['property']}: N = {figures['ratings']} {rating_kind(figures)} ratings, "
        f"{figures['steps']} step(s), "
        f"{figures['held_out']} held-out prompts x {figures['samples']} answer(s), "
        f"{figures['seconds']} s"
    ]
    for rater, arm in arms.items():
        learnt = f"  rater {rater}: votes {arm['votes']}, ratings learnt {arm['ratings_learnt']}"
        if arm.get("picked_by"):
            learnt += f", pairs picked by {arm['picked_by']}"
        if arm.get("preference_skill") is not None:  # runs before the skill-scaled weight: none
            learnt += (
                f", preference skill {arm['preference_skill']:.2f} -> weight in the reward "
                f"{arm['preference_weight']:.2f}"
            )
        lines.append(learnt)
        signal = arm.get("signal")  # not recorded by the first two-arm run
        if signal and not arm["votes"]:
            lines.append(f"    retrain: {signal['groups']} groups, no ratings: no preference term")
        elif signal:
            lines.append(
                f"    retrain: {signal['groups']} groups, {signal['informative']} differing in "
                f"the property, preference h with it minus without {signal['preference_gap']}"
                + (f", added to the reward {signal['term_gap']}" if signal.get("term_gap") else "")
            )
            if signal.get("pairs"):  # counted since 2026-12-02
                pairs = signal["pairs"]
                lines.append(
                    f"    pairs differing in the property: {pairs['differing']}, "
                    f"{pairs['scored_alike']} of them scored alike by the environment "
                    f"(only those can the preference reorder)"
                )
        for decision in arm.get("gates", []):  # with --gate
            lines.append(f"    {gate_line(decision)}")
        for key in ("property", "pass"):
            b, a = [m[key] for m in before], [m[key] for m in arm["after"]]
            lines.append(
                f"    {key:8s}  {100 * rates(before)[key]:5.1f}% -> "
                f"{100 * rates(arm['after'])[key]:5.1f}%  (sign test p = {sign_test(b, a):.3f})"
            )
    for mine, theirs, what in (
        ("prefers", "averse", "the counterbalanced arms: preferring it against its absence"),
        ("prefers", "none", "the rater's arm against the control's"),
        ("none", "unrated", "the control's arm against the unrated one"),
    ):
        if {mine, theirs} <= arms.keys():
            lines.append(f"  {what}, after both retrains:")
            ours, others = arms[mine]["after"], arms[theirs]["after"]
            for key in ("property", "pass"):
                p = sign_test([m[key] for m in others], [m[key] for m in ours])
                lines.append(
                    f"    {key:8s}  {100 * rates(ours)[key]:5.1f}% vs "
                    f"{100 * rates(others)[key]:5.1f}%  (sign test p = {p:.3f})"
                )
    return "\n".join(lines)


def across(runs: list[dict], names: list[str]) -> str:
    """What several runs of one property say together: per run with both arms, the property's
    change (after − before, points) in the control's arm and the rater's, the rater's pass
    change, and the rater's arm against the control's after both retrains, with their medians;
    and the spread of the base model's rate over the runs that measured it on the same prompts
    and samples (the noise under every before → after)."""
    # property and pass changes, after − before, per arm; then the rater's arm − the control's
    columns = ("control prop", "rater prop", "rater pass", "vs ctrl prop", "vs ctrl pass")

    def figures_of(f: dict) -> list[float]:
        before = rates(f["before"])
        arms = {arm: rates(f["arms"][arm]["after"]) for arm in f["arms"]}
        return [100 * v for v in (
            arms["none"]["property"] - before["property"],
            arms["prefers"]["property"] - before["property"],
            arms["prefers"]["pass"] - before["pass"],
            arms["prefers"]["property"] - arms["none"]["property"],
            arms["prefers"]["pass"] - arms["none"]["pass"],
        )]  # fmt: skip

    lines = []
    for prop in sorted({f["property"] for f in runs}):
        mine = [(f, name) for f, name in zip(runs, names, strict=True) if f["property"] == prop]
        lines += counterbalanced(
            prop, [(f, n) for f, n in mine if {"prefers", "averse"} <= f["arms"].keys()]
        )
        both = [(f, name) for f, name in mine if {"prefers", "none"} <= f["arms"].keys()]
        if both:  # a row per run; the median where there are two or more
            width = max(len(name) for _, name in both)
            rows = [figures_of(f) for f, _ in both]
            lines.append(
                f"{prop}, {len(both)} runs with both arms, in points (changes: after − before; "
                f"vs ctrl: the rater's arm − the control's, after):"
            )
            lines.append(f"  {'':{width}s}  " + "  ".join(f"{c:>12s}" for c in columns))
            for (_, name), row in zip(both, rows, strict=True):
                lines.append(f"  {name:{width}s}  " + "  ".join(f"{v:+12.1f}" for v in row))
            if len(rows) >= 2:
                lines.append(
                    f"  {'median':{width}s}  "
                    + "  ".join(f"{median(col):+12.1f}" for col in zip(*rows, strict=True))
                )
            lines.append(
                f"  the control moved the property under 5 points in "
                f"{sum(round(abs(row[0]), 1) < 5 for row in rows)} of {len(rows)}"
            )
        same: dict[tuple, list[dict]] = {}
        for f, _ in mine:
            same.setdefault((tuple(f["prompts"]), f["samples"]), []).append(f)
        for (prompts, samples), measured in same.items():
            if len(measured) >= 3:
                spread = {key: 100 * stdev(rates(f["before"])[key] for f in measured)
                          for key in ("property", "pass")}  # fmt: skip
                lines.append(
                    f"  the base model, measured {len(measured)} times on the same "
                    f"{len(prompts)} prompts x {samples}: standard deviation "
                    f"{spread['property']:.1f} points of the property, {spread['pass']:.1f} of pass"
                )
    return "\n".join(lines)


def counterbalanced(prop: str, runs: list[tuple[dict, str]]) -> list[str]:
    """The counterbalanced runs of one property (each a seed): the arms' divergence on the
    property (preferring it − preferring its absence, after both retrains) and each arm's pass
    change, per run; then the divergence over every prompt of every run with its sign test."""
    if not runs:
        return []
    lines = [
        f"{prop}, counterbalanced, {len(runs)} run(s), in points (divergence: the arm preferring "
        "it − the arm preferring its absence, after; pass: after − before):",
        f"  {'run':36s} {'seed':>5s} {'divergence':>11s} {'pass prefers':>13s} {'pass averse':>12s}",
    ]
    ours, theirs = [], []
    passed = {"before": [], "prefers": [], "averse": []}  # every prompt of every run
    for f, name in runs:
        before = rates(f["before"])
        arms = {arm: rates(f["arms"][arm]["after"]) for arm in ("prefers", "averse")}
        lines.append(
            f"  {Path(name).stem[:36]:36s} {f.get('seed', 0):>5} "
            f"{100 * (arms['prefers']['property'] - arms['averse']['property']):+11.1f} "
            f"{100 * (arms['prefers']['pass'] - before['pass']):+13.1f} "
            f"{100 * (arms['averse']['pass'] - before['pass']):+12.1f}"
        )
        ours += [m["property"] for m in f["arms"]["prefers"]["after"]]
        theirs += [m["property"] for m in f["arms"]["averse"]["after"]]
        passed["before"] += [m["pass"] for m in f["before"]]
        for arm in ("prefers", "averse"):
            passed[arm] += [m["pass"] for m in f["arms"][arm]["after"]]
    pooled = 100 * (sum(ours) - sum(theirs)) / len(ours)
    lines.append(
        f"  over {len(ours)} prompts x runs: divergence {pooled:+.1f} points, "
        f"sign test p = {sign_test(theirs, ours):.3g}"
    )
    for arm in ("prefers", "averse"):
        change = 100 * (sum(passed[arm]) - sum(passed["before"])) / len(ours)
        lines.append(
            f"  pass, the arm {arm}: {change:+.1f} points from the start "
            f"(sign test p = {sign_test(passed['before'], passed[arm]):.3g})"
        )
    return lines


def run_label(figures: dict) -> str:
    return (
        f"{figures['property']}, N = {figures['ratings']} {rating_kind(figures)}\n"
        f"{figures['steps']} steps of G = {figures['group_size']}, w_h {figures['human_weight']}"
        + (f" from skill {figures['human_full_skill']}" if "human_full_skill" in figures else "")
        + "\n"
        f"{figures['held_out']} prompts x {figures['samples']} answer(s)"
        + (f", code {figures['code']}" if figures.get("code") else "")
    )


def plot(runs: list[dict], path: str) -> None:
    """Bars of the property's rate and of pass@1 on the held-out prompts, one group of bars per
    run (labelled by its N): before, and after each arm's retrain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["before (base)"] + [f"after, rater {rater}" for rater in ARMS]
    fig, axes = plt.subplots(2, 1, figsize=(2 + 2.8 * len(runs), 7.6), dpi=100, sharey=True)
    properties = sorted({figures["property"] for figures in runs})
    metrics = (("property", " / ".join(properties)), ("pass", "pass@1"))
    width = 0.8 / len(labels)
    for ax, (key, title) in zip(axes, metrics, strict=True):
        for x, figures in enumerate(runs):
            measured = [figures["before"]] + [
                figures["arms"].get(rater, {}).get("after") for rater in ARMS
            ]
            for i, m in enumerate(measured):
                if m is not None:
                    offset = (i - (len(labels) - 1) / 2) * width
                    ax.bar(x + offset, 100 * rates(m)[key], width, label=labels[i], color=f"C{i}")
        ax.set_xticks(range(len(runs)), [run_label(f) for f in runs], fontsize=8)
        ax.set_title(f"{title}, held out (%)")
        ax.grid(axis="y", alpha=0.3)
    legend = dict(zip(*reversed(axes[0].get_legend_handles_labels()), strict=True))  # one each
    axes[0].legend(legend.values(), legend.keys(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    parser.add_argument("--rater", choices=[*RATERS, *ARMS], default="counter")
    parser.add_argument(
        "--task", choices=sorted(PROPERTIES), default="coding", help="the curated set rated on"
    )
    parser.add_argument(
        "--property",
        choices=sorted({name for named in PROPERTIES.values() for name in named}),
        help="what the rater prefers (coding: commented, the default; summary: attributed)",
    )
    parser.add_argument("--ratings", type=int, default=4, help="N: ratings, one per task")
    parser.add_argument(
        "--rating", choices=list(RATING_KINDS), default="ab", help="what the rater gives"
    )
    parser.add_argument(
        "--candidates",
        type=int,
        default=2,
        help="A/B: answers sampled per rated task; the pair rated is the one the History tab's "
        "rating queue offers after the votes before it (2: the two sampled)",
    )
    parser.add_argument("--held-out", type=int, default=4, help="held-out prompts measured")
    parser.add_argument(
        "--samples", type=int, default=1, help="answers per prompt (1: greedy; more: T = 0.8)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=4, help="held-out tasks or A/B pairs run at a time"
    )
    parser.add_argument("--steps", type=int, default=1, help="training steps of the retrain")
    parser.add_argument("--group-size", type=int, default=2, help="G joint samples per task")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument(
        "--learning-rate", type=float, default=MAGRPOConfig.learning_rate, help="the LoRA's"
    )
    parser.add_argument(
        "--human-weight",
        type=float,
        default=RewardWeights.human,
        help="w_h of the blend once the preference model's skill reaches human_full_skill",
    )
    parser.add_argument(
        "--human-full-skill",
        type=float,
        default=RewardWeights.human_full_skill,
        help="the preference model's skill at which its weight reaches --human-weight",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the retrains' seed and the control's coin flips"
    )
    parser.add_argument(
        "--gate",
        action="store_true",
        help="after each retrain, run the promotion gate (default settings) on its candidates "
        "against the start, as the app would before serving them",
    )
    parser.add_argument(
        "--gate-samples",
        type=int,
        nargs="+",
        default=[GateSettings.samples],
        help="with --gate: answers per validation task and team (1: greedy, the default gate's; "
        "more: sampled as the app samples); several: one gate each, on the same candidates",
    )
    parser.add_argument("--vllm-url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--plot", help="also draw before/after bars into this PNG")
    parser.add_argument(
        "--replot",
        metavar="JSON",
        nargs="+",
        help="only report and plot earlier --json files (several: one group of bars each, and a "
        "table of the runs of each property side by side)",
    )
    args = parser.parse_args()
    if args.replot:
        runs = [json.loads(Path(name).read_text()) for name in args.replot]
        names = [Path(name).stem for name in args.replot]
        old = [n for n, figures in zip(args.replot, runs, strict=True) if "arms" not in figures]
        if old:  # the first experiments wrote one rater per file, with no `before` or `arms`
            parser.error(f"written before the arms (one rater a file): {', '.join(old)}")
        print("\n".join([*(report(figures) for figures in runs), across(runs, names)]))
        if args.plot:
            plot(runs, args.plot)
        return
    if min(args.ratings, args.held_out, args.steps, args.samples, args.concurrency) < 1:
        parser.error("--ratings, --held-out, --samples, --concurrency and --steps must be >= 1")
    if args.property is None:
        args.property = next(iter(PROPERTIES[args.task]))
    if args.property not in PROPERTIES[args.task]:
        parser.error(f"--property for {args.task}: {', '.join(PROPERTIES[args.task])}")
    if args.candidates < 2:
        parser.error("--candidates must be >= 2 (a pair)")
    if args.group_size < 2:
        parser.error("--group-size must be >= 2 (the advantage needs a group)")
    from agents.serving.server import ServerConfig, connect_or_start
    from store.paths import venv_python

    # the model and the vLLM environment come from the real home, before it is swapped
    model_path, vllm_python = provision_model(args.model), venv_python("vllm")
    config = ServerConfig(model=str(model_path), agents=AGENTS, python=vllm_python)

    with (
        tempfile.TemporaryDirectory(prefix="coteam-bench-ratings-") as home,
        connect_or_start(args.vllm_url, config) as client,
    ):
        figures = experiment(client, model_path, Path(home), args)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if args.plot:
        plot([figures], args.plot)


if __name__ == "__main__":
    main()
