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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch

import store
from agents.kinds import work_of
from agents.serving.policy import PolicyClient
from agents.tasks import Task, split_tasks
from agents.team.crossing import recombine
from agents.team.graph import Sampling, TeamSettings
from learner.class_train import (
    class_training_problems,
    cross_classes,
    play_classes,
    reward_parts,
    trained_shape,
)
from learner.config import CROSS_WORKERS, TrainArgs
from learner.episode import EpisodeSetup, play
from learner.eval_stats import SAMPLED_SHARES
from learner.magrpo import (
    AgentPolicies,
    Sample,
    cross_picks,
    cross_returns,
    group_advantages,
    has_signal,
    turn_groups,
    update_positions,
)
from learner.preference import PreferenceModel, run_preference_model
from learner.registry import (
    adapter_name,
    check_start_split,
    load_start,
    publish_candidate,
    start_versions,
    version_names,
    work_kind,
)
from learner.reward_config import RewardWeights
from learner.rewards import score_group
from store.paths import default_db_path, runs_dir

log = logging.getLogger(__name__)


class Group(NamedTuple):
    """One task's group of a step: its G results, their rewards [G], each agent's returns
    [agents, G] (the rewards, or crossed each sample's mean over its mixes) and each result's
    reward components."""

    results: list
    rewards: torch.Tensor
    returns: torch.Tensor
    components: list[dict[str, float]]


class Cancelled(Exception):
    """The run was cancelled (from the admin tab or `coteam learner`); nothing was published."""


def training_tasks(args: TrainArgs) -> list:
    """The training split of the run's task set (agents/tasks.py; HumanEval's by `args.fold`;
    the classes' train split for "class", those with a call between teammates with
    `with_calls`), the first `task_limit`."""
    if args.task == "class":
        calls = args.agents if args.with_calls else None
        return class_training_problems(args.fold, args.task_limit, calls)
    tasks = split_tasks(args.task, "train", args.fold)
    return tasks[: args.task_limit] if args.task_limit else tasks


def agent_samples(results, agent: int, turn: int) -> tuple[list[Sample], list[int]]:
    """Agent `agent`'s calls of turn `turn` in each joint sample, as the exact tokens vLLM saw
    and sampled (no tokens where a stop rule kept nothing of the reply: an empty section), and
    for each call the index of its joint sample in `results`. A coding or writing agent makes
    one call a turn; a class agent one per method it was dealt, each trained with its joint
    sample's advantage."""
    samples, owners = [], []
    for index, result in enumerate(results):
        for completion in result.calls(agent, turn):
            if completion.prompt_token_ids is None or completion.token_ids is None:
                raise RuntimeError("the server returned no token ids: is it vLLM >= 0.10?")
            samples.append(
                Sample(completion.prompt_token_ids, completion.token_ids, completion.token_logprobs)
            )
            owners.append(index)
    return samples, owners


@dataclass
class _Run:
    """A training run as its steps see it: what stays fixed, and what a step moves on (the
    task stream, the adapters the team samples with, the history)."""

    args: TrainArgs
    client: PolicyClient
    db_path: str | Path
    run_id: int | None
    tasks: list[Task]  # in the run's order (kept in the checkpoint)
    task_stream: Iterator[Task]
    first_step: int
    policies: AgentPolicies
    sampling: Sampling
    preference: PreferenceModel | None
    weights: RewardWeights  # the run's, the human weight scaled by the preference model's skill
    ratings: dict  # what the preference model learnt from, for the metrics
    start_names: list[str | None]  # the team the run started from: serving, or `--from`'s
    borrowed: list[str]  # start versions loaded for this run alone, unloaded at its end
    names: list[str | None]  # what the team samples with now: the start's, then the run's
    scratch: Path
    checkpoint: Path | None
    history: list[dict]


