"""How a sandboxed run ended: its output read under the wall-clock deadline and the output cap
(`collect_output`), every process it left killed (`kill_all`), and `SandboxResult`, which says in
plain words which limit stopped it (`describe_run`)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

import psutil

from agents.judge.limits import Limits

# audit events, grouped for the report (the hook itself, in agents/judge/harness/prelude.py, lists
# what it refuses)
_PROCESS_EVENTS = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork")
_PROCESS_EVENTS += ("os.kill", "pty.")
_FILE_EVENTS = ("open", "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown")
_FILE_EVENTS += ("os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree")


@dataclass
class SandboxResult:
    """How one sandboxed run ended. `limit` is None when it ended by itself."""

    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal (as in subprocess)
    timed_out: bool
    killed_by: str | None  # "SIGKILL", "SIGXCPU", ... when a signal ended it
    limit: (
        str | None
    )  # "wall_time", "cpu_time", "memory", "output", "processes", "disk", "file_size"
    reason: str  # one human-readable sentence
    blocked: list[str]  # what the audit hook refused, e.g. "socket.connect: ('127.0.0.1', 80)"
    duration_s: float
    output_truncated: bool
    layers: list[str]  # containment layers that were active
    interpreter: str = ""
    stray_processes_killed: int = 0  # processes still alive after the program ended
    pid: int = 0  # of the program's first process, which led its process group
    uid: int | None = None  # the throw-away uid it ran as (root only)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.limit is None


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not the program's fault)."""


