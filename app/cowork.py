"""The co-write and co-code tabs: one builder, `CoworkTab(ctx, kind)`, for both kinds of task.

A person picks a task (a curated one, or their own prompt; for code, their own problem and
tests), a team (size 2-4, shape, turns, adapter version, editable role prompts) and runs it. One
pane per agent streams its tokens; then comes the combined result (editable, and saved as the
preferred output on request), the test results for code, and the rating panel. The A/B mode runs
two teams on the same task side by side and asks which result is better.

Event functions are methods named after the event; each reads its inputs, calls `agents/`,
`learner/` or `store/` and returns updates. The episode itself runs in `app.live`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import textwrap
from dataclasses import replace

import gradio as gr

import store
from agents.roles import PROMPTS, SHAPES, role_names
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
from agents.team import Sampling
from app import rating
from app.context import AppContext
from app.live import LiveEpisode, TeamRun, describe_error, run_live
from app.ratings_panel import answered_by
from learner.registry import adapter_name, ensure_loaded, load_version

MAX_PANES = 4
EPISODE_SLOTS = 4  # episodes (of all sessions) run at once; the server batches them; more queue
SHAPE_LABELS = {
    "parallel": "parallel: all agents at once (what MAGRPO trains)",
    "single": "single agent (baseline)",
    "naive_concat": "naive concat: same prompt, parts joined (baseline)",
    "sequential_pipeline": "sequential pipeline: each sees those before (baseline)",
    "one_round_discussion": "one-round discussion: draft, then revise (baseline)",
}
SOURCES = {
    "writing": [
        ("Your own request", "free"),
        ("Summarize a news article (XSum)", "xsum"),
        ("Write an abstract for a paper title", "abstracts"),
        ("Write a 4-section article (Wikipedia outline)", "longform"),
        ("Your own article, section by section", "own_longform"),
    ],
    "coding": [
        ("A HumanEval problem", "humaneval"),
        ("Your own problem and tests", "user"),
    ],
}
CURATED = {"humaneval", "xsum", "abstracts", "longform"}
EXAMPLE_SECTIONS = """Introduction: what a test is and why it matters
Costs: the time tests take to write and run
Benefits: bugs caught early, safer changes, a worked example
Advice: where to start in an untested program"""
ONE_TEAM, AB = "One team", "A/B: two teams side by side"
SCORES = ["1", "2", "3", "4", "5"]
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


# -- what a tab offers ---------------------------------------------------------------------


@functools.cache
def problem_choices(source: str) -> list[tuple[str, str]]:
    """(label, problem id) for each curated task of `source`, as `find_task` takes them."""
    if source == "humaneval":
        held_out = " (held out for evaluation)"
        return [
            (f"{t.source_id} · {t.entry_point}" + held_out * (i in HUMANEVAL_HELD_OUT), str(i))
            for i, t in enumerate(humaneval_tasks())
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
    task = find_task(kind, prompt=prompt, tests=tests, sections=outline)
    # the same text is the same task: two teams' answers to it can be compared (A/B, scores)
    own = f"{task.tests or ''}\0{task.extra.get('outline', '')}"
    digest = hashlib.sha256(f"{task.kind}\0{task.prompt}\0{own}".encode()).hexdigest()
    return replace(task, source_id=f"sha256:{digest[:16]}")


def task_preview(kind: str, problem: str | None) -> str:
    """The text of a curated task, to read before running it."""
    if not problem:
        return ""
    try:
        return find_task(kind, problem=problem).prompt
    except TaskError as e:
        return str(e)


def adapter_choices(ctx: AppContext) -> list[tuple[str, str]]:
    """The adapter versions a team can run: the serving ones, the base model, or version N."""
    choices = [
        ("serving versions (what training promoted)", "serving"),
        ("base model for every agent", "base"),
    ]
    registered = ctx.registered_adapters()
    for version in sorted({r["version"] for r in registered}):
        names = [
            f"{adapter_name(r['agent'], version)} {r['state']}"
            for r in registered
            if r["version"] == version
        ]
        choices.append((f"version {version}: {', '.join(names)}", f"v{version}"))
    return choices


def resolve_adapters(ctx: AppContext, choice: str, size: int) -> tuple[str | None, ...]:
    """The server name each agent's requests go to, loading what the server lacks."""
    if choice == "base":
        return (None,) * size
    with store.open_db(ctx.db_path) as db:
        if choice in ("serving", None, ""):  # checked at each episode: a promotion routes here
            return tuple(ensure_loaded(db, ctx.client, size))
        version = int(choice.removeprefix("v"))
        names = []
        for agent in range(size):
            try:
                row = store.get_adapter(db, agent, version)
            except store.NotFound:
                names.append(None)  # this agent has no such version: it runs the base model
                continue
            names.append(adapter_name(agent, version))
            load_version(ctx.client, names[-1], row["path"])
    return tuple(names)


