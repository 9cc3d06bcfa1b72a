"""One function: the coding team's work (a HumanEval problem, or a person's own function and
tests). Each agent writes the functions its role owns (agents/team/contract.py); the parts are
merged into one module by owner (agents/team/combine.py) and the sandbox runs its tests
(agents/team/feedback.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agents.kinds.work import Work
from agents.tasks import Task
from agents.team.combine import CombinedCode, combine_code, concat_code
from agents.team.feedback import Assessment, CodeChecker, assess_code, sandbox_check
from agents.team.roles import DEFAULT_MAX_TOKENS, TASK_FRAMES, TEAMS, Role, coding_roles


class FunctionWork(Work):
    name = "coding"
    tested = True
    max_tokens = DEFAULT_MAX_TOKENS
    solo, member = "solo", "coder"
    checker = staticmethod(sandbox_check)

    def frame(self, task: Task) -> str:
        return TASK_FRAMES["coding"]

    def line_up(self, task: Task, size: int) -> list[str]:
        return list(TEAMS["coding"][size])

    def roles(
        self, task: Task, names: list[str], shape: str, prompts: dict[str, str]
    ) -> list[Role]:
        return coding_roles(task, names, shape, prompts)

    def combine(
        self, task: Task, shape: str, roles: list[Role], texts: list[str]
    ) -> tuple[CombinedCode, str]:
        """By owner into the problem's module; naive_concat's parts as they are."""
        if shape == "naive_concat":
            combined = concat_code(texts)
        else:
            owners = [role.owns for role in roles]
            combined = combine_code(texts, owners, task.preamble, task.prompt)
        return combined, combined.code

    def assess(
        self,
        task: Task,
        roles: list[Role],
        texts: list[str],
        combined: CombinedCode | None,
        checker: CodeChecker,
        cut_off: Sequence[bool],
    ) -> Assessment:
        return assess_code(combined, roles, task, checker, cut_off)


FUNCTION = FunctionWork()