def collect_output(
    proc: subprocess.Popen,
    limits: Limits,
    uid: int | None,
    stop: threading.Event | None = None,
) -> tuple[bytes, bytes, bool, bool, int, bool]:
    """Read stdout and stderr until the program ends (or the deadline passes, or the output cap is
    hit, or `stop` is set), then end whatever it left running. Returns (stdout, stderr, timed_out,
    overflowed, number of processes left running after the program ended, stopped)."""
    deadline = time.monotonic() + limits.wall_seconds
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total, strays = 0, 0
    timed_out = overflowed = ended = stopped = False
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if ended:
                    break  # something still holds the pipes: stop reading
                timed_out = ended = True
                kill_all(proc.pid, uid)
                deadline = time.monotonic() + 2.0  # drain what is left, briefly
                continue
            if selector.get_map():
                for key, _ in selector.select(timeout=min(remaining, 0.05)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                        continue
                    chunks[key.fd].append(data[: max(limits.output_bytes - total, 0)])
                    total += len(data)
                    if total > limits.output_bytes and not ended:
                        overflowed = ended = True
                        kill_all(proc.pid, uid)
                        deadline = time.monotonic() + 2.0
            elif ended:
                break
            else:  # it closed its pipes but may still run
                time.sleep(min(remaining, 0.05))
            if not ended and stop is not None and stop.is_set() and proc.poll() is None:
                stopped = ended = True
                kill_all(proc.pid, uid)
                deadline = time.monotonic() + 2.0
            if not ended and proc.poll() is not None:
                # the program is over: whatever it left running ends with it
                ended = True
                strays = kill_all(proc.pid, uid)
                deadline = time.monotonic() + 2.0
    stdout = b"".join(chunks[proc.stdout.fileno()])
    stderr = b"".join(chunks[proc.stderr.fileno()])
    proc.stdout.close()
    proc.stderr.close()
    return stdout, stderr, timed_out, overflowed, strays, stopped


def kill_all(pgid: int, uid: int | None) -> int:
    """Kill the run's process group and, when it ran under a throw-away uid, every process of that
    uid (a fork bomb or a setsid() daemon escapes the group). Returns how many were still alive."""
    alive = 0
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    if uid is None:
        return 0
    for _ in range(200):
        found = []
        for proc in psutil.process_iter(["uids", "status"]):
            uids, status = proc.info["uids"], proc.info["status"]
            if uids is not None and uid in uids and status != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        if not found:
            return alive
        alive = max(alive, len(found))
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    raise SandboxError(f"processes of sandbox uid {uid} survived 200 rounds of SIGKILL")


def limits_hit(
    limits: Limits,
    stderr: str,
    blocked: list[str],
    killed_by: str | None,
    timed_out: bool,
    overflowed: bool,
    out_of_memory: bool,
    stopped: bool,
) -> list[tuple[str, str]]:
    """Each limit the run met, with the sentence that explains it, most decisive first (a limit
    met in several ways once, at its first place)."""
    hits: list[tuple[str, str]] = []
    if overflowed:
        hits.append(("output", f"it printed more than {limits.output_bytes:,} bytes"))
    if timed_out:
        hits.append(("wall_time", f"it ran past the wall-clock limit of {limits.wall_seconds:g} s"))
    if out_of_memory:
        hits.append(("memory", f"its processes used more than {limits.memory_mb} MiB together"))
    elif killed_by == "SIGXCPU" or (
        killed_by == "SIGKILL" and not (timed_out or overflowed or stopped)
    ):
        hits.append(("cpu_time", f"it used more than {limits.cpu_seconds} s of CPU time"))
    if "MemoryError" in stderr:
        hits.append(("memory", f"it tried to use more than {limits.memory_mb} MiB of memory"))
    if "BlockingIOError" in stderr or "Resource temporarily unavailable" in stderr:
        hits.append(("processes", f"it tried to start more than {limits.processes} processes"))
    if "No space left on device" in stderr:
        hits.append(("disk", f"it filled its {limits.disk_mb} MiB folder"))
    if "File too large" in stderr:
        hits.append(("file_size", f"it wrote a file larger than {limits.file_size_mb} MiB"))
    if "Network is unreachable" in stderr or any(b.startswith("socket.") for b in blocked):
        hits.append(("network", "it tried to use the network, which the sandbox does not have"))
    if any(b.startswith(_PROCESS_EVENTS) for b in blocked):
        hits.append(("processes", "it tried to start or signal processes"))
    if any(b.startswith(_FILE_EVENTS) for b in blocked):
        hits.append(("filesystem", "it tried to change files outside its folder"))
    elif "PermissionError" in stderr and not blocked:
        hits.append(("filesystem", "it was refused access to something it does not own"))
    if any(b.startswith("ctypes.") for b in blocked):
        hits.append(("ctypes", "it tried to call C functions through ctypes"))
    return list({name: (name, sentence) for name, sentence in reversed(hits)}.values())[::-1]


def describe_run(
    pid: int,
    uid: int | None,
    returncode: int,
    stdout_bytes: bytes,
    stderr_bytes: bytes,
    timed_out: bool,
    overflowed: bool,
    limits: Limits,
    duration: float,
    layers: list[str],
    interpreter: str,
    strays: int,
    out_of_memory: bool = False,
    stopped: bool = False,
) -> SandboxResult:
    stdout = stdout_bytes.decode("utf-8", errors="replace")
    stderr = stderr_bytes.decode("utf-8", errors="replace")
    blocked = [
        line.removeprefix("[sandbox] blocked ")
        for line in stderr.splitlines()
        if line.startswith("[sandbox] blocked ")
    ]
    killed_by = signal.Signals(-returncode).name if returncode < 0 else None
    hits = limits_hit(
        limits, stderr, blocked, killed_by, timed_out, overflowed, out_of_memory, stopped
    )
    limit = hits[0][0] if hits else None
    if hits:
        reason = ("finished, but " if returncode == 0 else "stopped: ") + "; ".join(
            sentence for _, sentence in hits
        )
    elif stopped:
        reason = "stopped by the app once it had what it needed"
    elif killed_by:
        reason = f"killed by {killed_by}"
    elif returncode == 0:
        reason = "finished normally"
    else:
        reason = f"exited with code {returncode}"
    if blocked:
        refused = dict.fromkeys(b.split(":")[0] for b in blocked)
        reason += "; the sandbox refused " + ", ".join(list(refused)[:5])
    if strays:
        reason += f"; {strays} process(es) it left running were killed"
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=returncode,
        timed_out=timed_out,
        killed_by=killed_by,
        limit=limit,
        reason=reason,
        blocked=blocked,
        duration_s=duration,
        output_truncated=overflowed,
        layers=layers,
        interpreter=interpreter,
        stray_processes_killed=strays,
        pid=pid,
        uid=uid,
    )
