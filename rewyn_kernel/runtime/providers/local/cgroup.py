"""Bounds for a whole local sandbox: a memory cgroup per worker, and its tasks.

``RLIMIT_AS`` bounds one process; a sandbox's code can start many. A worker of the subprocess
or bubblewrap provider therefore runs its code inside cgroups of its own (the host moves the
worker's processes in while they start, and its supervisor forks no code until they are in:
``move_tree``), so the code's processes together stay under ``memory_limit_mb`` (the kernel's
OOM killer ends whichever of them grows past it; the result says ``ending="oom"``: the worker's
supervisor compares the cgroup's OOM-kill counter before and after each execution) and under
``pids_limit`` tasks (threads count: a fork bomb meets EAGAIN, as under docker's
``--pids-limit``): RLIMIT_NPROC in the sandbox's own user namespace where the kernel counts it
per namespace (5.14+), else a pids cgroup.

Socket buffers count too. cgroup v2 charges them to the memory cgroup with the rest. cgroup v1
charges TCP buffers only once ``memory.kmem.tcp.limit_in_bytes`` is written for the cgroup, and
then to a counter of their own: so under v1 an eighth of the cap is that TCP limit and the rest
is ``memory.limit_in_bytes`` (without it, code filling loopback connections pinned 1 GiB past a
128 MiB cap, and then the host's whole ``tcp_mem``: every process's TCP stalled). That limit
refuses no connection its first segment, though: the kernel forces the charge of the first
buffer queued on each side of a connection, past any limit, so that it always makes progress
(under v2 the next allocation then meets the cap, and the OOM killer). 10,000 loopback
connections, one send each, pinned 451 MiB under a 128 MiB cap that way. So under v1 the host
watches what the sandbox holds, memory and TCP buffers together (``held``, every ``TCP_WATCH``
seconds, ``PopenWorker``), and kills the sandbox once it comes within 1/``WATCH_SLACK`` of its
cap: the result says ``ending="oom"`` (the same connections stopped at 124 to 126 MiB of 128).

Where a cgroup comes from:

- cgroup v2 (``/sys/fs/cgroup`` is cgroup2): a child of the nearest ancestor of this process's
  cgroup that is writable and has the controller for its children (a delegated subtree, as
  systemd gives each user; the root one, as root). v2 keeps processes out of inner cgroups,
  so the worker's cgroup is a sibling of this process's, never a child.
- cgroup v1 (a ``memory`` and a ``pids`` hierarchy, as on these machines): a child of this
  process's own cgroup in each, when it is writable (as root).

What the supervisor allocated before it was moved stays charged where it was (cgroup v1 does
not move charges; v2 never does): the cap is the code's, not the interpreter's start-up.

Where none can be had, the providers keep ``RLIMIT_AS`` (and ``RLIMIT_NPROC``) and the isolation
report says so. Nothing here claims a bound it did not write.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "rewyn-"
"""Every cgroup made here is named ``rewyn-<host pid>-<worker name>``: a sweep removes those
whose host process is gone."""


@dataclass(frozen=True)
class CgroupSupport:
    """Where this process can make cgroups of one controller, found once."""

    parent: Path | None
    version: int
    detail: str


TCP_SHARE = 8
"""Under cgroup v1, 1/TCP_SHARE of a memory cap is the limit of its TCP buffers (see above)."""
TCP_WATCH = 0.01
"""Seconds between two looks at what a cgroup v1 sandbox holds, TCP buffers included (``held``):
code that opens connections as fast as it can pinned about 150 MiB a second on these machines,
1.5 MiB a look."""
WATCH_SLACK = 32
"""The watcher stops a cgroup v1 sandbox once it holds more than its cap less 1/WATCH_SLACK of
it (4 MiB of 128): what more it pins before the look after is still under the cap."""


def watch_threshold(limit_bytes: int) -> int:
    """What a watched sandbox may hold (``WorkerCgroup.held``) before the host kills it."""
    return limit_bytes - limit_bytes // WATCH_SLACK


@dataclass(frozen=True)
class WorkerCgroup:
    """One worker's cgroups (made by ``make``; ``remove`` them once the worker is gone): the
    memory one and the pids one (the same directory under cgroup v2)."""

    memory: Path | None
    pids: Path | None
    version: int
    limit_bytes: int | None

    @property
    def directories(self) -> list[Path]:
        return list(dict.fromkeys(path for path in (self.memory, self.pids) if path is not None))

    @property
    def members(self) -> list[tuple[Path, str, str]]:
        """For each of the cgroups: its ``cgroup.procs``, its hierarchy's key in
        ``/proc/PID/cgroup`` (a v1 controller, "" in v2) and its path as named there."""
        found = []
        for controller, path in (("memory", self.memory), ("pids", self.pids)):
            if path is None:
                continue
            key, top = ("", ROOT) if self.version == 2 else (controller, ROOT / controller)
            entry = (path / "cgroup.procs", key, "/" + str(path.relative_to(top)))
            if entry not in found:
                found.append(entry)
        return found

    @property
    def events(self) -> Path | None:
        """The file holding the memory cgroup's ``oom_kill`` counter."""
        if self.memory is None:
            return None
        return self.memory / ("memory.events" if self.version == 2 else "memory.oom_control")

    def oom_kills(self) -> int | None:
        return read_oom_kills(self.events) if self.events is not None else None

    def memory_usage(self) -> tuple[int, int | None]:
        """What its processes use now and its cap (see ``memory_usage``); OSError without."""
        if self.memory is None:
            raise OSError("no memory cgroup")
        return memory_usage(self.memory, self.version)

    @property
    def watched(self) -> bool:
        """Whether the host must watch this cgroup's TCP buffers (``held``): cgroup v1, where
        the kernel forces some of their charges past the limit and kills nothing for it."""
        return self.version == 1 and self.memory is not None and self.limit_bytes is not None

    @property
    def counters(self) -> list[Path]:
        """The files whose sum is what the sandbox's processes hold now: their memory and,
        under cgroup v1, their TCP buffers (counted apart there, the charges the kernel forced
        past their limit included). Cheap to read (``read_counter``), never less than
        ``held``."""
        if self.memory is None:
            return []
        if self.version == 2:
            return [self.memory / "memory.current"]
        return [
            self.memory / "memory.usage_in_bytes",
            self.memory / "memory.kmem.tcp.usage_in_bytes",
        ]

    def held(self) -> int:
        """What the sandbox's processes hold now (``counters``), less the file cache the kernel
        can drop at once (as ``memory_usage``); OSError when unreadable."""
        if self.memory is None:
            raise OSError("no memory cgroup")
        used, _ = memory_usage(self.memory, self.version, exact=True)
        return used + sum(read_counter(path) for path in self.counters[1:])

    def remove(self, wait: float = 2.0) -> bool:
        """Remove the cgroups once their processes are gone (they may take a moment to exit
        after a kill). True when they are gone."""
        deadline = time.monotonic() + wait
        left = self.directories
        while left:
            for path in list(left):
                try:
                    path.rmdir()
                    left.remove(path)
                except FileNotFoundError:
                    left.remove(path)
                except OSError:
                    pass
            if left:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)
        return True


