"""One live worker seen from the host: the one owner of its process, its pipes and its thread.

``LiveWorker`` starts with a launched process, writes the worker program to it (within the
startup time) and runs one I/O thread that reads the worker's frames and its diagnostic stderr.
Everything about the worker's life is decided here, once:

- ``kill(reason)`` is the only teardown. It records the first reason, kills the process through
  the provider (a handle the code cannot drop), stops the thread, and only then closes the
  pipes. After it nothing reads from or writes to them: every ``send`` checks the kill under
  the write lock, so a late answer (an ``input()`` typed after the sandbox closed) can never
  reach a descriptor number the OS has since given to another sandbox.
- The host buffers by bytes: at most ``INBOX_BYTES`` of frames plus the one being read; past
  that the thread stops reading, the pipe fills and the worker waits.
- Frames are kept only while an execution or a request wants them. Between them, a listener
  (``listen``) is handed each frame as it is read, on this thread (a thread's print, a
  progress bar it moves): no thread of its own waits, and an execution or request that comes
  takes the worker over and gives it back after. With no listener, what arrives between
  executions is read and dropped without being parsed or kept, and counted.
- Frames are parsed by the consumer (``next_frame``), one at a time.

A session's sandbox may run several branches of its state (``fork``): one code process each,
behind the one channel. The supervisor says whose frames follow (``{"t": "b", "b": N}``, which
only it can send), and the I/O thread files each frame under its branch's port: a
``LiveWorker`` of its own (``branch`` N) that shares this one's process, thread and pipes and
has its own frames, listener and end. ``kill`` on a port ends that branch alone while others
live; the last one's kill ends the sandbox (``teardown`` ends it whatever lives).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rewyn_kernel.errors import ForkError, ProtocolError
from rewyn_kernel.runtime.host.protocol import (
    HEADER,
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    ForkedFrame,
    GoneFrame,
    ReadyFrame,
    TruncatedFrameError,
    WorkerFrame,
    decode_header,
    encode_frame,
)
from rewyn_kernel.runtime.providers.base import WorkerProcess
from rewyn_kernel.runtime.worker.frames import (
    CloseFrame,
    CompleteFrame,
    ForkFrame,
    HostFrame,
    InspectFrame,
    ResumeFrame,
    ViewFrame,
)

if TYPE_CHECKING:
    from rewyn_kernel.runtime.egress.proxy import Door

from rewyn_kernel.runtime.host.execution import describe_exit

logger = logging.getLogger(__name__)

INBOX_BYTES = 16 * 1024 * 1024
"""Frame bytes the host holds for an execution before it stops reading (plus one frame)."""
DIAG_LIMIT = 64 * 1024
READ_CHUNK = 1 << 20
WRITE_SLICE = 0.05
"""How often a blocked write looks again whether the worker was killed meanwhile."""
SMALL_FRAME = 128
"""A frame this small is read even when nobody wants it: it may say whose frames follow, or
that a branch is gone (the supervisor's own frames, which the I/O thread acts on)."""
BRANCH_PREFIX = b'{"t":"b","b":'
GONE_PREFIX = b'{"t":"gone",'
FORKED_PREFIX = b'{"t":"forked",'
MEMORY_WATCH_SECONDS = 0.01
"""How often the sandbox's memory is read while code runs beside a checkpoint (see
``watch_memory``): a read of one cgroup file, about 50 us."""
FORK_HEADROOM_BYTES = 32 << 20
FORK_HEADROOM_SHARE = 20
"""A fork needs this much free under the sandbox's memory cap, or 1/20 of the cap if more: the
new branch copies each page it or its source writes (Python writes reference counts as it
reads objects), and a fork that leaves less would soon push a branch out of memory."""


@dataclass(frozen=True)
class ChannelEnded:
    """The worker's channel is over: EOF, a kill, or a protocol violation (``error``); for a
    branch, also its process's end while other branches live (``gone``: how it ended)."""

    error: ProtocolError | None = None
    gone: str | None = None


class Forking:
    """A fork the sandbox was asked for (``LiveWorker.begin_fork``): its port exists from the
    ask on, and the supervisor's ``forked`` says, later, whether the branch was made. The I/O
    thread settles it as that answer is read (or as the channel ends); ``result`` waits."""

    def __init__(self, port: LiveWorker, request: str, *, listed: bool = True) -> None:
        self.port = port
        self.id = request
        self.listed = listed  # (a checkpoint: among the sandbox's, or made so on its answer)
        self.reply: ForkedFrame | None = None
        self.done = threading.Event()

    @property
    def settled(self) -> bool:
        return self.done.is_set()

    @property
    def busy(self) -> bool:
        """Not made because the next execution came first (see ``execute(checkpoint_after=)``)."""
        return self.reply is not None and self.reply.busy

    @property
    def made(self) -> bool | None:
        """Whether the branch was made; None while the answer has not come."""
        if not self.done.is_set():
            return None
        return self.reply is not None and self.reply.ok

    def result(self, timeout: float) -> LiveWorker:
        """Wait for the answer: the new branch's port, or ForkError saying why not (one that
        does not come in ``timeout`` is given up, and its branch closed if it comes later)."""
        if not self.done.wait(timeout):
            self.port._root._give_up(self, f"no answer in {timeout:g} s")
        reply = self.reply
        if reply is None or not reply.ok:
            why = reply.detail if reply is not None else ""
            if not why:
                end = self.port._port_end
                why = (end.gone if end is not None else None) or "the sandbox is gone"
            memory = reply is not None and reply.memory
            raise ForkError(f"the session could not be forked: {why}", memory=memory)
        return self.port


Request = CompleteFrame | InspectFrame | ViewFrame
"""A frame the worker answers (``request``), by its ``id``."""
Frame = tuple[WorkerFrame, bytes, int]
"""A parsed frame: the header model, its raw payload, and the header's size in bytes."""
Sink = Callable[[Frame], object]
"""What a listener is handed frames by (on the reading thread)."""


class _Assembler:
    """The frame being read from the worker's stdout, kept or counted for dropping."""

    def __init__(self) -> None:
        self.head = b""
        self.body = bytearray()
        self.payload = bytearray()
        self.body_len = -1
        self.payload_len = 0
        self.keep = True
        self.skipped = 0

    @property
    def size(self) -> int:
        return self.body_len + self.payload_len

    @property
    def complete(self) -> bool:
        return self.skipped + len(self.body) + len(self.payload) == self.size

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


class _MemoryWatch:
    """The one thread of a sandbox that reads its memory while code runs beside a checkpoint
    (``LiveWorker.watch_memory``), started the first time it is needed and ended with the
    sandbox (``teardown``): an execution only says that it runs, and no thread starts per
    execution. Past the fork's headroom it drops the oldest checkpoint."""

    def __init__(self, root: LiveWorker, usage: Callable[[], tuple[int, int | None]]) -> None:
        self.root = root
        self.usage = usage
        self.cond = threading.Condition()
        self.running = 0  # (under cond) executions watched now
        self.thread = threading.Thread(target=self._run, daemon=True, name="rewyn-memory")
        self.thread.start()

    def begin(self) -> None:
        with self.cond:
            self.running += 1
            self.cond.notify_all()

    def end(self) -> None:
        with self.cond:
            self.running -= 1

    def stop(self) -> None:
        """(From ``teardown``, once the sandbox is killed.) The thread ends."""
        with self.cond:
            self.cond.notify_all()
        if threading.current_thread() is not self.thread:
            self.thread.join()

    def _run(self) -> None:
        root = self.root
        while True:
            with self.cond:
                while not self.running and not root._killed.is_set():
                    self.cond.wait()
            if root._killed.wait(MEMORY_WATCH_SECONDS):
                return
            with self.cond:
                if not self.running:
                    continue
            try:
                used, cap = self.usage()
            except (OSError, ValueError):
                return  # (the sandbox's memory cannot be read: nothing to watch by)
            if cap is None or cap - used >= headroom(cap):
                continue
            with root._cond:
                oldest = root._checkpoints.pop(0) if root._checkpoints else None
                if oldest is not None:
                    why = (
                        f"dropped when the sandbox's memory came within {headroom(cap) >> 20}"
                        f" MiB of its cap of {cap >> 20} MiB ({used >> 20} MiB in use)"
                    )
                    oldest._end_port_locked(ChannelEnded(gone=why))
            if oldest is not None:
                oldest.send(CloseFrame(), timeout=1.0)


class LiveWorker:
    """A launched worker: its program written, its frames read, its end decided once."""

    def __init__(
        self,
        process: WorkerProcess,
        program: bytes,
        *,
        startup_timeout: float,
        on_kill: Callable[[LiveWorker], None] | None = None,
    ) -> None:
        self.process = process
        self._on_kill = on_kill
        self.egress: Door | None = None
        """The worker's way out through the host's proxy (network=[...]): set by its sandbox,
        closed by it when the worker is gone, its record read after each execution."""
        self.ready: ReadyFrame | None = None
        self._ready_event = threading.Event()
        self._cond = threading.Condition()
        self._inbox: deque[tuple[bytes, bytes] | ChannelEnded] = deque()
        self._inbox_bytes = 0
        self._wanted: str | None = None  # what wants frames now: an execution or a request id
        self._idle: str | None = None  # the listener's key: it wants them between executions
        self._sink: Sink | None = None  # ... and what it is handed them by
        self._sink_lock = threading.Lock()
        """Held while frames go to the listener (taken before ``_cond``): they go in order."""
        self._waiting_for_room = False  # the I/O thread stopped reading: the inbox is full
        self.dropped_between = 0
        self._ended: ChannelEnded | None = None
        self._kill_reason: str | None = None
        self._killed = threading.Event()
        self._torn_down = threading.Event()
        self._write_lock = threading.Lock()
        self._diag: deque[bytes] = deque()
        self._diag_size = 0
        self._diag_done = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        os.set_blocking(process.stdin, False)
        os.set_blocking(process.stdout, False)
        os.set_blocking(process.stderr, False)
        self.start_failure: str | None = None
        """Why the worker never took its program, if it did not."""
        self.branch = 0
        """The branch of the session's state this port speaks for (0: the first; see fork)."""
        self._root = self
        self._ports: dict[int, LiveWorker] = {0: self}  # (under _cond) the live branches
        self._reading = 0  # (the I/O thread's) whose frames it reads now
        self._next_branch = 1
        self._port_end: ChannelEnded | None = None  # this branch alone is over
        self._port_reason: str | None = None
        self._checkpoints: list[LiveWorker] = []  # (under _cond) paused branches, oldest first
        self._forks: dict[str, Forking] = {}  # (under _cond) forks asked for, not yet answered
        self._memory_watch: _MemoryWatch | None = None  # (under _cond) see watch_memory
        # The I/O thread writes the program first, holding the write lock taken here: no frame
        # can go before it, and the caller need not wait for the sandbox's interpreter to start.
        self._write_lock.acquire()
        self._io = threading.Thread(
            target=self._run_io,
            args=(program, time.monotonic() + startup_timeout),
            daemon=True,
            name="rewyn-io",
        )
        self._io.start()

    # -- state -----------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The channel is over (the worker ended it, broke the protocol, or was killed), or
        this branch is (closed, or its process ended)."""
        root = self._root
        return self._port_end is not None or root._ended is not None or root._killed.is_set()

    @property
    def kill_reason(self) -> str | None:
        """Why the host killed this worker or branch (the first reason given), or None."""
        return self._port_reason or self._root._kill_reason

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the worker's ``ready``; False if it ended, did not take its program, or
        ``timeout`` passed first (give it a little past the startup time for the program)."""
        self._ready_event.wait(timeout)
        return self.ready is not None and not self.ended

    def diagnostics(self, wait: float = 0.0) -> str:
        """Return the last 64 KiB the sandbox wrote to its own stderr (start-up errors, dumps)."""
        if wait:
            self._diag_done.wait(wait)
        return b"".join(self._diag)[-DIAG_LIMIT:].decode("utf-8", "replace")

    # -- frames for an execution -----------------------------------------------------------

    def want(self, key: str | None) -> None:
        """Keep frames from now on for ``key`` (an execution or request id); None: hand them to
        the listener, if there is one, else drop them.

        Whatever is queued from before is dropped (it belongs to nothing that is running), but
        for what came after an execution's end, which is the listener's (a thread's print).
        """
        with self._sink_lock:
            with self._cond:
                sink = self._sink if key is None else None
                after = self._take_queued()
                if sink is None:
                    self.dropped_between += len(after)
                self._wanted = key if key is not None else self._idle
                waiting = self._root._waiting_for_room
            if waiting:
                self._wake()
            for body, payload in after:
                self._hand(sink, body, payload)

    def listen(self, key: str, sink: Sink) -> None:
        """Between executions and requests, hand each frame to ``sink`` as it is read, in place
        of any listener before (``key`` names this one). ``sink`` is called on the reading
        thread, in order: it must be quick and must not block."""
        with self._sink_lock, self._cond:
            previous, self._idle, self._sink = self._idle, key, sink
            if self._wanted is None or self._wanted == previous:
                self._wanted = key
                self._drop_queued()

    def unlisten(self, key: str) -> None:
        """Stop the listener ``key`` (if it is still the one): frames between executions are
        dropped again; its sink is not called after this returns."""
        with self._sink_lock, self._cond:
            if self._idle != key:
                return
            self._idle = self._sink = None
            if self._wanted == key:
                self._wanted = None
                self._drop_queued()

    def listening(self, key: str) -> bool:
        """Whether ``key`` is the listener (and the channel not over)."""
        with self._cond:
            return self._idle == key and not self.ended

    def _hand(self, sink: Sink | None, body: bytes, payload: bytes) -> None:
        """(With ``_sink_lock`` held.) Give a frame to the listener; one that does not parse is
        dropped and counted, as between executions."""
        if sink is None or sink is not self._sink:
            return
        try:
            frame = decode_header(body)
        except ProtocolError:
            with self._cond:
                self.dropped_between += 1
            return
        try:
            sink((frame, payload, len(body)))
        except Exception:  # (the listener's own failure is not the channel's)
            logger.exception("a listener failed on a frame between executions")

    def take_dropped(self) -> int:
        """Return how many frames were dropped since the last call (between executions)."""
        with self._cond:
            dropped, self.dropped_between = self.dropped_between, 0
        return dropped

    def next_frame(self, timeout: float | None) -> Frame | ChannelEnded | None:
        """Return the next frame, parsed, or the end; None after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._inbox:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            item = self._inbox.popleft()
            if isinstance(item, ChannelEnded):
                self._inbox.appendleft(item)  # the end stays the end for every later reader
                return item
            self._inbox_bytes -= len(item[0]) + len(item[1])
            waiting = self._root._waiting_for_room
        if waiting:
            self._wake()  # room again: the reader may go on
        body, payload = item
        try:
            return decode_header(body), payload, len(body)
        except ProtocolError as exc:
            return ChannelEnded(exc)

    def request(self, frame: Request, reply_type: str, timeout: float) -> Any:
        """Send a request and return its reply frame, or None; other frames are dropped."""
        self.want(frame.id)
        try:
            if not self.send(frame, timeout=timeout):
                return None
            deadline = time.monotonic() + timeout
            while (remaining := deadline - time.monotonic()) > 0:
                item = self.next_frame(remaining)
                if item is None or isinstance(item, ChannelEnded):
                    return None
                reply = item[0]
                if reply.t == reply_type and getattr(reply, "id", None) == frame.id:
                    return reply
            return None
        finally:
            self.want(None)

    # -- writing ---------------------------------------------------------------------------

    def send(self, frame: HostFrame, payload: bytes = b"", timeout: float = 30.0) -> bool:
        """Send one frame (for this port's branch, unless it names another); False if the
        worker is gone or did not take it within ``timeout``."""
        if self.branch and not frame.b:
            frame = frame.replace(b=self.branch)
        return not self._write(encode_frame(frame, payload), time.monotonic() + timeout)

    # -- branches --------------------------------------------------------------------------

    def fork(
        self, *, pause: bool = False, reseed: bool = False, timeout: float = 30.0
    ) -> LiveWorker:
        """Fork this branch's code process (idle: between executions) into a new branch in the
        same sandbox, and return its port; ``pause``: it is stopped until ``resume`` (a
        checkpoint). Raise ForkError, saying why, when it cannot be: this branch runs code, the
        memory cap leaves too little, the sandbox refused or did not answer."""
        return self.begin_fork(pause=pause, reseed=reseed, timeout=timeout).result(timeout)

    def begin_fork(
        self, *, pause: bool = False, reseed: bool = False, timeout: float = 30.0
    ) -> Forking:
        """Ask for ``fork`` and return at once, the answer to come (``Forking``). The code's
        process forks before it reads anything sent after this: an execution sent next runs
        in it after the fork, whose branch holds the state from before. Raise ForkError when
        the ask cannot go (the memory cap leaves too little, the sandbox is gone)."""
        root = self._root
        forking = self.expect_fork(pause=pause)
        ask = ForkFrame(id=forking.id, n=forking.port.branch, pause=pause, reseed=reseed)
        if not self.send(ask, timeout=timeout):
            why = (
                "the sandbox is gone" if self.ended else f"it did not read the ask in {timeout:g} s"
            )
            root._give_up(forking, why)
            raise ForkError(f"the session could not be forked: {why}")
        return forking

    def expect_fork(self, *, pause: bool, headroom: bool = True, asked: bool = True) -> Forking:
        """Make the port of a fork to come and wait for its answer, without asking for it:
        ``begin_fork`` asks at once, an execution's frame asks for it as the execution ends
        (``ExecFrame.fork``; ``give_up`` it if that frame does not go). Raise ForkError when
        the memory cap leaves too little room (``headroom``: looked at now), or the sandbox is
        gone. A paused one is among the checkpoints the memory watch may drop from the ask on
        (``asked``), or, where the sandbox makes it later on its own, from its answer on."""
        root = self._root
        if headroom:
            self._check_headroom()
        with root._cond:
            if self.ended:
                raise ForkError("the session's sandbox is gone")
            number = root._next_branch
            root._next_branch += 1
            port = LiveWorker.__new__(LiveWorker)
            port._as_port(root, number)
            root._ports[number] = port  # (before the ask: its first frames have a home)
            if pause and asked:
                root._checkpoints.append(port)
            forking = Forking(port, uuid.uuid4().hex, listed=not pause or asked)
            root._forks[forking.id] = forking
        return forking

    def give_up(self, forking: Forking, why: str) -> None:
        """``forking`` is not waited for any longer (see ``_give_up``)."""
        self._root._give_up(forking, why)

    def _give_up(self, forking: Forking, why: str) -> None:
        """(On the root.) ``forking`` is not waited for any longer: its port ends, and the branch,
        should it come after all, is closed as it comes (the supervisor kills it)."""
        with self._cond:
            if forking.done.is_set():
                return
            self._forks.pop(forking.id, None)
            forking.port._end_port_locked(ChannelEnded(gone=f"it was not made: {why}"))
            forking.done.set()
        if not self.ended:
            self.send(CloseFrame(b=forking.port.branch), timeout=1.0)

    def _settle(self, body: bytes) -> ChannelEnded | None:
        """(The I/O thread.) The supervisor's answer to a fork: settle it. A branch that was
        not made ends its port, saying why; one that nobody waits for any more was closed
        already (``_give_up``)."""
        reply = _supervisors(body, ForkedFrame, "forked")
        if isinstance(reply, ChannelEnded):
            return reply
        with self._cond:
            forking = self._forks.pop(reply.id, None)
            if forking is None:
                return None
            forking.reply = reply
            if reply.ok and not forking.listed and forking.port._port_end is None:
                self._checkpoints.append(forking.port)  # (made now: the memory watch may drop it)
            if not reply.ok:
                why = f"it could not be made: {reply.detail or 'the sandbox refused'}"
                forking.port._end_port_locked(ChannelEnded(gone=why))
            forking.done.set()
        return None

    def _settle_all_locked(self) -> None:
        """(With ``_cond`` held, on the root.) The channel is over: no fork is answered now."""
        forks, self._forks = list(self._forks.values()), {}
        for forking in forks:
            forking.port._end_port_locked(ChannelEnded(gone="the sandbox ended first"))
            forking.done.set()

    def resume(self) -> bool:
        """Let a paused branch (a checkpoint) run again; False if it is gone."""
        with self._cond:
            if self in self._root._checkpoints:
                self._root._checkpoints.remove(self)
        return not self.ended and self.send(ResumeFrame(), timeout=5.0)

    @contextlib.contextmanager
    def watch_memory(self) -> Iterator[None]:
        """While code runs (the block), drop the sandbox's checkpoints, oldest first, when its
        memory comes within the fork's headroom of its cap: a checkpoint must never cost the
        code memory it would have had. (The kernel's OOM killer takes checkpoints first too,
        for what grows faster than this looks: but a second kill can come before the first
        one's memory is freed, and take the code.) Nothing runs without a checkpoint, or
        where the provider cannot say what the sandbox uses."""
        root = self._root
        reader = getattr(self.process, "memory_usage", None)
        with root._cond:
            watched = bool(root._checkpoints) and callable(reader) and not root._killed.is_set()
            if watched and callable(reader) and root._memory_watch is None:
                root._memory_watch = _MemoryWatch(root, reader)
            watch = root._memory_watch
        if not watched or watch is None:
            yield
            return
        watch.begin()
        try:
            yield
        finally:
            watch.end()

    def _as_port(self, root: LiveWorker, number: int) -> None:
        """(For ``fork``.) Make this a port of ``root``'s channel for branch ``number``."""
        self.process = root.process
        self._on_kill = None
        self.egress = root.egress
        self.ready = root.ready
        self._ready_event = threading.Event()
        self._ready_event.set()
        self._cond = root._cond
        self._inbox = deque()
        self._inbox_bytes = 0
        self._wanted = self._idle = None
        self._sink = None
        self._sink_lock = root._sink_lock
        self._waiting_for_room = False
        self.dropped_between = 0
        self._ended = None
        self._kill_reason = None
        self._killed = root._killed
        self._torn_down = root._torn_down
        self._write_lock = root._write_lock
        self._diag = root._diag
        self._diag_size = 0
        self._diag_done = root._diag_done
        self._wake_r, self._wake_w = root._wake_r, root._wake_w
        self.start_failure = None
        self._io = root._io
        self.branch = number
        self._root = root
        self._ports = root._ports
        self._reading = self._next_branch = 0
        self._port_end = None
        self._port_reason = None

    def check_headroom(self) -> None:
        """Raise ForkError (``memory``) where the memory cap leaves a fork too little room
        (and the provider can say how much the sandbox uses)."""
        self._check_headroom()

    def _check_headroom(self) -> None:
        """Refuse a fork the memory cap leaves too little room for (where the provider can
        say how much the sandbox uses)."""
        usage = getattr(self.process, "memory_usage", None)
        if not callable(usage):
            return
        try:
            used, cap = usage()
        except (OSError, ValueError):
            return
        if cap is None:
            return
        need = headroom(cap)
        if cap - used < need:
            raise ForkError(
                f"the session could not be forked: {max(0, cap - used) >> 20} MiB are free under "
                f"the sandbox's memory cap of {cap >> 20} MiB, and a branch needs {need >> 20} "
                "MiB to start (free memory in the session, or raise memory_limit_mb)",
                memory=True,
            )

    def _end_port_locked(self, end: ChannelEnded, *, drop: bool = True) -> None:
        """(With ``_cond`` held.) This branch is over: its frames are dropped from now on
        (``drop``: those queued too; else they are read before the end)."""
        if self._port_end is not None:
            return
        self._port_end = end
        if self in self._root._checkpoints:
            self._root._checkpoints.remove(self)
        if drop:
            self._drop_queued()
        self._inbox.append(end)
        if self._root._ports.get(self.branch) is self:
            del self._root._ports[self.branch]
        self._cond.notify_all()

    def _write(self, data: bytes, deadline: float) -> str:
        """Write ``data`` before ``deadline``; '' when it went, else why it did not."""
        with self._write_lock:
            return self._write_locked(data, deadline)

    def _write_locked(self, data: bytes, deadline: float) -> str:
        view = memoryview(data)
        while view:
            if self._killed.is_set():
                return "the sandbox was killed"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "it did not read it in time"
            try:
                _, writable, _ = select.select(
                    [], [self.process.stdin], [], min(remaining, WRITE_SLICE)
                )
                if writable:
                    view = view[os.write(self.process.stdin, view) :]
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError):  # the worker closed its end, or died
                return "it closed its input (it exited)"
        return ""

    # -- the end ---------------------------------------------------------------------------

    def kill(self, reason: str) -> None:
        """End this branch: its process is killed, and with no other branch alive, the whole
        sandbox (``teardown``). Idempotent; the first ``reason`` is kept (``kill_reason``)."""
        root = self._root
        with root._cond:
            closing = self._port_end is None and not root._killed.is_set()
            if closing:
                self._port_reason = reason
                self._end_port_locked(ChannelEnded())
            alive = any(port._port_end is None for port in root._ports.values())
        if not alive:
            root.teardown(reason)
        elif closing:
            self.send(CloseFrame(), timeout=5.0)

    def teardown(self, reason: str) -> None:
        """Kill everything the worker started (every branch), reap it and release the pipes.
        Idempotent.

        The first ``reason`` is kept (``kill_reason``). Every caller returns once the teardown
        is complete, whichever thread did it.
        """
        if self._root is not self:
            self._root.teardown(reason)
            return
        with self._cond:
            first = not self._killed.is_set()
            if first:
                self._kill_reason = reason
                self._killed.set()
        if not first:
            self._torn_down.wait()
            return
        try:
            self.process.kill()
            self._wake()
            self._io.join()
            with self._cond:
                watch = self._memory_watch
            if watch is not None:
                watch.stop()
            with self._write_lock:  # no write is in progress, and none starts after this
                with contextlib.suppress(OSError):
                    self.process.close()
                for fd in (self._wake_r, self._wake_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
            with self._cond:
                self._settle_all_locked()
                for port in dict.fromkeys([self, *self._ports.values()]):
                    port._drop_queued()
                    if not port._inbox:
                        port._inbox.append(ChannelEnded())
                self._cond.notify_all()
            self._ready_event.set()
            self._diag_done.set()
            if self._on_kill is not None:
                self._on_kill(self)
        finally:
            self._torn_down.set()

    # -- the I/O thread --------------------------------------------------------------------

    def _wake(self) -> None:
        if not self._torn_down.is_set():
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")

    def _run_io(self, program: bytes, deadline: float) -> None:
        frame = _Assembler()
        stdout: int | None = self.process.stdout
        stderr: int | None = self.process.stderr
        end: ChannelEnded | None = None
        try:
            try:
                failure = self._write_locked(program, deadline)
            finally:
                self._write_lock.release()
            if failure and not self._killed.is_set():
                # (Its diagnostics are still read: a start-up error says why.)
                self.start_failure = f"the sandbox did not take its program: {failure}"
                self._ready_event.set()
            while not self._killed.is_set():
                watch = [self._wake_r]
                if stderr is not None:
                    watch.append(stderr)
                with self._cond:  # (decided with the consumer's pop, or its wake-up is lost)
                    port = self._ports.get(self._reading)
                    full = port is not None and port._full_locked(frame)
                    self._waiting_for_room = stdout is not None and full
                    if stdout is not None and not self._waiting_for_room:
                        watch.append(stdout)
                ready = select.select(watch, [], [])[0]
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                if stderr is not None and stderr in ready and not self._read_diag(stderr):
                    stderr = None
                    self._diag_done.set()
                if stdout is not None and stdout in ready:
                    end = self._read_frames(stdout, frame)
                    if end is not None:
                        stdout = None
                        self._finish(end)
                        if stderr is None:
                            return
        except Exception as exc:  # whatever the sandbox sends, this thread must not just die
            error = ProtocolError(f"reading the sandbox's channel failed: {exc!r}")
            self._finish(ChannelEnded(error))
        finally:
            self._diag_done.set()
            if end is None:
                self._finish(ChannelEnded())

    def _full(self, frame: _Assembler) -> bool:
        """Whether the frame being read waits for room in the inbox."""
        with self._cond:
            return self._full_locked(frame)

    def _full_locked(self, frame: _Assembler) -> bool:
        if frame.body_len < 0 or not frame.keep:
            return False
        return bool(self._inbox) and self._inbox_bytes + frame.size > INBOX_BYTES

    def _read_diag(self, fd: int) -> bool:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        self._diag.append(chunk)
        self._diag_size += len(chunk)
        while self._diag_size - len(self._diag[0]) >= DIAG_LIMIT:
            self._diag_size -= len(self._diag.popleft())
        return True

    def _read_frames(self, fd: int, frame: _Assembler) -> ChannelEnded | None:
        """Read what is there of the worker's frames; the end, when the channel is over."""
        for _ in range(64):  # then let the diagnostics and the wake-up pipe have a turn
            try:
                if frame.body_len < 0:
                    data = os.read(fd, HEADER.size - len(frame.head))
                    if not data:
                        if frame.head:
                            return ChannelEnded(TruncatedFrameError(_CUT_SHORT))
                        return ChannelEnded()
                    frame.head += data
                    if len(frame.head) < HEADER.size:
                        continue
                    body_len, payload_len = HEADER.unpack(frame.head)
                    if body_len > MAX_HEADER_BYTES or payload_len > MAX_PAYLOAD_BYTES:
                        return ChannelEnded(
                            ProtocolError(
                                f"the sandbox announced a frame of {body_len} + {payload_len} "
                                f"bytes, over the limits of {MAX_HEADER_BYTES} + "
                                f"{MAX_PAYLOAD_BYTES}"
                            )
                        )
                    frame.body_len, frame.payload_len = body_len, payload_len
                    port = self._ports.get(self._reading)
                    frame.keep = (
                        self.ready is None
                        or (body_len <= SMALL_FRAME and not payload_len)
                        or bool(self._forks)  # (an answer to a fork may say at length why not)
                        or (port is not None and port._wanted is not None)
                    )
                    if port is not None and port._full(frame):
                        return None  # wait for room before reading any of it
                if not self._read_body(fd, frame):
                    return ChannelEnded(TruncatedFrameError(_CUT_SHORT))
                if frame.complete:
                    end = self._complete(frame)
                    frame.reset()
                    if end is not None:
                        return end
            except BlockingIOError:
                return None
        return None

    def _read_body(self, fd: int, frame: _Assembler) -> bool:
        """Read some of the frame's body and payload; False at an end in the middle."""
        done = frame.skipped + len(frame.body) + len(frame.payload)
        want = min(frame.size - done, READ_CHUNK)
        if want <= 0:
            return True
        data = os.read(fd, want)
        if not data:
            return False
        if not frame.keep:
            frame.skipped += len(data)
        elif len(frame.body) < frame.body_len:
            split = frame.body_len - len(frame.body)
            frame.body += data[:split]
            frame.payload += data[split:]
        else:
            frame.payload += data
        return True

    def _complete(self, frame: _Assembler) -> ChannelEnded | None:
        body, payload = bytes(frame.body), bytes(frame.payload)
        if self.ready is None:
            try:
                ready = decode_header(body)
            except ProtocolError as exc:
                return ChannelEnded(exc)
            if not isinstance(ready, ReadyFrame):
                return ChannelEnded(ProtocolError(f"the sandbox sent {ready.t!r} before 'ready'"))
            # What the provider applies once the sandbox exists and before any code runs in it
            # (a container's TCP buffer limit, in its cgroup): optional in the contract.
            on_ready = getattr(self.process, "on_ready", None)
            if callable(on_ready):
                try:
                    on_ready()
                except OSError as exc:
                    return ChannelEnded(ProtocolError(f"the sandbox could not be bounded: {exc}"))
            self.ready = ready
            self._ready_event.set()
            return None
        if body.startswith(BRANCH_PREFIX):
            number = body[len(BRANCH_PREFIX) : -1]
            if not (body.endswith(b"}") and number.isdigit() and len(number) <= 10):
                return ChannelEnded(ProtocolError("the sandbox named a branch that is not one"))
            self._reading = int(number)
            return None
        if body.startswith(GONE_PREFIX):
            return self._gone(body)
        if body.startswith(FORKED_PREFIX):
            return self._settle(body)
        with self._cond:
            port = self._ports.get(self._reading)
            if port is None or not frame.keep or port._wanted is None:
                (port or self).dropped_between += 1
                return None
            sink = port._sink if port._wanted == port._idle else None
            if sink is None:
                port._inbox.append((body, payload))
                port._inbox_bytes += len(body) + len(payload)
                self._cond.notify_all()
                return None
        with self._sink_lock:  # (after any frames ``want`` is handing over: in order)
            port._hand(sink, body, payload)
        return None

    def _gone(self, body: bytes) -> ChannelEnded | None:
        """A branch's process ended (the supervisor says so; for the last one, before the
        sandbox ends with it): its port ends, saying how."""
        gone = _supervisors(body, GoneFrame, "gone")
        if isinstance(gone, ChannelEnded):
            return gone
        if gone.detail:
            how = gone.detail
        elif gone.signal is not None:
            how = "the code's process " + describe_exit(128 + gone.signal, gone.signal)
        else:
            code = gone.exit_code if gone.exit_code is not None else 1
            how = "the code's process " + describe_exit(code, None)
        with self._cond:
            port = self._ports.get(gone.b)
            if port is not None:
                port._end_port_locked(ChannelEnded(gone=how), drop=False)
        return None

    def _finish(self, end: ChannelEnded) -> None:
        with self._cond:
            if self._ended is None:
                self._ended = end
                self._settle_all_locked()
                for port in dict.fromkeys([self, *self._ports.values()]):
                    if port is self or port._port_end is None:
                        port._inbox.append(end)
                self._cond.notify_all()
        self._ready_event.set()

    def _drop_queued(self) -> None:
        """(With ``_cond`` held.) Drop queued frames, keeping an end."""
        self.dropped_between += len(self._take_queued())

    def _take_queued(self) -> list[tuple[bytes, bytes]]:
        """(With ``_cond`` held.) Take the queued frames out, keeping an end."""
        taken = [item for item in self._inbox if not isinstance(item, ChannelEnded)]
        ends = [item for item in self._inbox if isinstance(item, ChannelEnded)]
        self._inbox = deque(ends[:1])
        self._inbox_bytes = 0
        return taken


_CUT_SHORT = "the sandbox's channel ended in the middle of a frame"

_Own = TypeVar("_Own", ForkedFrame, GoneFrame)


def _supervisors(body: bytes, kind: type[_Own], name: str) -> _Own | ChannelEnded:
    """A frame only the supervisor sends, read by the I/O thread: the frame, or the channel's
    end if it does not parse as one."""
    try:
        frame = decode_header(body)
    except ProtocolError as exc:
        return ChannelEnded(exc)
    if not isinstance(frame, kind):
        return ChannelEnded(ProtocolError(f"the sandbox sent a malformed {name!r} frame"))
    return frame


def headroom(cap: int) -> int:
    """The memory a fork needs free under ``cap`` (see FORK_HEADROOM_BYTES)."""
    return max(FORK_HEADROOM_BYTES, cap // FORK_HEADROOM_SHARE)
