"""The `coteam` command line: `setup`, `serve`, `doctor`, `check`, `episode`, `eval`, `train`,
`learner`, `adapters` and `export` (`coteam COMMAND --help` for each)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agents.judge.testrun import TEST_TIMEOUT_S  # noqa: E402
from agents.serving.models import DEFAULT_MODEL, PRESETS, ModelError  # noqa: E402
from agents.serving.policy import PolicyError  # noqa: E402
from agents.serving.server import ServerError  # noqa: E402
from agents.team.roles import CLASS_SHAPES, MAX_AGENTS, SHAPES  # noqa: E402
from app.commands_episode import cmd_episode, cmd_eval  # noqa: E402
from app.commands_serve import cmd_check, cmd_doctor, cmd_export, cmd_serve, cmd_setup  # noqa: E402
from app.commands_train import cmd_adapters, cmd_learner, cmd_train  # noqa: E402
from learner.config import EvalConfig, TrainArgs  # noqa: E402
from learner.flags import add_flags  # noqa: E402
from store import WORK_KINDS, RatingLimits, StoreError  # noqa: E402

MODEL_HELP = (
    f"a preset ({', '.join(PRESETS)}), a local Hugging Face folder, or a hub id "
    f"(default: $COTEAM_MODEL or {DEFAULT_MODEL})"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coteam",
        description="CoTeam: co-write and co-code with a team of LLM agents that learns from you.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log debug messages; errors with a traceback"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_model = os.environ.get("COTEAM_MODEL", DEFAULT_MODEL)

    _add_app_commands(sub, default_model)
    _add_episode_commands(sub, default_model)
    _add_training_commands(sub, default_model)
    return parser


def _add_app_commands(sub: argparse._SubParsersAction, default_model: str) -> None:
    """setup, serve, doctor, check and export (app/commands_serve.py)."""
    p = sub.add_parser("setup", help="assemble, check and convert the model (once)")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("serve", help="start vLLM and the web app")
    p.add_argument("--host", default="127.0.0.1", help="address of the web app (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="port of the web app (default 7860)")
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument(
        "--vllm-url",
        help="use this running vLLM server (e.g. http://gpu-node:8000) instead of starting one; "
        "several comma-separated URLs spread the agents over replicas",
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
    rating_limit_options(p)
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

    _add_check_command(sub)

    p = sub.add_parser(
        "export", help="export episodes (turns, rewards, ratings) and preference pairs as a dataset"
    )
    p.add_argument("--format", required=True, choices=["jsonl", "parquet"])
    p.add_argument("--out", required=True, help="folder to write episodes.* and preferences.* into")
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_export)


def _add_check_command(sub: argparse._SubParsersAction) -> None:
    """check (app/commands_serve.py): a module against tests, through the team's runner."""
    p = sub.add_parser(
        "check", help="run a module against tests in the sandbox (the runner the team uses)"
    )
    p.add_argument("--code", required=True, help="the module to test (a .py file)")
    p.add_argument(
        "--tests",
        required=True,
        help="its tests: asserts, `def check(candidate)`, pytest-style `def test_*()` functions "
        "or unittest.TestCase classes",
    )
    p.add_argument(
        "--entry-point",
        help="the function under test (default: the tests' `check(NAME)`, or the one function "
        "they call and do not define)",
    )
    p.add_argument(
        "--given",
        help="the problem's own code the tests may call (HumanEval's helpers); the judge runs "
        "its copy, never the program's",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=TEST_TIMEOUT_S,
        help=f"seconds per test (default {TEST_TIMEOUT_S:g})",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--allow-weak-sandbox",
        action="store_true",
        help="as an ordinary user, run generated code with the weak sandbox (prints a warning)",
    )
    p.set_defaults(func=cmd_check)


