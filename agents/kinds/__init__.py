"""The kinds of work a team does, each whole in its own module (agents/kinds/work.py), and what
a team is made of for a task: `work_of`, `role_names`, `team_roles`."""

from __future__ import annotations

from agents.kinds.document import DOCUMENT
from agents.kinds.function import FUNCTION
from agents.kinds.work import Work
from agents.kinds.writing import WRITING
from agents.tasks import Task
from agents.team.roles import MAX_AGENTS, SHAPES, Role

# by the name a store, a reward and the page use for it
WORKS: dict[str, Work] = {work.name: work for work in (FUNCTION, WRITING, DOCUMENT)}


def work_of(task: Task) -> Work:
    """`task`'s kind of work: the one place that reads a task's kind and form."""
    if task.kind == "coding":
        return FUNCTION
    return DOCUMENT if task.form == "longform" else WRITING


def role_names(task: Task, shape: str, size: int) -> list[str]:
    """The roles of a `size`-agent team of `shape` on `task`, in order: its kind of work's
    solo role, naive_concat's members, or its coordinated line-up."""
    if shape not in SHAPES:
        raise ValueError(f"unknown team shape {shape!r}: one of {', '.join(SHAPES)}")
    work = work_of(task)
    if shape == "single":
        if size != 1:
            raise ValueError(f"the single shape has one agent, not {size}")
        return [work.solo]
    if not 2 <= size <= MAX_AGENTS:
        raise ValueError(f"a {shape} team has 2 to {MAX_AGENTS} agents, not {size}")
    if shape == "naive_concat":  # no coordinated roles: everyone gets the same prompt
        return [work.member] * size
    return work.line_up(task, size)


def team_roles(
    task: Task, shape: str, size: int, prompts: dict[str, str] | None = None
) -> list[Role]:
    """The team's roles with their prompts filled in for `task` by its kind of work;
    `prompts` overrides defaults."""
    return work_of(task).roles(task, role_names(task, shape, size), shape, prompts or {})
