"""What the parts of the supervisor share: its state, and its writes to the host and the code.

The supervisor (``supervisor.py``) is one object made of parts, a module each: the sandbox's
set-up (``sandbox_setup``), the code processes' lives (``processes``), what they send
(``codeframes``), a session's branches and checkpoints and a one-shot's template
(``branches``), and the memory watch beside checkpoints (``memory``). Each part is a mixin of
``State``: the attributes are set here, once, and what one part calls of another is declared
here for the type checker.
"""

from __future__ import annotations

import os
import selectors

from .children import ZEROS, Child
from .wire import CHUNK, HEADER, encode_header, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, List, Optional

    from .broker import Broker
    from .config import WorkerConfig
    from .frames import ForkFrame, Frame
    from .mounter import Mounter
    from .relay import Relay
    from .wire import Header


class State:
    """The supervisor's state, and what every part of it does: write to the host, to a code
    process, and watch descriptors."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.once = config.fork_per_exec
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
        self.buffer = bytearray(CHUNK)  # (output, relayed in the read that took it)
        self.notes: List[str] = []
        self.shell = "stdlib"  # what runs the cells: "ipython" once a session's process says so
        self.mounter: Optional[Mounter] = None  # renews the workspace's view (ordinary host)
        self.relay: Optional[Relay] = None  # the proxy's end (network=[...])
        self.broker: Optional[Broker] = None  # its connect() broker (no network namespace)
        # (Set by ``Supervisor.start``.)
        self.host_in = self.host_out = self.diag = -1  # the host's channel; diagnostics
        self.wake_r = self.wake_w = -1  # the signals' wake-up pipe

    if TYPE_CHECKING:  # (what one part calls of another, defined where the comment says)

        def step(self) -> None: ...  # supervisor

        def spawn(self, once: Optional[bool] = None) -> Child: ...  # processes

        def watch(self, child: Child) -> None: ...

        def close_child(self, child: Child) -> None: ...

        def finish_exec(self, child: Child) -> None: ...

        def shutdown(self) -> None: ...

        def drain(self, child: Child, to_end: bool) -> None: ...  # codeframes

        def on_frames(self, fd: int) -> None: ...

        def on_output(self, fd: int) -> None: ...

        def read_frames(self, child: Child) -> bool: ...

        def on_fork_status(self, child: Child, status: Dict[str, Any]) -> None: ...  # branches

        def on_fork(self, frame: ForkFrame, source: Optional[Child]) -> None: ...

        def fork_failed(self, new: Child, why: str) -> None: ...

        def fork_deadline(self) -> Optional[float]: ...

        def fork_after(self, child: Child) -> None: ...

        def forks_due(self) -> Optional[float]: ...

        def fork_those_due(self) -> None: ...

        def fork_not_made(self, child: Child, why: str, busy: bool = False) -> None: ...

        def forks_late(self) -> None: ...

        def next_spare(self) -> Optional[Child]: ...

        def drop_template(self, template: Child) -> None: ...

    def children(self) -> List[Child]:
        """Every code process this supervisor knows of."""
        found = [child for child in (self.child, self.spare, self.template) if child is not None]
        return found + list(self.branches.values()) + self.starting

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

    def signal_child(self, child: Child, signum: int) -> None:
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass

    def to_child(self, child: Child, frame: Frame, payload_len: int) -> None:
        """Send a frame to the code's process, its payload streamed from the host's channel
        (in the same write as the header when it fits in one)."""
        body = encode_header(frame.to_wire())
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
