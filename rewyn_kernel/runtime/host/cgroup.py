"""One memory cap for a whole local sandbox: a memory cgroup per worker.

``RLIMIT_AS`` bounds one process; a sandbox's code can start many. A worker of the subprocess
or bubblewrap provider therefore starts inside a memory cgroup of its own, so its processes
together stay under ``memory_limit_mb`` and the kernel's OOM killer ends whichever of them
grows past it (the result says ``ending="oom"``: the worker's supervisor compares the cgroup's
OOM-kill counter before and after each execution).

Where a cgroup comes from:

- cgroup v2 (``/sys/fs/cgroup`` is cgroup2): a child of the nearest ancestor of this process's
  cgroup that is writable and has the memory controller for its children (a delegated subtree,
  as systemd gives each user; the root one, as root). v2 keeps processes out of inner cgroups,
  so the worker's cgroup is a sibling of this process's, never a child.
- cgroup v1 (a ``memory`` hierarchy, as on these machines): a child of this process's own memory
  cgroup, when it is writable (as root).

Where neither can be had, the providers keep ``RLIMIT_AS`` and the isolation report says "per
process". Nothing here claims a cap it did not write.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "rewyn-"
"""Every cgroup made here is named ``rewyn-<host pid>-<worker name>``: a sweep removes those
whose host process is gone."""


@dataclass(frozen=True)
class CgroupSupport:
    """Where this process can make memory cgroups, found once."""

    parent: Path | None
    version: int
    detail: str


@dataclass(frozen=True)
class MemoryCgroup:
    """One worker's memory cgroup (made by ``make``; ``remove`` it once the worker is gone)."""

    path: Path
    version: int
    limit_bytes: int

    @property
    def procs(self) -> Path:
        """Write a pid here to move that process (and what it starts after) into the cgroup."""
        return self.path / "cgroup.procs"

    @property
    def events(self) -> Path:
        """The file holding the cgroup's ``oom_kill`` counter."""
        return self.path / ("memory.events" if self.version == 2 else "memory.oom_control")

    def oom_kills(self) -> int | None:
        return read_oom_kills(self.events)

    def remove(self, wait: float = 2.0) -> bool:
        """Remove the cgroup once its processes are gone (they may take a moment to exit after
        a kill). True when it is gone."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)


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


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``{"": v2 path, "memory": v1 memory path}``."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and controllers == "":
                found[""] = path
            elif "memory" in controllers.split(","):
                found["memory"] = path
    return found


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK) and os.access(path / "cgroup.procs", os.W_OK)


@functools.cache
def cgroup_support() -> CgroupSupport:
    """Where memory cgroups can be made here, or why not (tried once per process)."""
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
            if "memory" in controls and _writable(parent):
                return CgroupSupport(parent, 2, f"cgroup v2, under {parent}")
        return CgroupSupport(
            None,
            2,
            "cgroup v2, but no writable cgroup with the memory controller for its children "
            "(a delegated subtree, e.g. under systemd's user@UID.service)",
        )
    memory = ROOT / "memory"
    if "memory" in own and (memory / "memory.limit_in_bytes").is_file():
        here = memory / own["memory"].lstrip("/")
        if _writable(here):
            return CgroupSupport(here, 1, f"cgroup v1, under {here}")
        return CgroupSupport(None, 1, f"cgroup v1, but {here} is not writable (run as root)")
    return CgroupSupport(None, 0, "no memory cgroup hierarchy here")


def make(name: str, limit_bytes: int) -> MemoryCgroup | None:
    """A fresh memory cgroup capped at ``limit_bytes`` (swap included where the kernel counts
    it), or None where none can be made."""
    support = cgroup_support()
    if support.parent is None:
        return None
    sweep(support.parent)
    path = support.parent / f"{PREFIX}{os.getpid()}-{name}"
    try:
        path.mkdir()
    except OSError:
        return None
    group = MemoryCgroup(path, support.version, limit_bytes)
    try:
        if support.version == 2:
            (path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # (no swap accounting: nothing to cap)
                (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # (only with swap accounting on)
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    except OSError:
        group.remove(0)
        return None
    return group


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


def joining(group: MemoryCgroup, argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first moves itself into ``group``: everything the launch
    starts is then inside it from its first instruction (Python offers no race-free way to
    start a child in a cgroup, and a preexec function is unsafe with threads)."""
    script = 'echo $$ > "$0" && exec "$@"'
    return ["/bin/sh", "-c", script, str(group.procs), *argv]


def for_worker(name: str, limit_mb: int | None) -> MemoryCgroup | None:
    """A memory cgroup for the worker ``name`` under a cap of ``limit_mb``, where one can be
    had (None: no cap asked, or no cgroup here)."""
    if limit_mb is None or not capped(limit_mb):
        return None
    return make(name, limit_mb * 1024 * 1024)


def capped(limit_mb: int | None) -> bool:
    """Whether a worker under ``limit_mb`` gets a memory cgroup here."""
    return limit_mb is not None and cgroup_support().parent is not None


def memory_text(limit_mb: int | None) -> str | None:
    """How a local sandbox's memory cap is enforced here, for ``Isolation.memory``."""
    if limit_mb is None:
        return None
    support = cgroup_support()
    if support.parent is None:
        return f"RLIMIT_AS {limit_mb} MiB per process (no memory cgroup: {support.detail})"
    return (
        f"{limit_mb} MiB for all of a worker's processes together (a cgroup v{support.version} "
        f"memory cgroup), and RLIMIT_AS {limit_mb} MiB per process"
    )
