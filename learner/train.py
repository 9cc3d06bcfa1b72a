"""One MAGRPO training run of the `parallel` team, end to end:

    for each step:
        for each task of the step: the team acts G times through vLLM with the current adapters
            (every agent samples on its own observation), the sandbox and the reward functions
            score each joint output, A^g = R^g − mean(R)
        for each agent: one policy-gradient step on its own LoRA with its own tokens and the
            joint advantages (learner/magrpo.py)
        the new adapters go to the server under new names, so the next step samples on-policy
    at the end: each agent's adapter becomes a candidate version in the registry

Rollouts come from the vLLM server (batched, with the exact token ids and sampling log-probs it
returns); only the update runs in this process (transformers + PEFT, CPU or GPU).
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import store
from agents.feedback import sandbox_check
from agents.policy import PolicyClient
from agents.tasks import Task, abstract_tasks, humaneval_tasks, xsum_tasks
from agents.team import Sampling, run_group
from learner.magrpo import AgentPolicies, MAGRPOConfig, Sample, group_advantages
from learner.preference import PreferenceModel, load_preference_model
from learner.registry import adapter_name, publish_candidate, serving_adapters
from learner.rewards import RewardWeights, SpeedBudget, score_episode
from store.paths import coteam_home, default_db_path

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """The run was cancelled (from the admin tab or `coteam learner`); nothing was published."""


@dataclass
class TrainArgs:
    """A training run: what to train on and how; `magrpo` holds the update's knobs."""

    task: str = "coding"  # coding | summary | expansion
    steps: int = 10
    agents: int = 2
    turns: int = 1
    task_limit: int | None = None  # cycle over the first N training tasks (None: all of them)
    magrpo: MAGRPOConfig = field(default_factory=MAGRPOConfig)
    weights: RewardWeights = field(default_factory=RewardWeights)
    budget: SpeedBudget = field(default_factory=SpeedBudget)
    publish: bool = True  # register the final adapters as candidate versions

    def to_json(self) -> dict:
        return asdict(self)


def training_tasks(args: TrainArgs) -> list[Task]:
    """The training split: HumanEval 32–163 for coding; XSum or the abstracts for writing."""
    if args.task == "coding":
        tasks = humaneval_tasks("train")
    elif args.task == "summary":
        tasks = xsum_tasks()[30:]  # the first 30 are the held-out writing set
    elif args.task == "expansion":
        tasks = abstract_tasks()[30:]
    else:
        raise ValueError(f"unknown task {args.task!r}: coding, summary or expansion")
    return tasks[: args.task_limit] if args.task_limit else tasks


def agent_samples(results, agent: int) -> list[Sample]:
    """Agent `agent`'s last call in each joint sample, as the exact tokens vLLM saw and sampled."""
    samples = []
    for result in results:
        completion = result.final_steps()[agent]["completion"]
        if completion.prompt_token_ids is None or not completion.token_ids:
            raise RuntimeError("the server returned no token ids: is it vLLM >= 0.10?")
        samples.append(
            Sample(completion.prompt_token_ids, completion.token_ids, completion.token_logprobs)
        )
    return samples


