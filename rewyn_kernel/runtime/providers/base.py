"""The contracts between the layers: providers start workers, sandboxes run code on them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rewyn_kernel.runtime._result import Isolation, SandboxResult
from rewyn_kernel.runtime._spec import SandboxSpec

if TYPE_CHECKING:
    from typing_extensions import Self

    from rewyn_kernel.runtime.events import EventListener
    from rewyn_kernel.runtime.host.execution import OutputCallback, StreamCallback
    from rewyn_kernel.runtime.host.scratch import ScratchEntry
    from rewyn_kernel.runtime.host.session import Session
    from rewyn_kernel.runtime.worker.config import WorkerConfig


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

    def worker_config(self, spec: SandboxSpec, workdir: Path) -> WorkerConfig:
        """The worker's settings (``worker/config.py``): at least ``cwd`` (the scratch
        directory as the worker sees it), and the protections this provider has it apply."""
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


@runtime_checkable
class Sandbox(Protocol):
    """A place to run code under a spec. ``execute`` keeps nothing between calls."""

    @property
    def id(self) -> str: ...

    @property
    def spec(self) -> SandboxSpec: ...

    @property
    def provider(self) -> SandboxProvider: ...

    @property
    def isolation(self) -> Isolation: ...

    @property
    def workdir(self) -> Path: ...

    @property
    def closed(self) -> bool: ...

    @property
    def listeners(self) -> tuple[EventListener, ...]: ...

    def execute(
        self,
        code: str,
        *,
        timeout: float | None = ...,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
    ) -> SandboxResult: ...

    async def aexecute(
        self,
        code: str,
        *,
        timeout: float | None = ...,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
    ) -> SandboxResult: ...

    def interrupt(self) -> bool: ...

    def session(self, *, keep_state: bool = True) -> Session: ...

    def read_file(self, path: str | os.PathLike[str], *, limit: int = ...) -> bytes: ...

    def write_file(self, path: str | os.PathLike[str], data: bytes) -> None: ...

    def list_files(
        self, path: str | os.PathLike[str] = ..., *, limit: int | None = None
    ) -> list[ScratchEntry]: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...
