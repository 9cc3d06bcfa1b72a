"""Long-form writing: who writes which section, and the document the sections make.

A long-form task (`Task.form == "longform"`) carries an outline: sections with a heading, a
one-line brief and, in the default outline, a lead (the words the section's text begins with).
The environment deals the sections out to the team in document order, in contiguous runs as
even as possible (4 agents: one each; 2: two each; 3: 1, 1, 2). Every agent sees the whole
outline (every heading, the briefs of its own sections only, never a teammate's text), which
sections are its own, and the shared style sheet, so parts written at the same time still fit
together.

Each agent answers with its sections, each under a `## Heading` line. The document keeps each
section from its owner only: a heading an agent writes that is not its own is a role violation
and is dropped, as is text outside any owned heading.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import re
from collections.abc import Callable, Sequence

from agents.tasks import LEAD_MARK, Task

# One style sheet for every writer of a document: the consistency the reward checks for.
STYLE_SHEET = (
    "Style sheet (every writer follows it): third person, plain and neutral, present tense "
    "for facts and past tense for history; never 'I', 'we' or 'you'. Call the subject "
    '"{title}" the same way throughout. Format: plain paragraphs under each `## Heading` '
    "line; no title, no bullet lists, no sub-headings, no summary of other sections."
)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s*(.+?)\s*#*\s*$", re.M)


# A person's plain request (no sections named): one planning call names the parts, in JSON a
# grammar holds it to (the 0.5B model asked for `Heading: brief` lines wrote the article instead,
# 12 of 12 times), and the environment writes each part's brief and lead around its heading: the
# planner's own briefs and leads restated the subject's definition in every part, and so did
# every writer begun from them (docs/runs/evaluation-log.md).
PLAN_SYSTEM = (
    "You plan documents; you never write them. Name the {n} parts a reader needs to get what "
    "the request asks for, in reading order, the first one introducing it. Each heading is a "
    "short noun phrase, two to six words, naming one part of what was asked; no two parts "
    "alike, no question, no 'Conclusion'."
)
PLAN_MAX_TOKENS = 160
# a heading a lead can continue: words, no question mark, no colon or bar (an outline line's marks)
PLAN_HEADING = r"^[A-Za-z0-9][A-Za-z0-9 ,'&()/-]*$"
PLAN_FIRST_BRIEF = "What it is, plainly, and who it matters to. Only this section defines it."
PLAN_BRIEF = "Only {part}: the first section has defined the subject, so this one does not."
# the words each later part's text begins with, by its place (cycled): each takes the writer
# into its own part's matter, not to the subject's definition
PLAN_LEADS = ("When it comes to {part},", "As for {part},", "Turning to {part},")


def plan_schema(n: int) -> dict:
    """The JSON the `n` headings of a plan are written in."""
    heading = {"type": "string", "minLength": 3, "maxLength": 48, "pattern": PLAN_HEADING}
    return {
        "type": "object",
        "properties": {
            "headings": {"type": "array", "items": heading, "minItems": n, "maxItems": n}
        },
        "required": ["headings"],
        "additionalProperties": False,
    }


def plan_outline(policy, request: str, n: int = 4) -> tuple[str | None, str, int]:
    """The sections planned for a plain `request`, as `Heading: brief | begins: lead` lines
    (what `agents.tasks.longform_prompt_task` takes; None when the plan is not `n` distinct
    headings: the caller keeps the default outline), the planning call's reply and its output
    tokens. The model names the parts (`PLAN_SYSTEM`); each part's brief and lead are the
    environment's (`planned_lines`)."""
    import json

    from agents.serving.policy import Request

    messages = [
        {"role": "system", "content": PLAN_SYSTEM.format(n=n)},
        {"role": "user", "content": f"Request: {request.strip()}\nName its {n} parts."},
    ]
    ask = Request(messages, max_tokens=PLAN_MAX_TOKENS, json_schema=plan_schema(n))
    [done] = policy.generate([ask])
    try:
        headings = [_one_line(h).replace(":", " -") for h in json.loads(done.text)["headings"]]
    except (ValueError, KeyError, TypeError, AttributeError):  # cut off at the token limit
        return None, done.text, done.completion_tokens
    names = {normalize(h) for h in headings}
    if len(headings) != n or len(names) != n or "" in names:
        return None, done.text, done.completion_tokens
    return "\n".join(planned_lines(headings, request)), done.text, done.completion_tokens


def planned_lines(headings: Sequence[str], request: str) -> list[str]:
    """An outline's lines for planned `headings`: the first defines the subject, with no lead;
    each later one is briefed to its heading alone and begun with a lead into its heading's
    matter ("As for the immune response,")."""
    names = set(re.findall(r"(?<!^)(?<![.!?] )\b([A-Z][\w'-]*)", request.strip()))
    lines = [f"{headings[0]}: {PLAN_FIRST_BRIEF}"]
    for k, heading in enumerate(headings[1:]):
        part = mid_sentence(heading, names)
        lead = PLAN_LEADS[k % len(PLAN_LEADS)].format(part=part)
        lines.append(f"{heading}: {PLAN_BRIEF.format(part=part)}{LEAD_MARK}{lead}")
    return lines


