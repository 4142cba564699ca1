"""The worker's config: every setting the host gives a sandbox's supervisor, declared once.

The host builds it (a provider's ``worker_config``, what its launch knows, then the sandbox's
own settings: ``host/core.py``) and sends it as JSON in the program the sandbox runs; the
supervisor reads it back with ``WorkerConfig.from_wire`` before it does anything else, and the
code's processes get it from the supervisor. It is the list of protections a sandbox was
promised: a field that is misspelt, missing or of the wrong type is an error on either side
(``record.py``), never a protection quietly not applied.

Defaults are for the host's construction; on the wire every field is present (``to_wire``
writes them all), and one missing there is an error too.
"""

from __future__ import annotations

from .record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Literal, Optional, Tuple, Union


class Cover(Record):
    """A folder the supervisor covers with a tmpfs of the sandbox's own (``mounts.cover``)."""

    dir: str
    mode: str
    """The tmpfs's mode, in octal (``"1777"``)."""
    keep: Tuple[str, ...] = ()
    """Paths under it put back where they were (bound from descriptors opened first)."""
    limit: Optional[int] = None
    """The tmpfs's size in bytes (None: the kernel's default)."""


class Hidden(Record):
    """What the supervisor hides from the code (``mounts.hide``): the host's daemons'
    folders under an empty tmpfs, their sockets under /dev/null."""

    dirs: Tuple[str, ...] = ()
    files: Tuple[str, ...] = ()


class Clean(Record):
    """What each one-shot execution's process empties before it takes code."""

    dirs: Tuple[str, ...] = ()
    ipc: bool = False
    """Remove the SysV IPC objects the last execution left."""
    keep: Tuple[str, ...] = ()
    """Mount points in ``dirs`` and the folders on the way (the supervisor finds them)."""


class Users(Record):
    """A container's users (uid, gid): the supervisor's own, and the code's."""

    supervisor: Tuple[int, int]
    code: Tuple[int, int]


class Landlock(Record):
    """What the code may open where there are no namespaces (``landlock.py``): every other
    path of the host is refused, whatever its rights say."""

    read: Tuple[str, ...] = ()
    """Folders and files read (and run) beneath: the system's, the interpreter's, ``read_dirs``."""
    write: Tuple[str, ...] = ()
    """Folders with every right beneath: the scratch folder."""
    devices: Tuple[str, ...] = ()
    """Device files read and written: ``/dev/null``, ``/dev/urandom``..."""
    tcp: bool = True
    """Refuse every TCP bind and connect (the seccomp filter refuses the sockets already)."""


class Egress(Record):
    """The way out of a sandbox given an allow-list: the host proxy's folder, as seen inside."""

    folder: str


class WorkspaceSetting(Record):
    """The person's folder, shown to the code at its own path (the host's ``host/cells.py``)."""

    path: str
    protected: Tuple[str, ...] = ()
    """Paths in it, relative, that the code's view shows read-only."""
    cell: int = 1
    """The number of the first execution's view."""
    note: str = ""
    """Why the workspace is shown as it is (a note in the ``ready`` frame)."""
    bind: Optional[str] = None
    """A root host's anchor of the view, bound here on the workspace's path."""
    keep: Tuple[str, ...] = ()
    """(With ``bind``.) What this Python runs from inside the workspace, bound into the anchor
    before the first view covers it."""
    staging: Optional[str] = None
    """(Without ``bind``.) The staging folder, relative to ``path``: the sandbox's mounter
    mounts each execution's view from there."""
    bound: bool = False
    """The launch bound the view already (bubblewrap, a root host's container)."""


