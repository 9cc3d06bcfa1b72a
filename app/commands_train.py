"""The commands that train the team and manage what it learned: `coteam train` (a MAGRPO run
now), `coteam learner` (runs on a schedule) and `coteam adapters` (list, promote, roll back)."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from pathlib import Path

from app.commands_episode import episode_policy
from app.commands_serve import quiet_request_logs


def _train_args(args: argparse.Namespace):
    """The run's config: TrainArgs' defaults, changed by the flags that were given; validated."""
    from learner.config import TrainArgs
    from learner.flags import from_flags

    train_args = from_flags(args, TrainArgs)
    train_args.check()
    return train_args


def _run_to_train(args: argparse.Namespace):
    """(run id, its TrainArgs, the checkpoint to resume from or None): a new run from the flags,
    or `--resume`'s stopped run with its own config (only --steps may change)."""
    from learner.run import resume_run, start_run

    if args.resume is None:
        train_args = _train_args(args)
        return start_run(args.db, "cli", train_args), train_args, None
    from learner.config import TrainArgs
    from learner.flags import given_flags

    kept = [name for name in given_flags(args, TrainArgs) if name != "--steps"]
    if kept:
        flags = ", ".join(kept)
        raise ValueError(
            f"a resumed run keeps the config it started with; only --steps can change: "
            f"leave out {flags}"
        )
    return resume_run(args.db, args.resume, steps=args.steps)


def cmd_train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from agents.serving.models import provision_model
    from app.commands_serve import start_with_shipped
    from learner.eval_stats import SAMPLED_SHARES
    from learner.promotion import describe_gate
    from learner.registry import work_kind
    from learner.report import plot_training_curve
    from learner.run import execute_run
    from learner.train import read_checkpoint, steps_per_pass, training_tasks
    from store import adapter_name
    from store.paths import runs_dir

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not args.verbose:
        quiet_request_logs()
    run_id, train_args, resume_from = _run_to_train(args)
    curve = runs_dir(args.db) / "curves" / f"run-{run_id}.png"
    pass_steps = steps_per_pass(len(training_tasks(train_args)), train_args.magrpo.tasks_per_step)
    with contextlib.ExitStack() as stack:
        client = episode_policy(args, stack)

        def stop(signum, _frame) -> None:  # end the rollouts in flight at their next token
            client.cancel()
            sys.exit(0 if signum == signal.SIGTERM else 130)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        base = provision_model(args.model)
        if train_args.fold is None:  # the shipped team was trained on the fixed split
            kind = work_kind(train_args.task)
            start_with_shipped(args.db, base, then="; training goes on from it", kind=kind)
        # a resumed run's bar and curve go on from the steps done before it stopped
        history = read_checkpoint(resume_from)["history"] if resume_from else []
        bar = tqdm(
            total=train_args.steps, initial=len(history), unit="step", desc=f"training run {run_id}"
        )

        def on_step(metrics: dict) -> None:
            history.append(metrics)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", step_s=metrics["step_s"])
            did = [f"{said} {metrics[k]:.0%}" for k, said in SAMPLED_SHARES.items() if k in metrics]
            tqdm.write(
                f"step {metrics['step']}: mean joint reward {metrics['reward_mean']:.3f} "
                f"(best {metrics['reward_max']:.3f}, {metrics['step_s']:.0f} s)"
                + (f"; sampled answers: {', '.join(did)}" if did else "")
                + ("" if metrics["updated"] else "; no signal, no update")
            )
            plot_training_curve(history, curve, f"training run {run_id}", pass_steps)

        metrics = execute_run(
            run_id, train_args, client, base, args.db, resume_from=resume_from,
            on_step=on_step, run_gate=not args.no_gate, force_promote=args.force_promote,
        )  # fmt: skip
        bar.close()
    if "gate" in metrics:
        g = metrics["gate"]
        print(
            f"promotion gate: {describe_gate(g)} (pass-rate drop p = {g['pass_drop_p']:.3f}): "
            + ("promoted" if metrics["promoted"] else "rejected")
        )
    candidates = metrics.get("candidates") or {}
    versions = ", ".join(adapter_name(a, v) for a, v in candidates.items()) or "none"
    print(f"training run {run_id} done; candidates: {versions}; curve: {curve}")
    return 0


