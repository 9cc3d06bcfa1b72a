"""A short piece of writing: a summary of an article, a paper's abstract from its title, a
response to a person's request. Each agent writes its part (`roles.TEAMS`, by the task's form);
the parts are joined in order, and the environment's notes are on each part's length, emptiness
and repeats (agents/team/feedback.py `assess_writing`)."""

from __future__ import annotations

from collections.abc import Sequence

from agents.kinds.work import Work
from agents.tasks import Task
from agents.team.combine import CombinedCode, combine_sections
from agents.team.feedback import Assessment, CodeChecker, assess_writing, parse_check
from agents.team.roles import DEFAULT_MAX_TOKENS, TASK_FRAMES, TEAMS, Role, writing_roles


class WritingWork(Work):
    name = "writing"
    max_tokens = DEFAULT_MAX_TOKENS
    solo, member = "writer", "member"
    checker = staticmethod(parse_check)  # no program: nothing for a sandbox to run

    def frame(self, task: Task) -> str:
        return TASK_FRAMES[task.form]

    def line_up(self, task: Task, size: int) -> list[str]:
        return list(TEAMS[task.form][size])

    def roles(
        self, task: Task, names: list[str], shape: str, prompts: dict[str, str]
    ) -> list[Role]:
        return writing_roles(task, names, shape, prompts)

    def combine(
        self, task: Task, shape: str, roles: list[Role], texts: list[str]
    ) -> tuple[CombinedCode | None, str]:
        return None, combine_sections(texts)

    def assess(
        self,
        task: Task,
        roles: list[Role],
        texts: list[str],
        combined: CombinedCode | None,
        checker: CodeChecker,
        cut_off: Sequence[bool],
    ) -> Assessment:
        return assess_writing(texts, roles, cut_off)


WRITING = WritingWork()
