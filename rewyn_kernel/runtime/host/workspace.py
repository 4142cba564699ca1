"""The workspace: the person's folder the code works in, as on ipykernel, with nothing lost.

The code sees the workspace at its own path through an overlay: the person's files below, the
code's writes above, in a staging folder on the workspace's own filesystem
(``<workspace>/.rewyn/staging/...``). At the end of each execution (a notebook's cell, an agent's
call) the host *publishes* what the code wrote into the folder itself, and the sandbox gets a
fresh overlay for the next execution, so a file the person edited in between is what the code
reads next.

A file is published as a copy, never as the code's own inode (``_copy_in``): the blocks are
shared where the filesystem can (``FICLONE``: btrfs, XFS, bcachefs), else only its data is
copied, in the kernel (``copy_file_range``), holes kept. Renaming the code's inode in would be
cheaper on ext4, but a descriptor of it still open (a variable, a thread, a child, a descriptor
passed over a socket, a shared mapping, a reopen through ``/proc`` or through an old view's
folder) would then write the person's file after the person's own edit, with no version kept
and past the quota; no look at the sandbox's processes finds every one of those, and Linux has
no revoke. With a copy nothing the code holds reaches the folder: it reaches its own inode,
which stays in its upper folder while a process may still write it (a read lease, which the
kernel grants only where no one has the inode open for writing, decides: ``_unwritten``).
There the quota watcher measures what it grows by, and the next publication publishes it
again if it changed, the person's version kept first (``Workspace.held``).

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
import ctypes
import dataclasses
import errno
import fcntl
import fnmatch
import json
import os
import re
import signal
import stat
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
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
    ".venv",
    "jupyter_*_config.py",
    "jupyter_*_config.json",
    "ipython_config.py",
    "ipython_kernel_config.py",
)
"""Paths the code may read but never change, by name (any component of a relative path) or, with
a ``/``, by relative path: Codex's workspace-write mode keeps ``.git`` read-only, and
sandbox-runtime has a mandatory write-deny list; code that rewrote the open notebook could plant
cells in it; a project's ``.venv`` and Jupyter's and IPython's configuration files run on the
host. ``host_paths`` adds what the host's own Python runs from inside the workspace."""
MAX_LISTED = 200
"""Paths listed per kind in one execution's ``FileChanges`` (the counts are always whole)."""
VERSIONS_LIMIT_BYTES = 1 << 30
VERSIONS_MAX_AGE_SECONDS = 30 * 24 * 3600
BLOCK = 4096
"""What the budget counts at least for each file or folder the code writes: an inode is disk
too, and a flood of empty files must reach the quota. Past it, a file counts its allocated
blocks (``st_blocks``), never its length: a sparse terabyte is a block, and 1 GiB written is
1 GiB, whatever the code says the length is."""
MAX_DEPTH = 128
"""Folders one publication walks into, nested: what the code wrote deeper is refused (a limit
the code reaches stops the code's change, never the person's protection), and the walk holds
two descriptors per level."""
MAX_SURVEY = 100_000
"""Entries looked at in a folder of the workspace the code removes or replaces (does it hold a
protected path, what does its version weigh): one larger is not removed (it might hold one)."""
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


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A name for the store's folders from a notebook's or sandbox's name: letters, digits and
    ``._-``."""
    clean = _UNSAFE.sub("-", name).strip(".-")[:64]
    return clean or "default"


def holds_writes(upper: int | Path) -> bool:
    """Whether an upper folder holds anything of the code's (more than the store's whiteout)."""
    try:
        with os.scandir(upper) as entries:
            return any(entry.name != STORE for entry in entries)
    except OSError:
        return False


def hide_store(upper: Path) -> None:
    """Put a whiteout of the store in a fresh view's upper folder: the code's view of the
    workspace has no ``.rewyn`` (``os.listdir`` shows what ipykernel shows). What the code
    writes under that name is never published. (Anyone may make a whiteout, Linux 5.8+.)"""
    os.mknod(upper / STORE, stat.S_IFCHR, os.makedev(0, WHITEOUT))


def host_paths(root: Path) -> list[str]:
    """What this host process runs from inside ``root``, as protected paths (``/relative``):
    its interpreter's prefixes and import path there (a project's virtual environment, whatever
    its name) and each top-level folder or file of a module it imported from there (an
    editable install). The code may read them; a change would run on the host."""
    base = os.path.realpath(root)
    inside = base + os.sep
    found: set[str] = set()
    for path in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *sys.path):
        if path and (real := os.path.realpath(path)).startswith(inside):
            found.add(real[len(inside) :])
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if isinstance(where, str) and (real := os.path.abspath(where)).startswith(inside):
            found.add(real[len(inside) :].split(os.sep, 1)[0])
    return sorted(f"/{path}" for path in found)


class Protection:
    """The protected paths of a workspace (``PROTECTED``, a setting's, ``host_paths``):
    ``matches`` tells one path; ``existing`` finds those in the folder for the view to show
    read-only, rescanning only the folders whose modification time changed since the last
    look (a cell's end costs a stat per folder, not a walk), at most ``MAX_FOLDERS`` folders
    in a large tree. A scan cut short protects more, not less: each folder it did not look in
    is read-only too (and what lies in them is never published: ``matches``; nor is the
    removal of a folder that holds a protected path, whatever the view showed)."""

    MAX_FOLDERS = 4000
    MAX_FOUND = 256

    def __init__(self, root: Path, patterns: Sequence[str]) -> None:
        self.root = root
        self.patterns = tuple(patterns)
        names = [fnmatch.translate(p) for p in self.patterns if "/" not in p]
        self._name = re.compile("|".join(names)) if names else None
        self._paths = tuple(p.strip("/") for p in self.patterns if "/" in p)
        self._scanned: dict[str, tuple[tuple[int, ...], list[str], list[str]]] = {}
        """folder -> (its stat's facts, protected entries in it, other folders in it)"""
        self._changed = True
        self.unchanged = False
        """After ``existing``: whether it found every folder as the previous look did (no
        entry added, removed or renamed anywhere), having looked at all of them."""

    def matches(self, relative: str) -> bool:
        """Whether the workspace path ``relative`` is one the code may not change (a store,
        ``.rewyn``, at any depth too: a nested notebook's versions)."""
        if STORE in PurePosixPath(relative).parts:
            return True
        if self._name is not None and any(
            self._name.match(part) for part in PurePosixPath(relative).parts
        ):
            return True
        return any(
            fnmatch.fnmatchcase(relative, path) or relative.startswith(path + "/")
            for path in self._paths
        )

    def existing(self) -> list[str]:
        """The outermost paths to show read-only, now (relative, sorted): the protected paths
        in the folder and, where the scan stopped at ``MAX_FOLDERS``, the folders it did not
        look in; more than ``MAX_FOUND`` are folded into their folders (``fold``)."""
        found: list[str] = []
        stack, seen = [""], 0
        self._changed = not self._scanned
        while stack and seen < self.MAX_FOLDERS:
            relative = stack.pop()
            seen += 1
            scanned = self._scan(relative)
            if scanned is None:
                continue
            found += scanned[0]
            stack += scanned[1]
        self.unchanged = not self._changed and not stack
        return fold([*found, *stack], self.MAX_FOUND)

    def _scan(self, relative: str) -> tuple[list[str], list[str]] | None:
        folder = self.root / relative if relative else self.root
        try:
            info = os.stat(folder, follow_symlinks=False)
        except OSError:
            self._changed = True
            self._scanned.pop(relative, None)
            return None
        # (the ctime too: a folder changed twice within the clock's tick keeps its mtime)
        facts = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_nlink, info.st_size)
        known = self._scanned.get(relative)
        if known is not None and known[0] == facts:
            return known[1], known[2]
        self._changed = True
        marked: list[str] = []
        folders: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    path = f"{relative}/{entry.name}" if relative else entry.name
                    if path == STORE:
                        continue
                    if self.matches(path):
                        marked.append(path)
                    elif entry.is_dir(follow_symlinks=False):
                        folders.append(path)
        except OSError:
            return None
        self._scanned[relative] = (facts, marked, folders)
        return marked, folders


def fold(paths: Sequence[str], limit: int) -> list[str]:
    """``paths`` (relative), the outermost only, at most ``limit`` of them where it can be: the
    deepest are replaced by their folders until they fit (a folder read-only covers more, never
    less). Top-level paths are never folded into the workspace itself (the view's root stays
    writable): more than ``limit`` of them are all returned."""
    kept = _outermost(paths)
    while len(kept) > limit:
        deepest = max(len(PurePosixPath(path).parts) for path in kept)
        if deepest <= 1:
            break
        kept = _outermost(
            str(PurePosixPath(path).parent) if len(PurePosixPath(path).parts) == deepest else path
            for path in kept
        )
    return kept


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not kept or not (path == kept[-1] or path.startswith(kept[-1] + "/")):
            kept.append(path)
    return kept


def protected(relative: str, patterns: Sequence[str]) -> bool:
    """Whether the workspace path ``relative`` is one the code may not change."""
    return Protection(Path(), patterns).matches(relative)


def existing_protected(root: Path, patterns: Sequence[str]) -> list[str]:
    """The protected paths that exist in ``root`` (relative, outermost only), for a view that
    shows them read-only (see ``Protection``)."""
    return Protection(root, patterns).existing()


class Budget:
    """What the code may still write in the workspace: ``disk_limit_mb`` less what it has
    published (the allocated blocks of each file it created or replaced, at least a ``BLOCK``,
    so rewriting one file counts once; a ``BLOCK`` for each folder it made) and what its
    scratch directory holds. None: no limit."""

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

    def forget(self, relative: str) -> None:
        """``relative`` is gone, and all that was in it."""
        inside = relative + "/"
        for path in [path for path in self.own if path == relative or path.startswith(inside)]:
            del self.own[path]


def allocated(info: os.stat_result) -> int:
    """What an inode holds on disk as the budget and the version store count it: its allocated
    blocks, at least a ``BLOCK``."""
    return max(info.st_blocks * 512, BLOCK)


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
        self.patterns = (*PROTECTED, *extra_protected, *host_paths(root))
        self.protection = Protection(root, self.patterns)
        self.owner = owner
        self.store = root / STORE
        self.held: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {}
        """The code's inodes published as copies and kept in their upper folders, a process of
        the code having had them open for writing ((st_dev, st_ino) -> their ``_changes`` when
        copied, and what the copy cost the budget): published again only once changed; the
        quota watcher counts only what they grew by."""
        self.made: dict[str, tuple[int, ...]] = {}
        """What this workspace's publications put in the folder (relative -> the inode's facts
        then): a version of one of them, unchanged since, is the code's own (the store may
        drop it for room); any other version is the person's, never dropped for room."""

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
        fd = os.open(
            self.store / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
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
        versions' ids. What is refused is removed from ``upper``; what could not be moved (an
        error, or the code changing it meanwhile) stays there for the next publication.

        The walk holds a descriptor of each folder and renames by name in it, never through a
        path: a process of the code that still writes in ``upper`` (through an old view it
        holds open) cannot swap a folder for a link and lead the host elsewhere; a file is
        published only when the inode that arrived is the one that was checked."""
        changes = FileChanges()
        try:
            source = os.open(upper, _DIRECTORY)
        except OSError:
            return changes
        if not holds_writes(source):  # (a cell that wrote nothing: no lock, no walk)
            os.close(source)
            return changes
        try:
            with self.locked():
                target = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    version = _Version(self, label, changes)
                    left = budget.remaining(scratch_used) if budget is not None else None
                    state = _Publishing(self, version, changes, budget, left)
                    state.walk(source, target)
                    state.check_links(target)
                finally:
                    os.close(target)
                if version.made:
                    self.prune(keep=version.id, changes=changes)
        finally:
            os.close(source)
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
                _safe_relative(relative)
                source = self.store / "versions" / version_id / relative
                target = self.root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                self._inside(target.parent)
                folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    if _lstat(folder, target.name) is not None:
                        current.keep(folder, target.name, relative, "replaced by a restore")
                    os.rename(source, target.name, dst_dir_fd=folder)
                finally:
                    os.close(folder)
                restored.append(relative)
            self._drop_index_entries({(version_id, p) for p in restored})
        return restored

    def _inside(self, folder: Path) -> None:
        """Raise OSError unless ``folder`` resolves inside the workspace (a link of the
        person's may lead out: a restore never follows one there)."""
        real, base = os.path.realpath(folder), os.path.realpath(self.root)
        if real != base and not real.startswith(base + os.sep):
            raise OSError(errno.EXDEV, f"{folder} leads out of the workspace")

    def prune(self, *, keep: str, changes: FileChanges) -> None:
        """Drop the versions past the store's bounds, never ``keep``: any over 30 days old;
        over the size bound, the code's own versions (of what it had published, unchanged
        since), oldest first. The person's are never dropped for room: a publication refuses
        the change whose version would need it (``_Version.admit``)."""
        items = self.versions()
        now = time.time()
        total = sum(int(item.get("size", 0)) for item in items)
        dropped: set[tuple[str, str]] = set()
        for item in items:
            if item["id"] == keep:
                continue
            too_old = now - float(item.get("time", now)) > VERSIONS_MAX_AGE_SECONDS
            if not too_old and (total <= VERSIONS_LIMIT_BYTES or item.get("class") != "code"):
                continue
            where = self.store / "versions" / item["id"] / item["path"]
            _remove(where)
            total -= int(item.get("size", 0))
            dropped.add((item["id"], item["path"]))
            changes.notes.append(
                f"the kept version {item['id']} of {item['path']} was dropped "
                + (
                    "(over 30 days old)"
                    if too_old
                    else "(the store is over its bound: a version of the code's own output)"
                )
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


class _StoreFull(OSError):
    """The store cannot keep a version of the person's without dropping another of theirs."""


@dataclass
class _Survey:
    """What a path of the workspace holds, as looked at before the code removes or replaces
    it: its allocated bytes, whether a protected path is in it, whether all of it is what the
    code published (unchanged since), whether it was looked at whole (``MAX_SURVEY``)."""

    size: int = 0
    protected: bool = False
    code: bool = True
    whole: bool = True


class _Version:
    """The versions one publication keeps (made on first use)."""

    def __init__(self, workspace: Workspace, label: str, changes: FileChanges) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.workspace = workspace
        self.id = f"{stamp}-{safe_name(label)}-{uuid.uuid4().hex[:6]}"
        self.changes = changes
        self.made = False
        self._persons: int | None = None

    def survey(self, folder: int, name: str, relative: str) -> _Survey:
        """Look at ``name`` of the workspace's ``folder`` (see ``_Survey``); iterative, by
        descriptors, links never followed."""
        made = self.workspace.made
        found = _Survey()
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return found
        found.size = allocated(info)
        found.code = made.get(relative) == _facts(info)
        if not stat.S_ISDIR(info.st_mode):
            return found
        found.code = made.get(relative + "/") == _facts(info, folder=True)
        stack: list[tuple[int, str, list[str]]] = []
        seen = 0
        try:
            fd = os.open(name, _DIRECTORY, dir_fd=folder)
            stack.append((fd, relative, _listing(fd)))
            while stack:
                fd, where, names = stack[-1]
                if not names:
                    os.close(stack.pop()[0])
                    continue
                child = names.pop()
                path = f"{where}/{child}"
                seen += 1
                if seen > MAX_SURVEY or len(stack) > MAX_DEPTH:
                    found.whole = False
                    break
                if self.workspace.protection.matches(path):
                    found.protected = True
                    break
                try:
                    inner = os.stat(child, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found.size += allocated(inner)
                if not stat.S_ISDIR(inner.st_mode):
                    found.code = found.code and made.get(path) == _facts(inner)
                    continue
                found.code = found.code and made.get(path + "/") == _facts(inner, folder=True)
                into = os.open(child, _DIRECTORY, dir_fd=fd)
                stack.append((into, path, _listing(into)))
        except OSError:
            found.whole = False
        finally:
            for fd, _, _ in stack:
                os.close(fd)
        return found

    def admit(self, found: _Survey, relative: str) -> None:
        """Raise ``_StoreFull`` where keeping ``found``, a version of the person's, would take
        the person's versions past the store's bound (the code's own versions make room)."""
        if found.code:
            return
        if self._persons is None:
            self._persons = sum(
                int(item.get("size", 0))
                for item in self.workspace.versions()
                if item.get("class") != "code"
            )
        if self._persons + found.size > VERSIONS_LIMIT_BYTES:
            raise _StoreFull(
                errno.ENOSPC,
                f"its earlier version ({found.size:,} bytes) does not fit in the store of kept "
                f"versions beside the person's others (the store keeps "
                f"{VERSIONS_LIMIT_BYTES >> 20} MiB; `rewyn-kernel files` lists them)",
                relative,
            )

    def keep(
        self, folder: int, name: str, relative: str, why: str, found: _Survey | None = None
    ) -> None:
        """Move ``name`` of the workspace's ``folder`` (a descriptor; ``relative`` is its path)
        into this version: a rename, the store being on the workspace's filesystem."""
        if found is None:
            found = self.survey(folder, name, relative)
        target = self.workspace.store / "versions" / self.id / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(name, target, src_dir_fd=folder)
        if not self.made:
            self.made = True
            self.changes.versions.append(self.id)
        kind = "code" if found.code and found.whole else "person"
        if kind == "person" and self._persons is not None:
            self._persons += found.size
        entry = {
            "id": self.id,
            "path": relative,
            "why": why,
            "time": time.time(),
            "size": found.size,
            "class": kind,
        }
        with open(self.workspace.store / "versions" / "index.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


def _facts(info: os.stat_result, *, folder: bool = False) -> tuple[int, ...]:
    """What tells an inode the code published from one changed since (a folder: which one)."""
    if folder:
        return (info.st_dev, info.st_ino)
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _listing(fd: int) -> list[str]:
    """The names in the folder ``fd``, last first (``pop`` takes them in order)."""
    with os.scandir(fd) as entries:
        return sorted((entry.name for entry in entries), reverse=True)


@dataclass(frozen=True)
class _Entry:
    """One entry of an upper folder on its way: the folders (descriptors) it is in, in the
    upper folder and in the workspace, its name, its path, its stat, what the workspace has
    under that name, and who what is published there belongs to."""

    source: int
    target: int
    name: str
    relative: str
    info: os.stat_result
    there: os.stat_result | None
    owner: tuple[int, int] | None


@dataclass
class _Level:
    """One folder of the walk: its descriptors in the upper folder and in the workspace, its
    path, the names still to publish, who what is published in it belongs to, and the
    descriptor of the upper folder it is in (-1: the top)."""

    source: int
    target: int
    relative: str
    names: list[str]
    owner: tuple[int, int] | None
    parent: int = -1


class _Publishing:
    """One publication's walk of an upper folder (see Workspace.publish): iterative, at most
    ``MAX_DEPTH`` folders deep (a deeper tree is refused, never a RecursionError)."""

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
        self.over_quota = False
        self.links: list[str] = []
        """The links this walk published (checked again in the final state: check_links)."""

    def walk(self, source: int, target: int) -> None:
        """Publish the upper folder ``source`` into the workspace's folder ``target``."""
        try:
            names = _listing(source)
        except OSError:
            return
        stack = [_Level(source, target, "", names, self.owner_of(target))]
        try:
            while stack:
                level = stack[-1]
                if not level.names:
                    stack.pop()
                    if level.parent >= 0:
                        os.close(level.source)
                        os.close(level.target)
                        with contextlib.suppress(OSError):  # (emptied: gone; else kept)
                            os.rmdir(PurePosixPath(level.relative).name, dir_fd=level.parent)
                    continue
                name = level.names.pop()
                path = f"{level.relative}/{name}" if level.relative else name
                if path == STORE:
                    continue  # (the code's view hides the store: never published, never removed)
                try:
                    inner = self.entry(level, name, path, len(stack))
                except OSError as exc:
                    # (left in the upper folder: published, or refused, next time)
                    self.changes.add("refused", f"{path}: {exc.strerror or exc}")
                    continue
                if inner is not None:
                    stack.append(inner)
        finally:
            for level in stack:
                if level.parent >= 0:
                    os.close(level.source)
                    os.close(level.target)

    def entry(self, level: _Level, name: str, relative: str, depth: int) -> _Level | None:
        source, target, owner = level.source, level.target, level.owner
        info = os.stat(name, dir_fd=source, follow_symlinks=False)
        there = _lstat(target, name)
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == WHITEOUT:
            self.removed(source, target, name, relative, there)
            return None
        if self.workspace.protection.matches(relative):
            if stat.S_ISDIR(info.st_mode):  # (a folder copied up on the way: what is in it)
                self.refuse_all(source, name, relative)
            else:
                self.changes.add("refused", f"{relative}: a protected path (setting protected)")
            _remove_at(source, name)
            return None
        if stat.S_ISDIR(info.st_mode):
            if depth >= MAX_DEPTH:
                self.refuse(
                    source,
                    name,
                    f"{relative}: a folder nested deeper than {MAX_DEPTH} folders "
                    "(what is in it was not published)",
                )
                return None
            return self.folder(_Entry(source, target, name, relative, info, there, owner))
        self.file(_Entry(source, target, name, relative, info, there, owner))
        return None

    def removed(
        self, source: int, target: int, name: str, relative: str, there: os.stat_result | None
    ) -> None:
        """The code removed ``relative`` (a whiteout): keep the version, unless it is or holds
        a protected path, or its version does not fit beside the person's: then refused."""
        if there is not None and not self.workspace.protection.matches(relative):
            found = self.version.survey(target, name, relative)
            why = self.unremovable(found)
            if why:
                self.refuse(source, name, f"{relative}: {why} (its removal was not published)")
                return
            try:
                self.version.admit(found, relative)
            except _StoreFull as exc:
                self.refuse(source, name, f"{relative}: {exc.strerror} (not removed)")
                return
            self.version.keep(target, name, relative, "deleted by the code", found)
            self.changes.add("deleted", relative)
            if self.budget is not None:
                self.budget.forget(relative)
        _remove_at(source, name)

    @staticmethod
    def unremovable(found: _Survey) -> str:
        if found.protected:
            return "a folder that holds a protected path"
        if not found.whole:
            return f"a folder too large to look through (over {MAX_SURVEY:,} entries)"
        return ""

    def folder(self, entry: _Entry) -> _Level | None:
        source, target, name, relative = entry.source, entry.target, entry.name, entry.relative
        info, there = entry.info, entry.there
        inner = os.open(name, _DIRECTORY, dir_fd=source)
        try:
            if there is not None and (_opaque(inner) or not stat.S_ISDIR(there.st_mode)):
                there = self.replaced(entry)
            if there is None:
                cost = BLOCK
                if self.left is not None and cost > self.left:
                    self.over(relative, 0)
                    os.close(inner)
                    self.refuse(source, name, f"{relative}: over the disk quota (disk_limit_mb)")
                    return None
                os.mkdir(name, stat.S_IMODE(info.st_mode) & 0o777 or 0o755, dir_fd=target)
                self.own(target, name, entry.owner)
                made = os.stat(name, dir_fd=target, follow_symlinks=False)
                self.workspace.made[relative + "/"] = _facts(made, folder=True)
                self.changes.add("created", relative + "/")
                if self.left is not None:
                    self.left -= cost
                if self.budget is not None:
                    self.budget.record(relative + "/", cost)
            into = os.open(name, _DIRECTORY, dir_fd=target)
        except BaseException:
            os.close(inner)
            raise
        try:
            return _Level(inner, into, relative, _listing(inner), self.owner_of(into), source)
        except BaseException:
            os.close(inner)
            os.close(into)
            raise

    def replaced(self, entry: _Entry) -> os.stat_result | None:
        """A folder of the code's replaces what the workspace has: keep that as a version and
        return None; where it cannot be removed (a folder that holds a protected path, or
        whose version does not fit), merge into it instead and return what is there."""
        there = entry.there
        assert there is not None
        found = self.version.survey(entry.target, entry.name, entry.relative)
        why = self.unremovable(found)
        if not why:
            try:
                self.version.admit(found, entry.relative)
            except _StoreFull as exc:
                why = exc.strerror or "its version does not fit in the store"
        if why:
            if not stat.S_ISDIR(there.st_mode):
                raise OSError(errno.EEXIST, f"{why}: not replaced by a folder")
            self.changes.notes.append(
                f"{entry.relative}: {why}: the code's folder was published into it, "
                "nothing of it removed"
            )
            return there
        kind = "replaced by the code" if stat.S_ISDIR(there.st_mode) else "replaced by a folder"
        self.version.keep(entry.target, entry.name, entry.relative, kind, found)
        return None

    def over(self, relative: str, size: int) -> None:
        if not self.over_quota:
            self.over_quota = True
            self.changes.notes.append(
                "the sandbox's disk quota (disk_limit_mb) is used up: what the code "
                f"wrote past it was not kept, from {relative} ({size:,} bytes) on"
            )

    def file(self, entry: _Entry) -> None:
        """Publish a file or link. Its checks are of the inode held open (``pin``: so that no
        other can take its number meanwhile); the rename is by name, so the inode that
        arrives is compared with it, and one the code swapped in goes back (a process of the
        code may still write in this upper folder)."""
        pin = os.open(entry.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=entry.source)
        try:
            self.pinned(dataclasses.replace(entry, info=os.fstat(pin)), pin)
        finally:
            os.close(pin)

    def pinned(self, entry: _Entry, pin: int) -> None:
        source, target, name, relative = entry.source, entry.target, entry.name, entry.relative
        info, there, owner = entry.info, entry.there, entry.owner
        if stat.S_ISLNK(info.st_mode):
            destination = os.readlink("", dir_fd=pin)
            if not _link_stays_inside(self.workspace.root, relative, destination):
                self.refuse(source, name, f"{relative}: a link that leads out of the workspace")
                return
        elif not stat.S_ISREG(info.st_mode):
            self.refuse(source, name, f"{relative}: not a regular file, folder or link")
            return
        regular = stat.S_ISREG(info.st_mode)
        held = self.workspace.held.get((info.st_dev, info.st_ino)) if regular else None
        if held is not None and held[0] == _changes(info):
            self.release(source, name, info, held[1])  # (published already, unchanged since)
            return
        size = info.st_size if regular else 0
        cost = allocated(info) if regular else BLOCK
        before = self.budget.own.get(relative, 0) if self.budget is not None else 0
        if self.left is not None and cost - before > self.left:
            self.changes.add("refused", f"{relative}: over the disk quota (disk_limit_mb)")
            if not regular or _unwritten(source, name, info, remove=True):
                _remove_at(source, name)  # (else it stays, measured, while it is written)
            self.over(relative, size)
            return
        found = None
        if there is not None:
            found = self.version.survey(target, name, relative)
            why = self.unremovable(found) if stat.S_ISDIR(there.st_mode) else ""
            if why:
                self.refuse(source, name, f"{relative}: {why} (not replaced)")
                return
            try:
                self.version.admit(found, relative)
            except _StoreFull as exc:
                self.refuse(source, name, f"{relative}: {exc.strerror} (not changed)")
                return
        if regular:
            # A copy of the inode checked, beside it under a name of the host's first.
            arriving = f".rewyn-publish-{uuid.uuid4().hex}"
            copy = _copy_in(source, name, target, arriving, info)
            cost = allocated(copy)
            try:
                if self.replace(entry, arriving, found):
                    there = there or info
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(arriving, dir_fd=target)
                raise
        elif there is None and _rename_new(source, name, target, name):
            _arrived(target, name, source, info)  # (no name of the host's was in the way)
        else:
            # Beside it under a name of the host's first; on only once it is the one checked.
            arriving = f".rewyn-publish-{uuid.uuid4().hex}"
            os.rename(name, arriving, src_dir_fd=source, dst_dir_fd=target)
            _arrived(target, arriving, source, info, name)
            if there is not None or _lstat(target, name) is not None:
                self.version.keep(target, name, relative, "changed by the code", found)
                there = there or info
            os.rename(arriving, name, src_dir_fd=target, dst_dir_fd=target)
        if self.left is not None:
            self.left -= max(0, cost - before)
        self.changes.add("changed" if there is not None else "created", relative)
        if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(name, stat.S_IMODE(info.st_mode) & 0o1777, dir_fd=target)
        self.own(target, name, owner)
        with contextlib.suppress(OSError):
            published = os.stat(name, dir_fd=target, follow_symlinks=False)
            self.workspace.made[relative] = _facts(published)
        if stat.S_ISLNK(info.st_mode):
            self.links.append(relative)
        self.changes.bytes_written += size
        if self.budget is not None:
            self.budget.record(relative, cost)
        if regular:
            self.release(source, name, info, cost)

    def replace(self, entry: _Entry, arriving: str, found: _Survey | None) -> bool:
        """Put the copy ``arriving`` (in the workspace's folder) in place of ``entry.name``,
        what is there kept as a version first; whether something was there."""
        target, name = entry.target, entry.name
        if entry.there is None and _rename_new(target, arriving, target, name):
            return False
        replaced = entry.there is not None or _lstat(target, name) is not None
        if replaced:
            self.version.keep(target, name, entry.relative, "changed by the code", found)
        os.rename(arriving, name, src_dir_fd=target, dst_dir_fd=target)
        return replaced

    def release(self, source: int, name: str, copied: os.stat_result, cost: int) -> None:
        """The code's inode ``name`` of the upper folder ``source``, published as it was when
        ``copied``: removed where no process of the code has it open for writing and it is
        unchanged since; else kept there, held (``Workspace.held``)."""
        key = (copied.st_dev, copied.st_ino)
        if _unwritten(source, name, copied, remove=True):
            self.workspace.held.pop(key, None)
        else:
            self.workspace.held[key] = (_changes(copied), cost)

    def check_links(self, root: int) -> None:
        """Each link this walk published, resolved in the final state of the folder: one
        that leads out now (through what was published after it) is removed again."""
        base = os.path.realpath(self.workspace.root)
        for relative in self.links:
            real = os.path.realpath(self.workspace.root / relative)
            if real == base or real.startswith(base + os.sep):
                continue
            with contextlib.suppress(OSError):
                folder = _open_inside(root, str(PurePosixPath(relative).parent))
                try:
                    name = PurePosixPath(relative).name
                    if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                        os.unlink(name, dir_fd=folder)
                        self.workspace.made.pop(relative, None)
                        self.changes.add(
                            "refused", f"{relative}: a link that leads out of the workspace"
                        )
                finally:
                    os.close(folder)

    def refuse(self, source: int, name: str, why: str) -> None:
        self.changes.add("refused", why)
        _remove_at(source, name)

    def refuse_all(self, source: int, name: str, relative: str) -> None:
        """Report what the code wrote in a protected folder (nothing of it is published):
        iterative, by descriptors, at most ``MAX_DEPTH`` deep."""
        try:
            first = os.open(name, _DIRECTORY, dir_fd=source)
        except OSError:
            return
        stack = [(first, relative, _listing(first))]
        try:
            while stack:
                fd, where, names = stack[-1]
                if not names:
                    os.close(stack.pop()[0])
                    continue
                child = names.pop()
                path = f"{where}/{child}"
                try:
                    info = os.stat(child, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode) and len(stack) < MAX_DEPTH:
                        inner = os.open(child, _DIRECTORY, dir_fd=fd)
                        stack.append((inner, path, _listing(inner)))
                        continue
                except OSError:
                    pass
                self.changes.add("refused", f"{path}: a protected path (setting protected)")
        except OSError:
            pass
        finally:
            for fd, _, _ in stack:
                os.close(fd)

    def owner_of(self, folder: int) -> tuple[int, int] | None:
        """Who what is published in ``folder`` belongs to: the folder's owner where the code
        runs as a uid of its own (a root host's); else None: it stays the code's, the host
        user's."""
        if self.workspace.owner is None:
            return None
        try:
            info = os.fstat(folder)
        except OSError:
            return self.workspace.owner
        return info.st_uid, info.st_gid

    @staticmethod
    def own(folder: int, name: str, owner: tuple[int, int] | None) -> None:
        if owner is not None:
            with contextlib.suppress(OSError):
                os.chown(name, *owner, dir_fd=folder, follow_symlinks=False)


def _open_inside(root: int, relative: str) -> int:
    """A descriptor of the folder ``relative`` of the workspace (``root``), reached through no
    link."""
    fd = os.dup(root)
    for part in PurePosixPath(relative).parts:
        if part in (".", ""):
            continue
        try:
            inner = os.open(part, _DIRECTORY, dir_fd=fd)
        finally:
            os.close(fd)
        fd = inner
    return fd


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


RENAME_NOREPLACE = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
_RENAMEAT2 = getattr(_LIBC, "renameat2", None)


def _rename_new(source: int, name: str, target: int, new: str) -> bool:
    """Rename ``name`` of ``source`` to ``new`` of ``target`` where nothing has that name
    (renameat2 with RENAME_NOREPLACE); False where it cannot be done so (something has it
    now, or no renameat2 here): the caller goes the careful way."""
    if _RENAMEAT2 is None:
        return False
    done = _RENAMEAT2(source, os.fsencode(name), target, os.fsencode(new), RENAME_NOREPLACE)
    if done == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.EEXIST, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(number, os.strerror(number), name)


def _arrived(
    target: int, name: str, source: int, checked: os.stat_result, back: str | None = None
) -> None:
    """Raise (after moving it back to ``source`` as ``back`` or ``name``) unless what is now
    ``name`` of ``target`` is the inode ``checked``."""
    arrived = os.stat(name, dir_fd=target, follow_symlinks=False)
    if (arrived.st_dev, arrived.st_ino) != (checked.st_dev, checked.st_ino):
        os.rename(name, back or name, src_dir_fd=target, dst_dir_fd=source)
        raise OSError(errno.EAGAIN, "it changed while it was published")


FICLONE = 0x40049409
"""The ioctl that makes a file share another's blocks (btrfs, XFS, bcachefs; not ext4)."""
F_SETSIG = 10
F_SETLEASE = 1024
COPY_CHUNK = 1 << 24


def _changes(info: os.stat_result) -> tuple[int, ...]:
    """What tells that an inode of the code's was written since a look at it."""
    return (info.st_size, info.st_blocks, info.st_mtime_ns, info.st_ctime_ns)


def _copy_in(
    source: int, name: str, target: int, new: str, checked: os.stat_result
) -> os.stat_result:
    """Copy the regular file ``name`` of ``source`` into a new file ``new`` of ``target``: its
    data (its blocks shared where the filesystem can; else its data segments, in the kernel,
    its holes kept: a sparse file stays sparse), its mode (no set-id bit), its times. Return
    the copy's stat. Raise (nothing left in ``target``) unless the inode opened is ``checked``.
    (``O_NONBLOCK``: a lease the code holds on it makes the open fail, never wait.)"""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        src = os.open(name, flags, dir_fd=source)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):  # (a link, gone, a socket)
            raise OSError(errno.EAGAIN, "it changed while it was published") from exc
        raise
    try:
        opened = os.fstat(src)
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            raise OSError(errno.EAGAIN, "it changed while it was published")
        dst = os.open(
            new,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=target,
        )
        try:
            _copy_data(src, dst, opened.st_size)
            os.fchmod(dst, stat.S_IMODE(opened.st_mode) & 0o777)
            os.utime(dst, ns=(opened.st_atime_ns, opened.st_mtime_ns))
            return os.fstat(dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(new, dir_fd=target)
            raise
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_data(src: int, dst: int, size: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(dst, FICLONE, src)
        return
    offset = 0
    while offset < size:
        try:
            start = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # (no data past offset: a hole to the end)
                break
            raise
        if start >= size:
            break
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        _copy_range(src, dst, start, end)
        offset = end
    os.ftruncate(dst, size)


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    while start < end:
        count = min(end - start, COPY_CHUNK)
        try:
            done = os.copy_file_range(src, dst, count, start, start)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            data = os.pread(src, min(count, 1 << 20), start)
            done = len(data)
            view = memoryview(data)
            while view:
                view = view[os.pwrite(dst, view, start + done - len(view)) :]
        if done == 0:  # (the code shortened it meanwhile: published again once changed)
            return
        start += done


def _unwritten(source: int, name: str, seen: os.stat_result, *, remove: bool = False) -> bool:
    """Whether no process has the inode ``seen`` (``name`` of ``source``) open for writing and
    it is unchanged since ``seen``; with ``remove``, it is then removed, under the lease (an
    open for writing meanwhile waits for it). The kernel grants a read lease only where no
    one has the inode open for writing (a descriptor of any process, one in flight over a
    socket, a shared mapping); any error says False (kept: failing closed). A lease broken in
    the instant it is held signals ``SIGURG``, which is ignored unless handled."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=source
        )
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (seen.st_dev, seen.st_ino):
            return False
        fcntl.fcntl(fd, F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        try:
            if _changes(os.fstat(fd)) != _changes(seen):
                return False
            if remove:
                os.unlink(name, dir_fd=source)
            return True
        finally:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
    except OSError:
        return False
    finally:
        os.close(fd)


def _lstat(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove_at(folder: int, name: str) -> None:
    """Remove ``name`` of ``folder`` (a descriptor) and all under it; links never followed."""
    from rewyn_kernel.runtime.host.scratch import remove_at

    remove_at(folder, name)


def _opaque(folder: int) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(folder, name) == b"y":
                return True
        except OSError:
            continue
    return False


def _link_stays_inside(root: Path, relative: str, destination: str) -> bool:
    """Whether a link at ``relative`` to ``destination`` resolves inside ``root``: relative,
    its ``..`` only at its start and no more of them than the folders it is in (``x/..`` goes
    through ``x``, which may be a link by the end: lexical normalising would be wrong), and
    through no link of the workspace that leads out now. So every link of the code's leads
    inside whatever other links of the code's are published after it (each step of a chain
    stays inside); ``check_links`` looks again at the end."""
    if not destination or os.path.isabs(destination):
        return False
    parts = [part for part in destination.split("/") if part not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ".." in parts[ups:] or ups > len(PurePosixPath(relative).parent.parts):
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
