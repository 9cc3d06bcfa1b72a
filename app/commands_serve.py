"""The commands that prepare, serve and inspect the app: `coteam setup`, `serve`, `doctor`,
`check` (a module against tests in the sandbox) and `export` (the recorded data as a dataset)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TextIO


def cmd_setup(args: argparse.Namespace) -> int:
    from agents.serving.models import provision_model

    provision_model(args.model)
    return 0


def quiet_request_logs() -> None:
    """One log line per server request would hide a command's progress bar (without -v)."""
    for name in ("httpx", "httpx2"):  # openai's client logs through httpx2
        logging.getLogger(name).setLevel(logging.WARNING)


def allow_weak_sandbox(args: argparse.Namespace) -> None:
    """With --allow-weak-sandbox as an ordinary user: run generated code anyway, after a warning."""
    from agents.judge.sandbox import WEAK_SANDBOX_ENV, WEAK_SANDBOX_WARNING

    if args.allow_weak_sandbox and os.geteuid() != 0:
        os.environ[WEAK_SANDBOX_ENV] = "1"
        print(f"WARNING: {WEAK_SANDBOX_WARNING}", file=sys.stderr)


def start_with_shipped(
    db_path: str | Path, model: str | Path, then: str = "", file: TextIO | None = None,
    kind: str | None = None,
) -> None:  # fmt: skip
    """A new installation starts with the trained team shipped, if any (`register_shipped`):
    register it in the database at `db_path`, for the base `model`, and say so (with `then`
    where the version is of `kind` of work, or always without a kind)."""
    from learner.registry import register_shipped
    from store import open_db

    with open_db(db_path) as db:
        for row in register_shipped(db, model):
            after = then if kind in (None, row["kind"]) else f" (for {row['kind']})"
            print(
                f"agent {row['agent'] + 1}: the shipped trained adapter is version "
                f"{row['version']}{after}",
                file=file or sys.stdout,
            )


def cmd_serve(args: argparse.Namespace) -> int:
    from agents.serving.models import provision_model, resolve_model
    from agents.serving.policy import API_KEY_ENV
    from agents.serving.server import ServerConfig, connect_or_start
    from agents.team.sentences import embedding_model
    from app.context import AppContext, admin_password_from
    from app.web import build_app, launch_app
    from learner.config import TrainArgs
    from learner.worker import LearnerWorker, Schedule
    from store import RatingLimits, open_db, recover_interrupted

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
    start_with_shipped(args.db, model)
    config = ServerConfig(
        model=str(model), served_name=args.served_name, port=args.vllm_port, agents=args.agents
    )
    with connect_or_start(args.vllm_url, config) as client, key_file(client, args.vllm_url):
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
            rating_limits=RatingLimits(args.ratings_per_session, args.ratings_per_hour),
        )  # fmt: skip
        demo = build_app(context)
        # the writers' combiner embeds sentences: loaded now, not in the first co-write
        threading.Thread(target=embedding_model, name="sentence-model", daemon=True).start()
        print(f"CoTeam on http://{args.host}:{args.port}")
        launch_app(demo, args.host, args.port)
    return 0


@contextlib.contextmanager
def key_file(client, vllm_url: str | None):
    """The key of the server `coteam serve` started, in a file only this user can read while it
    runs, and how another command reaches that server (the key is never on a command line)."""
    if vllm_url:  # a server of your own: you know its key
        yield
        return
    from store.paths import coteam_home

    port = client.base_url.rsplit(":", 1)[-1]
    path = coteam_home() / f"vllm-{port}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(client.api_key)
    print(
        f"vLLM serves at {client.base_url}; its key is in {path} (only you can read it): "
        f"COTEAM_VLLM_API_KEY=$(cat {path}) coteam episode --vllm-url {client.base_url} ..."
    )
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def cmd_doctor(args: argparse.Namespace) -> int:
    from app.doctor import run_checks

    if not args.verbose:  # a log line per request would interleave with the checks
        quiet_request_logs()

    return run_checks(args.model, args.vllm_url)


def cmd_check(args: argparse.Namespace) -> int:
    """Run a module against tests through the runner the team and the learner use."""
    import json
    from pathlib import Path

    from agents.judge.testrun import run_tests

    texts = {"given": ""}
    for what, path in (("code", args.code), ("tests", args.tests), ("given", args.given)):
        if path is None:
            continue
        try:
            texts[what] = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read the {what} file {path}: {e}") from e
    from agents.judge.parsing import parse

    try:
        parse(texts["code"])
    except SyntaxError as e:
        raise ValueError(f"the code does not parse: line {e.lineno}: {e.msg}") from e
    allow_weak_sandbox(args)
    entry_point = args.entry_point or _entry_point(texts["tests"], texts["given"])
    report = run_tests(
        texts["code"], texts["tests"], entry_point, timeout=args.timeout, given=texts["given"]
    )
    if args.json:
        print(json.dumps({"entry_point": entry_point, **report.to_dict()}, ensure_ascii=False))
    else:
        for r in report.results:
            line = f"{'ok  ' if r.passed else 'FAIL'} {r.source.splitlines()[-1]}"
            print(line + (f" -> {r.message}" if r.message else ""))
        if report.error:
            print(f"error: {report.error}")
        print(f"{report.passed} of {report.total} tests passed ({entry_point})")
    return 0 if report.all_passed else 1


def _entry_point(tests: str, given: str) -> str:
    """The function the tests are about, from the tests alone (never from the program, which
    could define a builtin's name or the tests' own helper first): the argument of a top-level
    `check(NAME)`, else the one function the tests call that neither they nor the given code
    define and that is not a builtin."""
    import ast

    from agents.judge.parsing import parse
    from agents.judge.testrun import defined_names, free_names

    try:
        tree = parse(tests)
    except SyntaxError as e:
        raise ValueError(f"the tests do not parse: line {e.lineno}: {e.msg}") from e
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "check"
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)
        ):
            return call.args[0].id
    try:
        bind = free_names(tree) - defined_names(parse(given))
    except SyntaxError:
        bind = set()
    called = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    found = sorted(bind & called)
    if len(found) == 1:
        return found[0]
    raise ValueError(
        "the tests do not say which function they test"
        + (f" (they call {', '.join(found)})" if found else "")
        + ": name it with --entry-point"
    )


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
