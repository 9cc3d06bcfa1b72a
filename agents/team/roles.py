"""Every prompt the agents see, in one place: role instructions, team line-ups, and the frames
around the task, teammates' work and feedback.

A role has two texts: its instructions (the system prompt) and its ask, one line that closes the
user message and says again what to write now (a 0.5B model follows the last line it reads: with
the ask, the helper author wrote `aux` in 10 of 12 HumanEval problems instead of 1 of 12).
Placeholders in braces are filled per task:
`{entry}` (the function to write), `{n}` (team size), `{helpers}` (the helper functions the
team's helper authors write), `{document}` (what the team writes), `{sections}` (the team's
sections in order, with "(you)" after this agent's), `{words}` (the section's target length),
`{each}` (" each" after it where a long-form writer has several sections).

Change a prompt by passing `prompts={"helper": "...", "helper/ask": "...", ...}` to
`agents.kinds.team_roles` (a role's name for its instructions, name + "/ask" for its ask), or put
the same mapping in a JSON file and load it with `load_prompts(path)` (the CLI's
`--roles-file`). Texts not given keep the defaults below.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from agents.tasks import Task, entry_signature
from agents.team.contract import (
    OWNS,
    arguments_of,
    code_title,
    coding_contract,
    coding_reply_start,
    fill,
    helper_calls,
    helper_functions,
)

SHAPES = (
    "parallel",
    "single",
    "naive_concat",
    "sequential_pipeline",
    "one_round_discussion",
    "scaffolded",
)
# `scaffolded` is `parallel` with the coding scaffold of agents/team/contract.py: the environment
# writes the entry author's call of the helper and begins the helper author's reply with the
# whole problem posed for `aux`. A named option, to compare with; on writing tasks it is
# `parallel`. No figure that claims cooperation is measured with it.
SCAFFOLDED = "scaffolded"
# a class team's shapes (agents/kinds/class_team.py plays them; here, beside the others, so the
# command line lists them without importing the class team's graph)
CLASS_SHAPES = (
    "single",
    "single_incremental",
    "parallel",
    "parallel_incremental",
    "sequential_pipeline",
    "one_round_discussion",
)
MAX_AGENTS = 4
MAX_TURNS = 4  # the most turns the Co-code/Co-write pages and a training run give an episode

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
    # the helper author is asked as a single programmer is: with the team-role wording the
    # scaffolded untrained team passed 20 of 32 held-out problems, with this one 25 (single: 26;
    # docs/runs/evaluation-log.md)
    "helper": (
        "You are an expert Python programmer. Complete the function `aux` for the problem "
        "below. Write the whole function, with any imports or helper functions it needs. You "
        "are the helper-function author in a team of {n}: you write only the helper function "
        "`aux`. A teammate writes `{entry}`, which calls your `aux`. " + CODE_FORMAT
    ),
    "helper2": (
        "You are the second helper-function author in a team of {n} Python programmers. The "
        "team divides the work by the interface contract in the message. Your part is only the "
        "helper function `aux2`, with exactly the contract's signature. Teammates write `{entry}` "
        "and `aux`. Do not write `{entry}` or `aux`. " + CODE_FORMAT
    ),
    "entry": (
        "You are the main-function author in a team of {n} Python programmers. The team divides "
        "the work by the interface contract in the message. Your part is only `{entry}`: it "
        "handles special cases and calls your teammates' {helpers} (already in the module) for "
        "the rest. Do not define {helpers} yourself, and keep the docstring to one line. "
        + CODE_FORMAT
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
    # -- writing: long-form documents (agents/team/outline.py deals out the outline's sections) --
    "document_writer": (
        'You are a skilled writer. Write the article "{title}" with these sections, in '
        "order:\n{outline}\nStart each section with its heading line exactly as given (## "
        "Heading) and write about {words} words under it, following its brief. {style}"
    ),
    "section_writer": (
        'You are one of {n} writers who together write the article "{title}", each writing '
        "different sections at the same time without seeing the others' text. The outline:\n"
        "{outline}\nYou write only {own}. Your teammates write {others}: leave their topics "
        "to them. Start each of your sections with its heading line exactly as given (## "
        "Heading) and write about {words} words under it, following its brief. {style}"
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

# The line that closes each role's user message: what to write, now.
ASKS: dict[str, str] = {
    "solo": "Now write the complete function `{entry}`.",
    "helper": "Now write the complete function `aux`.",
    "helper2": "Now complete only your function `aux2` above; do not write `{entry}` or `aux`.",
    "entry": "Now write only your function `{entry}`: handle special cases, call "
    "{helper_calls} for the core computation and return the answer; do not define {helpers}.",
    "tester": "Now write only the test function `test_{entry}()`.",
    "coder": "Now write your part of the solution.",
    "writer": "Now write the text ({words} words).",
    "document_writer": "Now write the whole article: {own}, about {words} words each.",
    "section_writer": "Now write only {own}, about {words} words{each}, and nothing else.",
    "member": "Now write your part ({words} words).",
    "summary": "Now write only the one-sentence summary ({words} words).",
    "elaboration": (
        "Now write only the paragraph of key facts and details ({words} words); do not begin "
        "with a summary sentence."
    ),
    "background": (
        "Now write only the background paragraph ({words} words): what led up to this and who "
        "is involved."
    ),
    "outlook": "Now write only the outlook: what happens next and why it matters ({words} words).",
    "approach": "Now write only the paragraph on the method and its results ({words} words).",
    "method": "Now write only the method paragraph ({words} words).",
    "results": "Now write only the results paragraph ({words} words).",
    "conclusion": "Now write only the conclusion ({words} words).",
    "introduction": "Now write only the introduction ({words} words).",
    "body": "Now write only the main body ({words} words).",
    "example": "Now write only the example ({words} words).",
}

# the scaffolded entry author's ask: its reply is begun with the call (agents/team/contract.py)
SCAFFOLD_ASKS = {
    "entry": "Now write only your function `{entry}` above, keeping its `return` of "
    "{helper_calls} (add a check for special cases before it only if one is needed); do not "
    "define {helpers}."
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

# -- the frames around what an agent sees ----------------------------------------------------

TASK_FRAMES = {
    "coding": "Problem:\n```python\n{prompt}```",
    "summary": "Article:\n{prompt}",
    "expansion": "Paper title: {prompt}",
    "longform": "Request: {prompt}",
    "free": "Request: {prompt}",
}
PREVIOUS_ANSWER = "Your answer last turn:\n{text}"
FEEDBACK = "Feedback on the team's result:\n{text}\n\nWrite your part again, improved."
NO_FEEDBACK = "Nothing to fix in your part; the team's result is not done yet."
TEAMMATES_BEFORE = "Your teammates before you wrote:\n\n{text}"
OWN_DRAFT = "Your first draft:\n{text}"
TEAMMATES_DRAFTS = (
    "Your teammates' first drafts:\n\n{text}\n\n"
    "Revise your part so that the team's work fits together: keep to your own role and write "
    "your whole part again."
)
TEAMMATE_PART = "[{title}]\n{text}"
# A small model sometimes goes on past its answer into a copy of the frames it was shown ("Feedback
# on the team's result: ..." inside a rewritten section, 14 of 44 second-turn long-form replies
# in one evaluation): its reply ends where it begins one of these headers.
FRAME_HEADERS = tuple(  # each header with its line's end, as the frame writes it
    frame.split("\n", 1)[0] + "\n"
    for frame in (PREVIOUS_ANSWER, FEEDBACK, TEAMMATES_BEFORE, OWN_DRAFT, TEAMMATES_DRAFTS)
)


def frame_echo(text: str) -> int | None:
    """Where `text` begins to copy one of the environment's frame headers, or None."""
    cuts = [at for at in (text.find(header) for header in FRAME_HEADERS) if at >= 0]
    return min(cuts) if cuts else None


