"""A session's branches and checkpoints, and a one-shot sandbox's preloaded template."""

from __future__ import annotations

import os
import select
import signal
import socket
import time

from .child import FORK_WAIT
from .children import MAX_BRANCHES, Child, adopted, close_quietly, socket_pair
from .codeframes import FRAME_READS
from .frames import ExecFrame, ForkFrame, ForkSelfFrame
from .memory import memory_short
from .state import State
from .wire import HEADER, encode_header, write_all

FORK_DELAY = 0.05
"""Seconds after an execution the fork the host asked for with it waits for the next execution,
which, if it comes first, makes it moot (``fork_after``): longer than the turn of any client
that sends cells at once, shorter than a person's."""

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, List, Optional


class Branches(State):
    """A session's branches and checkpoints; a one-shot sandbox's preloaded template."""

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
            body = encode_header(ExecFrame(id="preload", count=0).to_wire())
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
        self.begin_fork(template, "spare", 0, ForkSelfFrame(once=True))
        return self.spare  # (None, or what a failed hand-over forked from here)

    def await_spare(self) -> Optional[Child]:
        """(One-shot.) Wait for the spare the template is forking to say it is set up (the
        host sent an execution before it did): the spare, or None if it did not come."""
        while self.spare is None:
            pending = [new for new in self.starting if new.origin is not None]
            if not pending:
                break
            new = pending[0]
            left = new.origin[3] - time.monotonic() if new.origin is not None else 0.0
            if left <= 0 or not self.registered(new.frm):
                self.fork_failed(new, "the template's fork did not set up in time")
                continue
            if select.select([new.frm], [], [], left)[0]:
                for _ in range(FRAME_READS):
                    if not self.read_frames(new):
                        break
                if not self.registered(new.frm):
                    self.fork_failed(new, "the template's fork ended as it started")
        return self.spare

    def on_fork(self, frame: ForkFrame, source: Optional[Child]) -> None:
        """Ask ``source`` (a session's idle code process) to fork itself into branch ``n``.

        The new branch's pipes are made here and handed to ``source`` over its socket; it
        forks twice, so that the branch is this process's child (as the first process of the
        PID namespace, or its subreaper), and goes on at once: the branch itself says it is
        set up (``forked``, with its pid, on its own pipe), and is taken only if it is a child
        of this process and no other branch's (``on_forked``). Meanwhile ``source`` may run
        the host's next execution, which it reads after this: the branch holds the state from
        before it. The host hears ``forked`` in any case, ``ok`` or not.
        """
        request, number = frame.id[:200], frame.n
        why = ""
        if self.once or source is None or not source.ready:
            why = "there is no such session to fork"
        elif source.paused:
            why = "it is paused (a checkpoint): resume it first"
        elif source.exec_id is not None:
            why = "it is running code: a session forks between executions"
        elif not 0 < number < 2**31 or self.taken(number):
            why = "the new branch's number is taken or out of range"
        elif len(self.branches) + len(self.starting) >= MAX_BRANCHES:
            why = "this sandbox runs %d branches already, the most it may" % MAX_BRANCHES
        short = "" if why else memory_short(self.config)
        if why or short:
            refused = {"t": "forked", "id": request, "ok": False, "detail": why or short}
            if short:
                refused["memory"] = True
            self.send_host(refused, frame.b)
            return
        assert source is not None
        asked = ForkSelfFrame(n=number, reseed=frame.reseed, pause=frame.pause)
        self.begin_fork(source, request, number, asked)

    def begin_fork(self, source: Child, request: str, number: int, asked: ForkSelfFrame) -> None:
        """Make branch ``number``'s pipes, hand them to ``source`` and ask it to fork."""
        ctl_r, ctl_w = os.pipe()
        frm_r, frm_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds_r, fds_w = socket_pair()
        theirs = [ctl_r, frm_w, out_w, err_w, fds_r]
        new = Child(0, ctl_w, frm_r, out_r, err_r, branch=number, fds=fds_w)
        new.origin = (source, request, asked.pause, time.monotonic() + FORK_WAIT)
        self.starting.append(new)
        self.watch(new)
        handed = self.hand_fds(source, theirs)
        for fd in theirs:
            close_quietly(fd)
        if not handed:
            self.fork_failed(new, "its socket for the branch's pipes is full or closed")
            return
        self.to_child(source, asked, 0)

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

    def fork_after(self, child: Child) -> None:
        """``child``'s execution ended, leaving the state the host asked to keep: fork it in
        FORK_DELAY, unless another execution comes first. Cells sent at once ("Run All", a
        batch, calls in a loop) then pay no fork, and no copy-on-write after one: the state
        before the first of them is the one kept, and an undo goes back over them all. At a
        person's pace the fork is made while the output is read."""
        if child.then_fork is not None:
            request, number, _ = child.then_fork
            child.then_fork = (request, number, time.monotonic() + FORK_DELAY)

    def forks_due(self) -> Optional[float]:
        """When the first fork after an execution is due (None: none waits)."""
        # (only a session's branches fork after an execution: read at every wake-up, so no more)
        whens = [c.then_fork[2] for c in self.branches.values() if c.then_fork is not None]
        due = min(whens) if whens else None
        return due if due is not None and due != float("inf") else None

    def fork_those_due(self) -> None:
        now = time.monotonic()
        for child in list(self.branches.values()):
            then = child.then_fork
            if then is not None and then[2] <= now and child.exec_id is None:
                child.then_fork = None
                self.on_fork(ForkFrame(id=then[0], n=then[1], pause=True, b=child.branch), child)

    def fork_not_made(self, child: Child, why: str, busy: bool = False) -> None:
        """The fork after ``child``'s execution is not made: the host is told why."""
        if child.then_fork is None:
            return
        request = child.then_fork[0]
        child.then_fork = None
        failed = {"t": "forked", "id": request, "ok": False, "detail": why}
        if busy:
            failed["busy"] = True
        self.send_host(failed, child.branch)

    def fork_deadline(self) -> Optional[float]:
        """When the first branch being forked is late (None: none is being forked)."""
        deadlines = [new.origin[3] for new in self.starting if new.origin is not None]
        return min(deadlines) if deadlines else None

    def forks_late(self) -> None:
        """Fail the forks whose branch did not say it is set up in time (it is killed)."""
        now = time.monotonic()
        for new in list(self.starting):
            if new.origin is not None and new.origin[3] <= now:
                self.fork_failed(new, "the new branch did not set up in %g s" % FORK_WAIT)

    def forks_from(self, source: Child) -> List[Child]:
        """The branches being forked from ``source``."""
        return [new for new in self.starting if new.origin is not None and new.origin[0] is source]

    def fork_failed(self, new: Child, why: str) -> None:
        """The fork that was to make ``new`` failed: its pipes are closed, the host told."""
        if new.origin is None:
            return
        source, request, _, _ = new.origin
        new.origin = None
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

    def on_fork_status(self, child: Child, status: Dict[str, Any]) -> None:
        """A fork's word: the source's that it could not fork, or the new branch's that it
        is set up (or that the process in between could not make it)."""
        if child.origin is not None:
            self.on_forked(child, status)
        elif status.get("status") == "fork_failed":
            # (the source could not fork: it names the branch it was asked for)
            for new in self.forks_from(child):
                if new.branch == status.get("n"):
                    self.fork_failed(new, str(status.get("detail") or "the fork failed"))
                    break

    def on_forked(self, new: Child, status: Dict[str, Any]) -> None:
        """The new branch says it is set up (or that it could not be made): check and take it."""
        if new.origin is None:
            return  # nothing was asked of it
        if status.get("status") == "fork_failed":
            self.fork_failed(new, str(status.get("detail") or "the fork failed"))
            return
        pid = status.get("pid")
        known = [child.pid for child in self.children()]
        if not isinstance(pid, int) or pid <= 1 or pid == os.getpid() or pid in known:
            self.fork_failed(new, "it named no process of its own")
            return
        ended = self.early.pop(pid, None)
        if ended is None:
            mine = adopted(pid)
            if mine is None:
                self.fork_failed(new, "it named a process that is not a branch")
                return
            if not mine:
                ended = 0
        if ended is not None:
            self.fork_failed(new, "the branch ended as it started")
            return
        source, request, pause, _ = new.origin
        new.origin = None
        self.starting.remove(new)
        new.pid, new.ready, new.paused = pid, True, pause
        if source is self.template:
            self.spare = new
            return
        self.branches[new.branch] = new
        if new.closing:  # (the host dropped it before it was made)
            self.signal_child(new, signal.SIGKILL)
            closed = {"t": "forked", "id": request, "ok": False, "detail": "it was closed"}
            self.send_host(closed, source.branch)
            return
        if pause:
            self.signal_child(new, signal.SIGSTOP)
        forked = {"t": "forked", "id": request, "ok": True, "n": new.branch, "pid": pid}
        self.send_host(forked, source.branch)
