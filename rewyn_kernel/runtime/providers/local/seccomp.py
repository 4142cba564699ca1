"""The seccomp filter of the local providers (bubblewrap and subprocess), built with libseccomp.

Containers get their engine's default profile; a local sandbox gets this one. It is compiled
here, on the host, with libseccomp (through ``pyseccomp``, a ctypes binding to the system's
``libseccomp.so.2``), exported as BPF and sent to the sandbox's supervisor, which loads it
under no-new-privileges once its own set-up is done and before it forks any code's process:
the code never runs without it, and cannot remove it (filters only stack).

The list follows Docker's default profile (moby/profiles, ``seccomp/default.json``), as a
deny-list: what it refuses to code without capabilities, for the reason Docker gives. Each
entry fails with EPERM (``clone3`` with ENOSYS, so the C library falls back to ``clone``,
whose flags a filter can read). What it does not stop: every other system call reaches the
host's kernel, with its bugs; gVisor (``ContainerProvider(oci_runtime="runsc")``) is the
narrower surface.
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
COMPANION_ARCHES = {"x86_64": ("x86", "x32"), "aarch64": ("arm",)}
"""32-bit ABIs of the same machine: the same rules are added for them (else a program built
for one would be killed at its first system call)."""


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
        "a seccomp filter (libseccomp, after Docker's default profile) refuses keyrings, "
        "io_uring, userfaultfd, perf_event_open, bpf, kernel modules and kexec, mount and "
        "namespace calls (clone with CLONE_NEW*, unshare, setns), ptrace of other processes, "
        "process_vm_readv/writev, open_by_handle_at, the host's clock, personality flags "
        "that turn off address randomisation, "
        + ("" if sysv_ipc else "System V IPC (no IPC namespace of its own), ")
        + f"and {families}"
    )


SYSV_IPC = (
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "ipc",
)
"""System V IPC: refused where the sandbox has no IPC namespace of its own (its objects would be
the host's, outliving the sandbox, and the host's other programs' would be the code's)."""


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
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for arch in COMPANION_ARCHES.get(platform.machine(), ()):
            # (where this libseccomp or kernel has no such ABI, its calls are killed)
            with contextlib.suppress(AttributeError, OSError):
                rules.add_arch(getattr(seccomp.Arch, arch.upper()))
        eperm = seccomp.ERRNO(errno.EPERM)
        for names in DENIED.values():
            for name in names:
                _add(seccomp, rules, eperm, name)
        for flag in NAMESPACE_FLAGS.values():
            _add(seccomp, rules, eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        _add(seccomp, rules, seccomp.ERRNO(errno.ENOSYS), "clone3")
        _add(seccomp, rules, eperm, "ptrace", seccomp.Arg(0, seccomp.NE, PTRACE_TRACEME))
        for flag in PERSONALITY_REFUSED.values():
            mask = flag | PERSONALITY_QUERY_BIT
            _add(
                seccomp, rules, eperm, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, mask, flag)
            )
        unsupported = seccomp.ERRNO(errno.EAFNOSUPPORT)
        if sockets:
            allowed = sorted(SOCKET_FAMILIES.values())
            for low, high in zip([-1, *allowed], [*allowed, MAX_FAMILY], strict=True):
                for family in range(low + 1, high):
                    _add(seccomp, rules, unsupported, "socket", seccomp.Arg(0, seccomp.EQ, family))
            _add(seccomp, rules, unsupported, "socket", seccomp.Arg(0, seccomp.GE, MAX_FAMILY))
        else:
            _add(seccomp, rules, eperm, "socket")
        if not sysv_ipc:
            for name in SYSV_IPC:
                _add(seccomp, rules, eperm, name)
        with tempfile.TemporaryFile() as handle:
            rules.export_bpf(handle)
            handle.seek(0)
            program = handle.read()
    except (OSError, ValueError, RuntimeError) as exc:
        return Filter(None, f"libseccomp could not build the filter ({exc})")
    if not program or len(program) % 8:
        return Filter(None, "libseccomp exported no filter")
    return Filter(program, describe(sockets, sysv_ipc))


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


__all__ = ["DENIED", "SOCKET_FAMILIES", "Filter", "build", "describe"]
