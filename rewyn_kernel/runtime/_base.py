"""BaseSandbox: what every provider's sandbox shares (scratch dir, sessions, one-shot execute)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rewyn_kernel.errors import SandboxClosedError
from rewyn_kernel.runtime._channel import LiveWorker
from rewyn_kernel.runtime._execution import OutputCallback, StreamCallback
from rewyn_kernel.runtime._protocol import MAX_HEADER_BYTES, worker_program
from rewyn_kernel.runtime._result import Isolation, SandboxResult
from rewyn_kernel.runtime._session import UNSET, Session
from rewyn_kernel.runtime._spec import SandboxSpec

if TYPE_CHECKING:
    from typing_extensions import Self

    from rewyn_kernel.runtime._provider import SandboxProvider
    from rewyn_kernel.runtime.events import EventListener


def _cleanup(sessions: list[Session], workdir: Path | None) -> None:
    for session in list(sessions):
        session.close()
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)


class BaseSandbox:
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
        self.id = uuid.uuid4().hex[:12]
        self._provider = provider
        self._spec = spec
        self.listeners: tuple[EventListener, ...] = tuple(listeners)
        owned = None
        if spec.workdir is None:
            owned = Path(tempfile.mkdtemp(prefix=f"rewyn-{self.id}-"))
        workdir = spec.workdir or owned
        assert workdir is not None
        self._workdir: Path = workdir
        self.isolation: Isolation = provider.isolation(spec)
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        self._closed = False
        self._finalizer = weakref.finalize(self, _cleanup, self._sessions, owned)
        self._oneshot = self._open(keep_state=False)

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    @property
    def provider(self) -> SandboxProvider:
        return self._provider

    @property
    def workdir(self) -> Path:
        """The scratch directory: the code's working directory and HOME, readable from here."""
        return self._workdir

    @property
    def closed(self) -> bool:
        return self._closed

    def launch_worker(self, *, fork_per_exec: bool) -> LiveWorker:
        """Start one worker for this sandbox (called from Session).

        ``fork_per_exec``: run each execution in a fresh fork of the worker, so nothing
        survives between executions (the one-shot ``execute``).
        """
        name = f"rewyn-{self.id}-{next(self._names)}"
        process = self._provider.launch(self._spec, self._workdir, name)
        config = {
            **self._provider.worker_config(self._spec, self._workdir),
            "fork_per_exec": fork_per_exec,
            "max_rich_bytes": MAX_HEADER_BYTES - 4096,
        }
        try:
            return LiveWorker(process, worker_program(config))
        except BaseException:
            process.kill()
            process.close()
            raise

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
        self._check_open()
        return self._oneshot.execute(
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
        self._check_open()
        return await self._oneshot.aexecute(
            code, timeout=timeout, on_stream=on_stream, on_output=on_output
        )

    def session(self, *, keep_state: bool = True) -> Session:
        """Open a session: a live worker on which variables survive between executions."""
        return self._open(keep_state=keep_state)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("this sandbox is closed; create a new one")

    def _open(self, *, keep_state: bool) -> Session:
        with self._lock:
            self._check_open()
            session = Session(self, keep_state=keep_state)
            self._sessions.append(session)
            return session

    def close(self) -> None:
        """Kill every worker of this sandbox and remove its scratch directory. Idempotent."""
        with self._lock:
            self._closed = True
        self._finalizer()

    async def aclose(self) -> None:
        import asyncio

        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.id} {self._provider.name} {state}>"