def team_size(shape: str, size: int | str) -> int:
    return 1 if shape == "single" else int(size)


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
    return list(dict.fromkeys(role_names(stub, shape, team_size(shape, size))))


def display_code(text: str) -> str:
    """An agent's reply as code: its ``` fence lines dropped, the rest as written."""
    return "\n".join(line for line in text.splitlines() if not re.match(r"^\s*```", line))


def tests_markdown(episode: LiveEpisode) -> str:
    """Which test asserts passed, with the messages of those that did not."""
    task = episode.run.task
    if not task.tests:
        return (
            "**No tests for this problem**: the module was only checked to parse and define "
            f"`{task.entry_point}`."
        )
    report = episode.tests
    if report is None:
        return "Tests: not run (the episode did not finish)."
    head = f"**Tests: {report.passed} of {report.total} passed**"
    if report.error:
        head += f" — {report.error}"
    rows = ["| | test | checked | message |", "|---|---|---|---|"]
    for r in report.results:
        source = r.source.splitlines()[-1].replace("|", "\\|")
        message = (r.message or "").replace("|", "\\|").replace("\n", " ")
        # a compared test's value was checked here; one checked inside could have been forged
        checked = "value compared" if r.kind == "compared" else "inside the sandbox"
        rows.append(
            f"| {'✓' if r.passed else '✗'} | `{textwrap.shorten(source, 100)}` | {checked} "
            f"| {textwrap.shorten(message, 160)} |"
        )
    return head + "\n\n" + "\n".join(rows)


def turn_log(episode: LiveEpisode) -> str:
    """Each finished turn's verdict and the feedback each agent was given for the next."""
    lines = []
    for verdict in episode.verdicts:
        mark = "✓ done" if verdict["success"] else "⚠ not done"
        lines.append(f"**Turn {verdict['turn'] + 1}: {mark}**")
        if not verdict["done"]:
            for pane, note in zip(episode.panes, verdict["feedback"], strict=False):
                if note:
                    lines.append(f"- feedback to {pane.role.title}: {note.replace(chr(10), ' ')}")
    return "\n".join(lines)


# -- the tab -------------------------------------------------------------------------------


