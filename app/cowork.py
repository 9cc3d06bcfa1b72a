"""The co-write and co-code tabs: one builder, `CoworkTab(ctx, kind)`, for both kinds of task.

A person picks a task (a curated one, or their own prompt; for code, their own problem and
tests, or a class: a ClassEval one or their own skeleton and unittest tests), a team (size 2-4,
shape, turns, adapter version, editable role prompts; a class team's agents have none) and runs
it. One pane per agent streams its tokens; then comes the combined result (editable, and saved
as the preferred output on request), the test results for code (for a class, per test class),
and the rating panel. The A/B mode runs
two teams on the same task side by side and asks which result is better.

Event functions are methods named after the event; each reads its inputs, calls `agents/`,
`learner/` or `store/` and returns updates. The episode itself runs in `app.live`. This module
holds the form and the run; `app.cowork_choices` what the form offers and means, and
`app.cowork_results` the views of the episode and the rating buttons.
"""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from agents.tasks import LONGFORM_SECTIONS
from agents.team.graph import Sampling, TeamSettings
from agents.team.outline import plan_outline
from agents.team.roles import CLASS_SHAPES, MAX_TURNS, PROMPTS, SHAPES, size_from_setting
from app.context import AppContext
from app.cowork_choices import (
    AB,
    CLASS_SHAPE_LABELS,
    CLASS_SOURCES,
    CURATED,
    EXAMPLE_CLASS,
    EXAMPLE_CLASS_TESTS,
    EXAMPLE_PROBLEM,
    EXAMPLE_SECTIONS,
    EXAMPLE_TESTS,
    MAX_PANES,
    ONE_TEAM,
    SHAPE_LABELS,
    SOURCES,
    adapter_choices,
    chosen_class,
    chosen_task,
    problem_choices,
    resolve_adapters,
    role_layout,
    served_shape,
    source_max_tokens,
    task_preview,
)
from app.cowork_results import ResultsArea
from app.live import ClassRun, LiveEpisode, describe_error, run_live
from learner.episode import EpisodeSetup

# the code boxes of co-code, for one function or a class (True)
PREVIEW = {False: "The problem", True: "The class: its skeleton (the agents write the methods)"}
PROMPT = {
    False: "Your problem: a function signature with a docstring",
    True: "Your class: a skeleton (imports, the class, its constructor, each method's signature "
    "and docstring)",
}
TESTS = {
    False: "Your tests (asserts that call the function, or HumanEval's check(candidate)); optional",
    True: "Your tests: unittest.TestCase classes, one per method as ClassEval writes them",
}
EPISODE_SLOTS = 4  # episodes (of all sessions) run at once; the server batches them; more queue


