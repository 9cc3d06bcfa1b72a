"""The one place that runs untrusted code: generated programs, their tests, and anything the UI runs.

`run_untrusted(code, limits)` runs `code` in a fresh Python interpreter and returns a
`SandboxResult` saying what it printed, how it ended and, when it was stopped, which limit stopped
it in plain words. The test runner built on it is `agents/testrun.py`.

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
Run as an ordinary user, the sandbox refuses unless WEAK_SANDBOX_ENV is "1"; then it has no uid,
mount, pid or cgroup layer and sets no RLIMIT_NPROC (it would
count the app's own processes): the audit hook is then what stops forks, and a process that leaves
the group with setsid() can outlive the run. Not covered by any layer: reading world-readable files.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import psutil

# uids for sandboxes are drawn from a range far above any real account; one per run, so that
# RLIMIT_NPROC and the final sweep count only that run's processes.
SANDBOX_UID_BASE = 1_500_000_000
SANDBOX_UID_SPAN = 1_000_000

# the world-writable folders a throw-away user could otherwise write to; each gets a small tmpfs
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

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

# audit events, grouped for the report (the hook itself lists what it refuses in _PRELUDE)
_PROCESS_EVENTS = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork")
_PROCESS_EVENTS += ("os.kill", "pty.")
_FILE_EVENTS = ("open", "os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown")
_FILE_EVENTS += ("os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree")


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use. Defaults suit one generated function and its tests."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 512  # address space; Python raises MemoryError past it
    processes: int = 32  # counted per throw-away uid (root only)
    output_bytes: int = 1_000_000  # stdout and stderr together
    file_size_mb: int = 16  # largest file it may write
    disk_mb: int = 64  # size of its private working folder (root only)
    open_files: int = 64
    audit_hook: bool = True


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


# As an ordinary user the sandbox has no throw-away uid, mounts or cgroup: generated code would
# run as that user. It is refused unless this variable is "1" (`--allow-weak-sandbox`).
WEAK_SANDBOX_ENV = "COTEAM_ALLOW_WEAK_SANDBOX"
WEAK_SANDBOX_WARNING = (
    "the sandbox is weak here: not running as root, so generated code runs as your own user "
    "(only rlimits, the audit hook and, where the kernel allows, network and IPC namespaces and "
    "the syscall filter) and could read or change your files"
)


def isolation_level() -> tuple[str, str]:
    """("full" or "weak", the layers a run gets on this host, in words) for `coteam doctor`."""
    if os.geteuid() != 0:
        opted_in = os.environ.get(WEAK_SANDBOX_ENV) == "1"
        return "weak", WEAK_SANDBOX_WARNING + ("" if opted_in else "; generated code is refused")
    cgroups = RunCgroups.create(Limits())
    if cgroups:
        cgroups.remove()
    layers = [
        "throw-away uid",
        "network, IPC, mount and PID namespaces",
        "cgroup memory and process limits" if cgroups else "no cgroup (per-process rlimits only)",
        "syscall filter" if _seccomp_config() else "no syscall filter (pyseccomp missing)",
    ]
    return "full", ", ".join(layers)


# Runs inside the sandboxed interpreter: installs the audit hook, then runs main.py.
_PRELUDE = r"""
import os, sys

def _sandbox_guard(root):
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.mkdir": (0,),
                   "os.chmod": (0,), "os.chown": (0,), "os.symlink": (1,), "os.link": (0, 1),
                   "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,)}
    DENIED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
              "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.setuid", "os.setgid",
              "ctypes.", "pty.", "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.",
              "imaplib.", "poplib.", "nntplib.", "telnetlib.", "os.startfile")
    realpath, fsdecode, write = os.path.realpath, os.fsdecode, os.write
    busy = []

    def inside(path):
        if isinstance(path, int):
            return True
        path = realpath(fsdecode(path))
        return path == root or path.startswith(root + "/") or path == "/dev/null"

    def deny(event, detail):
        write(2, ("[sandbox] blocked %s: %s\n" % (event, detail)).encode("utf-8", "replace"))
        raise PermissionError("sandbox: %s is not allowed (%s)" % (event, detail))

    def hook(event, args):
        if busy:
            return
        busy.append(1)
        try:
            if event == "open":
                path, mode, flags = args
                writes = (flags & WRITE_FLAGS) if mode is None else any(c in mode for c in "wax+")
                if writes and not inside(path):
                    deny(event, path)
            elif event in PATH_EVENTS:
                for i in PATH_EVENTS[event]:
                    if not inside(args[i]):
                        deny(event, args[i])
            elif event.startswith(DENIED):
                deny(event, repr(args[:2])[:200])
        finally:
            busy.clear()

    sys.addaudithook(hook)

