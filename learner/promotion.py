"""The promotion gate: a candidate team (new adapter versions) is compared with the serving team on
the gate's own validation split and promoted only when it is better.

Both teams run the `parallel` shape on the same validation tasks (agents/tasks.py: never the tasks
the evaluation calls held out, never trained on), concurrently: one greedy answer each (the
default), or `samples` answers sampled as the app samples the answers a person sees (T = 0.8),
drawn with the same seeds for both teams. Each task gives a pair (candidate, serving) of joint
rewards, its answers' mean, scored with the training run's own reward weights. The candidate
passes when its joint reward is higher — the mean paired difference is above `min_gain` (0 by
default) and a one-sided Wilcoxon signed-rank test on the differences gives p < `reward_alpha` (a
tie, or the timing noise of a candidate that changed nothing, fails) — and, on coding tasks, its
pass rate is not lower by more than `pass_margin` and not significantly lower: an exact one-sided
sign test on the tasks where the two teams' pass shares differ (with one answer each, McNemar's),
p >= `alpha`. Promotion then goes through the registry's hot-swap (learner/registry.py).

The joint reward is the one the run trained on: the automatic reward plus, when ratings count,
what people prefer (the preference model refit on every stored rating of the kind, at the weight
its skill earns, `learner.rewards.add_preference`: a task's answers, both teams', are a group, and
the preference moves an answer only against one the environment scored alike). So a retrain that
learnt a rated taste and kept the tests is promoted; the automatic reward alone is kept beside it
(`candidate_auto`, `active_auto`) and shown.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scipy import stats

import store
from agents.kinds import work_of
from agents.serving.policy import PolicyClient
from agents.tasks import Task, TaskSet, split_tasks
from agents.team.graph import TeamSettings, judged_sampling
from learner.config import GateSettings
from learner.episode import EpisodeSetup, play
from learner.preference import PreferenceModel, run_preference_model
from learner.registry import adapter_name, ensure_loaded, load_version, promote, work_kind
from learner.reward_config import RewardWeights, SpeedBudget
from learner.rewards import Scored, add_preference


@dataclass
class GateResult:
    """The paired outcome on the validation tasks and the decision it implies."""

    candidate_rewards: list[float]  # the joint reward the run trained on, preference included
    active_rewards: list[float]
    # each task's share of answers that passed its tests (one answer: 0 or 1); None: no tests
    candidate_passed: list[float | None]
    active_passed: list[float | None]
    settings: GateSettings = field(default_factory=GateSettings)
    candidate_auto: list[float] | None = None  # the automatic reward alone (None: the same)
    active_auto: list[float] | None = None
    preference_weight: float = 0.0  # the preference's weight in the rewards above

    @property
    def tasks(self) -> int:
        return len(self.candidate_rewards)

    @property
    def candidate_score(self) -> float:
        return _mean(self.candidate_rewards)

    @property
    def active_score(self) -> float:
        return _mean(self.active_rewards)

    @property
    def reward_gain(self) -> float:
        """Mean of the per-task differences candidate − serving."""
        diffs = [c - a for c, a in zip(self.candidate_rewards, self.active_rewards, strict=True)]
        return _mean(diffs)

    @property
    def reward_gain_p(self) -> float:
        """One-sided p-value of the reward gain (Wilcoxon signed-rank on the paired differences,
        ties dropped); 1.0 when every pair ties."""
        diffs = [c - a for c, a in zip(self.candidate_rewards, self.active_rewards, strict=True)]
        if not any(abs(d) > 1e-12 for d in diffs):
            return 1.0
        return float(stats.wilcoxon(diffs, zero_method="wilcox", alternative="greater").pvalue)

    @property
    def pass_drop_p(self) -> float:
        """One-sided p-value that the candidate passes fewer tests (exact sign test on the tasks
        where the two teams' pass shares differ; with one answer each, McNemar's test); 1.0 when
        they never differ or nothing is tested."""
        pairs = [
            (c, a)
            for c, a in zip(self.candidate_passed, self.active_passed, strict=True)
            if c is not None and a is not None and c != a
        ]
        if not pairs:
            return 1.0
        worse = sum(1 for c, a in pairs if c < a)
        return float(stats.binomtest(worse, len(pairs), 0.5, alternative="greater").pvalue)

    @property
    def pass_rates(self) -> tuple[float | None, float | None]:
        """(candidate, serving) share of the tested tasks passed; None without tests."""
        tested = [c for c in self.candidate_passed if c is not None]
        serving = [a for a in self.active_passed if a is not None]
        return (_mean(tested) if tested else None, _mean(serving) if serving else None)

    @property
    def within_pass_margin(self) -> bool:
        candidate, serving = self.pass_rates
        if candidate is None or serving is None:
            return True
        return candidate >= serving - self.settings.pass_margin - 1e-9

    @property
    def passed(self) -> bool:
        s = self.settings
        significant = s.min_gain < 0 or self.reward_gain_p < s.reward_alpha
        return (
            self.reward_gain > s.min_gain
            and significant
            and self.pass_drop_p >= s.alpha
            and self.within_pass_margin
        )

    def to_json(self) -> dict:
        candidate_rate, serving_rate = self.pass_rates
        candidate_auto = self.candidate_auto or self.candidate_rewards
        active_auto = self.active_auto or self.active_rewards
        return {
            "tasks": self.tasks,
            "candidate_score": self.candidate_score,
            "active_score": self.active_score,
            "reward_gain": self.reward_gain,
            "candidate_auto_score": _mean(candidate_auto),
            "active_auto_score": _mean(active_auto),
            "preference_weight": self.preference_weight,
            "candidate_pass_rate": candidate_rate,
            "active_pass_rate": serving_rate,
            "reward_gain_p": self.reward_gain_p,
            "pass_drop_p": self.pass_drop_p,
            "settings": asdict(self.settings),
            "passed": self.passed,
        }


def describe_gate(gate: dict) -> str:
    """A gate decision's figures in words: the reward the run trained on (preference included)
    and, when ratings counted, the automatic reward alone and the pass rates beside it."""
    samples = gate.get("settings", {}).get("samples", 1)
    text = (
        f"candidate {gate['candidate_score']:.3f} vs serving {gate['active_score']:.3f} "
        f"on {gate['tasks']} validation task(s)"
        + (f" x {samples} sampled answers" if samples > 1 else "")
    )
    if gate.get("preference_weight"):
        text += (
            f" (ratings at weight {gate['preference_weight']:.2f}; automatic reward alone "
            f"{gate['candidate_auto_score']:.3f} vs {gate['active_auto_score']:.3f})"
        )
    if gate.get("candidate_pass_rate") is not None:
        text += (
            f"; tests passed {gate['candidate_pass_rate']:.0%} vs {gate['active_pass_rate']:.0%}"
        )
    return text


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def validation_tasks(task_set: TaskSet, limit: int, fold: str | None = None) -> list[Task]:
    """The gate's own tasks: the validation split (agents/tasks.py; HumanEval's by `fold`), the
    first `limit`."""
    return split_tasks(task_set, "validation", fold)[:limit]


def paired_scores(
    client: PolicyClient,
    teams: tuple[list[str | None], list[str | None]],
    tasks: list[Task],
    db_path: str | Path | None,
    settings: GateSettings,
    weights: RewardWeights,
    budget: SpeedBudget,
    on_progress: Callable[[int, int], None] | None = None,
    turns: int = 1,
    preference: PreferenceModel | None = None,
) -> GateResult:
    """Run both teams on every task (episodes of up to `turns` turns, as the run trained),
    `settings.concurrency` episodes at a time: one greedy answer each, or `settings.samples`
    answers sampled as the app samples, the two teams' answers to a task drawn with the same
    seeds. Score each answer with the run's own weights and, given `preference`, what people
    prefer at its weight (see the module's docstring); a task's figures are its answers' means.
    `on_progress(done, total)` after each episode group."""
    total, done, lock = 2 * len(tasks), 0, threading.Lock()
    k = settings.samples

    def one(job: tuple[int, int]) -> list[tuple[Scored, str, bool | None]]:
        nonlocal done
        team, index = job
        task = tasks[index]
        sampling = judged_sampling(k, settings.max_tokens, seed=0)
        agents = teams[team]
        played_by = TeamSettings(
            agents=len(agents), turns=turns, adapters=agents, sampling=sampling
        ).for_task(index)
        setup = EpisodeSetup(task, played_by, weights, budget)
        played = play(setup, client, db=db_path, samples=k)
        with lock:
            done += 1
            if on_progress:
                on_progress(done, total)
        tested = work_of(task).tested
        return [
            (p.scored, p.result.output or "", bool(p.result.success) if tested else None)
            for p in played
        ]

    jobs = [(team, index) for index in range(len(tasks)) for team in (0, 1)]
    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        outcomes = dict(zip(jobs, pool.map(one, jobs), strict=True))
    weight = preference.blend_weight(weights) if preference is not None else 0.0

    def rewards(team: int) -> list[float]:  # each task's mean reward, as scored so far
        return [_mean(s.reward for s, _, _ in outcomes[(team, i)]) for i in range(len(tasks))]

    auto = [rewards(0), rewards(1)]  # before the preference is blended in
    for i in range(len(tasks)):
        answers = outcomes[(0, i)] + outcomes[(1, i)]
        if weight > 0:  # the task's answers, as a group of the run's would be blended
            liked = preference.group_preference([output for _, output, _ in answers])
            add_preference([scored for scored, _, _ in answers], liked, weight)

    def passed(team: int) -> list[float | None]:  # each task's share passed; None: no tests
        shares = [[p for _, _, p in outcomes[(team, i)]] for i in range(len(tasks))]
        return [None if None in p else _mean(p) for p in shares]

    return GateResult(
        candidate_rewards=rewards(0),
        active_rewards=rewards(1),
        candidate_passed=passed(0),
        active_passed=passed(1),
        settings=settings,
        candidate_auto=auto[0],
        active_auto=auto[1],
        preference_weight=weight,
    )


def gate(
    client: PolicyClient,
    candidates: dict[int, int],
    task_set: str,
    agents: int,
    db_path: str | Path | None = None,
    settings: GateSettings | None = None,
    weights: RewardWeights | None = None,
    budget: SpeedBudget | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    turns: int = 1,
    fold: str | None = None,
    incremental: bool = False,
) -> GateResult:
    """Score the candidate versions against the serving team on the validation split (HumanEval's
    or the classes' by the run's `fold`), in episodes of up to `turns` turns, with the reward the
    run trained on (ratings included; a class team's: `class_reward`, both teams in the run's
    shape: `incremental`)."""
    settings = settings or GateSettings()
    settings.check()
    weights = weights or RewardWeights()
    preference = run_preference_model(db_path, task_set, weights, fold)
    with store.open_db(db_path) as db:
        # the team serving this kind of work (a writing run is not judged against coders)
        active = ensure_loaded(db, client, agents, work_kind(task_set))
        rows = {agent: store.get_adapter(db, agent, v) for agent, v in candidates.items()}
    for agent, row in rows.items():
        load_version(client, adapter_name(agent, row["version"]), row["path"])
    candidate = [
        adapter_name(i, candidates[i]) if i in candidates else active[i] for i in range(agents)
    ]
    if task_set == "class":  # the class team on the validation classes, the class reward
        from learner.class_train import class_paired_scores, class_validation_problems

        problems = class_validation_problems(fold, settings.tasks)
        rewards, passed = class_paired_scores(
            client,
            (candidate, active),
            problems,
            db_path,
            settings,
            on_progress,
            turns,
            incremental,
        )
        return GateResult(
            candidate_rewards=rewards[0], active_rewards=rewards[1],
            candidate_passed=passed[0], active_passed=passed[1], settings=settings,
        )  # fmt: skip
    return paired_scores(
        client,
        (candidate, active),
        validation_tasks(task_set, settings.tasks, fold),
        db_path,
        settings,
        weights,
        budget or SpeedBudget(),
        on_progress,
        turns,
        preference,
    )


def decide(
    client: PolicyClient,
    candidates: dict[int, int],
    result: GateResult,
    db_path: str | Path | None = None,
    force: bool = False,
) -> bool:
    """Promote every candidate if the gate passed (or `force`), else reject them all."""
    with store.open_db(db_path) as db:
        for agent, version in candidates.items():
            store.update_adapter_metrics(db, agent, version, {"gate": result.to_json()})
        if result.passed or force:
            for agent, version in candidates.items():
                promote(db, client, agent, version)
            return True
        for agent, version in candidates.items():
            store.reject_adapter(db, agent, version)
        return False