@dataclass
class _Batch:
    """What one step's update trains on: each agent's calls and their advantages, and counts."""

    per_agent: dict[int, tuple[list[Sample], list[torch.Tensor]]]
    skipped: int  # groups without signal (per task, and per turn with several)
    signalled: int
    turns_taken: list[int]


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

    Each step: `rollout` (every task's group played and scored), `advantages`, `update` (one
    policy-gradient step per agent, the new adapters served), `record_step`.
    """
    args.check()
    resumed = read_checkpoint(resume_from) if resume_from else None
    if resumed and (candidates := published_candidates(resumed)):  # stopped in the gate
        return {"history": resumed["history"], "config": args.to_json(), "candidates": candidates}
    db_path = db_path or default_db_path()
    run = start_run(args, client, base_model, db_path, run_id, resume_from, resumed)
    try:
        if resumed:
            run.policies.load_optimizers(resume_from)
            run.names = _serve_step(run, run.first_step - 1)
        for step in range(run.first_step, args.steps + 1):
            t0 = time.perf_counter()
            step_tasks = [next(run.task_stream) for _ in range(args.magrpo.tasks_per_step)]
            groups = rollout(run, step_tasks)
            batch = advantages(run, groups)
            rollout_s = time.perf_counter() - t0
            losses, updated = update(run, batch, step)
            times = {"rollout_s": rollout_s, "update_s": time.perf_counter() - t0 - rollout_s}
            record_step(run, step_metrics(run, step, groups, batch, losses, updated, times))
            if on_step:
                on_step(run.history[-1])
        return finish_run(run)
    finally:
        for name in (set(run.names) - set(run.start_names)) | set(run.borrowed):
            if name:
                client.unload_adapter(name)
        shutil.rmtree(run.scratch, ignore_errors=True)


def start_run(
    args: TrainArgs,
    client: PolicyClient,
    base_model: str | Path,
    db_path: str | Path,
    run_id: int | None,
    resume_from: Path | None,
    resumed: dict | None,
) -> _Run:
    """The run's tasks in its order (a resumed run's, with the tasks its steps drew passed), the
    team it starts from (the versions serving this kind of work, or those `--from` names, loaded:
    a run on writing does not start from versions trained on coding; a resumed run its
    checkpoint), the preference model and the weights."""
    cfg = args.magrpo
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
    start, start_names, borrowed = start_team(args, client, db_path, resumed=bool(resumed))
    start_from = {agent: row["path"] for agent, row in start.items()}
    if resumed:
        start_from = {agent: str(resume_from / f"agent{agent}") for agent in range(args.agents)}
    log.info("loading %s with %d LoRA adapters for training", base_model, args.agents)
    policies = AgentPolicies(str(base_model), args.agents, cfg, start_from)
    log.info("the update: %s, the base model in %s", policies.device, policies.dtype)
    preference = _preference_model(args, db_path)
    weights, ratings = args.weights, {"ratings_learnt": 0}
    if preference is not None:  # how far the ratings are trusted: their weight in the reward
        weights = replace(weights, human=preference.blend_weight(weights))
        ratings = {
            "ratings_learnt": len(preference.rating_ids),
            "preference_skill": round(preference.skill, 3),
            "preference_weight": round(weights.human, 3),
        }
    return _Run(
        args=args,
        client=client,
        db_path=db_path,
        run_id=run_id,
        tasks=tasks,
        task_stream=task_stream,
        first_step=first_step,
        policies=policies,
        sampling=Sampling(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_new_tokens,
            logprobs=True,
        ),
        preference=preference,
        weights=weights,
        ratings=ratings,
        start_names=list(start_names),
        borrowed=borrowed,
        names=list(start_names),
        # a unique name: a server shared with other databases may know "run-1" already
        scratch=runs_dir(db_path) / f"run-{run_id or 0}-{uuid.uuid4().hex[:6]}",
        checkpoint=checkpoint_folder(run_id, db_path) if run_id is not None else None,
        history=resumed["history"] if resumed else [],
    )


def start_team(args: TrainArgs, client: PolicyClient, db_path, resumed: bool):
    """The versions a run starts from (`start_versions`: serving, or `--from`'s), their names,
    and those loaded for the run alone. A new run is checked against its split and loads them; a
    resumed run goes on from its own checkpoint, so they are only its candidates' parents and
    nothing is loaded for them."""
    kind = work_kind(args.task)
    with store.open_db(db_path) as db:
        start = start_versions(db, args.agents, kind, args.start_versions())
        if resumed:
            return start, version_names(start, args.agents), []
        check_start_split(db, start, args.fold)
        return start, *load_start(db, client, args.agents, kind, start)


def rollout(run: _Run, step_tasks: list[Task]) -> list[Group]:
    """The step's tasks at once, each one's group played and scored (`rollout_group`)."""
    with ThreadPoolExecutor(max_workers=len(step_tasks)) as pool:
        one = functools.partial(
            rollout_group,
            client=run.client,
            preference=run.preference,
            weights=run.weights,
            args=run.args,
            names=run.names,
            sampling=run.sampling,
            db_path=run.db_path,
        )
        return list(pool.map(one, step_tasks))


def advantages(run: _Run, groups: list[Group]) -> _Batch:
    """Each agent's calls with signal and their advantages A = R − mean(R) over the group (per
    turn with several; per agent its own returns when crossed); a group whose advantages are
    all zero carries no signal and is left out."""
    cfg = run.args.magrpo
    batch = _Batch({agent: ([], []) for agent in range(run.args.agents)}, 0, 0, [])
    for results, _, returns, _ in groups:
        taken = [r.turns for r in results]
        batch.turns_taken.extend(taken)
        # per agent: the same returns (aligned) or each agent's own (cross pairing)
        by_agent = [turn_groups(taken, r, cfg.gamma) for r in returns]
        for turn_group in zip(*by_agent, strict=True):
            turn, members, _ = turn_group[0]
            per_agent = [group_advantages(r, cfg.scale_advantages_by_std) for _, _, r in turn_group]
            if not any(map(has_signal, per_agent)):  # all equal: nothing to learn
                batch.skipped += 1
                continue
            batch.signalled += 1
            for agent, agent_advantages in enumerate(per_agent):
                if has_signal(agent_advantages):
                    calls, owners = agent_samples([results[g] for g in members], agent, turn)
                    batch.per_agent[agent][0].extend(calls)
                    batch.per_agent[agent][1].append(agent_advantages[owners])
    return batch


def update(run: _Run, batch: _Batch, step: int) -> tuple[dict, bool]:
    """One policy-gradient step on each agent's LoRA with its own calls; the new adapters go to
    the server (else the adapters are unchanged: the team keeps sampling with the ones it has).
    Returns each agent's loss and whether any optimizer step was taken."""
    losses, updated = {}, False
    for agent, (samples, agent_advantages) in batch.per_agent.items():
        if not samples:
            continue
        stats = run.policies.update(agent, samples, torch.cat(agent_advantages))
        losses[f"loss_agent{agent}"] = stats["loss"]
        updated = updated or stats["updated"]
    if updated:
        run.names = _serve_step(run, step)
    return losses, updated


