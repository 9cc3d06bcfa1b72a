"""What an episode leaves: `Step`, one agent call with the exact messages the agent saw and what
it wrote, and `EpisodeResult`, the finished episode (every step, the team's output and verdict)
that `agents.team.episode.run_episode` returns and the learner and the evaluation score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from agents.judge.testrun import TestReport
from agents.serving.policy import Completion
from agents.tasks import Task
from agents.team.roles import Role


class Step(TypedDict):
    """One agent call: what the agent saw (its exact messages) and what it wrote."""

    agent: int
    role: str
    turn: int
    round: int  # 0; 1 for the revision of one_round_discussion
    messages: list[dict]
    text: str
    adapter: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None
    completion: Completion  # everything the server returned for this call


@dataclass
class EpisodeResult:
    """A finished episode: every agent call with its exact messages, and the team's result."""

    episode_id: int
    task_id: int
    task: Task
    shape: str
    roles: list[Role]
    adapters: list[str | None]
    steps: list[Step]  # in order of turn, round, agent
    output: str
    success: bool
    turns: int
    wall_time_s: float
    assessments: list[dict] = field(default_factory=list)
    token_budget: int = 256  # a single agent's output-token budget: per-call limit × turn limit

    @property
    def test_report(self) -> TestReport | None:
        """The environment's test run on the final output (None if its checker ran no tests)."""
        return self.assessments[-1].get("report") if self.assessments else None

    def calls(self, agent: int | None = None, turn: int | None = None) -> list[Completion]:
        """What the server returned for the calls of `agent` at `turn` (every call: None), in
        order."""
        return [
            s["completion"]
            for s in self.steps
            if (agent is None or s["agent"] == agent) and (turn is None or s["turn"] == turn)
        ]

    def final_steps(self) -> list[Step]:
        """Each agent's last call, by agent index: the parts the final output was made from."""
        last = {step["agent"]: step for step in self.steps}
        return [last[i] for i in range(len(self.roles))]

    def summary(self) -> dict:
        """The episode as one JSON-ready dict (what `coteam episode --json` prints); agents are
        numbered from 1 there, as on the page and in adapter names."""
        agents = []
        for i, (role, adapter) in enumerate(zip(self.roles, self.adapters, strict=True)):
            own = [s for s in self.steps if s["agent"] == i]
            last = own[-1]["messages"][-1]
            agents.append(
                {
                    "agent": i + 1,
                    "role": role.name,
                    "adapter": adapter,
                    # what the environment began the reply with; `text` starts with it, and the
                    # rest is what the agent's model wrote
                    "opening": last["content"] if last["role"] == "assistant" else "",
                    "text": own[-1]["text"],
                    "prompt_tokens": sum(s["prompt_tokens"] for s in own),
                    "completion_tokens": sum(s["completion_tokens"] for s in own),
                    "latency_s": round(sum(s["latency_s"] for s in own), 3),
                    "calls": len(own),
                }
            )
        return {
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "task": {
                "kind": self.task.kind,
                "form": self.task.form,
                "source": self.task.source,
                "source_id": self.task.source_id,
            },
            "shape": self.shape,
            "agents": agents,
            "output": self.output,
            "success": self.success,
            "tests": (
                {
                    "passed": self.test_report.passed,
                    "total": self.test_report.total,
                    "error": self.test_report.error,
                    "results": self.test_report.to_dict()["tests"],
                }
                if self.test_report is not None
                else None
            ),
            "turns": self.turns,
            "wall_time_s": round(self.wall_time_s, 3),
        }
