"""Several model servers as one (agents/serving/pool.py): each agent's calls on one server, a
version loaded everywhere before it serves, a dead server taken out with no request lost; and
two real CPU vLLM servers serving one team through a swap and a kill."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import pytest

import store
from agents.serving.policy import (
    API_KEY_ENV,
    Completion,
    PolicyClient,
    PolicyError,
    Request,
    served_as,
)
from agents.serving.pool import RESENT, ServerPool
from agents.serving.server import ServerConfig, ServerError, VLLMServer, connect
from agents.tasks import humaneval_task
from agents.team.graph import GREEDY, TeamSettings
from learner import registry
from learner.episode import EpisodeSetup, play
from tests.conftest import adapters_as_found


class Server(PolicyClient):
    """A PolicyClient whose server is scripted: up or dead, refusing or not, what it loaded."""

    def __init__(self, url: str, **state):
        super().__init__(url)
        self.up, self.refuses, self.cannot_load, self.dies_mid_reply = True, False, False, False
        self.__dict__.update(state)
        self.asked: list[Request] = []
        self.served: dict[str, str] = {}

    async def agenerate(self, requests, on_token=None):
        self.asked += requests
        if self.dies_mid_reply and on_token:  # streams a piece, then its process is gone
            on_token(0, "def f(")
            self.up = False
        if not self.up:
            raise PolicyError("request 0 to 'base' failed: Connection error.")
        if self.refuses:
            raise PolicyError("request 0 to 'agent9-v1' failed: HTTP 404: no such model")
        for i, _ in enumerate(requests):
            if on_token:
                on_token(i, self.base_url)
        return [Completion(self.base_url, r.adapter, 3, 1, 0.01, 0.01, "stop") for r in requests]

    def healthy(self):
        return self.up

    def models(self):
        return [{"id": "base"}] + [
            {"id": served_as(n, p), "root": p} for n, p in self.served.items()
        ]

    def load_adapter(self, name, path):
        if self.cannot_load:
            raise PolicyError(f"/v1/load_lora_adapter: HTTP 400: no such folder {path}")
        self.served[name] = self.loaded[name] = str(path)

    def unload_adapter(self, name):
        self.served.pop(name)
        self.loaded.pop(name, None)


def ask(*agents):
    return [Request([{"role": "user", "content": "Hi."}], agent=a) for a in agents]


def test_each_agents_calls_go_to_one_server_and_the_rest_in_turn():
    a, b = Server("http://a"), Server("http://b")
    pool = ServerPool([a, b])
    pieces = []
    done = pool.generate(ask(0, 1, 2, 3, None, None), lambda i, t: pieces.append((i, t)))
    assert [c.text for c in done[:4]] == ["http://a", "http://b", "http://a", "http://b"]
    assert {c.text for c in done[4:]} == {"http://a", "http://b"}  # in turn
    assert sorted(pieces) == sorted(enumerate(c.text for c in done))  # each streamed as its own
    assert pool.base_url == "http://a, http://b" and pool.taken_out() == {}


def test_a_server_that_dies_is_taken_out_and_its_calls_go_to_the_others():
    a, b = Server("http://a"), Server("http://b", up=False)
    pool = ServerPool([a, b])
    assert [c.text for c in pool.generate(ask(0, 1))] == ["http://a", "http://a"]
    assert (
        list(pool.taken_out()) == ["http://b"]
        and "Connection error" in pool.taken_out()["http://b"]
    )
    b.up = True  # back, but without the adapters loaded meanwhile: out until the next start
    assert [c.text for c in pool.generate(ask(1))] == ["http://a"] and pool.healthy()
    a.up = False
    assert not pool.healthy()
    with pytest.raises(PolicyError, match="every model server stopped answering"):
        pool.generate(ask(0))


def test_a_reply_whose_server_dies_mid_stream_says_it_starts_again():
    a, b = Server("http://a"), Server("http://b", dies_mid_reply=True)
    shown = []
    [done] = ServerPool([a, b]).generate(ask(1), lambda i, piece: shown.append((i, piece)))
    assert done.text == "http://a"  # answered whole by the live server
    assert shown == [
        (0, "def f("),
        (0, RESENT.format(url="http://b")),
        (0, "http://a"),
    ]


def test_a_refusal_from_a_server_that_is_up_is_an_error_not_a_reason_to_go_elsewhere():
    pool = ServerPool([Server("http://a"), Server("http://b", refuses=True)])
    with pytest.raises(PolicyError, match="no such model"):
        pool.generate(ask(1))
    assert pool.taken_out() == {}


def test_a_version_serves_only_once_every_server_has_it(db, tmp_path):
    """Promotion loads the version on every server first; a server that cannot read its folder
    is named, and the previous version keeps serving on all of them."""
    a, b = Server("http://a"), Server("http://b")
    pool = ServerPool([a, b])
    for version in (1, 2):
        store.register_adapter(db, 0, str(tmp_path / f"v{version}"))
    registry.promote(db, pool, 0, 1)
    assert a.served == b.served == {"agent1-v1": str(tmp_path / "v1")}
    assert pool.loaded == {"agent1-v1": str(tmp_path / "v1")}
    b.cannot_load = True
    with pytest.raises(PolicyError, match="the model server at http://b cannot load agent1-v2"):
        registry.promote(db, pool, 0, 2)
    assert registry.serving_adapters(db, 1, "coding") == ["agent1-v1"]
    assert registry.ensure_loaded(db, pool, 1, "coding") == ["agent1-v1"]


def test_a_version_another_process_loaded_on_every_server_is_remembered_once(db, tmp_path):
    """Servers shared with another process already serve the version: the pool records it on
    each server's client, so the next episodes ask no server again."""
    path = str(tmp_path / "v1")
    a, b = Server("http://a"), Server("http://b")
    a.served["agent1-v1"] = b.served["agent1-v1"] = path
    pool = ServerPool([a, b])
    store.register_adapter(db, 0, path)
    store.activate_adapter(db, 0, 1)
    asked = []
    a.models = lambda models=a.models: asked.append("a") or models()
    assert registry.ensure_loaded(db, pool, 1, "coding") == ["agent1-v1"]
    assert a.loaded == b.loaded == pool.loaded == {"agent1-v1": path}
    asked.clear()
    assert registry.ensure_loaded(db, pool, 1, "coding") == ["agent1-v1"]
    assert asked == []  # remembered: the server is not asked again


