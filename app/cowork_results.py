"""The lower half of a co-write or co-code tab: the status and turn log, a pane per agent that
streams its tokens, the combined result, the tests table and the rating panel, or in A/B mode
both teams' results and the vote. `ResultsArea` turns a running episode into updates of these
views, and its rating buttons' event functions save what the person says."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable

import gradio as gr

import store
from agents.judge.testrun import TestReport, run_tests
from agents.team.combine import extract_code
from app import rating
from app.context import AppContext
from app.cowork_choices import MAX_PANES
from app.live import PASSED_MEANS, LiveClass, LiveEpisode
from app.ratings_panel import answered_by
from learner.episode import EpisodeSetup

SCORES = ["1", "2", "3", "4", "5"]


def display_code(text: str) -> str:
    """An agent's reply as code: its ``` fence lines dropped, the rest as written."""
    return "\n".join(line for line in text.splitlines() if not re.match(r"^\s*```", line))


def tests_markdown(episode: LiveEpisode | LiveClass) -> str:
    """Which test asserts passed, with the messages of those that did not; for a class, which
    test classes passed and whose methods they test."""
    if isinstance(episode, LiveClass):
        return class_markdown(episode)
    task = episode.run.task
    if not task.tests:
        return (
            "**No tests for this problem**: the module was only checked to parse and define "
            f"`{task.entry_point}`."
        )
    if episode.tests is None:
        return "Tests: not run (the episode did not finish)."
    return report_markdown(episode.tests, "Tests")


def class_markdown(episode: LiveClass) -> str:
    """A class episode's verdict: each test class, the method it tests, who wrote it, its tests
    passed and its first failure; what the environment wrote, and what it dropped."""
    result = episode.result
    if result is None:
        return "Tests: not run (the episode did not finish)."
    owner = {m: a for a, methods in enumerate(result.dealt) for m in methods}
    lines = [class_report_markdown(result.problem, result.verdict, owner, "Tests")]
    lines.append(
        "Each method was begun with the skeleton's head of it (decorators, `def` line, "
        "docstring): CoTeam wrote those, the agents the bodies."
    )
    for agent, name in result.merged.dropped:
        lines.append(f"- agent {agent + 1} also wrote `{name}`, not dealt to it: dropped")
    for name in result.merged.missing:
        lines.append(f"- `{name}` was not written: the skeleton's stub stays")
    return "\n\n".join(lines)


def reward_markdown(kind: str, reward: float, components: dict, weights: dict) -> str:
    """A reward and the terms it is made of, a line each (the page and History alike)."""
    if kind == "class":
        from learner.class_train import explain_class_reward

        head = f"**Reward {reward:.2f}**, the weighted mean of:"
        lines = explain_class_reward(components, weights)
    else:
        from learner.rewards import explain_reward

        head = f"**Reward {reward:.2f}**, the sum of:"
        lines = explain_reward(components, weights)
    return head + "\n" + "\n".join(f"- {line}" for line in lines)


def class_report_markdown(problem, verdict, owner: dict, title: str) -> str:
    """The judge's verdict on a class as a table (ClassEval's count: a test class passes when
    all its tests do)."""
    head = (
        f"**{title}: {verdict.classes_passed} of {len(verdict.test_classes)} test classes passed**"
    )
    if verdict.report.error:
        head += f" — {verdict.report.error}"
    rows = [
        "| | test class | method | written by | tests | first failure |",
        "|---|---|---|---|---|---|",
    ]
    for name, (passed, total) in verdict.test_classes.items():
        method = problem.test_classes.get(name)
        who = f"agent {owner[method] + 1}" if method in owner else "several together"
        failure = verdict.first_failure(name).replace("|", "\\|").replace("\n", " ")
        failure = textwrap.shorten(failure, 120)
        rows.append(
            f"| {'✓' if passed == total else '✗'} | {name} | {f'`{method}`' if method else '–'} "
            f"| {who} | {passed}/{total} | {failure} |"
        )
    return head + "\n\n" + "\n".join(rows)


