"""A scripted stand-in for the vLLM policy, for unit tests of the team graphs' logic only.

It answers each request with `respond(request)`, streams the answer in pieces like the server,
and records every request it got (to check what each agent was shown). Integration tests use the
real server through the `policy` fixture instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agents.serving.policy import Completion, Request, pieces_kept


class ScriptedPolicy:
    def __init__(self, respond: Callable[[Request], str], delay_s: float = 0.0):
        self.respond = respond
        self.delay_s = delay_s
        self.requests: list[Request] = []
        self.batches: list[int] = []  # size of each generate() call
        self._lock = threading.Lock()

    def generate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]:
        with self._lock:
            self.requests.extend(requests)
            self.batches.append(len(requests))
        completions = []
        for i, request in enumerate(requests):
            start = time.perf_counter()
            time.sleep(self.delay_s)
            text = self.respond(request)
            pieces = [text[k : k + 7] for k in range(0, len(text), 7)]
            cut_off = len(pieces) > request.max_tokens  # a piece stands for a token
            if cut_off:
                pieces = pieces[: request.max_tokens]
            streamed = []
            for piece in pieces:  # as the client does: the text so far, after each piece
                streamed.append(piece)
                if on_token:
                    on_token(i, piece)
                kept = pieces_kept(streamed, request.stop_when, whole=request.logprobs)
                if kept is not None:
                    streamed, cut_off = kept, False
                    break
            pieces, text = streamed, "".join(streamed)
            completions.append(
                Completion(
                    text=text,
                    adapter=request.adapter,
                    prompt_tokens=sum(len(m["content"].split()) for m in request.messages),
                    completion_tokens=len(pieces),
                    latency_s=time.perf_counter() - start,
                    first_token_s=0.0,
                    finish_reason="length" if cut_off else "stop",
                )
            )
        return completions


def agent_of(request: Request) -> int:
    """Tests give agent i the adapter name `agent{i + 1}-v1` (as `store.adapter_name`), so a
    request says whose it is."""
    return int(request.adapter.removeprefix("agent").split("-")[0]) - 1


def adapters(size: int) -> list[str]:
    return [f"agent{i + 1}-v1" for i in range(size)]
