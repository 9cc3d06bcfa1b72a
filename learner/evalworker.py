"""Evaluations in the background, one at a time: `EvalWorker.launch` runs `run_eval` in a daemon
thread that outlives the page, and `EvalJob` tells how far the last one got (the episodes its
journal holds) or why it failed. The admin tab launches and polls them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from agents.team.graph import Policy
from learner.config import EvalConfig, EvalError
from learner.evaluate import eval_tasks, run_eval


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
        if not journal.exists():
            return 0
        with journal.open() as lines:
            return sum(1 for _ in lines)

    def status(self) -> str:
        if self.thread.is_alive():
            return f"Evaluation running: {self.done} of {self.total} episodes ({self.folder.name})."
        if self.error:
            return f"✗ Evaluation {self.folder.name} failed: {self.error}"
        return f"✓ Evaluation {self.folder.name} done: {self.done} episodes; its report is below."


class EvalWorker:
    """Runs one evaluation at a time in a background thread and keeps the last one's job."""

    def __init__(self) -> None:
        self.job: EvalJob | None = None
        self.lock = threading.Lock()

    def running(self) -> bool:
        return self.job is not None and self.job.thread.is_alive()

    def status(self) -> str:
        return self.job.status() if self.job else ""

    def launch(
        self,
        config: EvalConfig,
        policy: Policy,
        folder: Path,
        db: str | Path | None,
        command: str,
    ) -> EvalJob:
        """Start `run_eval(config)` into `folder` in a thread; raises EvalError if one is still
        running or the config names no tasks."""
        with self.lock:
            if self.running():
                raise EvalError(f"an evaluation is already running: {self.job.status()}")
            total = config.episode_count(len(eval_tasks(config)))

            def work() -> None:
                try:
                    run_eval(config, policy, folder, db=db, progress=False, command=command)
                except Exception as e:
                    self.job.error = str(e)

            thread = threading.Thread(target=work, name="evaluation", daemon=True)
            self.job = EvalJob(folder, total, thread)
            thread.start()
        return self.job
