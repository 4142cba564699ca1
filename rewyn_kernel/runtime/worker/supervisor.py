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
import os
import selectors
import signal
import sys

from . import system
from .branches import Branches
from .codeframes import CodeFrames
from .memory import MEMORY_WATCH, Memory, oom_kills
from .processes import Processes
from .sandbox_setup import SandboxSetUp
from .wire import HEADER, read_exact, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Optional

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
