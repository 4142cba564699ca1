"""The types of the declared table: verdicts, the host's conditions, cells, columns and rows."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

__all__ = ["COLUMNS", "Cell", "Column", "Condition", "Row", "Verdict", "row"]


class Verdict(enum.Enum):
    """How much of a concern a provider stops."""

    STOPPED = "stopped"
    PARTLY = "partly"
    NOT_STOPPED = "not stopped"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    Verdict.STOPPED: "the code cannot do it; a test tries, where a probe is cheap",
    Verdict.PARTLY: "some of it is stopped; the phrase says which part is not",
    Verdict.NOT_STOPPED: "nothing in the provider stands in the way",
}


class Condition(enum.Enum):
    """A fact of the host that a cell's verdict depends on (its value: how the table says it)."""

    ROOT = "as root"
    USER_NAMESPACES = "with user namespaces"
    LANDLOCK_SCOPES = "Landlock ABI 6+"
    MEMORY_CGROUP = "with a memory cgroup"
    PIDS_CGROUP = "with a pids cgroup"
    TASKS_PER_SANDBOX = "Linux 5.14+ or a pids cgroup"
    SECCOMP = "with the seccomp filter"
    BWRAP_CAPS = "bwrap not setuid"

    @property
    def explained(self) -> str:
        return _EXPLAINED[self]

    def holds(self) -> bool:
        """Whether it holds on this host (probed once per process by the provider modules)."""
        from rewyn_kernel.runtime.providers.local import cgroup, seccomp

        if self is Condition.ROOT:
            return os.geteuid() == 0
        if self is Condition.USER_NAMESPACES:
            from rewyn_kernel.runtime.providers.subprocess import probe_namespaces

            return bool(probe_namespaces().prefix)
        if self is Condition.LANDLOCK_SCOPES:
            from rewyn_kernel.runtime.providers.landlock import probe_landlock

            return probe_landlock().abi >= 6
        if self is Condition.MEMORY_CGROUP:
            return cgroup.cgroup_support("memory").parent is not None
        if self is Condition.PIDS_CGROUP:
            return cgroup.cgroup_support("pids").parent is not None
        if self is Condition.TASKS_PER_SANDBOX:
            counted = cgroup.nproc_counts_per_namespace()
            return counted or cgroup.cgroup_support("pids").parent is not None
        if self is Condition.SECCOMP:
            return seccomp.build().program is not None
        from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap

        return probe_bubblewrap().caps


_EXPLAINED = {
    Condition.ROOT: "the host process runs as root (CI, a root JupyterHub, a container)",
    Condition.USER_NAMESPACES: "`unshare` can make a user namespace here; without, the "
    "subprocess provider runs the code as a plain process group, and says so",
    Condition.LANDLOCK_SCOPES: "the kernel's Landlock is at ABI 6 or newer (Linux 6.12): "
    "signals and abstract Unix sockets are scoped to the code's own domain",
    Condition.MEMORY_CGROUP: "the host process may make a memory cgroup: as root, or under a "
    "cgroup v2 subtree delegated to the user (systemd gives each user one)",
    Condition.PIDS_CGROUP: "the host process may make a pids cgroup (as root)",
    Condition.TASKS_PER_SANDBOX: "RLIMIT_NPROC counts tasks per user namespace (Linux 5.14 "
    "and newer), or a pids cgroup can be made",
    Condition.SECCOMP: "libseccomp loads (`pyseccomp`); `isolation.seccomp` says whether it did",
    Condition.BWRAP_CAPS: "`bwrap` is not setuid, so the sandbox's supervisor may mount inside "
    "its own user namespace",
}


@dataclass(frozen=True)
class Cell:
    """One provider's answer to one row: ``verdict`` and ``says``, which hold where ``when``
    holds (always, without one); elsewhere ``otherwise`` and ``otherwise_says``."""

    verdict: Verdict
    says: str
    when: Condition | None = None
    otherwise: Verdict | None = None
    otherwise_says: str = ""

    def __post_init__(self) -> None:
        if (self.when is None) != (self.otherwise is None) or (
            (self.otherwise is None) != (not self.otherwise_says)
        ):
            raise ValueError(f"a cell with a condition says what holds otherwise: {self}")
        if any("|" in text or "\n" in text for text in (self.says, self.otherwise_says)):
            raise ValueError(f"a cell's phrase is one line without '|' (a table's cell): {self}")

    def settle(self, here: bool) -> tuple[Verdict, str]:
        """The verdict and phrase where ``when`` holds (``here``) or does not."""
        if self.when is None or here:
            return self.verdict, self.says
        assert self.otherwise is not None
        return self.otherwise, self.otherwise_says


class Column(enum.Enum):
    """A provider's column (its value: the table's heading)."""

    BUBBLEWRAP = "bubblewrap"
    LANDLOCK = "landlock"
    SUBPROCESS = "subprocess"
    RUNC = "container (runc)"
    GVISOR = "container (gVisor)"


COLUMNS = tuple(Column)


@dataclass(frozen=True)
class Row:
    """One concern, and each provider's cell for it (in ``COLUMNS`` order)."""

    key: str
    concern: str
    cells: tuple[Cell, Cell, Cell, Cell, Cell]

    def cell(self, column: Column) -> Cell:
        return self.cells[COLUMNS.index(column)]


def row(
    key: str,
    concern: str,
    *,
    bubblewrap: Cell,
    landlock: Cell,
    subprocess: Cell,
    runc: Cell,
    gvisor: Cell | None = None,
) -> Row:
    """A row, its cells named by provider (``gvisor``: runc's where not given)."""
    return Row(key, concern, (bubblewrap, landlock, subprocess, runc, gvisor or runc))
