"""The workspace: the person's folder the code works in, as on ipykernel, with nothing lost.

The code sees the workspace at its own path through an overlay: the person's files below, the
code's writes above, in a staging folder on the workspace's own filesystem
(``<workspace>/.rewyn/staging/...``). At the end of each execution (a notebook's cell, an agent's
call) the host *publishes* what the code wrote into the folder itself, by renaming (no copy:
a 1 GiB file costs a rename, and a file the code keeps open across cells stays the one in the
folder), and the sandbox gets a fresh overlay for the next execution, so a file the person
edited in between is what the code reads next.

Before the code's change to a file that was there (overwritten, truncated, replaced, deleted)
reaches the folder, the old version is moved into ``<workspace>/.rewyn/versions/``, which the
code never sees (``rewyn-kernel files`` lists and restores them; the store is bounded by size and
age and says what it drops, never the version just kept). Protected paths (VCS folders, notebook
files, editor and shell configuration, ``PROTECTED``; a setting adds more) are read-only in the
code's view and never published. A link is published only where it resolves inside the
workspace, so no link the code makes leads a host program (jupyter_server, the restore command)
out of it; other special files are not published. What the code writes counts against the
sandbox's ``disk_limit_mb`` (see ``Budget``). Each publication is reported as ``FileChanges``.

Publication runs under a lock on the workspace's store, so two sandboxes of one folder (two
kernels of a notebook) publish one after the other and see each other's finished writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import json
import os
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

STORE = ".rewyn"
"""The folder of the workspace that holds the staging areas and the kept versions: hidden from
the code, ignored by git (a ``.gitignore`` of ``*`` inside)."""
PROTECTED = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".jj",
    ".ipynb_checkpoints",
    ".jupyter",
    ".vscode",
    ".idea",
    ".mcp.json",
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    "*.ipynb",
)
"""Paths the code may read but never change, by name (any component of a relative path) or, with
a ``/``, by relative path: Codex's workspace-write mode keeps ``.git`` read-only, and
sandbox-runtime has a mandatory write-deny list; code that rewrote the open notebook could plant
cells in it."""
MAX_LISTED = 200
"""Paths listed per kind in one execution's ``FileChanges`` (the counts are always whole)."""
VERSIONS_LIMIT_BYTES = 1 << 30
VERSIONS_MAX_AGE_SECONDS = 30 * 24 * 3600
WHITEOUT = 0  # (an overlay whiteout is a character device 0:0)
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


