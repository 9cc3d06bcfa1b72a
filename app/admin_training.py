"""The admin tab's learner panel: what the learner is doing (status in words and a progress
bar), the training form with "Retrain now" and cancel, the latest training runs, and the schedule
that starts runs by itself."""

from __future__ import annotations

import html
from dataclasses import replace
from typing import get_args

import gradio as gr

import store
from agents.tasks import TaskSet
from app.admin_login import PRIVATE, require
from app.context import AppContext
from learner.config import JOINT_MODES, TrainArgs
from learner.promotion import describe_gate
from learner.registry import serving_adapters
from learner.worker import Schedule, with_overrides

RUN_COLUMNS = ["run", "trigger", "state", "progress", "started", "message"]


def learner_status(ctx: AppContext) -> tuple[str, str]:
    """The learner in words, and its progress bar (HTML)."""
    with store.open_db(ctx.db_path) as db:
        runs = store.list_training_runs(db, limit=1)
        since = runs[0]["started_at"] if runs else ""
        new_ratings = store.count_ratings(db, since)
        episodes = store.count_episodes(db)
        serving = {kind: serving_adapters(db, ctx.max_agents, kind) for kind in store.WORK_KINDS}
    run = runs[0] if runs else None
    lines = []
    if ctx.learner is None:
        lines.append("**Training is not available in this app** (no learner was configured).")
    if run is None:
        lines.append("**Now:** idle; no training run yet.")
        progress = 0.0
    else:
        progress = run["progress"] if run["state"] == "running" else 1.0 * (run["state"] == "ok")
        what = f"training run {run['id']} ({run['trigger']}) **{run['state']}**"
        failed = run["state"] == "failed" and run["error"]
        detail = run["error"].splitlines()[0] if failed else (run["message"] or "")
        lines.append(
            f"**{'Now' if run['state'] == 'running' else 'Last run'}:** {what}"
            + (f": {detail}" if detail else "")
        )
        if run["state"] != "running" and run["metrics"].get("gate"):
            gate = run["metrics"]["gate"]
            verdict = "promoted" if run["metrics"].get("promoted") else "not promoted"
            lines.append(f"**Gate:** {describe_gate(gate)}: {verdict}")
    for kind, names in serving.items():
        names = [n for n in names if n]
        lines.append(
            f"**Serving {kind}:** {', '.join(names) if names else 'the base model for every agent'}"
        )
    lines.append(
        f"**Since the last run:** {new_ratings} new rating(s) · {episodes} episode(s) in all"
    )
    if ctx.learner is not None:
        s = ctx.learner.schedule
        parts = [
            f"every {s.every_ratings} new ratings" if s.every_ratings else None,
            f"every {s.every_minutes:g} minutes" if s.every_minutes else None,
        ]
        lines.append(
            f"**Schedule:** {' or '.join(p for p in parts if p) or 'off (runs start only from here)'}"
        )
    label = html.escape(run["message"] or run["state"]) if run else "idle"
    bar = (
        f'<div class="coteam-progress" id="admin-progress-bar" data-state="{run["state"] if run else "idle"}" '
        f'data-progress="{progress:.3f}"><div style="width:{100 * progress:.1f}%"></div></div>'
        f'<div class="coteam-progress-label">{100 * progress:.0f}% · {label}</div>'
    )
    return "\n\n".join(lines), bar


def runs_table(ctx: AppContext) -> dict:
    with store.open_db(ctx.db_path) as db:
        runs = store.list_training_runs(db, limit=10)
    rows = [
        [
            r["id"],
            r["trigger"],
            r["state"],
            f"{100 * r['progress']:.0f}%",
            r["started_at"][:16].replace("T", " "),
            (r["message"] or r["error"] or "")[:120],
        ]
        for r in runs
    ]
    return {"headers": RUN_COLUMNS, "data": rows}


