"""Undo for cells: the code's state before each of the last N cells, kept to go back to.

Before each cell that runs code, the kernel keeps the session's state as a checkpoint
(``Session.checkpoint``: a paused copy-on-write fork of the code's process in the same sandbox,
the first process the OOM killer takes, and refused where the memory cap leaves too little
room); a cell whose whole text is an undo makes one of them the session's state again
(``Session.restore``) and drops those kept after it:

- ``%undo``: the last cell;
- ``%undo N``: the last N cells;
- ``%undo --to N``: back to the state before the cell whose execution count is N.

That cell is read here, on the host, from the frontend's request, and never reaches the
sandbox: code there can neither trigger an undo nor forge one (a ``%undo`` inside other code
meets the sandbox's IPython, which refuses it: worker/magics.py). An undo names the cells it
took back, and uses no execution count (the kernel's reply is that of a cell not stored in the
history, as on ipykernel).

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

UNDO_CELL = re.compile(r"\s*%undo(?:[ \t]+(?P<args>[^\n]*))?\s*")
"""A cell that asks for an undo: one line, ``%undo`` and its arguments (whitespace aside)."""
USAGE = (
    "%undo takes back the last cell, %undo N the last N cells, %undo --to N the cells from the "
    "one with execution count N on"
)
UNDO_KEY = "undo"
"""Under the kernel's key in each execute_reply's metadata: ``{"available": N, "cell": K,
"reach": [...], "undone": [...]}`` (``Undo.state``), for the frontend to say when an undo is
there and which cells ``%undo --to`` can go back to."""
MAX_LISTED = 10
"""Paths named per kind (created, changed, deleted) in an undo's note."""
MAX_NAMED = 5
"""Cells an undo's note names with their first line (the rest are counted)."""
MAX_LINE = 60
"""Characters of a cell's first line in an undo's note."""
MAX_REACH = 1000
"""Cells listed in ``Undo.state``'s ``reach`` (the latest)."""


@dataclass(frozen=True)
class Request:
    """What an undo cell asks for: the last ``cells`` cells, or (``to``) those from the cell
    with that execution count on."""

    cells: int = 1
    to: int | None = None


class UsageError(ValueError):
    """An undo cell the kernel cannot read (its message says why, and the grammar)."""


def is_undo(code: str) -> bool:
    """Whether ``code`` is a cell that asks for an undo (``request`` reads what it asks)."""
    return UNDO_CELL.fullmatch(code) is not None


def request(code: str) -> Request:
    """What the undo cell ``code`` asks for; UsageError if its arguments are not the grammar's
    (``%undo``, ``%undo N``, ``%undo --to N``, N a positive integer)."""
    found = UNDO_CELL.fullmatch(code)
    args = (found.group("args") or "").split() if found else ["?"]
    if not args:
        return Request()
    if len(args) == 1 and args[0].isdecimal() and int(args[0]) > 0:
        return Request(cells=int(args[0]))
    if args[0].startswith("--to="):
        args = ["--to", args[0].removeprefix("--to="), *args[1:]]
    if len(args) == 2 and args[0] == "--to" and args[1].isdecimal() and int(args[1]) > 0:
        return Request(to=int(args[1]))
    given = printable(" ".join(args))[:MAX_LINE]
    raise UsageError(f"%undo does not take '{given}': {USAGE}.")


def first_line(code: str) -> str:
    """The first line of ``code`` that is not blank, bounded and printable, for a note."""
    line = next((line.strip() for line in code.splitlines() if line.strip()), "")
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 3].rstrip() + "..."
    return printable(line)


@dataclass
class Ran:
    """A cell an undo can take back: its execution count, first line (``first_line``), and
    what it changed in the workspace (None: nothing, or not known yet)."""

    count: int
    line: str = ""
    files: WorkspaceFiles | None = None