@dataclass(frozen=True)
class Role:
    """One agent's part in a team: its name (stored with the episode), its label, its system
    prompt and the ask that closes its user message.

    Coding roles `own` the functions they write; writing roles have a target length in `words`;
    long-form writing roles own the outline `sections` they write (by position).
    """

    name: str
    title: str
    instructions: str
    ask: str
    owns: tuple[str, ...] = ()
    words: tuple[int, int] | None = None
    contract: str = ""  # coding: the team's interface contract, naming this agent's part
    problem: str | None = None  # the problem as this role sees it (None: the task's prompt)
    sections: tuple[int, ...] = ()  # long-form writing: the outline positions this role writes
    # where this agent's call ends early: a long-form writer stops when it starts a section
    # that is a teammate's (its heading line), rather than write it twice
    stop: tuple[str, ...] = ()
    # the opening of this agent's reply, written by the environment; the model continues it
    # (a coding agent's: the head of the function it owns, signature and docstring; scaffolded,
    # the helper's is its problem posed for `aux` and the entry author's goes on with the call
    # and `return`; a long-form writer's: its first section's heading)
    reply_start: str = ""


def _texts(name: str, shape: str, prompts: dict[str, str]) -> tuple[str, str]:
    """A role's instructions and ask before they are filled: `prompts`' or the defaults."""
    scaffold = shape == SCAFFOLDED
    default_ask = SCAFFOLD_ASKS.get(name, ASKS[name]) if scaffold else ASKS[name]
    return prompts.get(name, PROMPTS[name]), prompts.get(f"{name}/ask", default_ask)