def cmd_adapters(args: argparse.Namespace) -> int:
    from agents.serving.server import connect
    from learner.registry import adapter_name, promote, rollback
    from store import adapter_agents, adapter_lineage, agent_label, open_db

    client = connect(args.vllm_url) if args.vllm_url else None
    with open_db(args.db) as db:
        if args.action == "list":
            rows = [row for agent in adapter_agents(db) for row in adapter_lineage(db, agent)]
            if args.json:
                print(json.dumps([adapter_record(row) for row in rows], indent=2))
            elif not rows:
                print(
                    "no adapters yet: every agent uses the base model (train with `coteam train`)"
                )
            else:
                for row in rows:
                    parent = f"v{row['parent_version']}" if row.get("parent_version") else "base"
                    reward = row["metrics"].get("train_reward")
                    extra = f" train reward {reward:.3f}" if reward is not None else ""
                    print(
                        f"{adapter_name(row['agent'], row['version']):12s} {row['kind']:7s} "
                        f"{row['state']:9s} parent {parent:5s} {row['created_at']}{extra}  "
                        f"{row['path']}"
                    )
        elif args.action == "add":
            from learner.registry import add_version

            if args.agent is None or args.path is None:
                raise ValueError("add needs --agent and --path")
            row = add_version(db, args.agent - 1, args.path, args.kind)
            name = adapter_name(args.agent - 1, row["version"])
            print(f"{name} ({args.kind}) is a candidate: coteam adapters promote --agent "
                  f"{args.agent} --version {row['version']} serves it")  # fmt: skip
        elif args.action == "promote":
            if args.agent is None or args.version is None:
                raise ValueError("promote needs --agent and --version")
            row = promote(db, client, args.agent - 1, args.version)
            print(f"{adapter_name(args.agent - 1, args.version)} is active for {row['kind']}")
        elif args.action == "ship":
            from agents.serving.models import resolve_model
            from learner.registry import SHIPPED, ship

            out = Path(args.out) if args.out else SHIPPED
            card = ship(db, resolve_model(args.model), out, args.kind)
            for agent, version in card["versions"].items():
                name = adapter_name(int(agent), version["version"])
                print(f"{name} -> {out}/{agent_label(int(agent))}")
            print(f"card: {out}/card.json (a new installation serves this team as version 1)")
        else:
            if args.agent is None:
                raise ValueError("rollback needs --agent")
            row = rollback(db, client, args.agent - 1, args.kind)
            now = adapter_name(args.agent - 1, row["version"]) if row else "the base model"
            print(f"agent {args.agent} ({args.kind}) rolled back: now serving {now}")
    if client is None and args.action in ("promote", "rollback"):
        print("(no --vllm-url: the running app loads the active version at its next episode)")
    return 0


def adapter_record(row: dict) -> dict:
    """One adapter version as `coteam adapters list --json` prints it: `name` is the name the
    server knows it by (`coteam episode --adapter AGENT=NAME`); `source` says where it came from
    (`learner.registry.adapter_source`)."""
    from learner.registry import adapter_name, adapter_source

    return {
        "agent": row["agent"] + 1,
        "version": row["version"],
        "kind": row["kind"],
        "state": row["state"],
        "name": adapter_name(row["agent"], row["version"]),
        "source": adapter_source(row),
        "training_run": row.get("training_run_id"),
        "parent_version": row.get("parent_version"),
        "created_at": row["created_at"],
        "path": row["path"],
        "metrics": row["metrics"],
    }


def cmd_learner(args: argparse.Namespace) -> int:
    import time

    from agents.serving.models import provision_model
    from learner.worker import LearnerWorker, Schedule

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not (args.every_ratings or args.every_minutes):
        raise ValueError("give --every-ratings N and/or --every-minutes T")
    train_args = _train_args(args)
    if train_args.start_from:
        raise ValueError(
            "--from starts one run (coteam train); each scheduled run goes on from the serving team"
        )
    with contextlib.ExitStack() as stack:
        client = episode_policy(args, stack)
        worker = LearnerWorker(
            client,
            provision_model(args.model),
            args.db,
            train_args,
            Schedule(args.every_ratings, args.every_minutes),
        )
        worker.start_schedule(poll_s=args.poll)
        print(f"learner waiting (every {args.every_ratings} ratings / {args.every_minutes} min)")
        while True:
            time.sleep(60)
