"""The one place that talks to the vLLM server (its OpenAI-compatible API).

`PolicyClient.generate` runs a list of requests concurrently so the server batches them, streams
tokens to a callback as they arrive, and returns each completion's text, token counts and latency.
Adapters are loaded at run time under a new name per version (`agent1-v3`): reloading under an old
name can serve stale prefix-cache blocks. On the server that name carries its folder's digest
(`served_as`: `agent1-v3-1f0c9a2b`), so two databases, each with its own `agent1-v3`, share one
server and each is served its own; callers name adapters as the registry does, and the client
translates.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from openai import AsyncOpenAI

# the key of a server this process did not start (`--vllm-url`); `coteam serve` sets it for the
# server it starts, so that its subprocesses and tests reach that server too
API_KEY_ENV = "COTEAM_VLLM_API_KEY"
# The modules a CoTeam adapter trains (the learner's LoRA) and the only ones the server applies
# LoRA to (`--lora-target-modules`): each module more costs every adapter request time, even
# with zero weights; an adapter trained on another module is refused (`load_adapter`)
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def served_as(name: str, path: str | os.PathLike) -> str:
    """The server's name for adapter `name` loaded from folder `path`: the name and the first 8 hex
    digits of the sha256 of the folder's absolute path (a database's versions live in its own
    folder, so the same version name from another database is another server name)."""
    digest = hashlib.sha256(str(os.path.realpath(path)).encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def adapter_modules(path: str | os.PathLike) -> set[str]:
    """The modules a PEFT adapter folder trains (its adapter_config.json's `target_modules`);
    empty where the file cannot be read (vLLM then says what is wrong)."""
    try:
        modules = json.loads((Path(path) / "adapter_config.json").read_text())["target_modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {modules} if isinstance(modules, str) else set(modules or ())


def modules_refused(path: str | os.PathLike, *, unnamed: bool = False) -> str | None:
    """Why the server cannot apply the adapter in folder `path` ("trains up_proj: the server
    applies LoRA to q_proj, ... only"), or None: it trains modules the server does not adapt
    (`LORA_MODULES`); with `unnamed`, also when its config names no module it trains."""
    modules = adapter_modules(path)
    if modules - set(LORA_MODULES) or (unnamed and not modules):
        trains = ", ".join(sorted(modules - set(LORA_MODULES))) or "no module it names"
        return f"trains {trains}: the server applies LoRA to {', '.join(LORA_MODULES)} only"
    return None


class PolicyError(RuntimeError):
    """The server refused or failed a request; the message says which and why."""


@dataclass
class Request:
    """One chat completion: whose adapter (None for the base model), what it sees, how to sample.

    When `messages` ends with an assistant message, the model continues that message (its text
    is the reply's beginning, not part of the completion's `text`)."""

    messages: list[dict]
    adapter: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    logprobs: bool = False  # also return token ids and the sampling log-probabilities (learner)
    repetition_penalty: float = 1.0  # vLLM's (>1 discourages repeating tokens already present)
    min_tokens: int = 0  # vLLM's: no end token (or stop token) before this many tokens
    # the asking agent's index in its team: a pool of servers sends one agent's calls to one
    # server, where its prompt's prefix is cached (`agents.serving.pool`)
    agent: int | None = None
    # a stop decided on the text as it streams: given the completion so far, where it ends (a
    # position in it) or None to go on; the call is then ended and the text cut (`pieces_kept`)
    stop_when: Callable[[str], int | None] | None = field(default=None, repr=False)
    # the reply must be JSON of this schema (vLLM's structured outputs: the server's grammar
    # keeps every token inside it)
    json_schema: dict | None = None


def pieces_kept(
    pieces: list[str], stop_when: Callable[[str], int | None] | None, whole: bool = True
) -> list[str] | None:
    """The streamed pieces to keep when `stop_when` ends the text they make (None: no stop yet).
    `whole`: those that end at or before its cut, so the kept text and its token ids stay
    aligned (a learner's sample); else the text up to the cut itself, the piece the cut falls in
    split there. A piece is a token or a few: the server sends several in one when the client
    reads late, and a whole-piece cut then ended a reply mid-word ("to use their own too")."""
    if stop_when is None:
        return None
    cut = stop_when("".join(pieces))
    if cut is None:
        return None
    end = 0
    for kept, piece in enumerate(pieces):
        if end + len(piece) > cut:
            return pieces[:kept] if whole or cut == end else [*pieces[:kept], piece[: cut - end]]
        end += len(piece)
    return list(pieces)


@dataclass
class Completion:
    text: str
    adapter: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    first_token_s: float | None
    finish_reason: str | None
    # with Request.logprobs: the exact tokens the server saw and sampled, and their log-probabilities
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    token_logprobs: list[float] | None = None


@dataclass
class PolicyClient:
    """Client of one vLLM server; `base_model` is the server's served model name."""

    base_url: str
    base_model: str = "base"
    timeout_s: float = 600.0
    loaded: dict[str, str] = field(default_factory=dict)  # adapter name -> folder, for restore
    api_key: str = field(default_factory=lambda: os.environ.get(API_KEY_ENV) or "EMPTY")
    # set by `cancel`: every request in flight ends at its next streamed piece, with PolicyError
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")

    def cancel(self) -> None:
        """End every request in flight and refuse new ones (a process that is stopping: its
        threads would otherwise wait for each request's last token before it can exit)."""
        self.cancelled.set()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    # -- generation -------------------------------------------------------------------------
    def generate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]:
        """Run `requests` concurrently; `on_token(i, text)` gets each streamed piece of request i."""
        return asyncio.run(self.agenerate(requests, on_token))

    async def agenerate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]:
        async with AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.api_key,
            timeout=self.timeout_s,
            max_retries=2,
        ) as client:
            return list(
                await asyncio.gather(
                    *(self._complete(client, i, r, on_token) for i, r in enumerate(requests))
                )
            )

    async def _complete(
        self, client: AsyncOpenAI, index: int, request: Request, on_token
    ) -> Completion:
        model = request.adapter or self.base_model
        sent = self.server_name(request.adapter) if request.adapter else model
        if self.cancelled.is_set():
            raise PolicyError(f"request {index} to {model!r} not sent: the client stops")
        start = time.perf_counter()
        first_token_s, pieces, usage, finish = None, [], None, None
        prompt_ids, token_ids, logprobs = None, [], []
        marks, kept = [], None  # after each piece: how many token ids and log-probs had come
        try:
            stream = await client.chat.completions.create(model=sent, **_options(request))
            async for chunk in stream:
                if self.cancelled.is_set():
                    await stream.close()  # the server stops generating for it
                    raise PolicyError(f"request {index} to {model!r} cancelled: the client stops")
                if chunk.usage is not None:
                    usage = chunk.usage
                if request.logprobs and getattr(chunk, "prompt_token_ids", None):
                    prompt_ids = chunk.prompt_token_ids  # a vLLM extension, in the first chunk
                for choice in chunk.choices:
                    if request.logprobs:
                        token_ids.extend(getattr(choice, "token_ids", None) or [])
                        if choice.logprobs and choice.logprobs.content:
                            logprobs.extend(t.logprob for t in choice.logprobs.content)
                    if choice.delta.content:
                        if first_token_s is None:
                            first_token_s = time.perf_counter() - start
                        pieces.append(choice.delta.content)
                        marks.append((len(token_ids), len(logprobs)))
                        if on_token:
                            on_token(index, choice.delta.content)
                    finish = choice.finish_reason or finish
                kept = pieces_kept(pieces, request.stop_when, whole=request.logprobs)
                if kept is not None:
                    # closing the stream ends the request on the server: it generates no more
                    await stream.close()
                    ids, probs = marks[len(kept) - 1] if kept else (0, 0)
                    pieces, token_ids, logprobs = kept, token_ids[:ids], logprobs[:probs]
                    finish = "stop"
                    break
        except PolicyError:
            raise
        except Exception as e:
            raise PolicyError(f"request {index} to {model!r} failed: {e}") from e
        if kept is not None or usage is None:  # what was kept: ids with log-probs, else pieces
            completion_tokens = len(token_ids) if request.logprobs else len(pieces)
        else:
            completion_tokens = usage.completion_tokens
        return Completion(
            text="".join(pieces),
            adapter=request.adapter,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=completion_tokens,
            latency_s=time.perf_counter() - start,
            first_token_s=first_token_s,
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            token_ids=token_ids if request.logprobs else None,
            token_logprobs=logprobs if request.logprobs else None,
        )

    # -- adapters ---------------------------------------------------------------------------
    def _post(self, path: str, payload: dict) -> None:
        response = httpx.post(
            f"{self.base_url}{path}", json=payload, headers=self.headers, timeout=120
        )
        if response.status_code != 200:
            raise PolicyError(
                f"{path} {payload}: HTTP {response.status_code}: {response.text[:500]}"
            )

    def server_name(self, name: str) -> str:
        """What the server calls adapter `name`: `served_as` its folder when this client knows
        the folder (it loaded or remembered it), else `name` as given."""
        return served_as(name, self.loaded[name]) if name in self.loaded else name

    def serves(self, name: str, path: str) -> bool:
        """Whether the server has adapter `name` loaded from folder `path` (by any process)."""
        return served_as(name, path) in {m["id"] for m in self.models()}

    def load_adapter(self, name: str, path: str) -> None:
        """Load the PEFT adapter folder `path` under the new name `name` (e.g. `agent1-v3`)."""
        if refused := modules_refused(path):
            raise PolicyError(f"adapter {name!r} ({path}) {refused}")
        lora = {"lora_name": served_as(name, path), "lora_path": str(path)}
        self._post("/v1/load_lora_adapter", lora)
        self.loaded[name] = str(path)

    def remember(self, name: str, path: str) -> None:
        """Record that the server serves `name` from `path`, loaded by another process (so that
        a restarted server gets it back, and no one asks the server again)."""
        self.loaded[name] = str(path)

    def unload_adapter(self, name: str) -> None:
        self._post("/v1/unload_lora_adapter", {"lora_name": self.server_name(name)})
        self.loaded.pop(name, None)

    def list_adapters(self) -> list[str]:
        """The adapters the server has loaded (the base model is not listed): by the name this
        client knows them by, the others (another process's, another database's) as the server
        names them."""
        known = {self.server_name(n): n for n in self.loaded}
        return [known.get(m["id"], m["id"]) for m in self.models() if m["id"] != self.base_model]

    def models(self) -> list[dict]:
        response = httpx.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=10)
        response.raise_for_status()
        return response.json()["data"]

    def restore_adapters(self) -> None:
        """Load again every adapter this client loaded: a restarted server has none."""
        for name, path in list(self.loaded.items()):
            self.load_adapter(name, path)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def taken_out(self) -> dict[str, str]:
        """Servers taken out of the rotation (a pool's; one server is never taken out)."""
        return {}


def _options(request: Request) -> dict:
    """The chat completion's arguments for `request`, vLLM's extensions in `extra_body`."""
    body = {"return_token_ids": True} if request.logprobs else {}
    if request.repetition_penalty != 1.0:
        body["repetition_penalty"] = request.repetition_penalty
    if request.min_tokens:
        body["min_tokens"] = request.min_tokens
    if request.messages and request.messages[-1]["role"] == "assistant":
        # the reply is already begun (an agent's stub head): the model continues that message
        body |= {"continue_final_message": True, "add_generation_prompt": False}
    options = {
        "messages": request.messages,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
        "stop": request.stop,
        "stream": True,
        # a stop decided here ends the stream before its last chunk: vLLM's usage on every
        # chunk keeps the prompt's token count
        "stream_options": {"include_usage": True}
        | ({"continuous_usage_stats": True} if request.stop_when else {}),
    }
    if request.logprobs:
        options["logprobs"] = True
    if request.json_schema is not None:
        options["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": request.json_schema},
        }
    if body:
        options["extra_body"] = body
    return options
