"""The contracts between the layers: providers start workers, sandboxes run code on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec

if TYPE_CHECKING:
    from rewyn_kernel.runtime.events import EventListener
    from rewyn_kernel.runtime.host.base import Sandbox


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

    def worker_config(self, spec: SandboxSpec, workdir: Path) -> dict[str, Any]:
        """The worker's settings: ``memory_limit_bytes`` (an rlimit it sets on itself, or
        None) and ``cwd`` (the scratch directory as the worker sees it)."""
        ...

    def launch(
        self, spec: SandboxSpec, workdir: Path, name: str, *, egress: Path | None = None
    ) -> WorkerProcess:
        """Start a worker running ``BOOTSTRAP`` with its channel on stdin/stdout.

        ``egress`` (only where ``spec.network`` is an allow-list): a host folder holding the
        proxy's Unix socket for this worker. The provider shows it to the sandbox, gives the
        sandbox no network of its own, and returns in the process's ``settings`` where the
        sandbox sees it (``{"egress": {"folder": ...}}``). A provider that cannot raises
        ProviderUnavailableError."""
        ...

    def check(self) -> Sequence[CheckItem]:
        """Say precisely what works and what is missing."""
        ...

    def create(
        self, spec: SandboxSpec | None = None, *, listeners: Sequence[EventListener] = ()
    ) -> Sandbox: ...
