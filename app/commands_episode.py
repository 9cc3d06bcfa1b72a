"""The commands that run teams: `coteam episode` (one episode, streamed to the terminal by
`EpisodePrinter`) and `coteam eval` (team shapes and adapter versions compared on a task set)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import signal
import sys

from app.commands_serve import quiet_request_logs


class EpisodePrinter:
    """Prints a running episode: one agent's tokens live at a time, the others' held back and
    printed whole when their turn on screen comes, then each turn's verdict and the result."""

    def __init__(self, out=sys.stdout):
        self.out = out
        self.queue: list[tuple] = []  # agent calls in the order they started
        self.text: dict[tuple, str] = {}
        self.finished: set[tuple] = set()
        self.roles: list[str] = []

    def __call__(self, event: dict) -> None:
        kind = event["event"]
        key = (event.get("turn"), event.get("round"), event.get("agent"))
        if kind == "episode_start":
            self.roles = event["roles"]
            self.write(
                f"episode {event['episode_id']}: {event['shape']} team ({', '.join(self.roles)})\n"
            )
        elif kind == "agent_start":
            self.queue.append(key)
            self.text[key] = ""
            if len(self.queue) == 1:
                self.header(key)
        elif kind == "token":
            self.text[key] += event["text"]
            if self.queue and self.queue[0] == key:
                self.write(event["text"])
        elif kind == "agent_done":
            self.finished.add(key)
            while self.queue and self.queue[0] in self.finished:
                self.queue.pop(0)
                self.write("\n")
                if self.queue:
                    self.header(self.queue[0])
                    self.write(self.text[self.queue[0]])
        elif kind == "turn_end":
            verdict = "passed" if event["success"] else "not passed"  # the page's words
            self.write(f"\n== turn {event['turn'] + 1}: {verdict}\n")
            for agent, note in enumerate(event["feedback"]):
                if note and not event["done"]:
                    self.write(f"   feedback to agent {agent + 1}: {note}\n")

    def header(self, key: tuple) -> None:
        turn, round_, agent = key
        revision = " revision" if round_ else ""
        self.write(f"\n--- agent {agent + 1} ({self.roles[agent]}), turn {turn + 1}{revision}\n")

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def episode_policy(args: argparse.Namespace, stack: contextlib.ExitStack):
    """A client of the server at --vllm-url, or of a managed server stopped when `stack` closes."""
    from agents.serving.server import ServerConfig, connect_or_start

    config = ServerConfig(model=args.model, served_name=args.served_name, agents=4)
    progress = functools.partial(print, file=sys.stderr)  # stdout carries the episode
    return stack.enter_context(connect_or_start(args.vllm_url, config, progress=progress))


def serving_team(
    args: argparse.Namespace, client, named: dict[int, str], size: int | None = None
) -> dict[int, str]:
    """Each agent's adapter: the one `--adapter` names, else (unless `--base`) the version the
    database serves for this kind of work, as the app's default choice; a new installation first
    registers the shipped team, as `coteam serve` does. Loads into the server what it lacks.
    `size`: the team's agents (default: the shape's). An adapter `--adapter` names that the
    server lacks is loaded from the registry, or refused before the episode starts."""
    from agents.team.roles import team_size
    from learner.evaluate import load_variant_adapters

    size = size or team_size(args.shape, args.agents)
    if outside := [agent + 1 for agent in named if agent >= size]:
        raise ValueError(
            f"--adapter names agent {', '.join(map(str, outside))}, but the team has {size} "
            f"(agents 1 to {size})"
        )
    load_variant_adapters(client, {"--adapter": tuple(named.values())}, args.db)
    if args.base:
        return named
    from agents.serving.models import resolve_model
    from app.commands_serve import start_with_shipped
    from learner.registry import ensure_loaded, work_kind
    from store import open_db

    start_with_shipped(args.db, resolve_model(args.model), file=sys.stderr)  # stdout: the episode
    with open_db(args.db) as db:
        serving = ensure_loaded(db, client, size, work_kind(args.task))
    return {**{agent: name for agent, name in enumerate(serving) if name}, **named}


