"""The supervisor: the sandbox's first process, which holds the host's channel and runs no code.

It is the only process of a sandbox that can read or write the channel to the host (the fds the
bootstrap was started with, moved off 0 and 1). It never runs code it is given: it forks a code
process for that (``child.py``): one per session, or one per execution of a one-shot sandbox, and
relays what that process sends, frame by frame, to the host. It cannot be reached from the code:

- it is not dumpable, and it drops every capability before it forks anything, so the code's
  process holds none (not even as uid 0 of a user namespace) and cannot ptrace it, read its
  memory or open its descriptors through ``/proc``;
- it ignores every signal it can, and as the first process of a PID namespace the kernel drops
  the rest when they come from inside;
- it relays only the frame kinds a code process may send (``CHILD_KINDS``, never ``done``,
  ``ready`` or ``out``), and in a one-shot sandbox it decides how an execution ended from how
  the code's process exited, then kills whatever that execution left running.

Nothing of one execution's code, input or output becomes a Python object here: those bytes pass
through one fixed buffer and one private mapping, cleared after use, so a later execution (a
fork of this process) finds none of them in its own memory.

A session's sandbox may hold several code processes: its branches (``fork``, a copy-on-write
fork the code process makes of itself between executions, with pipes made here and handed over
its socket) and its checkpoints (branches kept stopped until resumed). Each has its own
execution; what the supervisor relays to the host is tagged with whose it is by a ``b`` frame
only this process sends (``tag``). A one-shot sandbox given a ``preload`` keeps one code process
that ran it (the template) and forks each execution's process from it.

When the host's channel ends (the host closed the sandbox, or died), the supervisor kills every
process of the sandbox and exits; as a PID namespace's first process, its exit alone ends them.
"""

from __future__ import annotations

import faulthandler
import json
import mmap
import os
import select
import selectors
import signal
import socket
import sys
import time

from . import mounter, system
from .child import FORK_WAIT, run_child
from .mounter import Mounter
from .relay import Relay, start_relay
from .wire import CHUNK, HEADER, encode_header, frame_kind, read_exact, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, List, Optional, Tuple

    from .wire import Header

CHILD_KINDS = (
    "display",
    "result",
    "error",
    "clear_output",
    "payload",
    "input_request",
    "complete_reply",
    "inspect_reply",
    "comm",
    "status",
)
"""What a code process may send; everything else (``done``, ``ready``, ``out``, garbage) ends it."""
MAX_CHILD_HEADER = 16 << 20
MAX_STATUS_BYTES = 1024
MAX_HOST_HEADER = 1 << 20
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
STATUSES = ("ok", "error", "exit", "interrupted")
FORK_STATUSES = ("forked", "fork_failed")
"""What a session's code process answers a ``fork`` with (see ``on_fork``)."""
MAX_BRANCHES = 64
"""Code processes of one session's sandbox at once: its branches and their checkpoints."""
ADOPTION_WAIT = 0.5
MEMORY_WATCH = 0.01
"""Seconds between looks at the sandbox's memory while code runs beside a checkpoint, where the
supervisor reads it itself (``memory_view``: gVisor's /proc/meminfo)."""
PRELOAD = ("resource", "getpass", "faulthandler", "fcntl", "ctypes", "io", "queue", "threading")
"""Modules imported once by the supervisor, before it changes directory (see ``start``)."""
CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7
ZEROS = bytes(CHUNK)
FRAME_READS = 256
"""Reads of the code's frame stream per wake-up: a flood of frames leaves room for output."""
OUT_HEADERS = {
    True: encode_header({"t": "out", "s": "stdout"}),
    False: encode_header({"t": "out", "s": "stderr"}),
}


class Child:
    """One code process, seen from the supervisor: its pid, its four pipes, the socket its
    forks' pipes go through (a session's only), and the execution it runs.

    A session's sandbox holds one per branch (``branch``: 0 for the first, then the numbers
    the host gave ``fork``); a branch that is ``paused`` (a checkpoint) is stopped and runs
    nothing until the host resumes it.
    """

    def __init__(
        self, pid: int, ctl: int, frm: int, out: int, err: int, *, branch: int = 0, fds: int = -1
    ) -> None:
        self.pid = pid
        self.ctl = ctl
        self.frm = frm
        self.out = out
        self.err = err
        self.branch = branch
        self.fds = fds
        self.wait_status: Optional[int] = None
        self.status: Optional[Tuple[int, str]] = None
        self.violation: Optional[str] = None
        self.ready = False
        self.exec_id: Optional[str] = None
        self.aborted = False
        self.oom_before: Optional[int] = None
        self.dropped_before = 0  # checkpoints killed before its execution (see finish_exec)
        self.paused = False
        self.closing = False  # the host closed it: its end is no news
        self.muted = False  # what it sends is read and dropped (a one-shot sandbox's template)
        self.forking: Optional[Tuple[str, Child, bool]] = None
        """A fork it was asked for: the request's id, the new branch, whether it is paused."""
        # The frame being read from ``frm``: bytes so far, and how many it needs.
        self.head = b""
        self.body_len = -1
        self.got = 0

    @property
    def exited(self) -> bool:
        return self.wait_status is not None


