"""What one execution can leave for the next (SysV IPC objects, files in shared folders)."""

from __future__ import annotations

import os

from .system import libc

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import List, Optional


def limit_sysv_ipc(limit_bytes: Optional[int]) -> bool:
    """In a fresh IPC namespace (as its root): bound SysV shared memory to ``limit_bytes`` in
    all, and message queues to a few. The segments die with the namespace."""
    values = {"msgmni": 16}
    if limit_bytes:
        values.update(shmmax=limit_bytes, shmall=max(1, limit_bytes // 4096), shmmni=64)
    ok = True
    for name, value in values.items():
        try:
            with open("/proc/sys/kernel/" + name, "w") as handle:
                handle.write(str(value))
        except OSError:
            ok = False
    return ok


def remove_sysv_shm() -> int:
    """Remove every SysV shared memory segment this process may remove; return how many."""
    c = libc()
    if c is None:
        return 0
    removed = 0
    try:
        with open("/proc/sysvipc/shm") as table:
            next(table, None)
            ids = [int(line.split()[1]) for line in table if line.strip()]
    except (OSError, ValueError, IndexError):
        return 0
    ipc_rmid = 0
    for shmid in ids:
        try:
            if int(c.shmctl(shmid, ipc_rmid, None)) == 0:
                removed += 1
        except Exception:
            pass
    return removed


def remove_sysv_ipc() -> int:
    """Remove every SysV shared memory segment, message queue and semaphore set this process
    may remove (this IPC namespace's, made by the same user); return how many."""
    c = libc()
    if c is None:
        return 0
    removed = 0
    ipc_rmid = 0
    for table, call, extra in (
        ("shm", "shmctl", ()),
        ("msg", "msgctl", ()),
        ("sem", "semctl", (0,)),
    ):
        try:
            with open("/proc/sysvipc/" + table) as handle:
                next(handle, None)
                ids = [int(line.split()[1]) for line in handle if line.strip()]
        except (OSError, ValueError, IndexError):
            continue
        function = getattr(c, call)
        for ident in ids:
            try:
                if int(function(ident, *extra, ipc_rmid, None)) == 0:
                    removed += 1
            except Exception:
                pass
    return removed


def empty_directory(path: str, keep: List[str]) -> List[str]:
    """Remove everything in the directory ``path`` (links are removed, never followed), but the
    paths of ``keep`` and the folders on the way to them. Return what could not be removed."""
    import stat as stat_module

    failed: List[str] = []
    keep_set = set(p.rstrip("/") for p in keep)
    ancestors = set()
    for kept in keep_set:
        parent = os.path.dirname(kept)
        while parent and parent != "/" and parent not in ancestors:
            ancestors.add(parent)
            parent = os.path.dirname(parent)

    def empty(dir_fd: int, where: str) -> None:
        try:
            names = os.listdir(dir_fd)
        except OSError:
            failed.append(where)
            return
        for name in names:
            full = where.rstrip("/") + "/" + name
            if full in keep_set:
                continue
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat_module.S_ISDIR(info.st_mode):
                    os.unlink(name, dir_fd=dir_fd)
                    continue
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    inner = os.open(name, flags, dir_fd=dir_fd)
                except PermissionError:
                    # (a folder the code made unreadable; nothing else runs now to swap it
                    # for a link, and it was not one a moment ago)
                    os.chmod(name, 0o700, dir_fd=dir_fd)
                    inner = os.open(name, flags, dir_fd=dir_fd)
                try:
                    if os.fstat(inner).st_dev != os.fstat(dir_fd).st_dev:
                        continue  # a mount point: not ours to empty
                    try:
                        os.fchmod(inner, 0o700)
                    except OSError:
                        pass
                    empty(inner, full)
                finally:
                    os.close(inner)
                if full not in ancestors:
                    os.rmdir(name, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            except OSError:
                failed.append(full)

    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        empty(top, path)
    finally:
        os.close(top)
    return failed
