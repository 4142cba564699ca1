"""One live worker seen from the host: its process, the frame reader and the diagnostics."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewyn_kernel.errors import ProtocolError
from rewyn_kernel.runtime.host.protocol import (
    ReadyFrame,
    WorkerFrame,
    encode_frame,
    read_frame,
)
from rewyn_kernel.runtime.providers.base import WorkerProcess

logger = logging.getLogger(__name__)

STASH_LIMIT = 256
"""Frames kept aside while waiting for a completion or inspection reply; past it, output that
arrives between executions is dropped (and counted)."""
INBOX_CAPACITY = 64
"""Frames buffered between the reader thread and the execution; past this the reader waits,
the pipe fills and the worker blocks: the host never holds more than this many frames."""
DIAG_LIMIT = 64 * 1024


@dataclass(frozen=True)
class ChannelEnded:
    """The worker's channel is over: EOF, or a protocol violation (``error``)."""

    error: ProtocolError | None = None


Item = tuple[WorkerFrame, bytes, int] | ChannelEnded


class Inbox:
    """A bounded, thread-safe queue of frames with back-pressure on the producer."""

    def __init__(self, capacity: int = INBOX_CAPACITY) -> None:
        self._items: deque[Item] = deque()
        self._cond = threading.Condition()
        self._capacity = capacity
        self._discarding = False

    def put(self, item: Item) -> None:
        with self._cond:
            while len(self._items) >= self._capacity and not self._discarding:
                self._cond.wait()
            if self._discarding and not isinstance(item, ChannelEnded):
                return
            self._items.append(item)
            self._cond.notify_all()

    def get(self, timeout: float | None) -> Item | None:
        """Return the next item, or None after ``timeout`` seconds (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def discard(self) -> None:
        """Drop what is queued and everything but the end from now on; unblock the producer."""
        with self._cond:
            self._discarding = True
            self._items = deque(i for i in self._items if isinstance(i, ChannelEnded))
            self._cond.notify_all()


class LiveWorker:
    """A launched worker: sends it the program, reads its frames and its diagnostic stderr."""

    def __init__(
        self,
        process: WorkerProcess,
        program: bytes,
        on_kill: Callable[[LiveWorker], None] | None = None,
    ) -> None:
        self.process = process
        self._on_kill = on_kill
        self.inbox = Inbox()
        self.ready: ReadyFrame | None = None
        self.ended = False
        self._ready_event = threading.Event()
        self._write_lock = threading.Lock()
        self._diag: deque[bytes] = deque()
        self._diag_size = 0
        self._diag_done = threading.Event()
        self._stash: deque[Item] = deque()
        self.dropped_between = 0
        os.set_blocking(process.stdin, False)
        self._reader = threading.Thread(target=self._read_frames, daemon=True, name="rewyn-frames")
        self._diag_reader = threading.Thread(target=self._read_diag, daemon=True, name="rewyn-diag")
        self._reader.start()
        self._diag_reader.start()
        self._write(program, deadline=None)

    # -- threads ---------------------------------------------------------------------------

    def _read_frames(self) -> None:
        end = ChannelEnded()
        try:
            while True:
                item = read_frame(self.process.stdout)
                if item is None:
                    break
                if self.ready is None:
                    if not isinstance(item[0], ReadyFrame):
                        raise ProtocolError(f"the sandbox sent {item[0].t!r} before 'ready'")
                    self.ready = item[0]
                    self._ready_event.set()
                    continue
                if isinstance(item[0], ReadyFrame):
                    raise ProtocolError("the sandbox said 'ready' twice")
                self.inbox.put(item)
        except ProtocolError as exc:
            end = ChannelEnded(exc)
        except Exception as exc:  # whatever the sandbox sends, this thread must not just die
            end = ChannelEnded(ProtocolError(f"reading the sandbox's channel failed: {exc!r}"))
        self.ended = True
        self._ready_event.set()
        self.inbox.put(end)

    def _read_diag(self) -> None:
        try:
            while True:
                chunk = os.read(self.process.stderr, 65536)
                if not chunk:
                    break
                self._diag.append(chunk)
                self._diag_size += len(chunk)
                while self._diag_size - len(self._diag[0]) >= DIAG_LIMIT:
                    self._diag_size -= len(self._diag.popleft())
        except OSError:
            pass
        finally:
            self._diag_done.set()

    # -- for the session -------------------------------------------------------------------

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the worker's ``ready``; False if it ended or ``timeout`` passed first."""
        self._ready_event.wait(timeout)
        return self.ready is not None

    def diagnostics(self, wait: float = 0.0) -> str:
        """Return the last 64 KiB the sandbox wrote to its own stderr (start-up errors, dumps)."""
        if wait:
            self._diag_done.wait(wait)
        data = b"".join(self._diag)[-DIAG_LIMIT:]
        return data.decode("utf-8", "replace")

    def send(self, header: dict[str, Any], payload: bytes = b"", timeout: float = 30.0) -> bool:
        """Send one frame; False if the worker is gone or did not read it within ``timeout``."""
        try:
            return self._write(encode_frame(header, payload), time.monotonic() + timeout)
        except OSError:
            return False

    def _write(self, data: bytes, deadline: float | None) -> bool:
        view = memoryview(data)
        with self._write_lock:
            while view:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if remaining == 0.0:
                    return False
                _, writable, _ = select.select([], [self.process.stdin], [], remaining)
                if not writable:
                    continue
                try:
                    view = view[os.write(self.process.stdin, view) :]
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ValueError):
                    return False
        return True

    def next_frame(self, timeout: float | None) -> Item | None:
        """Return the next item (stashed ones first), or None after ``timeout``."""
        if self._stash:
            return self._stash.popleft()
        return self.inbox.get(timeout)

    def request(self, header: dict[str, Any], reply_type: str, timeout: float) -> Any:
        """Send a request and wait for its reply; frames in between are kept for later."""
        if not self.send(header, timeout=timeout):
            return None
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            item = self.inbox.get(remaining)
            if item is None:
                return None
            if isinstance(item, ChannelEnded):
                self._stash.append(item)
                return None
            frame = item[0]
            if frame.t == reply_type and getattr(frame, "id", None) == header.get("id"):
                return frame
            if len(self._stash) < STASH_LIMIT:
                self._stash.append(item)
            else:
                self.dropped_between += 1
        return None

    def kill(self) -> None:
        """Kill everything the worker started, reap it and release the channel."""
        self.process.kill()
        if self._on_kill is not None:
            self._on_kill(self)
        self.inbox.discard()
        self._reader.join(5)
        self._diag_reader.join(5)
        if self._reader.is_alive() or self._diag_reader.is_alive():
            # Something outside the kill still holds the pipes. Closing them now could hand
            # their numbers to a new sandbox while these threads still read: keep them open.
            logger.warning("sandbox pipes still open after the kill; leaving them to the reader")
            return
        with contextlib.suppress(OSError):
            self.process.close()