class TrainingPanel:
    """The learner section of the admin tab."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def build(self) -> None:
        gr.Markdown(
            "## Learner\nA run trains each agent's LoRA with MAGRPO on the training tasks of "
            "the chosen set, the people's ratings scoring every fresh answer through the "
            "preference model; then the promotion gate runs the new team and the serving one on "
            "the set's own validation tasks and hot-swaps the new one in only when its joint "
            "reward is higher and its pass rate not significantly lower. On a 2-core CPU a step "
            "with the defaults below takes a minute or two (long-form articles, 4 writers: two "
            "to three). A first run of a few minutes: **Steps** 1, **Answers per task** 2, "
            "**Tasks per step** 1, **Tokens per agent** 64, **Gate: validation tasks** 1."
        )
        self.learner_md = gr.Markdown(elem_id="admin-learner-status")
        self.progress = gr.HTML(elem_id="admin-progress")
        self.build_run_form()
        with gr.Row():
            self.retrain = gr.Button("Retrain now", variant="primary", elem_id="admin-retrain")
            # shown only while a run is running (the admin tab's timer keeps it current)
            self.cancel = gr.Button(
                "Cancel the running run", variant="stop", visible=False, elem_id="admin-cancel"
            )
        self.learner_msg = gr.Markdown(elem_id="admin-learner-msg")
        self.runs = gr.Dataframe(headers=RUN_COLUMNS, interactive=False, elem_id="admin-runs")
        self.build_schedule()

    def build_run_form(self) -> None:
        """A run's settings, starting from the worker's (or TrainArgs' defaults without one)."""
        learner = self.ctx.learner
        args = learner.args if learner is not None else TrainArgs()
        with gr.Row():
            self.train_task = gr.Dropdown(
                list(get_args(TaskSet)),
                value=args.task,
                label="Train on",
                elem_id="admin-train-task",
            )
            self.train_agents = gr.Dropdown(
                [2, 3, 4],
                value=args.agents,
                label="Agents",
                elem_id="admin-train-agents",
            )
            self.steps = gr.Number(
                args.steps,
                label="Steps",
                info="each step samples the team, scores it and updates every agent once",
                precision=0,
                minimum=1,
                elem_id="admin-steps",
            )
            self.group_size = gr.Number(
                args.magrpo.group_size,
                label="Answers per task (group size G)",
                info="the team answers each task G times; each answer is judged against "
                "the group's mean",
                precision=0,
                minimum=2,
                elem_id="admin-group-size",
            )
            self.tasks_per_step = gr.Number(
                args.magrpo.tasks_per_step,
                label="Tasks per step",
                info="training problems drawn per step (train split only)",
                precision=0,
                minimum=1,
                elem_id="admin-tasks-per-step",
            )
        with gr.Row():
            self.train_tokens = gr.Number(
                args.magrpo.max_new_tokens,
                label="Tokens per agent",
                info="the most each agent may write per answer",
                precision=0,
                minimum=16,
                elem_id="admin-train-tokens",
            )
            self.task_limit = gr.Number(
                args.task_limit or 0,
                label="Only the first N training tasks (0: all)",
                precision=0,
                minimum=0,
                elem_id="admin-task-limit",
            )
            self.build_gate_form(args)
            self.joint_mode = gr.Dropdown(
                list(JOINT_MODES),
                value=args.magrpo.joint_mode,
                label="How answers are combined",
                info="aligned: agent answers of the same sample form one team answer; cross: "
                "every mix of the agents' answers, each agent credited for its own part (one turn)",
                elem_id="admin-joint-mode",
            )

    def build_gate_form(self, args: TrainArgs) -> None:
        """The promotion gate's settings of a run, in the run form's row."""
        self.gate_tasks = gr.Number(
            args.gate.tasks,
            label="Gate: validation tasks",
            info="problems the new version must do better on before it serves",
            precision=0,
            minimum=1,
            elem_id="admin-gate-tasks",
        )
        self.gate_threshold = gr.Number(
            max(0.0, -args.gate.min_gain),
            label="Gate: how much lower a candidate's reward may be (0: it must be higher)",
            minimum=0,
            elem_id="admin-gate-threshold",
        )
        self.gate_samples = gr.Number(
            args.gate.samples,
            label="Gate: answers per task",
            info="1: each team's greedy answer; more: that many answers sampled as this app "
            "samples them, the gate that many times slower",
            precision=0,
            minimum=1,
            elem_id="admin-gate-samples",
        )

    def build_schedule(self) -> None:
        """When runs start by themselves: after N new ratings, every T minutes."""
        gr.Markdown("### Schedule (runs start by themselves)")
        schedule = self.ctx.learner.schedule if self.ctx.learner else None
        with gr.Row():
            self.every_ratings = gr.Number(
                (schedule.every_ratings or 0) if schedule else 0,
                label="After N new ratings (0: never)",
                precision=0,
                minimum=0,
                elem_id="admin-every-ratings",
            )
            self.every_minutes = gr.Number(
                (schedule.every_minutes or 0) if schedule else 0,
                label="Every T minutes (0: never)",
                minimum=0,
                elem_id="admin-every-minutes",
            )
            self.save_schedule = gr.Button(
                "Save schedule (uses the training settings above)", elem_id="admin-save-schedule"
            )
        self.schedule_msg = gr.Markdown(elem_id="admin-schedule-msg")

    def train_form(self) -> list:
        return [
            self.train_task,
            self.train_agents,
            self.steps,
            self.group_size,
            self.tasks_per_step,
            self.train_tokens,
            self.task_limit,
            self.gate_tasks,
            self.gate_threshold,
            self.gate_samples,
            self.joint_mode,
        ]

    def wire(self, admin_ok: gr.State) -> None:
        self.retrain.click(
            self.retrain_now, [admin_ok, *self.train_form()], self.learner_msg, **PRIVATE
        )
        self.cancel.click(self.cancel_run, [admin_ok], self.learner_msg, **PRIVATE)
        self.save_schedule.click(
            self.set_schedule,
            [admin_ok, self.every_ratings, self.every_minutes, *self.train_form()],
            self.schedule_msg,
            **PRIVATE,
        )

    def retrain_now(self, admin_ok: bool, *form):
        require(admin_ok)
        worker = self.ctx.learner
        if worker is None:
            return "⚠ This app has no learner, so it cannot train."
        try:
            args = self.train_args(*form)
            run_id = worker.request("admin", args)
        except (store.TrainingRunBusy, ValueError) as e:
            gr.Warning(str(e))
            return f"⚠ Not started: {e}"
        gr.Info(f"Training run {run_id} started")
        m = args.magrpo
        return f"Training run {run_id} started: {args.steps} step(s) on {args.task}, group size {m.group_size}, {m.tasks_per_step} task(s) per step, {m.max_new_tokens} tokens, {m.joint_mode} joint samples. The progress bar above follows it."

    def train_args(
        self,
        task,
        agents,
        steps,
        group_size,
        tasks_per_step,
        tokens,
        task_limit,
        gate_tasks,
        slack,
        gate_samples,
        joint_mode,
    ):
        for name, value, low in [
            ("steps", steps, 1),
            ("group size", group_size, 2),
            ("tasks per step", tasks_per_step, 1),
            ("tokens", tokens, 16),
        ]:
            if value is None or value < low:
                raise ValueError(f"{name} must be at least {low}")
        args = with_overrides(
            self.ctx.learner.args,
            task=task,
            agents=int(agents),
            steps=int(steps),
            group_size=int(group_size),
            tasks_per_step=int(tasks_per_step),
            max_new_tokens=int(tokens),
            joint_mode=joint_mode,
        )
        gate = replace(
            args.gate,
            tasks=int(gate_tasks or 0),
            min_gain=-float(slack or 0),
            samples=int(gate_samples or 0),
        )
        args = replace(args, task_limit=int(task_limit) if task_limit else None, gate=gate)
        args.check()
        return args

    def cancel_run(self, admin_ok: bool):
        require(admin_ok)
        with store.open_db(self.ctx.db_path) as db:
            running = [r for r in store.list_training_runs(db, limit=5) if r["state"] == "running"]
            if not running:
                return "Nothing to cancel: no training run is running."
            store.cancel_training_run(db, running[0]["id"], "cancelled by the admin")
        return f"Training run {running[0]['id']} cancelled: it stops at its next step and publishes nothing."

    def set_schedule(self, admin_ok: bool, every_ratings, every_minutes, *form):
        require(admin_ok)
        worker = self.ctx.learner
        if worker is None:
            return "⚠ This app has no learner, so it cannot train."
        try:
            args = self.train_args(*form)
        except ValueError as e:
            return f"⚠ Not saved: {e}"
        worker.args = args
        worker.schedule = Schedule(
            int(every_ratings) if every_ratings else None,
            float(every_minutes) if every_minutes else None,
        )
        if worker.schedule.every_ratings or worker.schedule.every_minutes:
            worker.start_schedule()
            gr.Info("Schedule saved")
            return "✓ Schedule saved (until the app restarts; `coteam serve --every-ratings N --every-minutes T` makes it lasting)."
        return "✓ Schedule off: runs start only from this tab."