def train(
    args: TrainArgs,
    client: PolicyClient,
    base_model: str | Path,
    db_path: str | Path | None = None,
    *,
    run_id: int | None = None,
    on_step: Callable[[dict], None] | None = None,
) -> dict:
    """Run `args.steps` MAGRPO steps; return the run's metrics (and candidate versions).

    With `run_id`, progress and metrics go to that training run in the store as it trains, and a
    run whose state turns 'cancelled' stops at the next step boundary (raising Cancelled).
    """
    cfg = args.magrpo
    if cfg.group_size < 2:
        raise ValueError("MAGRPO needs a group of at least 2 samples per task")
    random.seed(cfg.seed)
    tasks = training_tasks(args)
    random.shuffle(tasks)
    task_stream = itertools.cycle(tasks)
    db_path = db_path or default_db_path()
    # a unique name: a server shared with other databases may know "run-1" already
    scratch = coteam_home() / "runs" / f"run-{run_id or 0}-{uuid.uuid4().hex[:6]}"
    with store.open_db(db_path) as db:
        start_names = serving_adapters(db, args.agents)
        active = store.active_adapters(db)
    start_from = {agent: row["path"] for agent, row in active.items() if agent < args.agents}
    log.info("loading %s with %d LoRA adapters for training", base_model, args.agents)
    policies = AgentPolicies(str(base_model), args.agents, cfg, start_from)
    sampling = Sampling(
        temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens, logprobs=True
    )
    names = list(start_names)  # what the team samples with: the serving adapters, then ours
    preference = _preference_model(args, db_path)
    ratings_learnt = len(preference.rating_ids) if preference else 0
    history: list[dict] = []
    try:
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            rewards, per_agent = [], {agent: ([], []) for agent in range(args.agents)}
            for task in (next(task_stream) for _ in range(cfg.tasks_per_step)):
                results = run_group(
                    task,
                    client,
                    cfg.group_size,
                    db=db_path,
                    sampling=sampling,
                    shape="parallel",
                    agents=args.agents,
                    turns=args.turns,
                    adapters=names,
                    **({"checker": sandbox_check} if task.kind == "coding" else {}),
                )
                # the people's verdict on these fresh samples, blended into R by score_episode
                liked = (
                    preference.preference_score([r.output or "" for r in results]).tolist()
                    if preference is not None
                    else [None] * len(results)
                )
                scores = [
                    score_episode(r, args.weights, args.budget, human_rating=p, db=db_path)
                    for r, p in zip(results, liked, strict=True)
                ]
                group = torch.tensor([s.reward for s in scores])
                advantages = group_advantages(group, cfg.scale_advantages_by_std)
                rewards.extend(group.tolist())
                for agent in range(args.agents):
                    per_agent[agent][0].extend(agent_samples(results, agent))
                    per_agent[agent][1].append(advantages)
            rollout_s = time.perf_counter() - t0
            losses = {}
            for agent, (samples, advantages) in per_agent.items():
                stats = policies.update(agent, samples, torch.cat(advantages))
                losses[f"loss_agent{agent}"] = stats["loss"]
            names = _serve_step(client, policies, scratch, step, names, start_names)
            metrics = {
                "step": step,
                "reward_mean": sum(rewards) / len(rewards),
                "reward_max": max(rewards),
                "rollout_s": round(rollout_s, 1),
                "step_s": round(time.perf_counter() - t0, 1),
                "samples": len(rewards),
                "ratings_learnt": ratings_learnt,
                **losses,
            }
            history.append(metrics)
            log.info("step %d: mean reward %.3f", step, metrics["reward_mean"])
            if on_step:
                on_step(metrics)
            if run_id is not None:
                with store.open_db(db_path) as db:
                    state = store.update_training_run(
                        db,
                        run_id,
                        progress=step / args.steps,
                        message=f"step {step}/{args.steps}: mean reward {metrics['reward_mean']:.3f}",
                        metrics={"history": history},
                    )
                if state != "running":
                    raise Cancelled(f"training run {run_id} was {state}")
        outcome = {"history": history, "config": args.to_json(), "candidates": {}}
        pass_steps = steps_per_pass(len(tasks), cfg.tasks_per_step)
        if args.publish:
            last_pass = history[-pass_steps:]
            train_reward = sum(h["reward_mean"] for h in last_pass) / len(last_pass)
            outcome["candidates"] = _publish(
                db_path, policies, scratch, run_id, active, history, train_reward, ratings_learnt
            )
        return outcome
    finally:
        for name in set(names) - set(start_names):
            if name:
                client.unload_adapter(name)
        shutil.rmtree(scratch, ignore_errors=True)


def _preference_model(args: TrainArgs, db_path) -> PreferenceModel | None:
    """The people's preferences, refit on every stored rating of this kind of task (nothing is
    consumed: the next run learns from the same ratings and the new ones)."""
    if args.weights.human <= 0:
        return None
    kind = "coding" if args.task == "coding" else "writing"
    with store.open_db(db_path) as db:
        model = load_preference_model(db, kind)
    log.info("preference model: %d rating(s)", len(model.rating_ids) if model else 0)
    return model


def _serve_step(client, policies, scratch: Path, step: int, names, start_names) -> list[str]:
    """Save this step's adapters to scratch, load them under new names, unload the last step's."""
    new_names = []
    for agent in range(policies.n_agents):
        folder = policies.save(agent, scratch / f"step{step}" / f"agent{agent}")
        name = store.training_adapter_name(scratch.name, step, agent)
        client.load_adapter(name, str(folder))
        new_names.append(name)
    for old in set(names) - set(start_names):
        if old:
            client.unload_adapter(old)
    return new_names


def steps_per_pass(tasks: int, tasks_per_step: int) -> int:
    """Steps one pass over the task set takes (training cycles through it)."""
    return max(1, math.ceil(tasks / tasks_per_step))


def _publish(
    db_path,
    policies,
    scratch: Path,
    run_id,
    active: dict,
    history,
    train_reward: float,
    ratings_learnt: int = 0,
) -> dict[int, int]:
    """Register each agent's final adapter as its next candidate version; `train_reward` is the
    mean joint reward of the last pass over the tasks (one step's is mostly which tasks it drew),
    `ratings_learnt` how many stored ratings the preference model learnt from."""
    final = history[-1]["step"]
    candidates = {}
    with store.open_db(db_path) as db:
        for agent in range(policies.n_agents):
            folder = scratch / f"step{final}" / f"agent{agent}"
            parent = active[agent]["version"] if agent in active else None
            row = publish_candidate(
                db,
                agent,
                folder,
                parent=parent,
                metrics={
                    "train_reward": train_reward,
                    "steps": final,
                    "ratings_learnt": ratings_learnt,
                },
                training_run_id=run_id,
            )
            candidates[agent] = row["version"]
            log.info("agent %d: candidate %s", agent, adapter_name(agent, row["version"]))
    return candidates