@dataclass
class FileChanges:
    """What one execution changed in the workspace, as published."""

    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Paths the code wrote that were not published, each with why (``path: reason``)."""
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("created", "changed", "deleted", "refused"), 0)
    )
    notes: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    """The ids of the versions kept by this execution (``rewyn-kernel files`` restores one)."""
    bytes_written: int = 0

    def add(self, kind: str, path: str) -> None:
        self.counts[kind] += 1
        listed: list[str] = getattr(self, kind)
        if len(listed) < MAX_LISTED:
            listed.append(path)

    @property
    def empty(self) -> bool:
        return not any(self.counts.values()) and not self.notes

    def to_json(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "changed": self.changed,
            "deleted": self.deleted,
            "refused": self.refused,
            "counts": self.counts,
            "notes": self.notes,
            "versions": self.versions,
        }


def protected(relative: str, patterns: Sequence[str]) -> bool:
    """Whether the workspace path ``relative`` is one the code may not change."""
    parts = PurePosixPath(relative).parts
    for pattern in patterns:
        if "/" in pattern:
            if fnmatch.fnmatchcase(relative, pattern.strip("/")) or relative.startswith(
                pattern.strip("/") + "/"
            ):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


def existing_protected(root: Path, patterns: Sequence[str], limit: int = 256) -> list[str]:
    """The protected paths that exist in ``root`` (relative, outermost only, at most ``limit``;
    a protected folder's content is not walked), for the view to show read-only."""
    found: list[str] = []
    stack = [""]
    while stack and len(found) < limit:
        relative = stack.pop()
        try:
            with os.scandir(root / relative if relative else root) as entries:
                items = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in items:
            path = f"{relative}/{entry.name}" if relative else entry.name
            if path == STORE:
                continue
            if protected(path, patterns):
                found.append(path)
                if len(found) >= limit:
                    break
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
    return found


class Budget:
    """What the code may still write in the workspace: ``disk_limit_mb`` less what it has
    published (the current size of each file it created or replaced, so rewriting one file
    counts once) and what its scratch directory holds. None: no limit."""

    def __init__(self, limit_bytes: int | None) -> None:
        self.limit = limit_bytes
        self.own: dict[str, int] = {}

    def remaining(self, scratch_used: int = 0) -> int | None:
        if self.limit is None:
            return None
        return max(0, self.limit - scratch_used - sum(self.own.values()))

    def record(self, relative: str, size: int | None) -> None:
        if size is None:
            self.own.pop(relative, None)
        else:
            self.own[relative] = size


class Workspace:
    """One workspace folder, seen from the host."""

    def __init__(
        self,
        root: Path,
        *,
        extra_protected: Sequence[str] = (),
        owner: tuple[int, int] | None = None,
    ) -> None:
        """``owner``: who published files belong to, where the code runs as another uid (a
        root host's); None: whoever the code is (the host's own user)."""
        self.root = root
        self.patterns = (*PROTECTED, *extra_protected)
        self.owner = owner
        self.store = root / STORE

    # -- the store ---------------------------------------------------------------------------

    def prepare(self, code_owner: tuple[int, int] | None) -> Path:
        """Make the store (and its staging folder, which the code's uid must write in)."""
        for folder in (self.store, self.store / "staging", self.store / "versions"):
            _real_dir(folder, 0o700 if folder == self.store else 0o755)
        ignore = self.store / ".gitignore"
        if not ignore.exists():
            with contextlib.suppress(OSError):
                _write_new(ignore, b"# rewyn-kernel's staging areas and kept versions\n*\n")
        if code_owner is not None:
            # The store is root's (0700): the code's uid reaches only its staging areas,
            # which are bound into the sandbox by path, never through the store's folder.
            os.chown(self.store / "staging", *code_owner)
        return self.store / "staging"

    def staging(self, name: str, code_owner: tuple[int, int] | None) -> Path:
        """A fresh staging folder for one worker: its cells' upper and work folders go in it."""
        base = self.prepare(code_owner) / f"{name}-{uuid.uuid4().hex[:8]}"
        base.mkdir(mode=0o755)
        if code_owner is not None:
            os.chown(base, *code_owner)
        return base

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the workspace's publication lock (one publication at a time)."""
        fd = os.open(self.store / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- publication -------------------------------------------------------------------------

    def publish(
        self,
        upper: Path,
        *,
        label: str,
        budget: Budget | None = None,
        scratch_used: int = 0,
    ) -> FileChanges:
        """Move what the code wrote in the overlay's ``upper`` folder into the workspace, the
        versions it replaces or deletes kept first; ``label`` names this execution in the
        versions' ids. What is refused is removed from ``upper`` with the rest."""
        changes = FileChanges()
        if not upper.is_dir():
            return changes
        with self.locked():
            version = _Version(self, label, changes)
            left = budget.remaining(scratch_used) if budget is not None else None
            state = _Publishing(self, version, changes, budget, left)
            state.directory(upper, "")
            if version.made:
                self.prune(keep=version.id, changes=changes)
        _clear(upper)
        return changes

    # -- versions ----------------------------------------------------------------------------

    def versions(self) -> list[dict[str, Any]]:
        """Every kept version, oldest first (the index's lines that are still in the store)."""
        index = self.store / "versions" / "index.jsonl"
        try:
            lines = index.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                item = json.loads(line)
                if (self.store / "versions" / item["id"] / item["path"]).exists() or (
                    self.store / "versions" / item["id"] / item["path"]
                ).is_symlink():
                    found.append(item)
        return found

    def restore(self, version_id: str, path: str | None = None) -> list[str]:
        """Put kept versions back where they were (all of ``version_id``, or its ``path``),
        keeping what is there now as a version of its own first. Return the paths restored."""
        restored = []
        with self.locked():
            changes = FileChanges()
            current = _Version(self, f"before-restore-{version_id}", changes)
            for item in self.versions():
                if item["id"] != version_id or (path is not None and item["path"] != path):
                    continue
                relative = item["path"]
                source = self.store / "versions" / version_id / relative
                target = self.root / relative
                _safe_relative(relative)
                if target.exists() or target.is_symlink():
                    current.keep(relative, "replaced by a restore")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(source, target)
                restored.append(relative)
            self._drop_index_entries({(version_id, p) for p in restored})
        return restored

    def prune(self, *, keep: str, changes: FileChanges) -> None:
        """Drop the oldest versions past the store's bounds (size, age), never ``keep``."""
        items = self.versions()
        now = time.time()
        total = sum(int(item.get("size", 0)) for item in items)
        dropped: set[tuple[str, str]] = set()
        for item in items:
            if item["id"] == keep:
                continue
            too_old = now - float(item.get("time", now)) > VERSIONS_MAX_AGE_SECONDS
            if total <= VERSIONS_LIMIT_BYTES and not too_old:
                continue
            where = self.store / "versions" / item["id"] / item["path"]
            _remove(where)
            total -= int(item.get("size", 0))
            dropped.add((item["id"], item["path"]))
            changes.notes.append(
                f"the kept version {item['id']} of {item['path']} was dropped "
                f"({'over 30 days old' if too_old else 'the store is over 1 GiB'})"
            )
        if dropped:
            self._drop_index_entries(dropped)

    def _drop_index_entries(self, gone: set[tuple[str, str]]) -> None:
        index = self.store / "versions" / "index.jsonl"
        try:
            lines = index.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        kept = []
        for line in lines:
            try:
                item = json.loads(line)
                if (item["id"], item["path"]) in gone:
                    continue
            except (ValueError, TypeError, KeyError):
                continue
            kept.append(line)
        temporary = index.with_suffix(".tmp")
        temporary.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        os.replace(temporary, index)


class _Version:
    """The versions one publication keeps (made on first use)."""

    def __init__(self, workspace: Workspace, label: str, changes: FileChanges) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.workspace = workspace
        self.id = f"{stamp}-{label}-{uuid.uuid4().hex[:6]}"
        self.changes = changes
        self.made = False

    def keep(self, relative: str, why: str) -> None:
        """Move the workspace's ``relative`` into this version (a rename: same filesystem)."""
        source = self.workspace.root / relative
        target = self.workspace.store / "versions" / self.id / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        info = os.lstat(source)
        size = _tree_size(source) if stat.S_ISDIR(info.st_mode) else info.st_size
        os.rename(source, target)
        if not self.made:
            self.made = True
            self.changes.versions.append(self.id)
        entry = {"id": self.id, "path": relative, "why": why, "time": time.time(), "size": size}
        with open(self.workspace.store / "versions" / "index.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


class _Publishing:
    """One publication's walk of an upper folder (see Workspace.publish)."""

    def __init__(
        self,
        workspace: Workspace,
        version: _Version,
        changes: FileChanges,
        budget: Budget | None,
        left: int | None,
    ) -> None:
        self.workspace = workspace
        self.version = version
        self.changes = changes
        self.budget = budget
        self.left = left

    def directory(self, upper: Path, relative: str) -> None:
        try:
            with os.scandir(upper) as entries:
                items = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            return
        for entry in items:
            path = f"{relative}/{entry.name}" if relative else entry.name
            try:
                self.entry(Path(entry.path), path, entry.stat(follow_symlinks=False))
            except OSError as exc:
                self.changes.add("refused", f"{path}: {exc.strerror or exc}")

    def entry(self, source: Path, relative: str, info: os.stat_result) -> None:
        root = self.workspace.root
        target = root / relative
        there = target.exists() or target.is_symlink()
        if relative == STORE or relative.startswith(STORE + "/"):
            return  # (the store is hidden from the code; nothing of it is published)
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == WHITEOUT:
            if there and not protected(relative, self.workspace.patterns):
                self.version.keep(relative, "deleted by the code")
                self.changes.add("deleted", relative)
                if self.budget is not None:
                    self.budget.record(relative, None)
            return
        if protected(relative, self.workspace.patterns):
            self.changes.add("refused", f"{relative}: a protected path (setting protected)")
            return
        if stat.S_ISDIR(info.st_mode):
            if _opaque(source) and there:
                self.version.keep(relative, "replaced by the code")
                there = False
            if there and not target.is_dir():
                self.version.keep(relative, "replaced by a folder")
                there = False
            if not there:
                target.mkdir(mode=stat.S_IMODE(info.st_mode) or 0o755)
                self.own(target, None)
            self.directory(source, relative)
            return
        if stat.S_ISLNK(info.st_mode):
            destination = os.readlink(source)
            if not _link_stays_inside(root, relative, destination):
                self.changes.add("refused", f"{relative}: a link that leads out of the workspace")
                return
        elif not stat.S_ISREG(info.st_mode):
            self.changes.add("refused", f"{relative}: not a regular file, folder or link")
            return
        size = info.st_size if stat.S_ISREG(info.st_mode) else 0
        if self.left is not None:
            before = self.budget.own.get(relative, 0) if self.budget is not None else 0
            if size - before > self.left:
                self.changes.add("refused", f"{relative}: over the disk quota (disk_limit_mb)")
                self.changes.notes.append(
                    f"{relative} ({size:,} bytes) was not kept: the sandbox's disk quota "
                    "(disk_limit_mb) is used up"
                )
                return
            self.left -= max(0, size - before)
        if there:
            self.version.keep(relative, "changed by the code")
            self.changes.add("changed", relative)
        else:
            self.changes.add("created", relative)
        owner = self.owner_for(target.parent)
        os.rename(source, target)
        if owner is not None:
            with contextlib.suppress(OSError):
                os.lchown(target, *owner)
        self.changes.bytes_written += size
        if self.budget is not None:
            self.budget.record(relative, size)

    def own(self, path: Path, owner: tuple[int, int] | None) -> None:
        owner = owner or self.owner_for(path.parent)
        if owner is not None:
            with contextlib.suppress(OSError):
                os.lchown(path, *owner)

    def owner_for(self, folder: Path) -> tuple[int, int] | None:
        """Who a published file belongs to: the workspace's owner where the code runs as a
        uid of its own (the folder's owner), else as it is."""
        if self.workspace.owner is None:
            return None
        try:
            info = os.stat(folder)
        except OSError:
            return self.workspace.owner
        return info.st_uid, info.st_gid


def _opaque(path: Path) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _link_stays_inside(root: Path, relative: str, destination: str) -> bool:
    """Whether a link at ``relative`` to ``destination`` resolves inside ``root`` (relative,
    and through no link of the workspace that leads out)."""
    if os.path.isabs(destination):
        return False
    where = os.path.normpath(os.path.join(os.path.dirname(relative), destination))
    if where == ".." or where.startswith("../") or os.path.isabs(where):
        return False
    real = os.path.realpath(root / where)
    base = os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def _safe_relative(relative: str) -> None:
    parts = PurePosixPath(relative).parts
    if PurePosixPath(relative).is_absolute() or ".." in parts:
        raise OSError(errno.EINVAL, f"not a path inside the workspace: {relative}")


def _tree_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _clear(folder: Path) -> None:
    """Empty ``folder`` (what was refused, and the empty folders left): links unlinked, never
    followed."""
    from rewyn_kernel.runtime.host.scratch import remove_tree

    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            remove_tree(Path(entry.path))


def _remove(path: Path) -> None:
    from rewyn_kernel.runtime.host.scratch import remove_tree

    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _real_dir(path: Path, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise OSError(f"{path} is not a folder (a link or a file is in its place)")


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
