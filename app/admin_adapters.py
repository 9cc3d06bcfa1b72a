"""The admin tab's view of what training made: the reward per step of a training run and the
score per adapter version (matplotlib), the adapter registry with promote and rollback, and
`dashboard_values`, everything a change of the learner's state refreshes."""

from __future__ import annotations

import gradio as gr
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import store  # noqa: E402
from agents.team.roles import MAX_AGENTS  # noqa: E402
from app.admin_login import PRIVATE, require  # noqa: E402
from app.admin_training import runs_table  # noqa: E402
from app.context import AppContext  # noqa: E402
from learner.registry import adapter_name, adapter_source, promote, rollback  # noqa: E402
from learner.report import training_curve_figure  # noqa: E402

ADAPTER_COLUMNS = [
    "adapter",
    "agent",
    "version",
    "work",
    "state",
    "parent",
    "created",
    "train reward",
    "held-out score",
    "training run",
    "source",
]


# the rollback dropdown: (label, "AGENT:KIND"), agents as the page numbers them
ROLLBACK_CHOICES = [
    (f"agent {agent + 1}, {kind}", f"{agent}:{kind}")
    for agent in range(MAX_AGENTS)
    for kind in store.WORK_KINDS
]


def adapters_table(ctx: AppContext) -> dict:
    rows = []
    registered = ctx.registered_adapters()
    for r in registered:
        metrics = r["metrics"]
        gate = metrics.get("gate") or {}
        rows.append(
            [
                adapter_name(r["agent"], r["version"]),
                r["agent"] + 1,
                r["version"],
                r["kind"],
                r["state"],
                f"v{r['parent_version']}" if r["parent_version"] else "base",
                r["created_at"][:16].replace("T", " "),
                _round(metrics.get("train_reward")),
                _round(gate.get("candidate_score")),
                r["training_run_id"],
                adapter_source(r),
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
    history = []
    if run_id is not None:
        with store.open_db(ctx.db_path) as db:
            try:
                history = store.get_training_run(db, int(run_id))["metrics"].get("history", [])
            except store.NotFound:
                history = []
    return training_curve_figure(history, f"Training run {run_id}")


def version_curve(ctx: AppContext):
    """Per agent and version: the held-out score the promotion gate measured and the reward at
    the end of training (a matplotlib figure)."""
    registered = ctx.registered_adapters()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    plotted = False
    for agent in sorted({r["agent"] for r in registered}):
        mine = [r for r in registered if r["agent"] == agent]
        versions = [r["version"] for r in mine]
        held_out = [(r["metrics"].get("gate") or {}).get("candidate_score") for r in mine]
        train = [r["metrics"].get("train_reward") for r in mine]
        points = [(v, s) for v, s in zip(versions, held_out, strict=True) if s is not None]
        if points:
            label = f"agent {agent + 1}: held-out (gate)"
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
            plotted = True
        points = [(v, s) for v, s in zip(versions, train, strict=True) if s is not None]
        if points:
            plotted = True
            ax.plot(
                *zip(*points, strict=True),
                ls="--",
                marker=".",
                alpha=0.6,
                label=f"agent {agent + 1}: training reward",
            )
    if plotted:
        ax.legend(loc="best", fontsize=8)
        ax.set_title("Score by adapter version")
    elif registered:  # e.g. the shipped versions alone: their figures are on their card
        ax.set_title("No scores yet: no version here was trained or gated in this database")
    else:
        ax.set_title("No adapter versions yet")
    ax.set_xlabel("adapter version")
    ax.set_ylabel("mean joint reward")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


def dashboard_values(ctx: AppContext) -> list:
    """The runs table, the curves, the registry and the versions to promote, as they are now."""
    runs = run_choices(ctx)
    latest = runs[0][1] if runs else None
    names = [
        adapter_name(r["agent"], r["version"])
        for r in ctx.registered_adapters()
        if r["state"] in ("candidate", "retired")
    ]
    return [
        runs_table(ctx),
        gr.update(choices=runs, value=latest),
        reward_curve(ctx, latest),
        version_curve(ctx),
        adapters_table(ctx),
        gr.update(choices=names, value=names[-1] if names else None),
    ]


class AdaptersPanel:
    """The curves and adapters sections of the admin tab."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def build(self) -> None:
        self.build_curves()
        self.build_registry()

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
                ROLLBACK_CHOICES,
                value=ROLLBACK_CHOICES[0][1],
                label="Agent to roll back (each kind of work has its own versions)",
                elem_id="admin-rollback-pick",
            )
            self.rollback = gr.Button("Roll back", elem_id="admin-rollback")
        self.registry_msg = gr.Markdown(elem_id="admin-registry-msg")

    def wire(self, admin_ok: gr.State, dashboard: list) -> None:
        """`dashboard`: the components `dashboard_values` fills."""
        self.run_pick.change(self.show_run, [admin_ok, self.run_pick], self.reward_plot, **PRIVATE)
        self.promote.click(
            self.promote_version,
            [admin_ok, self.promote_pick],
            [self.registry_msg, *dashboard],
            **PRIVATE,
        )
        self.rollback.click(
            self.rollback_agent,
            [admin_ok, self.rollback_pick],
            [self.registry_msg, *dashboard],
            **PRIVATE,
        )

    def show_run(self, admin_ok: bool, run_id):
        require(admin_ok)
        return reward_curve(self.ctx, run_id)

    def promote_version(self, admin_ok: bool, name: str | None):
        require(admin_ok)
        parsed = store.parse_adapter_name(name)
        if not parsed:
            return ["⚠ Choose a version to promote.", *[gr.skip()] * 6]
        agent, version = parsed
        try:
            with store.open_db(self.ctx.db_path) as db:
                promote(db, self.ctx.client, agent, version)
        # the registry refuses (e.g. a rejected version) or the server failed
        except Exception as e:
            return [f"⚠ Not promoted: {e}", *[gr.skip()] * 6]
        gr.Info(f"{name} is serving")
        return [
            f"✓ {name} is active: agent {agent + 1}'s new episodes of its kind of work use it.",
            *dashboard_values(self.ctx),
        ]

    def rollback_agent(self, admin_ok: bool, pick: str):
        """`pick`: "AGENT:KIND", agent numbered from 0 (`ROLLBACK_CHOICES`)."""
        require(admin_ok)
        agent, kind = int(pick.split(":")[0]), pick.split(":")[1]
        try:
            with store.open_db(self.ctx.db_path) as db:
                row = rollback(db, self.ctx.client, agent, kind)
        except Exception as e:
            return [f"⚠ Not rolled back: {e}", *[gr.skip()] * 6]
        now = adapter_name(agent, row["version"]) if row else "the base model"
        said = f"Agent {agent + 1} ({kind}) rolled back"
        gr.Info(said)
        return [f"✓ {said}: it now serves {now}.", *dashboard_values(self.ctx)]