def cmd_episode(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from agents.kinds import work_of
    from agents.serving.models import ModelError
    from agents.serving.policy import PolicyError
    from agents.serving.server import ServerError
    from agents.tasks import find_task
    from agents.team.graph import TeamSettings
    from agents.team.roles import SHAPES, load_prompts
    from app.live import verdict_words
    from learner.episode import EpisodeSetup, ScoringError, play

    prepare_episode(args)
    if args.task == "class":
        return class_episode(args)
    args.shape = args.shape or "parallel"
    try:
        prompt = Path(args.prompt_file).read_text() if args.prompt_file else args.prompt
        tests = Path(args.tests_file).read_text() if args.tests_file else None
        sections = "\n".join(args.section) if args.section is not None else None
        task = find_task(
            args.task,
            problem=args.problem,
            prompt=prompt,
            tests=tests,
            sections=sections,
            free=args.free_roles,
        )
        adapters = {}
        for item in args.adapter:  # agents numbered from 1, as on the page and in the names
            agent, _, name = item.partition("=")
            if not agent.isdigit() or int(agent) < 1 or not name:
                raise ValueError(f"--adapter {item!r}: expected AGENT=NAME, e.g. 1=agent1-v3")
            adapters[int(agent) - 1] = name
        if args.shape not in SHAPES:
            raise ValueError(f"--shape {args.shape} is a class team's shape: use --task class")
        sampling = asked_sampling(args, work_of(task).max_tokens)
        prompts = load_prompts(args.roles_file) if args.roles_file else None
        with contextlib.ExitStack() as stack:
            policy = episode_policy(args, stack)
            adapters = serving_team(args, policy, adapters)
            team = TeamSettings(args.shape, args.agents, args.turns, adapters, sampling, prompts)
            setup = EpisodeSetup(task, team)
            # a coding task's tests run in the sandbox, as on the page; the reward is recorded
            on_event = None if args.json else EpisodePrinter()
            [played] = play(setup, policy, db=args.db, on_event=on_event)
            result, reward, note = played.result, played.scored.reward, None
    except ScoringError as e:  # the episode itself ran and is saved
        [result], reward, note = e.results, None, f"reward not computed ({e})"
    except (OSError, ValueError, PolicyError, ModelError, ServerError) as e:
        print(f"coteam episode: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        summary = result.summary() | {"reward": reward}
        if note:
            summary["note"] = note
        print(json.dumps(summary, indent=2))
    else:
        tokens = sum(s["completion_tokens"] for s in result.steps)
        print(f"\n=== result (episode {result.episode_id})\n{result.output}")
        report = result.test_report
        if report is not None:
            print("=== tests")
            for r in report.results:
                line = f"{'ok  ' if r.passed else 'FAIL'} {r.source.splitlines()[-1]}"
                print(line + (f" -> {r.message}" if r.message else ""))
        tested = f"tests {report.passed} of {report.total} passed, " if report else ""
        scored = f", reward {reward:.3f}" if reward is not None else f" ({note})"
        print(
            f"=== {verdict_words('ok', result.success)} after {result.turns} turn(s), "
            f"{tested}{result.wall_time_s:.1f} s, {tokens} tokens written{scored}"
        )
    return 0


def prepare_episode(args: argparse.Namespace) -> None:
    """What every episode command sets first: SIGTERM stops the managed server too, quiet request
    logs, the sandbox's mode."""
    from app.commands_serve import allow_weak_sandbox

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # still stop the managed server
    if not args.verbose:  # a log line per HTTP request would drown the streamed text
        logging.getLogger().setLevel(logging.WARNING)
    allow_weak_sandbox(args)


def asked_sampling(args: argparse.Namespace, max_tokens: int):
    """How `coteam episode` samples: --greedy or the app's way (T = 0.8, top-p 0.95), either
    with --temperature and --top-p where given; --max-tokens, else the kind of work's
    `max_tokens`; --seed."""
    from agents.team.graph import GREEDY, Sampling

    base = GREEDY if args.greedy else Sampling()
    return Sampling(
        temperature=base.temperature if args.temperature is None else args.temperature,
        top_p=base.top_p if args.top_p is None else args.top_p,
        max_tokens=args.max_tokens or max_tokens,
        seed=args.seed,
    )


def class_episode(args: argparse.Namespace) -> int:
    """`coteam episode --task class`: a class team's episode (agents/kinds/classes.py), streamed
    or as JSON, recorded in the database with its reward (learner/class_train.py); the class
    versions the database serves unless --adapter names others or --base."""
    import json
    from pathlib import Path

    from agents.kinds.class_team import (
        CLASS_MAX_TOKENS,
        class_reward,
        run_class_episode,
        team_size,
    )
    from agents.kinds.classes import class_problem, user_class_problem
    from agents.serving.policy import PolicyError
    from agents.team.graph import TeamSettings
    from app.cowork_choices import served_shape
    from app.live import verdict_words
    from learner.class_train import CLASS_WEIGHTS, record_class_episode

    if args.shape is None:  # what Co-code serves for classes, at the size its figures are for
        args.shape, served_size, _ = served_shape("class")
        args.agents = args.agents or served_size
    try:
        if args.problem:
            problem = class_problem(args.problem)
        else:
            if not args.tests_file:
                raise ValueError("your own class needs --tests-file (unittest classes)")
            skeleton = Path(args.prompt_file).read_text() if args.prompt_file else args.prompt
            problem = user_class_problem(skeleton, Path(args.tests_file).read_text())
        named = {}
        for item in args.adapter:
            agent, _, name = item.partition("=")
            if not agent.isdigit() or not 1 <= int(agent) <= 4 or not name:
                raise ValueError(f"--adapter {item!r}: expected AGENT=NAME, e.g. 1=agent1-v3")
            named[int(agent) - 1] = name
        size = team_size(problem, args.shape, args.agents or 2)

        def show(event: dict) -> None:
            if event["event"] == "agent_start":
                print(f"\n── agent {event['agent'] + 1}: {event['method']}", flush=True)
                print(event["opening"], end="", flush=True)  # the skeleton's head of it
            elif event["event"] == "token":
                print(event["text"], end="", flush=True)

        with contextlib.ExitStack() as stack:
            policy = episode_policy(args, stack)
            team = serving_team(args, policy, named, size)
            adapters = [team.get(agent) for agent in range(size)]
            sampling = asked_sampling(args, CLASS_MAX_TOKENS)
            played_by = TeamSettings(args.shape, size, args.turns, adapters, sampling)
            on_event = None if args.json or args.shape == "parallel" else show
            episode = run_class_episode(problem, policy, played_by, on_event=on_event)
        scored = class_reward(episode, CLASS_WEIGHTS)
        episode_id = record_class_episode(args.db, episode, scored, adapters)
    except (OSError, ValueError, PolicyError) as e:
        print(f"coteam episode: error: {e}", file=sys.stderr)
        return 1
    summary = episode.summary() | {
        "episode_id": episode_id, "adapters": adapters, "reward": round(scored["reward"], 4),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
        return 0
    if args.shape == "parallel":  # agents wrote at once: each one's methods, in turn
        for method in summary["methods"]:
            print(f"\n── agent {method['agent']}: {method['method']}\n{method['text']}")
    print("\n── the class, merged and judged")
    for name, (passed, total) in summary["test_classes"].items():
        print(f"{'ok  ' if passed == total else 'FAIL'} {name}: {passed}/{total}")
    print(
        f"{verdict_words('ok', summary['class_passed'])}: "
        f"{summary['test_classes_passed']} of {len(summary['test_classes'])} test classes "
        f"passed; critical path {summary['critical_path_tokens']} tokens, {summary['wall_s']} s; "
        f"reward {scored['reward']:.3f} (episode {episode_id}, agents' versions: "
        f"{', '.join(a or 'base' for a in adapters)})"
    )
    return 0


def class_eval(args: argparse.Namespace, command: str) -> int:
    """`coteam eval --task class`: class teams against one agent (learner/class_eval.py)."""
    from agents.kinds.class_team import CLASS_MAX_TOKENS
    from agents.serving.policy import PolicyError
    from agents.team.roles import SHAPES
    from learner.class_eval import run_class_eval, trained_on_held_out
    from learner.config import EvalConfig
    from learner.evaluate import check_held_out, load_variant_adapters, parse_variant

    shapes = args.shapes or SHAPES
    shapes = ("single", "single_incremental", "parallel") if shapes == SHAPES else shapes
    temperature = EvalConfig.temperature if args.temperature is None else args.temperature
    try:
        variants = dict(parse_variant(t) for t in args.adapters or [])
        check_held_out(
            variants, args.split or "heldout", args.fold, args.db,
            overlaps=lambda trained: trained_on_held_out(trained, args.fold),
        )  # fmt: skip
        with contextlib.ExitStack() as stack:
            policy = episode_policy(args, stack)
            load_variant_adapters(policy, variants, args.db)
            results = run_class_eval(
                policy, args.out, shapes=shapes, agents=args.agents or 2,
                split=args.split or "heldout", fold=args.fold, limit=args.limit,
                samples=args.samples or 1, max_tokens=args.max_tokens or CLASS_MAX_TOKENS,
                turns=args.turns or 1, progress=not args.no_progress, command=command,
                variants=variants, temperature=temperature,
            )  # fmt: skip
    except (OSError, ValueError, PolicyError) as e:
        print(f"coteam eval: error: {e}", file=sys.stderr)
        return 1
    from learner.class_eval import report

    print(report(results))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import shlex

    from agents.serving.policy import PolicyError
    from learner.config import BASE_VARIANT, EvalConfig, EvalError
    from learner.evaluate import parse_variant, pending, run_eval
    from learner.flags import from_flags

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # still stop the managed server
    if not args.verbose:
        quiet_request_logs()
    command = "coteam " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["eval"] else ""
    if args.task == "class":
        return class_eval(args, command)
    try:
        if args.pool:
            from learner.folds import pool_folds

            summary = pool_folds(args.pool, args.out, command=command)
        else:
            # the base model is always the first variant: what trained adapters are compared with
            variants = dict(parse_variant(t) for t in [BASE_VARIANT, *(args.adapters or [])])
            config = from_flags(args, EvalConfig, variants=variants)
            with contextlib.ExitStack() as stack:
                # a finished run only rewrites its report: no server needed
                policy = episode_policy(args, stack) if pending(config, args.out) else None
                summary = run_eval(
                    config, policy, args.out, db=args.db, progress=not args.no_progress,
                    command=command,
                )  # fmt: skip
    except (OSError, EvalError, PolicyError) as e:
        print(f"coteam eval: error: {e}", file=sys.stderr)
        return 1
    from learner.report import results_table

    print(results_table(summary))
    missing = f" ({summary['missing']} episodes missing: run again to retry)" * bool(
        summary["missing"]
    )
    print(f"\n{summary['episodes']} episodes; report in {args.out}/report.md{missing}")
    return 0
