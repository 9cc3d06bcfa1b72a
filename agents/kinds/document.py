"""A sectioned document: a long-form article from an outline (agents/team/outline.py), curated
or a person's own. Each writer owns sections of the outline and stops where a teammate's begin
or where it loops (`outline.writer_stop`), and goes on with an own section it left out
(agents/team/writer.py `go_on`); the sections are kept by owner, repeats dropped, and assembled
under the title. Its notes are writing's (`WritingWork.assess`)."""

from __future__ import annotations

from agents.kinds.work import StopWhen
from agents.kinds.writing import WritingWork
from agents.tasks import Task
from agents.team.combine import CombinedCode
from agents.team.outline import assemble, document_sections, outline_of, writer_stop
from agents.team.roles import LONGFORM_MAX_TOKENS, TASK_FRAMES, Role, longform_roles
from agents.team.sentences import drop_repeats
from agents.team.writer import go_on


class DocumentWork(WritingWork):
    name = "longform"
    max_tokens = LONGFORM_MAX_TOKENS  # each writer stops at its own share (`token_share`)
    solo = "document_writer"

    def frame(self, task: Task) -> str:
        return TASK_FRAMES["longform"]

    def line_up(self, task: Task, size: int) -> list[str]:
        if size > len(task.extra["outline"]):
            raise ValueError(f"{size} agents for {len(task.extra['outline'])} sections")
        return ["section_writer"] * size

    def roles(
        self, task: Task, names: list[str], shape: str, prompts: dict[str, str]
    ) -> list[Role]:
        if names[0] in ("document_writer", "section_writer"):
            return longform_roles(task, names, prompts)
        return super().roles(task, names, shape, prompts)

    def combine(
        self, task: Task, shape: str, roles: list[Role], texts: list[str]
    ) -> tuple[CombinedCode | None, str]:
        outline = outline_of(task)
        sections = drop_repeats(document_sections(texts, outline, [r.sections for r in roles]))
        return None, assemble(task.extra["title"], outline, sections)

    def stop_for(self, task: Task, role: Role) -> StopWhen | None:
        return writer_stop(outline_of(task), role.sections)

    def go_on(self, policy, task, role, request, stop_when, text, completion, stream):
        return go_on(policy, request, role, outline_of(task), stop_when, text, completion, stream)


DOCUMENT = DocumentWork()
