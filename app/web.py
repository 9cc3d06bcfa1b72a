"""The Gradio app: co-write, co-code, history and admin tabs over one policy client and one store.

`build_app(ctx)` lays the tabs out (each tab is a class in its own module with one method per
event); `launch_app` starts it with a queue, so people who arrive while the episode slots are
busy wait in line and see their place, and are never turned away.

    app/web.py             the page: header and tabs, launch
    app/cowork.py          co-write and co-code (one builder for both): the form and the run
    app/cowork_choices.py  what the form offers: sources, problems, roles, adapter versions
    app/cowork_results.py  panes, result, tests, rating panel, A/B views and vote
    app/live.py            an episode in a thread, streamed to the page as views
    app/rating.py          thumbs, scores, comments, edits and A/B votes into the store
    app/history.py         past episodes, filters, one episode in full
    app/rate_queue.py      under the history: two stored answers to one task, and a vote
    app/admin.py           the admin tab (password): its panels, refreshed by a timer
    app/admin_login.py     the password, the throttle on wrong guesses, `require`
    app/admin_training.py  learner status, Retrain now, cancel, runs, schedule
    app/admin_adapters.py  curves, registry with promote and rollback
    app/admin_eval.py      evaluations: launch, follow, read the report
    app/admin_export.py    export of episodes and preference pairs
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from agents.judge.sandbox import isolation_level
from app.admin import AdminTab
from app.context import AppContext
from app.cowork import CoworkTab
from app.history import HistoryTab
from app.rate_queue import RateQueuePanel

CSS_PATH = Path(__file__).resolve().parent.parent / "assets" / "app.css"
OTHER_SLOTS = 8  # ratings, history pages, admin reads: quick, a few at a time per worker


def build_app(ctx: AppContext) -> gr.Blocks:
    """The whole page for `ctx`'s server, database, learner and admin password."""
    # Gradio's copies of served files (exports among them) are deleted after an hour
    with gr.Blocks(title="CoTeam", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        gr.Markdown(
            "# CoTeam\nCo-write or co-code with a team of LLM agents; rate what they make and "
            f"the team learns from it. Model server: `{ctx.client.base_url}`.",
            elem_id="header",
        )
        level, layers = isolation_level()
        if level != "full":  # shown to everyone: their code runs with this sandbox
            gr.Markdown(f"⚠ **Weak sandbox**: {layers}.", elem_id="sandbox-warning")
        cowrite, cocode = CoworkTab(ctx, "writing"), CoworkTab(ctx, "coding")
        history, admin = HistoryTab(ctx), AdminTab(ctx)
        with gr.Tabs():
            with gr.Tab("Co-write", id="cowrite") as cowrite_tab:
                cowrite.build()
            with gr.Tab("Co-code", id="cocode") as cocode_tab:
                cocode.build()
            with gr.Tab("History", id="history") as history_tab:
                history.build()
                RateQueuePanel(ctx, history.kind).build()
            with gr.Tab("Admin", id="admin"):
                admin.build()
        for tab, cowork in ((cowrite_tab, cowrite), (cocode_tab, cocode)):
            tab.select(cowork.refresh_adapters, None, [cowork.adapters, cowork.adapters_b])
        history_tab.select(
            history.refresh_page,
            [*history.filters(), history.page],
            [history.table, history.page_info, history.page, history.adapter],
        )
        demo.load(
            history.refresh_page,
            [*history.filters(), history.page],
            [history.table, history.page_info, history.page, history.adapter],
        )
    return demo


def launch_app(demo: gr.Blocks, host: str, port: int) -> None:
    """Serve the page until interrupted; events queue (no size limit) rather than fail."""
    demo.queue(default_concurrency_limit=OTHER_SLOTS).launch(
        server_name=host,
        server_port=port,
        share=False,
        show_error=True,
        css_paths=[CSS_PATH],
    )
