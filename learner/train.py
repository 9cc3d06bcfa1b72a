"""One MAGRPO training run of the `parallel` team, end to end:

    for each step:
        the tasks of the step, concurrently: the team acts G times through vLLM with the current
            adapters (every agent samples on its own observation), the sandbox and the reward
            functions score each joint output, A^g = R^g − mean(R); a group whose rewards are
            all equal carries no signal and is left out. With several turns (feedback from the
            tests between them) each turn's calls form a group of their own, with returns
            γ^(turns after it)·R (learner/magrpo.py `turn_groups`)
        for each agent: one policy-gradient step on its own LoRA with its own tokens and the
            joint advantages (learner/magrpo.py); no step at all when no group is left
        the new adapters go to the server under new names, so the next step samples on-policy
    at the end: each agent's adapter becomes a candidate version in the registry

Rollouts come from the vLLM server (batched, with the exact token ids and sampling log-probs it
returns); only the update runs in this process (transformers + PEFT, CPU or GPU).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import random
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import get_args

import torch

import store
from agents.serving.policy import PolicyClient
from agents.tasks import Task, TaskSet, split_tasks
from agents.team.crossing import recombine
from agents.team.feedback import checker_for
from agents.team.graph import MAX_TURNS, Sampling
from learner.episode import EpisodeSetup, play
from learner.magrpo import (
    JOINT_MODES,
    MAX_CROSS_JOINT,
    AgentPolicies,
    MAGRPOConfig,
    Sample,
    cross_picks,
    cross_returns,
    group_advantages,
    has_signal,
    turn_groups,
)
from learner.preference import PreferenceModel, run_preference_model
from learner.promotion import GateSettings
from learner.registry import adapter_name, ensure_loaded, publish_candidate, work_kind
from learner.reward_config import RewardWeights, SpeedBudget
from learner.rewards import score_group
from store.paths import default_db_path, runs_dir

log = logging.getLogger(__name__)
CROSS_WORKERS = 4  # recombined joint actions judged at once (each program's tests: a subprocess)


class Cancelled(Exception):
    """The run was cancelled (from the admin tab or `coteam learner`); nothing was published."""


@dataclass
class TrainArgs:
    """The one config of a training run (CleanRL's `Args` up front): what to train on, the
    update's knobs (`magrpo`), the reward's weights and budgets, and the promotion gate's
    settings. The admin form and `coteam train` start from these defaults; `check()` validates."""

    task: TaskSet = "coding"  # coding | summary | expansion | longform (agents/tasks.py)
    steps: int = 10
    agents: int = 2
    turns: int = 1  # turns per episode; every turn's calls are trained (magrpo.gamma)
    task_limit: int | None = None  # cycle over the first N training tasks (None: all of them)
    magrpo: MAGRPOConfig = field(default_factory=MAGRPOConfig)
    weights: RewardWeights = field(default_factory=RewardWeights)
    budget: SpeedBudget = field(default_factory=SpeedBudget)
    gate: GateSettings = field(default_factory=GateSettings)
    publish: bool = True  # register the final adapters as candidate versions

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TrainArgs:
        """The config `to_json` wrote (a stored run's), validated."""
        data = dict(data)
        magrpo = dict(data.pop("magrpo", {}))
        if "target_modules" in magrpo:
            magrpo["target_modules"] = tuple(magrpo["target_modules"])
        args = cls(
            **data
            | {
                "magrpo": MAGRPOConfig(**magrpo),
                "weights": RewardWeights(**data.get("weights", {})),
                "budget": SpeedBudget(**data.get("budget", {})),
                "gate": GateSettings(**data.get("gate", {})),
            }
        )
        args.check()
        return args

    def check(self) -> None:
        """Refuse a run the learner cannot do, before any model is loaded; the message says why."""
        c = self.magrpo
        if self.task not in get_args(TaskSet):
            raise ValueError(f"unknown task {self.task!r}: {', '.join(get_args(TaskSet))}")
        if self.steps < 1:
            raise ValueError(f"a run needs at least 1 step, not {self.steps}")
        if not 2 <= self.agents <= 4:
            raise ValueError(f"a team has 2 to 4 agents, not {self.agents}")
        if c.group_size < 2:
            raise ValueError("MAGRPO needs a group of at least 2 samples per task")
        if not 1 <= self.turns <= MAX_TURNS:
            raise ValueError(f"an episode has 1 to {MAX_TURNS} turns, not {self.turns}")
        if not 0 < c.gamma <= 1:
            raise ValueError(f"the discount gamma must be in (0, 1], not {c.gamma}")
        if c.tasks_per_step < 1 or c.micro_batch < 1 or c.max_new_tokens < 1:
            raise ValueError("tasks_per_step, micro_batch and max_new_tokens must be at least 1")
        if not c.learning_rate > 0:
            raise ValueError(f"the learning rate must be positive, not {c.learning_rate}")
        if c.joint_mode not in JOINT_MODES:
            raise ValueError(f"unknown joint mode {c.joint_mode!r}: {' or '.join(JOINT_MODES)}")
        if c.joint_mode == "cross" and self.turns != 1:
            raise ValueError(
                "cross pairing trains one-turn episodes: a second turn's observations depend on "
                "the first turn's joint output, which crossing changes (use --turns 1 or aligned)"
            )
        if c.joint_mode == "cross" and c.group_size**self.agents > MAX_CROSS_JOINT:
            raise ValueError(
                f"cross pairing scores G^agents = {c.group_size}^{self.agents} = "
                f"{c.group_size**self.agents} joint actions a task, more than {MAX_CROSS_JOINT}: "
                "use fewer agents, a smaller group, or aligned"
            )
        if self.task_limit is not None and self.task_limit < 1:
            raise ValueError(f"task_limit must be at least 1, not {self.task_limit}")
        self.gate.check()


def training_tasks(args: TrainArgs) -> list[Task]:
    """The training split of the run's task set (agents/tasks.py), the first `task_limit`."""
    tasks = split_tasks(args.task, "train")
    return tasks[: args.task_limit] if args.task_limit else tasks


def agent_samples(results, agent: int, turn: int) -> list[Sample]:
    """Agent `agent`'s call of turn `turn` in each joint sample, as the exact tokens vLLM saw
    and sampled (none where a stop rule kept nothing of the reply: an empty section)."""
    samples = []
    for result in results:
        [step] = [s for s in result.steps if s["agent"] == agent and s["turn"] == turn]
        completion = step["completion"]
        if completion.prompt_token_ids is None or completion.token_ids is None:
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
    resume_from: Path | None = None,
) -> dict:
    """Run `args.steps` MAGRPO steps; return the run's metrics (and candidate versions).

    With `run_id`, progress and metrics go to that training run in the store as it trains, a
    checkpoint (adapters, optimizer state, task order, history) is kept after every step in
    `checkpoint_folder(run_id, db_path)`, and a run whose state turns 'cancelled' stops at the
    next step boundary (raising Cancelled). `resume_from` (a checkpoint folder) continues a
    stopped run from its last completed step; a run stopped after it published its candidates
    (in the gate) trains no more and returns them, for the gate to run again.
    """
    cfg = args.magrpo
    args.check()
    resumed = read_checkpoint(resume_from) if resume_from else None
    if resumed and (candidates := published_candidates(resumed)):  # stopped in the gate
        return {"history": resumed["history"], "config": args.to_json(), "candidates": candidates}
    random.seed(cfg.seed)
    tasks = training_tasks(args)
    random.shuffle(tasks)
    first_step = 1
    if resumed:
        by_id = {t.source_id: t for t in tasks}
        tasks = [by_id[i] for i in resumed["task_order"]]
        first_step = resumed["step"] + 1
    task_stream = itertools.cycle(tasks)
    for _ in range((first_step - 1) * cfg.tasks_per_step):  # the tasks the steps done drew
        next(task_stream)
    db_path = db_path or default_db_path()
    # a unique name: a server shared with other databases may know "run-1" already
    scratch = runs_dir(db_path) / f"run-{run_id or 0}-{uuid.uuid4().hex[:6]}"
    with store.open_db(db_path) as db:
        # the team serving this kind of work, loaded (a new server has none): a run on writing
        # does not start from versions trained on coding
        start_names = ensure_loaded(db, client, args.agents, work_kind(args.task))
        active = store.active_adapters(db)
    start_from = {agent: active[agent]["path"] for agent, name in enumerate(start_names) if name}
    if resumed:
        start_from = {agent: str(resume_from / f"agent{agent}") for agent in range(args.agents)}
    log.info("loading %s with %d LoRA adapters for training", base_model, args.agents)
    policies = AgentPolicies(str(base_model), args.agents, cfg, start_from)
    sampling = Sampling(
        temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens, logprobs=True
    )
    names = list(start_names)  # what the team samples with: the serving adapters, then ours
    preference = _preference_model(args, db_path)
    weights, ratings = args.weights, {"ratings_learnt": 0}
    if preference is not None:  # how far the ratings are trusted: their weight in the reward
        weights = replace(weights, human=preference.blend_weight(weights))
        ratings = {
            "ratings_learnt": len(preference.rating_ids),
            "preference_skill": round(preference.skill, 3),
            "preference_weight": round(weights.human, 3),
        }
    history: list[dict] = resumed["history"] if resumed else []
    checkpoint = checkpoint_folder(run_id, db_path) if run_id is not None else None
    try:
        if resumed:
            policies.load_optimizers(resume_from)
            names = _serve_step(client, policies, scratch, first_step - 1, names, start_names)
        for step in range(first_step, args.steps + 1):
            t0 = time.perf_counter()
            rewards, turns_taken = [], []
            per_agent = {agent: ([], []) for agent in range(args.agents)}
            step_tasks = [next(task_stream) for _ in range(cfg.tasks_per_step)]
            with ThreadPoolExecutor(max_workers=len(step_tasks)) as pool:
                rollout = functools.partial(
                    rollout_group,
                    client=client,
                    preference=preference,
                    weights=weights,
                    args=args,
                    names=names,
                    sampling=sampling,
                    db_path=db_path,
                )
                groups = list(pool.map(rollout, step_tasks))
            skipped = signalled = generated = 0
            for results, group, returns in groups:
                rewards.extend(group.tolist())
                generated += sum(s["completion_tokens"] for r in results for s in r.steps)
                taken = [r.turns for r in results]
                turns_taken.extend(taken)
                # per agent: the same returns (aligned) or each agent's own (cross pairing)
                by_agent = [turn_groups(taken, r, cfg.gamma) for r in returns]
                for turn_group in zip(*by_agent, strict=True):
                    turn, members, _ = turn_group[0]
                    advantages = [
                        group_advantages(r, cfg.scale_advantages_by_std) for _, _, r in turn_group
                    ]
                    if not any(map(has_signal, advantages)):  # all equal: nothing to learn
                        skipped += 1
                        continue
                    signalled += 1
                    for agent, agent_advantages in enumerate(advantages):
                        if not has_signal(agent_advantages):
                            continue
                        calls = agent_samples([results[g] for g in members], agent, turn)
                        per_agent[agent][0].extend(calls)
                        per_agent[agent][1].append(agent_advantages)
            rollout_s = time.perf_counter() - t0
            losses, updated = {}, False
            for agent, (samples, advantages) in per_agent.items():
                if not samples:
                    continue
                stats = policies.update(agent, samples, torch.cat(advantages))
                losses[f"loss_agent{agent}"] = stats["loss"]
                updated = updated or stats["updated"]
            if updated:  # else the adapters are unchanged: keep serving the ones we have
                names = _serve_step(client, policies, scratch, step, names, start_names)
            update_s = time.perf_counter() - t0 - rollout_s
            metrics = {
                "step": step,
                "reward_mean": sum(rewards) / len(rewards),
                "reward_max": max(rewards),
                "rollout_s": round(rollout_s, 1),
                "update_s": round(update_s, 1),
                "step_s": round(time.perf_counter() - t0, 1),
                "samples": len(rewards),
                **ratings,
                "groups_without_signal": skipped,  # per task, and per turn with several
                "groups_with_signal": signalled,
                "tokens_generated": generated,  # every call of every joint sample
                # completion tokens the update trained on, all agents together
                "tokens_trained": sum(
                    len(s.completion_ids) for calls, _ in per_agent.values() for s in calls
                ),
                # the calls in the update, of the agent with the most (crossed, each its own)
                "calls_trained": max(len(calls) for calls, _ in per_agent.values()),
                "calls_by_agent": [len(calls) for calls, _ in per_agent.values()],
                **({"turns_mean": sum(turns_taken) / len(turns_taken)} if args.turns > 1 else {}),
                "updated": updated,  # False: no group had signal, no optimizer step was taken
                **losses,
            }
            history.append(metrics)
            if checkpoint is not None:
                write_checkpoint(policies, checkpoint, step, history, tasks)
            log.info(
                "step %d: mean reward %.3f%s",
                step,
                metrics["reward_mean"],
                "" if updated else " (no signal: no update)",
            )
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
                db_path, policies, scratch, run_id, active, history, train_reward, ratings
            )
            if checkpoint is not None:  # a run stopped in the gate resumes with the gate
                mark_published(checkpoint, outcome["candidates"])
        return outcome
    finally:
        for name in set(names) - set(start_names):
            if name:
                client.unload_adapter(name)
        shutil.rmtree(scratch, ignore_errors=True)


