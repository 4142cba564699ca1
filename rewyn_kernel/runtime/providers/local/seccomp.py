"""The seccomp filter of every sandbox this package starts, built with libseccomp.

It is compiled here, on the host, with libseccomp (through ``pyseccomp``, a ctypes binding to
the system's ``libseccomp.so.2``), exported as BPF and sent to the sandbox's supervisor, which
loads it under no-new-privileges once its own set-up is done and before it forks any code's
process: the code never runs without it, and cannot remove it (filters only stack). A
container's supervisor loads it too, on top of the engine's own profile.

It is an allow-list, as Docker's default profile (moby/profiles, ``seccomp/default.json``) is:
each system call of ``ALLOWED`` goes through, those of ``DENIED`` fail with EPERM (what Docker
refuses to code without capabilities, for the reason it gives), and any other, a call this
list does not know (a newer kernel's), with ENOSYS, as if the kernel had none, so that the C
library falls back to an older one. A few are allowed with conditions on their arguments:
``clone`` without namespace flags (``clone3``, whose flags a filter cannot read, gets ENOSYS,
so the C library uses ``clone``), ``ptrace`` only to ask to be traced, ``personality`` only for
the plain personalities, ``socket`` only for the families of ``SOCKET_FAMILIES``. What it does
not stop: every allowed call reaches the host's kernel, with its bugs; gVisor
(``ContainerProvider(oci_runtime="runsc")``) is the narrower surface.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import tempfile
from dataclasses import dataclass

DENIED: dict[str, tuple[str, ...]] = {
    "the kernel's keyrings, which are per host user, not per sandbox": (
        "keyctl",
        "add_key",
        "request_key",
    ),
    "large kernel surfaces with a history of escapes": (
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "userfaultfd",
        "perf_event_open",
        "bpf",
    ),
    "the kernel itself": (
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "query_module",
        "get_kernel_syms",
        "reboot",
        "swapon",
        "swapoff",
        "syslog",
        "acct",
        "iopl",
        "ioperm",
        "uselib",
        "nfsservctl",
        "_sysctl",
        "sysfs",
        "ustat",
        "vm86",
        "vm86old",
        "lookup_dcookie",
        "quotactl",
        "quotactl_fd",
    ),
    "the host's clock": ("settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex"),
    "other processes' memory and files": (
        "process_vm_readv",
        "process_vm_writev",
        "process_madvise",
        "pidfd_getfd",
        "kcmp",
        "open_by_handle_at",
        "name_to_handle_at",
    ),
    "mounts and namespaces": (
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "chroot",
        "unshare",
        "setns",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "mount_setattr",
        "fanotify_init",
    ),
    "NUMA placement (CAP_SYS_NICE in Docker's profile)": (
        "mbind",
        "set_mempolicy",
        "migrate_pages",
        "move_pages",
    ),
    "secret memory and the mount tables' newer calls (no use to the code, new surface)": (
        "memfd_secret",
        "statmount",
        "listmount",
    ),
}
"""What the filter refuses outright, by reason (Docker's default profile refuses each)."""
ALLOWED: dict[str, tuple[str, ...]] = {
    "files and folders": (
        *("read", "write", "open", "openat", "openat2", "close", "close_range", "creat"),
        *("stat", "fstat", "lstat", "newfstatat", "fstatat64", "statx", "stat64", "fstat64"),
        *("lstat64", "statfs", "fstatfs", "statfs64", "fstatfs64", "lseek", "_llseek"),
        *("pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2"),
        *("access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir"),
        *("fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link"),
        *("linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat"),
        *("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat"),
        *("chown32", "fchown32", "lchown32", "umask", "truncate", "ftruncate", "truncate64"),
        *("ftruncate64", "fallocate", "fsync", "fdatasync", "sync", "syncfs"),
        *("sync_file_range", "sync_file_range2", "fadvise64", "fadvise64_64", "readahead"),
        *("utime", "utimes", "futimesat", "utimensat", "utimensat_time64", "mknod", "mknodat"),
        *("flock", "fcntl", "fcntl64", "dup", "dup2", "dup3", "pipe", "pipe2", "ioctl"),
        *("sendfile", "sendfile64", "splice", "tee", "vmsplice", "copy_file_range"),
        *("setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr"),
        *("listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr"),
        *("fremovexattr", "setxattrat", "getxattrat", "listxattrat", "removexattrat"),
        *("file_getattr", "file_setattr", "cachestat", "memfd_create"),
        *("inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch"),
    ),
    "memory": (
        *("brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "msync", "mincore"),
        *("madvise", "mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier"),
        *("pkey_mprotect", "pkey_alloc", "pkey_free", "get_mempolicy", "remap_file_pages"),
        *("mseal", "map_shadow_stack"),
    ),
    "processes, threads and signals": (
        *("clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4"),
        *("waitid", "waitpid", "kill", "tkill", "tgkill", "rt_sigqueueinfo", "ptrace"),
        *("rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "rt_sigaction"),
        *("rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait"),
        *("rt_sigtimedwait_time64", "rt_sigsuspend", "sigaltstack", "sigaction", "signal"),
        *("sigprocmask", "sigreturn", "sigsuspend", "sigpending", "pause", "restart_syscall"),
        *("set_tid_address", "set_robust_list", "get_robust_list", "rseq", "uretprobe"),
        *("arch_prctl", "set_thread_area", "get_thread_area", "set_tls", "prctl"),
        *("personality", "seccomp", "landlock_create_ruleset", "landlock_add_rule"),
        *("landlock_restrict_self", "futex", "futex_time64", "futex_waitv", "futex_wake"),
        *("futex_wait", "futex_requeue"),
    ),
    "ids, limits and scheduling": (
        *("getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid"),
        *("getuid32", "geteuid32", "getgid32", "getegid32", "getresuid", "getresgid"),
        *("getresuid32", "getresgid32", "getgroups", "getgroups32", "setuid", "setgid"),
        *("setuid32", "setgid32", "setreuid", "setregid", "setreuid32", "setregid32"),
        *("setresuid", "setresgid", "setresuid32", "setresgid32", "setgroups", "setgroups32"),
        *("setfsuid", "setfsgid", "setfsuid32", "setfsgid32", "capget", "capset"),
        *("getpgid", "setpgid", "getpgrp", "getsid", "setsid", "getrlimit", "ugetrlimit"),
        *("setrlimit", "prlimit64", "getrusage", "getpriority", "setpriority", "nice"),
        *("sched_yield", "sched_setparam", "sched_getparam", "sched_setscheduler"),
        *("sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min"),
        *("sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity"),
        *("sched_getaffinity", "sched_setattr", "sched_getattr", "getcpu", "ioprio_set"),
        *("ioprio_get", "uname", "olduname", "sysinfo", "times", "getrandom"),
    ),
    "time and waiting": (
        *("time", "gettimeofday", "clock_gettime", "clock_gettime64", "clock_getres"),
        *("clock_getres_time64", "clock_nanosleep", "clock_nanosleep_time64", "nanosleep"),
        *("alarm", "getitimer", "setitimer", "timer_create", "timer_settime"),
        *("timer_settime64", "timer_gettime", "timer_gettime64", "timer_getoverrun"),
        *("timer_delete", "timerfd_create", "timerfd_settime", "timerfd_settime64"),
        *("timerfd_gettime", "timerfd_gettime64", "eventfd", "eventfd2", "signalfd"),
        *("signalfd4", "poll", "ppoll", "ppoll_time64", "select", "_newselect", "pselect6"),
        *("pselect6_time64", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait"),
        *("epoll_pwait", "epoll_pwait2", "io_setup", "io_destroy", "io_getevents"),
        *("io_pgetevents", "io_pgetevents_time64", "io_submit", "io_cancel"),
    ),
    "sockets (socket() itself by family: SOCKET_FAMILIES)": (
        *("socket", "socketpair", "connect", "accept", "accept4", "bind", "listen"),
        *("getsockname", "getpeername", "setsockopt", "getsockopt", "shutdown", "sendto"),
        *("recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "recvmmsg_time64"),
        "send",
        "recv",
    ),
    "POSIX message queues and System V IPC (refused where the sandbox has no IPC namespace)": (
        *("mq_open", "mq_unlink", "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive"),
        *("mq_timedreceive_time64", "mq_notify", "mq_getsetattr"),
        *("shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl"),
        *("semget", "semop", "semtimedop", "semtimedop_time64", "semctl", "ipc"),
    ),
}
"""Every system call the code may make, by purpose (names of every architecture: a name this
machine's does not have is passed over). What is not here fails: EPERM for ``DENIED``, ENOSYS
for the rest."""
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
"""The only socket families the code may open where it may open sockets at all: every other
(vsock, which no network namespace confines and which reaches a VM's host and its agents;
packet, Bluetooth, CAN, RDS, TIPC, XDP...) fails with EAFNOSUPPORT, as if not built in."""
MAX_FAMILY = 64
"""Above every family Linux has (AF_MAX is 46 in 6.18): all refused."""
PERSONALITY_REFUSED = {"ADDR_NO_RANDOMIZE": 0x0040000, "READ_IMPLIES_EXEC": 0x0400000}
"""Personality flags the code may not set: they turn off address randomisation or make every
readable mapping executable (Docker allows only the plain personalities)."""
PERSONALITY_QUERY_BIT = 0x80000000
"""Set in ``personality(0xffffffff)``, the query (allowed), and in no personality a process
can take: a rule that also checks it is clear refuses the flags above but not the query."""
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
"""``clone`` is refused with any of these (a new namespace); ``clone3`` hides its flags in
memory a filter cannot read, so it is refused with ENOSYS and the C library uses ``clone``."""
PTRACE_TRACEME = 0
"""``ptrace`` is refused for everything but a process asking its parent to trace it."""
COMPANION_ARCHES = {"x86_64": ("x32",), "aarch64": ("arm",)}
"""Other ABIs of the same machine: the same rules are added for them (else a program built for
one would be killed at its first system call). Not i386's: there ``socket`` is also reached
through the ``socketcall`` multiplexer, whose arguments a filter cannot read, so libseccomp
cannot keep an allow-list of socket families on it; a call of that ABI (a 32-bit x86 program,
or ``int 0x80``) kills the process instead."""


@dataclass(frozen=True)
class Filter:
    """The compiled filter, or why there is none."""

    program: bytes | None
    detail: str


def describe(sockets: bool = True, sysv_ipc: bool = True) -> str:
    """What the filter refuses, in words (for ``Isolation.seccomp``); the flags as ``build``'s."""
    families = (
        "every socket family but Unix, IPv4, IPv6 and netlink (vsock and packet sockets among them)"
        if sockets
        else "every new socket (only a connected pair, socketpair(), can be had)"
    )
    return (
        "a seccomp filter, an allow-list (libseccomp, after Docker's default profile): a "
        "system call it does not know fails with ENOSYS; it refuses keyrings, "
        "io_uring, userfaultfd, perf_event_open, bpf, kernel modules and kexec, mount and "
        "namespace calls (clone with CLONE_NEW*, unshare, setns), ptrace of other processes, "
        "process_vm_readv/writev, open_by_handle_at, the host's clock, personality flags "
        "that turn off address randomisation, "
        + ("" if sysv_ipc else "System V IPC (no IPC namespace of its own), ")
        + f"and {families}"
    )


SYSV_IPC = ALLOWED[
    "POSIX message queues and System V IPC (refused where the sandbox has no IPC namespace)"
]
"""System V IPC and POSIX message queues: refused where the sandbox has no IPC namespace of its
own (their objects would be the host's, outliving the sandbox, and the host's other programs'
would be the code's)."""
CONDITIONAL = ("clone", "ptrace", "personality", "socket")
"""Allowed with conditions on their arguments (see ``build``)."""
PLAIN_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""The personalities ``personality()`` may set (PER_LINUX, PER_LINUX32, UNAME26 and the two
together, as Docker allows) or the query (0xffffffff)."""


MSG_FASTOPEN = 0x20000000
"""A ``sendto``/``sendmsg`` flag that connects a TCP socket: refused where connections are
brokered (``build_broker``)."""
STREAM_ONLY = {
    "SOCK_DGRAM": 2,
    "SOCK_RAW": 3,
    "SOCK_RDM": 4,
    "SOCK_SEQPACKET": 5,
    "SOCK_PACKET": 10,
}
"""The socket types other than streams (``type & 0xf``), refused where connections are
brokered."""


@functools.cache
def build_broker() -> Filter:
    """The second filter of a code process whose sandbox has no network namespace and an
    allow-list (``worker/broker.py``): every ``connect()`` goes to the supervisor
    (``SECCOMP_RET_USER_NOTIF``), which makes it to the relay; ``socket()`` only for IPv4 and
    IPv6 streams; no ``listen()``, no TCP Fast Open."""
    if os.uname().sysname != "Linux":
        return Filter(None, "seccomp is Linux-only")
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError, RuntimeError) as exc:
        return Filter(None, f"libseccomp cannot be loaded ({exc})")
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        eperm = seccomp.ERRNO(errno.EPERM)
        _add(seccomp, rules, seccomp.NOTIFY, "connect")
        _add(seccomp, rules, eperm, "listen")
        for family in (SOCKET_FAMILIES["AF_UNIX"], SOCKET_FAMILIES["AF_NETLINK"]):
            _add(seccomp, rules, eperm, "socket", seccomp.Arg(0, seccomp.EQ, family))
        for kind in STREAM_ONLY.values():
            _add(seccomp, rules, eperm, "socket", seccomp.Arg(1, seccomp.MASKED_EQ, 0xF, kind))
        fast = seccomp.MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN
        for name, flags_arg in (("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3)):
            _add(seccomp, rules, eperm, name, seccomp.Arg(flags_arg, *fast))
        return _exported(
            rules,
            "every TCP connection the code asks for is made by the supervisor, to the relay of "
            "the host's proxy, and to nothing else; no other socket, no listen()",
        )
    except (OSError, ValueError, RuntimeError) as exc:
        return Filter(None, f"libseccomp could not build the broker's filter ({exc})")


@functools.cache
def build(sockets: bool = True, sysv_ipc: bool = True) -> Filter:
    """Compile the filter for this machine (once per process and kind), or say why it cannot
    be. ``sockets=False`` refuses ``socket()`` for every family: for a sandbox with no network
    namespace of its own and ``network="none"``, where a socket of any family would reach the
    host's network, its daemons' Unix sockets or another process's abstract ones.
    ``sysv_ipc=False`` refuses System V IPC (``SYSV_IPC``): for a sandbox with no IPC
    namespace of its own."""
    if os.uname().sysname != "Linux":
        return Filter(None, "seccomp is Linux-only")
    try:
        import pyseccomp as seccomp
    except ImportError as exc:  # pragma: no cover (a declared dependency)
        return Filter(None, f"pyseccomp is not installed ({exc})")
    except (OSError, RuntimeError) as exc:  # (it raises RuntimeError when the library is missing)
        return Filter(None, f"libseccomp cannot be loaded ({exc}): install libseccomp2")
    try:
        rules = seccomp.SyscallFilter(seccomp.ERRNO(errno.ENOSYS))
        for arch in COMPANION_ARCHES.get(platform.machine(), ()):
            # (where this libseccomp or kernel has no such ABI, its calls are killed)
            with contextlib.suppress(AttributeError, OSError):
                rules.add_arch(getattr(seccomp.Arch, arch.upper()))
        allow, eperm = seccomp.ALLOW, seccomp.ERRNO(errno.EPERM)
        refused = set(SYSV_IPC) if not sysv_ipc else set()
        for names in DENIED.values():
            refused.update(names)
        for names in ALLOWED.values():
            for name in names:
                if name not in refused and name not in CONDITIONAL:
                    _add(seccomp, rules, allow, name)
        for name in sorted(refused):
            _add(seccomp, rules, eperm, name)
        # clone without a namespace flag; with one, EPERM (clone3: ENOSYS, the default)
        every_flag = sum(NAMESPACE_FLAGS.values())
        _add(seccomp, rules, allow, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, every_flag, 0))
        for flag in NAMESPACE_FLAGS.values():
            _add(seccomp, rules, eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        _add(seccomp, rules, allow, "ptrace", seccomp.Arg(0, seccomp.EQ, PTRACE_TRACEME))
        _add(seccomp, rules, eperm, "ptrace", seccomp.Arg(0, seccomp.NE, PTRACE_TRACEME))
        for persona in PLAIN_PERSONALITIES:
            _add(seccomp, rules, allow, "personality", seccomp.Arg(0, seccomp.EQ, persona))
        for flag in PERSONALITY_REFUSED.values():
            mask = flag | PERSONALITY_QUERY_BIT
            _add(
                seccomp, rules, eperm, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, mask, flag)
            )
        unsupported = seccomp.ERRNO(errno.EAFNOSUPPORT)
        if sockets:
            allowed = sorted(SOCKET_FAMILIES.values())
            for family in allowed:
                _add(seccomp, rules, allow, "socket", seccomp.Arg(0, seccomp.EQ, family))
            for low, high in zip([-1, *allowed], [*allowed, MAX_FAMILY], strict=True):
                for family in range(low + 1, high):
                    _add(seccomp, rules, unsupported, "socket", seccomp.Arg(0, seccomp.EQ, family))
            _add(seccomp, rules, unsupported, "socket", seccomp.Arg(0, seccomp.GE, MAX_FAMILY))
        else:
            _add(seccomp, rules, eperm, "socket")
        return _exported(rules, describe(sockets, sysv_ipc))
    except (OSError, ValueError, RuntimeError) as exc:
        return Filter(None, f"libseccomp could not build the filter ({exc})")


def _exported(rules: object, detail: str) -> Filter:
    """``rules`` as the BPF program the supervisor loads, said to do ``detail``."""
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)  # type: ignore[attr-defined]
        handle.seek(0)
        program = handle.read()
    if not program or len(program) % 8:
        return Filter(None, "libseccomp exported no filter")
    return Filter(program, detail)


def _add(seccomp: object, rules: object, action: int, name: str, *args: object) -> None:
    """Add one rule; a call this machine's ABI does not have (``vm86`` off i386) is skipped."""
    try:
        rules.add_rule(action, name, *args)  # type: ignore[attr-defined]
    except (OSError, ValueError, RuntimeError) as exc:
        if _unknown_syscall(exc):
            return
        raise


def _unknown_syscall(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, ValueError) or "invalid argument" in text or "not found" in text


__all__ = ["ALLOWED", "DENIED", "SOCKET_FAMILIES", "Filter", "build", "build_broker", "describe"]