def mid_sentence(heading: str, names: set[str]) -> str:
    """A heading as words in a sentence: lower case but for names (those `names` holds, the
    request's capitalised words, or an acronym) and, in a heading written in sentence case
    ("Landing on the Moon's surface"), the capitals it gives a later word; in title case
    (every word of four letters or more capitalised: "Mission Details") every other word is
    lower-cased."""
    words = heading.split()
    title_case = all(w[0].isupper() for w in words if len(w) > 3)

    def name(word: str) -> bool:
        bare = word.removesuffix("'s").removesuffix("'")
        return bare in names or (bare.isupper() and bare.isalpha())

    return " ".join(
        w if name(w) or (k > 0 and not title_case) else w.lower() for k, w in enumerate(words)
    )


def _one_line(text: str) -> str:
    """A planned field on one line, without the mark a lead follows."""
    return " ".join(text.replace("|", "-").split())


def outline_of(task: Task) -> list[dict]:
    """The task's sections: [{"heading": ..., "brief": ...}, ...] in document order."""
    if task.form != "longform":
        raise ValueError(f"a {task.form} task has no outline")
    return list(task.extra["outline"])


def section_opening(section: dict) -> str:
    """How a writer's text for `section` begins, written by the environment: its heading line,
    then the section's lead where the outline gives one (the default outline's later sections:
    "The story begins in"), which the writer's model continues."""
    return f"## {section['heading']}\n\n{section.get('lead', '')}"


def assign_sections(sections: int, agents: int) -> list[list[int]]:
    """Section indices per agent: contiguous runs in order, the longer runs last."""
    if agents < 1:
        raise ValueError("a team has at least one agent")
    base, extra = divmod(sections, agents)
    sizes = [base + (1 if i >= agents - extra else 0) for i in range(agents)]
    starts = [sum(sizes[:i]) for i in range(agents)]
    return [list(range(s, s + n)) for s, n in zip(starts, sizes, strict=True)]


def outline_text(
    outline: Sequence[dict], mine: Sequence[int] = (), mark: str = "(yours)", team: bool = False
) -> str:
    """The outline as numbered lines `n. ## Heading - brief`, with `mark` after owned sections.
    For a member of a team (`team`), a teammate's section is its heading alone: the brief is the
    owner's material, and a writer shown it retells it in its own section."""
    lines = []
    for k, section in enumerate(outline):
        owner = f" {mark}" if k in mine else ""
        shown = section["brief"] and (k in mine or not team)
        brief = f" - {section['brief']}" if shown else ""
        lines.append(f"{k + 1}. ## {section['heading']}{owner}{brief}")
    return "\n".join(lines)