def step_metrics(run: _Run, step: int, groups, batch: _Batch, losses, updated, times) -> dict:
    """What a step is logged with (the admin tab's curves and `coteam train`'s progress)."""
    rewards = [reward for group in groups for reward in group.rewards.tolist()]
    calls = [samples for samples, _ in batch.per_agent.values()]
    return {
        "step": step,
        "reward_mean": sum(rewards) / len(rewards),
        "reward_max": max(rewards),
        **sampled_behaviour(groups),
        "rollout_s": round(times["rollout_s"], 1),
        "update_s": round(times["update_s"], 1),
        "step_s": round(times["rollout_s"] + times["update_s"], 1),
        "samples": len(rewards),
        **run.ratings,
        "groups_without_signal": batch.skipped,  # per task, and per turn with several
        "groups_with_signal": batch.signalled,
        # every call of every joint sample
        "tokens_generated": sum(
            c.completion_tokens for group in groups for r in group.results for c in r.calls()
        ),
        # completion tokens the update trained on, all agents together
        "tokens_trained": sum(len(s.completion_ids) for samples in calls for s in samples),
        # the positions the update's forward passes computed, prompts included, all agents
        "tokens_passed": sum(
            update_positions(samples, run.args.magrpo.micro_batch) for samples in calls
        ),
        # the calls in the update, of the agent with the most (crossed, each its own)
        "calls_trained": max(len(samples) for samples in calls),
        "calls_by_agent": [len(samples) for samples in calls],
        **(
            {"turns_mean": sum(batch.turns_taken) / len(batch.turns_taken)}
            if run.args.turns > 1
            else {}
        ),
        "updated": updated,  # False: no group had signal, no optimizer step was taken
        **losses,
    }


def sampled_behaviour(groups: list[Group]) -> dict[str, float]:
    """What the step's sampled answers did (`SAMPLED_SHARES`), as shares over them: `pass_rate`
    (the episode succeeded: every test passed, or the writing verdict) and each other share the
    task's reward scores (a coding team's)."""
    results = [r for group in groups for r in group.results]
    components = [c for group in groups for c in group.components]
    shares = {"pass_rate": sum(bool(r.success) for r in results) / len(results)}
    for name in SAMPLED_SHARES:
        if name not in shares and components and all(name in c for c in components):
            shares[name] = sum(c[name] for c in components) / len(components)
    return shares


def record_step(run: _Run, metrics: dict) -> None:
    """Keep the step: the history, the checkpoint, the log, the training run's progress; a run
    whose state is no longer 'running' (cancelled) stops here."""
    step = metrics["step"]
    run.history.append(metrics)
    if run.checkpoint is not None:
        write_checkpoint(run.policies, run.checkpoint, step, run.history, run.tasks)
    no_update = "" if metrics["updated"] else " (no signal: no update)"
    log.info("step %d: mean reward %.3f%s", step, metrics["reward_mean"], no_update)
    if run.run_id is not None:
        with store.open_db(run.db_path) as db:
            state = store.update_training_run(
                db,
                run.run_id,
                progress=step / run.args.steps,
                message=f"step {step}/{run.args.steps}: mean reward {metrics['reward_mean']:.3f}",
                metrics={"history": run.history},
            )
        if state != "running":
            raise Cancelled(f"training run {run.run_id} was {state}")


