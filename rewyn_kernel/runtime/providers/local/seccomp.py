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
}
"""What the filter refuses outright, by reason (Docker's default profile refuses each)."""
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


def describe() -> str:
    """What the filter refuses, in words (for ``Isolation.seccomp``)."""
    return (
        "a seccomp filter (libseccomp, after Docker's default profile) refuses keyrings, "
        "io_uring, userfaultfd, perf_event_open, bpf, kernel modules and kexec, mount and "
        "namespace calls (clone with CLONE_NEW*, unshare, setns), ptrace of other processes, "
        "process_vm_readv/writev, open_by_handle_at and the host's clock"
    )


@functools.cache
def build() -> Filter:
    """Compile the filter for this machine (once per process), or say why it cannot be."""
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
        with tempfile.TemporaryFile() as handle:
            rules.export_bpf(handle)
            handle.seek(0)
            program = handle.read()
    except (OSError, ValueError, RuntimeError) as exc:
        return Filter(None, f"libseccomp could not build the filter ({exc})")
    if not program or len(program) % 8:
        return Filter(None, "libseccomp exported no filter")
    return Filter(program, describe())


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


__all__ = ["DENIED", "Filter", "build", "describe"]