def rating_limit_options(p: argparse.ArgumentParser) -> None:
    """How many of one rater's ratings count (`store.RatingLimits`)."""
    limits = RatingLimits()
    p.add_argument(
        "--ratings-per-session",
        type=int,
        default=limits.per_session,
        help="ratings of one browser session that count; past it they are kept but teach nothing "
        f"(default {limits.per_session})",
    )
    p.add_argument(
        "--ratings-per-hour",
        type=int,
        default=limits.per_hour,
        help=f"ratings of one rater an hour that count (default {limits.per_hour})",
    )


def server_options(p: argparse.ArgumentParser, default_model: str) -> None:
    """The model and the server a command uses (its own managed server unless --vllm-url)."""
    p.add_argument("--model", default=default_model, help=MODEL_HELP)
    p.add_argument(
        "--vllm-url",
        help="use this running vLLM server instead of starting one (several: comma-separated)",
    )
    p.add_argument("--served-name", default="base", help="the server's name for the base model")


def _add_episode_commands(sub: argparse._SubParsersAction, default_model: str) -> None:
    """episode and eval (app/commands_episode.py)."""
    p = sub.add_parser("episode", help="run one episode of a team on a task and record it")
    p.add_argument(
        "--task",
        required=True,
        choices=["coding", "writing", "class"],
        help="kind of task (class: a class whose methods the agents divide)",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--problem",
        help="a curated task: a HumanEval number (coding), xsum/<id>, abstracts/<id> or "
        "longform/<id> (writing), ClassEval_<n> (class)",
    )
    source.add_argument(
        "--prompt", help="your own task: a signature with a docstring (coding) or a request"
    )
    source.add_argument("--prompt-file", help="read your own task from this file")
    p.add_argument(
        "--tests-file",
        help="tests of your own coding problem (Python asserts) or class (unittest classes)",
    )
    p.add_argument(
        "--section",
        action="append",
        help="a section of your own writing request ('Heading: brief | begins: first words', "
        "the lead optional), one writer's each; repeat for each (default: What it is, Where it "
        "came from, A surprising fact, Why it matters today, each later one begun with its "
        "lead); the writers repeat each other least when each section's brief says what it "
        "alone covers",
    )
    p.add_argument(
        "--free-roles",
        action="store_true",
        help="your own writing request without sections: the parts are an introduction, a main "
        "body, an example and a conclusion (for comparison; the sections write better)",
    )
    p.add_argument(
        "--shape",
        choices=dict.fromkeys([*SHAPES, *CLASS_SHAPES]),
        help="team shape (default parallel; for a class, the shape and size Co-code serves by "
        "the shipped card's held-out figures; single_incremental, parallel_incremental: class "
        "only)",
    )
    p.add_argument("--agents", type=int, choices=range(1, 5), help="team size (default 2)")
    p.add_argument("--turns", type=int, default=1, help="turn limit (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (for evaluation)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0.8)")
    p.add_argument("--top-p", type=float, help="nucleus sampling (default 0.95)")
    p.add_argument(
        "--max-tokens",
        type=int,
        help="per agent call (default 256; a sectioned document 1536, each writer stopping at "
        "what its sections need)",
    )
    p.add_argument("--seed", type=int, help="sampling seed (agent i uses seed + i)")
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="AGENT=NAME",
        help="serve agent AGENT (from 1) with the adapter NAME, e.g. 1=agent1-v3 (repeatable; default: "
        "each agent's serving version in the database, as in the app; a new installation first "
        "registers the shipped trained team)",
    )
    p.add_argument(
        "--base", action="store_true", help="every agent not named by --adapter runs the base model"
    )
    p.add_argument("--roles-file", help="JSON file of role prompt overrides {role: prompt}")
    p.add_argument(
        "--allow-weak-sandbox",
        action="store_true",
        help="as an ordinary user, run a coding task's tests with the weak sandbox (a warning)",
    )
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    server_options(p, default_model)
    p.set_defaults(func=cmd_episode)
    _add_eval_command(sub, default_model)