def rollout_group(
    task: Task, client, args: TrainArgs, names, sampling, db_path, preference, weights
):
    """One task's group: G joint samples, scored together with `weights` (the run's, the human
    weight scaled by the preference model's skill) and the people's model's verdict on each
    (`score_group`), their rewards recorded. Returns the results, their rewards [G] and each
    agent's samples' returns [agents, G]: the rewards (aligned) or, crossed, the mean reward of
    the G^agents recombined joint actions each sample is part of (`cross_group`)."""
    setup = EpisodeSetup(
        task,
        agents=args.agents,
        turns=args.turns,
        adapters=names,
        sampling=sampling,
        weights=weights,
        budget=args.budget,
    )
    liked = None if preference is None else preference.group_preference
    played = play(setup, client, db=db_path, samples=args.magrpo.group_size, liked=liked)
    results, scores = [p.result for p in played], [p.scored for p in played]
    rewards = torch.tensor([s.reward for s in scores])
    if args.magrpo.joint_mode == "cross":
        checker = checker_for(task.kind)  # as the episodes were judged
        return results, rewards, cross_group(results, args, checker, preference, weights)
    return results, rewards, rewards.expand(args.agents, -1)


def cross_group(results, args: TrainArgs, checker, preference, weights) -> torch.Tensor:
    """Cross pairing: every agent's sample with every teammate's (G^agents joint actions, each
    combined and judged as an episode would be, `recombine`, by the episodes' `checker`: the
    sandbox runs each program's tests), scored together as one group and not recorded (the
    store keeps the G episodes that ran); each agent's samples' returns [agents, G]."""
    group_size = len(results)
    picks = cross_picks(group_size, args.agents)

    def joint(pick: tuple[int, ...]):
        if len(set(pick)) == 1:
            return results[pick[0]]  # an episode that ran: judged already
        return recombine(results, pick, checker)

    with ThreadPoolExecutor(max_workers=CROSS_WORKERS) as pool:
        joints = list(pool.map(joint, picks))
    liked = (
        preference.group_preference([r.output or "" for r in joints]).tolist()
        if preference is not None
        else None
    )
    scores = score_group(joints, weights, args.budget, liked)
    return cross_returns(torch.tensor([s.reward for s in scores]), picks, group_size)


