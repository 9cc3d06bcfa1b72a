"""What the co-write and co-code forms offer and what a filled-in form means: the task sources
and their curated problems, the task a form describes (`chosen_task`, with what to change when it
cannot be run), the roles of the team it describes, and the adapter versions a team can run."""

from __future__ import annotations

import functools
import hashlib
import json
import textwrap
from dataclasses import replace

import store
from agents.kinds import WORKS, role_names
from agents.kinds.class_team import CLASS_MAX_TOKENS
from agents.kinds.classes import (
    ClassProblem,
    ClassProblemError,
    class_problem,
    class_problems,
    class_splits,
    user_class_problem,
)
from agents.tasks import (
    HUMANEVAL_HELD_OUT,
    MAX_PROMPT_CHARS,
    Task,
    TaskError,
    abstract_tasks,
    find_task,
    humaneval_tasks,
    longform_tasks,
    xsum_tasks,
)
from agents.team.roles import MAX_AGENTS, size_from_setting
from app.context import AppContext
from learner.registry import (
    CARD,
    SHIPPED,
    adapter_name,
    ensure_loaded,
    load_version,
    serving_adapters,
)

MAX_PANES = 4
SHAPE_LABELS = {
    "parallel": "parallel: all agents at once (what MAGRPO trains)",
    "single": "single agent (baseline)",
    "naive_concat": "naive concat: same prompt, parts joined (baseline)",
    "sequential_pipeline": "sequential pipeline: each sees those before (baseline)",
    "one_round_discussion": "one-round discussion: draft, then revise (baseline)",
    "scaffolded": "scaffolded: parallel, the helper's call written for the agents (comparison)",
}
# a class team's shapes (agents/kinds/class_team.py)
CLASS_SHAPE_LABELS = {
    "single": "single agent, each method from the skeleton alone (baseline)",
    "single_incremental": "single agent, each method seeing those it wrote before (baseline)",
    "parallel": "parallel: the methods divided, all agents at once (what MAGRPO trains)",
    "parallel_incremental": "parallel, each agent seeing the methods it wrote before",
    "sequential_pipeline": "sequential pipeline: each sees the methods of those before (baseline)",
    "one_round_discussion": "one-round discussion: drafts, then each revises its own (baseline)",
}
SOURCES = {
    "writing": [
        ("Your own request, a section per writer", "own_longform"),
        ("Summarize a news article (XSum)", "xsum"),
        ("Write an abstract for a paper title", "abstracts"),
        ("Write a 4-section article (Wikipedia outline)", "longform"),
        ("Your own request, free-form parts (introduction, body, …; to compare)", "free"),
    ],
    "coding": [
        ("A HumanEval problem (one function)", "humaneval"),
        ("Your own problem and tests (one function)", "user"),
        ("A ClassEval class: the agents divide its methods", "classeval"),
        ("Your own class: a skeleton and unittest tests", "own_class"),
    ],
}
CURATED = {"humaneval", "xsum", "abstracts", "longform", "classeval"}
CLASS_SOURCES = {"classeval", "own_class"}
# shown in the empty sections box: how a person's own sections are written
EXAMPLE_SECTIONS = """Introduction: what a test is and why it matters
Costs: the time tests take to write and run
Benefits: bugs caught early, safer changes, a worked example
Advice: where to start in an untested program"""
ONE_TEAM, AB = "One team", "A/B: two teams side by side"
EXAMPLE_PROBLEM = '''def count_vowels(text: str) -> int:
    """Return how many vowels (a, e, i, o, u, either case) `text` has.
    >>> count_vowels("Hello World")
    3
    """
'''
EXAMPLE_TESTS = """assert count_vowels("Hello World") == 3
assert count_vowels("") == 0
assert count_vowels("AEIOU xyz") == 5
"""
EXAMPLE_CLASS = '''class Inventory:
    """Items and their counts."""

    def __init__(self):
        self.items = {}

    def add(self, name, count=1):
        """Add `count` of `name` (a new name starts at 0)."""

    def remove(self, name, count=1):
        """Take `count` of `name` away; raise ValueError if there are fewer than `count`."""

    def total(self):
        """How many items there are, all names together (use `count_of` for each name)."""

    def count_of(self, name):
        """How many of `name` there are (0 for a name never added)."""
'''
EXAMPLE_CLASS_TESTS = """import unittest


class InventoryTestAdd(unittest.TestCase):
    def test_add(self):
        inventory = Inventory()
        inventory.add("pen", 2)
        self.assertEqual(inventory.items, {"pen": 2})


class InventoryTestRemove(unittest.TestCase):
    def test_remove(self):
        inventory = Inventory()
        inventory.add("pen", 2)
        inventory.remove("pen")
        self.assertEqual(inventory.items["pen"], 1)

    def test_too_many(self):
        with self.assertRaises(ValueError):
            Inventory().remove("pen")


class InventoryTestTotal(unittest.TestCase):
    def test_total(self):
        inventory = Inventory()
        inventory.add("pen", 2)
        inventory.add("cup")
        self.assertEqual(inventory.total(), 3)


class InventoryTestCountOf(unittest.TestCase):
    def test_count_of(self):
        inventory = Inventory()
        inventory.add("cup")
        self.assertEqual((inventory.count_of("cup"), inventory.count_of("pen")), (1, 0))
"""


