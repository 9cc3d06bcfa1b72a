"""The background worker's run life cycle, with training and the gate replaced by stand-ins (the
real ones run in test_learner.py against the server)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import store
from learner import run as run_module
from learner import train as train_module
from learner.promotion import GateResult
from learner.worker import LearnerWorker


def fake_train(db_path):
    def train(args, client, base_model, db_path_, run_id, on_step=None, resume_from=None):
        with store.open_db(db_path) as db:
            versions = {
                a: store.register_adapter(db, a, f"/nowhere/{a}")["version"] for a in (0, 1)
            }
        return {"history": [{"step": 1, "reward_mean": 0.5}], "candidates": versions}

    return train


def test_cancelling_during_the_gate_promotes_nothing(home, monkeypatch):
    db_path = home / "coteam.db"
    monkeypatch.setattr(run_module, "train", fake_train(db_path))
    promoted = []
    monkeypatch.setattr(run_module, "decide", lambda *a, **k: promoted.append(a) or True)

    def gate_cancelled_meanwhile(client, candidates, *args, **kwargs):
        with store.open_db(db_path) as db:
            running = store.list_training_runs(db, limit=1)[0]["id"]
            store.cancel_training_run(db, running, "cancelled by the admin")
        return GateResult([1.0], [0.0], [True], [True])

    monkeypatch.setattr(run_module, "gate", gate_cancelled_meanwhile)
    worker = LearnerWorker(client=None, base_model="unused", db_path=db_path)
    run_id = worker.request("admin")
    worker.wait(10)

    assert promoted == []
    with store.open_db(db_path) as db:
        assert store.get_training_run(db, run_id)["state"] == "cancelled"
        assert {
            a["state"] for a in store.adapter_lineage(db, 0) + store.adapter_lineage(db, 1)
        } == {"rejected"}
        assert store.active_adapters(db, "coding") == {}


def test_a_run_that_passes_the_gate_is_promoted_and_finished(home, monkeypatch):
    db_path = home / "coteam.db"
    monkeypatch.setattr(run_module, "train", fake_train(db_path))
    promoted = []
    monkeypatch.setattr(run_module, "decide", lambda *a, **k: promoted.append(a[1]) or True)
    monkeypatch.setattr(
        run_module, "gate", lambda *a, **k: GateResult([1.0], [0.0], [True], [True])
    )
    worker = LearnerWorker(client=None, base_model="unused", db_path=db_path)
    run_id = worker.request("admin")
    worker.wait(10)

    assert promoted == [{0: 1, 1: 1}]
    with store.open_db(db_path) as db:
        run = store.get_training_run(db, run_id)
    assert run["state"] == "ok"
    assert run["metrics"]["promoted"] is True


def test_a_stopped_run_resumes_with_its_config_and_checkpoint(home):
    from learner.config import TrainArgs
    from learner.run import resume_run, start_run
    from learner.train import checkpoint_folder

    db_path = home / "coteam.db"
    args = TrainArgs(steps=3, task_limit=4)
    stopped = start_run(db_path, "cli", args)
    with store.open_db(db_path) as db:
        store.fail_training_run(db, stopped, "killed")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resume_run(db_path, stopped)
    folder = checkpoint_folder(stopped, db_path)
    folder.mkdir(parents=True)
    (folder / "state.json").write_text('{"step": 1, "history": [], "task_order": []}')
    with pytest.raises(ValueError, match=r"stopped after step 1 of 3: it cannot be given 1 steps"):
        resume_run(db_path, stopped, steps=1)  # no more than it has done
    run_id, resumed_args, moved = resume_run(db_path, stopped, steps=3)  # its own length
    assert resumed_args == args and run_id != stopped
    assert moved == checkpoint_folder(run_id, db_path) and (moved / "state.json").is_file()
    assert not checkpoint_folder(stopped, db_path).parent.exists()  # nothing left behind
    with store.open_db(db_path) as db:
        assert store.get_training_run(db, run_id)["trigger"] == f"resume of run {stopped}"
        store.fail_training_run(db, run_id, "killed again")
        candidate = store.register_adapter(db, 0, "/nowhere/0")["version"]
    # stopped in the gate: all steps done, the candidates published; it resumes with the gate
    state = {"step": 3, "history": [], "task_order": [], "candidates": {"0": candidate}}
    (moved / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="in the promotion gate: it cannot be given 5 steps"):
        resume_run(db_path, run_id, steps=5)
    again, _, folder = resume_run(db_path, run_id)
    assert train_module.train(args, None, "unused", db_path, run_id=again, resume_from=folder) == {
        "history": [],
        "config": args.to_json(),
        "candidates": {0: candidate},
    }  # nothing trained, nothing loaded: the client and model are not touched
    with store.open_db(db_path) as db:
        store.fail_training_run(db, again, "killed in the gate")
        store.reject_adapter(db, 0, candidate)
    with pytest.raises(ValueError, match=r"decided already \(agent1-v1\)"):
        resume_run(db_path, again)  # a gate that decided before the kill is not run again


def test_a_resumed_run_can_be_given_more_steps_or_fewer(home):
    """`coteam train --resume RUN --steps N`: another epoch, or an end sooner; nothing else of
    the config changes."""
    from learner.config import TrainArgs
    from learner.run import resume_run, start_run
    from learner.train import checkpoint_folder

    db_path = home / "coteam.db"
    args = TrainArgs(steps=10, task_limit=4, agents=3)
    for steps in (25, 4):
        stopped = start_run(db_path, "cli", args)
        with store.open_db(db_path) as db:
            store.fail_training_run(db, stopped, "killed")
        folder = checkpoint_folder(stopped, db_path)
        folder.mkdir(parents=True)
        (folder / "state.json").write_text('{"step": 3, "history": [], "task_order": []}')
        run_id, resumed_args, _ = resume_run(db_path, stopped, steps=steps)
        assert resumed_args == replace(args, steps=steps)
        with store.open_db(db_path) as db:  # the new run records the config it runs with
            assert TrainArgs.from_json(store.get_training_run(db, run_id)["config"]).steps == steps
            store.fail_training_run(db, run_id, "killed")


def test_a_run_stopped_from_outside_ends_saying_after_which_step_and_how_to_go_on(
    home, monkeypatch
):
    """`coteam train` exits on SIGTERM (SystemExit) and Ctrl-C (KeyboardInterrupt) in the middle
    of a step: the run ends resumable, and says so rather than show a traceback of its exit; a
    run that crashes says the same after its error."""
    from learner.config import TrainArgs
    from learner.run import execute_run, resume_run, start_run
    from learner.train import checkpoint_folder, mark_published

    db_path = home / "coteam.db"

    def train_until(stop: BaseException, steps_done: int):
        def train(args, client, base_model, db_path_, run_id, on_step=None, resume_from=None):
            if steps_done:
                folder = checkpoint_folder(run_id, db_path_)
                folder.mkdir(parents=True)
                state = {"step": steps_done, "history": [], "task_order": []}
                (folder / "state.json").write_text(json.dumps(state))
            if steps_done == args.steps:  # trained and published: stopped in the gate
                with store.open_db(db_path_) as db:
                    version = store.register_adapter(db, 0, "/nowhere/0")["version"]
                mark_published(checkpoint_folder(run_id, db_path_), {0: version})
            raise stop

        return train

    args = TrainArgs(steps=5, task_limit=4)
    for stop, steps_done, said in [
        (KeyboardInterrupt(), 0, "interrupted before its first step ended: nothing to resume"),
        (SystemExit(0), 3, "stopped by a signal after step 3; `coteam train --resume {}` "
         "continues it from there"),
        (SystemExit(0), 5, "stopped by a signal in the promotion gate, after all 5 steps; "
         "`coteam train --resume {}` runs the gate again"),
        # a crash in the gate (a request the server refused): what was trained is not lost
        (RuntimeError("the server refused"), 5, "RuntimeError: the server refused\nfailed in "
         "the promotion gate, after all 5 steps; `coteam train --resume {}` runs the gate again"),
    ]:  # fmt: skip
        monkeypatch.setattr(run_module, "train", train_until(stop, steps_done))
        run_id = start_run(db_path, "cli", args)
        with pytest.raises(type(stop)) as raised:
            execute_run(run_id, args, None, "unused", db_path)
        with store.open_db(db_path) as db:
            run = store.get_training_run(db, run_id)
        if isinstance(stop, RuntimeError):  # a crash: the error first, then how to go on
            assert run["state"] == "failed" and run["error"].startswith(said.format(run_id))
            # the error itself says it too, for `coteam train` to print
            hint = said.format(run_id).split("\n")[1]
            assert raised.value.__notes__ == [f"training run {run_id} {hint}"]
        else:
            assert run["state"] == "failed" and run["error"] == said.format(run_id)
        if steps_done:
            resumed, resumed_args, _ = resume_run(db_path, run_id)
            assert resumed_args == args
            with store.open_db(db_path) as db:  # the next case starts a run of its own
                store.fail_training_run(db, resumed, "stopped again")


def test_run_1_of_one_database_never_resumes_from_run_1_of_another(home, tmp_path):
    from learner.config import TrainArgs
    from learner.run import resume_run, start_run
    from learner.train import checkpoint_folder

    default, other = home / "coteam.db", tmp_path / "eval" / "coteam.db"
    other.parent.mkdir()
    runs = {}
    for db_path in (default, other):
        runs[db_path] = start_run(db_path, "cli", TrainArgs(steps=3, task_limit=4))
        with store.open_db(db_path) as db:
            store.fail_training_run(db, runs[db_path], "killed")
    assert runs[default] == runs[other] == 1
    assert checkpoint_folder(1, default) == home / "runs" / "run-1" / "checkpoint"
    assert checkpoint_folder(1, other).parent.parent.parent == home / "runs"
    assert checkpoint_folder(1, other) != checkpoint_folder(1, default)
    folder = checkpoint_folder(1, default)
    folder.mkdir(parents=True)
    (folder / "state.json").write_text('{"step": 1, "history": [], "task_order": []}')
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        resume_run(other, 1)  # the default database's checkpoint is not the other's
    assert resume_run(default, 1)[2] == checkpoint_folder(2, default)


def test_version_1_of_one_database_never_meets_version_1_of_another(home, tmp_path):
    """Adapter versions count per database, as runs do: a run on a second database publishes
    its own agent0 v1 beside the default database's (it once failed on the folder)."""
    from learner.registry import publish_candidate

    made = tmp_path / "made"
    made.mkdir()
    (made / "adapter_config.json").write_text("{}")
    default, other = home / "coteam.db", tmp_path / "eval" / "coteam.db"
    other.parent.mkdir()
    rows = {}
    for db_path in (default, other):
        with store.open_db(db_path) as db:
            rows[db_path] = publish_candidate(db, 0, made, kind="coding")
    assert rows[default]["version"] == rows[other]["version"] == 1
    assert rows[default]["path"] == str(home / "adapters" / "agent1" / "v1")
    assert rows[other]["path"] != rows[default]["path"]
    for row in rows.values():
        assert (Path(row["path"]) / "adapter_config.json").is_file()


