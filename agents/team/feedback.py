"""The environment's feedback: after each turn, what each agent is told about the team's result,
and whether the episode is done.

Coding: syntax errors (per part and of the joined module), functions a role should have written
and did not, a main function that ignores its helpers, statements the combiner removed, and the
result of the code check. The check is a seam: any `CodeChecker` (a function
`(code, task) -> CodeCheck`) can be passed in. The default, `parse_check`, runs nothing: it parses
the module and looks for the entry function. `sandbox_check` runs the task's tests in the sandbox
(agents/judge/sandbox.py, a separate process) and reports the asserts that failed; generated code is
never executed in this process.

Writing: empty sections, sections outside their role's target length, and sections that repeat
another one (word overlap).

An agent's feedback speaks of its own part and of the team's result; it never quotes another
agent's text, so a decentralized agent still sees only its own work.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.judge.parsing import parse
from agents.judge.testrun import TestReport, run_tests
from agents.tasks import Task
from agents.team.combine import CombinedCode
from agents.team.roles import Role

MAX_OVERLAP = 0.5  # content-word Jaccard overlap above which two sections count as repeating
MAX_MESSAGES = 5  # test failures shown to the agents per turn
_STOPWORD_TEXT = """
    a an and are as at be been but by for from had has have he her his in into is it its of on or
    our she that the their them they this to was we were which while who will with you your not no
    can also than then there these those i me my
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass
class CodeCheck:
    """What a checker found. `passed` ends the episode; `messages` go to every agent."""

    passed: bool
    tests_run: bool = False
    tests_passed: int = 0
    tests_total: int = 0
    messages: list[str] = field(default_factory=list)
    report: TestReport | None = None  # the test run, kept so the episode is scored without rerun


CodeChecker = Callable[[str, Task], CodeCheck]


def parse_check(code: str, task: Task) -> CodeCheck:
    """The check without a sandbox: the module parses and defines the entry function."""
    try:
        tree = parse(code)
    except SyntaxError as e:
        return CodeCheck(
            passed=False, messages=[f"the module does not parse: line {e.lineno}: {e.msg}"]
        )
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if task.entry_point not in defined:
        return CodeCheck(passed=False, messages=[f"the module defines no `{task.entry_point}`"])
    return CodeCheck(passed=True)


def sandbox_check(code: str, task: Task) -> CodeCheck:
    """The check that runs the task's tests in the sandbox, one assert at a time; it passes when
    every counted assert passes. Without tests it is `parse_check`."""
    check = parse_check(code, task)
    if not check.passed or not task.tests:
        return check
    report = run_tests(code, task.tests, task.entry_point, given=task.preamble)
    failed = [r for r in report.results if not r.passed]
    messages = [report.error] if report.error else []
    messages += [f"{r.source.splitlines()[-1]} -> {r.message}" for r in failed]
    return CodeCheck(
        passed=report.all_passed,
        tests_run=True,
        tests_passed=report.passed,
        tests_total=report.total,
        messages=messages,
        report=report,
    )


@dataclass
class Assessment:
    """The environment's verdict on one turn: done or not, and each agent's feedback."""

    success: bool
    feedback: list[str]  # one text per agent ("" when there is nothing to say)
    details: dict  # for the record: test counts, syntax errors, notes
    report: TestReport | None = None  # coding: the checker's test run on the joined module


CUT_OFF = "Your answer was cut off at the token limit: write less (no explanations or examples)."
MAX_CHECK_CHARS = 500  # a check's name or message as kept with the episode


def verdict_checks(record: dict, titles: Sequence[str]) -> list[dict]:
    """A turn's verdict (`turn_record`) as the checks it is made of, kept with the episode: a
    program's tests, each with the judge's message (and the program's own failure, if it did not
    load); else each agent's part (`titles`), passed when the environment had nothing to say of
    it (a document: not empty, within its length, not cut off, not repeating another)."""
    report = record.get("report")
    if report is not None:
        checks = [
            {
                "name": r.source.strip()[:MAX_CHECK_CHARS],
                "passed": bool(r.passed),
                "message": (r.message or "")[:MAX_CHECK_CHARS],
            }
            for r in report.results
        ]
        if report.error:
            checks.append(
                {"name": "the program", "passed": False, "message": report.error[:MAX_CHECK_CHARS]}
            )
        return checks
    return [
        {"name": f"agent {i + 1}: {title}", "passed": not note, "message": note[:MAX_CHECK_CHARS]}
        for i, (title, note) in enumerate(zip(titles, record["feedback"], strict=False))
    ]


