"""Mounts the supervisor and the mounter make in the sandbox's own mount namespace (ctypes)."""

from __future__ import annotations

import os

from .system import libc

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import List, Optional


def read_only_proc_sys() -> str:
    """Make ``/proc/sys`` read-only in this mount namespace (as its root). The code runs as the
    root of the namespaces it was given (IPC, network: the sysctls of those check the writer's
    uid against their owner's root, not capabilities), so only the mount stops it. Return ""
    on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec = (
        1,
        2,
        4,
        8,
        32,
        4096,
        16384,
    )
    path = b"/proc/sys"
    if int(c.mount(path, path, None, ms_bind | ms_rec, None)) != 0:
        return "bind /proc/sys: " + os.strerror(ctypes.get_errno())
    flags = ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev | ms_noexec
    if int(c.mount(None, path, None, flags, None)) != 0:
        return "remount /proc/sys read-only: " + os.strerror(ctypes.get_errno())
    return ""


def proc_sys_writable() -> bool:
    """Whether anything under /proc/sys may still be written here (its mount is not read-only)."""
    try:
        return not os.statvfs("/proc/sys").f_flag & 1  # ST_RDONLY
    except OSError:
        return True


def private_tmpfs(path: str, limit_bytes: Optional[int]) -> bool:
    """Mount a fresh tmpfs at ``path`` in this mount namespace (as its root): POSIX shared
    memory then lives, bounded, in the sandbox and goes with it."""
    c = libc()
    if c is None:
        return False
    size = ",size=%d" % limit_bytes if limit_bytes else ""
    options = ("mode=1777" + size).encode()
    ms_nosuid, ms_nodev = 2, 4
    try:
        return int(c.mount(b"tmpfs", path.encode(), b"tmpfs", ms_nosuid | ms_nodev, options)) == 0
    except Exception:
        return False


def hide(dirs: List[str], files: List[str]) -> List[str]:
    """Cover ``dirs`` with an empty, bounded tmpfs and ``files`` with /dev/null in this mount
    namespace (as its root): the daemon sockets there (docker, containerd, podman, D-Bus) are
    then out of the code's reach, which a network namespace does not give. A file the host's
    /etc/resolv.conf names under a hidden directory is put back, read-only (DNS, where the
    network is allowed). Return what could not be hidden, in words."""
    c = libc()
    if c is None:
        return ["no ctypes here"]
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind = 1, 2, 4, 8, 32, 4096
    kept = []  # (descriptor, path) of what resolv.conf needs, opened before it is covered
    resolv = os.path.realpath("/etc/resolv.conf")
    for path in dirs:
        if resolv.startswith(path.rstrip("/") + "/") and os.path.isfile(resolv):
            try:
                kept.append((os.open(resolv, os.O_RDONLY | os.O_CLOEXEC), resolv))
            except OSError:
                pass
    failed = []
    covered = []
    flags = ms_nosuid | ms_nodev | ms_noexec
    for path in dirs:
        if int(c.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"size=1m,mode=755")) != 0:
            failed.append("%s (%s)" % (path, os.strerror(ctypes.get_errno())))
        else:
            covered.append(path.rstrip("/") + "/")
    for fd, path in kept:
        try:
            if not path.startswith(tuple(covered)):
                continue  # (its directory is the host's still: nothing to put back)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # A mount point in the fresh tmpfs; O_EXCL: never truncate a file that is there.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            source = ("/proc/self/fd/%d" % fd).encode()
            if int(c.mount(source, path.encode(), None, ms_bind, None)) == 0:
                c.mount(None, path.encode(), None, ms_remount | ms_bind | ms_rdonly, None)
        except OSError:
            pass
        finally:
            os.close(fd)
    for path in files:
        if int(c.mount(b"/dev/null", path.encode(), None, ms_bind, None)) != 0:
            failed.append("%s (%s)" % (path, os.strerror(ctypes.get_errno())))
    return failed


def cover(directory: str, keep: List[str], mode: int, limit_bytes: Optional[int]) -> str:
    """Mount a fresh tmpfs (``mode``, at most ``limit_bytes``) over ``directory`` in this mount
    namespace (as its root), then put each path of ``keep`` under it back where it was, bound
    from a descriptor opened first: a private ``/tmp`` that still holds the scratch directory,
    or a ``/root`` the code cannot enter, opened down to the interpreter. The folders made on
    the way are 0755. Return "" on success, else why not (nothing is covered then)."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_nosuid, ms_nodev, ms_bind, ms_rec = 2, 4, 4096, 16384
    inside = directory.rstrip("/") + "/"
    opened = []
    try:
        for path in sorted(set(keep)):
            if path.startswith(inside):
                opened.append((os.open(path, os.O_PATH | os.O_CLOEXEC), path))
    except OSError as exc:
        for fd, _ in opened:
            os.close(fd)
        return "%s: %s" % (exc.filename, exc.strerror)
    try:
        size = ",size=%d" % limit_bytes if limit_bytes else ""
        options = ("mode=%o%s" % (mode, size)).encode()
        flags = ms_nosuid | ms_nodev
        if int(c.mount(b"tmpfs", directory.encode(), b"tmpfs", flags, options)) != 0:
            return "mount a tmpfs on %s: %s" % (directory, os.strerror(ctypes.get_errno()))
        for fd, path in opened:
            parent = os.path.dirname(path)
            os.makedirs(parent, 0o755, exist_ok=True)
            if os.path.isdir("/proc/self/fd/%d" % fd):
                os.makedirs(path, 0o755, exist_ok=True)
            elif not os.path.exists(path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            source = ("/proc/self/fd/%d" % fd).encode()
            if int(c.mount(source, path.encode(), None, ms_bind | ms_rec, None)) != 0:
                return "bind %s back: %s" % (path, os.strerror(ctypes.get_errno()))
    except OSError as exc:
        return "%s: %s" % (exc.filename or directory, exc.strerror)
    finally:
        for fd, _ in opened:
            os.close(fd)
    return ""


def unreachable_ancestor(path: str, uid: int, gid: int) -> Optional[str]:
    """The outermost directory on the way to ``path`` that ``uid``:``gid`` (with no other
    group, and no capability) may not enter, or None when it may enter them all."""
    import stat as stat_module

    parts = [part for part in os.path.abspath(path).split("/") if part]
    current = ""
    for part in parts[:-1]:
        current += "/" + part
        try:
            info = os.stat(current)
        except OSError:
            return None  # (gone: nothing to open up)
        if not stat_module.S_ISDIR(info.st_mode):
            return None
        if info.st_uid == uid:
            bit = stat_module.S_IXUSR
        elif info.st_gid == gid:
            bit = stat_module.S_IXGRP
        else:
            bit = stat_module.S_IXOTH
        if not info.st_mode & bit:
            return current
    return None


def mount_mqueue(path: str) -> bool:
    """Mount this IPC namespace's POSIX message queue filesystem on ``path`` (an existing
    directory), so the queues left by one execution can be listed and removed."""
    c = libc()
    if c is None:
        return False
    if path.startswith("/tmp/"):  # (the sandbox's own /tmp: a folder may be made there)
        try:
            os.makedirs(path, 0o755, exist_ok=True)
        except OSError:
            return False
    if not os.path.isdir(path):
        return False
    ms_nosuid, ms_nodev, ms_noexec = 2, 4, 8
    flags = ms_nosuid | ms_nodev | ms_noexec
    try:
        return int(c.mount(b"mqueue", path.encode(), b"mqueue", flags, None)) == 0
    except Exception:
        return False


def bind(source: str, target: str) -> str:
    """Bind ``source`` (and the mounts under it) on ``target`` in this mount namespace (as its
    root). Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_bind, ms_rec = 4096, 16384
    if int(c.mount(source.encode(), target.encode(), None, ms_bind | ms_rec, None)) != 0:
        return "bind %s on %s: %s" % (source, target, os.strerror(ctypes.get_errno()))
    return ""


def overlay_at(target: str, lower: str, upper: str, work: str) -> str:
    """Mount an overlay on ``target`` (as root of this mount namespace): ``lower`` read-only
    below, writes going to ``upper``. Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_nosuid, ms_nodev = 2, 4
    number = 0
    for extra in (",userxattr", ""):  # (userxattr: in a user namespace; unknown before 5.11)
        options = "lowerdir=%s,upperdir=%s,workdir=%s%s" % (lower, upper, work, extra)
        done = int(
            c.mount(b"overlay", target.encode(), b"overlay", ms_nosuid | ms_nodev, options.encode())
        )
        if done == 0:
            return ""
        number = ctypes.get_errno()
    return "overlay on %s: %s" % (target, os.strerror(number))


def unmount(target: str) -> None:
    """Lazily unmount what is mounted on ``target`` (what still uses it keeps it)."""
    c = libc()
    if c is not None:
        c.umount2(target.encode(), 2)  # MNT_DETACH


def cover_view(top: str, protected: List[str]) -> str:
    """Over a workspace view at ``top``: make each protected path (relative) read-only (the
    store is hidden by a whiteout in the upper folder). Return "" or what failed."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_remount, ms_bind, ms_rec = 1, 32, 4096, 16384
    failed = []
    for relative in protected:
        path = os.path.join(top, relative)
        if os.path.islink(path) or not os.path.exists(path):
            continue
        raw = path.encode()
        if int(c.mount(raw, raw, None, ms_bind | ms_rec, None)) != 0:
            failed.append("%s (%s)" % (relative, os.strerror(ctypes.get_errno())))
            continue
        if int(c.mount(None, raw, None, ms_remount | ms_bind | ms_rdonly, None)) != 0:
            failed.append("%s (%s)" % (relative, os.strerror(ctypes.get_errno())))
    return "could not protect: " + ", ".join(failed) if failed else ""


def remount_bind_read_only(target: str) -> str:
    """Make the bind mount on ``target`` read-only (that mount only)."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_remount, ms_bind = 1, 2, 4, 32, 4096
    flags = ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev
    if int(c.mount(None, target.encode(), None, flags, None)) != 0:
        return "remount %s read-only: %s" % (target, os.strerror(ctypes.get_errno()))
    return ""
