"""What the code's processes send: read, checked and relayed to the host by the supervisor."""

from __future__ import annotations

import json
import os
import signal

from .children import MAX_CHILD_HEADER, ZEROS
from .state import State
from .wire import HEADER, encode_header, frame_kind, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Optional

    from .children import Child


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
MAX_STATUS_BYTES = 1024
STATUSES = ("ok", "error", "exit", "interrupted")
FORK_STATUSES = ("forked", "fork_failed")
"""What a session's code process answers a ``fork`` with (see ``on_fork``)."""
FRAME_READS = 256
"""Reads of the code's frame stream per wake-up: a flood of frames leaves room for output."""
OUT_HEADERS = {
    True: encode_header({"t": "out", "s": "stdout"}),
    False: encode_header({"t": "out", "s": "stderr"}),
}


class CodeFrames(State):
    """What the code's processes send: frames (checked, relayed or acted on) and output."""

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
        if fd < 0:
            return False  # (closed by what the last frame did: a fork that failed)
        try:
            if child.body_len < 0:
                data = os.read(fd, HEADER.size - len(child.head))
                if not data:
                    self.unregister(fd)
                    if child.head:
                        self.violate(child, "its frame stream ended in the middle of a frame")
                    if child.origin is not None:  # (a branch being forked: it never set up)
                        self.fork_failed(child, "the new branch ended as it started")
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
            view = memoryview(child.staging())
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
        body = memoryview(child.staging())[:size]
        status: Optional[bytes] = None
        try:
            kind = frame_kind(body, CHILD_KINDS)
            if kind is None:
                self.violate(child, "it sent a frame it may not send")
            elif kind == "status":
                status = bytes(body) if size <= MAX_STATUS_BYTES else b""
            elif not child.muted:
                self.tag(child.branch)
                write_all(self.host_out, HEADER.pack(size, 0))
                write_all(self.host_out, body)
        finally:
            body.release()
            child.wipe()
        if status is not None:  # (after the wipe: acting on it may close this child)
            self.on_status(child, status)

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
        if name in FORK_STATUSES and (
            child.origin is not None or not self.once or child is self.template
        ):
            self.on_fork_status(child, status)
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
