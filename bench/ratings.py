"""Do ratings change the team? A simulated rater with a checkable taste rates A/B pairs through
the store API the page uses, the learner retrains (its preference model learns from those
ratings and scores every rollout), and held-out prompts are answered before and after.

    rater prefers   prefers the program that has the property; a tie when both or neither do
    rater none      the control: a coin flip, no preference

    property commented  the program has a comment (`# ...`): about half of the untrained
                        team's programs do, so pairs disagree often enough to teach
    property typed      every function has type hints and a docstring: the untrained team's
                        programs all do (the contract's stubs have both), so nearly every
                        pair is a tie (50 ratings: 49 ties) and nothing is learnt

Measured on the first --held-out HumanEval held-out problems, greedy: how often the team's
program has the property, and pass@1 (every test assert passes, run in the sandbox), before
(the serving adapters, the base model in a fresh home) and after (the run's candidates), with
an exact McNemar test (binomial on the prompts that changed) for each.

Everything runs in a temporary COTEAM_HOME (its own database and adapter registry).

Usage: python bench/ratings.py [--rater prefers|none] [--property commented|typed] [--ratings 4]
                               [--held-out 4] [--steps 1] [--group-size 2] [--max-tokens 192]
                               [--vllm-url URL] [--json PATH]
       python bench/ratings.py --compare RUN_JSON CONTROL_JSON
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import random
import sys
import tempfile
import time
import tokenize
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scipy.stats import binomtest  # noqa: E402

import store  # noqa: E402
from agents.combine import extract_code  # noqa: E402
from agents.feedback import sandbox_check  # noqa: E402
from agents.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.tasks import humaneval_tasks, split_tasks  # noqa: E402
from agents.team import GREEDY, Sampling, run_episode, run_group  # noqa: E402
from learner.magrpo import MAGRPOConfig  # noqa: E402
from learner.registry import adapter_name, load_version  # noqa: E402
from learner.reward_config import RewardWeights  # noqa: E402
from learner.rewards import score_episode  # noqa: E402
from learner.train import TrainArgs, train  # noqa: E402

AGENTS = 2


def typed(program: str) -> bool:
    """Every function defined has annotated arguments, a return annotation and a docstring."""
    try:
        tree = ast.parse(extract_code(program))
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


PROPERTIES = {"commented": commented, "typed": typed}


def vote(rater: str, has, left: str, right: str, rng: random.Random) -> str:
    """The simulated rater's A/B choice: left, right or tie."""
    if rater == "none":
        return rng.choice(["left", "right"])
    a, b = has(left), has(right)
    return "tie" if a == b else ("left" if a else "right")


def measure(client, adapters, tasks, db_path, max_tokens: int, has) -> list[dict]:
    """Greedy answers to the held-out tasks: the property and pass (all asserts) for each."""
    measured = []
    for task in tasks:
        result = run_episode(
            task, client, shape="parallel", agents=AGENTS, adapters=adapters,
            sampling=replace(GREEDY, max_tokens=max_tokens), checker=sandbox_check, db=db_path,
        )  # fmt: skip
        report = score_episode(result, db=db_path).report  # the sandbox's, never the program's
        passed = report is not None and report.total > 0 and report.passed == report.total
        measured.append({"property": has(result.output), "pass": passed})
    return measured


def mcnemar(before: list[bool], after: list[bool]) -> float:
    """Exact two-sided McNemar p-value: of the prompts that changed, how lopsided the change."""
    up = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    down = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    return 1.0 if up + down == 0 else binomtest(up, up + down, 0.5).pvalue


def experiment(client, model_path, db_path: Path, args) -> dict:
    rng, has = random.Random(args.seed), PROPERTIES[args.property]
    held_out = split_tasks("coding", "held_out")[: args.held_out]
    t0 = time.perf_counter()
    before = measure(client, [None] * AGENTS, held_out, db_path, args.max_tokens, has)
    print(f"before: measured {len(held_out)} held-out prompts", flush=True)

    sampling = Sampling(temperature=0.8, top_p=0.95, max_tokens=args.max_tokens)
    rated_tasks = humaneval_tasks("train")[: args.ratings]
    votes = {"left": 0, "right": 0, "tie": 0}
    for task in rated_tasks:  # an A/B pair per task, as the page's A/B mode makes them
        left, right = run_group(
            task, client, 2, db=db_path, sampling=sampling, shape="parallel", agents=AGENTS,
            checker=sandbox_check,
        )  # fmt: skip
        choice = vote(args.rater, has, left.output, right.output, rng)
        votes[choice] += 1
        with store.open_db(db_path) as db:
            store.add_rating(
                db, left.episode_id, "pairwise", choice=choice, other_episode_id=right.episode_id
            )
    print(f"rated {len(rated_tasks)} pairs: {votes}", flush=True)

    train_args = TrainArgs(
        task="coding",
        steps=args.steps,
        agents=AGENTS,
        task_limit=args.ratings,
        magrpo=MAGRPOConfig(
            group_size=args.group_size, tasks_per_step=2, max_new_tokens=args.max_tokens
        ),
        weights=RewardWeights(human=args.human_weight),
    )
    outcome = train(train_args, client, model_path, db_path)
    with store.open_db(db_path) as db:
        names = []
        for agent, version in sorted(outcome["candidates"].items()):
            names.append(adapter_name(agent, version))
            load_version(client, names[-1], store.get_adapter(db, agent, version)["path"])
    after = measure(client, names, held_out, db_path, args.max_tokens, has)
    rate = {
        key: [sum(m[key] for m in ms) / len(ms) for ms in (before, after)]
        for key in ("property", "pass")
    }
    p = {
        key: mcnemar([m[key] for m in before], [m[key] for m in after])
        for key in ("property", "pass")
    }
    return {
        "rater": args.rater,
        "property": args.property,
        "ratings": len(rated_tasks),
        "votes": votes,
        "held_out": len(held_out),
        "steps": args.steps,
        "ratings_learnt": outcome["history"][-1].get("ratings_learnt"),
        "property_before": rate["property"][0],
        "property_after": rate["property"][1],
        "property_p": p["property"],
        "pass_before": rate["pass"][0],
        "pass_after": rate["pass"][1],
        "pass_p": p["pass"],
        "seconds": round(time.perf_counter() - t0, 1),
        "prompts": [task.source_id for task in held_out],
        "before": before,
        "after": after,
    }


