"""The weak sandbox, tried as an ordinary user: run by tests/test_sandbox.py under another uid as
`python3 weak_probe.py APP DEPS CANARY`, with a copy of agents/ in APP and psutil and pyseccomp
in DEPS. Prints one JSON object: what a hostile program managed, what survived the run, and the
scores of an honest program and of one that hunts for its tests' expected values."""

import json
import os
import sys
import textwrap

app, deps, canary = sys.argv[1:4]
sys.path[:0] = [app, deps]
os.environ["COTEAM_ALLOW_WEAK_SANDBOX"] = "1"

import psutil  # noqa: E402

from agents.judge.limits import Limits  # noqa: E402
from agents.judge.sandbox import run_untrusted  # noqa: E402
from agents.judge.testrun import run_tests  # noqa: E402

HOSTILE = textwrap.dedent(
    f"""
    import os, time
    if os.fork() == 0:  # a daemon that leaves the process group
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        os._exit(0)
    try:
        print("saw", sorted(os.listdir({canary!r})))
    except OSError as e:
        print("saw", e.errno)
    for path in ({canary!r} + "/written", "written-here"):
        try:
            with open(path, "w") as f:
                f.write("x")
            print("wrote", path.split("/")[-1])
        except OSError as e:
            print("refused", path.split("/")[-1], e.errno)
    forks = 0
    try:
        for _ in range(200):
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            forks += 1
    except OSError:
        pass
    print("forks", forks)
    """
)

TESTS = "def check(candidate):\n    assert candidate(1, 2) == 31337\n    assert candidate(5, 5) == 27182\n"
HONEST = "def add(a, b):\n    return {(1, 2): 31337, (5, 5): 27182}[a, b]\n"
HUNTER = textwrap.dedent(
    """
    import glob, os, re
    found = []
    for path in glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ") + glob.glob(
        "/proc/*/fd/*"
    ) + glob.glob("/tmp/**", recursive=True):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            data = os.read(fd, 1_000_000)
            os.close(fd)
        except OSError:
            continue
        found += [int(n) for n in re.findall(rb"== (\\d{5})", data)]
    def add(a, b):
        return found.pop(0) if found else a + b
    """
)

# unittest tests that write a file for the program and read the one it writes: the scratch
# folder both processes share, cloned into each user namespace
FILE_TESTS = textwrap.dedent(
    """
    import os, unittest
    class FileTest(unittest.TestCase):
        def setUp(self):
            with open("in.txt", "w") as f:
                f.write("41")
        def test_reads(self):
            self.assertEqual(Reader().read("in.txt"), 42)
        def test_writes(self):
            Reader().write("out.txt", 7)
            with open("out.txt") as f:
                self.assertEqual(f.read(), "7")
    """
)
FILE_PROGRAM = textwrap.dedent(
    """
    class Reader:
        def read(self, path):
            with open(path) as f:
                return int(f.read()) + 1
        def write(self, path, n):
            with open(path, "w") as f:
                f.write(str(n))
    """
)

result = run_untrusted(HOSTILE, Limits(audit_hook=False, wall_seconds=20))
me = os.getpid()
survivors = [
    " ".join(p.info["cmdline"] or [])
    for p in psutil.process_iter(["uids", "cmdline", "status"])
    if p.info["uids"] is not None
    and p.info["uids"].real == os.getuid()
    and p.pid != me
    and p.info["status"] != psutil.STATUS_ZOMBIE
]
print(
    json.dumps(
        {
            "stdout": result.stdout.splitlines(),
            "layers": result.layers,
            "survivors": survivors,
            "canary": os.listdir(canary),
            "honest": run_tests(HONEST, TESTS, "add").passed,
            "hunter": run_tests(HUNTER, TESTS, "add").passed,
            "files": run_tests(FILE_PROGRAM, FILE_TESTS, "Reader").passed,
        }
    )
)
