"""What a kind of work answers for the team that does it, so that the graph
(agents/team/graph.py), `play`, the learner and the page ask it instead of branching on a task's
kind and form. `agents.kinds.work_of(task)` is the one place that reads them.

The team graph plays three kinds: one function (`function.py`), a short piece of writing
(`writing.py`) and a sectioned document (`document.py`). A class has a team of its own
(`class_team.py`, with its problems in `classes.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.serving.policy import Completion, Request
    from agents.tasks import Task
    from agents.team.combine import CombinedCode
    from agents.team.feedback import Assessment, CodeChecker
    from agents.team.roles import Role

StopWhen = Callable[[str], "int | None"]


class Work:
    """One kind of work. A subclass sets the names below and answers each question for its
    tasks; a method that is not overridden is the kind that has nothing to add."""

    name: str  # the task reward's key (learner/rewards.py `TASK_REWARDS`)
    tested: bool = False  # the team's result is a program whose tests the judge runs
    max_tokens: int  # an agent call's tokens unless a person says otherwise
    solo: str  # `single`'s role
    member: str  # naive_concat's role: everyone gets the same prompt
    checker: CodeChecker  # what judges the result wherever the tests count

    def frame(self, task: Task) -> str:
        """The frame around the task in every agent's view (`roles.TASK_FRAMES`)."""
        raise NotImplementedError

    def line_up(self, task: Task, size: int) -> list[str]:
        """A coordinated team's roles, in order."""
        raise NotImplementedError

    def roles(
        self, task: Task, names: list[str], shape: str, prompts: dict[str, str]
    ) -> list[Role]:
        """The roles named `names` with their prompts filled in for `task`."""
        raise NotImplementedError

    def combine(
        self, task: Task, shape: str, roles: list[Role], texts: list[str]
    ) -> tuple[CombinedCode | None, str]:
        """The agents' latest parts joined: (the combined program, if any; the team's output)."""
        raise NotImplementedError

    def assess(
        self,
        task: Task,
        roles: list[Role],
        texts: list[str],
        combined: CombinedCode | None,
        checker: CodeChecker,
        cut_off: Sequence[bool],
    ) -> Assessment:
        """The environment's verdict on a turn and each agent's feedback."""
        raise NotImplementedError

    def stop_for(self, task: Task, role: Role) -> StopWhen | None:
        """Where an agent's reply is cut while it streams, beyond its stop strings (None:
        nowhere; `Request.stop_when`)."""
        return None

    def go_on(
        self,
        policy: Any,
        task: Task,
        role: Role,
        request: Request,
        stop_when: StopWhen | None,
        text: str,
        completion: Completion,
        stream: Callable,
    ) -> tuple[str, Completion]:
        """An agent's reply after whatever more it must write (nothing, unless overridden)."""
        return text, completion
