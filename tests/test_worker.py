"""The background worker's run life cycle, with training and the gate replaced by stand-ins (the
real ones run in test_learner.py against the server)."""

from __future__ import annotations

import store
from learner import worker as worker_module
from learner.promotion import GateResult
from learner.worker import LearnerWorker


def fake_train(db_path):
    def train(args, client, base_model, db_path_, run_id):
        with store.open_db(db_path) as db:
            versions = {
                a: store.register_adapter(db, a, f"/nowhere/{a}")["version"] for a in (0, 1)
            }
        return {"history": [{"step": 1, "reward_mean": 0.5}], "candidates": versions}

    return train


def test_cancelling_during_the_gate_promotes_nothing(home, monkeypatch):
    db_path = home / "coteam.db"
    monkeypatch.setattr(worker_module, "train", fake_train(db_path))
    promoted = []
    monkeypatch.setattr(worker_module, "decide", lambda *a, **k: promoted.append(a) or True)

    def gate_cancelled_meanwhile(client, candidates, *args, **kwargs):
        with store.open_db(db_path) as db:
            running = store.list_training_runs(db, limit=1)[0]["id"]
            store.cancel_training_run(db, running, "cancelled by the admin")
        return GateResult(candidate_score=1.0, active_score=0.0, threshold=0.0, tasks=1)

    monkeypatch.setattr(worker_module, "gate", gate_cancelled_meanwhile)
    worker = LearnerWorker(client=None, base_model="unused", db_path=db_path)
    run_id = worker.request("admin")
    worker.wait(10)

    assert promoted == []
    with store.open_db(db_path) as db:
        assert store.get_training_run(db, run_id)["state"] == "cancelled"
        assert {
            a["state"] for a in store.adapter_lineage(db, 0) + store.adapter_lineage(db, 1)
        } == {"rejected"}
        assert store.active_adapters(db) == {}


def test_a_run_that_passes_the_gate_is_promoted_and_finished(home, monkeypatch):
    db_path = home / "coteam.db"
    monkeypatch.setattr(worker_module, "train", fake_train(db_path))
    promoted = []
    monkeypatch.setattr(worker_module, "decide", lambda *a, **k: promoted.append(a[1]) or True)
    monkeypatch.setattr(worker_module, "gate", lambda *a, **k: GateResult(1.0, 0.0, 0.0, tasks=1))
    worker = LearnerWorker(client=None, base_model="unused", db_path=db_path)
    run_id = worker.request("admin")
    worker.wait(10)

    assert promoted == [{0: 1, 1: 1}]
    with store.open_db(db_path) as db:
        run = store.get_training_run(db, run_id)
    assert run["state"] == "ok"
    assert run["metrics"]["promoted"] is True
