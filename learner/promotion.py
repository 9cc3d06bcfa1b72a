"""The promotion gate: a candidate team (new adapter versions) is compared with the serving team on
a held-out slice and promoted only if it is not worse by more than a threshold.

Both teams run the `parallel` shape greedily on the same held-out tasks (HumanEval 0–31 for code,
the first XSum / abstract items for writing); the score is the mean joint reward. Promotion then
goes through the registry's hot-swap (learner/registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import store
from agents.feedback import sandbox_check
from agents.policy import PolicyClient
from agents.tasks import Task, abstract_tasks, humaneval_tasks, xsum_tasks
from agents.team import GREEDY, run_episode
from learner.registry import adapter_name, load_version, promote, serving_adapters
from learner.rewards import score_episode


@dataclass
class GateResult:
    candidate_score: float
    active_score: float
    threshold: float
    tasks: int

    @property
    def passed(self) -> bool:
        return self.candidate_score >= self.active_score - self.threshold

    def to_json(self) -> dict:
        return {**self.__dict__, "passed": self.passed}


def held_out_tasks(task: str, limit: int) -> list[Task]:
    """The held-out slice the gate scores on (never used for training)."""
    source = {
        "coding": lambda: humaneval_tasks("held_out"),
        "summary": lambda: xsum_tasks()[:30],
        "expansion": lambda: abstract_tasks()[:30],
    }[task]
    return source()[:limit]


def team_score(
    client: PolicyClient,
    adapters: list[str | None],
    tasks: list[Task],
    db_path: str | Path | None,
    max_tokens: int = 256,
) -> float:
    """Mean joint reward of the parallel team with these adapters, greedy, over `tasks`."""
    rewards = []
    for task in tasks:
        result = run_episode(
            task,
            client,
            shape="parallel",
            agents=len(adapters),
            adapters=adapters,
            sampling=replace(GREEDY, max_tokens=max_tokens),
            db=db_path,
            **({"checker": sandbox_check} if task.kind == "coding" else {}),
        )
        rewards.append(score_episode(result, db=db_path).reward)
    return sum(rewards) / len(rewards)


def gate(
    client: PolicyClient,
    candidates: dict[int, int],
    task: str,
    agents: int,
    db_path: str | Path | None = None,
    limit: int = 8,
    threshold: float = 0.0,
) -> GateResult:
    """Score the candidate versions against the serving team on `limit` held-out tasks."""
    with store.open_db(db_path) as db:
        active = serving_adapters(db, agents)
        rows = {agent: store.get_adapter(db, agent, v) for agent, v in candidates.items()}
    for agent, row in rows.items():
        load_version(client, adapter_name(agent, row["version"]), row["path"])
    candidate = [
        adapter_name(i, candidates[i]) if i in candidates else active[i] for i in range(agents)
    ]
    tasks = held_out_tasks(task, limit)
    return GateResult(
        candidate_score=team_score(client, candidate, tasks, db_path),
        active_score=team_score(client, active, tasks, db_path),
        threshold=threshold,
        tasks=len(tasks),
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
