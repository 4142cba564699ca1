"""Linux process controls the standard library lacks (prctl, capset, mallopt), through ctypes.

Each returns whether it took effect, so the worker can say what it could not apply instead of
claiming it. Without ctypes (a stripped image) or off Linux, nothing here takes effect.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, List, Optional, Tuple

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
M_ARENA_MAX = -8

_libc: Optional[Any] = None


def libc() -> Optional[Any]:
    """The C library, or None where ctypes or Linux is missing."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        except Exception:
            _libc = False
    return _libc or None


def prctl(option: int, arg: int = 0) -> bool:
    c = libc()
    if c is None:
        return False
    try:
        return int(c.prctl(option, arg, 0, 0, 0)) == 0
    except Exception:
        return False


def set_dumpable(on: bool) -> bool:
    """Non-dumpable: processes without CAP_SYS_PTRACE cannot ptrace this one, read its memory or
    open its descriptors through /proc, even with the same uid."""
    return prctl(PR_SET_DUMPABLE, 1 if on else 0)


def set_subreaper() -> bool:
    """Orphaned descendants become this process's children, so they can be found and killed."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_death_signal(signum: int) -> bool:
    return prctl(PR_SET_PDEATHSIG, signum)


def forbid_user_namespaces() -> str:
    """Let no process of this user namespace create another (as its root: the limit is the
    namespace's own). Refused in the host's first user namespace, where the limit would be the
    machine's. Return "" on success, else why not."""
    try:
        with open("/proc/self/uid_map") as handle:
            if handle.read().split() == ["0", "0", "4294967295"]:
                return "this is the host's user namespace"
        with open("/proc/sys/user/max_user_namespaces", "w") as handle:
            handle.write("0\n")
    except OSError as exc:
        return str(exc)
    return ""


def set_no_new_privs() -> bool:
    return prctl(PR_SET_NO_NEW_PRIVS, 1)


def become(uid: int, gid: int, keep: Tuple[int, ...] = ()) -> bool:
    """Switch every uid and gid of this process to ``uid``:``gid`` (no supplementary groups),
    keeping the capabilities numbered in ``keep`` and nothing else. True when it worked."""
    try:
        if keep:
            prctl(PR_SET_KEEPCAPS, 1)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except (OSError, AttributeError):
        return False
    finally:
        prctl(PR_SET_KEEPCAPS, 0)
    return set_capabilities(keep) if keep else drop_capabilities()


def set_capabilities(caps: Tuple[int, ...]) -> bool:
    """Make ``caps`` this process's effective and permitted capabilities (no others)."""
    c = libc()
    if c is None:
        return False
    import ctypes

    mask = [0, 0]
    for cap in caps:
        mask[cap // 32] |= 1 << (cap % 32)
    header, data = _cap_structs()
    for index in (0, 1):
        data[index].effective = data[index].permitted = mask[index]
    try:
        return int(c.capset(ctypes.byref(header), data)) == 0
    except Exception:
        return False


def _cap_structs() -> Tuple[Any, Any]:
    """A capset header for this process and two zeroed data words (capabilities 0-63)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    return Header(LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()


def drop_capabilities() -> bool:
    """Drop every capability, now and for every program this process executes.

    The bounding set goes first (while CAP_SETPCAP is still held), so that even a uid 0 inside a
    user namespace regains nothing on execve; then the ambient, effective, permitted and
    inheritable sets. True when this process ends up holding no capability.
    """
    c = libc()
    if c is None:
        return _holds_no_capability()
    import ctypes

    for cap in range(64):
        if c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows
    c.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _cap_structs()
    try:
        c.capset(ctypes.byref(header), data)
    except Exception:
        pass
    return _holds_no_capability()


def holds_capabilities() -> bool:
    """Whether this process holds (or may hold) any capability: True when it cannot tell."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("CapEff:", "CapPrm:")) and int(line.split()[1], 16) != 0:
                    return True
        return False
    except (OSError, ValueError):
        return True


def _holds_no_capability() -> bool:
    """No capability held now or regained by executing a program (the bounding set may keep
    some where no-new-privileges makes it moot: it only limits what execve could grant)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                held = line.startswith(("CapEff:", "CapPrm:", "CapInh:", "CapAmb:"))
                if held and int(line.split()[1], 16) != 0:
                    return False
        return True
    except (OSError, ValueError):
        return False


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


def overlay(source: str, upper: str, work: str) -> str:
    """Mount an overlay over ``source`` (as root of this mount namespace): its files read-only
    below, writes going to ``upper``. Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    for extra in (",userxattr", ""):  # (userxattr: in a user namespace; unknown before 5.11)
        options = "lowerdir=%s,upperdir=%s,workdir=%s%s" % (source, upper, work, extra)
        try:
            done = int(c.mount(b"overlay", source.encode(), b"overlay", 0, options.encode()))
        except Exception as exc:
            return str(exc)
        if done == 0:
            return ""
        number = ctypes.get_errno()
        if number == errno.EBUSY:
            return "busy"
    return os.strerror(number)


def one_malloc_arena() -> None:
    """Under an address-space cap, use one malloc arena: glibc reserves 64 MiB of address space
    for each thread that allocates, so three threads would use up most of a 256 MiB cap."""
    c = libc()
    if c is not None:
        try:
            c.mallopt(M_ARENA_MAX, 1)
        except Exception:
            pass
