"""The provider contract: what a backend implements to run sandboxes (imports nothing above it).

A provider starts workers (``launch``), says what it applies (``isolation``, ``check``) and keeps
each sandbox's files (``files``: a folder of this host, ``LocalFiles``, or anywhere else). The
host side (sessions, the channel, events, the pool) builds on these types and never on a
provider's own module; a third-party provider is one package that implements this module and
registers itself under the ``rewyn_kernel.providers`` entry point group (see
``providers/registry.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.worker.config import WorkerConfig

__all__ = [
    "BOOTSTRAP",
    "CheckItem",
    "ExitInfo",
    "SandboxFiles",
    "SandboxProvider",
    "ScratchEntry",
    "ScratchError",
    "WorkerConfig",
    "WorkerProcess",
    "worker_argv",
]

BOOTSTRAP = (
    "import sys,os;sys.path[:]=[p for p in sys.path if os.path.isabs(p)];import struct;"
    "b=sys.stdin.buffer;n,=struct.unpack('>I',b.read(4));"
    "exec(compile(b.read(n),'<rewyn-worker>','exec'))"
)
"""The one line a sandbox runs, under ``python -I`` (isolated: no current directory, user site
or PYTHON* variables on its path): keep only absolute entries on the path before the first
import (so no ``struct.py`` the code left in its working directory is ever imported here), then
read the worker's length-prefixed source from stdin and run it.

The host sends nothing more until the worker says ``ready``, so the buffered read above can
never swallow a frame meant for the worker's own reader.
"""


def worker_argv(python: str) -> list[str]:
    """What a provider runs in its sandbox: ``python`` (3.8+, the standard library alone is
    enough) with ``BOOTSTRAP``; the host then sends the worker's program on its stdin."""
    return [python, "-I", "-c", BOOTSTRAP]


class ScratchError(OSError):
    """A path in the scratch directory that cannot be used: a link, outside it, not a file."""


@dataclass(frozen=True)
class ScratchEntry:
    """One entry of a directory in scratch, as it is (a link is a link, never its target)."""

    name: str
    kind: str
    """'file', 'dir', 'link' or 'other'."""
    size: int


@dataclass(frozen=True)
class ExitInfo:
    """How a worker process ended, as the provider understands it."""

    exit_code: int
    """Shell convention: the process's own code, or 128 + N when signal N killed it."""
    signal: int | None = None
    oom_killed: bool = False
    note: str = ""
    """Anything the provider is unsure of, said in the result's message."""


@dataclass(frozen=True)
class CheckItem:
    """One line of a provider's self-check (``rewyn-kernel doctor``)."""

    name: str
    ok: bool
    detail: str


class WorkerProcess(Protocol):
    """A launched sandbox: Popen-shaped, plus a kill of everything the launch started.

    Called from Session: ``stdin``/``stdout``/``stderr`` are the pipe descriptors the worker
    speaks on; ``kill`` must reach every process of the sandbox (a process group, a PID
    namespace, a named container), tolerate one that is already gone, and reap it.
    """

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> int: ...

    @property
    def stdout(self) -> int: ...

    @property
    def stderr(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None:
        """Return the exit status, or None if still running after ``timeout`` seconds."""
        ...

    def kill(self) -> None: ...

    def exit_info(self) -> ExitInfo:
        """Describe how the process ended; called after it has exited."""
        ...

    def close(self) -> None:
        """Release the pipes; called once the worker is dead and reaped."""
        ...


class SandboxFiles(Protocol):
    """A sandbox's files (its scratch folder: the code's working directory and HOME), as the
    host reaches them. Everything in them is the code's, links included: nothing here follows
    a link the code made, reads more than it is asked to, or trusts a name.

    The provider owns them (``SandboxProvider.files``); the local providers keep them in a
    temporary folder of the host (``providers/local/files.py``). Paths are relative to the
    folder, with ``/`` between parts; ``..`` and absolute paths raise ``ScratchError``.
    """

    @property
    def host_path(self) -> Path | None:
        """Where the files are on this host's disk, or None where they are not (a volume of a
        container engine, a pod's): then nothing of the host reads them but this object."""
        ...

    @property
    def disk(self) -> str | None:
        """What bounds them, as ``Isolation.disk`` says it; None: what ``isolation()`` says."""
        ...

    @property
    def notes(self) -> tuple[str, ...]:
        """What the sandbox's isolation notes add (a limit asked for and not applied)."""
        ...

    def read(self, path: str, limit: int) -> bytes:
        """A regular file's bytes; ScratchError for a link, anything else, or over ``limit``."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write a regular file (its folders made as needed); never through a link."""
        ...

    def list(self, path: str = ".", limit: int | None = None) -> list[ScratchEntry]:
        """The entries of a folder by name, links as links; with ``limit``, at most that many."""
        ...

    def facts(self, *, limit: int, depth: int, hidden_folders: bool) -> dict[str, tuple[int, int]]:
        """The regular files: relative path -> (size, mtime in ns), at most ``limit`` entries
        looked at, ``depth`` levels down; ``hidden_folders=False`` leaves out the top-level
        folders named ``.*``."""
        ...

    def full(self) -> bool:
        """Whether they fill their disk limit now (the result then says the disk was full)."""
        ...

    def empty(self) -> None:
        """Remove what the code left, so that the next item of a pool finds them as a fresh
        sandbox would (``.tmp`` stays, emptied). Called between executions, with no worker
        running code."""
        ...

    def close(self) -> None:
        """Remove them all, once every worker is gone. Idempotent."""
        ...


@runtime_checkable
class SandboxProvider(Protocol):
    """How to start a worker in isolation. One provider serves many sandboxes."""

    @property
    def name(self) -> str: ...

    @property
    def available(self) -> bool:
        """True when the provider's tools are installed here (not that they will work)."""
        ...

    def isolation(self, spec: SandboxSpec) -> Isolation:
        """What this provider applies for ``spec`` on this machine."""
        ...

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        """The worker's settings (``worker/config.py``): at least ``cwd`` (the scratch folder
        as the worker sees it), and the protections this provider has it apply."""
        ...

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> WorkerProcess:
        """Start a worker running ``worker_argv(python)`` with its channel on stdin/stdout,
        ``files`` (what ``files()`` made for this sandbox) as its working directory and HOME.

        ``egress`` (only where ``spec.network`` is an allow-list): a host folder holding the
        proxy's Unix socket for this worker. The provider shows it to the sandbox, gives the
        sandbox no network of its own, and returns in the process's ``settings`` where the
        sandbox sees it (``{"egress": {"folder": ...}}``). A provider that cannot raises
        ProviderUnavailableError."""
        ...

    def check(self) -> Sequence[CheckItem]:
        """Say precisely what works and what is missing."""
        ...

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        """The files of a new sandbox (``sandbox_id``), kept until their ``close``. A provider
        that shows its sandboxes a folder of this host makes them with
        ``LocalFiles.make(spec, sandbox_id, owner)`` (``providers/local/files.py``: a temporary
        folder, or the spec's ``workdir``, given to the code's uid where it is not this
        process's); one that keeps them elsewhere implements ``SandboxFiles``."""
        ...

    # Optional (looked up with getattr):
    #   create(spec, *, listeners) -> Sandbox: a sandbox class of its own (default BaseSandbox).
    #   stops -> Column: what it stops, its column of the declared table (providers/stops;
    #     every built-in provider has one; ``stops.stops_for`` reads it).