LEAST_CAP_WITHOUT_STAT = 64 << 20
"""Below this cap the file cache is always discounted: half of it is less than the least room a
fork needs (32 MiB, host/channel.py's FORK_HEADROOM_BYTES), so a decision could turn on it."""


def memory_usage(path: Path, version: int, *, exact: bool = False) -> tuple[int, int | None]:
    """The memory a cgroup's processes use, less the file cache the kernel can drop at once
    (inactive file pages, as ``docker stats`` counts) once it is past half the cap (below, no
    decision on it can change: it is read beside each execution, and ``memory.stat`` is long;
    ``exact``: always), and its cap (None: no cap). Raise OSError when it cannot be read."""
    names = (
        ("memory.current", "memory.max")
        if version == 2
        else (
            "memory.usage_in_bytes",
            "memory.limit_in_bytes",
        )
    )
    used = int((path / names[0]).read_text().strip())
    text = (path / names[1]).read_text().strip()
    cap = None if text == "max" or int(text) >= 1 << 60 else int(text)
    if not exact and (cap is None or (used <= cap // 2 and cap >= LEAST_CAP_WITHOUT_STAT)):
        return used, cap
    inactive = "inactive_file" if version == 2 else "total_inactive_file"
    for line in (path / "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == inactive and value.isdigit():
            used = max(0, used - int(value))
    return used, cap


def read_counter(counter: Path | int) -> int:
    """The number in a cgroup file, by path or by a descriptor open on it (read from its
    start); OSError or ValueError when it cannot be read."""
    if isinstance(counter, int):
        return int(os.pread(counter, 64, 0))
    return int(counter.read_text())


def read_oom_kills(path: Path) -> int | None:
    """The ``oom_kill`` count in a cgroup's ``memory.events`` (v2) or ``memory.oom_control``
    (v1), or None where the kernel has no such line."""
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


def cgroups_of(pid: int | str = "self") -> dict[str, str]:
    """A process's cgroup per hierarchy, as ``/proc/PID/cgroup`` names it: ``{"": v2 path,
    "memory": v1 path, "pids": ...}``. Raise OSError where it cannot be read
    (FileNotFoundError or ProcessLookupError: the process is gone)."""
    with open(f"/proc/{pid}/cgroup") as handle:
        text = handle.read()
    found: dict[str, str] = {}
    for line in text.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            found[""] = path
        for name in controllers.split(","):
            if name:
                found[name] = path
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy (``cgroups_of``); none where it cannot be read."""
    try:
        return cgroups_of()
    except OSError:
        return {}


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK) and os.access(path / "cgroup.procs", os.W_OK)


@functools.cache
def cgroup_support(controller: str = "memory") -> CgroupSupport:
    """Where cgroups of ``controller`` ("memory" or "pids") can be made here, or why not
    (tried once per process)."""
    own = _own_cgroups()
    if (ROOT / "cgroup.controllers").is_file() and "" in own:  # the unified hierarchy
        here = ROOT / own[""].lstrip("/")
        for parent in [here.parent, *here.parent.parents]:
            if not str(parent).startswith(str(ROOT)):
                break
            try:
                controls = (parent / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if controller in controls and _writable(parent):
                return CgroupSupport(parent, 2, f"cgroup v2, under {parent}")
        return CgroupSupport(
            None,
            2,
            f"cgroup v2, but no writable cgroup with the {controller} controller for its "
            "children (a delegated subtree, e.g. under systemd's user@UID.service)",
        )
    hierarchy = ROOT / controller
    probe = "memory.limit_in_bytes" if controller == "memory" else "pids.max"
    if controller in own and ((hierarchy / probe).is_file() or (hierarchy / "tasks").is_file()):
        here = hierarchy / own[controller].lstrip("/")
        if _writable(here):
            return CgroupSupport(here, 1, f"cgroup v1, under {here}")
        return CgroupSupport(None, 1, f"cgroup v1, but {here} is not writable (run as root)")
    return CgroupSupport(None, 0, f"no {controller} cgroup hierarchy here")


def make(name: str, limit_bytes: int | None, pids: int | None) -> WorkerCgroup | None:
    """Fresh cgroups for one worker: memory capped at ``limit_bytes`` (swap included where the
    kernel counts it; TCP buffers included, see above), tasks at ``pids``; None where neither
    can be made (or neither was asked for)."""
    memory_dir = pids_dir = None
    version = 0
    made: list[Path] = []
    try:
        if limit_bytes is not None and (support := cgroup_support("memory")).parent is not None:
            version = support.version
            memory_dir = _fresh(support.parent, name, made)
            if memory_dir is not None:
                _cap_memory(memory_dir, support.version, limit_bytes)
        if pids is not None and (support := cgroup_support("pids")).parent is not None:
            version = version or support.version
            if (
                support.version == 2
                and memory_dir is not None
                and memory_dir.parent == support.parent
            ):
                pids_dir = memory_dir
            else:
                pids_dir = _fresh(support.parent, name, made)
            if pids_dir is not None:
                (pids_dir / "pids.max").write_text(str(pids))
    except OSError:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
        return None
    if memory_dir is None and pids_dir is None:
        return None
    return WorkerCgroup(memory_dir, pids_dir, version, limit_bytes if memory_dir else None)


def _fresh(parent: Path, name: str, made: list[Path]) -> Path | None:
    sweep(parent)
    path = parent / f"{PREFIX}{os.getpid()}-{name}"
    try:
        path.mkdir()
    except OSError:
        return None
    made.append(path)
    return path


def _cap_memory(path: Path, version: int, limit_bytes: int) -> None:
    if version == 2:
        (path / "memory.max").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):  # (no swap accounting: nothing to cap)
            (path / "memory.swap.max").write_text("0")
        return
    tcp = tcp_share(limit_bytes)
    (path / "memory.limit_in_bytes").write_text(str(limit_bytes - tcp))
    with contextlib.suppress(OSError):  # (only with swap accounting on)
        (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes - tcp))
    # Before any process joins: sockets made before this is set are never charged.
    (path / "memory.kmem.tcp.limit_in_bytes").write_text(str(tcp))


def tcp_share(limit_bytes: int) -> int:
    """The part of a cgroup v1 memory cap that is the TCP buffers' limit (page-aligned)."""
    return (limit_bytes // TCP_SHARE) // 4096 * 4096


_swept: set[Path] = set()


def sweep(parent: Path) -> None:
    """Remove the empty cgroups left under ``parent`` by host processes that are gone (once
    per process and parent)."""
    if parent in _swept:
        return
    _swept.add(parent)
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            pid = entry.name[len(PREFIX) :].partition("-")[0]
            if (
                entry.name.startswith(PREFIX)
                and pid.isdigit()
                and not Path(f"/proc/{pid}").exists()
            ):
                with contextlib.suppress(OSError):
                    entry.rmdir()


MOVE_PASSES = 100
"""At most this many passes over a starting sandbox's processes (``move_tree``): a start makes a
handful of processes, and each pass moves every one it finds outside."""


def move_tree(group: WorkerCgroup, root: int, alive: Callable[[], bool]) -> str | None:
    """Move the process ``root`` and everything it started into ``group``'s cgroups, pass after
    pass, until a pass finds none of them outside; None then, else why not.

    A launch does not wait in this: joining a cgroup costs the first write an RCU grace period
    (10 to 24 ms here; a write right after another costs 0.15 ms), so the worker starts while a
    thread of its own calls this, and its supervisor forks no code before that thread says it
    is done (``PopenWorker``). Why one pass with no move is enough: a process started after that
    pass read the process table has a parent that was inside then (moved, or started by one
    that was), and a fork is never half-way through a move (the kernel holds the fork side of
    the same lock), so it is inside too.
    """
    members = group.members
    for _ in range(MOVE_PASSES):
        if not alive():
            return "the sandbox ended while it started"
        moved = False
        for pid in descendants(root):
            try:
                now = cgroups_of(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # (it ended meanwhile)
            except OSError as exc:  # (nothing is assumed inside)
                return f"the cgroups of process {pid} could not be read: {exc}"
            for procs, key, path in members:
                if now.get(key) == path:
                    continue
                try:
                    _write(procs, pid)
                except ProcessLookupError:
                    continue  # (it ended meanwhile)
                except OSError as exc:
                    return f"process {pid} could not be moved into {procs.parent}: {exc}"
                moved = True
        if not moved:
            return None
    return f"its processes were still outside their cgroups after {MOVE_PASSES} passes"


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it, from one read of the process table (this
    kernel may have no ``/proc/PID/task/TID/children``; zombies are left out: they cannot be
    moved, and run nothing)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return [root]
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            state, parent = stat[stat.rindex(b")") + 2 :].split(None, 2)[:2]
        except (OSError, ValueError):
            continue
        if state not in (b"Z", b"X"):
            children.setdefault(int(parent), []).append(int(entry))
    found, queue = [root], [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def _write(procs: Path, pid: int) -> None:
    fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def for_worker(name: str, limit_mb: int | None, pids: int | None) -> WorkerCgroup | None:
    """Cgroups for the worker ``name`` under a cap of ``limit_mb`` and ``pids`` tasks, where
    they can be had (None: nothing asked, or no cgroup here)."""
    limit = limit_mb * 1024 * 1024 if limit_mb is not None and capped(limit_mb) else None
    tasks = pids if pids is not None and pids_capped(pids) else None
    if limit is None and tasks is None:
        return None
    return make(name, limit, tasks)


def capped(limit_mb: int | None) -> bool:
    """Whether a worker under ``limit_mb`` gets a memory cgroup here."""
    return limit_mb is not None and cgroup_support("memory").parent is not None


@functools.cache
def nproc_counts_per_namespace() -> bool:
    """Whether RLIMIT_NPROC counts a uid's tasks per user namespace (Linux 5.14 and newer:
    "ucounts"). It then bounds a sandbox's tasks as a pids cgroup would, since each sandbox's
    code runs in a user namespace of its own, at no cost: joining a cgroup costs an RCU grace
    period (10 to 24 ms on these machines; a launch overlaps it with the sandbox's start).
    Before 5.14 it counted the uid's tasks across the host (the person's desktop included)."""
    release = os.uname().release.split("-")[0].split(".")
    try:
        major, minor = int(release[0]), int(release[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (5, 14)


def pids_capped(pids: int | None) -> bool:
    """Whether a worker under ``pids`` gets a pids cgroup here (where RLIMIT_NPROC cannot do)."""
    return (
        pids is not None
        and not nproc_counts_per_namespace()
        and cgroup_support("pids").parent is not None
    )


def memory_text(limit_mb: int | None) -> str | None:
    """How a local sandbox's memory cap is enforced here, for ``Isolation.memory``."""
    if limit_mb is None:
        return None
    support = cgroup_support("memory")
    if support.parent is None:
        return f"RLIMIT_AS {limit_mb} MiB per process (no memory cgroup: {support.detail})"
    sockets = (
        "socket buffers included"
        if support.version == 2
        else f"{tcp_share(limit_mb << 20) >> 20} MiB of it for TCP buffers"
    )
    return (
        f"{limit_mb} MiB for all of a worker's processes together, {sockets} (a cgroup "
        f"v{support.version} memory cgroup), and RLIMIT_AS {limit_mb} MiB per process"
    )


def pids_text(pids: int | None) -> str | None:
    """How a local sandbox's task limit is enforced here, for ``Isolation.pids``."""
    if pids is None:
        return None
    if nproc_counts_per_namespace():
        return (
            f"{pids} tasks (threads included) for the code's user in the sandbox's own user "
            "namespace (RLIMIT_NPROC, counted per namespace)"
        )
    support = cgroup_support("pids")
    if support.parent is None:
        return f"RLIMIT_NPROC {pids} for the code's user (no pids cgroup: {support.detail})"
    return (
        f"{pids} tasks (threads included) for all of a worker's processes (a cgroup "
        f"v{support.version} pids cgroup)"
    )


def container_tcp_promised() -> bool:
    """Whether a container's TCP buffers can be bounded here: cgroup v1 (v2 counts them with
    the rest, nothing to do) with its memory hierarchy writable by this process (root)."""
    memory = ROOT / "memory"
    return (memory / "memory.kmem.tcp.limit_in_bytes").is_file() and os.access(memory, os.W_OK)


def bound_container_tcp(container_id: str, limit_bytes: int) -> None:
    """Write the TCP buffer limit (``tcp_share`` of ``limit_bytes``) into the cgroup v1 memory
    cgroup of the container ``container_id`` (docker's or podman's, cgroupfs or systemd
    driver), before any code runs in it. Raise OSError when it cannot be found or written."""
    found = container_memory_cgroup(container_id)
    (found / "memory.kmem.tcp.limit_in_bytes").write_text(str(tcp_share(limit_bytes)))


def container_memory_cgroup(container_id: str) -> Path:
    """The memory cgroup (v1) of the container ``container_id`` (docker's or podman's,
    cgroupfs or systemd driver); OSError when it cannot be found."""
    memory = ROOT / "memory"
    names = (
        f"docker/{container_id}",
        f"system.slice/docker-{container_id}.scope",
        f"libpod_parent/libpod-{container_id}",
        f"machine.slice/libpod-{container_id}.scope",
    )
    found = next((memory / name for name in names if (memory / name).is_dir()), None)
    if found is None:
        for parent in (memory, *[path for path in memory.iterdir() if path.is_dir()]):
            matches = [path for path in parent.iterdir() if container_id in path.name]
            if matches:
                found = matches[0]
                break
    if found is None:
        raise OSError(f"no memory cgroup of container {container_id[:12]} under {memory}")
    return found
