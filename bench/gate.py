"""Gate benchmark: the promotion gate's comparison (`learner.promotion.paired_scores`: both teams
greedy on the gate's 32 validation tasks, at once, scored with the default reward weights) of a
team of adapter folders against the base team, on a managed server, printed with the time it took.

By default the team is the shipped one (`assets/adapters/agent1`, `agent2`: training run 16's
promoted candidate), so this re-checks the gate figures in its card. With `--fill`, the server's
every LoRA slot is first used by other adapters (copies of the team's), as a training run's step
adapters use them before its gate; with `--without-plugin` the comparison runs again on a server
without CoTeam's vLLM plugin (agents/serving/vllm_plugin: vLLM's own CPU LoRA ops, which give a base
request batched with an adapter request the last slot's weights), in the same run.

Usage: python bench/gate.py [--adapters DIR DIR] [--tasks 32] [--fill] [--without-plugin]
                            [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.policy import Request  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402
from learner.config import GateSettings  # noqa: E402
from learner.promotion import paired_scores, validation_tasks  # noqa: E402
from learner.reward_config import RewardWeights, SpeedBudget  # noqa: E402

AGENTS = 4  # the server `coteam train` starts: agents x 2 versions = 8 LoRA slots


def compare(model_path, folders: list[str], args, coteam_plugin: bool) -> dict:
    """The gate's paired comparison of the team in `folders` against the base team, on a server
    with or without CoTeam's vLLM plugin."""
    config = ServerConfig(model=str(model_path), agents=AGENTS, coteam_plugin=coteam_plugin)
    with (
        connect_or_start(None, config) as client,
        tempfile.TemporaryDirectory() as scratch,
    ):
        team = [f"bench-gate{k}" for k in range(len(folders))]
        for name, folder in zip(team, folders, strict=True):
            client.load_adapter(name, folder)
        if args.fill:  # every slot used once, then let go: as a run's step adapters leave them
            others = [f"bench-fill{i}" for i in range(2 * AGENTS)]
            for i, name in enumerate(others):
                client.load_adapter(name, folders[i % len(folders)])
                client.generate([Request([{"role": "user", "content": "Hi."}], name, max_tokens=1)])
            for name in others:
                client.unload_adapter(name)
        start = time.perf_counter()
        result = paired_scores(
            client,
            (team, [None] * len(team)),
            validation_tasks("coding", args.tasks),
            Path(scratch) / "gate.db",
            GateSettings(tasks=args.tasks),
            RewardWeights(),
            SpeedBudget(),
            on_progress=lambda done, total: print(f"  {done}/{total} episodes", end="\r"),
        )
        figures = result.to_json()
        figures["seconds"] = round(time.perf_counter() - start, 1)
        figures["candidate_passed"], figures["active_passed"] = (
            result.candidate_passed,
            result.active_passed,
        )
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shipped = [str(ROOT / "assets" / "adapters" / f"agent{k}") for k in (1, 2)]
    parser.add_argument("--adapters", nargs="+", default=shipped, help="one folder per agent")
    parser.add_argument("--tasks", type=int, default=32, help="validation tasks (the gate's 32)")
    parser.add_argument("--fill", action="store_true", help="use every LoRA slot first")
    parser.add_argument(
        "--without-plugin", action="store_true", help="also on a server without CoTeam's plugin"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    model_path = provision_model(DEFAULT_MODEL)
    runs = {"with CoTeam's plugin": True}
    if args.without_plugin:
        runs["vLLM's own LoRA ops"] = False
    figures = {}
    for label, plugin in runs.items():
        print(f"{label} ...", flush=True)
        figures[label] = compare(model_path, args.adapters, args, coteam_plugin=plugin)
    print(f"\nteam {args.adapters} against the base team, {args.tasks} validation tasks, greedy"
          f"{', every slot used first' if args.fill else ''}")  # fmt: skip
    print(f"{'':24s}{'pass: team':>11s}{'base':>7s}{'R: team':>9s}{'base':>7s}{'p':>8s}"
          f"{'passed':>8s}{'s':>7s}")  # fmt: skip
    for label, f in figures.items():
        print(
            f"{label:24s}{f['candidate_pass_rate']:11.3f}{f['active_pass_rate']:7.3f}"
            f"{f['candidate_score']:9.3f}{f['active_score']:7.3f}{f['reward_gain_p']:8.4f}"
            f"{str(f['passed']):>8s}{f['seconds']:7.0f}"
        )
    if len(figures) == 2:
        ours, theirs = figures.values()
        pairs = zip(ours["active_passed"], theirs["active_passed"], strict=True)
        differ = [i for i, (a, b) in enumerate(pairs) if a != b]
        print(f"the base team's pass differs between the servers on tasks {differ}; "
              f"the gate took {theirs['seconds'] / ours['seconds']:.2f}x as long without the plugin")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
