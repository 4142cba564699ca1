"""The MCP server's named sessions: each its own sandbox (scratch directory) and live worker.

One ``SessionTable`` owns every sandbox the server made. A session is made on first use, runs
one call at a time (calls to one session queue; calls to different sessions run at once), and
is closed by the agent, by the idle reaper after ``idle_ttl`` seconds without a call, or when
the server stops. The table never holds more than ``max_sessions``. A name whose session was
closed is remembered (bounded), so the next call under it can say that it starts afresh.

``fork`` makes a session of a new name with an open one's state (``Session.fork``: a
copy-on-write fork of its code process) in the same sandbox: the two share its folder and
limits, so the sandbox is closed with the last session that holds it. Each session keeps its
own undo history (``undo.py``); a fork starts without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from rewyn_kernel.mcp.undo import UndoHistory
from rewyn_kernel.runtime.sandbox import Sandbox, Session

SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""What a session may be called: 1-64 letters, digits, ``_``, ``.``, ``-`` (first a letter or
digit); the name goes into file names and the run log."""
DEFAULT_SESSION = "default"
SessionName = Annotated[
    str,
    Field(
        description="Which session: each has its own variables and its own directory; made on "
        "first use.",
        max_length=64,
    ),
]
"""A session's name as a tool takes it (the SDK reads its description into the schema)."""
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
    history: UndoHistory
    forked_from: str | None = None
    """The name of the session this one was forked from (``fork_session``), or None."""
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
            "forked_from": self.forked_from,
            "undo_points": len(self.history),
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
    ``max_sessions`` at once, closed after ``idle_ttl`` seconds unused (None: never); each
    keeps checkpoints before its last ``undo_depth`` runs (``undo.py``)."""

    def __init__(
        self,
        make: Callable[[], tuple[Sandbox, Session]],
        *,
        max_sessions: int,
        idle_ttl: float | None,
        undo_depth: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._make = make
        self.max_sessions = max_sessions
        self.idle_ttl = idle_ttl
        self.undo_depth = undo_depth
        UndoHistory(undo_depth)  # (checks it)
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._opening: dict[str, asyncio.Future[tuple[Entry, str | None]]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._holders: dict[str, int] = {}
        """How many sessions (open, starting or closing) each sandbox holds, by its id: a fork
        shares its parent's, which is closed with the last of them."""
        self._closed = False

    # -- use ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, name: str) -> AsyncIterator[tuple[Entry, str | None]]:
        """The session ``name`` (made if it is not open), held for one call; and a note when
        it was just made in place of one that was closed (its state and files are gone)."""
        check_name(name)
        entry, note = await self._open(name)
        async with self.hold(entry):
            entry.calls += 1
            yield entry, note

    @contextlib.asynccontextmanager
    async def hold(self, entry: Entry) -> AsyncIterator[Entry]:
        """``entry``, held for one call (after the calls queued before it)."""
        entry.busy += 1
        try:
            async with entry.lock:
                if entry.session.closed:  # closed while this call queued for it
                    raise SessionError(f"session {entry.name!r} was closed while this call waited")
                try:
                    yield entry
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
            pending = self._begin(name, self._start(name))
        return await asyncio.shield(pending)

    def _begin(
        self, name: str, start: Coroutine[Any, Any, Entry]
    ) -> asyncio.Future[tuple[Entry, str | None]]:
        """Open session ``name`` with ``start``, if there is room; calls to the name wait."""
        if len(self._entries) + len(self._opening) >= self.max_sessions:
            start.close()
            raise SessionError(
                f"{self.max_sessions} sessions are open, the most this server allows: "
                "close one with close_session (list_sessions shows them), or use an open one"
            )
        pending = asyncio.get_running_loop().create_future()
        self._opening[name] = pending
        # Its own task, settled by ``_started`` whoever still waits: a call cancelled while
        # the session starts leaves it open for the next call, not leaked.
        task = asyncio.ensure_future(start)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._started(name, done, pending))
        return pending

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
        self._holders[sandbox.id] = self._holders.get(sandbox.id, 0) + 1
        now = self._clock()
        return Entry(name, sandbox, session, now, now, UndoHistory(self.undo_depth))

    async def fork(self, name: str, new_name: str) -> Entry:
        """A new session ``new_name`` with the state of the open session ``name`` (after the
        call running on it ends), in its sandbox. SessionError if ``name`` is not open or
        ``new_name`` is taken or there is no room; ForkError if the fork fails."""
        check_name(new_name)
        if self._closed:
            raise SessionError("the server is shutting down")
        parent = self.get(name)
        if new_name in self._entries or new_name in self._opening:
            raise SessionError(
                f"a session {new_name!r} is already open: pick another name, or close that one "
                "first"
            )
        entry, _ = await asyncio.shield(self._begin(new_name, self._branch(parent, new_name)))
        return entry

    async def _branch(self, parent: Entry, name: str) -> Entry:
        sandbox = parent.sandbox
        self._holders[sandbox.id] = self._holders.get(sandbox.id, 0) + 1
        try:
            async with self.hold(parent):
                session = await parent.session.afork()
                assert isinstance(session, Session)
        except BaseException:
            await self._let_go(sandbox)
            raise
        now = self._clock()
        history = UndoHistory(self.undo_depth)
        return Entry(name, sandbox, session, now, now, history, forked_from=parent.name)

    def sharing(self, entry: Entry) -> list[str]:
        """The other open sessions in ``entry``'s sandbox (its forks, or what it forked from)."""
        return [
            other.name
            for other in self._entries.values()
            if other is not entry and other.sandbox is entry.sandbox
        ]

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
        await entry.history.drop()
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

    async def _dispose(self, entry: Entry) -> None:
        async def close() -> None:
            try:
                await entry.history.drop()
                await asyncio.to_thread(entry.session.close)
            finally:
                await self._let_go(entry.sandbox)

        await asyncio.shield(close())

    async def _let_go(self, sandbox: Sandbox) -> None:
        """One session fewer holds ``sandbox``: close it with the last."""
        held = self._holders.pop(sandbox.id, 1) - 1
        if held > 0:
            self._holders[sandbox.id] = held
        else:
            await asyncio.to_thread(sandbox.close)

    def __len__(self) -> int:
        return len(self._entries)
