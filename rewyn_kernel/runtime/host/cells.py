"""One worker's workspace, execution by execution: a fresh view for each, the last one's writes
published (host/workspace.py says what the workspace is; host/views.py how a root host mounts
it).

``WorkspaceCells`` is made by a provider's launch and owned by the worker it launched: the
session calls ``end`` after each execution (whatever its ending: what a cell that timed out
or crashed wrote is the person's work too), and the worker's ``close`` calls ``close``, which
publishes what is left and removes the staging folder and the host's mounts.

Where the view is mounted decides who swaps it: a root host mounts it itself (``view``); on an
ordinary host the sandbox's supervisor does, through its mounter, on a ``view`` frame.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rewyn_kernel.runtime.host.scratch import remove_tree
from rewyn_kernel.runtime.host.views import WorkspaceView
from rewyn_kernel.runtime.host.workspace import (
    BLOCK,
    MAX_DEPTH,
    Budget,
    FileChanges,
    Workspace,
    allocated,
    hide_store,
    holds_writes,
)
from rewyn_kernel.runtime.worker.config import WorkspaceSetting
from rewyn_kernel.runtime.worker.frames import ViewFrame

if TYPE_CHECKING:
    from rewyn_kernel.runtime.host.channel import LiveWorker

VIEW_TIMEOUT = 10.0
"""Seconds the host waits for a sandbox's mounter to swap the view."""
WATCH_INTERVAL = 0.2
"""Seconds between two looks at the workspace's filesystem while the quota is watched."""