class WorkerConfig(Record):
    """What a sandbox's supervisor is told: where the code runs, its limits, and each
    protection to apply before any code runs (``sandbox_setup.py``)."""

    # -- where and how the code runs
    cwd: str
    """The code's working directory, as the sandbox sees it."""
    fork_per_exec: bool = False
    """One-shot: each execution runs in a fresh code process, nothing kept between them."""
    preload: Optional[str] = None
    """(One-shot.) Code a template process runs once; each execution's process forks from it."""
    shell: Literal["ipython", "python"] = "python"
    """What runs a session's cells: IPython where the sandbox's Python has it."""
    network: Literal["none", "allow", "proxy"] = "none"
    """What the code is told of its network (``proxy``: an allow-list, through the proxy)."""
    kernel_version: str = ""
    """The host's ipykernel version, which the code's IPython says it runs under."""
    max_rich_bytes: int = (16 << 20) - 4096
    """The largest display a code process sends (the host's frame bound, less room)."""
    same_python: bool = False
    """(Read by the host alone.) The sandbox runs the host's interpreter: the worker's modules
    go compiled."""

    # -- limits
    memory_limit_bytes: Optional[int] = None
    """An address-space limit (RLIMIT_AS) each code process sets on itself, where no cgroup
    caps the sandbox's memory."""
    memory_limit_mb: Optional[int] = None
    """The sandbox's memory cap, for the code's messages."""
    file_size_limit: Optional[int] = None
    """RLIMIT_FSIZE of the code's processes, where a watcher bounds the scratch folder (0: it
    holds more than its quota: no file can be written until the code removes some)."""
    nproc: Optional[int] = None
    """RLIMIT_NPROC of the code's processes, where no cgroup bounds their number."""
    fork_headroom: Tuple[int, int] = (32 << 20, 20)
    """A fork needs this many bytes free under the memory cap, or 1/N of the cap if more."""
    memory_cgroup: bool = False
    """The host made a memory cgroup for the sandbox (a note says so if it cannot be read)."""
    oom_counter: Union[bool, str] = False
    """Where the sandbox's OOM-kill count is read: True, its cgroup's file at the root of
    /sys/fs/cgroup (a container); "self", the supervisor's own cgroup's, found from
    /proc/self/cgroup (the subprocess provider); a path (bubblewrap binds the file in)."""
    memory_view: Optional[Literal["meminfo"]] = None
    """The supervisor reads the sandbox's memory itself, from /proc/meminfo (gVisor)."""

    # -- namespaces, mounts and files
    ns_root: bool = False
    """Take uid 0 of the user namespace first (a root host maps the host's root to uid 1)."""
    nested_userns: Optional[str] = None
    """Move into a new user namespace with this uid/gid map (``"0 0 1"``) before any code."""
    own_userns: bool = False
    """The sandbox has a user namespace of its own: its per-user counters are lowered."""
    own_ipc: bool = False
    """The sandbox has its own IPC and mount namespaces: SysV IPC is bounded, /dev/shm private."""
    own_cgroupns: bool = False
    """Start a cgroup namespace rooted at the sandbox's cgroups once it is in them."""
    proc_sys: Optional[Literal["remount", "check"]] = None
    """Make /proc/sys read-only (``remount``) or check that it is (``check``); else fail."""
    cover: Tuple[Cover, ...] = ()
    binds: Tuple[Tuple[str, str], ...] = ()
    """(source, target): folders a root host mounted for this sandbox, bound where the code
    sees them."""
    read_only: Tuple[str, ...] = ()
    """Folders of the host's made read-only in the sandbox's mount namespace."""
    mqueue: Optional[str] = None
    """Where to mount the sandbox's POSIX message queues (to list and empty them)."""
    hide: Optional[Hidden] = None
    cgroup_gate: Optional[int] = None
    """A descriptor the host answers on once the sandbox's processes are in their cgroups."""
    workspace: Optional[WorkspaceSetting] = None
    egress: Optional[Egress] = None
    landlock: Optional[Landlock] = None
    broker: Optional[str] = None
    """(No network namespace, an allow-list.) The code processes' own seccomp filter, hex:
    every connect() is made by the supervisor, to the relay (``broker.py``)."""
    """Restrict the supervisor, then each code process once more, with Landlock (no-namespace
    sandboxes); the sandbox does not start where that fails."""

    # -- the processes
    users: Optional[Users] = None
    seccomp: Optional[str] = None
    """The seccomp filter (a compiled BPF program, hex), loaded last."""
    clean: Optional[Clean] = None