def _add_eval_command(sub: argparse._SubParsersAction, default_model: str) -> None:
    """eval (app/commands_episode.py): its run's flags are EvalConfig's fields."""
    p = sub.add_parser(
        "eval",
        help="compare team shapes (and adapter versions) on a task set; resumes when run again",
    )
    add_flags(p, EvalConfig)  # the run's config, from learner.config.EvalConfig
    p.add_argument(
        "--adapters",
        action="append",
        metavar="NAME=A0,A1",
        help="a variant: NAME and the adapter of agent 1, 2, ... (e.g. v3=agent1-v3,agent2-v3); "
        "repeatable; the base model ('base') always runs too and is what variants are tested "
        "against. Adapters the server lacks are loaded from the registry by their agentK-vN name",
    )
    p.add_argument("--out", required=True, help="folder for episodes.jsonl, results.json, report")
    p.add_argument(
        "--pool",
        nargs="+",
        metavar="DIR",
        help="run nothing: write --out's report over the finished runs of all K folds in these "
        "folders (each a `coteam eval --fold F/K --out DIR` with the same settings), every "
        "problem held out once",
    )
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    server_options(p, default_model)
    p.set_defaults(func=cmd_eval)


def _add_training_commands(sub: argparse._SubParsersAction, default_model: str) -> None:
    """train, learner and adapters (app/commands_train.py)."""

    def training_options(p: argparse.ArgumentParser) -> None:
        # the run's config, from learner.config.TrainArgs: an unset flag keeps its default
        add_flags(p, TrainArgs)
        server_options(p, default_model)
        p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")

    p = sub.add_parser("train", help="train the team with MAGRPO now (progress bar, reward curve)")
    training_options(p)
    p.add_argument("--no-gate", action="store_true", help="leave the new versions as candidates")
    p.add_argument("--force-promote", action="store_true", help="promote even if the gate fails")
    p.add_argument(
        "--resume",
        type=int,
        metavar="RUN",
        help="continue stopped run RUN from its last step, with its config; --steps gives it "
        "a new length (more steps: another epoch)",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("learner", help="train in the background on a schedule (new ratings, time)")
    training_options(p)
    p.add_argument("--every-ratings", type=int, help="start a run after N new ratings")
    p.add_argument("--every-minutes", type=float, help="start a run every T minutes")
    p.add_argument("--poll", type=float, default=30.0, help="seconds between schedule checks")
    p.set_defaults(func=cmd_learner)

    p = sub.add_parser(
        "adapters",
        help="list, add, promote or roll back the agents' adapter versions, or ship the active "
        "team",
    )
    p.add_argument("action", choices=["list", "add", "promote", "rollback", "ship"])
    p.add_argument(
        "--agent",
        type=int,
        choices=range(1, MAX_AGENTS + 1),
        help="agent number (1, 2, ...), as on the page",
    )
    p.add_argument("--version", type=int, help="version to promote")
    p.add_argument(
        "--kind",
        choices=WORK_KINDS,
        default="coding",
        help="add, rollback, ship: the kind of work whose versions (each kind has its own active "
        "one)",
    )
    p.add_argument(
        "--path",
        help="add: a PEFT adapter folder (another installation's version, a kept candidate) to "
        "register as --agent's next version, a candidate until promoted",
    )
    p.add_argument("--json", action="store_true", help="list: one JSON object per version")
    p.add_argument(
        "--vllm-url", help="also load the version into this running server (or these: URL,URL)"
    )
    p.add_argument("--db", help="database file (default: $COTEAM_HOME/coteam.db)")
    p.add_argument(
        "--out",
        help="ship: the folder to write the active team to, with its card (default: the "
        "project's assets/adapters, which a new installation serves)",
    )
    p.add_argument("--model", default=default_model, help="ship: the base model, " + MODEL_HELP)
    p.set_defaults(func=cmd_adapters)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ModelError, ServerError, StoreError, PolicyError, ValueError, OSError) as e:
        if args.verbose:  # -v: the whole traceback, for a bug report
            raise
        print(f"coteam {args.command}: error: {e}", file=sys.stderr)
        for note in getattr(e, "__notes__", ()):  # e.g. how to go on with a failed training run
            print(note, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
