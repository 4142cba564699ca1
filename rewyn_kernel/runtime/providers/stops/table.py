"""The table: one row per concern, one cell per provider (see the package's docstring).

Each phrase says what is true of the code today: check it against the provider before changing
it, and ``tests/test_stops.py`` checks the rows a probe can try.
"""

from __future__ import annotations

from rewyn_kernel.runtime.providers.stops.model import Cell, Condition, Row, Verdict, row

__all__ = ["ROWS"]

S, P, N = Verdict.STOPPED, Verdict.PARTLY, Verdict.NOT_STOPPED
C = Condition
# Cells that several providers share (the local ones run the same worker and filter).
_ENV = Cell(S, "only `PATH`, `LANG`, `LC_ALL`, `LC_CTYPE` and `TZ` pass, and what you give")
_NO_FILTER = "no filter loads here: every system call reaches it"
_FILTER = "a seccomp allow-list (no keyrings, io_uring, bpf, mounts, namespaces); the rest reach it"
_MEMORY = Cell(
    S,
    "one cap for all its processes (a memory cgroup)",
    C.MEMORY_CGROUP,
    P,
    "a cap per process (`RLIMIT_AS`)",
)
_NPROC = "`RLIMIT_NPROC` over all of the code's user's tasks"
_DISK = Cell(
    S,
    "a filesystem of that size of its own: writes past it fail",
    C.ROOT,
    P,
    "watched: the code is stopped once past it",
)
_EMPTIED = "`/tmp`, `/dev/shm`, message queues and SysV IPC emptied first"
_DIRECT = "changed directly, no version kept"
_VIEW = "writes published through a view, each replaced version kept"
_SUBREAPER = "a subreaper kills every descendant, unless the code kills it first"

