"""BaseSandbox: what every provider's sandbox shares (scratch dir, sessions, one-shot execute)."""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rewyn_kernel.errors import SandboxClosedError
from rewyn_kernel.runtime._result import Isolation, SandboxResult
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress.corporate import cleanup_with, egress_isolation, host_ca
from rewyn_kernel.runtime.egress.policy import NetworkPolicy, parse_rule
from rewyn_kernel.runtime.host.core import SandboxCore
from rewyn_kernel.runtime.host.execution import OutputCallback, StreamCallback
from rewyn_kernel.runtime.host.scratch import READ_LIMIT, ScratchEntry
from rewyn_kernel.runtime.host.session import UNSET, Session
from rewyn_kernel.runtime.host.sync import Closeable
from rewyn_kernel.runtime.host.workspace import Budget

if TYPE_CHECKING:
    from typing_extensions import Self

    from rewyn_kernel.runtime.events import EventListener
    from rewyn_kernel.runtime.providers.base import SandboxFiles, SandboxProvider


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
    def files(self) -> SandboxFiles: ...

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

    def allow_hosts(self, entries: tuple[str, ...]) -> NetworkPolicy | None: ...

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


def open_sandbox(
    provider: SandboxProvider, spec: SandboxSpec, listeners: Sequence[EventListener] = ()
) -> Sandbox:
    """A new sandbox of ``provider``: of its own class where it has one (its ``create``, an
    optional part of the contract), else a ``BaseSandbox``."""
    make = getattr(provider, "create", None)
    if callable(make):
        box: Sandbox = make(spec, listeners=listeners)
        return box
    return BaseSandbox(provider, spec, listeners)