def coding_roles(task: Task, names: list[str], shape: str, prompts: dict[str, str]) -> list[Role]:
    """A coding team's roles: each agent's functions, contract and the opening of its reply."""
    roles, scaffold, size = [], shape == SCAFFOLDED, len(names)
    helpers = helper_functions(names)
    signature = entry_signature(task)
    params = arguments_of(signature[0])
    values = {
        "entry": task.entry_point,
        "n": size,
        "helpers": " and ".join(f"`{h}`" for h in helpers) or "`aux`",
        "helper_calls": helper_calls(helpers, params) or "`aux`",
        "params": params,
    }
    for i, name in enumerate(names):
        instructions, ask = _texts(name, shape, prompts)
        problem = None
        owns = tuple(fill(o, entry=task.entry_point) for o in OWNS[name])
        contract = coding_contract(task, names, i, signature, scaffold)
        # every agent of the team sees the problem as posed and the contract; scaffolded, the
        # helper author sees the problem posed for `aux` (only the function's name replaced,
        # where it is defined or called: an entry point that is a word keeps its meaning in
        # the prose) and the entry author the problem's own code only
        if scaffold and name == "helper" and contract:
            name_used = rf"\b{re.escape(task.entry_point)}\b(?=\s*\()"
            problem = re.sub(name_used, "aux", task.prompt)
        if scaffold and name == "entry" and contract:
            problem = task.preamble
        roles.append(
            Role(
                name,
                code_title(name, task.entry_point),
                fill(instructions, **values),
                fill(ask, **values),
                owns,
                None,
                contract,
                problem,
                reply_start=coding_reply_start(task, names, i, signature, problem, scaffold),
            )
        )
    return roles


def writing_roles(task: Task, names: list[str], shape: str, prompts: dict[str, str]) -> list[Role]:
    """A writing team's roles: each agent's part of the document and its target length."""
    roles = []
    for i, name in enumerate(names):
        instructions, ask = _texts(name, shape, prompts)
        words = WORDS[name]
        values = {
            "n": len(names),
            "document": DOCUMENTS[task.form],
            "sections": ", ".join(
                f"{k + 1}. {TITLES[other]}" + (" (you)" if k == i else "")
                for k, other in enumerate(names)
            ),
            "words": f"{words[0]}-{words[1]}",
        }
        roles.append(
            Role(name, TITLES[name], fill(instructions, **values), fill(ask, **values), (), words)
        )
    return roles


