"""The MCP server's named sessions: each its own sandbox (scratch directory) and live worker.

One ``SessionTable`` owns every sandbox the server made. A session is made on first use, runs
one call at a time (calls to one session queue; calls to different sessions run at once), and
is closed by the agent, by the idle reaper after ``idle_ttl`` seconds without a call, or when
the server stops. The table never holds more than ``max_sessions``. A name whose session was
closed is remembered (bounded), so the next call under it can say that it starts afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from rewyn_kernel.runtime.sandbox import Sandbox, Session

SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""What a session may be called: 1-64 letters, digits, ``_``, ``.``, ``-`` (first a letter or
digit); the name goes into file names and the run log."""
DEFAULT_SESSION = "default"
_REMEMBERED = 256
"""How many closed sessions' names (and why they closed) are kept for the next call."""


class SessionError(ValueError):
    """A session that cannot be used: a bad name, too many open, or not open."""


class BadSessionName(SessionError):
    """A name no session may have."""


@dataclass(eq=False)
class Entry:
    name: str
    sandbox: Sandbox
    session: Session
    created: float
    last_used: float
    calls: int = 0
    busy: int = 0
    """Calls holding or waiting for this session (the reaper leaves it alone meanwhile)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def describe(self, now: float) -> dict[str, object]:
        return {
            "name": self.name,
            "calls": self.calls,
            "busy": self.busy > 0,
            "idle_seconds": round(0.0 if self.busy else now - self.last_used, 1),
            "age_seconds": round(now - self.created, 1),
        }


def check_name(name: str) -> str:
    if not isinstance(name, str) or not SESSION_NAME.match(name):
        raise BadSessionName(
            f"bad session name {name!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


class SessionTable:
    """Named sessions, each a sandbox and its session from ``make`` (blocking: it runs in a
    thread; the server's takes a lease from its pool, a spare ready), at most
    ``max_sessions`` at once, closed after ``idle_ttl`` seconds unused (None: never)."""

    def __init__(
        self,
        make: Callable[[], tuple[Sandbox, Session]],
        *,
        max_sessions: int,
        idle_ttl: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._make = make
        self.max_sessions = max_sessions
        self.idle_ttl = idle_ttl
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._opening: dict[str, asyncio.Future[tuple[Entry, str | None]]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._closed = False

    # -- use ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, name: str) -> AsyncIterator[tuple[Entry, str | None]]:
        """The session ``name`` (made if it is not open), held for one call; and a note when
        it was just made in place of one that was closed (its state and files are gone)."""
        check_name(name)
        entry, note = await self._open(name)
        entry.busy += 1
        try:
            async with entry.lock:
                if entry.session.closed:  # closed while this call queued for it
                    raise SessionError(f"session {name!r} was closed while this call waited")
                entry.calls += 1
                try:
                    yield entry, note
                finally:
                    entry.last_used = self._clock()
        finally:
            entry.busy -= 1

    async def _open(self, name: str) -> tuple[Entry, str | None]:
        if self._closed:
            raise SessionError("the server is shutting down")
        entry = self._entries.get(name)
        if entry is not None:
            return entry, None
        pending = self._opening.get(name)
        if pending is None:
            if len(self._entries) + len(self._opening) >= self.max_sessions:
                raise SessionError(
                    f"{self.max_sessions} sessions are open, the most this server allows: "
                    "close one with close_session (list_sessions shows them), or use an open one"
                )
            pending = asyncio.get_running_loop().create_future()
            self._opening[name] = pending
            # Its own task, settled by ``_started`` whoever still waits: a call cancelled
            # while the sandbox starts leaves the session open for the next call, not leaked.
            task = asyncio.ensure_future(self._start(name))
            self._tasks.add(task)
            task.add_done_callback(lambda done: self._started(name, done, pending))
        return await asyncio.shield(pending)

    def _started(
        self,
        name: str,
        task: asyncio.Future[Entry],
        pending: asyncio.Future[tuple[Entry, str | None]],
    ) -> None:
        self._tasks.discard(task)
        self._opening.pop(name, None)
        if task.cancelled() or task.exception() is not None:
            error = task.exception() if not task.cancelled() else None
            pending.set_exception(error or SessionError(f"session {name!r} did not start"))
            pending.exception()  # (retrieved: no warning when nobody waits any more)
            return
        entry = task.result()
        if self._closed:  # the server stopped while it started
            self._later(self._dispose(entry))
            pending.set_exception(SessionError("the server is shutting down"))
            pending.exception()
            return
        self._entries[name] = entry
        why = self._gone.pop(name, None)
        note = None
        if why is not None:
            note = (
                f"session {name!r} is new: the previous one was {why} (its variables and "
                "files are gone)"
            )
        pending.set_result((entry, note))

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, name: str) -> Entry:
        sandbox, session = await asyncio.to_thread(self._make)
        now = self._clock()
        return Entry(name, sandbox, session, created=now, last_used=now)

    # -- manage ------------------------------------------------------------------------------

    def get(self, name: str) -> Entry:
        """The open session ``name``; SessionError if it is not open."""
        entry = self._entries.get(check_name(name))
        if entry is None:
            why = self._gone.get(name)
            raise SessionError(f"no session {name!r} is open" + (f" (it was {why})" if why else ""))
        return entry

    def describe(self) -> list[dict[str, object]]:
        now = self._clock()
        return [entry.describe(now) for entry in self._entries.values()]

    async def reset(self, name: str) -> None:
        """Start the session's interpreter afresh: variables go, files stay. A call running
        on it is stopped by the restart and ends in a result that says so."""
        entry = self.get(name)
        await asyncio.to_thread(entry.session.restart)

    async def close(self, name: str, why: str = "closed by close_session") -> None:
        """Close the session and remove its sandbox's scratch directory."""
        entry = self.get(name)
        self._forget(entry, why)
        await self._dispose(entry)

    async def reap(self) -> list[str]:
        """Close every session idle for longer than ``idle_ttl``; return their names."""
        if self.idle_ttl is None:
            return []
        now = self._clock()
        idle = [
            entry
            for entry in self._entries.values()
            if not entry.busy and now - entry.last_used > self.idle_ttl
        ]
        for entry in idle:
            self._forget(entry, f"closed after {self.idle_ttl:g} s without a call")
        await asyncio.gather(*(self._dispose(entry) for entry in idle))
        return [entry.name for entry in idle]

    async def reap_forever(self) -> None:
        """Run ``reap`` now and then until cancelled (the server's lifespan owns this task)."""
        if self.idle_ttl is None:
            return
        period = min(max(self.idle_ttl / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(period)
            await self.reap()

    async def close_all(self) -> None:
        """Close every session (the server is stopping); new calls are refused from now on."""
        self._closed = True
        entries = list(self._entries.values())
        for entry in entries:
            self._forget(entry, "closed when the server stopped")
        await asyncio.gather(*(self._dispose(entry) for entry in entries))
        while self._tasks:  # sessions still starting (each disposes of itself), disposals
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _forget(self, entry: Entry, why: str) -> None:
        if self._entries.get(entry.name) is entry:
            del self._entries[entry.name]
        self._gone[entry.name] = why
        self._gone.move_to_end(entry.name)
        while len(self._gone) > _REMEMBERED:
            self._gone.popitem(last=False)

    @staticmethod
    async def _dispose(entry: Entry) -> None:
        def close() -> None:
            try:
                entry.session.close()
            finally:
                entry.sandbox.close()

        await asyncio.shield(asyncio.to_thread(close))

    def __len__(self) -> int:
        return len(self._entries)
