"""Several vLLM servers as one client: the replicas of one base model, kept on the same adapters.

`ServerPool` answers what `PolicyClient` answers (generate, load and unload adapters, health), so
the team, the learner and the registry use a pool as they use one server:

- **Routing**: an agent's calls go to one server, `live[agent % len(live)]` (`Request.agent`), so
  its prompt's prefix stays in that server's cache from one turn to the next; a request of no
  agent goes to the servers in turn.
- **Adapters**: a version is loaded on every live server before it is served (`load_adapter`);
  a server that cannot load it (it cannot read the folder: adapters must be in a directory every
  server mounts at the same path, `COTEAM_ADAPTERS_DIR`) fails the load with its URL named, so a
  promotion stops there and the previous version keeps serving everywhere.
- **A server that dies** (a request to it fails and its /health does not answer) is taken out of
  the rotation (`taken_out`, which the page shows), and its requests are sent again to the next
  live server; a server that answers /health keeps its errors (a refused request is not a dead
  server). One that comes back joins again at the app's next start, with the adapters loaded.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.serving.policy import Completion, PolicyClient, PolicyError, Request

log = logging.getLogger(__name__)
# streamed where a reply was being shown when its server died and it was sent again elsewhere
# (the finished reply replaces what was shown)
RESENT = "\n\n[the model server at {url} stopped answering: this reply starts again]\n\n"


@dataclass
class ServerPool:
    """The vLLM servers at several URLs, serving the same base model under the same name."""

    clients: list[PolicyClient]
    down: dict[str, str] = field(default_factory=dict)  # URL -> why it was taken out
    _turn: itertools.count = field(default_factory=itertools.count, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.clients:
            raise ValueError("a pool needs at least one server")
        names = {c.base_model for c in self.clients}
        if len(names) > 1:
            raise ValueError(f"the servers serve the base model under different names: {names}")

    @property
    def base_model(self) -> str:
        return self.clients[0].base_model

    @property
    def base_url(self) -> str:
        """The live servers' URLs, as the page and the messages name them."""
        return ", ".join(c.base_url for c in self.live())

    def live(self) -> list[PolicyClient]:
        """The servers in the rotation; PolicyError when every one was taken out."""
        with self._lock:
            live = [c for c in self.clients if c.base_url not in self.down]
        if not live:
            raise PolicyError(f"every model server stopped answering: {self.down}")
        return live

    def taken_out(self) -> dict[str, str]:
        """The servers taken out of the rotation, and why."""
        with self._lock:
            return dict(self.down)

    def cancel(self) -> None:
        for client in self.clients:
            client.cancel()

    # -- generation -------------------------------------------------------------------------
    def generate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]:
        return asyncio.run(self.agenerate(requests, on_token))

    async def agenerate(
        self, requests: list[Request], on_token: Callable[[int, str], None] | None = None
    ) -> list[Completion]:
        return list(
            await asyncio.gather(*(self._one(i, r, on_token) for i, r in enumerate(requests)))
        )

    async def _one(self, index: int, request: Request, on_token) -> Completion:
        streamed = []  # pieces of the reply shown before its server died

        def stream(_: int, piece: str) -> None:
            streamed.append(piece)
            on_token(index, piece)

        while True:
            client = self.server_for(request)
            try:
                [done] = await client.agenerate([request], stream if on_token else None)
                return done
            except PolicyError as e:
                if client.cancelled.is_set() or await asyncio.to_thread(client.healthy):
                    raise  # refused by a server that is up: not a reason to go elsewhere
                self._take_out(client, str(e))
                if streamed:  # the reply starts again: say so where it was being shown
                    streamed.clear()
                    on_token(index, RESENT.format(url=client.base_url))

    def server_for(self, request: Request) -> PolicyClient:
        live = self.live()
        slot = request.agent if request.agent is not None else next(self._turn)
        return live[slot % len(live)]

    def _take_out(self, client: PolicyClient, why: str) -> None:
        with self._lock:
            if client.base_url not in self.down:
                log.warning("model server %s taken out of the rotation: %s", client.base_url, why)
                self.down[client.base_url] = why.splitlines()[0][:300]

    # -- adapters ---------------------------------------------------------------------------
    @property
    def loaded(self) -> dict[str, str]:
        """The adapters every live server has loaded (name -> folder)."""
        live = self.live()
        return {n: p for n, p in live[0].loaded.items() if all(n in c.loaded for c in live[1:])}

    def remember(self, name: str, path: str) -> None:
        """Record on every live server's client that it serves `name` from `path`."""
        for client in self.live():
            client.remember(name, path)

    def load_adapter(self, name: str, path: str) -> None:
        """Load the folder `path` under `name` on every live server that lacks it; a server that
        cannot is named in the PolicyError (the version is then served nowhere new)."""
        for client in self.live():
            if client.serves(name, path):
                client.remember(name, path)
                continue
            try:
                client.load_adapter(name, path)
            except PolicyError as e:
                raise PolicyError(
                    f"the model server at {client.base_url} cannot load {name} from {path} "
                    f"(is that folder on a disk every server mounts? COTEAM_ADAPTERS_DIR): {e}"
                ) from e

    def unload_adapter(self, name: str) -> None:
        for client in self.live():
            if name in client.list_adapters():
                client.unload_adapter(name)

    def models(self) -> list[dict]:
        """The models every live server serves (the first server's entries)."""
        live = self.live()
        others = [{m["id"] for m in c.models()} for c in live[1:]]
        return [m for m in live[0].models() if all(m["id"] in ids for ids in others)]

    def serves(self, name: str, path: str) -> bool:
        """Whether every live server has adapter `name` loaded from folder `path`."""
        return all(client.serves(name, path) for client in self.live())

    def list_adapters(self) -> list[str]:
        """The adapters every live server has loaded, named as `PolicyClient.list_adapters`."""
        live = self.live()
        others = [set(c.list_adapters()) for c in live[1:]]
        return [n for n in live[0].list_adapters() if all(n in names for names in others)]

    def restore_adapters(self) -> None:
        for client in self.live():
            client.restore_adapters()

    def healthy(self) -> bool:
        """Whether a server answers; one that does not is taken out of the rotation."""
        with self._lock:
            live = [c for c in self.clients if c.base_url not in self.down]
        for client in live:
            if not client.healthy():
                self._take_out(client, "GET /health failed")
        with self._lock:
            return len(self.down) < len(self.clients)