def longform_roles(task: Task, names: list[str], prompts: dict[str, str]) -> list[Role]:
    """Long-form roles: each agent's sections from `assign_sections`, the others' named by
    heading, the outline (briefs of one's own sections) and the style sheet in every prompt."""
    from agents.team.outline import (
        STYLE_SHEET,
        assign_sections,
        outline_of,
        outline_text,
        section_opening,
    )

    outline, per_section = outline_of(task), section_words_of(task)
    owners = assign_sections(len(outline), len(names))
    headings = [f'"## {s["heading"]}"' for s in outline]
    roles = []
    for name, mine in zip(names, owners, strict=True):
        others = [headings[k] for k in range(len(outline)) if k not in mine]
        own = [headings[k] for k in mine]
        values = {
            "n": len(names),
            "title": task.extra["title"],
            "outline": outline_text(outline, mine if len(names) > 1 else (), team=len(names) > 1),
            "own": _and(own),
            "others": _and(others) or "nothing",
            "words": per_section,
            "each": " each" if len(mine) > 1 else "",
            "style": fill(STYLE_SHEET, title=task.extra["title"]),
        }
        instructions = fill(prompts.get(name, PROMPTS[name]), **values)
        ask = fill(prompts.get(f"{name}/ask", ASKS[name]), **values)
        low, high = round(0.6 * per_section * len(mine)), round(1.5 * per_section * len(mine))
        title = "; ".join(outline[k]["heading"] for k in mine)
        stop = stop_strings([outline[k]["heading"] for k in range(len(outline)) if k not in mine])
        # the reply begins with the writer's first heading: it starts on its own section
        begun = section_opening(outline[mine[0]])
        roles.append(
            Role(
                name,
                title,
                instructions,
                ask,
                words=(low, high),
                sections=tuple(mine),
                stop=stop,
                reply_start=begun,
            )
        )
    return roles


MAX_STOPS = 4  # the most stop strings the OpenAI-compatible API takes in one request


def stop_strings(headings: list[str]) -> tuple[str, ...]:
    """Where a long-form writer's call ends: a heading line of any level (`# X` is in `## X` and
    `### X`) naming a teammate's section as written, then, while there is room, in title case
    (a writer that repeats the outline as sub-headings writes "### ASCII Control Characters")."""
    forms = [f"# {h}" for h in headings] + [f"# {h.title()}" for h in headings]
    return tuple(dict.fromkeys(forms))[:MAX_STOPS]


# English prose is about 1.3 tokens a word in Qwen's tokenizer (a writer's lower bound of words
# in tokens); a long-form writer's share of tokens per word of its upper target adds a margin,
# plus a heading line per section.
# The tokens an agent call may take unless a person says otherwise, for a long-form document:
# each writer stops at its own share (`token_share`), so this only has to let the longest share
# finish, single's whole document at the default 600 words (1,504); teams and single get the same.
LONGFORM_MAX_TOKENS = 1536
DEFAULT_MAX_TOKENS = 256  # a function, a summary, a free-form part
PROSE_TOKENS_PER_WORD = 1.3
TOKENS_PER_WORD = 1.6
HEADING_TOKENS = 16


def team_size(shape: str, agents: int | str | None = None) -> int:
    """The team's size: `agents` when given (`role_names` refuses a size the shape cannot
    have), else 1 for `single` and 2 for the other shapes."""
    return int(agents) if agents is not None else (1 if shape == "single" else 2)


def size_from_setting(shape: str, size: int | str) -> int:
    """The size a team-size setting (the page's, `coteam eval --agents`) gives `shape`: the
    setting is for the team shapes, so `single` stays one agent."""
    return team_size(shape, None if shape == "single" else size)


def token_share(role: Role) -> int | None:
    """The most tokens a long-form writer needs for its sections: the upper end of its word target
    and a heading line each. None for other roles (the run's `max_tokens` alone caps them).
    A small model that falls into a loop stops at its share, not at the run's cap, so one
    looping section no longer holds up the team (or, for `single`, one section the document)."""
    if not role.sections or role.words is None:
        return None
    return math.ceil(role.words[1] * TOKENS_PER_WORD) + HEADING_TOKENS * len(role.sections)


def section_min_tokens(role: Role) -> int:
    """The tokens of a long-form writer's lower bound of words for one of its sections."""
    if not role.sections or role.words is None:
        return 0
    return math.ceil(role.words[0] / len(role.sections) * PROSE_TOKENS_PER_WORD)


def section_words_of(task: Task) -> int:
    """Target words per section of a long-form task."""
    return round(task.extra["target_words"] / len(task.extra["outline"]))


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def load_prompts(path: str | Path) -> dict[str, str]:
    """Read role prompt overrides from a JSON file: {"helper": "...", "helper/ask": "...", ...}."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise ValueError(f"{path}: expected a JSON object of role name -> prompt text")
    known = set(PROMPTS) | {f"{name}/ask" for name in ASKS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown roles {unknown}; known: {sorted(known)}")
    return data