class WorkspaceCells:
    """The staging folder of one worker and the cycle of its views (see the module)."""

    def __init__(
        self,
        workspace: Workspace,
        staging: Path,
        budget: Budget,
        *,
        view: WorkspaceView | None = None,
        scratch: Path | None = None,
    ) -> None:
        """``view``: the host's own mounts (a root host), else the sandbox's mounter swaps the
        view. ``scratch``: the sandbox's scratch directory, whose use counts in the budget."""
        self.workspace = workspace
        self.staging = staging
        self.budget = budget
        self.view = view
        self.scratch = scratch
        self.cell = 0
        self.note = ""
        """What the worker should say of this workspace (set by the provider)."""
        self.keep: list[str] = []
        """Folders inside the workspace the sandbox's Python runs from (a project's .venv),
        relative: bound again over a host's anchor, which is empty until the first view is
        mounted on it (``ready``), so the sandbox can start; the view covers them."""
        self._lock = threading.Lock()
        self._closed = False
        self._pending: list[Path] = []
        """Upper folders of earlier views: published again at each end (a process of the code
        may still write through a file or folder it opened in them)."""
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._stopping = False
        """The watcher is stopping the worker: a ``close`` meanwhile (from the worker's
        teardown, which that stop waits for) must not wait for the watcher."""
        self._final = FileChanges()

    # -- the first view ----------------------------------------------------------------------

    def first(self) -> WorkspaceSetting:
        """Prepare the first execution's view (a host's view is mounted once the sandbox is
        up: see ``ready``); return the worker's ``workspace`` setting."""
        if self.view is None:
            self._next_upper()
        else:
            self.cell = 0
        view = self.view
        return WorkspaceSetting(
            path=str(self.workspace.root),
            protected=tuple(self.protected()),
            cell=self.cell,
            note=self.note,
            # (a host's view: its anchor, and what to keep under it; else the sandbox's
            # mounter mounts each view, from the staging folder)
            bind=str(view.anchor) if view is not None else None,
            keep=tuple(self.keep) if view is not None else (),
            staging=os.path.relpath(self.staging, self.workspace.root) if view is None else None,
        )

    def ready(self) -> None:
        """The sandbox is up (its binds of the anchor made): mount a host's first view on the
        anchor, which now reaches it. Before, the sandbox would have bound the view itself,
        and no later one would have reached it. Raise OSError when it cannot be mounted."""
        with self._lock:
            if self.view is not None and self.cell == 0:
                self._next_upper()

    def protected(self) -> list[str]:
        return self.workspace.protection.existing()

    def _next_upper(self) -> Path:
        """Make the next execution's upper and work folders (a host view also mounts them)."""
        self.cell += 1
        if self.view is not None:
            return self.view.next_cell(self.cell, self.protected())
        cell = self.staging / f"cell-{self.cell}"
        (cell / "upper").mkdir(parents=True)
        (cell / "work").mkdir()
        hide_store(cell / "upper")
        owner = self.staging.stat()
        if (owner.st_uid, owner.st_gid) != (os.getuid(), os.getgid()):
            # (the code's uid mounts and writes them: a root host's fallback, see local.py)
            for folder in (cell, cell / "upper", cell / "work"):
                os.chown(folder, owner.st_uid, owner.st_gid)
        return cell / "upper"

    # -- after each execution ----------------------------------------------------------------

    def end(self, worker: LiveWorker | None, label: str) -> FileChanges:
        """After an execution: give the next one a fresh view, then publish what this one
        wrote. ``worker``: the channel to ask the sandbox's mounter (None: it is gone)."""
        with self._lock:
            if self._closed:  # (the worker closed first: what its close published, once)
                final, self._final = self._final, FileChanges()
                return final
            done = self._current()
            changes = FileChanges()
            if self.cell and not holds_writes(done) and self._unchanged():
                # Nothing to publish, and the person changed no folder's entries since the
                # view was mounted (a file changed in place reads through it as it is now):
                # the view stays. What a process of the code writes later is published then.
                return self._publish(label) if self._pending else changes
            try:
                upper = self._next_upper()
            except OSError as exc:
                changes.notes.append(f"the workspace's next view could not be made: {exc}")
                upper = None
            if upper is not None and self.view is None:
                why = self._swap(worker)
                if why:
                    changes.notes.append(why)
            self._pending.append(done)
            published = self._publish(label)
            published.notes[:0] = changes.notes
            if published.refused:
                shown = "; ".join(published.refused[:5])
                more = published.counts["refused"] - min(5, len(published.refused))
                published.notes.append(
                    f"not published in the workspace: {shown}"
                    + (f" (and {more} more)" if more else "")
                )
            return published

    def _unchanged(self) -> bool:
        """Whether every folder of the workspace has the entries it had when the view was
        mounted (overlayfs caches a merged folder's listing, and what it found missing: a
        view mounted before the person added a file may not show it)."""
        self.workspace.protection.existing()
        return self.workspace.protection.unchanged

    def _current(self) -> Path:
        return self.staging / f"cell-{self.cell}" / "upper"

    def _swap(self, worker: LiveWorker | None) -> str:
        """Ask the sandbox's mounter for the view of cell ``self.cell``: '' when it is up."""
        if worker is None or worker.ended:
            return ""
        header = ViewFrame(
            id=f"view-{self.cell}", cell=self.cell, protected=tuple(self.protected())
        )
        reply = worker.request(header, "view_done", VIEW_TIMEOUT)
        if reply is None:
            return "the workspace's view could not be renewed (the sandbox did not answer)"
        if not reply.ok:
            return f"the workspace's view could not be renewed: {reply.detail}"
        return ""

    def _publish(self, label: str) -> FileChanges:
        """Publish the pending upper folders. Nothing the code made raises out of here: an
        error leaves that folder pending (published, or refused, next time) and says so."""
        total = FileChanges()
        scratch = _used(self.scratch)
        for upper in list(self._pending):
            try:
                changes = self.workspace.publish(
                    upper, label=label, budget=self.budget, scratch_used=scratch
                )
            except Exception as exc:  # (the host must reply, whatever the code made)
                total.notes.append(f"the workspace could not be published: {exc!r}")
                continue
            _merge(total, changes)
            if not holds_writes(upper):
                self._pending.remove(upper)
                if upper != self._current():
                    _forget(upper.parent)
        return total

    # -- the quota, while the code writes ----------------------------------------------------

    def watch(self, stop: Callable[[str], None]) -> None:
        """Bound what the code writes in its views by the budget as it writes (publication
        only refuses afterwards): a thread looks at the workspace's filesystem every
        ``WATCH_INTERVAL``; when its use has grown by more than the budget left, it measures
        the views' upper folders, and calls ``stop`` with the reason when they hold more (the
        worker is killed, as the memory limit kills: the quota holds within what can be
        written in one interval). Nothing to watch without a limit."""
        if self.budget.limit is None or self._watcher is not None or self._closed:
            return
        self._watcher = threading.Thread(
            target=self._watch, args=(stop,), name="rewyn-workspace-quota", daemon=True
        )
        self._watcher.start()

    def _watch(self, stop: Callable[[str], None]) -> None:
        """The watcher's loop: it never dies of what the code made (a limit it reaches, or an
        error, stops the code instead: the quota is never left unwatched)."""
        try:
            why = self._watching()
        except Exception as exc:  # (whatever it is, the code stops)
            why = f"the workspace's disk quota could not be watched ({exc!r}): the sandbox stopped"
        if why:
            with self._lock:
                if self._closed:  # (closed meanwhile: the code is stopped already)
                    return
                self._stopping = True
            stop(why)  # (it returns once the worker is torn down, by whichever thread)

    def _watching(self) -> str:
        base = _fs_used(self.workspace.root)
        limit = (self.budget.limit or 0) >> 20
        while not self._stop.wait(WATCH_INTERVAL):
            used = _fs_used(self.workspace.root)
            left = self.budget.remaining(_used(self.scratch))
            if left is None or used - base <= left:
                continue
            with self._lock:
                uppers = [*self._pending, self._current()]
            measured = [_tree_blocks(upper, self.workspace.held) for upper in uppers]
            if any(size is None for size in measured):
                return (
                    f"the sandbox's disk quota (disk_limit_mb={limit}) cannot be measured: the "
                    f"code nested folders deeper than {MAX_DEPTH} in its workspace while it "
                    "wrote past what was left; the sandbox was stopped"
                )
            written = sum(size or 0 for size in measured)
            base = used - written  # (what else grew on that filesystem is not the code's)
            if written > left:
                return (
                    f"the sandbox's disk quota (disk_limit_mb={limit}) is used up: the code "
                    f"wrote {written >> 20} MiB in its workspace where {left >> 20} MiB were "
                    "left; the sandbox was stopped (what fits is still published)"
                )
        return ""

    # -- the end ---------------------------------------------------------------------------

    def close(self, label: str = "closed") -> FileChanges:
        """The worker is gone: publish what its views still hold, remove the staging folder
        and the host's mounts. Idempotent."""
        with self._lock:
            if self._closed:
                return FileChanges()
            self._closed = True
            self._stop.set()
            stopping = self._stopping
            if self.view is not None:
                self.view.remove()
            self._pending.append(self._current())
            changes = self._publish(label)
            self._final = changes
            try:
                remove_tree(self.staging)
            except OSError as exc:
                changes.notes.append(f"the workspace's staging folder was not all removed: {exc}")
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread() and not stopping:
            watcher.join()  # (a watcher stopping the worker ends once the teardown is done)
        return changes


