"""The admin tab, behind the password set by configuration: the learner (status, "Retrain now"
with a progress bar, cancel, the schedule), curves of reward and held-out score, the adapter
registry with promote and rollback, evaluations (launch one, read its report) and export.

Without a configured password the tab stays locked for everyone. Unlocking sets a per-session
flag (a `gr.State`, kept on the server) that every admin event function checks again, so the
panels' functions cannot be called without it. Training and evaluation run in background threads
that outlive the page; a `gr.Timer` polls the store for their progress while the tab is unlocked.
"""

from __future__ import annotations

import datetime as dt
import html
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import store  # noqa: E402
from agents.roles import SHAPES  # noqa: E402
from app.context import AppContext  # noqa: E402
from app.ratings_panel import RatingsPanel  # noqa: E402
from learner.evaluate import BASE_VARIANT, EvalConfig, EvalError, eval_tasks, run_eval  # noqa: E402
from learner.registry import adapter_name, promote, rollback, serving_adapters  # noqa: E402
from learner.train import TrainArgs  # noqa: E402
from learner.worker import Schedule, with_overrides  # noqa: E402
from store.export import export_dataset  # noqa: E402

ADAPTER_COLUMNS = [
    "adapter",
    "agent",
    "version",
    "state",
    "parent",
    "created",
    "train reward",
    "held-out score",
    "training run",
]
RUN_COLUMNS = ["run", "trigger", "state", "progress", "started", "message"]
POLL_S = 2.0
WRONG_PASSWORD_DELAY_S = 1.0  # slows down guessing; doubles with each failure in a row
MAX_BACKOFF_S = 60.0
MAX_LOGIN_FAILURES = 10  # in a row from one address: it is locked out for LOCKOUT_S
LOCKOUT_S = 900.0

log = logging.getLogger(__name__)


