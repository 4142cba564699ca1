"""The code processes of a sandbox, as the supervisor sees them: pids, pipes, executions."""

from __future__ import annotations

import mmap
import os
import socket
import time

from .wire import CHUNK

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Dict, List, Optional, Tuple


MAX_BRANCHES = 64
"""Code processes of one session's sandbox at once: its branches and their checkpoints."""
ADOPTION_WAIT = 0.5
MAX_CHILD_HEADER = 16 << 20
"""The largest frame a code process may send (the size of its staging mapping)."""
ZEROS = bytes(CHUNK)


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
        self.then_fork: Optional[Tuple[str, int, float]] = None
        """(A session's.) The checkpoint to fork after its execution: its id, its number, and
        when (infinity while the execution runs; see ``Branches.fork_after``)."""
        self.origin: Optional[Tuple[Child, str, bool, float]] = None
        """(A branch being forked, in ``starting``.) What it is forked from, the request's id,
        whether it is paused, and by when it must say it is set up (``on_forked``)."""
        # The frame being read from ``frm``: bytes so far, and how many it needs.
        self.head = b""
        self.body_len = -1
        self.got = 0
        self._staging: Optional[mmap.mmap] = None
        self._staged = 0  # bytes of the staging mapping that may hold data

    def staging(self) -> mmap.mmap:
        """Where this process's frame is put together as it is read: its own. The supervisor
        reads the processes' frames in turns, a read at a time (a frame over a pipe's size
        takes several), so another's frame, or a wipe after it, must never touch this one's
        bytes so far (a shared mapping did: the session's frame, half read when a checkpoint
        said it was set up or was reaped, came out as zeros and the session was killed for
        it). Made on the first frame; its pages cost only as they are written."""
        if self._staging is None:
            self._staging = mmap.mmap(-1, MAX_CHILD_HEADER, flags=mmap.MAP_PRIVATE)
        self._staged = max(self._staged, self.body_len)
        return self._staging

    def wipe(self) -> None:
        """Wipe what passed through the staging mapping (its pages come back as zeros)."""
        staging, staged = self._staging, self._staged
        if staging is not None and staged > len(ZEROS):
            staging.madvise(mmap.MADV_DONTNEED)
        elif staging is not None and staged:
            staging[:staged] = ZEROS[:staged]
        self._staged = 0

    def unmap(self) -> None:
        """Give the staging mapping back (its pages, and what they held, are gone). Idempotent;
        the process in between frames or not, its frame is not read any more."""
        staging, self._staging, self._staged = self._staging, None, 0
        if staging is not None:
            staging.close()

    @property
    def exited(self) -> bool:
        return self.wait_status is not None


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
