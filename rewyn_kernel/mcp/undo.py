"""Undo for the MCP server's sessions: a checkpoint kept before each ``run_python`` call.

A checkpoint (``Session.checkpoint``) is a paused copy-on-write fork of the session's code
process, in the same sandbox: it costs a few milliseconds and the memory the session writes
after it (pages it changes are copied), and the kernel's OOM killer takes it first when the
sandbox's memory runs short. ``UndoHistory`` keeps the last ``depth`` of them for one session
(``--undo-depth``; 0: none, undo is off) and hands the latest to ``Session.restore`` on
``undo``. Variables, imports and open figures go back; files do not (the sandbox's folder and
the workspace are shared by every state of the session).

Taking a checkpoint never fails a call: when it cannot be taken (the memory cap leaves too
little room, the session has no live interpreter) the call runs without one and its result
says so.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rewyn_kernel.errors import ForkError, SandboxError
from rewyn_kernel.runtime.sandbox import Session
from rewyn_kernel.runtime.session import Checkpoint

MAX_UNDO_DEPTH = 16
"""The most checkpoints a session may keep: each is a process in the sandbox (it counts towards
the pids limit, and its memory towards the cap once the session writes over it)."""
_PREVIEW_CHARS = 60


class UndoError(ValueError):
    """Nothing to undo, undo off, or the checkpoint is gone: the message says which."""


@dataclass(frozen=True)
class _Kept:
    checkpoint: Checkpoint
    before: int
    """The session's execution count when it was taken: the call after it is ``before + 1``."""
    code: str
    """The first line of the call's code, shortened (for the message that undoes it)."""


def preview(code: str) -> str:
    """The first non-blank line of ``code``, at most ``_PREVIEW_CHARS`` characters."""
    line = next((line.strip() for line in code.splitlines() if line.strip()), "")
    more = len(line) > _PREVIEW_CHARS or line != code.strip()
    return (line[:_PREVIEW_CHARS] + " ...") if more else line


class UndoHistory:
    """The checkpoints of one session, oldest first, at most ``depth``. Not thread-safe: the
    session table calls it with the session's lock held (one call at a time)."""

    def __init__(self, depth: int) -> None:
        if not 0 <= depth <= MAX_UNDO_DEPTH:
            raise ValueError(f"the undo depth must be between 0 and {MAX_UNDO_DEPTH}")
        self.depth = depth
        self._kept: list[_Kept] = []
        self._calls: list[int] = []
        """The calls whose changes the session's state holds, since its oldest checkpoint (in
        order: a call after an undo has a higher number than the calls it replaced)."""
        self._ready: asyncio.Task[Checkpoint] | None = None
        """The next call's checkpoint, taken as the last call ended (``prepare``)."""

    def __len__(self) -> int:
        return len(self._kept)

    async def keep(self, session: Session, code: str) -> str | None:
        """Take a checkpoint of ``session`` before it runs ``code``; None when one was taken
        (or undo is off), else the note for the call's result that says why not."""
        if self.depth == 0:
            return None
        note = None
        try:
            checkpoint = await self._prepared(session.execution_count)
            if checkpoint is None:
                checkpoint = await asyncio.to_thread(session.checkpoint)
        except SandboxError as exc:  # (ForkError, or a session closed meanwhile)
            held = f"; undo goes back to before call {self._kept[-1].before + 1}" if self else ""
            note = f"no undo point was kept before this call: {exc}{held}"
        else:
            self._kept.append(_Kept(checkpoint, checkpoint.execution_count, preview(code)))
        self._calls.append(session.execution_count + 1)
        dropped, self._kept = self._kept[: -self.depth], self._kept[-self.depth :]
        oldest = self._kept[0].before if self._kept else None
        self._calls = [] if oldest is None else [c for c in self._calls if c > oldest]
        if dropped:
            await asyncio.to_thread(_close, dropped)
        return note

    def prepare(self, session: Session) -> None:
        """As a call ends: take the next call's checkpoint now, while the agent reads the
        result, so that its fork is not on the next call's way (``keep`` waits for it if the
        call comes at once, and takes its own if the state changed meanwhile)."""
        if self.depth and self._ready is None and not session.closed:
            self._ready = asyncio.get_running_loop().create_task(
                asyncio.to_thread(session.checkpoint)
            )

    async def _prepared(self, count: int) -> Checkpoint | None:
        """The prepared checkpoint if it holds the state after call ``count`` (no call, undo or
        reset came between), else None (one not taken, or no longer the state, is dropped)."""
        task, self._ready = self._ready, None
        if task is None:
            return None
        try:
            checkpoint = await task
        except Exception:
            return None
        if checkpoint.execution_count == count and checkpoint.alive:
            return checkpoint
        await asyncio.to_thread(checkpoint.close)
        return None

    async def undo(self, session: Session, name: str) -> str:
        """Restore the latest checkpoint as ``session``'s state; the message says which calls'
        changes were undone. UndoError when there is nothing to restore."""
        await self._prepared(-1)  # (the state it held is the one undone)
        if self.depth == 0:
            raise UndoError("undo is off on this server (--undo-depth 0: it keeps no checkpoints)")
        if not self._kept:
            raise UndoError(
                f"nothing to undo in session {name!r}: no run_python call since it started, was "
                "reset or was last undone"
            )
        kept = self._kept.pop()
        try:
            await asyncio.to_thread(session.restore, kept.checkpoint)
        except ForkError as exc:
            await asyncio.to_thread(_close, [kept])
            left = f" ({len(self)} older undo point(s) left)" if self else ""
            raise UndoError(f"cannot undo call {kept.before + 1}: {exc}{left}") from None
        undone = [c for c in self._calls if c > kept.before] or [kept.before + 1]
        self._calls = [c for c in self._calls if c <= kept.before]
        said = f"undid {_calls(undone)} of session {name!r} (call {undone[0]} began "
        said += f"`{kept.code}`): its variables, imports and figures are as they were before "
        said += "it. Files are not rolled back: what it wrote stays."
        more = len(self)
        return said + (f" {more} more undo point(s) kept." if more else " No more undo points.")

    async def drop(self) -> None:
        """Drop every checkpoint (the session was reset or closed)."""
        await self._prepared(-1)
        dropped, self._kept, self._calls = self._kept, [], []
        if dropped:
            await asyncio.to_thread(_close, dropped)


def _close(kept: list[_Kept]) -> None:
    for item in kept:
        item.checkpoint.close()


def _calls(numbers: list[int]) -> str:
    """'call 3', 'calls 1 to 3', or 'calls 2, 5 and 6'."""
    if len(numbers) == 1:
        return f"call {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"calls {numbers[0]} to {numbers[-1]}"
    return "calls " + ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