def test_a_version_folder_left_by_a_moved_database_is_kept_aside_not_fatal(home, tmp_path):
    """A database moved or deleted leaves its adapter folders; a new database at the same path
    publishes its v1 there (it once failed with "Directory not empty" and the run never
    started), and the old folder is kept beside it, not overwritten."""
    from learner.registry import publish_candidate

    made = tmp_path / "made"
    made.mkdir()
    (made / "adapter_config.json").write_text('{"new": true}')
    db_path = tmp_path / "lf" / "lf.db"
    db_path.parent.mkdir()
    with store.open_db(db_path) as db:
        old = Path(publish_candidate(db, 0, made, kind="coding")["path"])
    (old / "adapter_config.json").write_text('{"old": true}')
    db_path.unlink()
    with store.open_db(db_path) as db:
        row = publish_candidate(db, 0, made, kind="coding")
    assert row["version"] == 1 and Path(row["path"]) == old
    assert json.loads((old / "adapter_config.json").read_text()) == {"new": True}
    (kept,) = old.parent.glob("orphan-v1-*")
    assert json.loads((kept / "adapter_config.json").read_text()) == {"old": True}
    db_path.unlink()  # and again, within the same second: both earlier folders are kept
    with store.open_db(db_path) as db:
        publish_candidate(db, 0, made, kind="coding")
    assert len(list(old.parent.glob("orphan-v1-*"))) == 2


