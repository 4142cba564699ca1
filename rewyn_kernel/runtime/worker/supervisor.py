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
  the code's process exited, then kills whatever that execution left running;
- it reads its config (``config.py``) and each frame of the host's (``frames.py``) as their
  declared types: one it cannot read stops it, saying which field of what is wrong.

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
import os
import selectors
import signal
import sys
import time

from . import system
from .branches import Branches
from .codeframes import CodeFrames
from .frames import (
    AbortFrame,
    CloseFrame,
    CompleteFrame,
    ExecFrame,
    ForkFrame,
    InputReplyFrame,
    InspectFrame,
    InterruptFrame,
    ResumedFrame,
    ResumeFrame,
    ViewFrame,
    read_host_frame,
)
from .memory import MEMORY_WATCH, Memory, oom_kills
from .processes import Processes
from .sandbox_setup import SandboxSetUp
from .wire import HEADER, read_exact, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import NoReturn, Optional, Union

    from .children import Child
    from .wire import Header

MAX_HOST_HEADER = 1 << 20


class Supervisor(SandboxSetUp, Processes, Branches, Memory, CodeFrames):
    """The sandbox's first process: sets it up, then relays between the host and the code's
    processes until the host's channel ends (``main.py`` runs ``start``, then ``step``)."""

    def start(self) -> None:
        """Take the host's channel off fds 0 and 1, set the sandbox up, start the code's first
        process (or a one-shot's template and spare), then say ``ready``."""
        self.host_in = os.dup(0)  # os.dup makes non-inheritable descriptors
        self.host_out = os.dup(1)
        self.diag = os.dup(2)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # nothing printed by accident can reach the channel
        os.close(null)
        faulthandler.enable(file=self.diag)
        self.set_up()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        if not self.first:
            system.set_subreaper()  # so that what the code leaves running stays findable
        try:  # (the code's process changes there itself: this user may not enter it)
            os.chdir(self.config.cwd or os.getcwd())
        except OSError:
            pass
        self.selector.register(self.host_in, selectors.EVENT_READ, self.on_host)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self.on_wake)
        if self.once:
            if self.config.preload:
                self.start_template(self.config.preload)
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

    def run(self) -> None:
        self.start()
        while True:
            self.step()

    def step(self) -> None:
        watching = self.watching()
        wait = MEMORY_WATCH if watching else None
        late = self.fork_deadline()
        due = self.forks_due()
        if due is not None:
            late = due if late is None else min(late, due)
        if late is not None:
            until = max(0.0, late - time.monotonic())
            wait = until if wait is None else min(wait, until)
        events = self.selector.select(wait)
        if watching:
            self.watch_memory()
        if late is not None:
            self.forks_late()
            self.fork_those_due()
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
        try:
            frame = read_host_frame(json.loads(body.decode("ascii")))
        except ValueError as exc:  # (WireError; not JSON, or not ASCII)
            self.refuse(str(exc))
        branch = frame.b
        child = self.child if self.once else self.branches.get(branch)
        running = child if child is not None and child.exec_id is not None else None
        if isinstance(frame, ExecFrame):
            self.start_exec(frame, payload_len)
        elif isinstance(frame, InputReplyFrame) and running and frame.exec == running.exec_id:
            self.to_child(running, frame, payload_len)
        elif isinstance(frame, InterruptFrame):
            if running and frame.id == running.exec_id:
                # The frame too, for an interrupt that comes before the code's process has
                # taken up the execution (the signal alone would find it idle, and be lost).
                self.to_child(running, InterruptFrame(id=running.exec_id), 0)
                self.signal_child(running, signal.SIGINT)
        elif isinstance(frame, AbortFrame):
            if running and frame.id == running.exec_id:
                running.aborted = True
                self.signal_child(running, signal.SIGKILL)
        elif isinstance(frame, (CompleteFrame, InspectFrame)):
            if child is not None and not running and not child.paused and not self.once:
                self.to_child(child, frame, payload_len)
            else:
                self.skip(payload_len)
                self.send_host(empty_reply(frame), branch)
        elif isinstance(frame, ViewFrame):
            self.skip(payload_len)
            self.on_view(frame)
        elif isinstance(frame, ForkFrame):
            self.skip(payload_len)
            self.on_fork(frame, child)
        elif isinstance(frame, CloseFrame):
            self.skip(payload_len)
            if child is not None and not self.once:
                child.closing = True
                self.signal_child(child, signal.SIGKILL)
            for new in self.starting:  # (one being forked is killed as it comes: on_forked)
                if new.branch == frame.b and not self.once:
                    new.closing = True
            for owner in self.children():  # (one to fork after an execution: not made)
                if owner.then_fork is not None and owner.then_fork[1] == frame.b:
                    self.fork_not_made(owner, "it was closed")
        elif isinstance(frame, ResumeFrame):
            self.skip(payload_len)
            if child is not None and child.paused:
                child.paused = False
                self.signal_child(child, signal.SIGCONT)
                self.to_child(child, ResumedFrame(), 0)
        else:
            self.skip(payload_len)  # (an input_reply to an execution that is over)

    def refuse(self, why: str) -> NoReturn:
        """The host sent a frame this end cannot read (a bug of the host's, or a host and a
        worker that disagree on a frame): the sandbox ends, as the host ends a sandbox that
        breaks the protocol. Each execution under way ends ``protocol_error`` saying why, and
        so does the sandbox (exit 70, its diagnostics say it too)."""
        detail = "the host sent a frame the sandbox cannot read: %s" % why
        for child in self.children():
            if child.exec_id is not None:
                done: Header = {"t": "done", "id": child.exec_id, "exit_code": 1}
                done.update(status="protocol_error", detail=detail[:4000])
                self.send_host(done, child.branch)
        write_all(self.diag, ("rewyn: %s\n" % detail).encode("utf-8", "replace"))
        if not self.first:
            self.kill_leftovers()
        os._exit(70)  # (as a PID namespace's first process, this exit kills the rest)

    def on_view(self, frame: ViewFrame) -> None:
        """The host published an execution's writes: ask the mounter for the next view."""
        why = "no mounter here" if self.mounter is None else ""
        if self.mounter is not None:
            protected = [path[:4096] for path in frame.protected[:256]]
            why = self.mounter.ask({"op": "view", "cell": frame.cell, "protected": protected})
        reply = {"t": "view_done", "id": frame.id[:200], "ok": not why}
        self.send_host({**reply, "detail": why[:2000]}, frame.b)

    def start_exec(self, frame: ExecFrame, payload_len: int) -> None:
        child: Optional[Child]
        if self.once:
            child = self.child or self.spare or self.await_spare() or self.spawn()
            self.child, self.spare = child, None
        else:
            found = self.branches.get(frame.b)
            child = found if found is not None and not found.paused else None
        if child is None or child.exec_id is not None:
            # The host never sends two at once, nor to a branch it has not got: refuse it.
            self.skip(payload_len)
            refused = {"t": "done", "id": frame.id, "exit_code": 1}
            self.send_host({**refused, "status": "protocol_error"}, frame.b)
            return
        if child.then_fork is not None:  # (the last one's state: this execution comes first)
            self.fork_not_made(child, "the next execution came first", busy=True)
        self.count += 1
        child.exec_id = frame.id
        if frame.fork and not self.once and not frame.comm:
            child.then_fork = (frame.fork[:200], frame.fork_n, float("inf"))
        child.oom_before = oom_kills(self.config)
        child.dropped_before = self.dropped
        forwarded = ExecFrame(
            id=frame.id,
            # (the caller's numbering where it gave one: a kernel's prompts)
            count=self.count if frame.count is None else frame.count,
            silent=frame.silent,
            comm=frame.comm,
            parent=frame.parent[:256],
        )
        self.to_child(child, forwarded, payload_len)


def empty_reply(frame: Union[CompleteFrame, InspectFrame]) -> Header:
    """The answer to a request no code process can take (it runs code, or is paused)."""
    if isinstance(frame, CompleteFrame):
        pos = frame.cursor_pos
        return {
            "t": "complete_reply",
            "id": frame.id,
            "matches": [],
            "cursor_start": pos,
            "cursor_end": pos,
        }
    return {"t": "inspect_reply", "id": frame.id, "found": False, "data": {}}
