"""The admin tab, behind the password set by configuration: the learner (status, "Retrain now"
with a progress bar, cancel, the schedule), curves of reward and held-out score, the adapter
registry with promote and rollback, evaluations (launch one, read its report) and export.

Without a configured password the tab stays locked for everyone. Unlocking sets a per-session
flag (a `gr.State`, kept on the server) that every admin event function checks again, so the
panels' functions cannot be called without it. Training and evaluation run in background threads
that outlive the page; a `gr.Timer` polls the store for their progress while the tab is unlocked.
This module lays the panels out and refreshes them; each panel is a class in its own module
(`admin_login`, `admin_training`, `admin_adapters`, `admin_eval`, `admin_export`).
"""

from __future__ import annotations

import gradio as gr

import store
from app.admin_adapters import AdaptersPanel, dashboard_values
from app.admin_eval import EvalPanel, report_choices
from app.admin_export import ExportPanel
from app.admin_login import PRIVATE, AdminLogin
from app.admin_training import TrainingPanel, learner_status
from app.context import AppContext
from app.ratings_panel import RatingsPanel

POLL_S = 2.0


class AdminTab:
    """The lock, then the panels, which a timer refreshes while the tab is unlocked."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.login = AdminLogin(ctx)
        self.training = TrainingPanel(ctx)
        self.registry = AdaptersPanel(ctx)
        self.evaluation = EvalPanel(ctx)
        self.export = ExportPanel(ctx)

    def build(self) -> None:
        self.login.build()
        self.seen_run = gr.State(None)
        with gr.Column(visible=False, elem_id="admin-panel") as self.panel:
            self.training.build()
            self.registry.build()
            RatingsPanel(self.ctx).build(self.login.admin_ok)
            self.evaluation.build()
            self.export.build()
        self.timer = gr.Timer(POLL_S, active=False)
        self.wire()

    def dashboard(self) -> list:
        """Everything a change of the learner's state refreshes (`dashboard_values`)."""
        return [
            self.training.runs,
            self.registry.run_pick,
            self.registry.reward_plot,
            self.registry.version_plot,
            self.registry.adapters,
            self.registry.promote_pick,
        ]

    def wire(self) -> None:
        login, admin_ok = self.login, self.login.admin_ok
        status = [
            self.training.learner_md,
            self.training.progress,
            self.training.cancel,
            self.evaluation.eval_msg,
            self.seen_run,
        ]
        refreshed = [*status, *self.dashboard(), self.evaluation.report_pick]
        unlocked = login.unlock.click(
            login.log_in,
            [login.password],
            [admin_ok, login.login_status, self.panel, self.timer],
            **PRIVATE,
        )
        login.password.submit(
            login.log_in,
            [login.password],
            [admin_ok, login.login_status, self.panel, self.timer],
            **PRIVATE,
        ).then(self.refresh_all, [admin_ok], refreshed, **PRIVATE)
        unlocked.then(self.refresh_all, [admin_ok], refreshed, **PRIVATE)
        self.timer.tick(
            self.poll,
            [admin_ok, self.seen_run],
            refreshed,
            show_progress="hidden",
            concurrency_limit=None,
            **PRIVATE,
        )
        self.training.wire(admin_ok)
        self.registry.wire(admin_ok, self.dashboard())
        self.evaluation.wire(admin_ok)
        self.export.wire(admin_ok)

    def refresh_all(self, admin_ok: bool):
        if not admin_ok:
            return [gr.skip()] * 12
        text, bar = learner_status(self.ctx)
        key = self.run_key()
        return [
            text,
            bar,
            gr.update(visible=key[1] == "running"),
            self.evaluation.eval_status(),
            key,
            *dashboard_values(self.ctx),
            gr.update(choices=report_choices(self.ctx)),
        ]

    def poll(self, admin_ok: bool, seen):
        """The timer: the learner's status every tick; the rest when a run, the registry or an
        evaluation changed state."""
        if not admin_ok:
            return [gr.skip()] * 12
        text, bar = learner_status(self.ctx)
        key = self.run_key()
        cancel = gr.update(visible=key[1] == "running")  # the cancel button only while running
        if key == seen:
            return [text, bar, cancel, self.evaluation.eval_status(), key, *[gr.skip()] * 7]
        return [
            text,
            bar,
            cancel,
            self.evaluation.eval_status(),
            key,
            *dashboard_values(self.ctx),
            self.evaluation.reports(),
        ]

    def run_key(self) -> tuple:
        """What the dashboard shows changes with: the newest run (state, steps), the registry's
        versions and states, and the evaluation job."""
        with store.open_db(self.ctx.db_path) as db:
            runs = store.list_training_runs(db, limit=1)
        run = runs[0] if runs else {"id": None, "state": None, "metrics": {}}
        versions = tuple(
            (r["agent"], r["version"], r["state"]) for r in self.ctx.registered_adapters()
        )
        job = self.evaluation.worker.job
        evaluation = (job.folder.name, job.thread.is_alive()) if job else None
        return (
            run["id"],
            run["state"],
            len(run["metrics"].get("history", [])),
            versions,
            evaluation,
        )