def assess_code(
    combined: CombinedCode,
    roles: list[Role],
    task: Task,
    checker: CodeChecker = parse_check,
    cut_off: Sequence[bool] = (),
) -> Assessment:
    """Feedback for each agent of a coding team from the joined module and the code check.

    `cut_off[i]` says agent i's reply stopped at the token limit."""
    check = checker(combined.code, task) if combined.ok else CodeCheck(passed=False)
    team: list[str] = []
    if not combined.ok:
        team.append(f"The team's joined code does not parse ({combined.error}).")
    if check.tests_run:
        team.append(f"Tests: {check.tests_passed} of {check.tests_total} passed.")
    team += [f"- {m}" for m in check.messages[:MAX_MESSAGES]]

    helpers = [name for role in roles if role.name.startswith("helper") for name in role.owns]
    entry_calls = set(combined.calls.get(task.entry_point, []))
    feedback = []
    for role, part in zip(roles, combined.parts, strict=True):
        notes = []
        if part.agent < len(cut_off) and cut_off[part.agent]:
            notes.append(CUT_OFF)
        if part.syntax_error:
            notes.append(f"Your code has a syntax error ({part.syntax_error}).")
        for name in role.owns:
            if name not in combined.defines:
                notes.append(f"Your part does not define `{name}`.")
        if part.violations:
            names = ", ".join(f"`{name}`" for name in part.violations)
            notes.append(
                f"You wrote {names}, a teammate's part: it was not used. Write only yours."
            )
        if part.replaced:
            names = ", ".join(f"`{name}`" for name in part.replaced)
            notes.append(f"Your {names} was not used: another version was kept.")
        if part.dropped:
            notes.append(
                "Removed from your part (only functions, classes, imports and constants are kept): "
                + "; ".join(part.dropped)
                + "."
            )
        if role.name == "entry" and helpers and not entry_calls & set(helpers):
            notes.append(f"`{task.entry_point}` does not call the helper(s) {', '.join(helpers)}.")
        if role.name.startswith("helper") and task.entry_point in combined.defines:
            unused = [name for name in role.owns if name not in entry_calls]
            if unused:
                notes.append(f"`{task.entry_point}` does not call your `{unused[0]}`.")
        feedback.append("\n".join(team + notes))
    details = {
        "parses": combined.ok,
        "error": combined.error,
        "passed": check.passed,
        "tests_run": check.tests_run,
        "tests_passed": check.tests_passed,
        "tests_total": check.tests_total,
        "messages": check.messages,
        "notes": combined.notes,
        "syntax_errors": {p.agent: p.syntax_error for p in combined.parts if p.syntax_error},
    }
    return Assessment(
        success=combined.ok and check.passed,
        feedback=feedback,
        details=details,
        report=check.report,
    )


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in STOPWORDS}


def overlap(a: str, b: str) -> float:
    """Jaccard overlap of two texts' content words (0 when either has none)."""
    wa, wb = content_words(a), content_words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def assess_writing(
    sections: list[str], roles: list[Role], cut_off: Sequence[bool] = ()
) -> Assessment:
    """Feedback for each agent of a writing team: empty, cut off, too short or long, repeating."""
    feedback, counts, overlaps = [], [], {}
    for i, (text, role) in enumerate(zip(sections, roles, strict=True)):
        notes = [CUT_OFF] if i < len(cut_off) and cut_off[i] else []
        words = len(text.split())
        counts.append(words)
        if words == 0:
            notes.append("Your section was empty.")
        elif role.words and not role.words[0] <= words <= role.words[1]:
            notes.append(
                f"Your section has {words} words; aim for {role.words[0]}-{role.words[1]}."
            )
        for j, other in enumerate(sections):
            if j != i:
                value = overlap(text, other)
                overlaps[f"{min(i, j)}-{max(i, j)}"] = round(value, 3)
                if value > MAX_OVERLAP:
                    notes.append(
                        f"Your section repeats much of section {j + 1} ({roles[j].title}; word "
                        f"overlap {value:.2f}): cover what is yours only."
                    )
        feedback.append("\n".join(notes))
    details = {"words": counts, "overlap": overlaps}
    return Assessment(success=not any(feedback), feedback=feedback, details=details)
