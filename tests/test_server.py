"""`connect_or_start`: the one way a command gets a vLLM server, the one at a URL or its own."""

import pytest

from agents.serving.policy import Request
from agents.serving.server import ServerConfig, ServerError, connect_or_start, free_port


def test_a_url_with_no_server_is_a_clear_error_and_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path))
    url = f"http://127.0.0.1:{free_port()}"
    # a model that does not exist: reaching for it (to start a server) would fail differently
    config = ServerConfig(model="no-such-model", served_name="mine")
    with (
        pytest.raises(ServerError, match=f"no healthy vLLM server at {url}"),
        connect_or_start(url, config),
    ):
        pass
    assert not (tmp_path / "logs").exists()  # no server was started


@pytest.mark.integration
def test_a_url_connects_to_that_server_under_the_served_name(vllm_server):
    config = ServerConfig(model="no-such-model")  # never provisioned: the server has its own
    with connect_or_start(vllm_server.url, config) as client:
        assert client.base_url == vllm_server.url and client.base_model == "base"
        [done] = client.generate([Request([{"role": "user", "content": "Hi"}], max_tokens=4)])
    assert done.completion_tokens > 0
