"""The worker's wire: framed messages, the output pump, and the relay of a forked child.

Part of the worker program (see ``_worker.py``): the host concatenates ``_worker_wire.py``,
``_worker_frontend.py``, ``_worker_exec.py`` and ``_worker.py`` in that order, drops the
lines marked ``worker-source: strip`` (imports between the parts, for linters) and sends the
result into the sandbox. Stdlib only, Python 3.8 or newer.
"""

import json
import os
import select
import signal
import struct
import threading

HEADER = struct.Struct(">II")
CHUNK = 65536
WORKER_FILE = "<rewyn-worker>"
CO_COROUTINE = 0x80
TEXT_LIMIT = 1 << 20  # a single repr or docstring the worker bothers to send
ERROR_TEXT_LIMIT = 65536
TRACEBACK_LINE_LIMIT = 4096
TRACEBACK_LINES = 200
FLUSH_INTERVAL = 0.05
MAX_JSON_CONTAINERS = 100000  # the host's limit per frame (_protocol.MAX_JSON_CONTAINERS)


def _read_exact(fd, n):
    parts = []
    while n > 0:
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


class Channel:
    """Framed messages over the two private descriptors."""

    def __init__(self, rfd, wfd):
        self.rfd = rfd
        self.wfd = wfd
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def send(self, header, payload=b"", body=None):
        if os.getpid() != self.owner:
            return  # a forked child of user code never speaks on the channel
        if body is None:
            body = json.dumps(header, ensure_ascii=True, default=repr).encode("ascii")
        with self.lock:
            _write_all(self.wfd, HEADER.pack(len(body), len(payload)) + body)
            if payload:
                _write_all(self.wfd, payload)

    def recv(self):
        head = _read_exact(self.rfd, HEADER.size)
        if head is None:
            return None
        body_len, payload_len = HEADER.unpack(head)
        body = _read_exact(self.rfd, body_len)
        payload = _read_exact(self.rfd, payload_len) if payload_len else b""
        if body is None or payload is None:
            return None
        return json.loads(body.decode("utf-8")), payload


class Pump(threading.Thread):
    """Relays the user's fd 1 and fd 2 pipes to the channel as ``out`` frames."""

    def __init__(self, channel, sources):
        threading.Thread.__init__(self, name="rewyn-pump", daemon=True)
        self.channel = channel
        self.sources = dict(sources)  # read fd -> stream name
        self.wake_r, self.wake_w = os.pipe()
        for fd in list(self.sources) + [self.wake_r]:
            os.set_blocking(fd, False)
        self.synced = threading.Event()

    def sync(self, timeout=10.0):
        """Return once everything written to fds 1 and 2 so far has been sent."""
        self.synced.clear()
        _write_all(self.wake_w, b"s")
        self.synced.wait(timeout)

    def _read(self, fd):
        try:
            data = os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            del self.sources[fd]  # every writer closed: nothing more will come
            return False
        self.channel.send({"t": "out", "s": self.sources[fd]}, data)
        return True

    def run(self):
        while True:
            try:
                ready = select.select(list(self.sources) + [self.wake_r], [], [])[0]
            except InterruptedError:
                continue
            for fd in ready:
                if fd != self.wake_r and fd in self.sources:
                    self._read(fd)
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
                # Drain what is in the pipes now; a child that keeps writing cannot hold us here.
                for fd in list(self.sources):
                    for _ in range(64):
                        if fd not in self.sources or not self._read(fd):
                            break
                self.synced.set()


RELAYED = ("out", "display", "result", "error", "input_request")


class Relay(threading.Thread):
    """Forwards a forked child's frames to the channel, whole and of allowed kinds only.

    The child runs user code, so its pipe carries whatever that code writes to it. Anything
    but a well-formed frame of a kind in RELAYED (or the child's one closing ``status``) kills
    the child's process group and is reported; a frame cut short by the child's death is
    dropped. The pipe is read to its end either way, so the child never blocks on it.
    """

    def __init__(self, channel, fd, child, config):
        threading.Thread.__init__(self, name="rewyn-relay", daemon=True)
        self.channel = channel
        self.fd = fd
        self.child = child
        self.max_header = config.get("max_header_bytes") or (16 << 20)
        self.max_payload = config.get("max_payload_bytes") or (1 << 20)
        self.status = None
        self.error = None

    def run(self):
        try:
            self.relay()
        except Exception as exc:
            self.fail("the code's process broke its frame pipe (%s)" % type(exc).__name__)
        while True:  # drain, so that nothing blocks writing to the pipe
            try:
                if not os.read(self.fd, CHUNK):
                    return
            except InterruptedError:
                continue
            except OSError:
                return

    def fail(self, message):
        if self.error is None:
            self.error = message
        try:
            os.killpg(self.child, signal.SIGKILL)
        except OSError:
            pass

    def relay(self):
        while True:
            head = _read_exact(self.fd, HEADER.size)
            if head is None:
                return
            body_len, payload_len = HEADER.unpack(head)
            if body_len > self.max_header or payload_len > self.max_payload:
                return self.fail("the code's process sent an oversized frame")
            body = _read_exact(self.fd, body_len)
            payload = _read_exact(self.fd, payload_len) if payload_len else b""
            if body is None or payload is None:
                return  # cut short by the child's death: dropped
            header = json.loads(body.decode("utf-8"))
            kind = header.get("t") if isinstance(header, dict) else None
            if kind == "status" and self.status is None:
                self.status = (int(header["exit_code"]), str(header["status"]))
            elif kind in RELAYED and (payload_len == 0 or kind == "out"):
                self.channel.send(header, payload, body=body)
            else:
                return self.fail("the code's process sent a frame it may not send (%r)" % kind)
