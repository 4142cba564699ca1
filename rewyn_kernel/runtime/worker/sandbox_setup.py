"""The sandbox's set-up by its supervisor, before any code runs: each protection, in order."""

from __future__ import annotations

import os
import signal

from . import landlock, mounter, mounts, namespaces, residue, system
from .broker import Broker
from .memory import oom_kills, open_own_counter
from .relay import start_relay
from .state import State
from .wire import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import List

    from .config import Clean, WorkspaceSetting


IGNORED_SIGNALS = (
    "SIGTERM",
    "SIGHUP",
    "SIGQUIT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
)
PRELOAD = ("resource", "getpass", "faulthandler", "fcntl", "ctypes", "io", "queue", "threading")
"""Modules imported once by the supervisor, before it changes directory (see ``start``)."""
CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7


class SandboxSetUp(State):
    """The sandbox's set-up, by its supervisor before any code runs."""

    def set_up(self) -> None:
        """Apply each protection the config asks for, in order (the last, seccomp, refuses
        what the others need); a protection the sandbox was promised that cannot be had ends
        it here (``fail``), one it was not is a note in the ``ready`` frame."""
        # Everything this process and the code's processes need from the standard library is
        # imported now, before any change of directory, from the interpreter's own paths only
        # (it runs isolated: no current directory, no user site, no PYTHON* variables).
        for module in PRELOAD:
            __import__(module)
        system.libc()
        config = self.config
        if config.ns_root and not namespaces.become_namespace_root():
            self.fail("the supervisor could not take its user namespace's root")
        # The proxy's end (network=[...]): the loopback is brought up while this process may,
        # and the proxy's folder held before anything covers or hides it.
        self.relay = start_relay(self.selector, config.egress, self.notes.append)
        if config.broker:
            # No network namespace: the relay listens on the host's loopback, and every
            # connect() of the code is made here, to it (broker.py).
            if self.relay is None:
                self.fail("the allow-list's proxy cannot be reached from here")
            else:
                self.relay.expect(0)
                self.broker = Broker(self.selector, self.relay.port, self.relay.expect)
                # (no loopback of the sandbox's own: a listed loopback address is reached
                # through the proxy like any other)
                for name in ("NO_PROXY", "no_proxy"):
                    os.environ.pop(name, None)
        if config.own_ipc:
            # Still root of the sandbox's own namespaces here: bound what shared memory the
            # code can pin outside its processes (it all goes with the namespaces).
            limit = config.memory_limit_bytes
            if not residue.limit_sysv_ipc(limit):
                self.notes.append("SysV shared memory could not be bounded")
            if not mounts.private_tmpfs("/dev/shm", limit):
                self.notes.append("/dev/shm is the host's (a private one could not be mounted)")
        for cover in config.cover:
            why = mounts.cover(cover.dir, list(cover.keep), int(cover.mode, 8), cover.limit)
            if why:
                self.fail("the sandbox's %s could not be set up: %s" % (cover.dir, why))
        for source, target in config.binds:
            # (a directory a root host mounted for this sandbox: see host/views.py)
            why = mounts.bind(source, target)
            if why:
                self.fail("%s could not be shown to the code: %s" % (target, why))
        for folder in config.read_only:
            why = mounts.bind(folder, folder) or mounts.remount_bind_read_only(folder)
            if why:
                self.fail("%s could not be shown read-only: %s" % (folder, why))
        if config.mqueue and not mounts.mount_mqueue(config.mqueue):
            self.notes.append("POSIX message queues cannot be listed (no mqueue mount)")
        if config.cgroup_gate is not None:
            # The host moves this sandbox's processes into their cgroups while they start; no
            # code runs before they are in (nor is this process's own counter opened).
            answer = read_answer(config.cgroup_gate, 1024)
            if answer != b"\0":
                reason = answer[1:].decode("utf-8", "replace") or "the host said nothing"
                self.fail("the sandbox could not be moved into its cgroups: %s" % reason)
            if config.own_cgroupns:
                # Started before the move, the namespace bwrap made is rooted at the host's
                # cgroup: one rooted here shows the code its own cgroup as "/", and no more.
                why = namespaces.new_cgroup_namespace()
                if why:
                    self.notes.append("the code sees the host's cgroup paths (%s)" % why)
        if config.oom_counter == "self":
            open_own_counter()
        if config.workspace:  # (before /run is hidden: a root host's view is mounted there)
            self.setup_workspace(config.workspace)
        if config.hide:
            failed = mounts.hide(list(config.hide.dirs), list(config.hide.files))
            if failed:
                self.notes.append("not hidden from the code: %s" % ", ".join(failed))
        if config.nested_userns:
            # The namespace this started in maps the host's root (bubblewrap and unshare set
            # the sandbox up as it): leave it for one that maps this process's uid only.
            why = namespaces.enter_user_namespace(config.nested_userns)
            if why:
                self.fail("the supervisor could not leave the set-up user namespace: %s" % why)
        if config.own_userns:
            why = namespaces.limit_user_counters()
            if why:
                self.notes.append("per-user counters not lowered for the code: %s" % why)
        if config.proc_sys:
            why = mounts.read_only_proc_sys() if config.proc_sys == "remount" else ""
            if why or mounts.proc_sys_writable():
                self.fail("/proc/sys could not be made read-only for the code (%s)" % why)
        if config.clean and config.fork_per_exec:
            self.config = self.config.replace(clean=clean_dirs(config.clean))
        if config.memory_cgroup and oom_kills(config) is None:
            self.notes.append("no memory cgroup could be made: the memory cap is per process")
        self.take_user()
        if not system.set_dumpable(False):
            self.notes.append("the supervisor could not be made non-dumpable (no ctypes here)")
        system.set_no_new_privs()
        if config.landlock:
            # (after the set-up, which reads what the rules refuse; before the filter, which
            # would refuse nothing Landlock needs, but keeps the order of what narrows last)
            rules = config.landlock
            ports = (self.relay.port,) if self.broker is not None and self.relay else ()
            why = landlock.restrict(rules.read, rules.write, rules.devices, rules.tcp, ports)
            if why:
                self.fail("the sandbox's Landlock rules could not be applied (%s)" % why)
        if config.seccomp:
            # Last: the set-up above needed mount and unshare, which the filter refuses. Every
            # process forked from here on, the code's included, runs under it.
            why = system.load_seccomp(bytes.fromhex(config.seccomp))
            if why or system.seccomp_mode() != 2:
                self.fail("the seccomp filter could not be loaded (%s)" % why)
        for name in IGNORED_SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        # SIGINT stays at its default but blocked: a code process forked from here starts with
        # it blocked, so an interrupt sent before it installed its handler waits, not vanishes.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def setup_workspace(self, workspace: WorkspaceSetting) -> None:
        """Show the code the workspace at its own path (see the host's host/workspace.py): a
        root host mounted the view on an anchor, which is bound here (bubblewrap bound it
        already); elsewhere this process's mounter mounts each execution's view."""
        path = workspace.path
        self.config = self.config.replace(cwd=path)
        if workspace.note:
            self.notes.append(workspace.note[:1000])
        if workspace.bind:
            anchor = workspace.bind
            for relative in workspace.keep:
                # What this Python runs from inside the workspace (a project's .venv), bound
                # into the anchor, still empty, before it covers the workspace: the first view,
                # mounted on the anchor once the sandbox is up, covers these with the same files.
                inner, kept = os.path.join(path, relative), os.path.join(anchor, relative)
                why = mounts.bind(inner, kept) or mounts.remount_bind_read_only(kept)
                if why:
                    self.fail("the workspace could not be shown to the code: %s" % why)
            why = mounts.bind(anchor, path)
            if why:
                self.fail("the workspace could not be shown to the code: %s" % why)
            return
        if workspace.bound or not workspace.staging:
            return
        if not self.config.own_ipc:
            self.notes.append(
                "the workspace is shown as it is (no mount namespace here): the code changes "
                "the files directly, and no earlier version is kept"
            )
            return
        self.mounter = mounter.start(path, workspace.staging)
        why = "the mounter could not start"
        if self.mounter is not None:
            request = {"op": "view", "cell": workspace.cell, "protected": list(workspace.protected)}
            why = self.mounter.ask(request)
        if why:
            self.fail("the workspace's view could not be mounted: %s" % why)

    def fail(self, why: str) -> None:
        """A protection this sandbox was promised cannot be had: it does not start."""
        write_all(self.diag, ("rewyn: %s\n" % why).encode("utf-8", "replace"))
        os._exit(70)

    def take_user(self) -> None:
        """Give the supervisor a user of its own, or drop every capability it holds.

        With ``users`` in the config (containers, started as root with only CAP_SETUID,
        CAP_SETGID and CAP_KILL), the supervisor becomes the ``supervisor`` user and keeps just
        those three, to make each code process the ``code`` user and to signal it. The code then
        cannot signal the supervisor or open anything under its ``/proc`` entry, even where the
        kernel ignores non-dumpable processes there (gVisor). Without, the supervisor needs no
        capability: it drops them all, and every process forked from it inherits none.
        """
        users = self.config.users
        if users:
            uid, gid = users.supervisor
            if system.become(uid, gid, keep=(CAP_KILL, CAP_SETGID, CAP_SETUID)):
                return
            self.config = self.config.replace(users=None)  # (nor can the code take its own)
            self.notes.append("the supervisor could not take a user of its own")
        if not system.drop_capabilities():
            if system.holds_capabilities():
                # Root of the sandbox's own namespaces (bubblewrap, unshare): the code would
                # keep CAP_SYS_ADMIN there (and remount the read-only views writable). Never.
                write_all(self.diag, b"rewyn: the supervisor could not drop its capabilities\n")
                os._exit(70)
            self.notes.append("capabilities could not be dropped (no ctypes here)")