def _merge(into: FileChanges, more: FileChanges) -> None:
    for kind in ("created", "changed", "deleted", "refused"):
        for path in getattr(more, kind):
            into.add(kind, path)
        into.counts[kind] += more.counts[kind] - len(getattr(more, kind))
    into.notes += more.notes
    into.versions += more.versions
    into.bytes_written += more.bytes_written


def _used(scratch: Path | None) -> int:
    if scratch is None:
        return 0
    try:
        info = os.statvfs(scratch)
    except OSError:
        return 0
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def _fs_used(path: Path) -> int:
    """What a filesystem holds, as the budget counts it (bytes, and a block per inode)."""
    try:
        info = os.statvfs(path)
    except OSError:
        return 0
    inodes = info.f_files - info.f_ffree
    return (info.f_blocks - info.f_bfree) * info.f_frsize + inodes * BLOCK


def _tree_blocks(
    folder: Path, held: Mapping[tuple[int, int], tuple[tuple[int, ...], int]] | None = None
) -> int | None:
    """What ``folder`` holds, as the budget counts it: each entry's allocated bytes, at least
    a block (an inode is disk too); links never followed; of a file ``held`` (published
    already, kept while the code may write it: ``Workspace.held``), only what it grew by
    since. Iterative, by descriptors, at most ``MAX_DEPTH`` folders deep: None where the tree
    is deeper (it cannot be measured whole)."""
    total = 0
    try:
        top = os.open(folder, _DIRECTORY)
    except OSError:
        return 0
    stack: list[tuple[int, list[str]]] = []
    try:
        stack.append((top, _names(top)))
        while stack:
            fd, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            name = names.pop()
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISCHR(info.st_mode):  # (a whiteout is the overlay's, not data)
                    continue
                counted = held.get((info.st_dev, info.st_ino)) if held else None
                total += allocated(info) - (counted[1] if counted else 0)
                if stat.S_ISDIR(info.st_mode):
                    if len(stack) >= MAX_DEPTH:
                        return None
                    inner = os.open(name, _DIRECTORY, dir_fd=fd)
                    stack.append((inner, []))  # (on the stack first: closed whatever happens)
                    stack[-1] = (inner, _names(inner))
            except OSError:
                continue
    finally:
        for fd, _ in stack:
            os.close(fd)
    return max(0, total)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def _forget(cell: Path) -> None:
    """Remove an old cell's folders (its view is unmounted, its upper published and empty)."""
    with contextlib.suppress(OSError):
        remove_tree(cell)


tree_blocks = _tree_blocks
"""(For a scratch folder's watcher: ``providers/local/files.py``.)"""
fs_used = _fs_used