@functools.cache
def problem_choices(source: str) -> list[tuple[str, str]]:
    """(label, problem id) for each curated task of `source`, as `find_task` takes them."""
    if source == "humaneval":
        held_out = " (held out for evaluation)"
        return [
            (f"{t.source_id} · {t.entry_point}" + held_out * (i in HUMANEVAL_HELD_OUT), str(i))
            for i, t in enumerate(humaneval_tasks())
        ]
    if source == "classeval":
        held_out = {p.task_id for p in class_splits()["held_out"]}
        return [
            (
                f"{p.task_id} · {p.class_name} · {len(p.methods)} methods"
                + " (held out)" * (p.task_id in held_out),
                p.task_id,
            )
            for p in class_problems()
        ]
    if source == "longform":
        return [
            (
                f"{t.source_id} · {t.extra['title']}"
                + " (held out)" * (t.extra["split"] != "train"),
                f"longform/{t.source_id}",
            )
            for t in longform_tasks()
        ]
    tasks = {"xsum": xsum_tasks, "abstracts": abstract_tasks}[source]()
    return [
        (f"{t.source_id} · {textwrap.shorten(t.prompt, 70)}", f"{source}/{t.source_id}")
        for t in tasks
    ]


def chosen_task(
    kind: str, source: str, problem: str | None, prompt: str, tests: str, sections: str = ""
) -> Task:
    """The task the form describes; raises TaskError with what to change. `sections` (one a
    line, `Heading: brief`; empty: the default outline) go with an own long-form request."""
    if source in CURATED:
        if not problem:
            raise TaskError("pick a problem from the list first")
        return find_task(kind, problem=problem)
    if not (prompt or "").strip():
        what = "paste a function signature with a docstring" if kind == "coding" else "type one"
        raise TaskError(f"the prompt is empty: {what}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise TaskError(
            f"the prompt has {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}"
        )
    tests = tests if kind == "coding" and (tests or "").strip() else None
    if tests and len(tests) > 4 * MAX_PROMPT_CHARS:
        raise TaskError(
            f"the tests have {len(tests):,} characters; the limit is {4 * MAX_PROMPT_CHARS:,}"
        )
    outline = (sections or "") if source == "own_longform" else None
    free = kind == "writing" and source == "free"
    task = find_task(kind, prompt=prompt, tests=tests, sections=outline, free=free)
    # the same text is the same task: two teams' answers to it can be compared (A/B, scores)
    own = f"{task.tests or ''}\0{task.extra.get('outline', '')}"
    digest = hashlib.sha256(f"{task.kind}\0{task.prompt}\0{own}".encode()).hexdigest()
    return replace(task, source_id=f"sha256:{digest[:16]}")


def chosen_class(source: str, problem: str | None, skeleton: str, tests: str) -> ClassProblem:
    """The class the form describes (a curated one, or a person's skeleton and unittest tests);
    raises ClassProblemError with what to change."""
    if source == "classeval":
        if not problem:
            raise ClassProblemError("pick a class from the list first")
        return class_problem(problem)
    if not (skeleton or "").strip():
        raise ClassProblemError(
            "the skeleton is empty: paste a class with its methods' signatures and docstrings"
        )
    if not (tests or "").strip():
        raise ClassProblemError("a class needs its tests: paste unittest.TestCase classes")
    for what, text in (("skeleton", skeleton), ("tests", tests)):
        if len(text) > MAX_PROMPT_CHARS:
            raise ClassProblemError(
                f"the {what} has {len(text):,} characters; the limit is {MAX_PROMPT_CHARS:,}"
            )
    return user_class_problem(skeleton, tests)


def source_max_tokens(kind: str, source: str) -> int:
    """The tokens per agent call a task source starts with (its kind of work's, agents/kinds/;
    a class's: each method's budget, as the class evaluation gives it)."""
    if source in CLASS_SOURCES:
        return CLASS_MAX_TOKENS
    return WORKS["longform" if source in ("longform", "own_longform") else kind].max_tokens


def task_preview(kind: str, problem: str | None) -> str:
    """The text of a curated task, to read before running it."""
    if not problem:
        return ""
    if problem.startswith("ClassEval_"):
        return class_problem(problem).skeleton
    try:
        return find_task(kind, problem=problem).prompt
    except TaskError as e:
        return str(e)


