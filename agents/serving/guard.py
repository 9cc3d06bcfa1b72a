"""Runs the vLLM server as a child and takes its whole process group down with it.

vLLM does not exit when its parent dies (measured: after a SIGKILL of CoTeam, a healthy server
and its EngineCore lived on). This guard sits between them: it notices within half a second that
CoTeam is gone, however CoTeam died, and then ends every process of the group: no orphans.
(It polls its parent's pid rather than use PR_SET_PDEATHSIG, which fires when the *thread* that
started it ends, not the process.)

Usage: python guard.py COMMAND...   (started by agents.serving.server in a new session)
"""

import contextlib
import os
import signal
import subprocess
import sys
import time

GRACE_S = 15.0


def end_group(server: subprocess.Popen, code: int) -> None:
    """SIGTERM the server, give it GRACE_S to shut down, then SIGKILL the group (us included)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if server.poll() is None:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(GRACE_S)
    print(f"coteam guard: ending process group {os.getpgid(0)} (code {code})", flush=True)
    sys.stdout.flush()
    os.killpg(0, signal.SIGKILL)


def main() -> None:
    parent = os.getppid()
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, lambda *_: end_group(server, 0))
    signal.signal(signal.SIGINT, lambda *_: end_group(server, 0))
    while (code := server.poll()) is None:
        if os.getppid() != parent:  # reparented: CoTeam is gone
            end_group(server, 0)
        time.sleep(0.5)
    print(f"coteam guard: vLLM exited with code {code}", flush=True)
    end_group(server, code)


if __name__ == "__main__":
    main()
