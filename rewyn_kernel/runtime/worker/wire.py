"""Frames between the host, the supervisor and the code's process.

Every frame is ``>II`` (header length, payload length), a JSON header, then a raw payload. A
header is encoded with its kind, ``"t"``, as the first key and without spaces, so the supervisor
can tell a frame's kind from its first bytes without parsing the rest (which may hold anything
the code chose to send); the host rejects duplicate keys, so that prefix cannot lie.
"""

from __future__ import annotations

import json
import os
import struct
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, Optional, Tuple, Union

    Header = Dict[str, Any]
    Buffer = Union[bytes, bytearray, memoryview]

HEADER = struct.Struct(">II")
AFTER_KIND = (ord(","), ord("}"))
"""What follows a header's kind: its next key, or its end."""
CHUNK = 65536


def encode_header(header: Header) -> bytes:
    """Encode ``header`` as ASCII JSON with its ``"t"`` first."""
    ordered: Header = {"t": header["t"]}
    ordered.update(header)
    text = json.dumps(ordered, ensure_ascii=True, separators=(",", ":"), default=repr)
    return text.encode("ascii")


def kind_prefix(kind: str) -> bytes:
    """The first bytes of every header of this kind, as ``encode_header`` writes them."""
    return b'{"t":"' + kind.encode("ascii") + b'"'


def frame_kind(body: memoryview, kinds: Tuple[str, ...]) -> Optional[str]:
    """Return which of ``kinds`` a header is (by its prefix), or None.

    It compares in place: no byte of the rest of the header is copied into a Python object.
    """
    for kind in kinds:
        prefix = kind_prefix(kind)
        end = len(prefix)
        if body[:end] == prefix and len(body) > end and body[end] in AFTER_KIND:
            return kind
    return None


def read_exact(fd: int, size: int) -> Optional[bytes]:
    """Read exactly ``size`` bytes (blocking); None if the stream ends first."""
    parts = []
    while size > 0:
        try:
            chunk = os.read(fd, min(size, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def write_all(fd: int, data: Buffer) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


class Reader:
    """Frames from a trusted stream (blocking), read in chunks: a whole small frame costs one
    read, not three."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def _take(self, size: int) -> Optional[bytes]:
        while len(self.buffer) < size:
            try:
                chunk = os.read(self.fd, max(CHUNK, size - len(self.buffer)))
            except InterruptedError:
                continue
            if not chunk:
                return None
            self.buffer += chunk
        taken = bytes(self.buffer[:size])
        del self.buffer[:size]
        return taken

    def recv(self) -> Optional[Tuple[Header, bytes]]:
        """The next frame; None when the stream has ended."""
        head = self._take(HEADER.size)
        if head is None:
            return None
        body_len, payload_len = HEADER.unpack(head)
        body = self._take(body_len)
        payload = self._take(payload_len) if payload_len else b""
        if body is None or payload is None:
            return None
        header = json.loads(body.decode("utf-8"))
        if not isinstance(header, dict):
            return None
        return header, payload


class Sender:
    """Writes whole frames to one descriptor, from any thread of this process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.live = True
        """False in a fork made by the code (set by its at-fork handler): it never speaks."""

    def send(self, header: Header, payload: Buffer = b"", body: Optional[bytes] = None) -> None:
        if not self.live:
            return
        if body is None:
            body = encode_header(header)
        with self.lock:
            write_all(self.fd, HEADER.pack(len(body), len(payload)) + body)
            if payload:
                write_all(self.fd, payload)