@dataclass(eq=False)
class Point:
    """The state before cell ``cells[0]`` and the cells run since (restoring it undoes them
    all), each with what it changed in the workspace."""

    checkpoint: Checkpoint
    cells: list[Ran] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.cells[0].count


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

    async def before(self, session: Session, cell: int, code: str = "") -> list[str]:
        """Keep the state as it is before ``cell`` (its text: ``code``) runs; return notes for
        the person (a checkpoint skipped, an older one dropped to make room, one the OOM killer
        took).

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
                self._ran(Ran(cell, first_line(code)))
                if self._points:
                    again = f"cells [{self._points[-1].first}] to [{cell}]"
                    notes.append(
                        f"cell [{cell}] cannot be undone alone: {exc} (an undo now goes back "
                        f"over {again})"
                    )
                else:
                    notes.append(f"cell [{cell}] cannot be undone: {exc}")
                return notes
        self._points.append(Point(checkpoint, [Ran(cell, first_line(code))]))
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

    def _ran(self, cell: Ran) -> None:
        """``cell`` ran without a checkpoint of its own: the latest one's undo covers it."""
        if self._points:
            self._points[-1].cells.append(cell)

    def after(self, cell: int, files: WorkspaceFiles | None) -> None:
        """``cell`` ended, having changed ``files`` in its workspace (kept for the undo's note)."""
        if self._points and files is not None and not files.empty:
            for ran in self._points[-1].cells:
                if ran.count == cell:
                    ran.files = files

    def lost(self) -> list[str]:
        """Forget the checkpoints the sandbox could not make and those the OOM killer took
        (their cells join the point before, whose undo now covers them); a note for each."""
        notes: list[str] = []
        whys: list[str] = []  # (newest first: the one an undo would have used says why not)
        for index in range(len(self._points) - 1, -1, -1):
            point = self._points[index]
            if point.checkpoint.alive:
                continue
            why = point.checkpoint.lost or "it is gone"
            del self._points[index]
            if index > 0:
                self._points[index - 1].cells += point.cells
            if point.checkpoint.busy:  # (cells sent at once: one undo goes back over them)
                whys.append(f"cell [{point.first}] came at once after the one before")
                continue
            if point.checkpoint.taken is False:
                why = why.removeprefix("it could not be made: ")
                whys.append(f"the state before cell [{point.first}] could not be kept: {why}")
                if index > 0:
                    again = f"cells [{self._points[index - 1].first}] to [{point.cells[-1].count}]"
                    notes.append(
                        f"cell [{point.first}] cannot be undone alone: {why} (an undo now goes "
                        f"back over {again})"
                    )
                else:
                    notes.append(f"cell [{point.first}] cannot be undone: {why}")
                continue
            whys.append(f"the state kept to undo cell [{point.first}] was dropped: {why}")
            notes.append(
                f"the state kept to undo cell [{point.first}] is gone: {why} (checkpoints are "
                "the first processes killed when memory runs short, so that the code keeps its "
                "memory)"
            )
        if whys:
            self._why_none = whys[0]
        return notes

    async def _drop_oldest(self) -> int:
        oldest = self._points.pop(0)
        await asyncio.to_thread(oldest.checkpoint.close)
        return oldest.first

    # -- the undo ------------------------------------------------------------------------------

    async def undo(self, session: Session, asked: Request | None = None) -> Outcome:
        """Make the checkpoint ``asked`` for (the last cell's: None) the session's state, and
        drop those kept after it; say what that undid and what it did not, or why nothing was
        undone (then nothing changed)."""
        asked = asked or Request()
        if not self.keep:
            return Outcome(
                "Nothing to undo: checkpoints are off for this kernel (SandboxKernel.checkpoints "
                "= 0; install it with --checkpoints N to keep the state before the last N cells)."
            )
        await self.stale(session)
        notes = self.lost()
        if not self._points:
            return Outcome(f"Nothing to undo: {self._why_none}.", ())
        index = self._target(asked)
        if isinstance(index, str):
            return Outcome(f"Nothing was undone: {index}.")
        point, later = self._points[index], self._points[index + 1 :]
        try:
            await asyncio.to_thread(session.restore, point.checkpoint)
        except (ForkError, SandboxError) as exc:
            del self._points[index]
            if index:
                self._points[index - 1].cells += point.cells
            self._why_none = f"the state kept to undo cell [{point.first}] is gone"
            return Outcome(f"Nothing was undone: {exc}.")
        del self._points[index:]
        for dropped in later:  # (states of what was undone: nothing goes back to them)
            await asyncio.to_thread(dropped.checkpoint.close)
        self._why_none = (
            f"the state kept before cell [{point.first}] was the last one "
            f"(the kernel keeps {self.keep}: SandboxKernel.checkpoints)"
        )
        cells = [ran for undone in (point, *later) for ran in undone.cells]
        said = self._said(cells, asked)
        return Outcome(
            "\n".join([*(f"[rewyn: {n}]" for n in notes), said]), tuple(r.count for r in cells)
        )

    def _target(self, asked: Request) -> int | str:
        """The index of the point to go back to for ``asked``, or why there is none."""
        points = self._points
        if asked.to is not None:
            for index, point in enumerate(points):
                if any(ran.count == asked.to for ran in point.cells):
                    return index
            return (
                f"the state before cell [{asked.to}] is not kept: an undo can go back to cell "
                f"[{points[0].first}] at most, over {self._reach()}"
            )
        index, cells = len(points) - 1, len(points[-1].cells)
        while cells < asked.cells and index > 0:
            index -= 1
            cells += len(points[index].cells)
        if cells < asked.cells:
            return (
                f"{asked.cells} cells were asked for, and the state kept goes back {cells} "
                f"(to before cell [{points[0].first}]: %undo --to {points[0].first})"
            )
        return index

    def _reach(self) -> str:
        """The cells an undo can go back over, for a note (bounded)."""
        counts = [ran.count for point in self._points for ran in point.cells]
        shown = ", ".join(f"[{count}]" for count in counts[-MAX_NAMED:])
        return f"cells {'..., ' if len(counts) > MAX_NAMED else ''}{shown}"

    def _said(self, cells: list[Ran], asked: Request) -> str:
        """What an undo of ``cells`` (oldest first) says: the cells, by count and first line."""
        named = [f"cell [{ran.count}] `{ran.line}`" for ran in cells[:MAX_NAMED]]
        if len(cells) > MAX_NAMED:
            more = len(cells) - MAX_NAMED
            named.append(f"{more} more cell{'s' if more > 1 else ''}, to [{cells[-1].count}]")
        listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
        lines = [
            f"Undid {listed}: the variables are as they were before cell [{cells[0].count}] ran."
        ]
        wanted = asked.cells
        if asked.to is not None and cells[0].count != asked.to:
            lines.append(
                f"(Cell [{asked.to}] ran at once after cell [{cells[0].count}], and they share "
                "one checkpoint: the state before it is the nearest one kept.)"
            )
        elif asked.to is None and len(cells) > wanted:
            lines.append(
                f"(Cells run at once share one checkpoint: {len(cells)} cells were undone, "
                f"where {wanted} {'was' if wanted == 1 else 'were'} asked for.)"
            )
        lines.append(
            "Files are not rolled back, and threads the code had started do not run in the "
            "restored state."
        )
        for ran in cells:
            if ran.files is not None:
                lines += self._files(ran.count, ran.files)
        lines.append(
            f"%undo again goes back over cell [{self._points[-1].first}]."
            if self._points
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
        one undoes (None: none), the cells ``%undo --to`` can go back to (the latest
        ``MAX_REACH``, oldest first), and the cells a reply's undo just undid."""
        live = [point for point in self._points if point.checkpoint.alive]
        reach = [ran.count for point in live for ran in point.cells]
        state: dict[str, Any] = {
            "available": len(live),
            "cell": live[-1].first if live else None,
            "reach": reach[-MAX_REACH:],
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