def _sandbox_main(root, audit):
    import traceback
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    try:
        code = compile(source, "main.py", "exec")
    except SyntaxError as e:
        traceback.print_exception(type(e), e, None)
        sys.exit(1)
    sys.argv = ["main.py"]
    if audit:
        _sandbox_guard(root)
    g = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)

_sandbox_main(sys.argv[1], sys.argv[2] == "1")
"""

# Runs as root (or as the app's user) between fork and the program: namespaces, limits, uid.
_LAUNCHER = r"""
import ctypes, json, os, resource, sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWPID = 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38

cfg = json.loads(sys.argv[1])
status_fd = int(sys.argv[2])
folder, uid = cfg["folder"], cfg["uid"]
layers = []
try:
    if cfg["seccomp"]:  # imported before tmpfs covers /tmp: the app may be installed under it
        sys.path.insert(0, cfg["seccomp"]["path"])
        import pyseccomp as sc
    libc = ctypes.CDLL(None, use_errno=True)

    def check(ret, what):
        if ret != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, "%s: %s" % (what, os.strerror(errno)))

    def mount_tmpfs(path, options):
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                         options.encode()), "mount tmpfs on " + path)

    for path in cfg["cgroups"]:  # before anything else: every process it starts is counted
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if cfg["cgroups"]:
        layers.append("cgroup: the whole run within %d MiB of memory (memfd and tmpfs included) "
                      "and %d processes" % (cfg["memory_mb"], cfg["processes"]))
    if uid is not None:
        check(libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare network and IPC")
        layers.append("network: empty network namespace")
        layers.append("ipc: private System V IPC namespace (nothing outlives the run)")
        if libc.unshare(CLONE_NEWNS) == 0 and libc.mount(b"none", b"/", None,
                                                         MS_REC | MS_PRIVATE, None) == 0:
            files = {}
            for name in os.listdir(folder):
                with open(os.path.join(folder, name), "rb") as f:
                    files[name] = f.read()
            for path in cfg["world_writable"]:
                if os.path.isdir(path):
                    mount_tmpfs(path, "size=4m,mode=1777")  # TMPDIR points at the folder
            os.makedirs(folder, exist_ok=True)
            mount_tmpfs(folder, "size=%dm,mode=0700,uid=%d,gid=%d" % (cfg["disk_mb"], uid, uid))
            for name, data in files.items():
                path = os.path.join(folder, name)
                with open(path, "wb") as f:
                    f.write(data)
                os.chown(path, uid, uid)
            layers.append("mounts: private %d MiB tmpfs folder; 4 MiB tmpfs over /tmp, "
                          "/var/tmp, /dev/shm, /run/lock" % cfg["disk_mb"])
            if libc.unshare(CLONE_NEWPID) == 0:
                child = os.fork()
                if child:  # this launcher waits outside the namespace and ends as its child did
                    os.close(status_fd)
                    null = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(null, fd)
                    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                    status = os.waitpid(child, 0)[1]
                    if os.WIFSIGNALED(status):
                        import signal
                        signum = os.WTERMSIG(status)
                        if signum not in (signal.SIGKILL, signal.SIGSTOP):
                            signal.signal(signum, signal.SIG_DFL)
                        os.kill(os.getpid(), signum)
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
                # pid 1 of a new namespace: when it ends, the kernel ends every process it left
                check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                 None), "mount /proc")
                layers.append("pid: own PID namespace and /proc (host processes are invisible; "
                              "all of it ends with the program)")
    elif libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0:
        layers.append("network: empty network namespace (user namespace)")
        layers.append("ipc: private System V IPC namespace (user namespace)")
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for name, value in cfg["rlimits"].items():
        soft, hard = value
        resource.setrlimit(getattr(resource, name), (soft, hard))
    layers.append("rlimits: " + ", ".join(sorted(cfg["rlimits"])))
    rules = None
    if cfg["seccomp"]:
        rules = sc.SyscallFilter(sc.ALLOW)
        for name in cfg["seccomp"]["refused"]:
            rules.add_rule(sc.ERRNO(1), name)
        for flag in cfg["seccomp"]["clone_flags"]:
            rules.add_rule(sc.ERRNO(1), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        rules.add_rule(sc.ERRNO(38), "clone3")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        layers.append("user: throw-away uid %d" % uid)
    os.chdir(folder)
    if rules is not None:  # last: the launcher itself needed mount, unshare and setuid
        rules.load()
        layers.append("syscall filter: namespaces, mounts, SysV IPC, keys, ptrace, bpf refused")
    os.write(status_fd, json.dumps({"layers": layers}).encode())
except BaseException as e:
    os.write(status_fd, json.dumps({"error": "%s: %s" % (type(e).__name__, e)}).encode())
    os._exit(125)
os.close(status_fd)
os.execve(cfg["python"], cfg["argv"], cfg["env"])
"""

_interpreter_lock = threading.Lock()
_interpreter: str | None = None


def run_untrusted(
    code: str,
    limits: Limits = Limits(),  # noqa: B008
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and report how it ended.

    `files` (name -> text) are written beside it in its folder, e.g. a harness's input.
    As an ordinary user it refuses to run (SandboxError) unless WEAK_SANDBOX_ENV is "1".

    Never raises for anything the program does; raises SandboxError only when the sandbox itself
    cannot start (e.g. no interpreter the throw-away user may run).
    """
    if os.geteuid() != 0 and os.environ.get(WEAK_SANDBOX_ENV) != "1":
        raise SandboxError(
            f"generated code was not run: {WEAK_SANDBOX_WARNING}. Run CoTeam as root (e.g. in "
            "its container) or accept the risk with --allow-weak-sandbox"
        )
    interpreter = _sandbox_interpreter() if os.geteuid() == 0 else sys.executable
    return _run(code, limits, interpreter, files or {})


def _run(code: str, limits: Limits, interpreter: str, files: dict[str, str]) -> SandboxResult:
    start = time.monotonic()
    uid = _pick_uid() if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="coteam-sandbox-", ignore_cleanup_errors=True) as tmp:
        folder = os.path.realpath(tmp)
        for name, text in {**files, "main.py": code}.items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"not a plain file name: {name!r}")
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(text)
            if uid is not None:  # in case the private mount is unavailable
                os.chown(os.path.join(folder, name), uid, uid)
        if uid is not None:
            os.chown(folder, uid, uid)
        cgroups = RunCgroups.create(limits) if uid is not None else None
        config = {
            "folder": folder,
            "uid": uid,
            "cgroups": cgroups.paths if cgroups else [],
            "memory_mb": limits.memory_mb,
            "processes": limits.processes,
            "seccomp": _seccomp_config(),
            "disk_mb": limits.disk_mb,
            "world_writable": list(WORLD_WRITABLE),
            "rlimits": _rlimits(limits, uid is not None),
            "python": interpreter,
            "argv": [
                interpreter,
                "-I",
                "-S",
                "-c",
                _PRELUDE,
                folder,
                "1" if limits.audit_hook else "0",
            ],
            "env": {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "HOME": folder,
                "TMPDIR": folder,
            },
        }
        status_read, status_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _LAUNCHER,
                    json.dumps(config),
                    str(status_write),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_write,),
                start_new_session=True,
                cwd=folder,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        with os.fdopen(status_read, "rb") as status_pipe:
            status = json.loads(status_pipe.read() or b"{}")  # EOF at exec (close-on-exec)
        if "error" in status:
            proc.kill()
            proc.communicate()
            raise SandboxError(f"the sandbox could not start: {status['error']}")
        layers = ["process: own session, scrubbed environment, python -I -S", *status["layers"]]
        if limits.audit_hook:
            layers.append("audit hook: network, processes, ctypes, writes outside the folder")
        stdout, stderr, timed_out, overflowed, strays = _collect(proc, limits, uid)
        _kill_all(proc.pid, uid)
        proc.wait()
        out_of_memory = cgroups.out_of_memory() if cgroups else False
        if cgroups:
            cgroups.remove()
    return _describe(
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
    )


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
    }


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