class Supervisor:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config
        self.once = bool(config.get("fork_per_exec"))
        self.first = os.getpid() == 1
        self.count = 0
        self.child: Optional[Child] = None  # one-shot: the execution's process
        self.spare: Optional[Child] = None  # one-shot: the next execution's process, set up
        self.branches: Dict[int, Child] = {}  # a session's code processes, by branch
        self.starting: List[Child] = []  # branches forked, not yet confirmed
        self.early: Dict[int, int] = {}  # pids reaped before their branch was confirmed
        self.sent_branch = 0  # whose frames the host reads now (see ``tag``)
        self.dropped = 0  # checkpoints the kernel killed (out of memory: they go first)
        self.template: Optional[Child] = None
        """One-shot with ``preload``: the code process that ran it, which each execution's
        process is forked from (see ``start_template``)."""
        self.selector = selectors.DefaultSelector()
        self.buffer = bytearray(CHUNK)
        self.staging = mmap.mmap(-1, MAX_CHILD_HEADER, flags=mmap.MAP_PRIVATE)
        self.staged = 0  # bytes of ``staging`` that may hold data
        self.notes: List[str] = []
        self.shell = "stdlib"  # what runs the cells: "ipython" once a session's process says so
        self.mounter: Optional[Mounter] = None  # renews the workspace's view (ordinary host)
        self.relay: Optional[Relay] = None  # the proxy's end (network=[...])

    # -- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        self.host_in = os.dup(0)  # os.dup makes non-inheritable descriptors
        self.host_out = os.dup(1)
        self.diag = os.dup(2)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # nothing printed by accident can reach the channel
        os.close(null)
        faulthandler.enable(file=self.diag)
        # Everything this process and the code's processes need from the standard library is
        # imported now, before any change of directory, from the interpreter's own paths only
        # (it runs isolated: no current directory, no user site, no PYTHON* variables).
        for module in PRELOAD:
            __import__(module)
        system.libc()
        if self.config.get("ns_root") and not system.become_namespace_root():
            self.fail("the supervisor could not take its user namespace's root")
        # The proxy's end (network=[...]): the loopback is brought up while this process may,
        # and the proxy's folder held before anything covers or hides it.
        self.relay = start_relay(self.selector, self.config, self.notes.append)
        if self.config.get("own_ipc"):
            # Still root of the sandbox's own namespaces here: bound what shared memory the
            # code can pin outside its processes (it all goes with the namespaces).
            limit = self.config.get("memory_limit_bytes")
            if not system.limit_sysv_ipc(limit):
                self.notes.append("SysV shared memory could not be bounded")
            if not system.private_tmpfs("/dev/shm", limit):
                self.notes.append("/dev/shm is the host's (a private one could not be mounted)")
        for cover in self.config.get("cover") or ():
            why = system.cover(
                str(cover["dir"]),
                [str(path) for path in cover["keep"]],
                int(cover["mode"], 8),
                cover.get("limit"),
            )
            if why:
                self.fail("the sandbox's %s could not be set up: %s" % (cover["dir"], why))
        for source, target in self.config.get("binds") or ():
            # (a directory a root host mounted for this sandbox: see host/views.py)
            why = system.bind(str(source), str(target))
            if why:
                self.fail("%s could not be shown to the code: %s" % (target, why))
        for folder in self.config.get("read_only") or ():
            why = system.bind(str(folder), str(folder)) or system.remount_bind_read_only(
                str(folder)
            )
            if why:
                self.fail("%s could not be shown read-only: %s" % (folder, why))
        mqueue = self.config.get("mqueue")
        if mqueue and not system.mount_mqueue(str(mqueue)):
            self.notes.append("POSIX message queues cannot be listed (no mqueue mount)")
        gate = self.config.get("cgroup_gate")
        if gate is not None:
            # The host moves this sandbox's processes into their cgroups while they start; no
            # code runs before they are in (nor is this process's own counter opened).
            answer = read_answer(int(gate), 1024)
            if answer != b"\0":
                reason = answer[1:].decode("utf-8", "replace") or "the host said nothing"
                self.fail("the sandbox could not be moved into its cgroups: %s" % reason)
            if self.config.get("own_cgroupns"):
                # Started before the move, the namespace bwrap made is rooted at the host's
                # cgroup: one rooted here shows the code its own cgroup as "/", and no more.
                why = system.new_cgroup_namespace()
                if why:
                    self.notes.append("the code sees the host's cgroup paths (%s)" % why)
        if self.config.get("oom_counter") == "self":
            open_own_counter()
        workspace = self.config.get("workspace")
        if workspace:  # (before /run is hidden: a root host's view is mounted there)
            self.setup_workspace(workspace)
        hidden = self.config.get("hide")
        if hidden:
            failed = system.hide(list(hidden["dirs"]), list(hidden["files"]))
            if failed:
                self.notes.append("not hidden from the code: %s" % ", ".join(failed))
        mapping = self.config.get("nested_userns")
        if mapping:
            # The namespace this started in maps the host's root (bubblewrap and unshare set
            # the sandbox up as it): leave it for one that maps this process's uid only.
            why = system.enter_user_namespace(str(mapping))
            if why:
                self.fail("the supervisor could not leave the set-up user namespace: %s" % why)
        if self.config.get("own_userns"):
            why = system.limit_user_counters()
            if why:
                self.notes.append("per-user counters not lowered for the code: %s" % why)
        proc_sys = self.config.get("proc_sys")
        if proc_sys:
            why = system.read_only_proc_sys() if proc_sys == "remount" else ""
            if why or system.proc_sys_writable():
                self.fail("/proc/sys could not be made read-only for the code (%s)" % why)
        self.clean = clean_config(self.config)
        if self.config.get("memory_cgroup") and oom_kills(self.config) is None:
            self.notes.append("no memory cgroup could be made: the memory cap is per process")
        self.take_user()
        if not system.set_dumpable(False):
            self.notes.append("the supervisor could not be made non-dumpable (no ctypes here)")
        system.set_no_new_privs()
        program = self.config.get("seccomp")
        if program:
            # Last: the set-up above needed mount and unshare, which the filter refuses. Every
            # process forked from here on, the code's included, runs under it.
            why = system.load_seccomp(bytes.fromhex(str(program)))
            if why or system.seccomp_mode() != 2:
                self.fail("the seccomp filter could not be loaded (%s)" % why)
        for name in IGNORED_SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        # SIGINT stays at its default but blocked: a code process forked from here starts with
        # it blocked, so an interrupt sent before it installed its handler waits, not vanishes.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        if not self.first:
            system.set_subreaper()  # so that what the code leaves running stays findable
        try:  # (the code's process changes there itself: this user may not enter it)
            os.chdir(self.config.get("cwd") or os.getcwd())
        except OSError:
            pass
        self.selector.register(self.host_in, selectors.EVENT_READ, self.on_host)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self.on_wake)
        if self.once:
            preload = self.config.get("preload")
            if preload:
                self.start_template(str(preload))
            self.spare = self.next_spare()
        else:
            first = self.branches[0] = self.spawn()
            while not first.ready:
                self.step()
                if first.exited:
                    write_all(self.diag, b"rewyn: the code's process failed to start\n")
                    os._exit(70)
        self.send_host(
            {
                "t": "ready",
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "implementation": sys.implementation.name,
                "executable": sys.executable,
                "platform": sys.platform,
                "shell": self.shell,
                "notes": self.notes,
            }
        )

    def setup_workspace(self, workspace: Dict[str, Any]) -> None:
        """Show the code the workspace at its own path (see the host's host/workspace.py): a
        root host mounted the view on an anchor, which is bound here (bubblewrap bound it
        already); elsewhere this process's mounter mounts each execution's view."""
        path = str(workspace["path"])
        self.config["cwd"] = path
        if workspace.get("note"):
            self.notes.append(str(workspace["note"])[:1000])
        if workspace.get("bind"):
            anchor = str(workspace["bind"])
            for relative in workspace.get("keep") or []:
                # What this Python runs from inside the workspace (a project's .venv), bound
                # into the anchor, still empty, before it covers the workspace: the first view,
                # mounted on the anchor once the sandbox is up, covers these with the same files.
                inner, kept = os.path.join(path, relative), os.path.join(anchor, relative)
                why = system.bind(inner, kept) or system.remount_bind_read_only(kept)
                if why:
                    self.fail("the workspace could not be shown to the code: %s" % why)
            why = system.bind(anchor, path)
            if why:
                self.fail("the workspace could not be shown to the code: %s" % why)
            return
        if workspace.get("bound") or not workspace.get("staging"):
            return
        if not self.config.get("own_ipc"):
            self.notes.append(
                "the workspace is shown as it is (no mount namespace here): the code changes "
                "the files directly, and no earlier version is kept"
            )
            return
        self.mounter = mounter.start(path, str(workspace["staging"]))
        why = "the mounter could not start"
        if self.mounter is not None:
            request = {"op": "view", "cell": workspace.get("cell", 1)}
            why = self.mounter.ask({**request, "protected": workspace.get("protected") or []})
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
        users = self.config.get("users")
        if users:
            uid, gid = users["supervisor"]
            if system.become(int(uid), int(gid), keep=(CAP_KILL, CAP_SETGID, CAP_SETUID)):
                return
            self.config["users"] = None
            self.notes.append("the supervisor could not take a user of its own")
        if not system.drop_capabilities():
            if system.holds_capabilities():
                # Root of the sandbox's own namespaces (bubblewrap, unshare): the code would
                # keep CAP_SYS_ADMIN there (and remount the read-only views writable). Never.
                write_all(self.diag, b"rewyn: the supervisor could not drop its capabilities\n")
                os._exit(70)
            self.notes.append("capabilities could not be dropped (no ctypes here)")

    def run(self) -> None:
        self.start()
        while True:
            self.step()

    def step(self) -> None:
        watching = self.watching()
        events = self.selector.select(MEMORY_WATCH if watching else None)
        if watching:
            self.watch_memory()
        # Frames first: the code sends a frame only once its pipes are empty (what it printed
        # before was relayed already: see CodeProcess.finish_output), so output in this batch
        # was printed after the frame, and stays after it. Then stdout before stderr: the code
        # flushes them in that order, as ipykernel does.
        outs = [child.out for child in self.children()]
        events.sort(
            key=lambda event: (
                0 if event[0].data == self.on_frames else 1 if event[0].fd in outs else 2
            )
        )
        for key, _ in events:
            key.data(key.fd)

    # -- the code's process ----------------------------------------------------------------

    def children(self) -> List[Child]:
        """Every code process this supervisor knows of."""
        found = [child for child in (self.child, self.spare, self.template) if child is not None]
        return found + list(self.branches.values()) + self.starting

    def spawn(self, once: Optional[bool] = None) -> Child:
        once = self.once if once is None else once
        ctl_r, ctl_w = os.pipe()
        frm_r, frm_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # A session's code process gets a socket too: the pipes of a branch it forks come
        # through it (``on_fork``). The supervisor only writes to it.
        fds_r, fds_w = socket_pair() if not once else (-1, -1)
        pid = os.fork()
        if pid == 0:  # the code's process
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            self.staging.close()
            for fd in (self.host_in, self.host_out, self.wake_r, self.wake_w, ctl_w, frm_r):
                os.close(fd)
            for other in self.children():
                for fd in (other.ctl, other.frm, other.out, other.err, other.fds):
                    close_quietly(fd)
            close_quietly(fds_w)
            for fd in _OWN_COUNTER:
                os.close(fd)
            if self.mounter is not None:
                os.close(self.mounter.commands)
                os.close(self.mounter.replies)
            if self.relay is not None:
                self.relay.close_in_child()
            for fd in (out_r, err_r):
                os.close(fd)
            os.close(self.diag)
            if not self.first:
                system.set_death_signal(signal.SIGKILL)
            pipes = {"ctl": ctl_r, "frm": frm_w, "out": out_w, "err": err_w, "fds": fds_r}
            run_child(self.config, pipes, once)
            os._exit(70)  # (run_child never returns)
        for fd in (ctl_r, frm_w, out_w, err_w, fds_r):
            close_quietly(fd)
        child = Child(pid, ctl_w, frm_r, out_r, err_r, fds=fds_w)
        self.watch(child)
        return child

    def watch(self, child: Child) -> None:
        """Read what ``child`` sends from now on."""
        for fd, handler in (
            (child.frm, self.on_frames),
            (child.out, self.on_output),
            (child.err, self.on_output),
        ):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, handler)

    def start_template(self, code: str) -> None:
        """(One-shot, at start.) Fork a code process that runs ``code`` (the host's preload:
        imports every execution uses) and then only forks: each execution's process is a
        fork of it (``next_spare``), so none pays for the imports and each starts from the
        same state. What it prints is dropped; a preload that fails leaves a note, and the
        executions' processes are forked from here as without one."""
        template = self.template = self.spawn(once=False)
        template.muted = True
        while not template.ready and not template.exited:
            self.step()
        if template.ready and not template.exited:
            body = encode_header({"t": "exec", "id": "preload", "count": 0})
            payload = code.encode("utf-8", "surrogatepass")
            template.exec_id = "preload"
            write_all(template.ctl, HEADER.pack(len(body), len(payload)) + body + payload)
            while template.status is None and not template.exited:
                self.step()
        status = template.status
        if status is not None and status[1] == "ok" and not template.exited:
            template.exec_id, template.status = None, None
            return
        how = "its process ended" if status is None else "it ended as %r" % status[1]
        self.notes.append("the preload failed (%s): each execution starts without it" % how)
        self.drop_template(template)

    def drop_template(self, template: Child) -> None:
        self.signal_child(template, signal.SIGKILL)
        self.close_child(template)
        if self.template is template:
            self.template = None

    def next_spare(self) -> Optional[Child]:
        """The next one-shot execution's process: forked from the template where there is one
        (it arrives as ``on_forked`` takes it; ``await_spare``), else from here."""
        template = self.template
        if template is not None and template.exited:
            self.drop_template(template)
            self.notes.append("the preload's process ended: executions start without it")
            template = None
        if template is None:
            return self.spawn()
        self.begin_fork(template, "spare", 0, {"once": True})
        return self.spare  # (None, or what a failed hand-over forked from here)

    def await_spare(self) -> Optional[Child]:
        """(One-shot.) Wait for the template's answer to the spare's fork (the host sent an
        execution before it came): the spare, or None if it did not come."""
        template = self.template
        deadline = time.monotonic() + FORK_WAIT
        while template is not None and template.forking is not None and self.spare is None:
            left = deadline - time.monotonic()
            if left <= 0 or not self.registered(template.frm):
                break
            if select.select([template.frm], [], [], left)[0]:
                for _ in range(FRAME_READS):
                    if not self.read_frames(template):
                        break
        if self.spare is None and template is not None and template.forking is not None:
            self.fork_failed(template, "the template did not fork in time")
        return self.spare

    def on_wake(self, fd: int) -> None:
        try:
            os.read(fd, 4096)
        except OSError:
            pass
        self.reap()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.child
            if child is not None and pid == child.pid:
                child.wait_status = status
                self.on_child_exit(child)
            elif self.spare is not None and pid == self.spare.pid:
                spare, self.spare = self.spare, None  # it failed to set up: the next one forks
                self.forget_spare(spare)
            elif self.template is not None and pid == self.template.pid:
                self.template.wait_status = status
                self.drop_template(self.template)
                self.notes.append("the preload's process ended: executions start without it")
            else:
                branch = self.branch_of(pid)
                if branch is not None:
                    branch.wait_status = status
                    self.on_branch_exit(branch)
                elif not self.once and len(self.early) < MAX_BRANCHES:
                    self.early[pid] = status  # (a branch whose fork is not confirmed yet)

    def branch_of(self, pid: int) -> Optional[Child]:
        for child in self.branches.values():
            if child.pid == pid:
                return child
        return None

    def on_child_exit(self, child: Child) -> None:
        """A one-shot execution's process ended: so did its execution."""
        self.kill_leftovers()
        if self.config.get("own_ipc"):
            system.remove_sysv_shm()  # (what the execution left in the sandbox's own IPC)
        self.drain(child, to_end=True)
        self.finish_exec(child)

    def on_branch_exit(self, child: Child) -> None:
        """A session's code process ended: its state is gone. Its execution ends ``lost``; the
        host is told (``gone``) unless it closed it; a fork it was making fails. With no other
        branch left, so is this sandbox."""
        self.drain(child, to_end=False)
        if child.exec_id is not None:
            self.finish_exec(child)
        if child.forking is not None:
            self.fork_failed(child, "the process it was forked from ended")
        status = child.wait_status
        if child.paused and not child.closing and status is not None and os.WIFSIGNALED(status):
            self.dropped += 1  # (the kernel's OOM kill of a checkpoint: see finish_exec)
        del self.branches[child.branch]
        self.close_child(child)
        if not self.branches:
            self.shutdown()
        if not child.closing:
            gone: Header = {"t": "gone", "b": child.branch}
            if status is not None and os.WIFSIGNALED(status):
                gone["signal"] = os.WTERMSIG(status)
            elif status is not None and os.WIFEXITED(status):
                gone["exit_code"] = os.WEXITSTATUS(status)
            self.send_host(gone, child.branch)

    def finish_exec(self, child: Child) -> None:
        """Send ``done`` for the execution ``child`` runs, from how it ended; forget it."""
        done: Header = {"t": "done", "id": child.exec_id}
        status = child.wait_status
        if child.violation is not None:
            done.update(exit_code=128 + signal.SIGKILL, status="protocol_error")
            done["detail"] = child.violation
        elif child.aborted:
            done.update(exit_code=128 + signal.SIGKILL, status="aborted")
        elif status is not None and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            done.update(exit_code=128 + sig, status="crashed", signal=sig)
        else:
            real = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 1
            claimed = child.status
            if status is None and claimed is not None:
                done.update(exit_code=claimed[0], status=claimed[1])  # a session's execution
            elif claimed is not None and claimed[0] & 0xFF == real:
                done.update(exit_code=claimed[0], status=claimed[1])
            else:
                done.update(exit_code=real, status="crashed")
        if status is not None and not self.once:
            done["lost"] = True
        after = oom_kills(self.config)
        # (a checkpoint the kernel killed meanwhile is not this execution's)
        killed = self.dropped - child.dropped_before
        if child.oom_before is not None and after is not None and after - child.oom_before > killed:
            done["oom"] = True
        self.send_host(done, child.branch)
        child.exec_id = None
        child.aborted = False
        child.status = None
        if self.once:
            self.forget(child)

    def close_child(self, child: Child) -> None:
        """Stop reading ``child`` and close the supervisor's ends of its pipes."""
        for fd in (child.frm, child.out, child.err):
            self.unregister(fd)
            close_quietly(fd)
        close_quietly(child.ctl)
        close_quietly(child.fds)
        child.frm = child.out = child.err = child.ctl = child.fds = -1
        self.clear()

    def forget(self, child: Child) -> None:
        self.close_child(child)
        self.child = None
        # The next execution's process, forked now that nothing of this one is left, does
        # its set-up while the host reads the result.
        self.spare = self.next_spare()

    def forget_spare(self, spare: Child) -> None:
        self.close_child(spare)

    def kill_leftovers(self) -> None:
        """Kill every process but this one (and the template), and reap them (a one-shot
        execution is over)."""
        keep = self.template.pid if self.template is not None else None
        if self.first and keep is None:
            # The first process of a PID namespace: -1 reaches every other process in it, and
            # only those. (Anywhere else -1 would mean every process of this user: never.)
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    return
                except InterruptedError:
                    continue
        for _ in range(100):
            found = [pid for pid in descendants(os.getpid()) if pid != keep]
            if not found:
                return
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.reap_orphans()

    def reap_orphans(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.template is not None and pid == self.template.pid:
                self.template.wait_status = status  # (``next_spare`` lets it go)

    def shutdown(self) -> None:
        """Kill everything this sandbox runs, and exit."""
        if not self.first:
            self.kill_leftovers()
        os._exit(0)  # (as a PID namespace's first process, this exit kills the rest)

    # -- the host's frames -----------------------------------------------------------------

    def on_host(self, fd: int) -> None:
        head = read_exact(fd, HEADER.size)
        if head is None:
            self.shutdown()  # the host closed the channel, or is gone
        assert head is not None
        body_len, payload_len = HEADER.unpack(head)
        body = read_exact(fd, body_len) if body_len <= MAX_HOST_HEADER else None
        if body is None:
            self.shutdown()
        assert body is not None
        header = json.loads(body.decode("ascii"))
        kind = header.get("t")
        branch = header.get("b", 0)
        if not isinstance(branch, int):
            branch = -1
        child = self.child if self.once else self.branches.get(branch)
        running = child if child is not None and child.exec_id is not None else None
        if kind == "exec":
            self.start_exec(header, payload_len, branch)
        elif kind == "input_reply" and running and header.get("exec") == running.exec_id:
            self.to_child(running, {"t": "input_reply", **header}, payload_len)
        elif kind == "interrupt":
            if running and header.get("id") == running.exec_id:
                # The frame too, for an interrupt that comes before the code's process has
                # taken up the execution (the signal alone would find it idle, and be lost).
                self.to_child(running, {"t": "interrupt", "id": running.exec_id}, 0)
                self.signal_child(running, signal.SIGINT)
        elif kind == "abort":
            if running and header.get("id") == running.exec_id:
                running.aborted = True
                self.signal_child(running, signal.SIGKILL)
        elif kind in ("complete", "inspect"):
            if child is not None and not running and not child.paused and not self.once:
                self.to_child(child, header, payload_len)
            else:
                self.skip(payload_len)
                self.send_host(empty_reply(header), branch)
        elif kind == "view":
            self.skip(payload_len)
            self.on_view(header, branch)
        elif kind == "fork":
            self.skip(payload_len)
            self.on_fork(header, child, branch)
        elif kind == "close":
            self.skip(payload_len)
            if child is not None and not self.once:
                child.closing = True
                self.signal_child(child, signal.SIGKILL)
        elif kind == "resume":
            self.skip(payload_len)
            if child is not None and child.paused:
                child.paused = False
                self.signal_child(child, signal.SIGCONT)
                self.to_child(child, {"t": "resumed"}, 0)
        elif kind == "shutdown":
            self.shutdown()
        else:
            self.skip(payload_len)

    def on_view(self, header: Header, branch: int) -> None:
        """The host published an execution's writes: ask the mounter for the next view."""
        why = "no mounter here" if self.mounter is None else ""
        if self.mounter is not None:
            request = {"op": "view", "cell": int(header.get("cell") or 0)}
            protected = [str(path)[:4096] for path in (header.get("protected") or [])[:256]]
            why = self.mounter.ask({**request, "protected": protected})
        reply = {"t": "view_done", "id": str(header.get("id"))[:200], "ok": not why}
        self.send_host({**reply, "detail": why[:2000]}, branch)

    def start_exec(self, header: Header, payload_len: int, branch: int) -> None:
        child: Optional[Child]
        if self.once:
            child = self.child or self.spare or self.await_spare() or self.spawn()
            self.child, self.spare = child, None
        else:
            found = self.branches.get(branch)
            child = found if found is not None and not found.paused else None
        if child is None or child.exec_id is not None:
            # The host never sends two at once, nor to a branch it has not got: refuse it.
            self.skip(payload_len)
            refused = {"t": "done", "id": header.get("id"), "exit_code": 1}
            self.send_host({**refused, "status": "protocol_error"}, branch)
            return
        self.count += 1
        child.exec_id = str(header.get("id"))
        child.oom_before = oom_kills(self.config)
        child.dropped_before = self.dropped
        forwarded: Header = {"t": "exec", "id": child.exec_id, "count": self.count}
        if isinstance(header.get("count"), int):
            forwarded["count"] = header["count"]  # (the caller's numbering: a kernel's prompts)
        for flag in ("silent", "comm"):
            if header.get(flag):
                forwarded[flag] = True
        if header.get("parent"):
            forwarded["parent"] = str(header["parent"])[:256]
        self.to_child(child, forwarded, payload_len)

    # -- branches --------------------------------------------------------------------------

    def on_fork(self, header: Header, source: Optional[Child], branch: int) -> None:
        """Ask ``source`` (a session's idle code process) to fork itself into branch ``n``.

        The new branch's pipes are made here and handed to ``source`` over its socket; it
        forks twice, so that the branch is this process's child (as the first process of the
        PID namespace, or its subreaper), and answers ``forked`` with the branch's pid, which
        is taken only if it is a child of this process and no other branch's (see
        ``on_status``). The host hears ``forked`` in any case, ``ok`` or not.
        """
        request = str(header.get("id"))[:200]
        number = header.get("n")
        why = ""
        if self.once or source is None or not source.ready:
            why = "there is no such session to fork"
        elif source.paused:
            why = "it is paused (a checkpoint): resume it first"
        elif source.exec_id is not None:
            why = "it is running code: a session forks between executions"
        elif source.forking is not None:
            why = "it is forking already"
        elif not isinstance(number, int) or not 0 < number < 2**31 or self.taken(number):
            why = "the new branch's number is taken or out of range"
        elif len(self.branches) + len(self.starting) >= MAX_BRANCHES:
            why = "this sandbox runs %d branches already, the most it may" % MAX_BRANCHES
        short = "" if why else self.memory_short()
        if why or short:
            refused = {"t": "forked", "id": request, "ok": False, "detail": why or short}
            if short:
                refused["memory"] = True
            self.send_host(refused, branch)
            return
        assert source is not None
        assert isinstance(number, int)
        asked = {"reseed": bool(header.get("reseed")), "pause": bool(header.get("pause"))}
        self.begin_fork(source, request, number, asked)

    def begin_fork(self, source: Child, request: str, number: int, asked: Header) -> None:
        """Make branch ``number``'s pipes, hand them to ``source`` and ask it to fork."""
        ctl_r, ctl_w = os.pipe()
        frm_r, frm_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds_r, fds_w = socket_pair()
        theirs = [ctl_r, frm_w, out_w, err_w, fds_r]
        new = Child(0, ctl_w, frm_r, out_r, err_r, branch=number, fds=fds_w)
        self.starting.append(new)
        self.watch(new)
        source.forking = (request, new, bool(asked.get("pause")))
        ask = {"t": "fork", **asked}
        handed = self.hand_fds(source, theirs)
        for fd in theirs:
            close_quietly(fd)
        if not handed:
            self.fork_failed(source, "its socket for the branch's pipes is full or closed")
            return
        self.to_child(source, ask, 0)

    def memory(self) -> Optional[Tuple[int, int]]:
        """(used, cap) in bytes where this process reads the sandbox's memory itself
        (``memory_view``), else None."""
        if self.config.get("memory_view") != "meminfo":
            return None
        found: Dict[str, int] = {}
        try:
            with open("/proc/meminfo") as handle:
                for line in handle:
                    key, _, value = line.partition(":")
                    if key in ("MemTotal", "MemAvailable"):
                        found[key] = int(value.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        if len(found) != 2:
            return None
        return found["MemTotal"] - found["MemAvailable"], found["MemTotal"]

    def headroom(self, cap: int) -> int:
        least, share = self.config.get("fork_headroom") or (32 << 20, 20)
        return max(int(least), cap // int(share))

    def memory_short(self) -> str:
        """Why a fork would leave too little memory under the cap ('' if it would not)."""
        seen = self.memory()
        if seen is None:
            return ""
        used, cap = seen
        need = self.headroom(cap)
        if cap - used >= need:
            return ""
        return (
            "%d MiB are free under the sandbox's memory cap of %d MiB, and a branch needs %d MiB "
            "to start (free memory in the session, or raise memory_limit_mb)"
            % (max(0, cap - used) >> 20, cap >> 20, need >> 20)
        )

    def watching(self) -> bool:
        """Whether code runs beside a checkpoint where this process watches the memory."""
        if self.config.get("memory_view") != "meminfo":
            return False
        branches = self.branches.values()
        return any(b.paused for b in branches) and any(b.exec_id for b in branches)

    def watch_memory(self) -> None:
        """Drop the oldest checkpoint when the memory comes within a fork's headroom of the
        cap (as the host does where it reads the sandbox's cgroup: a checkpoint must never
        cost the code memory; here, out of memory, gVisor would end the whole sandbox)."""
        seen = self.memory()
        if seen is None or seen[1] - seen[0] >= self.headroom(seen[1]):
            return
        paused = [b for b in self.branches.values() if b.paused and not b.closing]
        if not paused:
            return
        oldest = min(paused, key=lambda b: b.branch)
        oldest.closing = True
        self.signal_child(oldest, signal.SIGKILL)
        why = "dropped when the sandbox's memory came within %d MiB of its cap of %d MiB" % (
            self.headroom(seen[1]) >> 20,
            seen[1] >> 20,
        )
        self.send_host({"t": "gone", "b": oldest.branch, "detail": why}, oldest.branch)

    def taken(self, number: int) -> bool:
        return number in self.branches or any(child.branch == number for child in self.starting)

    def hand_fds(self, child: Child, fds: List[int]) -> bool:
        """Send ``fds`` over ``child``'s socket, without waiting (it may never read)."""
        import array

        try:
            carrier = socket.socket(fileno=os.dup(child.fds))
        except OSError:
            return False
        try:
            rights = array.array("i", fds).tobytes()
            carrier.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            return True
        except OSError:
            return False
        finally:
            carrier.close()

    def fork_failed(self, source: Child, why: str) -> None:
        if source.forking is None:
            return
        request, new, _ = source.forking
        source.forking = None
        if new in self.starting:
            self.starting.remove(new)
        self.close_child(new)
        if new.pid:
            self.signal_child(new, signal.SIGKILL)
        if source is self.template:  # (the next execution's process comes from here)
            self.notes.append("a fork of the preload failed (%s)" % why[:200])
            self.spare = self.spawn()
            return
        failed = {"t": "forked", "id": request, "ok": False, "detail": why[:500]}
        self.send_host(failed, source.branch)

    def on_forked(self, source: Child, status: Dict[str, Any]) -> None:
        """The code's process says it forked (or could not): check and take the branch."""
        if source.forking is None:
            return  # nothing was asked of it
        if status.get("status") == "fork_failed":
            self.fork_failed(source, str(status.get("detail") or "the fork failed"))
            return
        pid = status.get("pid")
        known = [child.pid for child in self.children()]
        if not isinstance(pid, int) or pid <= 1 or pid == os.getpid() or pid in known:
            self.fork_failed(source, "it named no process of its own")
            return
        ended = self.early.pop(pid, None)
        if ended is None:
            mine = adopted(pid)
            if mine is None:
                self.fork_failed(source, "it named a process that is not a branch")
                return
            if not mine:
                ended = 0
        if ended is not None:
            self.fork_failed(source, "the branch ended as it started")
            return
        request, new, pause = source.forking
        source.forking = None
        self.starting.remove(new)
        new.pid, new.ready, new.paused = pid, True, pause
        if source is self.template:
            self.spare = new
            return
        self.branches[new.branch] = new
        if pause:
            self.signal_child(new, signal.SIGSTOP)
        forked = {"t": "forked", "id": request, "ok": True, "n": new.branch, "pid": pid}
        self.send_host(forked, source.branch)

    def to_child(self, child: Child, header: Header, payload_len: int) -> None:
        """Send a frame to the code's process, its payload streamed from the host's channel
        (in the same write as the header when it fits in one)."""
        body = encode_header(header)
        self.pass_through(child.ctl, payload_len, HEADER.pack(len(body), payload_len) + body)

    def skip(self, size: int) -> None:
        self.pass_through(None, size)

    def pass_through(self, target: Optional[int], size: int, head: bytes = b"") -> None:
        """Copy ``size`` bytes of the host's channel to ``target`` (None: drop them), after
        ``head``; the code's process dying meanwhile only drops the rest."""
        view = memoryview(self.buffer)
        used = 0
        try:
            while size > 0 or head:
                got = os.readv(self.host_in, [view[: min(size, CHUNK)]]) if size > 0 else 0
                if size > 0 and got == 0:
                    self.shutdown()
                size -= got
                used = max(used, got)
                if target is not None:
                    try:
                        write_all_parts(target, head, view[:got])
                    except OSError:
                        target = None  # the code's process died while reading
                head = b""
        finally:
            view.release()
            self.buffer[:used] = ZEROS[:used]

    def signal_child(self, child: Child, signum: int) -> None:
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass

    def send_host(self, header: Header, branch: int = 0) -> None:
        self.tag(branch)
        body = encode_header(header)
        write_all(self.host_out, HEADER.pack(len(body), 0) + body)

    def tag(self, branch: int) -> None:
        """Say whose frames follow, when it is another branch than the last frame's: the host
        reads every frame after ``{"t": "b", "b": N}`` as branch N's. Only this process sends
        it (a code process may not), so no branch can speak for another. A sandbox that never
        forked never sends one."""
        if branch != self.sent_branch:
            self.sent_branch = branch
            body = encode_header({"t": "b", "b": branch})
            write_all(self.host_out, HEADER.pack(len(body), 0) + body)

    # -- what the code's process sends -----------------------------------------------------

    def owner(self, fd: int) -> Optional[Child]:
        for child in self.children():
            if fd in (child.frm, child.out, child.err):
                return child
        return None

    def on_output(self, fd: int) -> None:
        child = self.owner(fd)
        if child is None:
            self.unregister(fd)
            return
        self.relay_output(child, fd)

    def relay_output(self, child: Child, fd: int) -> bool:
        """Relay one read of the code's stdout or stderr; False when nothing was there."""
        view = memoryview(self.buffer)
        got = 0
        try:
            try:
                got = os.readv(fd, [view])
            except (BlockingIOError, InterruptedError):
                return False
            if got == 0:
                self.unregister(fd)
                return False
            if child.muted:
                return True
            body = OUT_HEADERS[fd == child.out]
            self.tag(child.branch)
            write_all(self.host_out, HEADER.pack(len(body), got) + body)
            write_all(self.host_out, view[:got])
            return True
        finally:
            view.release()
            self.buffer[:got] = ZEROS[:got]

    def drain(self, child: Child, to_end: bool) -> None:
        """Relay what the code's process has written so far (``to_end``: everything, as every
        writer is dead), frames after output: what it printed before a frame stays before it."""
        for fd in (child.out, child.err):
            for _ in range(1 << 20 if to_end else 16):
                if not self.registered(fd) or not self.relay_output(child, fd):
                    break
        while to_end and self.registered(child.frm) and self.read_frames(child):
            pass

    def on_frames(self, fd: int) -> None:
        child = self.owner(fd)
        if child is None:
            self.unregister(fd)
            return
        # All that is there (a header and its body come in separate reads), up to a bound:
        # output in the same batch is relayed after these frames, so a frame must not stop
        # halfway through.
        for _ in range(FRAME_READS):
            if not self.read_frames(child):
                break

    def read_frames(self, child: Child) -> bool:
        """Read once from the code's frame stream; False when nothing was there (or it ended)."""
        fd = child.frm
        try:
            if child.body_len < 0:
                data = os.read(fd, HEADER.size - len(child.head))
                if not data:
                    self.unregister(fd)
                    if child.head:
                        self.violate(child, "its frame stream ended in the middle of a frame")
                    return False
                child.head += data
                if len(child.head) < HEADER.size:
                    return True
                body_len, payload_len = HEADER.unpack(child.head)
                if payload_len or body_len > MAX_CHILD_HEADER or body_len == 0:
                    self.violate(
                        child, "it sent a frame of %d + %d bytes" % (body_len, payload_len)
                    )
                    return False
                child.body_len, child.got = body_len, 0
                self.staged = max(self.staged, body_len)
            view = memoryview(self.staging)
            try:
                got = os.readv(fd, [view[child.got : child.body_len]])
            finally:
                view.release()
            if got == 0:
                self.unregister(fd)
                self.violate(child, "its frame stream ended in the middle of a frame")
                return False
            child.got += got
            if child.got == child.body_len:
                self.frame_done(child)
            return True
        except (BlockingIOError, InterruptedError):
            return False

    def frame_done(self, child: Child) -> None:
        size = child.body_len
        child.head, child.body_len = b"", -1
        body = memoryview(self.staging)[:size]
        try:
            kind = frame_kind(body, CHILD_KINDS)
            if kind is None:
                self.violate(child, "it sent a frame it may not send")
            elif kind == "status":
                self.on_status(child, bytes(body) if size <= MAX_STATUS_BYTES else b"")
            elif not child.muted:
                self.tag(child.branch)
                write_all(self.host_out, HEADER.pack(size, 0))
                write_all(self.host_out, body)
        finally:
            body.release()
            self.clear()

    def on_status(self, child: Child, body: bytes) -> None:
        try:
            status = json.loads(body.decode("ascii"))
            exit_code, name = int(status.get("exit_code", 0)), str(status.get("status"))
        except Exception:
            self.violate(child, "it sent a malformed status frame")
            return
        if name == "ready" and not child.ready:
            child.ready = True
            if status.get("shell") == "ipython":
                self.shell = "ipython"
            if status.get("note"):
                self.notes.append(str(status["note"])[:1000])
            return
        if name in FORK_STATUSES and (not self.once or child is self.template):
            self.on_forked(child, status)
            return
        if name not in STATUSES or not -(2**31) <= exit_code < 2**31:
            self.violate(child, "it sent a malformed status frame")
            return
        if child.exec_id is None or status.get("id") != child.exec_id:
            return  # nothing it can end: no execution, or another one
        child.status = (exit_code, name)
        if not self.once:  # a session's process lives on: the execution ends now
            self.finish_exec(child)

    def violate(self, child: Child, what: str) -> None:
        """The code's process broke the protocol: it is killed, and the execution says why."""
        if child.violation is None:
            child.violation = "the code's process broke the frame protocol: " + what
        self.signal_child(child, signal.SIGKILL)

    def clear(self) -> None:
        """Wipe what passed through the staging mapping (its pages come back as zeros)."""
        if self.staged > CHUNK:
            self.staging.madvise(mmap.MADV_DONTNEED)
        elif self.staged:
            self.staging[: self.staged] = ZEROS[: self.staged]
        self.staged = 0

    def registered(self, fd: int) -> bool:
        try:
            self.selector.get_key(fd)
            return True
        except (KeyError, ValueError):
            return False

    def unregister(self, fd: int) -> None:
        if self.registered(fd):
            self.selector.unregister(fd)


def adopted(pid: int) -> Optional[bool]:
    """Whether ``pid`` is a live child of this process (True), one that has ended (False,
    reaped now), or not a child at all (None). The process in between a branch and its
    source has exited by now, but under gVisor the branch may take a moment to be handed
    to this process: it is looked for again, for at most ADOPTION_WAIT seconds."""
    deadline = time.monotonic() + ADOPTION_WAIT
    while True:
        try:
            return os.waitpid(pid, os.WNOHANG)[0] != pid
        except ChildProcessError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)


def socket_pair() -> Tuple[int, int]:
    """A Unix stream socket pair as bare descriptors (the code's end first); this process
    never reads its end (shut for reading: the code cannot fill it)."""
    theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.shutdown(socket.SHUT_RD)
    return theirs.detach(), ours.detach()


def close_quietly(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def write_all_parts(fd: int, head: bytes, rest: memoryview) -> None:
    """Write ``head`` then ``rest`` (one writev when they fit, the rest as needed)."""
    written = os.writev(fd, [head, rest]) if head else 0
    if written < len(head):
        write_all(fd, memoryview(head)[written:])
        write_all(fd, rest)
    else:
        write_all(fd, rest[written - len(head) :])


def empty_reply(header: Header) -> Header:
    if header.get("t") == "complete":
        pos = int(header.get("cursor_pos") or 0)
        return {
            "t": "complete_reply",
            "id": header.get("id"),
            "matches": [],
            "cursor_start": pos,
            "cursor_end": pos,
        }
    return {"t": "inspect_reply", "id": header.get("id"), "found": False, "data": {}}


def oom_kills(config: Dict[str, Any]) -> Optional[int]:
    """The sandbox's memory cgroup's OOM-kill count, or None where it has none of its own.
    ``oom_counter``: True in a container (its cgroup is at the root of what it sees), "self"
    where this process's cgroup path is the host's (the subprocess provider), or the path of
    the counter's file (bubblewrap binds it in)."""
    where = config.get("oom_counter")
    if not where:
        return None
    if where == "self":
        return _count_oom_kills(_OWN_COUNTER[0]) if _OWN_COUNTER else None
    paths = ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    if isinstance(where, str):
        paths = [where]
    for path in paths:
        try:
            with open(path) as handle:
                for line in handle:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == "oom_kill":
                        return int(parts[1])
        except (OSError, ValueError):
            continue
    return None


_OWN_COUNTER: List[int] = []
"""The descriptor of this sandbox's own cgroup's counter (oom_counter "self"), opened before
/sys/fs/cgroup is covered: the code must not reach its cgroup's files, or it could lift its cap."""


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


def open_own_counter() -> None:
    for path in own_cgroup_counters():
        try:
            _OWN_COUNTER.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            return
        except OSError:
            continue


def _count_oom_kills(fd: int) -> Optional[int]:
    try:
        text = os.pread(fd, 4096, 0).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
            return int(parts[1])
    return None


def own_cgroup_counters() -> List[str]:
    """Where this process's memory cgroup keeps its OOM-kill count (v2, then v1)."""
    found = []
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if number == "0" and not controllers:
                    found.append("/sys/fs/cgroup%s/memory.events" % path.rstrip("/"))
                elif "memory" in controllers.split(","):
                    found.append("/sys/fs/cgroup/memory%s/memory.oom_control" % path.rstrip("/"))
    except (OSError, ValueError):
        pass
    return found


def descendants(root: int) -> List[int]:
    """Every process whose chain of parents leads to ``root`` (read from /proc)."""
    parents: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: List[int] = []
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


def clean_config(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What each one-shot execution's process empties before it takes code (``child.py``):
    the folders the host names (``/tmp``, ``/dev/shm``, ``/dev/mqueue``), but the mount points
    in them (the scratch directory may be one) and the folders on the way; and SysV IPC."""
    asked = config.get("clean")
    if not asked or not config.get("fork_per_exec"):
        return None
    dirs = [str(path) for path in asked.get("dirs") or () if os.path.isdir(str(path))]
    keep = []
    for point in mount_points():
        if any(point.startswith(path.rstrip("/") + "/") for path in dirs):
            keep.append(point)
    cleaned = {"dirs": dirs, "keep": keep, "ipc": bool(asked.get("ipc"))}
    config["clean"] = cleaned
    return cleaned


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
