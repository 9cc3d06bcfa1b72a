"""Cross pairing's joint actions: the parts a group's agents wrote, mixed.

In a MAGRPO group every agent wrote G parts, each on its own view, so any choice of one part per
agent is a joint action the team could have taken; `recombine` combines and judges one as an
episode of those parts would have been (`learner.train.cross_group` scores all G^agents of
them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.team.feedback import CodeChecker, parse_check
from agents.team.graph import Team, TeamSettings, assess, combine, turn_record
from agents.team.result import EpisodeResult


def recombine(
    results: Sequence[EpisodeResult], picks: Sequence[int], checker: CodeChecker = parse_check
) -> EpisodeResult:
    """The joint sample in which agent a's part is the one it wrote in `results[picks[a]]`:
    one-turn `parallel` episodes of one group (one task, one team), their parts mixed, combined
    and judged by the environment as an episode of those parts would have been (`checker` as the
    episodes': the sandbox's runs the tests). Every agent wrote its part on its own view, so any
    mix is a joint action the team could have taken. Nothing is stored (`episode_id` 0): a
    training run's "cross" pairing scores these (`learner.magrpo.MAGRPOConfig.joint_mode`)."""
    first = results[0]
    if first.shape != "parallel" or any(
        r.turns != 1 or r.task_id != first.task_id for r in results
    ):
        raise ValueError("only one-turn parallel episodes of one task can be recombined")
    if len(picks) != len(first.roles):
        raise ValueError(f"{len(picks)} picks for a team of {len(first.roles)}")
    team = Team(first.task, TeamSettings(first.shape), first.roles, first.adapters, None, checker)
    steps = [results[g].final_steps()[agent] for agent, g in enumerate(picks)]
    state: dict[str, Any] = {"outputs": {agent: step["text"] for agent, step in enumerate(steps)}}
    state |= combine(team, state)
    verdict = assess(team, state, [step["finish_reason"] == "length" for step in steps])
    return EpisodeResult(
        episode_id=0,
        task_id=first.task_id,
        task=first.task,
        shape=first.shape,
        roles=first.roles,
        adapters=first.adapters,
        steps=steps,
        output=state["output"],
        success=verdict.success,
        turns=1,
        wall_time_s=max(results[g].wall_time_s for g in picks),
        assessments=[turn_record(0, verdict, state["output"])],
        token_budget=first.token_budget,
    )
