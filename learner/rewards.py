"""Rewards: plain functions, each testable alone, each returning its components by name, and one
function that scores an episode with them (`score_episode`).

- `coding_reward` (learner/coding_reward.py): MAGRPO's levels for a team's code (helper author
  defines its function, entry author defines the entry, the module parses, fraction of test
  asserts passed), cooperation only when the entry function calls (`ast.Call`) the function its
  helper author wrote, and the share of agents that wrote another agent's part (a role violation).
- `writing_reward` and `longform_reward` (learner/writing_reward.py): length structure per role,
  balance between the parts, consistency (cosine of all-MiniLM-L6-v2 sentence embeddings),
  redundancy between parts, and agreement with a reference (ROUGE-1, ROUGE-L, embedding
  similarity) when there is one; `score_episode` adds the environment's verdict (every section
  non-empty, in bounds, not repeating another) to their quality, as the tests are for code.
- `joint_reward`: the one combiner, R = w_q·quality + w_c·coordination + w_s·speed·quality
  − w_v·role_violations, with every weight in `RewardWeights` (learner/reward_config.py);
  `blend_human` the one formula that adds what people prefer to a group's R.
- `score_episode`: the one call that scores (and, given a database, records) a finished episode;
  the app, evaluation and the promotion gate use it; training scores its groups with
  `score_group`, which calls it and adds the preference term.

Every component is a float; `quality`, `coordination`, `speed` and `role_violations` are in
[0, 1], so R lies in [−w_v, w_q + w_c + w_s]. The dicts go to the store's rewards table as
(component, value) rows as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlite_utils import Database

import store
from agents.judge.testrun import TestReport, run_tests
from agents.kinds import work_of
from learner.coding_reward import coding_reward, parses
from learner.reward_config import RewardWeights, SpeedBudget
from learner.writing_reward import longform_reward, writing_reward

# -- the joint reward: the one combiner ------------------------------------------------------------


def speed_score(critical_tokens: int, budget_tokens: int) -> float:
    """1 − critical-path tokens / a single agent's token budget, clipped to [0, 1]."""
    if budget_tokens <= 0:
        raise ValueError(f"the token budget must be positive, got {budget_tokens}")
    return min(max(1 - critical_tokens / budget_tokens, 0.0), 1.0)


def joint_reward(
    components: dict[str, float],
    speed: float,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
) -> float:
    """The one combiner: R = w_q·quality + w_c·coordination + w_s·speed·quality
    − w_v·role_violations. Speed counts only in proportion to quality, so a fast empty answer
    earns nothing; `role_violations` is 0 where a task reward has none (writing)."""
    for name in ("quality", "coordination"):
        if not 0 <= components[name] <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {components[name]}")
    quality = components["quality"]
    return (
        weights.quality * quality
        + weights.coordination * components["coordination"]
        + weights.speed * speed * quality
        - weights.role_violation * components.get("role_violations", 0.0)
    )


def explain_reward(components: dict[str, float], weights: dict[str, float]) -> list[str]:
    """The joint reward's terms (`joint_reward`, then what people prefer where it counted), a
    line each, from what the store keeps of an episode: its components and the weights used
    (`w_` names; an episode stored without them: today's defaults). They sum to its reward."""
    used = {**asdict(RewardWeights()), **{k[2:]: v for k, v in weights.items() if k[:2] == "w_"}}
    quality = components.get("quality", 0.0)
    lines = [
        f"+{used['quality'] * quality:.2f} = {used['quality']:.2f} × quality {quality:.2f} "
        "(a program: its tests' points; a document: its length, coverage and verdict)",
        f"+{used['coordination'] * components.get('coordination', 0.0):.2f} = "
        f"{used['coordination']:.2f} × coordination {components.get('coordination', 0.0):.2f} "
        "(a program: the helper called, more where the tests pass; a document: its parts "
        "consistent, not repeating each other, as structured)",
        f"+{used['speed'] * components.get('speed', 0.0) * quality:.2f} = {used['speed']:.2f} × "
        f"speed {components.get('speed', 0.0):.2f} × quality (the budget left on the critical "
        "path)",
    ]
    if components.get("role_violations"):
        violations = components["role_violations"]
        lines.append(
            f"−{used['role_violation'] * violations:.2f} = {used['role_violation']:.2f} × "
            f"{violations:.2f}, the share of agents that wrote a teammate's part"
        )
    if "human_term" in components:
        lines.append(
            f"{components['human_term']:+.2f} from what people prefer (the preference model "
            f"liked it {components.get('human_rating', 0.0):.2f}, against its group's)"
        )
    return lines