def edited_tests_markdown(ctx: AppContext, episode_id: int, edited: str) -> str:
    """The person's edited module against the episode's tests, through the runner the team, the
    learner and `coteam check` use: "7 of 7 passed" means the same in all four places; an
    edited class through the class judge."""
    with store.open_db(ctx.db_path) as db:
        task = store.get_episode(db, episode_id)["task"]
    metadata = task["metadata"]
    if task["kind"] == "class":
        from agents.kinds.classes import judge_class
        from learner.class_train import class_problem_of

        problem = class_problem_of(task)
        verdict = judge_class(problem, extract_code(edited))
        return class_report_markdown(problem, verdict, {}, "Your version")
    if not metadata.get("tests"):
        return "No tests for this problem: your version is saved unchecked."
    report = run_tests(
        extract_code(edited),
        metadata["tests"],
        metadata["entry_point"],
        given=metadata.get("preamble", ""),
    )
    return report_markdown(report, "Your version")


def report_markdown(report: TestReport, title: str) -> str:
    """A test report as a table: each test and why it failed (the judge's words)."""
    head = f"**{title}: {report.passed} of {report.total} passed**"
    if report.error:
        head += f" — {report.error}"
    rows = ["| | test | message |", "|---|---|---|"]
    for r in report.results:
        source = r.source.splitlines()[-1].replace("|", "\\|")
        message = (r.message or "").replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| {'✓' if r.passed else '✗'} | `{textwrap.shorten(source, 100)}` "
            f"| {textwrap.shorten(message, 160)} |"
        )
    return head + "\n\n" + "\n".join(rows)


def turn_log(episode: LiveEpisode | LiveClass) -> str:
    """Each finished turn's verdict (and what "passed" means for this kind of work), the
    feedback each agent was given for the next, and at the end the reward, a term a line."""
    lines = []
    for verdict in episode.verdicts:
        mark = "✓ passed" if verdict["success"] else "⚠ not passed"
        meaning = f" (passed: {PASSED_MEANS[episode.kind]})" if len(lines) == 0 else ""
        lines.append(f"**Turn {verdict['turn'] + 1}: {mark}**{meaning}")
        if not verdict["done"]:
            for pane, note in zip(episode.panes, verdict["feedback"], strict=False):
                if note:
                    lines.append(f"- feedback to {pane.title}: {note.replace(chr(10), ' ')}")
    if episode.finished and episode.reward is not None:
        lines.append(
            "\n"
            + reward_markdown(episode.kind, episode.reward, episode.components, episode.weights)
        )
    return "\n".join(lines)