def test_a_config_the_learner_cannot_run_is_refused_with_the_reason():
    from dataclasses import replace

    from learner.config import TrainArgs

    with pytest.raises(ValueError, match="1 to 4 turns"):
        TrainArgs(turns=0).check()
    TrainArgs(turns=2).check()  # every turn's calls are trained
    with pytest.raises(ValueError, match="gamma"):
        replace(TrainArgs(turns=2), magrpo=replace(TrainArgs().magrpo, gamma=0)).check()
    with pytest.raises(ValueError, match="group of at least 2"):
        replace(TrainArgs(), magrpo=replace(TrainArgs().magrpo, group_size=1)).check()
    with pytest.raises(ValueError, match="unknown task"):
        TrainArgs(task="poetry").check()
    cross = replace(TrainArgs().magrpo, joint_mode="cross")
    replace(TrainArgs(), magrpo=cross).check()  # 2 agents x G 4: 16 joint actions a task
    with pytest.raises(ValueError, match="one-turn episodes"):
        replace(TrainArgs(turns=2), magrpo=cross).check()
    with pytest.raises(ValueError, match="4\\^4 = 256 joint actions"):
        replace(TrainArgs(agents=4), magrpo=cross).check()
    with pytest.raises(ValueError, match="unknown joint mode 'crossed'"):
        replace(TrainArgs(), magrpo=replace(cross, joint_mode="crossed")).check()
    assert TrainArgs.from_json(TrainArgs().to_json()) == TrainArgs()


