"""Undo for cells: the code's state before each of the last N cells, kept to go back to.

Before each cell that runs code, the kernel keeps the session's state as a checkpoint
(``Session.checkpoint``: a paused copy-on-write fork of the code's process in the same sandbox,
the first process the OOM killer takes, and refused where the memory cap leaves too little
room); a cell whose whole text is ``%undo`` makes the latest one the session's state again
(``Session.restore``). That cell is read here, on the host, from the frontend's request, and
never reaches the sandbox: code there can neither trigger an undo nor forge one (a ``%undo``
inside other code meets the sandbox's IPython, which refuses it: worker/magics.py).

What an undo does not bring back, and says so: files (where the workspace kept the versions a
cell replaced, the note names the command that restores them), threads the code had started (a
fork copies only the thread that forks), and anything outside the sandbox. A checkpoint that
cannot be taken is skipped with a note, never a failed cell: the cell then joins the one before
it, and an undo goes back past both.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewyn_kernel.errors import ForkError, SandboxError
from rewyn_kernel.runtime.printable import printable
from rewyn_kernel.runtime.result import WorkspaceFiles
from rewyn_kernel.runtime.sandbox import Session
from rewyn_kernel.runtime.session import Checkpoint

UNDO_CELL = re.compile(r"\s*%undo\s*")
"""A cell that asks for an undo: ``%undo`` and nothing else (whitespace aside)."""
UNDO_KEY = "undo"
"""Under the kernel's key in each execute_reply's metadata: ``{"available": N, "cell": K,
"undone": [...]}`` (``Undo.state``), for the frontend to say when an undo is there."""
MAX_LISTED = 10
"""Paths named per kind (created, changed, deleted) in an undo's note."""


def is_undo(code: str) -> bool:
    """Whether ``code`` is a cell that asks for an undo."""
    return UNDO_CELL.fullmatch(code) is not None


@dataclass(eq=False)
class Point:
    """The state before cell ``cells[0][0]`` and the cells run since (restoring it undoes them
    all), each with what it changed in the workspace."""

    checkpoint: Checkpoint
    cells: list[tuple[int, WorkspaceFiles | None]] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.cells[0][0]


@dataclass(frozen=True)
class Outcome:
    """What ``Undo.undo`` did: ``undone``, the cells whose changes to the state are gone (none:
    nothing was undone, and ``text`` says why)."""

    text: str
    undone: tuple[int, ...] = ()


