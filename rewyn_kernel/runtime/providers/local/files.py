"""The host's default ``SandboxFiles``: a sandbox's scratch as a folder on this host.

A temporary folder of the host's own (removed with the sandbox), or the ``workdir`` the spec
names (kept; only its ``.tmp`` is emptied). With ``disk_limit_mb`` the folder is a filesystem
of its own (``providers/local/quota.py``). Every read, write and removal walks from a
descriptor of the folder without following a link the code made (``host/scratch.py``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.host.cells import WATCH_INTERVAL, fs_used, tree_blocks
from rewyn_kernel.runtime.host.scratch import (
    file_facts,
    list_dir,
    read_file,
    remove_tree,
    write_file,
)
from rewyn_kernel.runtime.providers.base import SandboxFiles, ScratchEntry
from rewyn_kernel.runtime.providers.local import quota

__all__ = ["LocalFiles", "host_folder"]

GROWTH_SLACK = 1 << 20
"""While a watched folder is over its quota, what it may still grow by before the code is
stopped again (its workers then write no file: folders, empty files and the host's own
temporary folders are what is left)."""


class LocalFiles:
    """A sandbox's files in a folder on this host (see the module's docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        owned: bool,
        disk_quota: quota.Quota | None = None,
        disk: str | None = None,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.owned = owned
        """Made for this sandbox (removed with it), not a folder the caller gave."""
        self.quota = disk_quota
        """The folder's own filesystem (disk_limit_mb), removed with it."""
        self._disk = disk
        self._notes = notes
        self._lock = threading.Lock()
        self._closed = False
        self.watch_limit: int | None = None
        """Where no filesystem of its own bounds the folder: the bytes past which a watcher
        stops the code (``watch``)."""
        self._stops: list[Callable[[str], None]] = []
        self._watcher: threading.Thread | None = None
        self._stop_watching = threading.Event()
        self._over: str | None = None
        """Why the watcher stopped the code (the folder held more than ``watch_limit``)."""
        self._limited: list[Callable[[str], None]] = []
        """The stops of the one-shot workers started while the folder was over its quota
        (they write nothing): restarted once it is under it again."""
        self._held = 0
        """What the folder held when the watcher last stopped the code: a worker that adds to
        it while it is over (one forked ahead, before it looked) is stopped too."""

    @classmethod
    def make(
        cls, spec: SandboxSpec, sandbox_id: str, owner: tuple[int, int] | None = None
    ) -> LocalFiles:
        """The files of a new sandbox: the spec's ``workdir``, else a temporary folder given to
        ``owner`` (the code's host uid and gid, where the code does not run as this process),
        with a filesystem of its own where ``disk_limit_mb`` asks for one."""
        if spec.workdir is not None:
            return cls(spec.workdir, owned=False)
        path = Path(tempfile.mkdtemp(prefix=f"rewyn-{sandbox_id}-"))
        if owner is not None:
            # The code runs as another uid than this process (a root host's): its folder is
            # given to it, and so is the quota's filesystem made on it below.
            os.chown(path, *owner)
        if spec.disk_limit_mb is None:
            return cls(path, owned=True)
        try:
            made = quota.make(path, spec.disk_limit_mb)
        except OSError as exc:
            # (no root: a watcher bounds it instead, stopping the code, as the memory cap does)
            files = cls(
                path,
                owned=True,
                disk=(
                    f"watched: the code is stopped once its scratch folder holds more than "
                    f"{spec.disk_limit_mb} MiB (measured every {WATCH_INTERVAL} s: it holds "
                    f"within what can be written in that time; no filesystem of its own could "
                    f"be made: {exc})"
                ),
            )
            files.watch_limit = spec.disk_limit_mb << 20
            return files
        disk = (
            f"a {spec.disk_limit_mb} MiB filesystem of its own (ext4 on a loop device): "
            "writes past it fail with ENOSPC"
        )
        return cls(path, owned=True, disk_quota=made, disk=disk)

    @property
    def host_path(self) -> Path:
        return self.path

    @property
    def disk(self) -> str | None:
        return self._disk

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    def read(self, path: str, limit: int) -> bytes:
        return read_file(self.path, path, limit)

    def write(self, path: str, data: bytes) -> None:
        write_file(self.path, path, data)

    def list(self, path: str = ".", limit: int | None = None) -> list[ScratchEntry]:
        return list_dir(self.path, path, limit)

    def facts(self, *, limit: int, depth: int, hidden_folders: bool) -> dict[str, tuple[int, int]]:
        return file_facts(self.path, limit=limit, depth=depth, hidden_folders=hidden_folders)

    def full(self) -> bool:
        if self.quota is not None:
            return self.quota.full()
        return self._over is not None

    def watch(self, stop: Callable[[str], None], *, stateless: bool = False) -> None:
        """Bound the folder by ``watch_limit`` where it has no filesystem of its own: a thread
        (one per sandbox) looks at the filesystem every ``WATCH_INTERVAL``; once its use has
        grown by more than the limit it measures the folder, and past the limit it calls every
        worker's ``stop`` with the reason (they are killed). Workers that start while the folder
        is still over it write no file at all (``file_size_limit``: RLIMIT_FSIZE 0), so the
        code can still read and remove what it made; once it is under the limit again, new
        workers start as before, and the ``stateless`` ones (one-shot: they keep nothing)
        started meanwhile are stopped, to be started afresh; a session's keeps its state and
        writes nothing until it restarts (its note says so). It never dies of what the code
        made: an error, or a tree too deep to measure, stops the code too."""
        if self.watch_limit is None:
            return
        with self._lock:
            if self._closed:
                return
            self._stops = [*self._stops[-7:], stop]
            if self._over is not None and stateless:
                self._limited = [*self._limited[-7:], stop]
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch, name="rewyn-scratch-quota", daemon=True
                )
                self._watcher.start()

    def file_size_limit(self) -> int | None:
        """RLIMIT_FSIZE for a new worker's code where a watcher bounds the folder: the limit
        itself (no one file past it), or 0 while the folder holds more (no write at all, the
        code can still read and remove); None where nothing is watched."""
        if self.watch_limit is None:
            return None
        return 0 if self._over is not None else self.watch_limit

    def _watch(self) -> None:
        limit = self.watch_limit or 0
        base = fs_used(self.path)
        mark = 0  # (while over: the filesystem's use when it was last measured)
        while not self._stop_watching.wait(WATCH_INTERVAL):
            try:
                used = fs_used(self.path)
                if (self._over is None and used - base <= limit) or (
                    self._over is not None and used == mark
                ):
                    continue  # (over: looked at again once anything changed, removals too)
                held = tree_blocks(self.path)
                mark = used
            except Exception as exc:  # (whatever it is, the code stops)
                held, why = None, f"the scratch folder's disk quota could not be measured ({exc!r})"
            else:
                why = "the scratch folder's disk quota cannot be measured: the code nested too deep"
            if held is not None and held <= limit:
                with self._lock:
                    self._over, limited, self._limited = None, self._limited, []
                base = used - held
                for stop in limited:
                    stop("the scratch folder is under its disk quota again: restarted to write")
                continue
            if held is not None:
                if self._over is not None and held <= self._held + GROWTH_SLACK:
                    # (over, but not growing: its workers since write nothing but folders
                    # and empty files, the host's own among them)
                    continue
                self._held = held
                why = (
                    f"the sandbox's disk quota (disk_limit_mb={limit >> 20}) is used up: its "
                    "scratch folder holds more"
                )
            why += "; the code was stopped, and writes nothing until it removes some"
            with self._lock:
                self._over = why
                stops = list(self._stops)
            for stop in stops:
                stop(why)
            # (what the stopped code wrote meanwhile is no new growth: measured again, once
            # it is gone, as the mark later workers are held to)
            with contextlib.suppress(Exception):
                mark = fs_used(self.path)
                self._held = max(self._held, tree_blocks(self.path) or 0)

    def empty(self) -> None:
        with contextlib.suppress(OSError), os.scandir(self.path) as entries:
            for entry in entries:
                if entry.name == ".tmp" and entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError), os.scandir(entry.path) as inside:
                        for item in inside:
                            remove_tree(self.path / ".tmp" / item.name)
                    continue
                remove_tree(self.path / entry.name)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stops.clear()
        self._stop_watching.set()
        if self._watcher is not None:
            self._watcher.join()
        if self.quota is not None:  # (its workers are gone: nothing holds it)
            self.quota.remove()
        # (Without following any link the code made there: see scratch.py.)
        if self.owned:
            remove_tree(self.path)
        else:
            remove_tree(self.path / ".tmp")

    def __repr__(self) -> str:
        return f"LocalFiles({str(self.path)!r})"


def host_folder(files: SandboxFiles) -> Path:
    """The folder on this host that ``files`` are, for a provider that shows a host folder to
    its sandboxes; ProviderUnavailableError where they are kept elsewhere."""
    path = files.host_path
    if path is None:
        raise ProviderUnavailableError(
            f"this provider shows its sandboxes a folder of this host, and {files!r} is not one"
        )
    return path
