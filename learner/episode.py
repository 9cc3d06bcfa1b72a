"""Play an episode: the one way to set up, run, check, score and record a team's episode.

Every caller goes through `play` with one `EpisodeSetup`: the Co-write and Co-code pages
(`app/live.py`), `coteam episode`, evaluation, training's rollouts and the promotion gate. So a
coding task's tests run in the sandbox wherever an episode is played (the judge the page shows is
the judge that trains and evaluates), and every episode is scored by `score_episode` and its reward
recorded beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlite_utils import Database

from agents.kinds import team_roles, work_of
from agents.tasks import Task
from agents.team.episode import run_episode, run_group, team_adapters
from agents.team.graph import Event, Policy, TeamSettings
from agents.team.result import EpisodeResult
from agents.team.roles import Role, team_size
from learner.reward_config import RewardWeights, SpeedBudget
from learner.rewards import Scored, score_group, store_scored


@dataclass(frozen=True)
class EpisodeSetup:
    """Everything an episode is played with: the task, the team (agents/team/graph.py
    `TeamSettings`: shape, size, turn limit, each agent's adapter, role prompts, sampling), and
    the weights and budget that score it."""

    task: Task
    team: TeamSettings = field(default_factory=TeamSettings)
    weights: RewardWeights = field(default_factory=RewardWeights)
    budget: SpeedBudget = field(default_factory=SpeedBudget)

    def roles(self) -> list[Role]:
        """The team's roles (raises ValueError for a size the shape does not allow)."""
        team = self.team
        return team_roles(self.task, team.shape, team_size(team.shape, team.agents), team.prompts)

    def adapter_names(self) -> list[str | None]:
        """Each agent's adapter name (None: the base model)."""
        return team_adapters(self.team.adapters, team_size(self.team.shape, self.team.agents))


@dataclass
class Played:
    """A played episode: what the team did (recorded in the store) and its score."""

    result: EpisodeResult
    scored: Scored


class ScoringError(Exception):
    """The episodes ran and are recorded (`results`), but scoring them failed."""

    def __init__(self, results: list[EpisodeResult], cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.results, self.cause = results, cause


def play(
    setup: EpisodeSetup,
    policy: Policy,
    *,
    db: Database | str | Path | None = None,
    samples: int = 1,
    liked: Callable[[list[str]], Sequence[float]] | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> list[Played]:
    """Play `samples` episodes of `setup` on `policy` (more than one: a MAGRPO group, all at
    once, sample g seeded `seed + 100 g`), judged by the task kind's checker (a program's tests
    run in the sandbox each turn), scored with the setup's weights and budget and recorded in
    `db` (a connection, or a path; a group needs a path: one connection per thread).

    `liked(outputs)`, given, is each sample's preference in [0, 1] (the preference model's), added
    to the group's rewards at `setup.weights.human` (`score_group`) before they are recorded.
    `on_event` streams one episode's events (see `run_episode`). A failure in scoring raises
    `ScoringError` with the recorded episode."""
    checker = work_of(setup.task).checker
    if samples == 1:
        results = [
            run_episode(setup.task, policy, setup.team, checker=checker, db=db, on_event=on_event)
        ]
    elif on_event is not None:
        raise ValueError("events stream from one episode at a time, not from a group")
    else:
        results = run_group(setup.task, policy, samples, setup.team, checker=checker, db=db)
    try:
        outputs = [r.output or "" for r in results]
        preference = None if liked is None else liked(outputs)
        scores = score_group(results, setup.weights, setup.budget, preference)
    except Exception as e:
        raise ScoringError(results, e) from e
    if db is not None:
        for result, scored in zip(results, scores, strict=True):
            store_scored(db, result.episode_id, scored)
    return [Played(result, scored) for result, scored in zip(results, scores, strict=True)]
