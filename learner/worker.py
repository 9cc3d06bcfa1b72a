"""Training in the background: a run starts when the admin asks, every N new ratings, or every T
minutes; one run at a time (the store enforces it); progress and metrics go to the store as it
trains; a run can be cancelled; a run a crash interrupted is marked so at the next start.

A run's life (train, gate, promote or reject, finish or fail) is learner/run.py's, the same as
`coteam train`'s. Used inside `coteam serve` (the admin tab) and by `coteam learner`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import store
from agents.serving.policy import PolicyClient
from learner.config import TrainArgs
from learner.registry import remove_unfinished_copies
from learner.run import execute_run, start_run

log = logging.getLogger(__name__)


@dataclass
class Schedule:
    """When runs start by themselves (None: never)."""

    every_ratings: int | None = None  # after this many new ratings since the last run
    every_minutes: float | None = None


@dataclass
class LearnerWorker:
    client: PolicyClient
    base_model: str | Path
    db_path: str | Path | None = None
    args: TrainArgs = field(default_factory=TrainArgs)
    schedule: Schedule = field(default_factory=Schedule)

    def __post_init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        with store.open_db(self.db_path) as db:
            store.recover_interrupted(db)  # a crash left a run 'running': it is not
        remove_unfinished_copies(self.db_path)

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def request(self, trigger: str = "admin", args: TrainArgs | None = None) -> int:
        """Start a run now, in the background; return its id. Raises TrainingRunBusy."""
        args = args or self.args
        run_id = start_run(self.db_path, trigger, args)
        self._thread = threading.Thread(
            target=self._run, args=(run_id, args), name=f"training-run-{run_id}", daemon=True
        )
        self._thread.start()
        return run_id

    def cancel(self, run_id: int) -> bool:
        """Cancel a run; it stops at its next step boundary and publishes nothing."""
        with store.open_db(self.db_path) as db:
            return store.cancel_training_run(db, run_id, "cancelled by the admin")

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, run_id: int, args: TrainArgs) -> None:
        # a failure is recorded as the run's error by execute_run; the thread just ends
        with contextlib.suppress(Exception):
            execute_run(run_id, args, self.client, self.base_model, self.db_path)

    # -- schedule ---------------------------------------------------------------------------
    def start_schedule(self, poll_s: float = 30.0) -> None:
        """Check the schedule every `poll_s` seconds in a background thread."""
        if self._scheduler is None:
            self._scheduler = threading.Thread(
                target=self._watch, args=(poll_s,), name="learner-schedule", daemon=True
            )
            self._scheduler.start()

    def stop(self) -> None:
        self._stop.set()

    def due(self) -> str | None:
        """Why a run should start now ('ratings', 'schedule'), or None."""
        s = self.schedule
        with store.open_db(self.db_path) as db:
            last = store.list_training_runs(db, limit=1)
            since = last[0]["started_at"] if last else ""
            if s.every_ratings and store.ratings_toward_schedule(db, since) >= s.every_ratings:
                return "ratings"
        if s.every_minutes and (not last or _minutes_since(since) >= s.every_minutes):
            return "schedule"
        return None

    def _watch(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            try:
                trigger = None if self.busy else self.due()
                if trigger:
                    self.request(trigger)
            except store.StoreError as e:  # e.g. a run started elsewhere meanwhile
                log.info("scheduled run not started: %s", e)


def _minutes_since(iso: str) -> float:
    from datetime import UTC, datetime

    return (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds() / 60


def with_overrides(args: TrainArgs, **changes) -> TrainArgs:
    """A copy of `args` with some fields (or `magrpo` fields) changed."""
    magrpo = {k: v for k, v in changes.items() if hasattr(args.magrpo, k) and v is not None}
    own = {k: v for k, v in changes.items() if hasattr(args, k) and v is not None}
    changed = replace(args, **own, magrpo=replace(args.magrpo, **magrpo))
    changed.check()
    return changed