def normalize(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", heading.lower()).strip()


def split_headed(text: str, outline: Sequence[dict]) -> list[tuple[str | None, str]]:
    """(heading, body) pairs in the order written; text before the first heading has None.

    A heading line starts a section when it names an outline section (at any level) or is a
    `#`/`##` line; a deeper heading that names none (`### Early life`: a sub-heading, which the
    style sheet asks writers not to use but a small model writes anyway) stays in the text."""
    pieces, last, heading = [], 0, None
    for match in HEADING.finditer(text):
        level, written = len(match.group(1)), match.group(2).strip()
        if level > 2 and match_heading(written, outline) is None:
            continue
        pieces.append((heading, text[last : match.start()].strip()))
        heading, last = written, match.end()
    pieces.append((heading, text[last:].strip()))
    return [(h, b) for h, b in pieces if h is not None or b]


def match_heading(written: str, outline: Sequence[dict]) -> int | None:
    """The outline position a written heading names (case and punctuation ignored), as written
    or after a number the writer put before it ("2. Early life", "Section 2: Early life"); a
    heading that begins with a number of its own ("1970–85: Early life") matches as written."""
    full = normalize(written)
    wanted = full.removeprefix("section ").lstrip("0123456789 ")
    headings = [normalize(section["heading"]) for section in outline]
    for name in (full, wanted):
        if name in headings:
            return headings.index(name)
    return None


def own_sections(text: str, outline: Sequence[dict], mine: Sequence[int]) -> dict[int, str]:
    """The sections `text` writes that are its author's own, by outline position.

    An author of one section may leave out the heading: headless text then is that section."""
    found: dict[int, str] = {}
    pieces = split_headed(text, outline)
    for heading, body in pieces:
        k = match_heading(heading, outline) if heading is not None else None
        if heading is None and len(mine) == 1 and len(pieces) == 1:
            k = mine[0]
        if k in mine and k not in found:
            found[k] = body
    return found


def written_positions(text: str, outline: Sequence[dict]) -> list[int | None]:
    """The outline position of every heading in `text` (None: a heading not in the outline)."""
    return [match_heading(h, outline) for h, _ in split_headed(text, outline) if h is not None]


# A sentence a writer wrote before, written again, or again with a word or two changed ("The
# Pacific Ocean is known for its rugged coastline … The Atlantic Ocean is known for its rugged
# coastline …"): the greedy loop of a small model. Only a sentence of this many words counts (a
# short one may be repeated on purpose), and only one whose words, in order, match the earlier
# one's but for about one in ten (difflib's ratio).
LOOP_SENTENCE_WORDS = 8
LOOP_LIKENESS = 0.9
# a sentence ends at its stop and any closing quotes or brackets after it ('means "pain." The'); a
# whole line without one (a list item: "- **Algae** - The genus of algae that …") counts as one
SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+[\"'”’)\]]*(?=\s)|(?=\n))")
WORD = re.compile(r"\w+")
# a phrase of 6-80 characters said four times or more in a row ("the gods, the gods, ...")
PHRASE_LOOP = re.compile(r"(\S.{5,79}?)\1{3,}", re.S)


@functools.lru_cache(maxsize=2**16)  # the stop reads the whole reply again at every piece
def alike(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two sentences' words match, in order, but for about one in ten."""
    if 2 * min(len(a), len(b)) < LOOP_LIKENESS * (len(a) + len(b)):
        return False  # too unlike in length for the ratio to reach the bar
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= LOOP_LIKENESS


def writer_stop(outline: Sequence[dict], mine: Sequence[int]) -> Callable[[str], int | None]:
    """Where a long-form writer's reply is cut while it streams (`Request.stop_when`): the
    position in the reply written so far where the writer's own part ends, or None to go on.

    It ends at a complete heading line naming a teammate's section, at any level and in any
    case (the API's stop strings hold 4 forms; a 4-writer team has 6 or more, and a writer that
    repeats the outline writes `### Ascii Control Characters`), or naming one of the writer's
    own sections a second time, and where the writer loops: at the start of a sentence of
    `LOOP_SENTENCE_WORDS` or more words that it wrote before, or nearly (`alike`) in the same
    section, or after the first time of a phrase said four times in a row. What follows is
    neither the writer's part nor new text: its teammates write those sections, and a loop says
    nothing. (Near repeats count within a section only: a writer of several sections may open
    each in one mould, "Mobility impairments are a common problem that …", "Visual impairments
    are a common problem that …", and a cut there would leave the second section empty.)"""
    mine = set(mine)

    def stop_when(text: str) -> int | None:
        cuts, begun = [], set()
        headings = list(HEADING.finditer(text))
        starts = [match.start() for match in headings]
        for match in headings:
            k = match_heading(match.group(2), outline)
            if k is not None and "\n" in text[match.end(2) :]:  # a whole heading line
                if k not in mine or k in begun:
                    cuts.append(text.rfind("\n", 0, match.start(1)) + 1)  # where its line begins
                    break
                begun.add(k)
        seen = []  # (section, words) of each sentence so far
        for match in SENTENCE.finditer(text):
            words = tuple(WORD.findall(match.group(0).lower()))
            if len(words) < LOOP_SENTENCE_WORDS:
                continue
            section = bisect.bisect(starts, match.start())
            if any(w == words or (s == section and alike(w, words)) for s, w in seen):
                cuts.append(match.start() + len(match.group(0)) - len(match.group(0).lstrip()))
                break
            seen.append((section, words))
        tail = max(len(text) - 400, 0)  # a loop shows at the end of what is written so far
        for loop in PHRASE_LOOP.finditer(text, tail):
            if any(c.isalpha() for c in loop.group(1)):  # words, not a rule of dashes
                cuts.append(loop.start() + len(loop.group(1)))
                break
        return min(cuts) if cuts else None

    return stop_when


def document_sections(
    texts: Sequence[str], outline: Sequence[dict], owners: Sequence[Sequence[int]]
) -> list[str]:
    """Each outline section's text, taken from its owner's answer only ("" when missing)."""
    sections = [""] * len(outline)
    for text, mine in zip(texts, owners, strict=True):
        for k, body in own_sections(text, outline, mine).items():
            sections[k] = body
    return sections


def structure_compliance(
    texts: Sequence[str], outline: Sequence[dict], owners: Sequence[Sequence[int]]
) -> float:
    """Share of the outline's sections written, non-empty, by their owner, and by no one else.

    A section fails when its owner left it out or empty, or when another agent (or the same
    agent twice) wrote a section under its heading."""
    counts = [0] * len(outline)
    for text in texts:
        for k in written_positions(text, outline):
            if k is not None:
                counts[k] += 1
    sections = document_sections(texts, outline, owners)
    for mine, text in zip(owners, texts, strict=True):
        if len(mine) == 1 and not written_positions(text, outline) and text.strip():
            counts[mine[0]] += 1  # a lone section written without its heading
    ok = [bool(sections[k].split()) and counts[k] == 1 for k in range(len(outline))]
    return sum(ok) / len(outline)


def assemble(title: str, outline: Sequence[dict], sections: Sequence[str]) -> str:
    """The document: `# title`, then every non-empty section under its `## heading`."""
    parts = [f"# {title}"]
    for section, body in zip(outline, sections, strict=True):
        if body.strip():
            parts.append(f"## {section['heading']}\n\n{body.strip()}")
    return "\n\n".join(parts)
