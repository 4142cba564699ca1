"""The code processes' lives: forked, watched, reaped, and how their executions end."""

from __future__ import annotations

import os
import selectors
import signal

from . import residue, system
from .broker import carrier_pair
from .child import run_child
from .children import MAX_BRANCHES, Child, close_quietly, descendants, socket_pair
from .memory import _OWN_COUNTER, oom_kills
from .state import State

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Optional

    from .wire import Header


class Processes(State):
    """The code processes' lives: forked, reaped, and how their executions end."""

    def spawn(self, once: Optional[bool] = None) -> Child:
        once = self.once if once is None else once
        ctl_r, ctl_w = os.pipe()
        frm_r, frm_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # A session's code process gets a socket too: the pipes of a branch it forks come
        # through it (``on_fork``). The supervisor only writes to it.
        fds_r, fds_w = socket_pair() if not once else (-1, -1)
        # (no network namespace, an allow-list: its seccomp listener comes back through this)
        carrier_r, carrier_w = carrier_pair() if self.broker is not None else (-1, -1)
        pid = os.fork()
        if pid == 0:  # the code's process
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            for fd in (self.host_in, self.host_out, self.wake_r, self.wake_w, ctl_w, frm_r):
                os.close(fd)
            for other in self.children():
                for fd in (other.ctl, other.frm, other.out, other.err, other.fds):
                    close_quietly(fd)
                other.unmap()  # (its copy of another process's frame in the making)
            close_quietly(fds_w)
            for fd in _OWN_COUNTER:
                os.close(fd)
            if self.mounter is not None:
                os.close(self.mounter.commands)
                os.close(self.mounter.replies)
            if self.relay is not None:
                self.relay.close_in_child()
            if self.broker is not None:
                self.broker.close_in_child()
                close_quietly(carrier_r)
            for fd in (out_r, err_r):
                os.close(fd)
            os.close(self.diag)
            if not self.first:
                system.set_death_signal(signal.SIGKILL)
            pipes = {"ctl": ctl_r, "frm": frm_w, "out": out_w, "err": err_w, "fds": fds_r}
            pipes["broker"] = carrier_w
            run_child(self.config, pipes, once)
            os._exit(70)  # (run_child never returns)
        for fd in (ctl_r, frm_w, out_w, err_w, fds_r, carrier_w):
            close_quietly(fd)
        if self.broker is not None:
            self.broker.watch(carrier_r, pid)
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
        if self.config.own_ipc:
            residue.remove_sysv_shm()  # (what the execution left in the sandbox's own IPC)
        self.drain(child, to_end=True)
        self.finish_exec(child)

    def on_branch_exit(self, child: Child) -> None:
        """A session's code process ended: its state is gone. Its execution ends ``lost``; the
        host is told (``gone``) unless it closed it; a fork it was making fails. With no other
        branch left, so is this sandbox."""
        self.drain(child, to_end=False)
        if child.exec_id is not None:
            self.finish_exec(child)
        self.fork_not_made(child, "the code's process ended")
        status = child.wait_status
        if child.paused and not child.closing and status is not None and os.WIFSIGNALED(status):
            self.dropped += 1  # (the kernel's OOM kill of a checkpoint: see finish_exec)
        del self.branches[child.branch]
        self.close_child(child)
        if not child.closing:  # (the last one's too: how it ended is the host's to say)
            gone: Header = {"t": "gone", "b": child.branch}
            if status is not None and os.WIFSIGNALED(status):
                gone["signal"] = os.WTERMSIG(status)
            elif status is not None and os.WIFEXITED(status):
                gone["exit_code"] = os.WEXITSTATUS(status)
            self.send_host(gone, child.branch)
        if not self.branches:
            self.shutdown()

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
        if child.then_fork is not None:  # (the state it leaves: kept unless a cell follows)
            if status is None and child.violation is None:
                self.fork_after(child)
            else:
                self.fork_not_made(child, "the code's process ended")
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
        child.unmap()

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