def blend_human(
    auto: Sequence[float],
    liked: Sequence[float],
    outcomes: Sequence[float | None],
    weight: float,
) -> list[float]:
    """The one formula that adds what people prefer to a group's automatic rewards R:

        R_i + w_S · (h_i − mean of h over S)

    where h_i in [0, 1] is sample i's preference (`PreferenceModel.group_preference`) and S the
    set of the group's samples whose outcome (`outcomes`: the tests' share of points, the
    writing environment's verdict; None where there is none, a program without tests) is
    sample i's. w_S is `weight`, or less where that would let a sample of S pass a sample the
    environment scored otherwise: no sample moves by more than half its distance in R to any
    sample of another set.

    So the preference reorders the samples the environment scored alike, and only them: it adds
    nothing to a set as a whole (the terms of S sum to zero), so it moves no advantage between
    passing and failing samples, and a program that passes more tests stays above one that
    passes fewer however much people like the latter. (A preference blended into R itself,
    (1 − w)·R + w·h, outvoted the tests: pass@1 −17 to −24 points in retrains,
    docs/runs/training-log.md.)"""
    if not len(auto) == len(liked) == len(outcomes):
        raise ValueError(f"{len(liked)} preferences, {len(outcomes)} outcomes, {len(auto)} rewards")
    if any(not 0 <= h <= 1 for h in liked):
        raise ValueError(f"a preference must be in [0, 1], got {list(liked)}")
    key = [None if o is None else round(o, 6) for o in outcomes]  # equal shares, as floats come
    blended = list(auto)
    for outcome in set(key):
        members = [i for i, k in enumerate(key) if k == outcome]
        centred = {i: liked[i] - sum(liked[j] for j in members) / len(members) for i in members}
        largest = max(abs(c) for c in centred.values())
        if largest == 0:
            continue
        gaps = [
            abs(auto[i] - auto[j]) for i in members for j in range(len(key)) if key[j] != outcome
        ]
        share = min([weight, *(gap / 2 / largest for gap in gaps)])
        for i, c in centred.items():
            blended[i] = float(auto[i] + share * c)  # h may be numpy's: rewards go into JSON
    return blended


def rating_to_unit(value: float, low: float = 1, high: float = 5) -> float:
    """A rating on a [low, high] scale (1–5 stars; thumbs: 0–1) mapped to [0, 1]."""
    return min(max((value - low) / (high - low), 0.0), 1.0)


# -- the task rewards: one function per task form, one signature, registered ---------------------

TaskReward = Callable[[Any, "TestReport | None", RewardWeights], dict[str, float]]
TASK_REWARDS: dict[str, TaskReward] = {}


def task_reward(form: str) -> Callable[[TaskReward], TaskReward]:
    """Register `fn(result, report, weights) -> components` as the task reward of `form` (a kind
    of work's name, agents/kinds/: "coding", "writing", "longform"), as TRL's reward functions
    are given: every one takes the finished episode (`agents.team.result.EpisodeResult`), the
    test report of its program (None where there is none) and the weights, and returns its
    components by name, `quality` and `coordination` among them."""

    def register(fn: TaskReward) -> TaskReward:
        if form in TASK_REWARDS:
            raise ValueError(f"a task reward for {form!r} is registered already")
        TASK_REWARDS[form] = fn
        return fn

    return register


@task_reward("coding")
def _coding(result, report: TestReport | None, weights: RewardWeights) -> dict[str, float]:
    """The team's code, owners and module, and the tests' report (`coding_reward`)."""
    from agents.team.combine import extract_code

    task = result.task
    texts = [step["text"] for step in result.final_steps()]
    return coding_reward(
        [extract_code(text) for text in texts],
        [role.owns for role in result.roles],
        task.entry_point,
        result.output,
        report,
        weights=weights,
    )


@task_reward("longform")
def _longform(result, report: TestReport | None, weights: RewardWeights) -> dict[str, float]:
    """Each writer's sections of the outline as the document kept them (`longform_reward`)."""
    from agents.team.outline import document_sections, structure_compliance

    task = result.task
    texts = [step["text"] for step in result.final_steps()]
    outline, owners = task.extra["outline"], [role.sections for role in result.roles]
    return longform_reward(
        document_sections(texts, outline, owners),
        [section["brief"] for section in outline],
        task.extra["target_words"],
        task.reference,
        subject=task.extra["title"] if task.source == "longform" else None,
        compliance=structure_compliance(texts, outline, owners),
    )


