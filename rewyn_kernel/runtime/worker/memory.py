"""The sandbox's memory, as the supervisor reads it: OOM kills, and room for a fork."""

from __future__ import annotations

import os
import signal

from .state import State

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Dict, List, Optional, Tuple

    from .config import WorkerConfig


MEMORY_WATCH = 0.01
"""Seconds between looks at the sandbox's memory while code runs beside a checkpoint, where the
supervisor reads it itself (``memory_view``: gVisor's /proc/meminfo)."""


class Memory(State):
    """Where the supervisor reads the sandbox's memory itself (gVisor): the checkpoints
    dropped, oldest first, before code beside them runs short."""

    def watching(self) -> bool:
        """Whether code runs beside a checkpoint where this process watches the memory."""
        if self.config.memory_view != "meminfo":
            return False
        branches = self.branches.values()
        return any(b.paused for b in branches) and any(b.exec_id for b in branches)

    def watch_memory(self) -> None:
        """Drop the oldest checkpoint when the memory comes within a fork's headroom of the
        cap (as the host does where it reads the sandbox's cgroup: a checkpoint must never
        cost the code memory; here, out of memory, gVisor would end the whole sandbox)."""
        seen = memory(self.config)
        if seen is None or seen[1] - seen[0] >= headroom(self.config, seen[1]):
            return
        paused = [b for b in self.branches.values() if b.paused and not b.closing]
        if not paused:
            return
        oldest = min(paused, key=lambda b: b.branch)
        oldest.closing = True
        self.signal_child(oldest, signal.SIGKILL)
        why = "dropped when the sandbox's memory came within %d MiB of its cap of %d MiB" % (
            headroom(self.config, seen[1]) >> 20,
            seen[1] >> 20,
        )
        self.send_host({"t": "gone", "b": oldest.branch, "detail": why}, oldest.branch)


def oom_kills(config: WorkerConfig) -> Optional[int]:
    """The sandbox's memory cgroup's OOM-kill count, or None where it has none of its own.
    ``oom_counter``: True in a container (its cgroup is at the root of what it sees), "self"
    where this process's cgroup path is the host's (the subprocess provider), or the path of
    the counter's file (bubblewrap binds it in)."""
    where = config.oom_counter
    if not where:
        return None
    if where == "self":
        return _count_oom_kills(_OWN_COUNTER[0]) if _OWN_COUNTER else None
    paths = ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    if isinstance(where, str):
        paths = [where]
    for path in paths:
        try:
            with open(path) as handle:
                for line in handle:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == "oom_kill":
                        return int(parts[1])
        except (OSError, ValueError):
            continue
    return None


_OWN_COUNTER: List[int] = []
"""The descriptor of this sandbox's own cgroup's counter (oom_counter "self"), opened before
/sys/fs/cgroup is covered: the code must not reach its cgroup's files, or it could lift its cap."""


def open_own_counter() -> None:
    for path in own_cgroup_counters():
        try:
            _OWN_COUNTER.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            return
        except OSError:
            continue


def _count_oom_kills(fd: int) -> Optional[int]:
    try:
        text = os.pread(fd, 4096, 0).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


def own_cgroup_counters() -> List[str]:
    """Where this process's memory cgroup keeps its OOM-kill count (v2, then v1)."""
    found = []
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if number == "0" and not controllers:
                    found.append("/sys/fs/cgroup%s/memory.events" % path.rstrip("/"))
                elif "memory" in controllers.split(","):
                    found.append("/sys/fs/cgroup/memory%s/memory.oom_control" % path.rstrip("/"))
    except (OSError, ValueError):
        pass
    return found


def memory(config: WorkerConfig) -> Optional[Tuple[int, int]]:
    """(used, cap) in bytes where this process reads the sandbox's memory itself
    (``memory_view``), else None."""
    if config.memory_view != "meminfo":
        return None
    found: Dict[str, int] = {}
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if len(found) != 2:
        return None
    return found["MemTotal"] - found["MemAvailable"], found["MemTotal"]


def headroom(config: WorkerConfig, cap: int) -> int:
    least, share = config.fork_headroom
    return max(least, cap // share)


def memory_short(config: WorkerConfig) -> str:
    """Why a fork would leave too little memory under the cap ('' if it would not)."""
    seen = memory(config)
    if seen is None:
        return ""
    used, cap = seen
    need = headroom(config, cap)
    if cap - used >= need:
        return ""
    return (
        "%d MiB are free under the sandbox's memory cap of %d MiB, and a branch needs %d MiB "
        "to start (free memory in the session, or raise memory_limit_mb)"
        % (max(0, cap - used) >> 20, cap >> 20, need >> 20)
    )
