"""Runs first in the sandboxed interpreter (`python -I -S -c`, with the folder, "1" or "0"
for the audit hook and the shared scratch folder or "" as arguments): installs the audit hook, then runs the program in main.py.
agents/judge/sandbox.py passes this file's text; it is never imported."""

import os
import sys


def _sandbox_guard(roots):
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    PATH_EVENTS = {
        "os.remove": (0,),
        "os.rmdir": (0,),
        "os.rename": (0, 1),
        "os.mkdir": (0,),
        "os.chmod": (0,),
        "os.chown": (0,),
        "os.symlink": (1,),
        "os.link": (0, 1),
        "os.truncate": (0,),
        "os.utime": (0,),
        "shutil.rmtree": (0,),
    }
    DENIED = (
        "socket.",
        "subprocess.",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.setuid",
        "os.setgid",
        "ctypes.",
        "pty.",
        "webbrowser.",
        "urllib.",
        "http.",
        "ftplib.",
        "smtplib.",
        "imaplib.",
        "poplib.",
        "nntplib.",
        "telnetlib.",
        "os.startfile",
    )
    realpath, fsdecode, write = os.path.realpath, os.fsdecode, os.write
    busy = []

    def inside(path):
        if isinstance(path, int):
            return True
        path = realpath(fsdecode(path))
        return path == "/dev/null" or any(path == r or path.startswith(r + "/") for r in roots)

    def deny(event, detail):
        write(2, f"[sandbox] blocked {event}: {detail}\n".encode("utf-8", "replace"))
        raise PermissionError(f"sandbox: {event} is not allowed ({detail})")

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


def _not_dumpable():
    """No other process of this uid may read this one's memory, fds or environment through
    /proc or ptrace (the weak sandbox runs the judge and the program as the same user)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass


def _sandbox_main(root, audit, scratch):
    import traceback

    _not_dumpable()

    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    try:
        code = compile(source, "main.py", "exec")
    except SyntaxError as e:
        traceback.print_exception(type(e), e, None)
        sys.exit(1)
    sys.argv = ["main.py"]
    if scratch:  # the folder shared with the other process: the program's working directory
        os.chdir(scratch)
    if audit:
        _sandbox_guard([root, scratch] if scratch else [root])
    g = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)


_sandbox_main(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
