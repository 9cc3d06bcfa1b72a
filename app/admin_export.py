"""The admin tab's export panel: the episodes (with turns, rewards and ratings) and the
preference pairs as JSONL or Parquet files to download, one export on disk at a time."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import gradio as gr

import store
from app.admin_login import PRIVATE, require
from app.context import AppContext
from store.export import export_dataset


class ExportPanel:
    """The export section of the admin tab."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._last_export: Path | None = None

    def build(self) -> None:
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

    def wire(self, admin_ok: gr.State) -> None:
        self.export.click(
            self.export_data,
            [admin_ok, self.export_format],
            [self.export_msg, self.export_files],
            **PRIVATE,
        )

    def export_data(self, admin_ok: bool, fmt: str):
        require(admin_ok)
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
