"""What each provider stops, and what it does not: the one declared source of these facts.

One ``Row`` per thing a reader asks about (the host's files, the network, other processes...),
one ``Cell`` per provider in it: a ``Verdict`` (stopped, partly, not stopped) and a short plain
phrase, and where the answer depends on the host, the ``Condition`` it holds under and what holds
otherwise. Everything that shows these facts draws them from here:

- each built-in provider names its column (``BubblewrapProvider.stops`` and the others; see
  ``stops_for``), and ``rewyn-kernel doctor`` prints the column of the provider chosen on this
  host, each condition settled (``settle``);
- the README's table and the documentation's (``docs/_ext/rewyn_stops.py``) are rendered from it
  (``markdown``; ``python -m rewyn_kernel.runtime.providers.stops --markdown`` prints it);
- ``tests/test_stops.py`` attacks each provider from inside a real sandbox, row by row where a
  probe is cheap, and checks that what the probe reaches is what the cell says.

This module imports nothing of the providers at import time (they import it); a condition looks
at the host only when it is settled.
"""

from __future__ import annotations

import argparse
import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "COLUMNS",
    "ROWS",
    "Cell",
    "Column",
    "Condition",
    "Row",
    "Settled",
    "Verdict",
    "markdown",
    "row",
    "settle",
    "stops_for",
]


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

    def cells(self) -> tuple[tuple[Row, Cell], ...]:
        """Each row with this column's cell, in the table's order."""
        return tuple((row, row.cell(self)) for row in ROWS)


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
"""The table, row by row. Check a phrase against the code before changing it."""
del S, P, N, C


@dataclass(frozen=True)
class Settled:
    """One row of a column on this host: its condition looked at."""

    row: Row
    verdict: Verdict
    says: str
    condition: Condition | None
    """The condition looked at (None: none applies), and whether it held: ``held``."""
    held: bool


def settle(column: Column) -> tuple[Settled, ...]:
    """``column`` on this host: each cell's condition looked at once."""
    seen: dict[Condition, bool] = {}
    settled = []
    for found, cell in column.cells():
        held = True
        if cell.when is not None:
            held = seen.setdefault(cell.when, cell.when.holds())
        verdict, says = cell.settle(held)
        settled.append(Settled(found, verdict, says, cell.when, held))
    return tuple(settled)


def stops_for(provider: object) -> Column | None:
    """The column of ``provider``: its ``stops`` (every built-in one has it); None for a
    provider that declares none (a package's own)."""
    column = getattr(provider, "stops", None)
    return column if isinstance(column, Column) else None


def markdown_cell(cell: Cell) -> str:
    """A cell as Markdown: the verdict in bold, the phrase, and what holds otherwise."""
    text = f"**{cell.verdict.value}**"
    if cell.when is not None:
        text += f" ({cell.when.value})"
    text += f": {cell.says}"
    if cell.otherwise is not None:
        text += f"; else **{cell.otherwise.value}**: {cell.otherwise_says}"
    return text


def markdown() -> str:
    """The table as Markdown (what README.md holds between its ``stops`` markers)."""
    lines = [
        "| | " + " | ".join(column.value for column in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for each in ROWS:
        cells = " | ".join(markdown_cell(cell) for cell in each.cells)
        lines.append(f"| {each.concern} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rewyn_kernel.runtime.providers.stops",
        description="Print what each provider stops, from the declared source.",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="the whole table, as README.md holds it"
    )
    parser.add_argument(
        "--here",
        choices=[column.name.lower() for column in COLUMNS],
        help="one provider's column, each condition settled on this host",
    )
    args = parser.parse_args(argv)
    if args.here:
        for each in settle(Column[args.here.upper()]):
            print(f"{each.row.concern}: {each.verdict.value}: {each.says}")
        return 0
    print(markdown(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