class ResultsArea:
    """The views of the episode(s) a tab runs, and their rating buttons; `id` names elements."""

    def __init__(self, ctx: AppContext, code: bool, id: Callable[[str], str]):
        self.ctx, self.code, self.id = ctx, code, id

    def build(self) -> None:
        self.status = gr.Markdown("Pick a task and a team, then run it.", elem_id=self.id("status"))
        self.turn_log = gr.Markdown(elem_id=self.id("turn-log"))
        self.episode_id = gr.State(None)
        self.ab_pair = gr.State(None)
        self.build_team_area()
        self.build_ab_area()

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

    def wire(self) -> None:
        """The rating buttons' events, each named in the HTTP API (`/cocode_score`, …)."""
        # a saved thumb stays pressed (and its opposite not) until the next episode
        for i, (up, down) in enumerate(self.agent_thumbs):
            for button, value, way in ((up, 1, "up"), (down, -1, "down")):
                button.click(
                    self.thumbs(value, agent=i),
                    self.episode_id,
                    [self.rating_status, up, down],
                    api_name=self.api(f"agent{i + 1}-thumbs-{way}"),
                )
        for button, value, way in ((self.result_up, 1, "up"), (self.result_down, -1, "down")):
            button.click(
                self.thumbs(value),
                self.episode_id,
                [self.rating_status, self.result_up, self.result_down],
                api_name=self.api(f"thumbs-{way}"),
            )
        self.save_score.click(
            self.rate_score,
            [self.episode_id, self.score, self.comment],
            self.rating_status,
            api_name=self.api("score"),
        )
        self.save_edit.click(
            self.rate_edit,
            [self.episode_id, self.result],
            self.rating_status,
            api_name=self.api("edit"),
        )
        for choice, button in self.votes.items():
            button.click(
                self.vote(choice),
                self.ab_pair,
                self.vote_status,
                api_name=self.api(f"vote-{choice}"),
            )

    def api(self, name: str) -> str:
        """An event's name in the HTTP API: the element id with underscores (`cocode_score`)."""
        return self.id(name).replace("-", "_")

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
            *self.thumb_buttons(),
        ]

    def thumb_buttons(self) -> list:
        return [
            b for pair in [*self.agent_thumbs, (self.result_up, self.result_down)] for b in pair
        ]

    def reset_view(self, runs: list[EpisodeSetup], ab: bool) -> dict:
        updates = {
            self.status: "Starting…",
            self.turn_log: "",
            self.episode_id: None,
            self.ab_pair: None,
            self.rating_panel: gr.update(visible=False),
            self.rating_status: "",
            self.vote_row: gr.update(visible=False),
            self.vote_status: "",
            **{button: gr.update(variant="secondary") for button in self.thumb_buttons()},
        }
        if ab:
            for view in self.ab_views:
                updates[view] = ""
            return updates
        size = runs[0].team.agents
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
            label = f"Agent {i + 1} · {pane.title} · {adapter} · {pane.tokens} tokens{state}"
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
            updates[self.status] += servers_out(self.ctx)
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
                f"**Team {side}**: {episode.run.team.shape} · adapters {adapters}",
                episode.status(),
            ]
            if episode.finished and episode.result is not None and not episode.error:
                lines.append(answered_by(self.ctx, episode.episode_id) + servers_out(self.ctx))
            updates[status] = "\n\n".join(lines)
            if episode.result is not None:
                updates[view] = episode.output
            else:  # while it runs: every agent's text so far, one after another
                updates[view] = "\n\n".join(
                    f"{'# ' if self.code else ''}[{p.title}]\n{display_code(p.text) if self.code else p.text}"
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

        def rate(episode_id: int | None, request: gr.Request):
            rater = rating.rater_of(request)
            saved = rating.save_rating(
                self.ctx, episode_id, "thumbs", what, rater, value=value, agent=agent
            )
            if not saved.startswith("✓"):
                return saved, gr.skip(), gr.skip()
            pressed = {True: gr.update(variant="primary"), False: gr.update(variant="secondary")}
            return saved, pressed[value > 0], pressed[value < 0]

        return rate

    def rate_score(
        self, episode_id: int | None, score: str | None, comment: str, request: gr.Request
    ):
        value = int(score) if score else None
        return rating.save_score_and_comment(
            self.ctx, episode_id, value, comment, rating.rater_of(request)
        )

    def rate_edit(self, episode_id: int | None, edited: str, request: gr.Request):
        """Keep the person's version as the preferred output; a module is run against the
        task's tests, and the page shows how it did."""
        saved = rating.save_edit(self.ctx, episode_id, edited, rating.rater_of(request))
        if self.code and saved.startswith("✓"):
            saved += "\n\n" + edited_tests_markdown(self.ctx, episode_id, edited)
        return saved

    def vote(self, choice: str):
        """The event function of one A/B vote button."""

        def rate(pair: tuple[int, int] | None, request: gr.Request) -> str:
            return rating.save_vote(self.ctx, pair, choice, rating.rater_of(request))

        return rate


def servers_out(ctx: AppContext) -> str:
    """What the page says of model servers taken out of the rotation (several `--vllm-url`):
    their calls went to the others."""
    out = ctx.client.taken_out()
    return "".join(
        f"\n\n⚠ The model server at {url} stopped answering ({why}); its calls go to the others."
        for url, why in out.items()
    )