def read_answer(fd: int, limit: int) -> bytes:
    """The host's answer on ``fd``: a zero byte alone, or anything else up to a newline or the
    end (at most ``limit`` bytes); then close ``fd``."""
    got = b""
    try:
        while len(got) < limit:
            chunk = os.read(fd, 1 if not got else limit - len(got))
            if not chunk:
                break
            got += chunk
            if got == b"\0" or got.endswith(b"\n"):
                break
    except OSError:
        pass
    finally:
        os.close(fd)
    return got.rstrip(b"\n")


def clean_dirs(asked: Clean) -> Clean:
    """What each one-shot execution's process empties before it takes code (``child.py``):
    the folders the host names (``/tmp``, ``/dev/shm``, ``/dev/mqueue``) that are here, but
    the mount points in them (the scratch directory may be one) and the folders on the way;
    and SysV IPC."""
    dirs = tuple(path for path in asked.dirs if os.path.isdir(path))
    keep = []
    for point in mount_points():
        if any(point.startswith(path.rstrip("/") + "/") for path in dirs):
            keep.append(point)
    return asked.replace(dirs=dirs, keep=tuple(keep))


def mount_points() -> List[str]:
    """Every mount point of this mount namespace (from /proc/self/mountinfo)."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 4:
                    # (octal escapes for spaces and the like: \040)
                    found.append(fields[4].encode().decode("unicode_escape"))
    except (OSError, UnicodeDecodeError):
        pass
    return found