def _rlimits(limits: Limits, per_uid: bool) -> dict[str, tuple[int, int]]:
    mb = 1024 * 1024
    rlimits = {
        "RLIMIT_CPU": (limits.cpu_seconds, limits.cpu_seconds + 1),
        "RLIMIT_AS": (limits.memory_mb * mb, limits.memory_mb * mb),
        "RLIMIT_FSIZE": (limits.file_size_mb * mb, limits.file_size_mb * mb),
        "RLIMIT_NOFILE": (limits.open_files, limits.open_files),
        "RLIMIT_CORE": (0, 0),
    }
    if per_uid:  # as the app's own user it would count all of the app's processes
        rlimits["RLIMIT_NPROC"] = (limits.processes, limits.processes)
    return rlimits


def _pick_uid() -> int:
    while True:
        uid = SANDBOX_UID_BASE + random.randrange(SANDBOX_UID_SPAN)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid


def _collect(
    proc: subprocess.Popen, limits: Limits, uid: int | None
) -> tuple[bytes, bytes, bool, bool, int]:
    """Read stdout and stderr until the program ends (or the deadline passes, or the output cap is
    hit), then end whatever it left running. Returns (stdout, stderr, timed_out, overflowed,
    number of processes left running after the program ended)."""
    deadline = time.monotonic() + limits.wall_seconds
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total, strays = 0, 0
    timed_out = overflowed = ended = False
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if ended:
                    break  # something still holds the pipes: stop reading
                timed_out = ended = True
                _kill_all(proc.pid, uid)
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
                        _kill_all(proc.pid, uid)
                        deadline = time.monotonic() + 2.0
            elif ended:
                break
            else:  # it closed its pipes but may still run
                time.sleep(min(remaining, 0.05))
            if not ended and proc.poll() is not None:
                # the program is over: whatever it left running ends with it
                ended = True
                strays = _kill_all(proc.pid, uid)
                deadline = time.monotonic() + 2.0
    stdout = b"".join(chunks[proc.stdout.fileno()])
    stderr = b"".join(chunks[proc.stderr.fileno()])
    proc.stdout.close()
    proc.stderr.close()
    return stdout, stderr, timed_out, overflowed, strays


