"""Class teams in the learner: a MAGRPO group of class episodes, their record in the store, and the
promotion gate's paired episodes on the validation classes.

A class episode (agents/kinds/class_team.py) is the `parallel` team: every agent writes the
methods dealt to it, each method its own call begun with the skeleton's head of that method, the
calls of one agent one after another. In training, each of an agent's calls in joint sample g is
trained with that sample's joint advantage (learner/train.py `agent_samples`): the methods of a
sample succeed or fail together, as the class does. The joint reward is `class_reward` (the test
classes passed, the whole class, calls to teammates' methods that pass, speed); what the
environment writes into a reply — each method's opening, the skeleton — is never the agents' own:
the opening is the prompt's, not the completion's, so no token of it is trained or paid for.

Recorded like any episode: a task per class (kind "class", source "classeval"), an episode per
joint sample with the group's id, one turn row per agent and turn (its methods' prompts and its
methods, joined), the reward's parts and the joint reward.
"""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import store
from agents.kinds.class_team import (
    ClassEpisode,
    ClassRewardWeights,
    class_adapters,
    class_reward,
    recombine_classes,
    run_class_episode,
    team_size,
    teammate_calls,
)
from agents.kinds.classes import (
    ClassProblem,
    class_problem,
    class_splits,
    deal,
    user_class_problem,
)
from agents.team.graph import TeamSettings, judged_sampling
from learner.config import CROSS_WORKERS
from store.adapters import recorded_version

CLASS_WEIGHTS = ClassRewardWeights()  # the one class reward, for training, the gate and the CLI


def class_training_problems(
    fold: str | None, limit: int | None, calls_for: int | None = None
) -> list[ClassProblem]:
    """The class train split (agents/kinds/classes.py `class_splits`), the first `limit`; with
    `calls_for` (a team size), only the classes where a method dealt to one agent implies a call
    to a method dealt to another (`teammate_calls` of no program: every such method, none
    written)."""
    problems = class_splits(fold)["train"]
    if calls_for:
        problems = [
            p
            for p in problems
            if teammate_calls(p, deal(p, team_size(p, "parallel", calls_for)), "")
        ]
    return problems[:limit] if limit else problems


def class_validation_problems(fold: str | None, limit: int) -> list[ClassProblem]:
    """The gate's classes: the validation split, the first `limit`."""
    return class_splits(fold)["validation"][:limit]


def trained_shape(agents: int, incremental: bool = False) -> str:
    """The shape a run trains: the parallel team, or with one agent `single` (on classes, every
    method from the skeleton alone: the class team's control, trained by GRPO); `incremental`
    (classes): each agent seeing the methods it wrote before (`parallel_incremental`,
    `single_incremental`)."""
    return ("single" if agents == 1 else "parallel") + ("_incremental" if incremental else "")


def play_classes(
    problem: ClassProblem,
    policy,
    samples: int,
    settings: TeamSettings,
    *,
    db_path: str | Path | None = None,
) -> list[tuple[ClassEpisode, dict]]:
    """`samples` episodes of the class team `settings` describes on `problem` at once (a MAGRPO
    group: their calls reach the server together; sample g plays `settings.for_sample(g)`),
    each scored by `class_reward` and, given `db_path`, recorded with one group id."""
    group_id = uuid.uuid4().hex

    def one(g: int) -> tuple[ClassEpisode, dict]:
        played_by = settings.for_sample(g)
        episode = run_class_episode(problem, policy, played_by)
        scored = class_reward(episode, CLASS_WEIGHTS)
        if db_path is not None:
            adapters = class_adapters(played_by, len(episode.dealt))
            record_class_episode(
                db_path, episode, scored, adapters, group_id, g, played_by.sampling
            )
        return episode, scored

    with ThreadPoolExecutor(max_workers=samples) as pool:
        return list(pool.map(one, range(samples)))


def cross_classes(episodes: list[ClassEpisode], agents: int):
    """Cross pairing on a class: every agent's sample with every teammate's (G^agents classes,
    `recombine_classes`: merged and judged as an episode is, scored by `class_reward`, not
    recorded); each agent's samples' returns [agents, G], the mean reward of the classes each
    is part of (learner/magrpo.py `cross_returns`)."""
    import torch

    from learner.magrpo import cross_picks, cross_returns

    picks = cross_picks(len(episodes), agents)

    def joint(pick: tuple[int, ...]) -> float:
        episode = episodes[pick[0]] if len(set(pick)) == 1 else recombine_classes(episodes, pick)
        return class_reward(episode, CLASS_WEIGHTS)["reward"]

    with ThreadPoolExecutor(max_workers=CROSS_WORKERS) as pool:
        rewards = list(pool.map(joint, picks))
    return cross_returns(torch.tensor(rewards), picks, len(episodes))


def reward_parts(scored: dict) -> dict[str, float]:
    """The reward's numeric parts (coordination missing where no method implies a teammate's
    call)."""
    return {
        k: float(v)
        for k, v in scored.items()
        if k not in ("reward", "calls") and isinstance(v, int | float)
    }


def class_weights_used(scored: dict) -> dict[str, float]:
    """The weights of the parts a class reward was made of (coordination only where a method
    implies a teammate's call)."""
    return {k: getattr(CLASS_WEIGHTS, k) for k in reward_parts(scored)}