class CoworkTab:
    """The co-write (`kind="writing"`) or co-code (`kind="coding"`) tab."""

    def __init__(self, ctx: AppContext, kind: str):
        self.ctx, self.kind = ctx, kind
        self.code = kind == "coding"
        self.name = "cocode" if self.code else "cowrite"
        self.results = ResultsArea(ctx, self.code, self.id)

    # -- layout ----------------------------------------------------------------------------
    def build(self) -> None:
        sources = SOURCES[self.kind]
        first = self.first_source = sources[0][1]
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
                self.build_task_inputs(default)
            with gr.Column(scale=2):
                self.build_team_settings()
        self.build_roles(first)
        self.run_button = gr.Button("Run the team", variant="primary", elem_id=self.id("run"))
        self.results.build()
        self.wire()

    def build_task_inputs(self, default: str | None) -> None:
        """The problem or text of a curated task, and the boxes of a person's own task."""
        if self.code:
            self.preview = gr.Code(
                task_preview(self.kind, default),
                language="python",
                label=PREVIEW[False],
                interactive=False,
                visible=True,
                elem_id=self.id("preview"),
            )
            self.prompt = gr.Code(
                EXAMPLE_PROBLEM,
                language="python",
                label=PROMPT[False],
                interactive=True,
                visible=False,
                elem_id=self.id("prompt"),
            )
            self.tests = gr.Code(
                EXAMPLE_TESTS,
                language="python",
                label=TESTS[False],
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
                "",
                placeholder=EXAMPLE_SECTIONS,
                label="Sections, optional: one a line (Heading: what it alone covers, and if "
                "you like `| begins: ` the words its text begins with), a writer's each; empty: "
                "What it is, Where it came from, A surprising fact, Why it matters today",
                lines=4,
                max_lines=8,
                visible=self.first_source == "own_longform",
                elem_id=self.id("sections"),
            )
            self.plan = gr.Button(
                "Plan the sections from my request (a model call; then edit each brief: what "
                "only it covers)",
                size="sm",
                visible=self.first_source == "own_longform",
                elem_id=self.id("plan"),
            )

    def build_team_settings(self) -> None:
        """The mode (one team, or A/B), the team's shape, size, turns, tokens, temperature and
        adapters, and team B's."""
        self.mode = gr.Radio([ONE_TEAM, AB], value=ONE_TEAM, label="Mode", elem_id=self.id("mode"))
        served, size, why = served_shape(self.kind)
        self.served = gr.Markdown(why, visible=bool(why), elem_id=self.id("served"))
        self.shape = gr.Dropdown(
            [(SHAPE_LABELS[s], s) for s in SHAPES],
            value=served,
            label="Team shape",
            elem_id=self.id("shape"),
        )
        self.size = gr.Radio(
            [2, 3, 4],
            value=max(size, 2),  # single's one agent: the team shapes' size stays to choose
            label="Team size",
            interactive=served != "single",
            elem_id=self.id("size"),
        )
        with gr.Row():
            self.turns = gr.Slider(
                1,
                MAX_TURNS,
                value=1,
                step=1,
                label="Turns at most",
                elem_id=self.id("turns"),
            )
            self.max_tokens = gr.Slider(
                32,
                2048,
                value=source_max_tokens(self.kind, self.first_source),
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
        choices = adapter_choices(self.ctx, self.kind)
        self.adapters = gr.Dropdown(
            choices, value="serving", label="Adapters (team A)", elem_id=self.id("adapters")
        )
        with gr.Group(visible=False) as self.team_b:
            self.shape_b = gr.Dropdown(
                [(SHAPE_LABELS[s], s) for s in SHAPES],
                value="parallel" if served == "single" else "single",  # the other one
                label="Team B shape",
                elem_id=self.id("shape-b"),
            )
            self.adapters_b = gr.Dropdown(
                choices,
                value="base",
                label="Team B adapters",
                elem_id=self.id("adapters-b"),
            )

    def build_roles(self, first: str) -> None:
        """The roles' prompts, editable; filled for the first team on first load, as a change of
        team fills them."""
        with gr.Accordion(
            "Roles: the agents' instructions (edit them to change how the team works)",
            open=False,
            elem_id=self.id("roles"),
        ) as self.roles_box:
            gr.Markdown(
                "Braces are filled in per task: `{entry}` the function to write, `{n}` the team "
                "size, `{helpers}` the helpers' names, `{document}` what is written, `{sections}` "
                "the sections in order, `{words}` the target length."
            )
            names = role_layout(self.kind, first, served_shape(self.kind)[0], 2)
            self.role_names = gr.State(names)
            # the first team's boxes are filled on first load, as a change of team fills them
            self.role_texts = [
                gr.Textbox(
                    PROMPTS[names[i]] if i < len(names) else "",
                    label=f"agent {i + 1} · {names[i]}" if i < len(names) else None,
                    lines=3,
                    max_lines=8,
                    visible=i < len(names),
                    elem_id=self.id(f"role-{i}"),
                )
                for i in range(MAX_PANES)
            ]

    def id(self, name: str) -> str:
        return f"{self.name}-{name}"

    # -- events ----------------------------------------------------------------------------
    def wire(self) -> None:
        boxes = [self.problem, self.preview, self.prompt]
        boxes += [self.tests if self.code else self.sections, self.max_tokens]
        if not self.code:
            boxes.append(self.plan)
        if self.code:  # one function or a class: the shapes, the served team, the versions
            boxes += [self.shape, self.shape_b, self.size, self.served, self.roles_box]
            boxes += [self.adapters, self.adapters_b]
        inputs = [self.source, self.prompt, self.tests if self.code else self.sections]
        self.source.change(self.choose_source, inputs, boxes, show_progress="hidden").then(
            self.refresh_roles, self.roles_inputs(), self.roles_outputs(), show_progress="hidden"
        )
        self.problem.change(self.show_problem, self.problem, self.preview, show_progress="hidden")
        if not self.code:
            self.plan.click(
                self.plan_sections,
                self.prompt,
                self.sections,
                concurrency_id="episodes",  # a model call: it waits its turn with the episodes
                concurrency_limit=EPISODE_SLOTS,
                api_name=self.results.api("plan"),
            )
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
            [self.team_b, self.results.team_area, self.results.ab_area, self.run_button],
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
            self.results.run_outputs(),
            concurrency_id="episodes",
            concurrency_limit=EPISODE_SLOTS,
            show_progress="minimal",
            api_name=self.results.api("run"),
        )
        self.results.wire()

    def roles_inputs(self) -> list:
        return [self.source, self.shape, self.size, self.role_names, *self.role_texts]

    def roles_outputs(self) -> list:
        return [self.role_names, *self.role_texts]

    def choose_source(self, source: str, prompt: str, tests: str):
        """Show the list of curated tasks, or the boxes for one's own; set the tokens per call
        the source starts with. On co-code, a class or one function: the shapes, the served
        team and the versions of that work (a class team's agents have no role prompts)."""
        curated = source in CURATED
        updates = [
            gr.update(
                choices=problem_choices(source) if curated else [], value=None, visible=curated
            ),
            gr.update(value="", visible=curated),
            gr.update(visible=not curated),
        ]
        if not self.code:
            updates.append(gr.update(visible=source == "own_longform"))
            # a sectioned document starts with tokens enough for every writer's share
            updates.append(gr.update(value=source_max_tokens(self.kind, source)))
            return updates + [gr.update(visible=source == "own_longform")]
        klass = source in CLASS_SOURCES
        examples = {EXAMPLE_PROBLEM, EXAMPLE_CLASS, EXAMPLE_TESTS, EXAMPLE_CLASS_TESTS, ""}
        mine = {  # the person's own text stays; an example is swapped for the other's
            "prompt": prompt if prompt.strip() not in {e.strip() for e in examples} else None,
            "tests": tests if tests.strip() not in {e.strip() for e in examples} else None,
        }
        updates[1] = gr.update(value="", visible=curated, label=PREVIEW[klass])
        updates[2] = gr.update(
            visible=not curated, label=PROMPT[klass],
            value=mine["prompt"] or (EXAMPLE_CLASS if klass else EXAMPLE_PROBLEM),
        )  # fmt: skip
        updates.append(
            gr.update(
                visible=not curated, label=TESTS[klass],
                value=mine["tests"] or (EXAMPLE_CLASS_TESTS if klass else EXAMPLE_TESTS),
            )
        )  # fmt: skip
        updates.append(gr.update(value=source_max_tokens(self.kind, source)))
        return updates + self.work_updates("class" if klass else "coding")

    def work_updates(self, work: str) -> list:
        """The shapes, the served shape and why, the roles and the versions of a kind of work
        ("coding": one function; "class")."""
        served, size, why = served_shape(work)
        labels = CLASS_SHAPE_LABELS if work == "class" else SHAPE_LABELS
        shapes = [(labels[s], s) for s in (CLASS_SHAPES if work == "class" else SHAPES)]
        other = "parallel" if served.startswith("single") else "single"
        choices = adapter_choices(self.ctx, work)
        return [
            gr.update(choices=shapes, value=served),
            gr.update(choices=shapes, value=other),
            gr.update(interactive=not served.startswith("single"), value=max(size, 2)),
            gr.update(value=why, visible=bool(why)),
            gr.update(visible=work != "class"),
            gr.update(choices=choices, value="serving"),
            gr.update(choices=choices, value="base"),
        ]

    def plan_sections(self, request: str):
        """The sections box filled with the outline the model plans for the request
        (`agents.team.outline.plan_outline`), for the person to edit; a plan it could not make
        leaves the box as it was and says so."""
        if not (request or "").strip():
            gr.Warning("Type your request first: the sections are planned from it.")
            return gr.skip()
        try:
            chosen_task(self.kind, "own_longform", None, request, "")  # its checks: length
            lines, _, _ = plan_outline(self.ctx.client, request, LONGFORM_SECTIONS)
        except Exception as e:  # the request or the server: say what, keep the box
            gr.Warning(describe_error(e))
            return gr.skip()
        if lines is None:
            gr.Warning(
                "The model's plan did not give four distinct sections: write them yourself, "
                "or leave the box empty for the default outline."
            )
            return gr.skip()
        return lines

    def show_problem(self, problem: str | None):
        return task_preview(self.kind, problem)

    def show_size(self, shape: str):
        return gr.update(interactive=not shape.startswith("single"))

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
        if source in CLASS_SOURCES:  # a class team's agents share one fixed instruction
            return [names, *[gr.update(visible=False)] * MAX_PANES]
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

    def team_runs(self, form: dict) -> list[EpisodeSetup | ClassRun]:
        """The team(s) the form describes, on its task; raises with what to change."""
        f = form
        sampling = Sampling(
            temperature=float(f[self.temperature]),
            top_p=0.95 if f[self.temperature] > 0 else 1.0,
            max_tokens=int(f[self.max_tokens]),
        )
        teams = [(f[self.shape], f[self.adapters])]
        if f[self.mode] == AB:
            teams.append((f[self.shape_b], f[self.adapters_b]))
        if f[self.source] in CLASS_SOURCES:
            work = "class"
            problem = chosen_class(f[self.source], f[self.problem], f[self.prompt], f[self.tests])
            size, turns = int(f[self.size]), int(f[self.turns])
            runs = [
                ClassRun(problem, TeamSettings(shape, size, turns, None, sampling)).check()
                for shape, _ in teams
            ]
        else:
            work = self.kind
            runs = self.task_runs(f, [shape for shape, _ in teams], sampling)
        if not self.ctx.client.healthy():
            raise ConnectionError(
                f"the model server at {self.ctx.client.base_url} is not answering. Start it "
                "again (a managed one restarts by itself: a minute or more on a busy CPU) and "
                "retry; everything already saved is kept"
            )
        resolved = []
        for run, (_, names) in zip(runs, teams, strict=True):
            adapters = resolve_adapters(self.ctx, names, run.team.agents, work)
            resolved.append(replace(run, team=replace(run.team, adapters=adapters)))
        return resolved

    def task_runs(self, f: dict, shapes: list[str], sampling: Sampling) -> list[EpisodeSetup]:
        """A team of each shape on the form's function or document, with the edited roles."""
        task = chosen_task(
            self.kind,
            f[self.source],
            f[self.problem],
            f[self.prompt],
            f[self.tests],
            f.get(self.sections, ""),  # a form without the box: no sections
        )
        edits = {
            name: text
            for name, text in zip(f[self.role_names], [f[t] for t in self.role_texts], strict=False)
            if text and text.strip() and text != PROMPTS.get(name)
        }
        runs = []
        for shape in shapes:
            size = size_from_setting(shape, f[self.size])
            team = TeamSettings(shape, size, int(f[self.turns]), None, sampling, edits or None)
            run = EpisodeSetup(task, team)
            run.roles()  # a bad combination is refused before anything runs
            runs.append(run)
        return runs

    def run(self, form: dict):
        """Run the team (or both A/B teams) and stream every agent's tokens to the page."""
        try:
            runs = self.team_runs(form)
        except Exception as e:  # the form or the server: say what to change, run nothing
            message = describe_error(e) if not isinstance(e, ConnectionError) else str(e)
            gr.Warning(message)
            yield {self.results.status: f"⚠ {message}."}
            return
        ab = len(runs) == 2
        yield self.results.reset_view(runs, ab)
        episodes: list[LiveEpisode] = []
        for episodes in run_live(runs, self.ctx.client, self.ctx.db_path):
            yield self.results.ab_view(episodes) if ab else self.results.team_view(episodes[0])
        failed = [e.error for e in episodes if e.error]
        if failed:
            gr.Warning(f"The episode failed: {failed[0]}")

    def refresh_adapters(self):
        """New versions appear in the adapter lists when the tab is opened."""
        choices = adapter_choices(self.ctx, self.kind)
        return gr.update(choices=choices), gr.update(choices=choices)
