"""One training run's life, the same for the background worker (admin tab, schedule) and
`coteam train`: start (or resume) -> train -> gate -> promote or reject -> finish, or fail.

Everything a run does is set by one validated config (`learner.train.TrainArgs`), stored with the
run, so `coteam train --resume RUN` picks up a stopped run with the config it started with.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import store
from agents.serving.policy import PolicyClient
from learner.config import TrainArgs
from learner.promotion import decide, gate
from learner.registry import adapter_name, remove_unfinished_copies
from learner.train import Cancelled, checkpoint_folder, published_candidates, read_checkpoint, train

log = logging.getLogger(__name__)


def start_run(db_path, trigger: str, args: TrainArgs) -> int:
    """Validate the config and record a new running run (raises TrainingRunBusy if one runs);
    leftovers of a crashed run are cleaned up first."""
    args.check()
    remove_unfinished_copies(db_path)
    with store.open_db(db_path) as db:
        store.recover_interrupted(db)  # a crash left a run 'running': it is not
        return store.start_training_run(db, trigger, config=args.to_json())


def resume_run(db_path, stopped: int, steps: int | None = None) -> tuple[int, TrainArgs, Path]:
    """A new run continuing stopped run `stopped` from its last completed step, with its
    config; returns (new run id, config, checkpoint folder). The checkpoint moves to the new run.
    `steps`: the run's new length, more steps (another epoch) or fewer (ending sooner), but more
    than it has done; the rest of the config stays."""
    with store.open_db(db_path) as db:
        store.recover_interrupted(db)
        row = store.get_training_run(db, stopped)
    if row["state"] in ("running", "ok"):
        raise ValueError(f"training run {stopped} is {row['state']}: only a stopped run resumes")
    args = TrainArgs.from_json(row["config"])
    source = checkpoint_folder(stopped, db_path)
    state = read_checkpoint(source)
    done, candidates = state["step"], published_candidates(state)
    if steps is not None and steps != args.steps:
        if candidates or steps <= done:
            raise ValueError(
                f"training run {stopped} stopped after step {done} of {args.steps}"
                + (" in the promotion gate" if candidates else "")
                + f": it cannot be given {steps} steps"
                + ("" if candidates else f" (more than {done}; {args.steps} keeps its length)")
            )
        args = replace(args, steps=steps)
    with store.open_db(db_path) as db:  # stopped in the gate: it resumes with the gate
        decided = [
            adapter_name(agent, version)
            for agent, version in candidates.items()
            if store.get_adapter(db, agent, version)["state"] != "candidate"
        ]
    if decided:
        raise ValueError(
            f"training run {stopped}'s candidates were decided already ({', '.join(decided)}): "
            "nothing is left to resume"
        )
    run_id = start_run(db_path, f"resume of run {stopped}", args)
    folder = checkpoint_folder(run_id, db_path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    source.rename(folder)
    with contextlib.suppress(OSError):  # the stopped run's folder, empty now
        source.parent.rmdir()
    log.info(
        "run %d resumes run %d after step %d of %d%s", run_id, stopped, done, args.steps,
        ", with the promotion gate" if candidates else "",
    )  # fmt: skip
    return run_id, args, folder


def execute_run(
    run_id: int,
    args: TrainArgs,
    client: PolicyClient,
    base_model: str | Path,
    db_path=None,
    *,
    resume_from: Path | None = None,
    on_step: Callable[[dict], None] | None = None,
    run_gate: bool = True,
    force_promote: bool = False,
) -> dict:
    """Train, gate, promote or reject, and finish run `run_id`; return its metrics.

    A cancelled run (from the admin tab, before or during the gate) promotes nothing and ends
    'cancelled'; any other failure ends it 'failed' with the error, then is raised again.
    """
    try:
        outcome = train(
            args, client, base_model, db_path, run_id=run_id, on_step=on_step,
            resume_from=resume_from,
        )  # fmt: skip
        metrics = {"history": outcome["history"], "candidates": outcome["candidates"]}
        candidates = outcome["candidates"]
        if candidates and run_gate:
            result = gate(
                client, candidates, args.task, args.agents, db_path, args.gate, args.weights,
                args.budget, on_progress=lambda done, total: _gate_progress(db_path, run_id, done, total),
                turns=args.turns, fold=args.fold, incremental=args.incremental,
            )  # fmt: skip
            if _state(db_path, run_id) == "cancelled":  # during the gate: promote nothing
                with store.open_db(db_path) as db:
                    for agent, version in candidates.items():
                        store.reject_adapter(db, agent, version)
                raise Cancelled(f"training run {run_id} was cancelled during the gate")
            promoted = decide(client, candidates, result, db_path, force=force_promote)
            metrics |= {"gate": result.to_json(), "promoted": promoted}
        with store.open_db(db_path) as db:
            store.update_training_run(db, run_id, progress=1.0, message="done")
            store.finish_training_run(db, run_id, metrics=metrics)
        # only a stopped run resumes
        shutil.rmtree(checkpoint_folder(run_id, db_path), ignore_errors=True)
        return metrics
    except Cancelled:
        log.info("training run %d cancelled", run_id)
        return {"cancelled": True}
    except (SystemExit, KeyboardInterrupt) as e:  # the process was told to stop: resumable
        how = "interrupted" if isinstance(e, KeyboardInterrupt) else "stopped by a signal"
        with store.open_db(db_path) as db:
            store.fail_training_run(db, run_id, stopped_message(run_id, db_path, how))
        raise
    except BaseException as e:  # the run ends failed, not 'running' (SIGKILL is the one gap)
        log.exception("training run %d failed", run_id)
        # what was trained is kept: the run's record and the error say how to go on from it
        hint = stopped_message(run_id, db_path, "failed")
        with store.open_db(db_path) as db:
            store.fail_training_run(
                db, run_id, f"{type(e).__name__}: {e}\n{hint}\n{traceback.format_exc(limit=5)}"
            )
        e.add_note(f"training run {run_id} {hint}")
        raise


def stopped_message(run_id: int, db_path, how: str) -> str:
    """What a run stopped from outside says: after which step, and how to go on."""
    try:
        state = read_checkpoint(checkpoint_folder(run_id, db_path))
        step = state["step"]
    except (OSError, ValueError, KeyError):  # none, or not readable: nothing to resume from
        return f"{how} before its first step ended: nothing to resume"
    if published_candidates(state):
        return (
            f"{how} in the promotion gate, after all {step} steps; "
            f"`coteam train --resume {run_id}` runs the gate again"
        )
    return f"{how} after step {step}; `coteam train --resume {run_id}` continues it from there"


def _gate_progress(db_path, run_id: int, done: int, total: int) -> None:
    """The gate's progress, for the admin tab's run list."""
    with store.open_db(db_path) as db:
        store.update_training_run(
            db, run_id, message=f"promotion gate: {done}/{total} validation episodes"
        )


def _state(db_path, run_id: int) -> str:
    with store.open_db(db_path) as db:
        return store.get_training_run(db, run_id)["state"]