# each part of the class reward in words (the page and History explain a reward with them)
CLASS_REWARD_WORDS = {
    "tests": "share of the test classes passed",
    "whole_class": "the whole class passed",
    "coordination": "methods that call a teammate's method as their docstring implies, by the "
    "share of their tests that pass",
    "speed": "the budget left on the critical path (the agent that wrote most), times the "
    "tests' share",
}


def explain_class_reward(parts: dict, weights: dict) -> list[str]:
    """A class reward's terms, a line each: the weighted mean of its parts."""
    used = {k: w for k, w in weights.items() if k in CLASS_REWARD_WORDS and k in parts}
    total = sum(used.values()) or 1.0
    return [f"{w / total:.2f} × {parts[k]:.2f}: {CLASS_REWARD_WORDS[k]}" for k, w in used.items()]


def record_class_episode(
    db_path, episode: ClassEpisode, scored: dict, adapters, group_id=None, sample_index=0,
    sampling=None,
) -> int:  # fmt: skip
    """Keep a class episode in the store: its task (the class), the episode, each agent's turn
    (the prompts it saw and the methods it wrote, joined), the merged class, the reward."""
    problem = episode.problem
    with store.open_db(db_path) as db:
        task_id = store.create_task(
            db, "class", problem.skeleton,
            source="classeval" if problem.task_id.startswith("ClassEval_") else "user",
            source_id=problem.task_id if problem.task_id.startswith("ClassEval_") else None,
            metadata={
                "class_name": problem.class_name, "methods": list(problem.methods),
                # a person's own class keeps its tests: an edit of it is judged again
                **({} if problem.task_id.startswith("ClassEval_") else {"tests": problem.tests}),
            },
        )  # fmt: skip
        names = (list(adapters) + [None] * len(episode.dealt))[: len(episode.dealt)]
        versions = [recorded_version(name) for name in names]
        params = {"dealt": episode.dealt}
        if sampling is not None:
            params |= {"temperature": sampling.temperature, "top_p": sampling.top_p}
        with store.recording_episode(
            db, task_id, shape=f"class_{episode.shape}",
            roles=[", ".join(methods) for methods in episode.dealt],
            adapter_versions=versions, group_id=group_id, sample_index=sample_index, params=params,
        ) as episode_id:  # fmt: skip
            for turn in range(episode.turns):
                for agent in range(len(episode.dealt)):
                    steps = [s for s in episode.steps if s.agent == agent and s.turn == turn]
                    if not steps:
                        continue
                    store.add_turn(
                        db, episode_id, turn=turn, agent=agent,
                        observation=json.dumps([s.method for s in steps]),
                        completion="\n".join(s.text for s in steps),
                        prompt_tokens=sum(
                            s.completion.prompt_tokens for s in steps if s.completion
                        ),
                        completion_tokens=sum(s.completion_tokens for s in steps),
                        latency_s=sum(s.latency_s for s in steps),
                    )  # fmt: skip
            store.finish_episode(
                db, episode_id, episode.output, wall_time_s=episode.wall_s,
                passed=episode.verdict.all_passed, checks=episode.verdict.checks(),
            )  # fmt: skip
        store.record_rewards(
            db, episode_id, reward_parts(scored), scored["reward"], class_weights_used(scored)
        )
    return episode_id


def class_problem_of(task: dict) -> ClassProblem:
    """The class a stored class task was made from (as `record_class_episode` keeps it): a
    vendored class by its id, a person's own from its skeleton and tests."""
    if task["source_id"] and task["source_id"].startswith("ClassEval_"):
        return class_problem(task["source_id"])
    return user_class_problem(task["prompt"], task["metadata"].get("tests", ""))


def class_paired_scores(
    client,
    teams,
    problems: list[ClassProblem],
    db_path,
    settings,
    on_progress=None,
    turns=1,
    incremental=False,
) -> tuple[list[list[float]], list[list[float]]]:
    """The gate on classes: both teams (candidate, serving) write every validation class, greedy
    (or `settings.samples` sampled answers, the same seeds for both teams); a class's figures
    are its answers' means: the joint reward and the share of its test classes passed, per team
    ([candidate's, serving's] each). Both teams play the run's shape (`incremental`)."""
    k = settings.samples
    total, done, lock = 2 * len(problems), 0, threading.Lock()

    def one(job):
        nonlocal done
        team, index = job
        sampling = judged_sampling(k, settings.max_tokens, seed=0)
        agents = teams[team]
        played_by = TeamSettings(
            trained_shape(len(agents), incremental), len(agents), turns, agents, sampling
        ).for_task(index)
        played = play_classes(problems[index], client, k, played_by, db_path=db_path)
        with lock:
            done += 1
            if on_progress:
                on_progress(done, total)
        return played

    jobs = [(team, i) for i in range(len(problems)) for team in (0, 1)]
    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        outcomes = dict(zip(jobs, pool.map(one, jobs), strict=True))

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values)

    def figures(team: int, what) -> list[float]:
        return [mean(what(e, s) for e, s in outcomes[(team, i)]) for i in range(len(problems))]

    rewards = [figures(t, lambda e, s: s["reward"]) for t in (0, 1)]
    passed = [figures(t, lambda e, s: e.verdict.fraction) for t in (0, 1)]
    return rewards, passed
