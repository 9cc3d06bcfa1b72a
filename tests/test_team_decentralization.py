"""Decentralized execution: each agent's request carries its own observation and never another
agent's output, except where its shape shows teammates' work on purpose (sequential_pipeline:
the agents before it, this turn; one_round_discussion: the others' first drafts, when revising)."""

import re
import threading

import pytest

from agents.tasks import humaneval_task, writing_prompt_task
from agents.team.episode import run_episode
from agents.team.feedback import CodeCheck
from agents.team.graph import TeamSettings
from agents.team.roles import SHAPES
from tests.scripted import ScriptedPolicy, adapters, agent_of

MARK = re.compile(r"MARK-a(\d)-c(\d+)")  # agent, call number of that agent


class MarkingPolicy(ScriptedPolicy):
    """Every reply carries a mark naming its author and call, so leaks can be traced."""

    def __init__(self, kind: str):
        self.calls: dict[int, int] = {}
        self.lock = threading.Lock()
        self.log: list[tuple[int, int, str]] = []  # (agent, call, request text)
        super().__init__(self.reply)
        self.kind = kind

    def reply(self, request) -> str:
        agent = agent_of(request)
        with self.lock:
            call = self.calls[agent] = self.calls.get(agent, -1) + 1
            text = "\n".join(m["content"] for m in request.messages)
            self.log.append((agent, call, text))
        mark = f"MARK-a{agent}-c{call}"
        if self.kind == "coding":
            return f"```python\ndef f{agent}():\n    return '{mark}'\n```"
        return f"{mark} " + "word " * 5  # short: every turn gets feedback, so all turns run


def never_done(code, task):
    return CodeCheck(passed=False, messages=["the tests did not run"])


SIZES = [(shape, n) for shape in SHAPES for n in ([1] if shape == "single" else [2, 3, 4])]


@pytest.mark.parametrize("kind", ["coding", "writing"])
@pytest.mark.parametrize(("shape", "size"), SIZES)
def test_each_agent_sees_only_what_its_shape_allows(kind, shape, size, tmp_path):
    task = humaneval_task(0) if kind == "coding" else writing_prompt_task("Write about tea.")
    policy = MarkingPolicy(kind)
    turns = 2
    run_episode(
        task,
        policy,
        TeamSettings(shape=shape, agents=size, turns=turns, adapters=adapters(size)),
        checker=never_done,
        db=tmp_path / "d.db",
    )
    rounds = 2 if shape == "one_round_discussion" else 1
    assert len(policy.log) == size * rounds * turns
    for agent, call, text in policy.log:
        turn, round_ = divmod(call, rounds)
        seen = {(int(a), int(c)) for a, c in MARK.findall(text)}
        # its own history: its answer of the previous turn, and its draft when revising
        own = set()
        if turn > 0 and round_ == 0:
            own.add((agent, call - 1))
        if round_ == 1:
            own.add((agent, call - 1))
        allowed = set(own)
        if shape == "sequential_pipeline":  # this turn's work of the agents before it
            allowed |= {(j, turn) for j in range(agent)}
        if shape == "one_round_discussion" and round_ == 1:  # the others' first drafts
            allowed |= {(j, call - 1) for j in range(size) if j != agent}
        assert seen == allowed, f"agent {agent}, call {call} saw {sorted(seen)}"
