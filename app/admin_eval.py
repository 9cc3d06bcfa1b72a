"""The admin tab's evaluation panel: launch an evaluation of the held-out tasks (it runs in the
background through `learner.evalworker`), follow it, and read its report and plots."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import gradio as gr

import store
from agents.team.roles import SHAPES
from app.admin_login import PRIVATE, require
from app.context import AppContext
from learner.config import BASE_VARIANT, EvalConfig, EvalError
from learner.evaluate import eval_tasks
from learner.evalworker import EvalWorker
from learner.registry import serving_adapters


def report_choices(ctx: AppContext) -> list[str]:
    """Evaluation folders with a report, newest first."""
    if not ctx.eval_dir.is_dir():
        return []
    found = [p.parent for p in ctx.eval_dir.glob("*/report.md")]
    return [p.name for p in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)]


def read_report(ctx: AppContext, name: str | None) -> tuple[str, list[str]]:
    """A report's Markdown (without its image links) and its plots."""
    if not name:
        return "No evaluation report yet: launch one above.", []
    folder = ctx.eval_dir / Path(name).name  # only folders inside eval_dir
    report = folder / "report.md"
    if not report.is_file():
        return f"⚠ {name} has no report.md (yet).", []
    text = "\n".join(line for line in report.read_text().splitlines() if not line.startswith("!["))
    return text, [str(p) for p in sorted(folder.glob("*.png"))]


class EvalPanel:
    """The evaluation section of the admin tab; one evaluation runs at a time."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.worker = EvalWorker()

    def build(self) -> None:
        gr.Markdown("## Evaluation (held-out tasks)")
        with gr.Row():
            self.eval_task = gr.Dropdown(
                ["coding", "writing"], value="coding", label="Task", elem_id="admin-eval-task"
            )
            self.eval_set = gr.Dropdown(
                ["xsum", "abstracts"],
                value="xsum",
                label="Writing set",
                visible=False,  # for writing only (the task's choice shows it)
                elem_id="admin-eval-set",
            )
            self.eval_limit = gr.Number(
                3, label="Tasks", precision=0, minimum=1, elem_id="admin-eval-limit"
            )
            self.eval_samples = gr.Number(
                1,
                label="Samples per task (1: greedy)",
                precision=0,
                minimum=1,
                elem_id="admin-eval-samples",
            )
            self.eval_tokens = gr.Number(
                128, label="Tokens per call", precision=0, minimum=16, elem_id="admin-eval-tokens"
            )
        with gr.Row():
            self.eval_shapes = gr.CheckboxGroup(
                list(SHAPES),
                value=["parallel", "single"],
                label="Shapes",
                elem_id="admin-eval-shapes",
            )
            self.eval_serving = gr.Checkbox(
                True,
                label="Also the serving adapters (against the base model)",
                elem_id="admin-eval-serving",
            )
        self.launch_eval = gr.Button("Launch the evaluation", elem_id="admin-eval-launch")
        self.eval_msg = gr.Markdown(elem_id="admin-eval-msg")
        with gr.Row():
            self.report_pick = gr.Dropdown([], label="Report", elem_id="admin-report-pick")
            self.show_report = gr.Button("Show", size="sm", elem_id="admin-report-show")
        self.report = gr.Markdown(elem_id="admin-report")
        self.report_plots = gr.Gallery(
            label="Plots", columns=3, height="auto", elem_id="admin-report-plots"
        )

    def wire(self, admin_ok: gr.State) -> None:
        self.eval_task.change(
            lambda task: gr.update(visible=task == "writing"), self.eval_task, self.eval_set
        )
        self.launch_eval.click(
            self.start_eval,
            [
                admin_ok,
                self.eval_task,
                self.eval_set,
                self.eval_limit,
                self.eval_samples,
                self.eval_tokens,
                self.eval_shapes,
                self.eval_serving,
            ],
            self.eval_msg,
            **PRIVATE,
        )
        self.show_report.click(
            self.open_report,
            [admin_ok, self.report_pick],
            [self.report, self.report_plots],
            **PRIVATE,
        )
        self.report_pick.change(
            self.open_report,
            [admin_ok, self.report_pick],
            [self.report, self.report_plots],
            **PRIVATE,
        )

    def reports(self):
        choices = report_choices(self.ctx)
        return gr.update(choices=choices, value=choices[0] if choices else None)

    def eval_status(self) -> str:
        return self.worker.status()

    def start_eval(
        self, admin_ok: bool, task, writing_set, limit, samples, tokens, shapes, serving
    ):
        require(admin_ok)
        if self.worker.running():
            return f"⚠ An evaluation is already running: {self.worker.status()}"
        try:
            variants = {BASE_VARIANT: ()}
            with store.open_db(self.ctx.db_path) as db:
                names = tuple(serving_adapters(db, self.ctx.max_agents, task))
            if serving and any(names):
                variants["serving"] = names
            config = EvalConfig(
                task=task,
                writing_set=writing_set,
                limit=int(limit or 1),
                shapes=tuple(shapes or ()),
                samples=int(samples or 1),
                max_tokens=int(tokens or 128),
                variants=variants,
            )
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            folder = self.ctx.eval_dir / f"{task}-{stamp}"
            job = self.worker.launch(
                config, self.ctx.client, folder, db=self.ctx.db_path, command="admin tab"
            )
        except (EvalError, ValueError) as e:
            return f"⚠ Not launched: {e}"
        gr.Info("Evaluation launched")
        return f"{job.status()}\n\n{self.estimate(config)}"

    def estimate(self, config: EvalConfig) -> str:
        """How long the run should take: its episodes at the median time of the last 50 episodes
        of the same kind in this store (none yet: the count alone)."""
        total = len(eval_tasks(config)) * config.samples * len(config.shapes) * len(config.variants)
        with store.open_db(self.ctx.db_path) as db:
            done = store.list_episodes(db, store.EpisodeFilter(task_kind=config.task, status="ok"))
        times = sorted(e["wall_time_s"] for e in done if e["wall_time_s"])
        if not times:
            return f"{total} episodes to run."
        median = times[len(times) // 2]
        return (
            f"{total} episodes to run: about {total * median / 60:.0f} min at {median:.0f} s an "
            "episode (the median of this app's recent episodes; one at a time)."
        )

    def open_report(self, admin_ok: bool, name: str | None):
        require(admin_ok)
        return read_report(self.ctx, name)
