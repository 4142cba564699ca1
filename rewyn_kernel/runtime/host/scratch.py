"""The scratch directory, handled by the host without following a single link the code made.

Everything in a sandbox's scratch directory is the code's, links included: a ``result.txt`` can
be a symlink to ``~/.ssh/id_rsa``, a ``.tmp`` a symlink to ``/etc``. So every operation here walks
from a descriptor of the scratch directory itself, one component at a time, with ``O_NOFOLLOW``:
removal unlinks a link instead of entering it, a directory the code made unreadable is opened
(or chmod'ed through its own ``O_PATH`` descriptor) rather than named by path, and reading or
writing refuses links and anything that is not a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from rewyn_kernel.runtime.providers.base import ScratchEntry, ScratchError

__all__ = [
    "READ_LIMIT",
    "ScratchEntry",
    "ScratchError",
    "ensure_dir",
    "file_facts",
    "list_dir",
    "read_file",
    "remove_tree",
    "write_file",
]

READ_LIMIT = 64 * 1024 * 1024
"""The largest file ``read_file`` returns by default, in bytes."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path) -> None:
    """Remove ``path`` and all under it; links are removed, never followed. Gone already: fine.

    ``path``'s parent is the host's own (a temporary directory, or the directory a caller
    chose): only what is inside is the code's.
    """
    try:
        parent = os.open(path.parent, _DIR)
    except FileNotFoundError:
        return
    try:
        _remove(parent, path.name)
    finally:
        os.close(parent)


def remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` of the folder ``dir_fd`` and all under it, as ``remove_tree``."""
    _remove(dir_fd, name)


def _remove(dir_fd: int, name: str) -> None:
    """Remove ``name`` of ``dir_fd`` and all under it. Iterative (a tree thousands of folders
    deep is removed without recursion): a descriptor per level of the folder being emptied."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        return
    # (each level: the folder it is in, its name, its descriptor, the names still to remove)
    stack: list[tuple[int, str, int, list[str]]] = []
    try:
        stack.append((dir_fd, name, *_emptying(dir_fd, name)))
        while stack:
            parent, own, fd, left = stack[-1]
            if not left:
                stack.pop()
                os.close(fd)
                # (what could not be emptied is said for the top folder only)
                with contextlib.suppress(FileNotFoundError if not stack else OSError):
                    os.rmdir(own, dir_fd=parent)
                continue
            child = left.pop()
            with contextlib.suppress(OSError):  # best effort: the rest is still removed
                info = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(child, dir_fd=fd)
                    continue
                stack.append((fd, child, *_emptying(fd, child)))
    finally:
        for _, _, fd, _ in stack:
            os.close(fd)


def _emptying(dir_fd: int, name: str) -> tuple[int, list[str]]:
    """A descriptor of the folder ``name`` made writable, and its entries' names."""
    fd = _open_dir(dir_fd, name, repair=True)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IRWXU)  # so that what is inside can be unlinked
        with os.scandir(fd) as entries:
            return fd, [entry.name for entry in entries]
    except BaseException:
        os.close(fd)
        raise


def _open_dir(dir_fd: int, name: str, *, repair: bool = False) -> int:
    """Open the directory ``name`` (never a link to one); ``repair``: one the code made
    unreadable is given back its owner's rights first, through its own descriptor."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        if not repair:
            raise
    handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        # chmod of /proc/self/fd/N reaches the inode this O_PATH descriptor names (a directory,
        # opened without following links): no path is resolved again.
        os.chmod(f"/proc/self/fd/{handle}", stat.S_IRWXU)
    finally:
        os.close(handle)
    return os.open(name, _DIR, dir_fd=dir_fd)


def _parts(relative: str | os.PathLike[str]) -> list[str]:
    path = PurePosixPath(os.fspath(relative))
    if path.is_absolute():
        raise ScratchError(errno.EINVAL, "give a path relative to the scratch directory", str(path))
    parts = [part for part in path.parts if part not in ("", ".")]
    if ".." in parts:
        raise ScratchError(errno.EINVAL, "'..' leads out of the scratch directory", str(path))
    return parts


def _owner(fd: int) -> tuple[int, int] | None:
    """Whom what the host makes under the scratch directory (open as ``fd``) must belong to:
    its own owner (the code's user in a container), where that is not us and we may chown."""
    info = os.fstat(fd)
    mine = (os.geteuid(), os.getegid())
    if os.geteuid() != 0 or (info.st_uid, info.st_gid) == mine:
        return None
    return info.st_uid, info.st_gid


@contextmanager
def _walk(
    root: Path, parts: list[str], *, create: bool = False
) -> Iterator[tuple[int, tuple[int, int] | None]]:
    """A descriptor of the directory ``parts`` under ``root``, reached without a link, and
    whom a file made there must belong to (see ``_owner``). ``create``: make missing folders,
    each given to that owner (the code must be able to write in them)."""
    fd = os.open(root, _DIR)
    owner = _owner(fd)
    try:
        for part in parts:
            made = False
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
            try:
                inner = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ScratchError(exc.errno, "not a directory (or a link)", part) from exc
                raise
            os.close(fd)
            fd = inner
            if made and owner is not None:
                os.fchown(fd, *owner)
        yield fd, owner
    finally:
        os.close(fd)


def read_file(root: Path, relative: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file under ``root``; a link anywhere on the way is refused, and
    a file larger than ``limit`` bytes raises ScratchError."""
    *folders, name = _parts(relative) or [""]
    with _walk(root, folders) as (dir_fd, _):
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ScratchError(exc.errno, "a link: not read", str(relative)) from exc
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ScratchError(errno.EINVAL, "not a regular file", str(relative))
            if info.st_size > limit:
                raise ScratchError(
                    errno.EFBIG, f"{info.st_size} bytes, over the limit of {limit}", str(relative)
                )
            chunks, size = [], 0
            while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:  # it grew while being read
                    raise ScratchError(errno.EFBIG, f"over the limit of {limit}", str(relative))
            return b"".join(chunks)
        finally:
            os.close(fd)


def write_file(root: Path, relative: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a file under ``root`` (folders made as needed); never through a link."""
    *folders, name = _parts(relative) or [""]
    if not name:
        raise ScratchError(errno.EINVAL, "give a file name", str(relative))
    with _walk(root, folders, create=True) as (dir_fd, owner):
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ScratchError(exc.errno, "a link: not written", str(relative)) from exc
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ScratchError(errno.EINVAL, "not a regular file", str(relative))
            if owner is not None and (info.st_uid, info.st_gid) != owner:
                os.fchown(fd, *owner)  # (the code may change what it was given)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def list_dir(
    root: Path, relative: str | os.PathLike[str] = ".", limit: int | None = None
) -> list[ScratchEntry]:
    """The entries of a directory under ``root``, links shown as links, sorted by name; with
    ``limit``, at most that many (the first found: the code may have made millions)."""
    with _walk(root, _parts(relative)) as (dir_fd, _):
        entries: list[ScratchEntry] = []
        with os.scandir(dir_fd) as found:
            for entry in found:
                if limit is not None and len(entries) >= limit:
                    break
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    kind = "link"
                elif stat.S_ISDIR(info.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(info.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                entries.append(ScratchEntry(entry.name, kind, info.st_size))
        return sorted(entries, key=lambda entry: entry.name)


def file_facts(
    root: Path, *, limit: int, depth: int, hidden_folders: bool = True
) -> dict[str, tuple[int, int]]:
    """The regular files under ``root``: relative path -> (size, mtime in ns). Every folder is
    reached from ``root`` without a link (a folder the code swaps for a link is not entered);
    at most ``limit`` entries are looked at, ``depth`` levels down. ``hidden_folders=False``
    leaves out the top-level folders named ``.*`` (scratch is the code's home: ``.cache``,
    ``.ipython`` and the like)."""
    found: dict[str, tuple[int, int]] = {}
    todo: list[list[str]] = [[]]
    seen = 0
    while todo and seen < limit:
        parts = todo.pop()
        try:
            with _walk(root, parts) as (dir_fd, _), os.scandir(dir_fd) as entries:
                for entry in entries:
                    seen += 1
                    if seen > limit:
                        break
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    hidden = not parts and entry.name.startswith(".")
                    if stat.S_ISDIR(info.st_mode) and hidden and not hidden_folders:
                        continue
                    if stat.S_ISDIR(info.st_mode) and len(parts) + 1 < depth:
                        todo.append([*parts, entry.name])
                    elif stat.S_ISREG(info.st_mode):
                        found["/".join([*parts, entry.name])] = (info.st_size, info.st_mtime_ns)
        except OSError:  # (gone, or made a link, since it was listed)
            continue
    return found


def ensure_dir(root: Path, name: str) -> Path:
    """Make ``root/name`` a real directory of the host's: anything else there (a link the code
    put in its place, a file) is removed first. Return its path."""
    with _walk(root, []) as (dir_fd, _):
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
    return root / name