def test_versions_are_published_in_the_directory_every_server_mounts(home, tmp_path, monkeypatch):
    made = tmp_path / "made"
    made.mkdir()
    (made / "adapter_config.json").write_text("{}")
    shared = tmp_path / "nfs" / "coteam-adapters"
    monkeypatch.setenv("COTEAM_ADAPTERS_DIR", str(shared))
    with store.open_db(home / "coteam.db") as db:
        row = registry.publish_candidate(db, 1, made, kind="writing")
    assert row["path"] == str(shared / "agent2" / "v1")
    assert (shared / "agent2" / "v1" / "adapter_config.json").is_file()


def test_connect_takes_one_key_for_all_servers_or_one_each(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "k1,k2,k3")
    with pytest.raises(ServerError, match="3 keys for 2 servers"):
        connect("http://127.0.0.1:9,http://127.0.0.1:10")
    monkeypatch.setenv(API_KEY_ENV, "k1")
    with pytest.raises(ServerError, match="no healthy vLLM server at http://127.0.0.1:9"):
        connect("http://127.0.0.1:9, http://127.0.0.1:10")


@pytest.mark.integration
def test_two_real_servers_serve_a_team_through_a_swap_and_a_kill(
    vllm_server, policy, model_path, two_versions, tmp_path, monkeypatch
):
    """A second CPU vLLM server beside the suite's: both agents' versions are loaded on both,
    the team's episodes run while a new version is promoted and then while the second server
    is killed, and no episode fails: the dead server's calls go to the first."""
    second = VLLMServer(
        ServerConfig(model=str(model_path), agents=2, kv_cache_gb=1, max_restarts=0),
        log_path=tmp_path / "second.log",
    )
    second.start()  # from the vLLM environment of the real home, before the test's own home
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path / "home"))
    try:
        with adapters_as_found(vllm_server, policy):
            db_path = tmp_path / "home" / "coteam.db"
            run_through_a_swap_and_a_kill(policy, second, two_versions, db_path)
    finally:
        second.stop()


def run_through_a_swap_and_a_kill(policy, second, folders, db_path):
    other = PolicyClient(second.url, api_key=second.api_key)
    pool = ServerPool([policy, other])
    with store.open_db(db_path) as db:
        for agent in (0, 1):
            for folder in folders:
                registry.publish_candidate(db, agent, folder, kind="coding")
            registry.promote(db, pool, agent, 1)
    assert {"agent1-v1", "agent2-v1"} <= set(other.list_adapters()) & set(policy.list_adapters())
    played, errors, stop = [], [], threading.Event()
    sampling = replace(GREEDY, max_tokens=24)

    def team():  # like the page: each episode asks the registry which versions serve
        with store.open_db(db_path) as db:
            while not stop.is_set():
                names = registry.ensure_loaded(db, pool, 2, "coding")
                setup = EpisodeSetup(
                    humaneval_task(0),
                    TeamSettings(
                        shape="parallel", agents=2, turns=1, adapters=names, sampling=sampling
                    ),
                )
                try:
                    [done] = play(setup, pool, db=db_path)
                except Exception as e:  # an episode that fails fails the test
                    errors.append(e)
                    played.append(None)
                    continue
                played.append(done.result)

    worker = threading.Thread(target=team)
    worker.start()
    try:
        wait_for(played, 2)
        with store.open_db(db_path) as db:
            for agent in (0, 1):
                registry.promote(db, pool, agent, 2)
        swapped = len(played)
        wait_for(played, swapped + 3)
        os.killpg(second._proc.pid, signal.SIGKILL)  # the second server dies mid-run
        killed = len(played)
        wait_for(played, killed + 3)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    assert list(pool.taken_out()) == [second.url]
    with store.open_db(db_path) as db:
        episodes = [store.get_episode(db, r.episode_id) for r in played]
    assert all(e["status"] == "ok" for e in episodes), [e["error"] for e in episodes]
    assert all(e["adapter_versions"] == [2, 2] for e in episodes[swapped + 1 :])
    assert all(r.output for r in played[killed + 1 :])  # served by the first server alone


def wait_for(played: list, count: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while len(played) < count:
        assert time.monotonic() < deadline, f"{len(played)} episodes of {count} in {timeout_s} s"
        time.sleep(0.5)