def finish_run(run: _Run) -> dict:
    """The run's outcome; with `publish`, each agent's adapter becomes its next candidate."""
    outcome = {"history": run.history, "config": run.args.to_json(), "candidates": {}}
    if run.args.publish:
        last_pass = run.history[-steps_per_pass(len(run.tasks), run.args.magrpo.tasks_per_step) :]
        train_reward = sum(h["reward_mean"] for h in last_pass) / len(last_pass)
        outcome["candidates"] = _publish(run, train_reward)
        if run.checkpoint is not None:  # a run stopped in the gate resumes with the gate
            mark_published(run.checkpoint, outcome["candidates"])
    return outcome


def rollout_group(
    task: Task, client, args: TrainArgs, names, sampling, db_path, preference, weights
):
    """One task's group: G joint samples, scored together with `weights` (the run's, the human
    weight scaled by the preference model's skill) and the people's model's verdict on each
    (`score_group`), their rewards recorded. Returns the `Group`: each agent's samples' returns
    are the rewards (aligned) or, crossed, the mean reward of the G^agents recombined joint
    actions each sample is part of (`cross_group`). A class is played by the class team
    (learner/class_train.py)."""
    shape = trained_shape(args.agents, args.incremental)
    team = TeamSettings(shape, args.agents, args.turns, names, sampling)
    if args.task == "class":
        played = play_classes(task, client, args.magrpo.group_size, team, db_path=db_path)
        rewards = torch.tensor([scored["reward"] for _, scored in played])
        components = [reward_parts(scored) for _, scored in played]
        results = [episode for episode, _ in played]
        if args.magrpo.joint_mode == "cross":
            return Group(results, rewards, cross_classes(results, args.agents), components)
        return Group(results, rewards, rewards.expand(args.agents, -1), components)
    setup = EpisodeSetup(task, team, weights, args.budget)
    liked = None if preference is None else preference.group_preference
    played = play(setup, client, db=db_path, samples=args.magrpo.group_size, liked=liked)
    results, scores = [p.result for p in played], [p.scored for p in played]
    rewards = torch.tensor([s.reward for s in scores])
    components = [s.components for s in scores]
    if args.magrpo.joint_mode == "cross":
        checker = work_of(task).checker  # as the episodes were judged
        returns = cross_group(results, args, checker, preference, weights)
        return Group(results, rewards, returns, components)
    return Group(results, rewards, rewards.expand(args.agents, -1), components)


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
        preference.group_preference([r.output or "" for r in joints])
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
    model = run_preference_model(db_path, args.task, args.weights, args.fold)
    if model is None:
        if args.weights.human > 0:
            log.info("preference model: no ratings")
    else:
        log.info(
            "preference model: %d rating(s), skill %.2f, weight %.2f",
            len(model.rating_ids), model.skill, model.blend_weight(args.weights),
        )  # fmt: skip
    return model


def _serve_step(run: _Run, step: int) -> list[str]:
    """Save this step's adapters to scratch, load them under new names, unload the last step's."""
    new_names = []
    for agent in range(run.policies.n_agents):
        folder = run.policies.save(agent, run.scratch / f"step{step}" / f"agent{agent}")
        name = store.training_adapter_name(run.scratch.name, step, agent)
        run.client.load_adapter(name, str(folder))
        new_names.append(name)
    for old in set(run.names) - set(run.start_names):
        if old:
            run.client.unload_adapter(old)
    return new_names


def steps_per_pass(tasks: int, tasks_per_step: int) -> int:
    """Steps one pass over the task set takes (training cycles through it)."""
    return max(1, math.ceil(tasks / tasks_per_step))


def _publish(run: _Run, train_reward: float) -> dict[int, int]:
    """Register each agent's final adapter as its next candidate version, its parent the version
    the run started from (None: the base model); `train_reward` is the mean joint reward of the
    last pass over the tasks (one step's is mostly which tasks it drew), the ratings how many
    stored ratings the preference model learnt from and, when it had any, its skill and weight
    in the reward."""
    final = run.history[-1]["step"]
    candidates = {}
    with store.open_db(run.db_path) as db:
        for agent in range(run.policies.n_agents):
            # the adapter as it is now (the last step may have had no signal, so no step folder)
            folder = run.policies.save(agent, run.scratch / "final" / f"agent{agent}")
            row = publish_candidate(
                db,
                agent,
                folder,
                parent=(store.parse_adapter_name(run.start_names[agent]) or (agent, None))[1],
                kind=work_kind(run.args.task),
                metrics={"train_reward": train_reward, "steps": final, **run.ratings},
                training_run_id=run.run_id,
            )
            candidates[agent] = row["version"]
            log.info("agent %d: candidate %s", agent, adapter_name(agent, row["version"]))
    return candidates