def adapter_choices(ctx: AppContext, kind: str) -> list[tuple[str, str]]:
    """The adapter versions a team of this tab's `kind` of work can run: the serving ones (named,
    or the base model where none of this kind is active), the base model, or version N (only
    versions trained on this kind)."""
    with store.open_db(ctx.db_path) as db:
        serving = [n for n in serving_adapters(db, MAX_AGENTS, kind) if n]
    what = ", ".join(serving) if serving else f"none trained on {kind} yet: the base model"
    choices = [
        (f"serving {kind} versions ({what})", "serving"),
        ("base model for every agent", "base"),
    ]
    registered = [r for r in ctx.registered_adapters() if r["kind"] == kind]
    for version in sorted({r["version"] for r in registered}):
        names = [
            f"{adapter_name(r['agent'], version)} {r['state']}"
            for r in registered
            if r["version"] == version
        ]
        choices.append((f"version {version}: {', '.join(names)}", f"v{version}"))
    return choices


def resolve_adapters(ctx: AppContext, choice: str, size: int, kind: str) -> tuple[str | None, ...]:
    """The server name each agent's requests go to, loading what the server lacks: the serving
    versions of `kind` of work, the base model, or version N where it was trained on `kind`
    (else that agent runs the base model)."""
    if choice == "base":
        return (None,) * size
    with store.open_db(ctx.db_path) as db:
        if choice in ("serving", None, ""):  # checked at each episode: a promotion routes here
            return tuple(ensure_loaded(db, ctx.client, size, kind))
        version = int(choice.removeprefix("v"))
        names = []
        for agent in range(size):
            try:
                row = store.get_adapter(db, agent, version)
            except store.NotFound:
                row = None
            if row is None or row["kind"] != kind:
                names.append(None)  # no such version of this agent for this work: the base
                continue
            names.append(adapter_name(agent, version))
            load_version(ctx.client, names[-1], row["path"])
    return tuple(names)


def role_layout(kind: str, source: str, shape: str, size: int | str) -> list[str]:
    """The distinct role names of the team the form describes, in team order."""
    form = (
        "coding"
        if kind == "coding"
        else {"xsum": "summary", "abstracts": "expansion", "longform": "longform"}.get(
            source.removeprefix("own_"), "free"
        )
    )
    outline = [{"heading": "", "brief": ""}] * 4  # both long-form sources have 4 sections
    stub = Task(kind=kind, form=form, prompt="", source="", extra={"outline": outline})
    return list(dict.fromkeys(role_names(stub, shape, size_from_setting(shape, size))))


def served_shape(kind: str, card_path=SHIPPED / CARD) -> tuple[str, int, str]:
    """The shape and team size the page and `coteam episode --task class` serve by default for
    a kind of work ("coding": one function, "class"), and why, in words with the figures. A team
    is served only where the card's held-out figures show it passes at least as much as one
    agent (the same start, budget and judge; one agent's better form), in the shape and at the
    size those figures are for; else one agent in that form; without such figures, one agent.
    Co-write serves its team of 2 (no held-out comparison decides it yet)."""
    if kind not in ("coding", "class"):
        return "parallel", 2, ""
    try:
        figures = json.loads(card_path.read_text(encoding="utf-8"))["held_out"][kind]
        team, single = figures["team"]["pass_at_1"], figures["single"]["pass_at_1"]
        size = int(figures["team"]["agents"])
        name = figures["team"].get("name", f"the shipped team of {size}")
        solo = figures["single"].get("shape", "single")
        unit = figures.get("unit", "problems")
        where = f"{figures['problems']} ({figures['judge']}; {figures['source']})"
    except (OSError, ValueError, KeyError, TypeError):
        why = (
            "Served by default: **one agent**. The team has no held-out figures against one "
            "agent yet; choose a team shape to run it."
        )
        return "single", 1, why
    if team < single:
        why = (
            f"Served by default: **one agent**, which passes {single:.3f} of held-out {unit} where "
            f"{name} passes {team:.3f}, on {where}. The team is one choice away: pick a team shape."
        )
        return solo, 1, why
    more = ""
    if "class_level" in figures["team"] and "class_level" in figures["single"]:
        more = (
            f"; whole classes passed: the team {figures['team']['class_level']:.3f}, one "
            f"agent {figures['single']['class_level']:.3f}"
        )
    if "critical_path_ratio" in figures["team"]:
        more += (
            f"; its busiest agent writes {figures['team']['critical_path_ratio']:.2f}× the "
            "tokens one agent writes"
        )
    why = (
        f"Served by default: **{name}**: held out it passes {team:.3f} of the {unit}, one "
        f"agent {single:.3f}{more}, on {where}."
    )
    return figures["team"].get("shape", "parallel"), size, why
