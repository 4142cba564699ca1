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

import json
import mmap
import os
import selectors
import signal

from .branches import Branches
from .codeframes import MAX_CHILD_HEADER, ZEROS, CodeFrames
from .memory import MEMORY_WATCH, Memory, oom_kills
from .mounter import Mounter
from .processes import Processes
from .relay import Relay
from .sandbox_setup import SandboxSetUp
from .wire import CHUNK, HEADER, encode_header, read_exact, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, List, Optional

    from .children import Child
    from .wire import Header

MAX_HOST_HEADER = 1 << 20


class Supervisor(SandboxSetUp, Processes, Branches, Memory, CodeFrames):
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

    def registered(self, fd: int) -> bool:
        try:
            self.selector.get_key(fd)
            return True
        except (KeyError, ValueError):
            return False

    def unregister(self, fd: int) -> None:
        if self.registered(fd):
            self.selector.unregister(fd)


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