class CoworkTab:
    """The co-write (`kind="writing"`) or co-code (`kind="coding"`) tab."""

    def __init__(self, ctx: AppContext, kind: str):
        self.ctx, self.kind = ctx, kind
        self.code = kind == "coding"
        self.name = "cocode" if self.code else "cowrite"

    # -- layout ----------------------------------------------------------------------------
    def build(self) -> None:
        sources = SOURCES[self.kind]
        first = sources[0][1]
        with gr.Row():
            with gr.Column(scale=3):
                self.source = gr.Radio(
                    sources, value=first, label="Task", elem_id=self.id("source")
                )
                default = "0" if self.code else None  # a co-code run works at once
                self.problem = gr.Dropdown(
                    problem_choices(first) if first in CURATED else [],
                    value=default,
                    label="Problem" if self.code else "Item",
                    filterable=True,
                    visible=first in CURATED,
                    elem_id=self.id("problem"),
                )
                if self.code:
                    self.preview = gr.Code(
                        task_preview(self.kind, default),
                        language="python",
                        label="The problem",
                        interactive=False,
                        visible=True,
                        elem_id=self.id("preview"),
                    )
                    self.prompt = gr.Code(
                        EXAMPLE_PROBLEM,
                        language="python",
                        label="Your problem: a function signature with a docstring",
                        interactive=True,
                        visible=False,
                        elem_id=self.id("prompt"),
                    )
                    self.tests = gr.Code(
                        EXAMPLE_TESTS,
                        language="python",
                        label="Your tests (asserts that call the function, or HumanEval's check(candidate)); optional",
                        interactive=True,
                        visible=False,
                        elem_id=self.id("tests"),
                    )
                    self.sections = gr.State("")
                else:
                    self.preview = gr.Textbox(
                        label="The text",
                        lines=6,
                        max_lines=12,
                        interactive=False,
                        visible=False,
                        elem_id=self.id("preview"),
                    )
                    self.prompt = gr.Textbox(
                        label="Your request",
                        lines=5,
                        placeholder="e.g. A short guide to brewing good coffee at home",
                        elem_id=self.id("prompt"),
                    )
                    self.tests = gr.State("")
                    self.sections = gr.Textbox(
                        EXAMPLE_SECTIONS,
                        label="Sections, one a line (Heading: what it covers); empty: "
                        "Introduction, Background, Main points, Conclusion",
                        lines=4,
                        max_lines=8,
                        visible=False,
                        elem_id=self.id("sections"),
                    )
            with gr.Column(scale=2):
                self.mode = gr.Radio(
                    [ONE_TEAM, AB], value=ONE_TEAM, label="Mode", elem_id=self.id("mode")
                )
                self.shape = gr.Dropdown(
                    [(SHAPE_LABELS[s], s) for s in SHAPES],
                    value="parallel",
                    label="Team shape",
                    elem_id=self.id("shape"),
                )
                self.size = gr.Radio([2, 3, 4], value=2, label="Team size", elem_id=self.id("size"))
                with gr.Row():
                    self.turns = gr.Slider(
                        1, 4, value=1, step=1, label="Turns at most", elem_id=self.id("turns")
                    )
                    self.max_tokens = gr.Slider(
                        32,
                        1024,
                        value=256,
                        step=32,
                        label="Tokens per agent call",
                        elem_id=self.id("max-tokens"),
                    )
                self.temperature = gr.Slider(
                    0.0,
                    1.5,
                    value=0.2 if self.code else 0.8,
                    step=0.1,
                    label="Temperature (0: greedy)",
                    elem_id=self.id("temperature"),
                )
                choices = adapter_choices(self.ctx)
                self.adapters = gr.Dropdown(
                    choices, value="serving", label="Adapters (team A)", elem_id=self.id("adapters")
                )
                with gr.Group(visible=False) as self.team_b:
                    self.shape_b = gr.Dropdown(
                        [(SHAPE_LABELS[s], s) for s in SHAPES],
                        value="single",
                        label="Team B shape",
                        elem_id=self.id("shape-b"),
                    )
                    self.adapters_b = gr.Dropdown(
                        choices,
                        value="base",
                        label="Team B adapters",
                        elem_id=self.id("adapters-b"),
                    )
        with gr.Accordion(
            "Roles: the agents' instructions (edit them to change how the team works)", open=False
        ):
            gr.Markdown(
                "Braces are filled in per task: `{entry}` the function to write, `{n}` the team "
                "size, `{helpers}` the helpers' names, `{document}` what is written, `{sections}` "
                "the sections in order, `{words}` the target length."
            )
            self.role_names = gr.State(role_layout(self.kind, first, "parallel", 2))
            self.role_texts = [
                gr.Textbox(lines=3, max_lines=8, visible=False, elem_id=self.id(f"role-{i}"))
                for i in range(MAX_PANES)
            ]
        self.run_button = gr.Button("Run the team", variant="primary", elem_id=self.id("run"))
        self.status = gr.Markdown("Pick a task and a team, then run it.", elem_id=self.id("status"))
        self.turn_log = gr.Markdown(elem_id=self.id("turn-log"))
        self.episode_id = gr.State(None)
        self.ab_pair = gr.State(None)
        self.build_team_area()
        self.build_ab_area()
        self.wire()

    def build_team_area(self) -> None:
        with gr.Column(visible=True) as self.team_area:
            self.pane_boxes, self.panes, self.agent_thumbs = [], [], []
            with gr.Row(equal_height=True):
                for i in range(MAX_PANES):
                    with gr.Column(visible=i < 2, min_width=240) as box:
                        self.pane_boxes.append(box)
                        self.panes.append(
                            self.text_view(f"Agent {i + 1}", self.id(f"pane-{i}"), lines=14)
                        )
                        with gr.Row():
                            up = gr.Button("✓ Good", size="sm", elem_id=self.id(f"agent-{i}-up"))
                            down = gr.Button("✗ Bad", size="sm", elem_id=self.id(f"agent-{i}-down"))
                        self.agent_thumbs.append((up, down))
            what = "module" if self.code else "document"
            self.result = self.text_view(
                f"The team's combined {what} (edit it, then save your version below)",
                self.id("result"),
                lines=12,
                interactive=True,
            )
            self.tests_view = gr.Markdown(visible=self.code, elem_id=self.id("tests-view"))
            with gr.Column(
                visible=False, elem_classes=["rating-panel"], elem_id=self.id("rating-panel")
            ) as self.rating_panel:
                gr.Markdown("### Rate the result")
                with gr.Row():
                    self.result_up = gr.Button("✓ Good result", elem_id=self.id("result-up"))
                    self.result_down = gr.Button("✗ Bad result", elem_id=self.id("result-down"))
                with gr.Row():
                    self.score = gr.Radio(SCORES, label="Score (1-5)", elem_id=self.id("score"))
                    self.comment = gr.Textbox(
                        label="Comment (why?)", lines=2, elem_id=self.id("comment")
                    )
                with gr.Row():
                    self.save_score = gr.Button(
                        "Save score and comment", elem_id=self.id("save-score")
                    )
                    self.save_edit = gr.Button(
                        f"Save my edited {what} as the preferred output",
                        elem_id=self.id("save-edit"),
                    )
            self.rating_status = gr.Markdown(elem_id=self.id("rating-status"))

    def build_ab_area(self) -> None:
        with gr.Column(visible=False) as self.ab_area:
            with gr.Row(equal_height=True):
                self.ab_status, self.ab_views = [], []
                for side in ("A (left)", "B (right)"):
                    with gr.Column():
                        key = side[0].lower()
                        self.ab_status.append(
                            gr.Markdown(f"**Team {side}**", elem_id=self.id(f"ab-status-{key}"))
                        )
                        self.ab_views.append(
                            self.text_view(f"Team {side}", self.id(f"ab-view-{key}"), lines=16)
                        )
            with gr.Row(visible=False) as self.vote_row:
                self.votes = {
                    choice: gr.Button(label, elem_id=self.id(f"vote-{choice}"))
                    for choice, label in [
                        ("left", "⬅ A is better"),
                        ("right", "B is better ➡"),
                        ("tie", "Tie"),
                        ("both_bad", "Both bad"),
                    ]
                }
            self.vote_status = gr.Markdown(elem_id=self.id("vote-status"))

    def text_view(self, label: str, elem_id: str, lines: int, interactive: bool = False):
        if self.code:
            return gr.Code(
                language="python",
                label=label,
                lines=lines,
                max_lines=lines + 10,
                interactive=interactive,
                elem_id=elem_id,
            )
        return gr.Textbox(
            label=label, lines=lines, max_lines=lines + 10, interactive=interactive, elem_id=elem_id
        )

    def id(self, name: str) -> str:
        return f"{self.name}-{name}"

    # -- events ----------------------------------------------------------------------------
    def wire(self) -> None:
        boxes = [self.problem, self.preview, self.prompt]
        boxes.append(self.tests if self.code else self.sections)
        self.source.change(self.choose_source, self.source, boxes, show_progress="hidden").then(
            self.refresh_roles, self.roles_inputs(), self.roles_outputs(), show_progress="hidden"
        )
        self.problem.change(self.show_problem, self.problem, self.preview, show_progress="hidden")
        for trigger in (self.shape, self.size):
            trigger.change(
                self.refresh_roles,
                self.roles_inputs(),
                self.roles_outputs(),
                show_progress="hidden",
            )
        self.shape.change(self.show_size, self.shape, self.size, show_progress="hidden")
        self.mode.change(
            self.choose_mode,
            self.mode,
            [self.team_b, self.team_area, self.ab_area, self.run_button],
            show_progress="hidden",
        )
        form = {
            self.source,
            self.problem,
            self.prompt,
            self.tests,
            self.sections,
            self.mode,
            self.shape,
            self.size,
            self.turns,
            self.max_tokens,
            self.temperature,
            self.adapters,
            self.shape_b,
            self.adapters_b,
            self.role_names,
            *self.role_texts,
        }
        self.run_button.click(
            self.run,
            form,
            self.run_outputs(),
            concurrency_id="episodes",
            concurrency_limit=EPISODE_SLOTS,
            show_progress="minimal",
        )
        for i, (up, down) in enumerate(self.agent_thumbs):
            up.click(self.thumbs(1, agent=i), self.episode_id, self.rating_status)
            down.click(self.thumbs(-1, agent=i), self.episode_id, self.rating_status)
        self.result_up.click(self.thumbs(1), self.episode_id, self.rating_status)
        self.result_down.click(self.thumbs(-1), self.episode_id, self.rating_status)
        self.save_score.click(
            self.rate_score, [self.episode_id, self.score, self.comment], self.rating_status
        )
        self.save_edit.click(self.rate_edit, [self.episode_id, self.result], self.rating_status)
        for choice, button in self.votes.items():
            button.click(self.vote(choice), self.ab_pair, self.vote_status)

    def roles_inputs(self) -> list:
        return [self.source, self.shape, self.size, self.role_names, *self.role_texts]

    def roles_outputs(self) -> list:
        return [self.role_names, *self.role_texts]

    def choose_source(self, source: str):
        """Show the list of curated tasks, or the boxes for one's own."""
        curated = source in CURATED
        updates = [
            gr.update(
                choices=problem_choices(source) if curated else [], value=None, visible=curated
            ),
            gr.update(value="", visible=curated),
            gr.update(visible=not curated),
        ]
        if self.code:
            updates.append(gr.update(visible=not curated))
        else:
            updates.append(gr.update(visible=source == "own_longform"))
        return updates

    def show_problem(self, problem: str | None):
        return task_preview(self.kind, problem)

    def show_size(self, shape: str):
        return gr.update(interactive=shape != "single")

    def choose_mode(self, mode: str):
        ab = mode == AB
        label = "Run both teams" if ab else "Run the team"
        return (
            gr.update(visible=ab),
            gr.update(visible=not ab),
            gr.update(visible=ab),
            gr.update(value=label),
        )

    def refresh_roles(self, source: str, shape: str, size: int, names: list[str], *texts: str):
        """One box per role of the team now chosen; a role kept keeps its edited text."""
        edited = {n: t for n, t in zip(names or [], texts, strict=False) if t}
        new = role_layout(self.kind, source, shape, size)
        boxes = []
        for i in range(MAX_PANES):
            if i < len(new):
                who = "every agent" if shape == "naive_concat" else f"agent {i + 1}"
                boxes.append(
                    gr.update(
                        value=edited.get(new[i], PROMPTS[new[i]]),
                        label=f"{who} · {new[i]}",
                        visible=True,
                    )
                )
            else:
                boxes.append(gr.update(visible=False))
        return [new, *boxes]

    def run_outputs(self) -> list:
        return [
            self.status,
            self.turn_log,
            self.episode_id,
            self.ab_pair,
            *self.pane_boxes,
            *self.panes,
            self.result,
            self.tests_view,
            self.rating_panel,
            self.rating_status,
            *self.ab_status,
            *self.ab_views,
            self.vote_row,
            self.vote_status,
        ]

    def team_runs(self, form: dict) -> list[TeamRun]:
        """The team(s) the form describes, on its task; raises with what to change."""
        f = form
        task = chosen_task(
            self.kind,
            f[self.source],
            f[self.problem],
            f[self.prompt],
            f[self.tests],
            f.get(self.sections, ""),  # a form without the box: no sections
        )
        sampling = Sampling(
            temperature=float(f[self.temperature]),
            top_p=0.95 if f[self.temperature] > 0 else 1.0,
            max_tokens=int(f[self.max_tokens]),
        )
        edits = {
            name: text
            for name, text in zip(f[self.role_names], [f[t] for t in self.role_texts], strict=False)
            if text and text.strip() and text != PROMPTS.get(name)
        }
        teams = [(f[self.shape], f[self.adapters])]
        if f[self.mode] == AB:
            teams.append((f[self.shape_b], f[self.adapters_b]))
        runs = []
        for shape, _ in teams:
            size = team_size(shape, f[self.size])
            run = TeamRun(task, shape, size, int(f[self.turns]), (), sampling, edits or None)
            run.roles()  # a bad combination is refused before anything runs
            runs.append(run)
        if not self.ctx.client.healthy():
            raise ConnectionError(
                f"the model server at {self.ctx.client.base_url} is not answering. Start it "
                "again (a managed one restarts by itself within a minute) and retry; everything "
                "already saved is kept"
            )
        return [
            replace(run, adapters=resolve_adapters(self.ctx, adapters, run.agents))
            for run, (_, adapters) in zip(runs, teams, strict=True)
        ]

    def run(self, form: dict):
        """Run the team (or both A/B teams) and stream every agent's tokens to the page."""
        try:
            runs = self.team_runs(form)
        except Exception as e:  # the form or the server: say what to change, run nothing
            message = describe_error(e) if not isinstance(e, ConnectionError) else str(e)
            gr.Warning(message)
            yield {self.status: f"⚠ {message}."}
            return
        ab = len(runs) == 2
        yield self.reset_view(runs, ab)
        episodes: list[LiveEpisode] = []
        for episodes in run_live(runs, self.ctx.client, self.ctx.db_path):
            yield self.ab_view(episodes) if ab else self.team_view(episodes[0])
        failed = [e.error for e in episodes if e.error]
        if failed:
            gr.Warning(f"The episode failed: {failed[0]}")

    def reset_view(self, runs: list[TeamRun], ab: bool) -> dict:
        updates = {
            self.status: "Starting…",
            self.turn_log: "",
            self.episode_id: None,
            self.ab_pair: None,
            self.rating_panel: gr.update(visible=False),
            self.rating_status: "",
            self.vote_row: gr.update(visible=False),
            self.vote_status: "",
        }
        if ab:
            for view in self.ab_views:
                updates[view] = ""
            return updates
        size = runs[0].agents
        for i in range(MAX_PANES):
            updates[self.pane_boxes[i]] = gr.update(visible=i < size)
            updates[self.panes[i]] = gr.update(value="", label=f"Agent {i + 1}")
        updates[self.result] = ""
        updates[self.tests_view] = ""
        return updates

    def team_view(self, episode: LiveEpisode) -> dict:
        updates = {self.status: episode.status(), self.turn_log: turn_log(episode)}
        for i, pane in enumerate(episode.panes):
            adapter = pane.adapter or "base model"
            state = " · writing…" if pane.writing else ""
            label = f"Agent {i + 1} · {pane.role.title} · {adapter} · {pane.tokens} tokens{state}"
            text = display_code(pane.text) if self.code else pane.text
            updates[self.panes[i]] = gr.update(value=text, label=label)
        if episode.output:
            updates[self.result] = episode.output
        if episode.finished:
            ok = episode.result is not None and not episode.error
            updates[self.episode_id] = episode.episode_id if ok else None
            updates[self.rating_panel] = gr.update(visible=ok)
            if ok:
                updates[self.status] += "\n\n" + answered_by(self.ctx, episode.episode_id)
            if self.code:
                updates[self.tests_view] = tests_markdown(episode) if ok else ""
        return updates

    def ab_view(self, episodes: list[LiveEpisode]) -> dict:
        updates = {}
        for side, episode, status, view in zip(
            "AB", episodes, self.ab_status, self.ab_views, strict=True
        ):
            adapters = ", ".join(p.adapter or "base" for p in episode.panes)
            lines = [
                f"**Team {side}**: {episode.run.shape} · adapters {adapters}",
                episode.status(),
            ]
            if episode.finished and episode.result is not None and not episode.error:
                lines.append(answered_by(self.ctx, episode.episode_id))
            updates[status] = "\n\n".join(lines)
            if episode.result is not None:
                updates[view] = episode.output
            else:  # while it runs: every agent's text so far, one after another
                updates[view] = "\n\n".join(
                    f"{'# ' if self.code else ''}[{p.role.title}]\n{display_code(p.text) if self.code else p.text}"
                    for p in episode.panes
                )
        if all(e.finished for e in episodes):
            ok = all(e.result is not None and not e.error for e in episodes)
            pair = (episodes[0].episode_id, episodes[1].episode_id) if ok else None
            updates[self.ab_pair] = pair
            updates[self.vote_row] = gr.update(visible=ok)
            updates[self.status] = (
                "Both teams are done: which result is better?"
                if ok
                else "⚠ A team failed; see its status above."
            )
        return updates

    def thumbs(self, value: int, agent: int | None = None):
        """The event function of a thumbs up or down button, on one agent's part or on the result."""
        what = f"thumbs {'up' if value > 0 else 'down'} on " + (
            f"agent {agent + 1}'s part" if agent is not None else "the result"
        )

        def rate(episode_id: int | None, request: gr.Request) -> str:
            rater = rating.rater_of(request)
            return rating.save_rating(
                self.ctx, episode_id, "thumbs", what, rater, value=value, agent=agent
            )

        return rate

    def rate_score(
        self, episode_id: int | None, score: str | None, comment: str, request: gr.Request
    ):
        value = int(score) if score else None
        return rating.save_score_and_comment(
            self.ctx, episode_id, value, comment, rating.rater_of(request)
        )

    def rate_edit(self, episode_id: int | None, edited: str, request: gr.Request):
        return rating.save_edit(self.ctx, episode_id, edited, rating.rater_of(request))

    def vote(self, choice: str):
        """The event function of one A/B vote button."""

        def rate(pair: tuple[int, int] | None, request: gr.Request) -> str:
            return rating.save_vote(self.ctx, pair, choice, rating.rater_of(request))

        return rate

    def refresh_adapters(self):
        """New versions appear in the adapter lists when the tab is opened."""
        choices = adapter_choices(self.ctx)
        return gr.update(choices=choices), gr.update(choices=choices)
