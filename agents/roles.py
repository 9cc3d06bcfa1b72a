"""Every prompt the agents see, in one place: role instructions, team line-ups, and the frames
around the task, teammates' work and feedback.

A role's instructions are its system prompt. Placeholders in braces are filled per task:
`{entry}` (the function to write), `{n}` (team size), `{helpers}` (the helper functions the
team's helper authors write), `{document}` (what the team writes), `{sections}` (the team's
sections in order, with "(you)" after this agent's), `{words}` (the section's target length).

Change a prompt by passing `prompts={"helper": "...", ...}` to `team_roles`, or put the same
mapping in a JSON file and load it with `load_prompts(path)` (the CLI's `--roles-file`). Names
not given keep the defaults below.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from agents.tasks import Task

SHAPES = ("parallel", "single", "naive_concat", "sequential_pipeline", "one_round_discussion")
MAX_AGENTS = 4

CODE_FORMAT = (
    "Answer with one ```python code block. No tests, examples, asserts or print statements "
    "outside functions."
)

PROMPTS: dict[str, str] = {
    # -- coding --
    "solo": (
        "You are an expert Python programmer. Complete the function `{entry}` for the problem "
        "below. Write the whole function, with any imports or helper functions it needs. "
        + CODE_FORMAT
    ),
    "helper": (
        "You are the helper-function author in a team of {n} Python programmers. A teammate "
        "writes the main function `{entry}`. Your job is only the helper function `aux`: a small "
        "function that does one useful sub-step of the problem below, for `{entry}` to call. "
        "Give `aux` a one-line docstring saying what it takes and returns. Do not write "
        "`{entry}`. " + CODE_FORMAT
    ),
    "helper2": (
        "You are the second helper-function author in a team of {n} Python programmers. A "
        "teammate writes the main function `{entry}`, another the helper `aux`. Your job is only "
        "the helper function `aux2`: a small function that does a different useful sub-step of "
        "the problem below, for `{entry}` to call. Give `aux2` a one-line docstring saying what "
        "it takes and returns. Do not write `{entry}` or `aux`. " + CODE_FORMAT
    ),
    "entry": (
        "You are the main-function author in a team of {n} Python programmers. Write the "
        "function `{entry}` that solves the problem below. Your teammates write the helper "
        "functions {helpers}, each doing a sub-step of the problem; call them where they help, "
        "and do not define them yourself. " + CODE_FORMAT
    ),
    "tester": (
        "You are the tester in a team of {n} Python programmers. Your teammates write `{entry}` "
        "and its helpers. Write only a test function `test_{entry}()` that checks `{entry}` "
        "with assert statements: the examples in the docstring and two or three edge cases. "
        "Do not implement `{entry}`. Answer with one ```python code block."
    ),
    "coder": (
        "You are one of {n} Python programmers who each work on the problem below at the same "
        "time, without seeing each other's work. A teammate may write a helper function `aux`. "
        "Write your part of the solution. " + CODE_FORMAT
    ),
    # -- writing: a whole document --
    "writer": (
        "You are a skilled writer. Write {document}. Aim for {words} words. Write only the text, "
        "without a title or headings."
    ),
    "member": (
        "You are one of {n} writers who each write part of {document}, at the same time and "
        "without seeing each other's work. Write your part in about {words} words, without a "
        "title or headings."
    ),
    # -- writing: sections (the team's document is its sections in this order) --
    "summary": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: one sentence ({words} words) that states the main point. "
        "No heading."
    ),
    "elaboration": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the key facts and details in one paragraph ({words} "
        "words). Do not restate a one-sentence summary. No heading."
    ),
    "background": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the background a reader needs (the problem or situation, "
        "who is involved, what led up to it) in one paragraph ({words} words). No heading."
    ),
    "outlook": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: what happens next and why it matters, in one short "
        "paragraph ({words} words). No heading."
    ),
    "approach": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: what the work does - its method and its main results - in "
        "one paragraph ({words} words). No heading."
    ),
    "method": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the method or approach the work takes, in one paragraph "
        "({words} words). No heading."
    ),
    "results": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the main results and findings, in one paragraph ({words} "
        "words). No heading."
    ),
    "conclusion": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the conclusion - what it means and what follows - in a "
        "few sentences ({words} words). No heading."
    ),
    "introduction": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: an introduction that sets out the topic and why it "
        "matters ({words} words). No heading."
    ),
    "body": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: the main body, with the substance and the details "
        "({words} words). No heading."
    ),
    "example": (
        "You write one section of {document}, in a team of {n}. The sections, in order: "
        "{sections}. Write only yours: one concrete example or illustration ({words} words). "
        "No heading."
    ),
}

# Who is on a team, in document order, by task form and team size.
TEAMS: dict[str, dict[int, list[str]]] = {
    "coding": {
        2: ["helper", "entry"],
        3: ["helper", "helper2", "entry"],
        4: ["helper", "helper2", "entry", "tester"],
    },
    "summary": {
        2: ["summary", "elaboration"],
        3: ["summary", "background", "elaboration"],
        4: ["summary", "background", "elaboration", "outlook"],
    },
    "expansion": {
        2: ["background", "approach"],
        3: ["background", "method", "results"],
        4: ["background", "method", "results", "conclusion"],
    },
    "free": {
        2: ["introduction", "body"],
        3: ["introduction", "body", "conclusion"],
        4: ["introduction", "body", "example", "conclusion"],
    },
}

# What a writing team produces, by form.
DOCUMENTS = {
    "summary": "a summary of the news article below",
    "expansion": "the abstract of a scientific paper with the title below",
    "free": "a response to the request below",
}

# Target length of each writing section in words (feedback notes fall outside it).
WORDS: dict[str, tuple[int, int]] = {
    "writer": (60, 220),
    "member": (30, 150),
    "summary": (8, 40),
    "elaboration": (40, 160),
    "background": (30, 120),
    "outlook": (20, 100),
    "approach": (50, 180),
    "method": (30, 130),
    "results": (30, 130),
    "conclusion": (20, 100),
    "introduction": (20, 100),
    "body": (60, 200),
    "example": (30, 150),
}

# Section labels, as teammates' prompts and the discussion name them.
TITLES = {
    "summary": "one-sentence summary",
    "elaboration": "key facts and details",
    "background": "background",
    "outlook": "outlook",
    "approach": "method and results",
    "method": "method",
    "results": "results",
    "conclusion": "conclusion",
    "introduction": "introduction",
    "body": "main body",
    "example": "example",
    "writer": "whole text",
    "member": "part",
}

# Function names each coding role writes; the combiner takes a function from its owner.
OWNS = {
    "solo": ("{entry}",),
    "helper": ("aux",),
    "helper2": ("aux2",),
    "entry": ("{entry}",),
    "tester": ("test_{entry}",),
    "coder": (),
}

# -- the frames around what an agent sees ----------------------------------------------------

TASK_FRAMES = {
    "coding": "Problem:\n```python\n{prompt}```",
    "summary": "Article:\n{prompt}",
    "expansion": "Paper title: {prompt}",
    "free": "Request: {prompt}",
}
PREVIOUS_ANSWER = "Your answer last turn:\n{text}"
FEEDBACK = "Feedback on the team's result:\n{text}\n\nWrite your part again, improved."
NO_FEEDBACK = "Nothing to fix in your part; the team's result is not done yet."
TEAMMATES_BEFORE = "Your teammates before you wrote:\n\n{text}\n\nNow write your part."
OWN_DRAFT = "Your first draft:\n{text}"
TEAMMATES_DRAFTS = (
    "Your teammates' first drafts:\n\n{text}\n\n"
    "Revise your part so that the team's work fits together. Keep to your own role and write "
    "your whole part again."
)
TEAMMATE_PART = "[{title}]\n{text}"


@dataclass(frozen=True)
class Role:
    """One agent's part in a team: its name (stored with the episode), label and system prompt.

    Coding roles `own` the functions they write; writing roles have a target length in `words`.
    """

    name: str
    title: str
    instructions: str
    owns: tuple[str, ...] = ()
    words: tuple[int, int] | None = None


def fill(template: str, **values: object) -> str:
    """Replace `{name}` for the names given and leave every other brace alone (code has many)."""
    return re.sub(
        r"\{(\w+)\}",
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        template,
    )


def role_names(task: Task, shape: str, size: int) -> list[str]:
    """The roles of a `size`-agent team of `shape` on `task`, in order."""
    if shape not in SHAPES:
        raise ValueError(f"unknown team shape {shape!r}: one of {', '.join(SHAPES)}")
    if shape == "single":
        if size != 1:
            raise ValueError(f"the single shape has one agent, not {size}")
        return ["solo" if task.kind == "coding" else "writer"]
    if not 2 <= size <= MAX_AGENTS:
        raise ValueError(f"a {shape} team has 2 to {MAX_AGENTS} agents, not {size}")
    if shape == "naive_concat":  # no coordinated roles: everyone gets the same prompt
        return ["coder" if task.kind == "coding" else "member"] * size
    return list(TEAMS["coding" if task.kind == "coding" else task.form][size])


def team_roles(
    task: Task, shape: str, size: int, prompts: dict[str, str] | None = None
) -> list[Role]:
    """The team's roles with their prompts filled in for `task`; `prompts` overrides defaults."""
    names = role_names(task, shape, size)
    templates = {**PROMPTS, **(prompts or {})}
    if task.kind == "coding":
        helpers = [f for name in names for f in OWNS[name] if name.startswith("helper")]
        values = {
            "entry": task.entry_point,
            "n": size,
            "helpers": " and ".join(f"`{h}`" for h in helpers) or "`aux`",
        }
        return [
            Role(
                name=name,
                title=_code_title(name, task.entry_point),
                instructions=fill(templates[name], **values),
                owns=tuple(fill(o, entry=task.entry_point) for o in OWNS[name]),
            )
            for name in names
        ]
    roles = []
    for i, name in enumerate(names):
        low, high = WORDS[name]
        sections = ", ".join(
            f"{k + 1}. {TITLES[other]}" + (" (you)" if k == i else "")
            for k, other in enumerate(names)
        )
        text = fill(
            templates[name],
            n=size,
            document=DOCUMENTS[task.form],
            sections=sections,
            words=f"{low}-{high}",
        )
        roles.append(Role(name=name, title=TITLES[name], instructions=text, words=(low, high)))
    return roles


def _code_title(name: str, entry: str) -> str:
    return {
        "solo": f"{entry}",
        "helper": "helper aux",
        "helper2": "helper aux2",
        "entry": f"main function {entry}",
        "tester": f"tests of {entry}",
        "coder": "programmer",
    }[name]


def load_prompts(path: str | Path) -> dict[str, str]:
    """Read role prompt overrides from a JSON file: {"role name": "instructions", ...}."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise ValueError(f"{path}: expected a JSON object of role name -> prompt text")
    unknown = sorted(set(data) - set(PROMPTS))
    if unknown:
        raise ValueError(f"{path}: unknown roles {unknown}; known: {sorted(PROMPTS)}")
    return data
