"""What your ratings changed: the admin panel that shows, for each adapter version, how many
ratings it learnt from and the weight their preference had in the reward
(`PreferenceModel.blend_weight`: more as the ratings agree on a taste), how it did on the
held-out tasks against the version it replaced (the promotion gate's scores), and a few answers
to the same prompt before and after; and the line the Co-code/Co-write pages show under a
result, saying which versions answered and when they were trained."""

from __future__ import annotations

import gradio as gr

import store
from app.admin_login import PRIVATE
from app.context import AppContext
from learner.registry import adapter_name, adapter_source, work_kind

CHANGE_COLUMNS = [
    "version",
    "trained",
    "state",
    "ratings learnt",
    "ratings' weight",
    "held-out score",
    "previous version's",
    "change",
]
PAIRS_SHOWN = 3
PAIR_CHARS = 600  # enough of an answer to compare, short enough to scan three pairs


def rating_changes(ctx: AppContext) -> dict:
    """One row per adapter version, newest first: the `CHANGE_COLUMNS`."""
    rows = []
    for r in reversed(ctx.registered_adapters()):
        metrics, gate = r["metrics"], r["metrics"].get("gate") or {}
        after, before = gate.get("candidate_score"), gate.get("active_score")
        change = after - before if after is not None and before is not None else None
        rows.append(
            [
                adapter_name(r["agent"], r["version"]),
                r["created_at"][:16].replace("T", " "),
                r["state"],
                metrics.get("ratings_learnt"),  # None: trained before ratings were counted
                metrics.get("preference_weight"),  # in the reward; grows with the evidence
                _round(after),
                _round(before),
                _round(change),
            ]
        )
    return {"headers": CHANGE_COLUMNS, "data": rows}


def pairs_markdown(ctx: AppContext, name: str | None) -> str:
    """The before/after pairs of the version named `name` (e.g. agent1-v2), as Markdown."""
    if not name:
        return "Pick a version to see its answers next to the previous version's."
    row = next(
        (r for r in ctx.registered_adapters() if adapter_name(r["agent"], r["version"]) == name),
        None,
    )
    if row is None:
        return f"There is no adapter version {name}."
    with store.open_db(ctx.db_path) as db:
        pairs = store.answers_before_after(db, row["agent"], row["version"], PAIRS_SHOWN)
    if not pairs:
        return f"No prompt has been answered by both {name} and the version before it yet."
    previous = f"v{row['parent_version']}" if row["parent_version"] else "the base model"
    blocks = [
        f"**Prompt:** {_clip(p['prompt'])}\n\n"
        f"*Before ({previous}{outcome(p['before_rewards'])}):*\n\n```\n{_clip(p['before'])}\n```"
        f"\n\n*After ({name}{outcome(p['after_rewards'])}):*\n\n```\n{_clip(p['after'])}\n```"
        for p in pairs
    ]
    return learnt(row, name) + "\n\n" + "\n\n---\n\n".join(blocks)


def learnt(row: dict, name: str) -> str:
    """One line: how many ratings the version learnt from, their weight in its reward, and its
    team's score on the gate's validation problems against the version it was judged with."""
    metrics, gate = row["metrics"], row["metrics"].get("gate") or {}
    ratings = metrics.get("ratings_learnt")
    said = f"**{name}** learnt from {ratings or 'no'} rating(s)"
    if metrics.get("preference_weight") is not None:
        said += f" (their weight in its reward: {metrics['preference_weight']:.2f})"
    if gate.get("candidate_score") is not None and gate.get("active_score") is not None:
        said += (
            f"; on the gate's validation problems its team scored {gate['candidate_score']:.3f}"
            f" against {gate['active_score']:.3f} for the team it was judged with"
        )
    return said + "."


def outcome(rewards: dict) -> str:
    """What the environment said of an answer: the tests it passed, or the writing's verdict."""
    if rewards.get("asserts_total"):
        return f", tests passed {rewards['asserts_passed']:.0f} of {rewards['asserts_total']:.0f}"
    if "verdict" in rewards:
        return ", the writing's checks " + ("passed" if rewards["verdict"] else "not met")
    return ""


def answered_by(ctx: AppContext, episode_id: int | None) -> str:
    """Which adapter version each agent of the episode ran and when it was trained (one line)."""
    if episode_id is None:
        return ""
    with store.open_db(ctx.db_path) as db:
        episode = store.get_episode(db, episode_id)
        kind = work_kind(episode["task"]["kind"])
        active = store.active_adapters(db, kind)
        parts = []
        for agent, version in enumerate(episode["adapter_versions"]):
            if not version:
                why = "" if agent in active else f" (no {kind} version of it is active)"
                parts.append(f"agent {agent + 1}: base model{why}")
                continue
            row = store.get_adapter(db, agent, version)
            work = row["kind"]
            if adapter_source(row) == "shipped":
                made = f"the shipped {work} team"
            else:
                made = f"trained here {row['created_at'][:16].replace('T', ' ')} UTC on {work}"
            learnt = row["metrics"].get("ratings_learnt")
            parts.append(
                f"agent {agent + 1}: {adapter_name(agent, version)}, {made}"
                + (f" from {learnt} rating(s)" if learnt else "")
            )
    return "Answered by " + "; ".join(parts) + "."


class RatingsPanel:
    """The admin tab's "What your ratings changed" section: filled when the tab is unlocked,
    refreshed on its own button."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def build(self, admin_ok: gr.State) -> None:
        gr.Markdown("## What your ratings changed")
        self.table = gr.Dataframe(
            headers=CHANGE_COLUMNS, interactive=False, elem_id="admin-rating-changes"
        )
        with gr.Row():
            self.pick = gr.Dropdown([], label="Version", elem_id="admin-rating-pick")
            self.refresh = gr.Button("Refresh", elem_id="admin-rating-refresh")
        self.pairs = gr.Markdown(elem_id="admin-rating-pairs")
        self.refresh.click(self.show, admin_ok, [self.table, self.pick], **PRIVATE)
        admin_ok.change(self.show_when_unlocked, admin_ok, [self.table, self.pick], **PRIVATE)
        self.pick.change(self.show_pairs, [admin_ok, self.pick], self.pairs, **PRIVATE)

    def show(self, admin_ok: bool):
        if not admin_ok:
            raise gr.Error("Unlock the admin tab with the admin password first.")
        changes = rating_changes(self.ctx)
        names = [row[0] for row in changes["data"]]
        return changes, gr.update(choices=names, value=names[0] if names else None)

    def show_when_unlocked(self, admin_ok: bool):
        return self.show(admin_ok) if admin_ok else (gr.skip(), gr.skip())

    def show_pairs(self, admin_ok: bool, name: str | None) -> str:
        if not admin_ok:
            raise gr.Error("Unlock the admin tab with the admin password first.")
        return pairs_markdown(self.ctx, name)


def _clip(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= PAIR_CHARS else text[:PAIR_CHARS] + " …"


def _round(value: float | None) -> float | None:
    return round(value, 3) if isinstance(value, int | float) else None