def checkpoint_folder(run_id: int, db_path: str | Path | None = None) -> Path:
    """Where run `run_id` of database `db_path` keeps its last completed step (for `coteam
    train --resume RUN`)."""
    return runs_dir(db_path) / f"run-{run_id}" / "checkpoint"


def write_checkpoint(policies: AgentPolicies, folder: Path, step: int, history, tasks) -> None:
    """Replace `folder` with this step's state: each agent's adapter and optimizer state, the
    task order and the history; written beside it first, so a kill leaves the last one whole."""
    tmp = folder.with_name(folder.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for agent in range(policies.n_agents):
        policies.save(agent, tmp / f"agent{agent}")
    policies.save_optimizers(tmp)
    state = {"step": step, "history": history, "task_order": [t.source_id for t in tasks]}
    (tmp / "state.json").write_text(json.dumps(state))
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def read_checkpoint(folder: Path) -> dict:
    """The state `write_checkpoint` kept; a clear error when there is none."""
    path = Path(folder) / "state.json"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint in {folder}: the run completed no step to resume")
    return json.loads(path.read_text())


def mark_published(folder: Path, candidates: dict[int, int]) -> None:
    """Note in checkpoint `folder` that every step is done and these candidate versions were
    registered: a run stopped after this resumes with its promotion gate, not with training."""
    state = read_checkpoint(folder)
    state["candidates"] = {str(agent): version for agent, version in candidates.items()}
    path = Path(folder) / "state.json"
    tmp = path.with_name("state.json.new")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def published_candidates(state: dict) -> dict[int, int]:
    """The candidate versions a checkpoint's run registered (`mark_published`), by agent."""
    return {int(agent): version for agent, version in state.get("candidates", {}).items()}


def _preference_model(args: TrainArgs, db_path) -> PreferenceModel | None:
    """The people's preferences, refit on every stored rating of this kind of task (nothing is
    consumed: the next run learns from the same ratings and the new ones)."""
    model = run_preference_model(db_path, args.task, args.weights)
    if model is None:
        if args.weights.human > 0:
            log.info("preference model: no ratings")
    else:
        log.info(
            "preference model: %d rating(s), skill %.2f, weight %.2f",
            len(model.rating_ids), model.skill, model.blend_weight(args.weights),
        )  # fmt: skip
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
    ratings: dict,
) -> dict[int, int]:
    """Register each agent's final adapter as its next candidate version; `train_reward` is the
    mean joint reward of the last pass over the tasks (one step's is mostly which tasks it drew),
    `ratings` how many stored ratings the preference model learnt from and, when it had any, its
    skill and weight in the reward."""
    final = history[-1]["step"]
    candidates = {}
    with store.open_db(db_path) as db:
        for agent in range(policies.n_agents):
            # the adapter as it is now (the last step may have had no signal, so no step folder)
            folder = policies.save(agent, scratch / "final" / f"agent{agent}")
            parent = active[agent]["version"] if agent in active else None
            row = publish_candidate(
                db,
                agent,
                folder,
                parent=parent,
                metrics={
                    "train_reward": train_reward,
                    "steps": final,
                    **ratings,
                },
                training_run_id=run_id,
            )
            candidates[agent] = row["version"]
            log.info("agent %d: candidate %s", agent, adapter_name(agent, row["version"]))
    return candidates