ROWS: tuple[Row, ...] = (
    row(
        "host_files",
        "The host's files (your home, `~/.ssh`, other projects)",
        bubblewrap=Cell(
            S, "not in its view: only `/usr`, the worker's Python and a few files of `/etc`"
        ),
        landlock=Cell(S, "there, but opening them is refused (Landlock)"),
        subprocess=Cell(
            P,
            "the code is uid 65432: it reads and writes what every user may",
            C.ROOT,
            N,
            "read and written with your user's rights",
        ),
        runc=Cell(S, "not mounted: only the scratch folder and the workspace are"),
    ),
    row(
        "environment",
        "Your secrets in the environment (API keys, tokens)",
        bubblewrap=_ENV,
        landlock=_ENV,
        subprocess=_ENV,
        runc=Cell(S, _ENV.says + " (never in argv)"),
    ),
    row(
        "network_none",
        'The network with `network="none"`, the host\'s loopback included',
        bubblewrap=Cell(S, "a network namespace of its own, with only its own loopback"),
        landlock=Cell(S, "no new socket (seccomp) and no TCP (Landlock): no loopback either"),
        subprocess=Cell(
            S, "a network namespace with a downed loopback (without one: no new socket)"
        ),
        runc=Cell(S, "`--network none`"),
    ),
    row(
        "unix_sockets",
        "The host's Unix sockets (Docker's, which is root on the host; D-Bus)",
        bubblewrap=Cell(S, 'not in its view (with `network="allow"`, abstract sockets answer)'),
        landlock=Cell(
            S,
            'with `network="none"` no socket can be made (with `"allow"`, your user\'s '
            "daemons answer)",
        ),
        subprocess=Cell(
            P,
            "`/run` and the known daemon sockets are hidden; any other socket the code's "
            "user can reach answers",
            C.USER_NAMESPACES,
            S,
            'with `network="none"` no socket can be made (seccomp)',
        ),
        runc=Cell(S, "none is mounted"),
    ),
    row(
        "allow_list",
        "Hosts not on an allow-list (`network=[...]`)",
        bubblewrap=Cell(
            S,
            "only the listed hosts answer, through the host's proxy; what the code sends "
            "them is not checked",
        ),
        landlock=Cell(
            S, "every `connect()` is made by the supervisor, to the proxy: only the listed hosts"
        ),
        subprocess=Cell(
            S,
            "only the listed hosts, through the proxy (without namespaces an allow-list is "
            "refused)",
        ),
        runc=Cell(S, "`--network none` and the proxy's socket: only the listed hosts"),
        gvisor=Cell(
            S, "only the listed hosts, where runsc runs with `--host-uds=open` (else none)"
        ),
    ),
    row(
        "other_processes",
        "Your other processes (seeing, signalling, tracing them)",
        bubblewrap=Cell(S, "a PID namespace of its own"),
        landlock=Cell(
            P,
            "listed in `/proc` with their command lines; not signalled, traced or read",
            C.LANDLOCK_SCOPES,
            N,
            "listed, and signalled; not traced or read",
        ),
        subprocess=Cell(
            S,
            "a PID namespace of its own",
            C.USER_NAMESPACES,
            N,
            "the host's process tree: it can signal them",
        ),
        runc=Cell(S, "a PID namespace of its own"),
    ),
    row(
        "kernel",
        "Direct use of the host's kernel (system calls)",
        bubblewrap=Cell(P, _FILTER, C.SECCOMP, N, _NO_FILTER),
        landlock=Cell(P, _FILTER, C.SECCOMP, N, _NO_FILTER),
        subprocess=Cell(P, _FILTER, C.SECCOMP, N, _NO_FILTER),
        runc=Cell(P, "the engine's seccomp profile and ours; the rest reach it"),
        gvisor=Cell(S, "the code talks to gVisor's kernel, which runs in user space"),
    ),
    row(
        "memory",
        "Memory (`memory_limit_mb`)",
        bubblewrap=_MEMORY,
        landlock=_MEMORY,
        subprocess=_MEMORY,
        runc=Cell(S, "the engine's memory cgroup, swap included"),
    ),
    row(
        "tasks",
        "Fork bombs (`pids_limit`)",
        bubblewrap=Cell(S, "its own tasks counted", C.TASKS_PER_SANDBOX, P, _NPROC),
        landlock=Cell(S, "a pids cgroup", C.PIDS_CGROUP, P, _NPROC),
        subprocess=Cell(S, "its own tasks counted", C.TASKS_PER_SANDBOX, P, _NPROC),
        runc=Cell(S, "the engine's `--pids-limit`"),
        gvisor=Cell(S, "the engine's `--pids-limit` (reaching it ends the whole sandbox)"),
    ),
    row(
        "cpu",
        "CPU short of the time limit",
        bubblewrap=Cell(N, "only `timeout` ends it"),
        landlock=Cell(N, "only `timeout` ends it"),
        subprocess=Cell(N, "only `timeout` ends it"),
        runc=Cell(P, "`ContainerProvider(cpus=...)` caps it; no cap by default"),
    ),
    row(
        "disk",
        "Disk in the scratch folder (`disk_limit_mb`)",
        bubblewrap=_DISK,
        landlock=_DISK,
        subprocess=_DISK,
        runc=Cell(
            S,
            'a filesystem of its own, as on the local providers (none with `scratch="volume"`)',
            C.ROOT,
            P,
            'watched, as on the local providers (not with `scratch="volume"`)',
        ),
    ),
    row(
        "tmp",
        "The host's `/tmp` and `/dev/shm`",
        bubblewrap=Cell(S, "its own of each"),
        landlock=Cell(
            P,
            "`/tmp` is refused (its `TMPDIR` is in scratch); `/dev/shm` is the host's, "
            "shared with your programs",
        ),
        subprocess=Cell(S, "its own of each", C.USER_NAMESPACES, N, "the host's, shared"),
        runc=Cell(S, "its own of each"),
    ),
    row(
        "one_shot",
        "What one one-shot execution leaves for the next",
        bubblewrap=Cell(S, _EMPTIED + "; the scratch folder is shared"),
        landlock=Cell(
            P,
            "its `TMPDIR` is emptied first; `/dev/shm` is the host's and keeps what the "
            "last one left",
        ),
        subprocess=Cell(
            S,
            _EMPTIED + "; the scratch folder is shared",
            C.USER_NAMESPACES,
            P,
            "its `TMPDIR` is emptied first; `/dev/shm` is the host's",
        ),
        runc=Cell(S, _EMPTIED + "; the scratch folder is shared"),
    ),
    row(
        "leftovers",
        "Processes that outlive a call, `close()` or the host",
        bubblewrap=Cell(S, "its PID namespace ends with its supervisor"),
        landlock=Cell(
            S,
            "its supervisor, a subreaper the code cannot signal, kills every descendant",
            C.LANDLOCK_SCOPES,
            P,
            _SUBREAPER,
        ),
        subprocess=Cell(
            S, "its PID namespace ends with its supervisor", C.USER_NAMESPACES, P, _SUBREAPER
        ),
        runc=Cell(S, "the named container is removed; a dead host's are swept"),
    ),
    row(
        "workspace",
        "Losing your files in the workspace (a notebook's folder)",
        bubblewrap=Cell(S, _VIEW, C.BWRAP_CAPS, N, _DIRECT),
        landlock=Cell(S, "read-only to the code; its files go in the scratch folder"),
        subprocess=Cell(S, _VIEW, C.USER_NAMESPACES, N, _DIRECT),
        runc=Cell(S, _VIEW + " (docker, podman)", C.ROOT, N, _DIRECT),
        gvisor=Cell(N, _DIRECT + " (gVisor takes no view)"),
    ),
    row(
        "privilege",
        "Root and capabilities on the host",
        bubblewrap=Cell(S, "no capability, no-new-privileges; as root, the code is uid 65432"),
        landlock=Cell(
            P,
            "uid 0 without capabilities: root-only `/proc/kpageflags` is readable",
            C.ROOT,
            S,
            "your user, without capabilities, no-new-privileges",
        ),
        subprocess=Cell(S, "no capability; as root, the code is uid 65432"),
        runc=Cell(S, "no capability, not root, no-new-privileges"),
    ),
)
"""The table, row by row."""
del S, P, N, C