@task_reward("writing")
def _writing(result, report: TestReport | None, weights: RewardWeights) -> dict[str, float]:
    """Each writer's part against its role's word bounds and the reference (`writing_reward`)."""
    texts = [step["text"] for step in result.final_steps()]
    bounds = [role.words or (1, 10_000) for role in result.roles]
    return dict(writing_reward(texts, bounds, result.task.reference))


# -- one team episode: the one scoring call -------------------------------------------------------


@dataclass
class Scored:
    """A scored episode: R, the components it was made from (task reward and speed), the weights
    and budget used (stored beside them), and the test report the environment made."""

    reward: float
    components: dict[str, float]
    weights: dict[str, float]
    report: TestReport | None = field(default=None, repr=False)


def critical_path_tokens(result) -> int:
    """Output tokens on the episode's critical path: per turn and round, the longest agent's
    output when agents act at once, every agent's in a pipeline (they wait for each other)."""
    if result.shape == "sequential_pipeline":
        return sum(s["completion_tokens"] for s in result.steps)
    longest: dict[tuple[int, int], int] = {}
    for s in result.steps:
        key = (s["turn"], s["round"])
        longest[key] = max(longest.get(key, 0), s["completion_tokens"])
    return sum(longest.values())


def score_episode(
    result,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    budget: SpeedBudget = SpeedBudget(),  # noqa: B008
) -> Scored:
    """Score one finished episode (`agents.team.result.EpisodeResult`). Every caller scores
    through here (an episode played through `learner.episode.play`, which records the score):
    the task reward registered for the task's form (`TASK_REWARDS`), then speed and the joint
    reward.

    Coding uses the test report the environment made during the episode (`result.test_report`);
    the tests run here only when the episode's checker ran none. Writing's quality takes the
    environment's verdict (`result.success`) as its tests: `RewardWeights.verdict` of it is
    the verdict, the rest the length and reference scores (the component `verdict` keeps it).
    """
    task, work = result.task, work_of(result.task)
    report = result.test_report
    if report is None and work.tested and task.tests and parses(result.output):
        report = run_tests(result.output, task.tests, task.entry_point, given=task.preamble)
    components = TASK_REWARDS[work.name](result, report, weights)
    if not work.tested:  # the verdict is writing's tests: a share of quality
        components["verdict"] = float(result.success)
        components["quality"] = (1 - weights.verdict) * components["quality"] + (
            weights.verdict * components["verdict"]
        )
    critical = critical_path_tokens(result)
    budget_tokens = budget.tokens or result.token_budget
    components["critical_tokens"] = float(critical)
    components["tokens"] = float(sum(s["completion_tokens"] for s in result.steps))
    components["speed"] = speed_score(critical, budget_tokens)
    reward = joint_reward(components, components["speed"], weights)
    used = {f"w_{k}": float(v) for k, v in asdict(weights).items()}
    used["budget_tokens"] = float(budget_tokens)
    return Scored(reward, components, used, report)


def score_group(
    results,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    budget: SpeedBudget = SpeedBudget(),  # noqa: B008
    liked: Sequence[float] | None = None,
) -> list[Scored]:
    """Score the episodes of one group (G samples of one task) with `score_episode` and, given
    `liked` (each sample's preference h in [0, 1]), add what people prefer by `blend_human`
    (weight `weights.human`, each sample's outcome the environment's: the tests' share of points
    for a program, the verdict for writing, 1 when every section is non-empty, inside its bounds
    and not repeating another, else 0); the components keep `auto_reward`, `human_rating` (h)
    and `human_term` (what it added)."""
    scores = [score_episode(r, weights, budget) for r in results]
    if liked is not None:
        add_preference(scores, liked, weights.human)
    return scores


def add_preference(scores: list[Scored], liked: Sequence[float], weight: float) -> None:
    """Blend what people prefer into scored episodes of one task (`blend_human`, each one's
    outcome the environment's: the tests' share of points, or the verdict), in place; the
    components keep `auto_reward`, `human_rating` (h) and `human_term` (what it added)."""
    auto = [s.reward for s in scores]
    outcomes = [s.components.get("verdict", s.components.get("tests")) for s in scores]
    for s, h, r in zip(scores, liked, blend_human(auto, liked, outcomes, weight), strict=True):
        s.components.update(auto_reward=s.reward, human_rating=float(h), human_term=r - s.reward)
        s.reward = r


def store_scored(db: Database | str | Path, episode_id: int, scored: Scored) -> None:
    """Record a scored episode's components and joint reward (replacing any earlier ones)."""
    if isinstance(db, Database):
        store.record_rewards(db, episode_id, scored.components, scored.reward, scored.weights)
    else:
        with store.open_db(db) as database:
            store.record_rewards(
                database, episode_id, scored.components, scored.reward, scored.weights
            )
