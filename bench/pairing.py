"""Aligned against cross pairing: how much credit each agent's samples get, on the same samples.

For each of N training tasks the untrained team samples a MAGRPO group, G joint samples at the
training run's temperature, through a managed vLLM server, as `coteam train`'s rollout does
(`learner.train.rollout_group`: the sandbox runs each program's tests). Then, on those same
samples, the advantages the two joint modes of `learner.magrpo` would train on:

    aligned  sample g of every agent is joint action g: G joint rewards, every agent the same
             advantages
    cross    every agent's samples with every teammate's (G^agents joint actions, each combined
             and judged as an episode, `agents.team.crossing.recombine`): agent i's sample k returns the
             mean joint reward of the joint actions it is part of (`learner.train.cross_group`)

and prints, per agent: the groups with any signal (a non-zero advantage: what an update can learn
from), the mean |advantage|, and how often the two modes order a group's samples alike (Kendall's
tau); with the time the crossing took (recombining, the extra test runs, scoring) against the
rollout's.

Usage: python bench/pairing.py [--tasks 16] [--group-size 4] [--agents 2] [--task coding]
                               [--max-tokens 192] [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import kendalltau  # noqa: E402
from tqdm import tqdm  # noqa: E402

from agents.kinds import work_of  # noqa: E402
from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402
from agents.team.graph import Sampling  # noqa: E402
from learner.config import MAGRPOConfig  # noqa: E402
from learner.magrpo import group_advantages, has_signal  # noqa: E402
from learner.train import (  # noqa: E402
    TrainArgs,
    cross_group,
    rollout_group,
    training_tasks,
)


def measure(client, args) -> dict:
    """Sample each task's group once; both modes' advantages on it; the figures per agent."""
    train_args = TrainArgs(
        task=args.task,
        agents=args.agents,
        magrpo=MAGRPOConfig(group_size=args.group_size, max_new_tokens=args.max_tokens),
    )
    crossed = replace(train_args, magrpo=replace(train_args.magrpo, joint_mode="cross"))
    crossed.check()
    cfg = train_args.magrpo
    sampling = Sampling(
        temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens, logprobs=True
    )
    tasks = training_tasks(train_args)
    random.Random(args.seed).shuffle(tasks)
    groups = []
    with tempfile.TemporaryDirectory() as folder:
        db_path = Path(folder) / "pairing.db"
        for task in tqdm(tasks[: args.tasks], desc="groups", unit="task"):
            start = time.perf_counter()
            results, rewards, _ = rollout_group(
                task, client, train_args, [None] * args.agents, sampling, db_path, None,
                train_args.weights,
            )  # fmt: skip
            rollout_s = time.perf_counter() - start
            start = time.perf_counter()
            returns = cross_group(results, crossed, work_of(task).checker, None, crossed.weights)
            groups.append(
                {
                    "task": task.source_id,
                    "aligned": rewards.tolist(),
                    "cross": returns.tolist(),
                    "rollout_s": rollout_s,
                    "cross_s": time.perf_counter() - start,
                    "passed": [r.success for r in results],
                }
            )
    return {"args": vars(args), "groups": groups, "figures": figures(groups, args.agents)}


def figures(groups: list[dict], agents: int) -> dict:
    """Per agent and mode: groups with signal, mean |A|; tau between the modes' orders."""
    out = {}
    for agent in range(agents):
        aligned = [group_advantages(torch.tensor(g["aligned"])) for g in groups]
        cross = [group_advantages(torch.tensor(g["cross"][agent])) for g in groups]
        taus = [
            kendalltau(a.numpy(), c.numpy()).statistic
            for a, c in zip(aligned, cross, strict=True)
            if has_signal(a) and has_signal(c)
        ]
        out[f"agent{agent}"] = {
            "signal_aligned": sum(map(has_signal, aligned)),
            "signal_cross": sum(map(has_signal, cross)),
            "mean_abs_aligned": float(np.mean([a.abs().mean() for a in aligned])),
            "mean_abs_cross": float(np.mean([c.abs().mean() for c in cross])),
            "tau": float(np.nanmean(taus)) if taus else None,
        }
    out["rollout_s"] = float(np.mean([g["rollout_s"] for g in groups]))
    out["cross_s"] = float(np.mean([g["cross_s"] for g in groups]))
    return out


def report(result: dict) -> None:
    groups, f = result["groups"], result["figures"]
    print(f"\n{len(groups)} groups of G = {result['args']['group_size']}")
    print(f"{'agent':8s}{'signal aligned':>16s}{'signal cross':>14s}{'|A| aligned':>13s}"
          f"{'|A| cross':>11s}{'tau':>7s}")  # fmt: skip
    for agent in range(result["args"]["agents"]):
        a = f[f"agent{agent}"]
        tau = "-" if a["tau"] is None else f"{a['tau']:.2f}"
        print(f"{agent:<8d}{a['signal_aligned']:>16d}{a['signal_cross']:>14d}"
              f"{a['mean_abs_aligned']:>13.3f}{a['mean_abs_cross']:>11.3f}{tau:>7s}")  # fmt: skip
    print(
        f"rollout {f['rollout_s']:.1f} s a group; crossing {f['cross_s']:.1f} s "
        f"({f['cross_s'] / f['rollout_s']:.2f}x the rollout)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    parser.add_argument("--task", default="coding", help="the training task set (default coding)")
    parser.add_argument("--tasks", type=int, default=16, help="training tasks, one group each")
    parser.add_argument("--group-size", type=int, default=4, help="G joint samples per task")
    parser.add_argument("--agents", type=int, default=2, help="team size")
    parser.add_argument("--max-tokens", type=int, default=192, help="new tokens per agent")
    parser.add_argument("--seed", type=int, default=0, help="order of the training tasks")
    parser.add_argument("--json", help="also write the groups and figures to this file")
    args = parser.parse_args()
    model_path = provision_model(args.model)
    config = ServerConfig(model=str(model_path), agents=args.agents)
    with connect_or_start(None, config) as client:
        result = measure(client, args)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