def compare(run: dict, control: dict) -> str:
    """A run's held-out answers after its retrain against the control run's after its own, paired
    per prompt (the same prompts, the same start): what the rater's preference did beyond what
    retraining did anyway."""
    if run.get("prompts") != control.get("prompts"):
        raise SystemExit("the two runs were not measured on the same held-out prompts")
    lines = [f"{run['rater']} ({run['property']}) against the control ({control['rater']}), "
             f"after both retrains, {len(run['prompts'])} held-out prompts:"]  # fmt: skip
    for key in ("property", "pass"):
        mine = [m[key] for m in run["after"]]
        theirs = [m[key] for m in control["after"]]
        lines.append(
            f"  {key:8s}  {100 * sum(mine) / len(mine):5.1f}% vs {100 * sum(theirs) / len(theirs):5.1f}%"
            f"  (McNemar p = {mcnemar(theirs, mine):.3f})"
        )
    return "\n".join(lines)


def plot(runs: list[dict], path: str) -> None:
    """Bars of the property's rate and of pass@1 on the held-out prompts, before and after the
    retrain, a pair of bars per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), dpi=100, sharey=True)
    labels = [f"{r['rater']} ({r.get('property', 'typed')})\nN = {r['ratings']}" for r in runs]
    x = list(range(len(runs)))
    metrics = (("property", "has the property"), ("pass", "pass@1"))
    for ax, (key, title) in zip(axes, metrics, strict=True):
        for shift, when in ((-0.2, "before"), (0.2, "after")):
            heights = [100 * r[f"{key}_{when}"] for r in runs]
            ax.bar([i + shift for i in x], heights, 0.4, label=f"{when} the retrain")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_title(f"{title}, held out (%)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    parser.add_argument("--rater", choices=["prefers", "none"], default="prefers")
    parser.add_argument("--property", choices=sorted(PROPERTIES), default="commented")
    parser.add_argument("--ratings", type=int, default=4, help="N: A/B pairs rated")
    parser.add_argument("--held-out", type=int, default=4, help="held-out prompts measured")
    parser.add_argument("--steps", type=int, default=1, help="training steps of the retrain")
    parser.add_argument("--group-size", type=int, default=2, help="G joint samples per task")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--human-weight", type=float, default=0.5, help="w_h of the blend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm-url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--plot", help="also draw before/after bars into this PNG")
    parser.add_argument(
        "--replot", nargs="+", metavar="JSON", help="only draw --plot from earlier runs' --json"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_JSON", "CONTROL_JSON"),
        help="only compare two earlier runs' --json, paired per held-out prompt",
    )
    args = parser.parse_args()
    if args.compare:
        run, control = (json.loads(Path(f).read_text()) for f in args.compare)
        print(compare(run, control))
        return
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot PATH")
        plot([json.loads(Path(f).read_text()) for f in args.replot], args.plot)
        return
    if args.ratings < 1 or args.held_out < 1 or args.steps < 1 or args.group_size < 2:
        parser.error("--ratings, --held-out and --steps must be >= 1, --group-size >= 2")
    from agents.server import ServerConfig, connect_or_start
    from store.paths import venv_python

    # the model and the vLLM environment come from the real home, before it is swapped
    model_path, vllm_python = provision_model(args.model), venv_python("vllm")
    config = ServerConfig(model=str(model_path), agents=AGENTS, python=vllm_python)

    with tempfile.TemporaryDirectory(prefix="coteam-bench-ratings-") as home:
        os.environ["COTEAM_HOME"] = home  # its own database and adapter registry
        with connect_or_start(args.vllm_url, config) as client:
            figures = experiment(client, model_path, Path(home) / "coteam.db", args)
    print(
        f"rater {figures['rater']} ({figures['property']}), N={figures['ratings']} ratings, "
        f"{figures['steps']} step(s), {figures['held_out']} held-out prompts, "
        f"{figures['seconds']} s\n"
        f"  property  {100 * figures['property_before']:5.1f}% -> "
        f"{100 * figures['property_after']:5.1f}%  (McNemar p = {figures['property_p']:.3f})\n"
        f"  pass@1    {100 * figures['pass_before']:5.1f}% -> "
        f"{100 * figures['pass_after']:5.1f}%  (McNemar p = {figures['pass_p']:.3f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if args.plot:
        plot([figures], args.plot)


if __name__ == "__main__":
    main()