class LoginThrottle:
    """Wrong admin passwords per client address. After n failures in a row the next attempt must
    wait WRONG_PASSWORD_DELAY_S·2^(n−1) s (at most MAX_BACKOFF_S); MAX_LOGIN_FAILURES in a row lock
    the address out for LOCKOUT_S. Every failure is logged."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (in a row, last time)
        self._lock = threading.Lock()
        self._clock = clock

    def wait_s(self, client: str) -> float:
        """Seconds before `client` may try again (0: now)."""
        with self._lock:
            count, last = self._failures.get(client, (0, 0.0))
        if count == 0:
            return 0.0
        if count >= MAX_LOGIN_FAILURES:
            pause = LOCKOUT_S
        else:
            pause = min(WRONG_PASSWORD_DELAY_S * 2 ** (count - 1), MAX_BACKOFF_S)
        return max(0.0, last + pause - self._clock())

    def failed(self, client: str) -> None:
        with self._lock:
            count = self._failures.get(client, (0, 0.0))[0] + 1
            self._failures[client] = (count, self._clock())
        log.warning("admin login failed from %s (%d in a row)", client, count)
        if count == MAX_LOGIN_FAILURES:
            log.warning("admin login locked for %s for %.0f s", client, LOCKOUT_S)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


REFUSED_UNCONFIGURED = (
    "Refused: no admin password is configured for this app (set COTEAM_ADMIN_PASSWORD or "
    "--admin-password-file)."
)


@dataclass
class EvalJob:
    """The evaluation the admin launched last (one at a time)."""

    folder: Path
    total: int
    thread: threading.Thread
    error: str | None = None

    @property
    def done(self) -> int:
        journal = self.folder / "episodes.jsonl"
        return sum(1 for _ in journal.open()) if journal.exists() else 0

    def status(self) -> str:
        if self.thread.is_alive():
            return f"Evaluation running: {self.done} of {self.total} episodes ({self.folder.name})."
        if self.error:
            return f"✗ Evaluation {self.folder.name} failed: {self.error}"
        return f"✓ Evaluation {self.folder.name} done: {self.done} episodes; its report is below."


# -- what the panels show --------------------------------------------------------------------


def learner_status(ctx: AppContext) -> tuple[str, str]:
    """The learner in words, and its progress bar (HTML)."""
    with store.open_db(ctx.db_path) as db:
        runs = store.list_training_runs(db, limit=1)
        since = runs[0]["started_at"] if runs else ""
        new_ratings = db["ratings"].count_where("created_at > ?", [since])
        episodes = db["episodes"].count
        serving = serving_adapters(db, ctx.max_agents)
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
            lines.append(
                f"**Gate:** candidate {gate['candidate_score']:.3f} vs serving {gate['active_score']:.3f} on {gate['tasks']} validation task(s): {verdict}"
            )
    names = [n for n in serving if n]
    lines.append(f"**Serving:** {', '.join(names) if names else 'the base model for every agent'}")
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


def adapters_table(ctx: AppContext) -> dict:
    rows = []
    registered = ctx.registered_adapters()
    for r in registered:
        metrics = r["metrics"]
        gate = metrics.get("gate") or {}
        rows.append(
            [
                adapter_name(r["agent"], r["version"]),
                r["agent"],
                r["version"],
                r["state"],
                f"v{r['parent_version']}" if r["parent_version"] else "base",
                r["created_at"][:16].replace("T", " "),
                _round(metrics.get("train_reward")),
                _round(gate.get("candidate_score")),
                r["training_run_id"],
            ]
        )
    return {"headers": ADAPTER_COLUMNS, "data": rows}


def _round(value: float | None) -> float | None:
    return round(value, 3) if isinstance(value, int | float) else None


def run_choices(ctx: AppContext) -> list[tuple[str, int]]:
    """Training runs that have a reward history, newest first."""
    with store.open_db(ctx.db_path) as db:
        runs = store.list_training_runs(db, limit=50)
    return [
        (f"run {r['id']} ({r['state']}, {len(r['metrics']['history'])} steps)", r["id"])
        for r in runs
        if r["metrics"].get("history")
    ]


def reward_curve(ctx: AppContext, run_id: int | None):
    """Mean and best joint reward per training step of one run (a matplotlib figure)."""
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    history = []
    if run_id is not None:
        with store.open_db(ctx.db_path) as db:
            try:
                history = store.get_training_run(db, int(run_id))["metrics"].get("history", [])
            except store.NotFound:
                history = []
    if history:
        steps = [h["step"] for h in history]
        ax.plot(steps, [h["reward_mean"] for h in history], marker="o", label="mean joint reward")
        ax.plot(steps, [h["reward_max"] for h in history], ls="--", alpha=0.6, label="best sample")
        ax.legend(loc="best", fontsize=8)
        ax.set_title(f"Training run {run_id}")
    else:
        ax.set_title("No training run with steps yet")
    ax.set_xlabel("training step")
    ax.set_ylabel("joint reward")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


def version_curve(ctx: AppContext):
    """Per agent and version: the held-out score the promotion gate measured and the reward at
    the end of training (a matplotlib figure)."""
    registered = ctx.registered_adapters()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for agent in sorted({r["agent"] for r in registered}):
        mine = [r for r in registered if r["agent"] == agent]
        versions = [r["version"] for r in mine]
        held_out = [(r["metrics"].get("gate") or {}).get("candidate_score") for r in mine]
        train = [r["metrics"].get("train_reward") for r in mine]
        points = [(v, s) for v, s in zip(versions, held_out, strict=True) if s is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=f"agent {agent}: held-out (gate)")
        points = [(v, s) for v, s in zip(versions, train, strict=True) if s is not None]
        if points:
            ax.plot(
                *zip(*points, strict=True),
                ls="--",
                marker=".",
                alpha=0.6,
                label=f"agent {agent}: training reward",
            )
    if registered:
        ax.legend(loc="best", fontsize=8)
        ax.set_title("Score by adapter version")
    else:
        ax.set_title("No adapter versions yet")
    ax.set_xlabel("adapter version")
    ax.set_ylabel("mean joint reward")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


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


# -- the tab -------------------------------------------------------------------------------


class AdminTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.throttle = LoginThrottle()
        self._last_export: Path | None = None
        self.eval_job: EvalJob | None = None
        self.eval_lock = threading.Lock()

    def build(self) -> None:
        if not self.ctx.admin_password:
            gr.Markdown(
                "**The admin tab is disabled**: no admin password is configured. Start the "
                "app with `COTEAM_ADMIN_PASSWORD=...` in its environment or with "
                "`--admin-password-file FILE`.",
                elem_id="admin-disabled",
            )
        with gr.Row():
            self.password = gr.Textbox(
                label="Admin password", type="password", scale=3, elem_id="admin-password"
            )
            self.unlock = gr.Button("Unlock", scale=1, elem_id="admin-unlock")
        self.login_status = gr.Markdown(elem_id="admin-login-status")
        self.admin_ok = gr.State(False)
        self.seen_run = gr.State(None)
        with gr.Column(visible=False, elem_id="admin-panel") as self.panel:
            self.build_learner()
            self.build_curves()
            self.build_registry()
            RatingsPanel(self.ctx).build(self.admin_ok)
            self.build_eval()
            self.build_export()
        self.timer = gr.Timer(POLL_S, active=False)
        self.wire()

    def build_learner(self) -> None:
        gr.Markdown(
            "## Learner\nA run trains each agent's LoRA with MAGRPO on the training tasks and "
            "the rated episodes, then the promotion gate compares it with the serving team on "
            "held-out tasks and hot-swaps it in if it is not worse. On a 2-core CPU a step with "
            "the defaults takes a minute or two; 1 step, group size 2, 1 task per step, 64 tokens "
            "and 1 gate task make a first run of a few minutes."
        )
        self.learner_md = gr.Markdown(elem_id="admin-learner-status")
        self.progress = gr.HTML(elem_id="admin-progress")
        # the form starts from the worker's settings, or from TrainArgs' defaults without one
        learner = self.ctx.learner
        args = learner.args if learner is not None else TrainArgs()
        with gr.Row():
            self.train_task = gr.Dropdown(
                ["coding", "summary", "expansion"],
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
                precision=0,
                minimum=1,
                elem_id="admin-steps",
            )
            self.group_size = gr.Number(
                args.magrpo.group_size,
                label="Group size G",
                precision=0,
                minimum=2,
                elem_id="admin-group-size",
            )
            self.tasks_per_step = gr.Number(
                args.magrpo.tasks_per_step,
                label="Tasks per step",
                precision=0,
                minimum=1,
                elem_id="admin-tasks-per-step",
            )
        with gr.Row():
            self.train_tokens = gr.Number(
                args.magrpo.max_new_tokens,
                label="Tokens per agent",
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
            self.gate_tasks = gr.Number(
                args.gate.tasks,
                label="Gate: validation tasks",
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
        with gr.Row():
            self.retrain = gr.Button("Retrain now", variant="primary", elem_id="admin-retrain")
            self.cancel = gr.Button(
                "Cancel the running run", variant="stop", elem_id="admin-cancel"
            )
        self.learner_msg = gr.Markdown(elem_id="admin-learner-msg")
        self.runs = gr.Dataframe(headers=RUN_COLUMNS, interactive=False, elem_id="admin-runs")
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

    def build_curves(self) -> None:
        gr.Markdown("## Curves")
        self.run_pick = gr.Dropdown([], label="Training run", elem_id="admin-run-pick")
        with gr.Row():
            self.reward_plot = gr.Plot(
                label="Reward per training step", elem_id="admin-reward-plot"
            )
            self.version_plot = gr.Plot(
                label="Held-out score per adapter version", elem_id="admin-version-plot"
            )

    def build_registry(self) -> None:
        gr.Markdown("## Adapters")
        self.adapters = gr.Dataframe(
            headers=ADAPTER_COLUMNS, interactive=False, elem_id="admin-adapters"
        )
        with gr.Row():
            self.promote_pick = gr.Dropdown(
                [], label="Version to promote", elem_id="admin-promote-pick"
            )
            self.promote = gr.Button("Promote", elem_id="admin-promote")
            self.rollback_pick = gr.Dropdown(
                [0, 1, 2, 3], value=0, label="Agent to roll back", elem_id="admin-rollback-pick"
            )
            self.rollback = gr.Button("Roll back", elem_id="admin-rollback")
        self.registry_msg = gr.Markdown(elem_id="admin-registry-msg")

    def build_eval(self) -> None:
        gr.Markdown("## Evaluation (held-out tasks)")
        with gr.Row():
            self.eval_task = gr.Dropdown(
                ["coding", "writing"], value="coding", label="Task", elem_id="admin-eval-task"
            )
            self.eval_set = gr.Dropdown(
                ["xsum", "abstracts"], value="xsum", label="Writing set", elem_id="admin-eval-set"
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

    def build_export(self) -> None:
        gr.Markdown("## Export (episodes with turns, rewards and ratings; preference pairs)")
        with gr.Row():
            self.export_format = gr.Radio(
                ["jsonl", "parquet"], value="jsonl", label="Format", elem_id="admin-export-format"
            )
            self.export = gr.Button("Export", elem_id="admin-export")
        self.export_msg = gr.Markdown(elem_id="admin-export-msg")
        self.export_files = gr.File(
            label="Files", file_count="multiple", elem_id="admin-export-files"
        )

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
        ]

    def dashboard(self) -> list:
        """Everything a change of the learner's state refreshes."""
        return [
            self.runs,
            self.run_pick,
            self.reward_plot,
            self.version_plot,
            self.adapters,
            self.promote_pick,
        ]

    def wire(self) -> None:
        private = {"api_visibility": "private"}
        status = [self.learner_md, self.progress, self.eval_msg, self.seen_run]
        unlocked = self.unlock.click(
            self.log_in,
            [self.password],
            [self.admin_ok, self.login_status, self.panel, self.timer],
            **private,
        )
        self.password.submit(
            self.log_in,
            [self.password],
            [self.admin_ok, self.login_status, self.panel, self.timer],
            **private,
        ).then(
            self.refresh_all,
            [self.admin_ok],
            [*status, *self.dashboard(), self.report_pick],
            **private,
        )
        unlocked.then(
            self.refresh_all,
            [self.admin_ok],
            [*status, *self.dashboard(), self.report_pick],
            **private,
        )
        self.timer.tick(
            self.poll,
            [self.admin_ok, self.seen_run],
            [*status, *self.dashboard(), self.report_pick],
            show_progress="hidden",
            concurrency_limit=None,
            **private,
        )
        self.retrain.click(
            self.retrain_now, [self.admin_ok, *self.train_form()], self.learner_msg, **private
        )
        self.cancel.click(self.cancel_run, [self.admin_ok], self.learner_msg, **private)
        self.save_schedule.click(
            self.set_schedule,
            [self.admin_ok, self.every_ratings, self.every_minutes, *self.train_form()],
            self.schedule_msg,
            **private,
        )
        self.run_pick.change(
            self.show_run, [self.admin_ok, self.run_pick], self.reward_plot, **private
        )
        self.promote.click(
            self.promote_version,
            [self.admin_ok, self.promote_pick],
            [self.registry_msg, *self.dashboard()],
            **private,
        )
        self.rollback.click(
            self.rollback_agent,
            [self.admin_ok, self.rollback_pick],
            [self.registry_msg, *self.dashboard()],
            **private,
        )
        self.launch_eval.click(
            self.start_eval,
            [
                self.admin_ok,
                self.eval_task,
                self.eval_set,
                self.eval_limit,
                self.eval_samples,
                self.eval_tokens,
                self.eval_shapes,
                self.eval_serving,
            ],
            self.eval_msg,
            **private,
        )
        self.show_report.click(
            self.open_report,
            [self.admin_ok, self.report_pick],
            [self.report, self.report_plots],
            **private,
        )
        self.report_pick.change(
            self.open_report,
            [self.admin_ok, self.report_pick],
            [self.report, self.report_plots],
            **private,
        )
        self.export.click(
            self.export_data,
            [self.admin_ok, self.export_format],
            [self.export_msg, self.export_files],
            **private,
        )

    # -- events ----------------------------------------------------------------------------
    def log_in(self, password: str, request: gr.Request = None):
        """Check the password; open the panels only when it is the configured one. Wrong
        passwords from one address slow it down, then lock it out (`LoginThrottle`)."""
        locked = (False, gr.update(visible=False), gr.Timer(active=False))
        if not self.ctx.admin_password:
            return locked[0], REFUSED_UNCONFIGURED, *locked[1:]
        if not password:
            return locked[0], "Refused: type the admin password first.", *locked[1:]
        client = request.client.host if request is not None and request.client else "unknown"
        wait = self.throttle.wait_s(client)
        if wait > 0:
            message = f"Refused: too many wrong passwords; try again in {wait:.0f} s."
            return locked[0], message, *locked[1:]
        if not self.ctx.password_ok(password):
            self.throttle.failed(client)
            time.sleep(WRONG_PASSWORD_DELAY_S)
            return locked[0], "Refused: wrong password.", *locked[1:]
        self.throttle.succeeded(client)
        return True, "Unlocked.", gr.update(visible=True), gr.Timer(active=True)

    def refresh_all(self, admin_ok: bool):
        if not admin_ok:
            return [gr.skip()] * 11
        text, bar = learner_status(self.ctx)
        return [
            text,
            bar,
            self.eval_status(),
            self.run_key(),
            *self.dashboard_values(),
            gr.update(choices=report_choices(self.ctx)),
        ]

    def poll(self, admin_ok: bool, seen):
        """The timer: the learner's status every tick; the rest when a run, the registry or an
        evaluation changed state."""
        if not admin_ok:
            return [gr.skip()] * 11
        text, bar = learner_status(self.ctx)
        key = self.run_key()
        if key == seen:
            return [text, bar, self.eval_status(), key, *[gr.skip()] * 7]
        return [text, bar, self.eval_status(), key, *self.dashboard_values(), self.reports()]

    def run_key(self) -> tuple:
        """What the dashboard shows changes with: the newest run (state, steps), the registry's
        versions and states, and the evaluation job."""
        with store.open_db(self.ctx.db_path) as db:
            runs = store.list_training_runs(db, limit=1)
        run = runs[0] if runs else {"id": None, "state": None, "metrics": {}}
        versions = tuple(
            (r["agent"], r["version"], r["state"]) for r in self.ctx.registered_adapters()
        )
        job = self.eval_job
        evaluation = (job.folder.name, job.thread.is_alive()) if job else None
        return (
            run["id"],
            run["state"],
            len(run["metrics"].get("history", [])),
            versions,
            evaluation,
        )

    def reports(self):
        choices = report_choices(self.ctx)
        return gr.update(choices=choices, value=choices[0] if choices else None)

    def dashboard_values(self) -> list:
        runs = run_choices(self.ctx)
        latest = runs[0][1] if runs else None
        names = [
            adapter_name(r["agent"], r["version"])
            for r in self.ctx.registered_adapters()
            if r["state"] in ("candidate", "retired")
        ]
        return [
            runs_table(self.ctx),
            gr.update(choices=runs, value=latest),
            reward_curve(self.ctx, latest),
            version_curve(self.ctx),
            adapters_table(self.ctx),
            gr.update(choices=names, value=names[-1] if names else None),
        ]

    def require(self, admin_ok: bool) -> None:
        if not admin_ok:
            raise gr.Error("Unlock the admin tab with the admin password first.")

    def retrain_now(self, admin_ok: bool, *form):
        self.require(admin_ok)
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
        return f"Training run {run_id} started: {args.steps} step(s) on {args.task}, group size {m.group_size}, {m.tasks_per_step} task(s) per step, {m.max_new_tokens} tokens. The progress bar above follows it."

    def train_args(
        self, task, agents, steps, group_size, tasks_per_step, tokens, task_limit, gate_tasks, slack
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
        )
        gate = replace(args.gate, tasks=int(gate_tasks or 0), min_gain=-float(slack or 0))
        args = replace(args, task_limit=int(task_limit) if task_limit else None, gate=gate)
        args.check()
        return args

    def cancel_run(self, admin_ok: bool):
        self.require(admin_ok)
        with store.open_db(self.ctx.db_path) as db:
            running = [r for r in store.list_training_runs(db, limit=5) if r["state"] == "running"]
            if not running:
                return "Nothing to cancel: no training run is running."
            store.cancel_training_run(db, running[0]["id"], "cancelled by the admin")
        return f"Training run {running[0]['id']} cancelled: it stops at its next step and publishes nothing."

    def set_schedule(self, admin_ok: bool, every_ratings, every_minutes, *form):
        self.require(admin_ok)
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

    def show_run(self, admin_ok: bool, run_id):
        self.require(admin_ok)
        return reward_curve(self.ctx, run_id)

    def promote_version(self, admin_ok: bool, name: str | None):
        self.require(admin_ok)
        parsed = store.parse_adapter_name(name)
        if not parsed:
            return ["⚠ Choose a version to promote.", *[gr.skip()] * 6]
        agent, version = parsed
        try:
            with store.open_db(self.ctx.db_path) as db:
                promote(db, self.ctx.client, agent, version)
        except (
            Exception
        ) as e:  # the registry refuses (e.g. a rejected version) or the server failed
            return [f"⚠ Not promoted: {e}", *[gr.skip()] * 6]
        gr.Info(f"{name} is serving")
        return [
            f"✓ {name} is active: new episodes of agent {agent} use it.",
            *self.dashboard_values(),
        ]

    def rollback_agent(self, admin_ok: bool, agent):
        self.require(admin_ok)
        try:
            with store.open_db(self.ctx.db_path) as db:
                row = rollback(db, self.ctx.client, int(agent))
        except Exception as e:
            return [f"⚠ Not rolled back: {e}", *[gr.skip()] * 6]
        now = adapter_name(int(agent), row["version"]) if row else "the base model"
        gr.Info(f"Agent {agent} rolled back")
        return [f"✓ Agent {agent} rolled back: it now serves {now}.", *self.dashboard_values()]

    def eval_running(self) -> bool:
        return self.eval_job is not None and self.eval_job.thread.is_alive()

    def eval_status(self) -> str:
        return self.eval_job.status() if self.eval_job else ""

    def start_eval(
        self, admin_ok: bool, task, writing_set, limit, samples, tokens, shapes, serving
    ):
        self.require(admin_ok)
        with self.eval_lock:
            if self.eval_running():
                return f"⚠ An evaluation is already running: {self.eval_job.status()}"
            try:
                variants = {BASE_VARIANT: ()}
                with store.open_db(self.ctx.db_path) as db:
                    names = tuple(serving_adapters(db, self.ctx.max_agents))
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
                total = (
                    len(eval_tasks(config)) * len(variants) * len(config.shapes) * config.samples
                )
            except (EvalError, ValueError) as e:
                return f"⚠ Not launched: {e}"
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            folder = self.ctx.eval_dir / f"{task}-{stamp}"

            def work() -> None:
                try:
                    run_eval(
                        config,
                        self.ctx.client,
                        folder,
                        db=self.ctx.db_path,
                        progress=False,
                        command="admin tab",
                    )
                except Exception as e:
                    self.eval_job.error = str(e)

            thread = threading.Thread(target=work, name="evaluation", daemon=True)
            self.eval_job = EvalJob(folder, total, thread)
            thread.start()
        gr.Info("Evaluation launched")
        return self.eval_job.status()

    def open_report(self, admin_ok: bool, name: str | None):
        self.require(admin_ok)
        return read_report(self.ctx, name)

    def export_data(self, admin_ok: bool, fmt: str):
        self.require(admin_ok)
        if self._last_export is not None:  # one export on disk at a time: it holds private data
            shutil.rmtree(self._last_export, ignore_errors=True)
        out = Path(tempfile.mkdtemp(prefix="coteam-export-"))  # 0700
        self._last_export = out
        with store.open_db(self.ctx.db_path) as db:
            counts = export_dataset(db, fmt, out, progress=False)
        for path in out.iterdir():
            path.chmod(0o600)
        gr.Info("Export ready")
        message = f"✓ Exported {counts['episodes']} episode(s) and {counts['preferences']} preference pair(s)."
        return message, [counts["episodes_path"], counts["preferences_path"]]
