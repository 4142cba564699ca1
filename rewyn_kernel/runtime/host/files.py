"""The files beside a notebook, as the code in its sandbox sees them.

A sandbox with ``files_dir`` runs its code in that directory. Where the provider can, the code
sees it through an overlay: the person's files read-only below, the code's writes in a directory
of the sandbox's own above, ``<files_dir>/sandbox-files/<files_name>``. A file the code writes
is then found where it wrote it (``open('out.csv')`` after ``df.to_csv('out.csv')``), the
person's files never change, and what the code wrote stays beside the notebook, in the file
browser, across restarts: nothing removes it.

The host makes the two directories overlayfs needs (the writes and its work directory, on the
same filesystem) without following any link, since the code may have made some there.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewyn_kernel.runtime._spec import SandboxSpec

WRITES_DIR = "sandbox-files"
"""The folder beside the notebook that holds what each sandbox wrote."""
MAX_VIEWS = 16
"""Kernels of one notebook open at once (each needs writes of its own: an overlay's upper
directory serves one mount)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class FilesView:
    """Where one sandbox's view of ``source`` keeps its writes."""

    source: Path
    """The person's directory (the notebook's), seen read-only where the provider can."""
    upper: Path
    """The code's writes: ``source/sandbox-files/<name>``."""
    work: Path
    """overlayfs's work directory, beside ``upper`` (hidden: ``.work-<name>``)."""

    def candidates(self) -> list[FilesView]:
        """This view, then the same with ``-2``, ``-3``... (another kernel of the same
        notebook holds this one's writes)."""
        views = [self]
        for number in range(2, MAX_VIEWS + 1):
            name = f"{self.upper.name}-{number}"
            views.append(
                FilesView(
                    self.source, self.upper.with_name(name), self.work.with_name(f".work-{name}")
                )
            )
        return views

    def config(self) -> dict[str, Any]:
        """The worker's ``files`` setting: the source, and each candidate's writes and work
        directories in the order to try them (the naming rule stays here, host-side)."""
        pairs = [[str(view.upper), str(view.work)] for view in self.candidates()]
        return {"source": str(self.source), "candidates": pairs}


def safe_name(name: str) -> str:
    """A directory name from a notebook's or sandbox's name: letters, digits, ``._-``."""
    clean = _UNSAFE.sub("-", name).strip(".-")[:64]
    return clean or "default"


def plan_view(source: Path, name: str) -> FilesView:
    root = source / WRITES_DIR
    clean = safe_name(name)
    return FilesView(source, root / clean, root / f".work-{clean}")


def prepare(view: FilesView, owner: tuple[int, int] | None = None) -> None:
    """Make ``view``'s writes and work directories (real directories, whatever is there);
    ``owner``: the uid and gid the code runs as, where that is not the host's (containers)."""
    root = view.upper.parent
    for directory in (root, view.upper, view.work):
        _real_dir(directory)
    if owner is not None and os.getuid() == 0:
        for directory in (view.upper, view.work):
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                if os.fstat(fd).st_uid != owner[0]:
                    os.fchown(fd, *owner)
            finally:
                os.close(fd)


def _real_dir(path: Path) -> None:
    """Make ``path`` a directory, refusing a link or a file in its place (no link followed)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a directory (a link or a file is in its place)")


def files_config(spec: SandboxSpec, owner: tuple[int, int] | None = None) -> dict[str, Any]:
    """The worker's ``files`` setting for ``spec`` (its first directories made, given to
    ``owner`` where the code runs as another uid), or nothing."""
    if spec.files_dir is None:
        return {}
    view = plan_view(spec.files_dir, spec.files_name)
    prepare(view, owner)
    return {"files": view.config()}


def hold_view(view: FilesView) -> tuple[FilesView, int]:
    """Take the first of ``view``'s candidates no other sandbox holds (a lock on its writes
    directory, as the subprocess provider's supervisor takes it, so sandboxes of either kind
    exclude each other), waiting a second for the first (a sandbox being replaced may still
    hold it). Return the candidate and the fd that holds its lock (close it to let go)."""
    import time

    _real_dir(view.upper.parent)
    for number, candidate in enumerate(view.candidates()):
        _real_dir(candidate.upper)
        fd = os.open(candidate.upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if _lock_within(fd, time.monotonic() + (1.0 if number == 0 else 0.0)):
            return candidate, fd
        os.close(fd)
    raise OSError(f"{MAX_VIEWS} sandboxes of {view.source} are open: close one")


def tidy(view: FilesView) -> None:
    """Remove the writes directories of ``view``'s candidates that the code left empty (and
    overlayfs's work directories beside them), when no sandbox holds them; then the
    ``sandbox-files`` folder itself if nothing is left in it. Only empty directories go, and
    nothing is followed: what the code wrote always stays."""
    import time

    # The sandbox's first process lets go of its lock as it dies, a moment after the host
    # saw the sandbox end (its PID namespace is torn down behind it): wait that moment.
    deadline = time.monotonic() + 1.0
    for candidate in view.candidates():
        try:
            fd = os.open(candidate.upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not _lock_within(fd, deadline):
                continue  # another sandbox of this notebook writes there
            if os.listdir(fd):
                continue
            for directory in (candidate.work / "work", candidate.work, candidate.upper):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
        except OSError:
            continue
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(view.upper.parent)


def _lock_within(fd: int, deadline: float) -> bool:
    """Take an exclusive lock on ``fd``, trying until ``deadline``; False if not had by then."""
    import fcntl
    import time

    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