def test_coteam_train_flags_start_from_the_one_config():
    from app.cli import build_parser
    from app.commands_train import _train_args
    from learner.config import TrainArgs

    parser = build_parser()
    assert _train_args(parser.parse_args(["train"])) == TrainArgs()  # no default of its own
    args = _train_args(parser.parse_args(["train", "--steps", "3", "--gate-tasks", "40"]))
    assert args.steps == 3 and args.gate.tasks == 40 and args.magrpo == TrainArgs().magrpo
    assert _train_args(parser.parse_args(["train", "--gate-samples", "4"])).gate.samples == 4
    args = _train_args(parser.parse_args(["train", "--turns", "2", "--gamma", "0.8"]))
    assert args.turns == 2 and args.magrpo.gamma == 0.8
    assert _train_args(parser.parse_args(["train", "--joint-mode", "cross"])).magrpo.joint_mode == (
        "cross"
    )
    with pytest.raises(ValueError, match="1 to 4 turns"):
        _train_args(parser.parse_args(["train", "--turns", "5"]))
    args = _train_args(parser.parse_args(["train", "--lr", "2e-5", "--max-tokens", "96"]))
    assert (args.magrpo.learning_rate, args.magrpo.max_new_tokens) == (2e-5, 96)
    assert "(default 0.0001)" in parser._subparsers._group_actions[0].choices["train"].format_help()


def test_coteam_eval_flags_start_from_the_one_config():
    """`coteam eval`'s flags are EvalConfig's fields: no default of their own."""
    from app.cli import build_parser
    from learner.config import EvalConfig, EvalError
    from learner.flags import from_flags

    parser = build_parser()
    given = parser.parse_args(["eval", "--task", "coding", "--out", "x"])
    assert from_flags(given, EvalConfig) == EvalConfig()
    given = parser.parse_args(
        ["eval", "--task", "writing", "--out", "x", "--shapes", "single, parallel", "--limit", "3"]
    )
    config = from_flags(given, EvalConfig)
    assert (config.task, config.shapes, config.limit) == ("writing", ("single", "parallel"), 3)
    with pytest.raises(EvalError, match="unknown shapes"):
        from_flags(
            parser.parse_args(["eval", "--task", "coding", "--out", "x", "--shapes", "x"]),
            EvalConfig,
        )
