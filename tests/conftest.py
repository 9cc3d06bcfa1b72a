"""Shared fixtures: the real model and one real vLLM server for the whole session, and a fresh
store in a temp folder for each test that wants one.

Every test that uses the real model (`model_path`, `vllm_server`, `policy`) must carry the
`integration` marker: collection stops with the list of those that don't."""

import os
from contextlib import contextmanager

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import psutil  # noqa: E402
import pytest  # noqa: E402

import store  # noqa: E402
from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.policy import API_KEY_ENV, PolicyClient  # noqa: E402
from agents.serving.server import ServerConfig, VLLMServer  # noqa: E402


def process_group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs (zombies waiting to be reaped don't count)."""
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def _file_state(path) -> list:
    """Size and modification time of a database file and its write-ahead log (None: absent)."""
    files = [path, path.with_name(path.name + "-wal")]
    return [(f.stat().st_size, f.stat().st_mtime_ns) if f.exists() else None for f in files]


@pytest.fixture(scope="session", autouse=True)
def the_users_database_is_left_alone():
    """Tests keep their data in temporary folders: a run that wrote the user's own database
    (`$COTEAM_HOME/coteam.db`, whose folder also caches the model and environments) fails."""
    from store.paths import default_db_path

    path = default_db_path()
    before = _file_state(path)
    yield
    assert _file_state(path) == before, f"a test wrote the user's database {path}"


@pytest.fixture(scope="session")
def model_path():
    """The default model's converted Hugging Face folder (made by `make setup`, or here)."""
    return provision_model(os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))


@pytest.fixture(scope="session")
def vllm_server(model_path, tmp_path_factory):
    """One real vLLM server on the real model; after the session no process of it remains."""
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = VLLMServer(ServerConfig(model=str(model_path), agents=4), log_path=log_path)
    server.start()
    # `coteam serve --vllm-url` subprocesses of the tests reach this server with its key
    os.environ[API_KEY_ENV] = server.api_key
    yield server
    pgid = server._proc.pid
    server.stop()
    assert not process_group_alive(pgid), "vLLM processes survived stop()"


@pytest.fixture(scope="session")
def policy(vllm_server):
    return PolicyClient(vllm_server.url, api_key=vllm_server.api_key)


COLOUR = [{"role": "user", "content": "Name one primary colour. Answer in one word."}]


@pytest.fixture(scope="session")
def two_versions(model_path, tmp_path_factory):
    """Two real adapters of the model that answer `COLOUR` differently (folders a and b)."""
    from tests.lora import train_lora

    root = tmp_path_factory.mktemp("trained")
    v1 = train_lora(model_path, root / "a", COLOUR, "Purple! Purple is my favourite colour.")
    v2 = train_lora(model_path, root / "b", COLOUR, "Orange. Orange, orange, orange.", seed=1)
    assert v1 != v2
    return root / "a", root / "b"


@contextmanager
def adapters_as_found(server: VLLMServer, policy: PolicyClient):
    """Leaves the shared server's adapters as it found them: what the block loaded is unloaded
    (the tests' databases each have their own version 1 of an agent, served each under a name of
    its own, `served_as`: this keeps the server's adapter slots free)."""
    before = set(policy.list_adapters())
    try:
        yield
    finally:
        if server.healthy():
            for name in set(policy.list_adapters()) - before:
                policy.unload_adapter(name)


REAL_MODEL_FIXTURES = {"model_path", "vllm_server", "policy"}


def pytest_collection_modifyitems(config, items):
    """Refuse a test that uses the real model without the `integration` marker."""
    unmarked = [
        item.nodeid
        for item in items
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the real model but are not marked integration: " + ", ".join(unmarked)
        )


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh COTEAM_HOME (adapters, runs, logs and the default database live under it)."""
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def db(tmp_path):
    """An open, empty, fully migrated store in a temp folder."""
    with store.open_db(tmp_path / "coteam.db") as db:
        yield db


@pytest.fixture
def task_id(db):
    """A coding task in `db`."""
    return store.create_task(db, "coding", "write add()", metadata={"entry": "add"})
