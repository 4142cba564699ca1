"""Linux process controls the standard library lacks (prctl, capset, mallopt), through ctypes.

Each returns whether it took effect, so the worker can say what it could not apply instead of
claiming it. Without ctypes (a stripped image) or off Linux, nothing here takes effect.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Optional, Tuple

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
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


def dumpable() -> bool:
    c = libc()
    if c is None:
        return True
    try:
        return int(c.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 1
    except Exception:
        return True


def set_oom_score_adj(value: bytes) -> Optional[bytes]:
    """Set this process's ``oom_score_adj`` (raising it needs no privilege; lowering it back
    to where it was neither); return what it was, or None when it cannot be. A process that
    changed its user is not dumpable, so its /proc files are root's: it is made dumpable for
    the write (never the supervisor: only a code process calls this)."""
    was = dumpable()
    if not was:
        set_dumpable(True)
    try:
        with open("/proc/self/oom_score_adj", "rb") as handle:
            before = handle.read().strip()
        with open("/proc/self/oom_score_adj", "wb") as handle:
            handle.write(value)
        return before
    except OSError:
        return None
    finally:
        if not was:
            set_dumpable(False)


def set_subreaper() -> bool:
    """Orphaned descendants become this process's children, so they can be found and killed."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_death_signal(signum: int) -> bool:
    return prctl(PR_SET_PDEATHSIG, signum)


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


def one_malloc_arena() -> None:
    """Under an address-space cap, use one malloc arena: glibc reserves 64 MiB of address space
    for each thread that allocates, so three threads would use up most of a 256 MiB cap."""
    c = libc()
    if c is not None:
        try:
            c.mallopt(M_ARENA_MAX, 1)
        except Exception:
            pass


def load_seccomp(program: bytes) -> str:
    """Load ``program``, a compiled seccomp filter (an array of ``struct sock_filter``, as
    libseccomp exports it), into this process and every process it forks after. It needs
    no-new-privileges (set first). Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    if not program or len(program) % 8:
        return "the filter is not a whole number of BPF instructions"
    pr_set_seccomp, seccomp_mode_filter = 22, 2

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    set_no_new_privs()
    if int(c.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0)) != 0:
        return "prctl(PR_SET_SECCOMP): " + os.strerror(ctypes.get_errno())
    return ""


def seccomp_mode() -> int:
    """This process's seccomp mode (0 none, 1 strict, 2 filter), from /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