class BaseSandbox(Closeable):
    """A sandbox: a spec, a provider, a scratch directory and the sessions running in it.

    ``execute`` follows the spec: nothing carries over between calls (each runs in a fresh
    worker, started ahead of time). For state that survives, open ``session()``.
    Close it (or use ``with``) to kill every worker and remove the scratch directory; a sandbox
    still open when the interpreter exits is cleaned up then.
    """

    def __init__(
        self,
        provider: SandboxProvider,
        spec: SandboxSpec,
        listeners: Sequence[EventListener] = (),
    ) -> None:
        sandbox_id = uuid.uuid4().hex[:12]
        # (the host's CA files, copied for the code where it has a network: egress/corporate.py)
        ca = host_ca(spec)
        if ca is not None:
            spec = ca.apply(spec)
        try:
            files = provider.files(spec, sandbox_id)
            isolation = egress_isolation(provider.isolation(spec), spec, ca)
        except BaseException:
            if ca is not None:
                ca.close()
            raise
        if files.disk is not None or files.notes:
            update: dict[str, object] = {"notes": (*isolation.notes, *files.notes)}
            if files.disk is not None:
                update["disk"] = files.disk
            isolation = isolation.model_copy(update=update)
        self._core = SandboxCore(
            id=sandbox_id,
            provider=provider,
            spec=spec,
            files=files,
            isolation=isolation,
            listeners=tuple(listeners),
            budget=Budget(spec.disk_limit_mb * 1024 * 1024 if spec.disk_limit_mb else None),
        )
        self._lock = threading.Lock()
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._closed = False
        # Holds only the core: the sandbox itself can be collected, and then this runs.
        self._finalizer = weakref.finalize(self, cleanup_with(self._core.cleanup, ca))
        self._oneshot_session: Session | None = None

    @property
    def id(self) -> str:
        """The sandbox's id (its events' ``sandbox_id``)."""
        return self._core.id

    @property
    def isolation(self) -> Isolation:
        """What the provider actually applies to this sandbox."""
        return self._core.isolation

    @property
    def listeners(self) -> tuple[EventListener, ...]:
        """Where this sandbox's events go (the listeners given to ``create``)."""
        return self._core.listeners

    @property
    def spec(self) -> SandboxSpec:
        """The spec the sandbox was made with."""
        return self._core.spec

    @property
    def provider(self) -> SandboxProvider:
        """The provider that made the sandbox."""
        return self._core.provider

    @property
    def workdir(self) -> Path:
        """The scratch directory: the code's working directory and HOME, readable from here.
        ScratchError where the provider keeps the files elsewhere (see ``files``)."""
        return self._core.workdir()

    @property
    def files(self) -> SandboxFiles:
        """The scratch directory's files as the host reaches them, wherever the provider keeps
        them (``read_file``, ``write_file`` and ``list_files`` go through it)."""
        return self._core.files

    @property
    def closed(self) -> bool:
        """Whether the sandbox is closed."""
        return self._closed

    def allow_hosts(self, entries: tuple[str, ...]) -> NetworkPolicy | None:
        """Let the code reach ``entries`` too, from its next connection on, without a restart:
        the allow-list now (``spec`` has it), or None where ``network`` is no allow-list. For
        the host's side only (the person's grant: kernel/grants.py); nothing in the sandbox
        reaches this."""
        return self._core.allow_hosts(tuple(parse_rule(entry).text for entry in entries))

    # -- the scratch directory, from the host ----------------------------------------------

    def read_file(self, path: str | os.PathLike[str], *, limit: int = READ_LIMIT) -> bytes:
        """Read a file the code wrote, by its path relative to the scratch directory.

        A link anywhere on the way is refused (the code may have made ``result.txt`` a link to
        ``~/.ssh/id_rsa``), as is anything but a regular file, and a file over ``limit`` bytes:
        ``ScratchError`` says which.
        """
        return self._core.files.read(os.fspath(path), limit)

    def write_file(self, path: str | os.PathLike[str], data: bytes) -> None:
        """Put a file in the scratch directory for the code (folders are made as needed);
        never through a link the code made."""
        self._core.files.write(os.fspath(path), data)

    def list_files(
        self, path: str | os.PathLike[str] = ".", *, limit: int | None = None
    ) -> list[ScratchEntry]:
        """The entries of a directory in scratch, links shown as links (never followed), by
        name; with ``limit``, at most that many."""
        return self._core.files.list(os.fspath(path), limit)

    def execute(
        self,
        code: str,
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
    ) -> SandboxResult:
        """Run ``code`` in a fresh worker and return its result; it never raises for the code.

        Safe to call inside a running event loop (it blocks the caller, as a sync call does).
        """
        return self._oneshot().execute(
            code, timeout=timeout, on_stream=on_stream, on_output=on_output
        )

    async def aexecute(
        self,
        code: str,
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
    ) -> SandboxResult:
        """Run ``code`` in a fresh worker without blocking the event loop."""
        return await self._oneshot().aexecute(
            code, timeout=timeout, on_stream=on_stream, on_output=on_output
        )

    def interrupt(self) -> bool:
        """Raise KeyboardInterrupt in the running one-shot ``execute``; False if none runs."""
        session = self._oneshot_session
        return session.interrupt() if session is not None else False

    def session(self, *, keep_state: bool = True) -> Session:
        """Open a session: a live worker on which variables survive between executions.

        The session keeps this sandbox (and its scratch directory) alive while it is in use.
        """
        with self._lock:
            self._check_open()
            session = Session(self._core, keep_state=keep_state, owner=self)
            self._sessions.add(session)
            return session

    def warm_up(self, timeout: float = 30.0, *, preload: str | None = None) -> bool:
        """Start the worker ``execute`` runs in now, and wait until it is ready (else the first
        ``execute`` starts it): True once it is. A pool keeps its sandboxes so.

        ``preload``: code the worker runs once, before any execution (``"import numpy"``):
        each ``execute`` then runs in a fresh fork of that state instead of a fresh
        interpreter, so none pays for the imports, and still nothing of one execution reaches
        the next. What it prints is dropped; if it fails, the result's isolation notes say
        so and executions start without it. Given before the first ``execute`` only."""
        if preload is not None:
            with self._lock:
                self._check_open()
                if self._oneshot_session is not None:
                    raise RuntimeError("preload is given before the first execute")
                self._core.preload = preload
        return self._oneshot().wait_ready(timeout)

    def _oneshot(self) -> Session:
        """The session behind ``execute``: started on first use (then kept warm)."""
        with self._lock:
            self._check_open()
            if self._oneshot_session is None:
                self._oneshot_session = Session(self._core, keep_state=False)
                self._sessions.add(self._oneshot_session)
            return self._oneshot_session

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("this sandbox is closed; create a new one")

    def close(self) -> None:
        """Kill every worker of this sandbox and remove its scratch directory. Idempotent."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions)
        for session in sessions:
            session.close()
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.id} {self.provider.name} {state}>"