def _kill_all(pgid: int, uid: int | None) -> int:
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


def _describe(
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
) -> SandboxResult:
    stdout = stdout_bytes.decode("utf-8", errors="replace")
    stderr = stderr_bytes.decode("utf-8", errors="replace")
    blocked = [
        line.removeprefix("[sandbox] blocked ")
        for line in stderr.splitlines()
        if line.startswith("[sandbox] blocked ")
    ]
    killed_by = signal.Signals(-returncode).name if returncode < 0 else None
    # each candidate limit with the sentence that explains it, most decisive first
    hits: list[tuple[str, str]] = []
    if overflowed:
        hits.append(("output", f"it printed more than {limits.output_bytes:,} bytes"))
    if timed_out:
        hits.append(("wall_time", f"it ran past the wall-clock limit of {limits.wall_seconds:g} s"))
    if out_of_memory:
        hits.append(("memory", f"its processes used more than {limits.memory_mb} MiB together"))
    elif killed_by == "SIGXCPU" or (killed_by == "SIGKILL" and not (timed_out or overflowed)):
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
    hits = list({name: (name, sentence) for name, sentence in reversed(hits)}.values())[::-1]
    limit = hits[0][0] if hits else None
    if hits:
        reason = ("finished, but " if returncode == 0 else "stopped: ") + "; ".join(
            sentence for _, sentence in hits
        )
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