class Undo:
    """The kernel's checkpoints: taken before each cell, the last ``keep`` kept, the oldest
    dropped first. One per kernel; its owner calls ``before`` and ``after`` around each cell
    that runs code, ``undo`` for an undo cell, ``close`` at shutdown."""

    def __init__(self, keep: int, workspace: Path | None) -> None:
        self.keep = keep
        self.workspace = workspace
        self._points: list[Point] = []  # oldest first
        self._why_none = "no cell has run since the kernel started"
        self._ready: asyncio.Task[Checkpoint] | None = None
        """The next cell's checkpoint, asked for as the last cell ended (``prepare``)."""

    # -- around each cell ----------------------------------------------------------------------

    async def before(self, session: Session, cell: int) -> list[str]:
        """Keep the state as it is before ``cell`` runs; return notes for the person (a
        checkpoint skipped, an older one dropped to make room, one the OOM killer took).

        Nothing here waits for a fork: the checkpoint is the one the sandbox kept as the cell
        before ended (``execute(checkpoint_after=True)``, see ``checkpoint_after``), or, where
        there is none (the first cell, after a widget's callback or an undo), one asked for
        now, which the sandbox makes before it takes up the cell. Whether it was made is read
        as the cell ends (``lost``)."""
        if not self.keep:
            return []
        notes = self.lost()
        prepared = await self._take_prepared()
        if prepared is None:
            prepared = self._kept(session)
        if prepared is not None and not prepared.alive:
            await asyncio.to_thread(prepared.close)  # (it was refused or dropped: ask anew)
            prepared = None
        while True:
            try:
                if prepared is None:
                    prepared = await asyncio.to_thread(session.checkpoint, wait=False)
                checkpoint = prepared
                break
            except Exception as exc:  # (ForkError says why; whatever it is, the cell runs)
                # The cap leaves too little room: the oldest checkpoint goes first, then this
                # one is skipped (a checkpoint never takes memory the cell needs).
                if self._points and isinstance(exc, ForkError) and exc.memory:
                    oldest = await self._drop_oldest()
                    notes.append(
                        f"the state kept to undo cell [{oldest}] was dropped to make room "
                        "under the memory cap"
                    )
                    continue
                self._why_none = f"the state before cell [{cell}] could not be kept: {exc}"
                self._ran(cell)
                if self._points:
                    again = f"cells [{self._points[-1].first}] to [{cell}]"
                    notes.append(
                        f"cell [{cell}] cannot be undone alone: {exc} (an undo now goes back "
                        f"over {again})"
                    )
                else:
                    notes.append(f"cell [{cell}] cannot be undone: {exc}")
                return notes
        self._points.append(Point(checkpoint, [(cell, None)]))
        await self._trim()
        return notes

    async def _trim(self) -> None:
        """Drop the oldest checkpoints past ``keep``, but none for one not made yet (the next
        cell may come first and make it moot: the one before it then holds its cells)."""
        while len(self._points) > self.keep and self._points[-1].checkpoint.taken:
            await self._drop_oldest()

    @property
    def checkpoint_after(self) -> bool:
        """Whether a cell's execution keeps the state it leaves, for the next cell's undo."""
        return self.keep > 0

    @staticmethod
    def _kept(session: Session) -> Checkpoint | None:
        """The checkpoint the sandbox kept as the last cell ended, if it was asked for."""
        try:
            return session.take_checkpoint()
        except ForkError:
            return None  # (none: ``before`` asks for one, and says why if it cannot be)

    def prepare(self, session: Session) -> None:
        """After an undo: ask for the next cell's checkpoint now, while the person reads the
        note (``before`` waits only for the ask to be sent; the sandbox forks before it reads
        the next cell). ``stale`` drops it when the state changes meanwhile."""
        if self.keep and self._ready is None:
            loop = asyncio.get_running_loop()
            self._ready = loop.create_task(asyncio.to_thread(session.checkpoint, wait=False))

    async def stale(self, session: Session) -> None:
        """The state changed between cells (a widget's callback, a silent request, an undo):
        the checkpoint kept as the last cell ended, or asked for after an undo, no longer holds
        it; the next cell takes its own."""
        checkpoints = [await self._take_prepared(), self._kept(session)]
        for checkpoint in checkpoints:
            if checkpoint is not None:
                await asyncio.to_thread(checkpoint.close)

    async def _take_prepared(self) -> Checkpoint | None:
        """The prepared checkpoint, if it was taken (if not, ``before`` tries again and says
        why not)."""
        task, self._ready = self._ready, None
        if task is None:
            return None
        try:
            return await task
        except Exception:
            return None

    def _ran(self, cell: int) -> None:
        """``cell`` ran without a checkpoint of its own: the latest one's undo covers it."""
        if self._points:
            self._points[-1].cells.append((cell, None))

    def after(self, cell: int, files: WorkspaceFiles | None) -> None:
        """``cell`` ended, having changed ``files`` in its workspace (kept for the undo's note)."""
        if self._points and files is not None and not files.empty:
            cells = self._points[-1].cells
            for index, (count, _) in enumerate(cells):
                if count == cell:
                    cells[index] = (cell, files)

    def lost(self) -> list[str]:
        """Forget the checkpoints the sandbox could not make and those the OOM killer took
        (their cells join the point before, whose undo now covers them); a note for each."""
        notes = []
        for index in range(len(self._points) - 1, -1, -1):
            point = self._points[index]
            if point.checkpoint.alive:
                continue
            why = point.checkpoint.lost or "it is gone"
            del self._points[index]
            if index > 0:
                self._points[index - 1].cells += point.cells
            if point.checkpoint.busy:  # (cells sent at once: one undo goes back over them)
                self._why_none = f"cell [{point.first}] came at once after the one before"
                continue
            if point.checkpoint.taken is False:
                why = why.removeprefix("it could not be made: ")
                self._why_none = f"the state before cell [{point.first}] could not be kept: {why}"
                if index > 0:
                    again = f"cells [{self._points[index - 1].first}] to [{point.cells[-1][0]}]"
                    notes.append(
                        f"cell [{point.first}] cannot be undone alone: {why} (an undo now goes "
                        f"back over {again})"
                    )
                else:
                    notes.append(f"cell [{point.first}] cannot be undone: {why}")
                continue
            self._why_none = f"the state kept to undo cell [{point.first}] was dropped: {why}"
            notes.append(
                f"the state kept to undo cell [{point.first}] is gone: {why} (checkpoints are "
                "the first processes killed when memory runs short, so that the code keeps its "
                "memory)"
            )
        return notes

    async def _drop_oldest(self) -> int:
        oldest = self._points.pop(0)
        await asyncio.to_thread(oldest.checkpoint.close)
        return oldest.first

    # -- the undo ------------------------------------------------------------------------------

    async def undo(self, session: Session) -> Outcome:
        """Make the latest checkpoint the session's state; say what that undid and what it did
        not, or why there is nothing to undo."""
        if not self.keep:
            return Outcome(
                "Nothing to undo: checkpoints are off for this kernel (SandboxKernel.checkpoints "
                "= 0; install it with --checkpoints N to keep the state before the last N cells)."
            )
        await self.stale(session)
        notes = self.lost()
        if not self._points:
            return Outcome(f"Nothing to undo: {self._why_none}.", ())
        point = self._points.pop()
        try:
            await asyncio.to_thread(session.restore, point.checkpoint)
        except (ForkError, SandboxError) as exc:
            if self._points:
                self._points[-1].cells += point.cells
            self._why_none = f"the state kept to undo cell [{point.first}] is gone"
            return Outcome(f"Nothing was undone: {exc}.")
        self._why_none = (
            f"the state kept before cell [{point.first}] was the last one "
            f"(the kernel keeps {self.keep}: SandboxKernel.checkpoints)"
        )
        undone = tuple(count for count, _ in point.cells)
        return Outcome("\n".join([*(f"[rewyn: {n}]" for n in notes), self._said(point)]), undone)

    def _said(self, point: Point) -> str:
        cells = ", ".join(f"[{count}]" for count, _ in point.cells)
        what = f"cell {cells}'s" if len(point.cells) == 1 else f"cells {cells}'s"
        lines = [
            f"Undid {what} changes to the state: the variables are as they were before cell "
            f"[{point.first}] ran.",
            "Files are not rolled back, and threads the code had started do not run in the "
            "restored state.",
        ]
        for count, files in point.cells:
            if files is not None:
                lines += self._files(count, files)
        left = len(self._points)
        lines.append(
            f"%undo again goes back over cell [{self._points[-1].first}]."
            if left
            else "There is nothing more to undo."
        )
        return "\n".join(lines)

    def _files(self, cell: int, files: WorkspaceFiles) -> list[str]:
        """What ``cell`` changed in the workspace, and how to put back what it replaced."""
        lines = [f"Cell [{cell}] changed files in the workspace, which stay as it left them:"]
        for kind, paths in (
            ("created", files.created),
            ("changed", files.changed),
            ("deleted", files.deleted),
        ):
            if paths:
                more = files.counts.get(kind, len(paths)) - min(len(paths), MAX_LISTED)
                listed = ", ".join(map(printable, paths[:MAX_LISTED]))
                shown = listed + (f" and {more} more" if more > 0 else "")
                lines.append(f"  {kind}: {shown}")
        if files.versions and self.workspace is not None:
            where = shlex.quote(str(self.workspace))
            lines.append("  the versions it replaced or deleted are kept; to put them back, run:")
            lines += [
                f"    rewyn-kernel files {where} --restore {shlex.quote(version)}"
                for version in dict.fromkeys(files.versions)
            ]
        elif files.changed or files.deleted:
            lines.append("  (no earlier versions of them were kept)")
        return lines

    # -- what the frontend is told -------------------------------------------------------------

    def state(self, undone: tuple[int, ...] = ()) -> dict[str, Any]:
        """For the execute_reply's metadata: how many undos are there now, the cell the next
        one undoes (None: none), and the cells a reply's undo just undid."""
        live = [point for point in self._points if point.checkpoint.alive]
        state: dict[str, Any] = {
            "available": len(live),
            "cell": live[-1].first if live else None,
        }
        if undone:
            state["undone"] = list(undone)
        return state

    def close(self) -> None:
        """Drop every checkpoint (their processes are killed; ``stale`` first, on the loop,
        for the one ``prepare`` may be taking)."""
        points, self._points = self._points, []
        for point in points:
            point.checkpoint.close()
