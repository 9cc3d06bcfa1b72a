"""Runs as root (or as the app's user) between fork and the program: joins the run's cgroups,
enters the namespaces, mounts the tmpfs folders, sets the rlimits, switches to the throw-away uid,
loads the syscall filter, reports the active layers on the status pipe, then execs the sandboxed
interpreter. agents/judge/sandbox.py passes this file's text with `python -I -S -c`, the JSON config and
the status fd as arguments; it is never imported."""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWPID = 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 1024, 2048, 4096, 16384, 1 << 18
MS_RELATIME, ST_RELATIME = 1 << 21, 4096
PR_SET_NO_NEW_PRIVS = 38
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture
AT_FDCWD, OPEN_TREE_CLONE, MOVE_EMPTY_PATH = -100, 1, 4

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
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def mount_tmpfs(path, options):
        check(
            libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()),
            "mount tmpfs on " + path,
        )

    for path in cfg["cgroups"]:  # before anything else: every process it starts is counted
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if cfg["cgroups"]:
        layers.append(
            f"cgroup: the whole run within {cfg['memory_mb']} MiB of memory (memfd and "
            f"tmpfs included) and {cfg['processes']} processes"
        )

    def private_mounts(owner, group):
        """In a new mount namespace: the app's files hidden, small tmpfs over the world-writable
        folders, and the run's folder a private tmpfs owned by `owner` with its files."""
        shared = None
        if cfg["shared"]:  # the host's shared folder, cloned before any mount hides where it is
            shared = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, cfg["shared"].encode(), OPEN_TREE_CLONE)
            if shared < 0:
                check(-1, "clone the shared folder (open_tree, Linux 5.2 or later)")
        files = {}
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                files[name] = f.read()
        for path in cfg["hidden"]:  # the app's checkout, home, environment and task data
            if os.path.isdir(path) and not folder.startswith(path + "/"):
                flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY
                check(
                    libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"size=4k,mode=0555"),
                    "hide " + path,
                )
        if cfg["hidden"]:
            layers.append("hidden: the app's checkout, home, environment and task data")
        keep = [*cfg["visible"], *cfg["world_writable"], folder]
        hide_all_but("/", keep)
        layers.append(
            "private view: only the system's folders and the interpreter's own are visible "
            "(" + ", ".join(cfg["visible"]) + ")"
        )
        for path in cfg["world_writable"]:
            if os.path.isdir(path):
                mount_tmpfs(path, "size=4m,mode=1777")  # TMPDIR points at the folder
        if shared is not None:  # inside the new /tmp: the host's folder, the same for both runs
            os.makedirs(cfg["scratch"], exist_ok=True)
            moved = libc.syscall(
                SYS_MOVE_MOUNT, shared, b"", AT_FDCWD, cfg["scratch"].encode(), MOVE_EMPTY_PATH
            )
            check(0 if moved == 0 else -1, "mount the shared folder")
            os.close(shared)
            os.umask(0)  # what one run writes there, the other may read, change and remove
            layers.append(f"scratch: a folder shared with the other process at {cfg['scratch']}")
        os.makedirs(folder, exist_ok=True)
        mount_tmpfs(folder, f"size={cfg['disk_mb']}m,mode=0700,uid={owner},gid={group}")
        for name, data in files.items():
            path = os.path.join(folder, name)
            with open(path, "wb") as f:
                f.write(data)
            os.chown(path, owner, group)
        layers.append(
            f"mounts: private {cfg['disk_mb']} MiB tmpfs folder; 4 MiB tmpfs over "
            "/tmp, /var/tmp, /dev/shm, /run/lock"
        )

    def hide_all_but(directory, keep):
        """An empty read-only tmpfs over every folder under `directory` that neither is in `keep`
        nor holds a path of it, and /dev/null over every file there: no other project's
        checkout, data or tests can be read, whatever their permissions."""
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if path in keep or os.path.islink(path):
                continue
            if any(k.startswith(path + "/") for k in keep):
                hide_all_but(path, keep)
            elif os.path.isdir(path):
                flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY
                check(
                    libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"size=4k,mode=0555"),
                    "hide " + path,
                )
            elif os.path.isfile(path) and directory != "/":
                check(libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None), "hide " + path)

    def read_only_elsewhere():
        """Every other mount read-only (the weak sandbox runs as the app's user, who may write
        there). The flags the kernel locks in a user namespace are kept as they are."""
        ours = {folder, *cfg["world_writable"], *cfg["hidden"], cfg["scratch"]}
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            points = [line.split()[4] for line in f]
        for point in dict.fromkeys(points):
            point = point.encode().decode("unicode_escape")  # \040 for a space, ...
            if point in ours or point.startswith(("/proc", "/sys", "/dev")):
                continue  # /proc is the run's own; /sys and /dev need root to write
            try:
                have = os.statvfs(point).f_flag
            except OSError:
                continue  # a mount this user cannot reach cannot be written either
            kept = have & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
            kept |= MS_RELATIME if have & ST_RELATIME else 0
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | kept
            check(libc.mount(None, point.encode(), None, flags, None), "read-only " + point)
        layers.append("read-only: every file system but its folder and the tmpfs folders")

    def own_pid_namespace():
        """After unshare(CLONE_NEWPID): pid 1 of the new namespace with its own /proc; this
        launcher waits outside and ends as its child did. When pid 1 ends, the kernel ends every
        process it left."""
        child = os.fork()
        if child:
            os.close(status_fd)
            for fd in cfg["pass_fds"]:  # only the program holds them: its end is EOF
                os.close(fd)
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
        check(
            libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
            "mount /proc",
        )
        layers.append(
            "pid: own PID namespace and /proc (host processes are invisible; "
            "all of it ends with the program)"
        )

    if uid is not None:
        check(libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare network and IPC")
        layers.append("network: empty network namespace")
        layers.append("ipc: private System V IPC namespace (nothing outlives the run)")
        if (
            libc.unshare(CLONE_NEWNS) == 0
            and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
        ):
            private_mounts(uid, uid)
            if libc.unshare(CLONE_NEWPID) == 0:
                own_pid_namespace()
    else:  # as the app's own user: the same layers in a user namespace, or no run at all
        owner, group = os.getuid(), os.getgid()
        check(
            libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC),
            "unshare user, mount, network and IPC namespaces (user namespaces are needed to "
            "run generated code as an ordinary user)",
        )
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{owner} {owner} 1"),
            ("gid_map", f"{group} {group} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        layers.append("network: empty network namespace (user namespace)")
        layers.append("ipc: private System V IPC namespace (user namespace)")
        check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "private mounts")
        private_mounts(owner, group)
        read_only_elsewhere()
        check(libc.unshare(CLONE_NEWPID), "unshare PID")
        own_pid_namespace()
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
        for call in ("socket", "socketpair"):
            for first, last in cfg["seccomp"]["socket_families"]:
                if last is None:  # one comparison per argument and rule: GE, or each number
                    rules.add_rule(sc.ERRNO(97), call, sc.Arg(0, sc.GE, first))
                    continue
                for family in range(first, last + 1):
                    rules.add_rule(sc.ERRNO(97), call, sc.Arg(0, sc.EQ, family))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        layers.append(f"user: throw-away uid {uid}")
    os.chdir(folder)
    if rules is not None:  # last: the launcher itself needed mount, unshare and setuid
        rules.load()
        layers.append("syscall filter: namespaces, mounts, SysV IPC, keys, ptrace, bpf refused")
    os.write(status_fd, json.dumps({"layers": layers}).encode())
except BaseException as e:
    os.write(status_fd, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
    os._exit(125)
os.close(status_fd)
os.execve(cfg["python"], cfg["argv"], cfg["env"])
