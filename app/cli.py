"""The `coteam` command line: `coteam setup`, `coteam serve`, `coteam doctor`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agents.models import DEFAULT_MODEL, PRESETS, ModelError  # noqa: E402
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


def cmd_serve(args: argparse.Namespace) -> int:
    from agents.models import provision_model
    from agents.policy import PolicyClient
    from agents.server import ServerConfig, VLLMServer
    from app.web import build_app
    from store import mark_interrupted_episodes, mark_interrupted_runs, open_db

    with open_db() as db:  # a crash last time leaves rows 'running': mark them so, once
        mark_interrupted_episodes(db)
        mark_interrupted_runs(db)
    server = None
    # SIGTERM (from a service manager or a test) must still run the `finally` that stops vLLM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if args.vllm_url:
            client = PolicyClient(args.vllm_url, base_model=args.served_name)
            if not client.healthy():
                raise ServerError(f"no healthy vLLM server at {args.vllm_url} (GET /health failed)")
        else:
            model = provision_model(args.model)
            config = ServerConfig(
                model=str(model),
                served_name=args.served_name,
                port=args.vllm_port,
                agents=args.agents,
            )
            server = VLLMServer(config)
            print(f"starting vLLM on {server.url} (log: {server.log_path}); about a minute on CPU")
            server.start(wait=False)
            server.wait_healthy(progress=print)
            client = PolicyClient(server.url, base_model=args.served_name)
            server.on_restart.append(client.restore_adapters)
        demo = build_app(client)
        print(f"CoTeam on http://{args.host}:{args.port}")
        demo.queue(default_concurrency_limit=8).launch(
            server_name=args.host, server_port=args.port, share=False, show_error=True
        )
    finally:
        if server is not None:
            server.stop()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from app.doctor import run_checks

    return run_checks(args.model, args.vllm_url)


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
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("doctor", help="check the environment; exits non-zero on any problem")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument("--vllm-url", help="also check this vLLM server's health")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "export", help="export episodes (turns, rewards, ratings) and preference pairs as a dataset"
    )
    p.add_argument("--format", required=True, choices=["jsonl", "parquet"])
    p.add_argument("--out", required=True, help="folder to write episodes.* and preferences.* into")
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ModelError, ServerError, StoreError) as e:
        print(f"coteam {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
