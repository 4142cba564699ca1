"""Landlock, through ctypes: what the code may open, and whom it may signal, without namespaces.

Landlock (Linux 5.13 and later) lets an unprivileged process restrict itself and every process
it forks after: a *ruleset* names the kinds of access it handles, rules grant some of them
beneath given folders, and ``landlock_restrict_self`` enforces it, for good (a domain only ever
narrows). It needs no root, no user namespace and no mount, so it works where bubblewrap cannot
(a container's default seccomp profile, Ubuntu's AppArmor rule for user namespaces).

The supervisor builds the ruleset from the host's ``Landlock`` setting and restricts itself with
it; each code process restricts itself once more with the same ruleset, so it lives in a domain
nested in the supervisor's. Landlock lets a process ptrace, and (ABI 6) signal or reach the
abstract Unix sockets of, only processes of its own domain or of domains nested in it: the code
cannot kill, trace or read the memory of its supervisor, the host or any other process of the
user's, and the supervisor can still end the code.

Each ABI adds to the rights handled: 2 ``REFER`` (renames across folders), 3 ``TRUNCATE``,
4 TCP bind and connect, 5 ``IOCTL_DEV``, 6 the scopes (signals, abstract Unix sockets). What
this kernel's ABI lacks is not handled, so not refused: the host says so in its notes.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Optional, Sequence

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
"""The system calls' numbers, the same on every architecture (they came after the tables were
unified)."""
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15
FS_BY_ABI = (0, (1 << 13) - 1, (1 << 14) - 1, (1 << 15) - 1, (1 << 15) - 1, (1 << 16) - 1)
"""Every file-system right each ABI (1 to 5; 6 and later as 5) knows, as one mask."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a folder) may grant."""
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
"""What the system's folders, the interpreter's and the ``read`` ones grant."""
WRITE = FS_BY_ABI[5] & ~(MAKE_CHAR | MAKE_BLOCK)
"""What the scratch folder grants: everything but device nodes (which need a capability the
code does not have anyway)."""
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV
"""What the device files the code may use (``/dev/null``, ``/dev/ptmx``...) grant."""

_ruleset = -1
"""The supervisor's ruleset, kept open for the code's processes to restrict themselves again."""


def abi() -> int:
    """The kernel's Landlock ABI version: 0 where there is none (too old, or turned off at boot,
    or refused by a seccomp filter)."""
    c = _libc()
    if c is None:
        return 0
    try:
        found = int(c.syscall(CREATE_RULESET, None, 0, CREATE_RULESET_VERSION))
    except Exception:
        return 0
    return max(found, 0)


def restrict(
    read: Sequence[str],
    write: Sequence[str],
    devices: Sequence[str],
    tcp: bool,
    connect_ports: Sequence[int] = (),
) -> str:
    """Restrict this process, and every process it forks from now on, to ``read`` (read and
    execute beneath each), ``write`` (every right beneath each) and ``devices`` (read, write and
    ioctl of each file); with ``tcp``, no TCP bind or connect at all (ABI 4 and later); and
    (ABI 6 and later) no signal nor abstract Unix socket outside the domain; ``connect_ports``:
    the ports TCP may still connect to (the relay's, which only the supervisor's broker
    connects to: ``broker.py``). A path that is not there is passed over. Return "" on
    success, else why not (no-new-privileges is set first, as Landlock requires of a process
    without CAP_SYS_ADMIN)."""
    global _ruleset
    version = abi()
    if version < 1:
        return "this kernel has no Landlock"
    c = _libc()
    if c is None:  # (abi() found it: not reached)
        return "no ctypes here"
    import ctypes

    fs = FS_BY_ABI[min(version, 5)]
    net = (BIND_TCP | CONNECT_TCP) if tcp and version >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if version >= 6 else 0

    class RulesetAttr(ctypes.Structure):
        _fields_ = [
            ("handled_access_fs", ctypes.c_uint64),
            ("handled_access_net", ctypes.c_uint64),
            ("scoped", ctypes.c_uint64),
        ]

    class NetPort(ctypes.Structure):
        _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]

    attr = RulesetAttr(fs, net, scoped)
    # (an older ABI takes a shorter struct: only the fields it knows)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if version >= 6 else 2 if version >= 4 else 1)
    ruleset = int(c.syscall(CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset < 0:
        return "landlock_create_ruleset: " + os.strerror(ctypes.get_errno())
    try:
        for paths, rights in ((read, READ), (write, WRITE), (devices, DEVICE)):
            for path in paths:
                why = _add_path(c, ruleset, path, rights & fs)
                if why:
                    return why
        if net:
            for port in connect_ports:
                rule = NetPort(CONNECT_TCP, port)
                if int(c.syscall(ADD_RULE, ruleset, RULE_NET_PORT, ctypes.byref(rule), 0)) != 0:
                    return "landlock_add_rule(port %d): %s" % (
                        port,
                        os.strerror(ctypes.get_errno()),
                    )
        from .system import set_no_new_privs

        set_no_new_privs()
        if int(c.syscall(RESTRICT_SELF, ruleset, 0)) != 0:
            return "landlock_restrict_self: " + os.strerror(ctypes.get_errno())
    except BaseException:
        os.close(ruleset)
        raise
    _ruleset = ruleset
    return ""


def nest() -> str:
    """In a code process: restrict it once more with the supervisor's ruleset, so that it lives
    in a domain of its own, nested in the supervisor's (it can no longer signal or trace the
    supervisor, nor any process of an earlier code process's domain). Return "" on success
    (or where the supervisor restricted nothing), else why not."""
    global _ruleset
    if _ruleset < 0:
        return ""
    c = _libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ruleset, _ruleset = _ruleset, -1
    try:
        if int(c.syscall(RESTRICT_SELF, ruleset, 0)) != 0:
            return "landlock_restrict_self: " + os.strerror(ctypes.get_errno())
    finally:
        os.close(ruleset)  # (the code gets no handle on the supervisor's rules)
    return ""


def restricted() -> bool:
    """Whether this process restricted itself (the supervisor, once ``restrict`` succeeded)."""
    return _ruleset >= 0


def _add_path(c: Any, ruleset: int, path: str, rights: int) -> str:
    import ctypes

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return ""  # (not on this host: nothing to grant)
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        if not rights:
            return ""

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        rule = PathBeneath(rights, fd)
        if int(c.syscall(ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0)) != 0:
            return "landlock_add_rule(%s): %s" % (path, os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)
    return ""


def _libc() -> Optional[Any]:
    from .system import libc

    c = libc()
    if c is not None:
        import ctypes

        c.syscall.restype = ctypes.c_long
    return c


__all__ = ["abi", "nest", "restrict", "restricted"]
