"""Training in the background: a run starts when the admin asks, every N new ratings, or every T
minutes; one run at a time (the store enforces it); progress and metrics go to the store as it
trains; a run can be cancelled; a run a crash interrupted is marked so at the next start.

After training, the promotion gate compares the candidates with the serving team and promotes
them (hot-swap) or rejects them. Used inside `coteam serve` (the admin tab) and by `coteam learner`.
"""

from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import store
from agents.policy import PolicyClient
from learner.promotion import decide, gate
from learner.registry import remove_unfinished_copies
from learner.train import Cancelled, TrainArgs, train

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
    gate_tasks: int = 8
    gate_threshold: float = 0.0

    def __post_init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        with store.open_db(self.db_path) as db:
            store.recover_interrupted(db)  # a crash left a run 'running': it is not
        remove_unfinished_copies()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def request(self, trigger: str = "admin", args: TrainArgs | None = None) -> int:
        """Start a run now, in the background; return its id. Raises TrainingRunBusy."""
        args = args or self.args
        with store.open_db(self.db_path) as db:
            run_id = store.start_training_run(db, trigger, config=args.to_json())
        self._thread = threading.Thread(
            target=self._run, args=(run_id, args), name=f"training-run-{run_id}", daemon=True
        )
        self._thread.start()
        return run_id

    def cancel(self, run_id: int) -> bool:
        """Cancel a run; it stops at its next step boundary and publishes nothing."""
        with store.open_db(self.db_path) as db:
            return store.cancel_training_run(db, run_id, "cancelled by the admin")

    def _cancelled(self, run_id: int) -> bool:
        with store.open_db(self.db_path) as db:
            return store.get_training_run(db, run_id)["state"] == "cancelled"

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, run_id: int, args: TrainArgs) -> None:
        try:
            outcome = train(args, self.client, self.base_model, self.db_path, run_id=run_id)
            metrics = {"history": outcome["history"], "candidates": outcome["candidates"]}
            if outcome["candidates"]:
                result = gate(
                    self.client,
                    outcome["candidates"],
                    args.task,
                    args.agents,
                    self.db_path,
                    limit=self.gate_tasks,
                    threshold=self.gate_threshold,
                )
                if self._cancelled(run_id):  # during the gate: promote nothing
                    with store.open_db(self.db_path) as db:
                        for agent, version in outcome["candidates"].items():
                            store.reject_adapter(db, agent, version)
                    raise Cancelled(f"training run {run_id} was cancelled during the gate")
                promoted = decide(self.client, outcome["candidates"], result, self.db_path)
                metrics |= {"gate": result.to_json(), "promoted": promoted}
            with store.open_db(self.db_path) as db:
                store.finish_training_run(db, run_id, metrics=metrics)
        except Cancelled:
            log.info("training run %d cancelled", run_id)
        except Exception as e:
            log.exception("training run %d failed", run_id)
            with store.open_db(self.db_path) as db:
                store.fail_training_run(db, run_id, f"{e}\n{traceback.format_exc(limit=5)}")

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
    return replace(args, **own, magrpo=replace(args.magrpo, **magrpo))
