"""What one sandboxed run may use, and the host-side pieces that enforce it: `Limits`, the
throw-away uid each run gets (`pick_uid`), its rlimits (`rlimits_for`) and its cgroups
(`RunCgroups`: the memory and process count of the whole run). agents/judge/sandbox.py hands them to the
launcher (agents/judge/harness/launcher.py)."""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import time
from dataclasses import dataclass

# uids for sandboxes are drawn from a range far above any real account; one per run, so that
# RLIMIT_NPROC and the final sweep count only that run's processes.
SANDBOX_UID_BASE = 1_500_000_000
SANDBOX_UID_SPAN = 1_000_000


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use. Defaults suit one generated function and its tests."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 512  # address space; Python raises MemoryError past it
    processes: int = 32  # counted per throw-away uid, or per user namespace as an ordinary user
    output_bytes: int = 1_000_000  # stdout and stderr together
    file_size_mb: int = 16  # largest file it may write
    disk_mb: int = 64  # size of its private working folder (root only)
    open_files: int = 64
    audit_hook: bool = True


class RunCgroups:
    """One run's cgroups (v2, or v1's memory and pids hierarchies): memory for all its processes
    together, shared memory (memfd, tmpfs, /dev/shm) included, and a process count. Root only;
    `create` returns None where the host offers no writable cgroup file system."""

    V2_ROOT = "/sys/fs/cgroup"
    V1_ROOTS = ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids")

    def __init__(self, paths: list[str], memory_file: str):
        self.paths = paths
        self.memory_file = memory_file  # where the kernel counts out-of-memory kills or failures

    @classmethod
    def create(cls, limits: Limits) -> RunCgroups | None:
        name = f"coteam-sandbox-{os.getpid()}-{random.getrandbits(48):012x}"
        memory = str(limits.memory_mb * 1024 * 1024)
        made: list[str] = []
        try:
            if os.path.exists(os.path.join(cls.V2_ROOT, "cgroup.controllers")):
                path = os.path.join(cls.V2_ROOT, name)
                os.mkdir(path)
                made.append(path)
                _write(path, "memory.max", memory)
                _write(path, "memory.swap.max", "0")
                _write(path, "pids.max", str(limits.processes))
                return cls(made, os.path.join(path, "memory.events"))
            memory_root, pids_root = cls.V1_ROOTS
            if not (os.path.isdir(memory_root) and os.path.isdir(pids_root)):
                return None
            for root in cls.V1_ROOTS:
                os.mkdir(os.path.join(root, name))
                made.append(os.path.join(root, name))
            _write(made[0], "memory.limit_in_bytes", memory)
            with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                _write(made[0], "memory.memsw.limit_in_bytes", memory)
            _write(made[1], "pids.max", str(limits.processes))
            return cls(made, os.path.join(made[0], "memory.oom_control"))
        except OSError:
            cls(made, "").remove()
            return None

    def out_of_memory(self) -> bool:
        """Whether the run hit its memory limit."""
        try:
            with open(self.memory_file, encoding="ascii") as f:
                text = f.read()
        except OSError:
            return False
        # memory.events (v2) and memory.oom_control (v1) both have an "oom_kill N" line
        return any(
            line.split()[:1] == ["oom_kill"] and int(line.split()[1]) > 0
            for line in text.splitlines()
        )

    def remove(self) -> None:
        """Remove the cgroups (their processes are gone; a dying one may take a moment)."""
        for path in self.paths:
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _write(folder: str, name: str, value: str) -> None:
    with open(os.path.join(folder, name), "w", encoding="ascii") as f:
        f.write(value)


def rlimits_for(limits: Limits) -> dict[str, tuple[int, int]]:
    """The run's rlimits. RLIMIT_NPROC counts the processes of one uid in one user namespace
    (Linux 5.14 and later): the throw-away uid's as root, the run's own user namespace's as an
    ordinary user."""
    mb = 1024 * 1024
    rlimits = {
        "RLIMIT_CPU": (limits.cpu_seconds, limits.cpu_seconds + 1),
        "RLIMIT_AS": (limits.memory_mb * mb, limits.memory_mb * mb),
        "RLIMIT_FSIZE": (limits.file_size_mb * mb, limits.file_size_mb * mb),
        "RLIMIT_NOFILE": (limits.open_files, limits.open_files),
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_NPROC": (limits.processes, limits.processes),
    }
    return rlimits


def pick_uid() -> int:
    while True:
        uid = SANDBOX_UID_BASE + random.randrange(SANDBOX_UID_SPAN)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
