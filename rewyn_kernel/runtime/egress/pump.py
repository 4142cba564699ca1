"""Moving bytes for the proxy, on its asyncio loop: a socket read with a buffer, and a pump
that joins two sockets once a tunnel is open.

The pump moves a tunnel's bytes with ``splice`` through a pipe where the platform has it
(Linux): they never enter Python, so a download through the proxy costs two system calls per
chunk and no copy. Elsewhere it copies. Either way it counts what it moved, in both
directions, and stops when the owner's ``count`` says the bytes are spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import Callable

CHUNK = 256 * 1024
"""Bytes moved at once (also the pipe's size, where it can be set)."""
_SPLICE = getattr(os, "splice", None)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_SET_PIPE_SIZE = getattr(fcntl, "F_SETPIPE_SZ", None)


class Conn:
    """A non-blocking socket read through a buffer (a request head, a SOCKS greeting)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    async def some(self, size: int = 64 * 1024) -> bytes:
        """What is buffered, else what one read gives (b'': the peer closed)."""
        if self.buffer:
            data = bytes(self.buffer[:size])
            del self.buffer[:size]
            return data
        return await asyncio.get_running_loop().sock_recv(self.sock, size)

    async def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            data = await asyncio.get_running_loop().sock_recv(self.sock, 64 * 1024)
            if not data:
                raise asyncio.IncompleteReadError(bytes(self.buffer), size)
            self.buffer += data
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def rest(self) -> bytes:
        """What was read past the head (the tunnel's first bytes), taken."""
        data, self.buffer = bytes(self.buffer), bytearray()
        return data

    async def send(self, data: bytes) -> None:
        if data:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)


async def wait_ready(sock: socket.socket, *, write: bool) -> None:
    """Wait until ``sock`` can be read (or written)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    fd = sock.fileno()
    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await future
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


Count = Callable[[int, bool], bool]
"""``count(size, outward)``: take note of bytes moved; False when no more may move."""


async def pump(
    source: socket.socket,
    sink: socket.socket,
    outward: bool,
    count: Count,
    limit: int | None = None,
) -> None:
    """Move bytes from ``source`` to ``sink`` until ``source`` ends (its end is passed on),
    ``limit`` bytes have moved, or ``count`` stops it. Errors of either socket end it
    quietly: the peer sees the close."""
    try:
        if _SPLICE is not None:
            await _spliced(source, sink, outward, count, limit)
        else:
            await _copied(source, sink, outward, count, limit)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


async def _copied(
    source: socket.socket, sink: socket.socket, outward: bool, count: Count, limit: int | None
) -> None:
    loop = asyncio.get_running_loop()
    left = limit
    while left is None or left > 0:
        data = await loop.sock_recv(source, CHUNK if left is None else min(CHUNK, left))
        if not data or not count(len(data), outward):
            return
        await loop.sock_sendall(sink, data)
        left = None if left is None else left - len(data)


async def _spliced(
    source: socket.socket, sink: socket.socket, outward: bool, count: Count, limit: int | None
) -> None:
    assert _SPLICE is not None
    read_end, write_end = os.pipe()
    try:
        size = 64 * 1024
        if _SET_PIPE_SIZE is not None:
            with contextlib.suppress(OSError):
                size = fcntl.fcntl(write_end, _SET_PIPE_SIZE, CHUNK)
        left = limit
        while left is None or left > 0:
            try:
                ask = size if left is None else min(size, left)
                moved = _SPLICE(source.fileno(), write_end, ask, flags=_FLAGS)
            except BlockingIOError:
                await wait_ready(source, write=False)
                continue
            if not moved or not count(moved, outward):
                return
            left = None if left is None else left - moved
            while moved:
                try:
                    moved -= _SPLICE(read_end, sink.fileno(), moved, flags=_FLAGS)
                except BlockingIOError:
                    await wait_ready(sink, write=True)
    finally:
        os.close(read_end)
        os.close(write_end)


async def tunnel(client: socket.socket, upstream: socket.socket, count: Count) -> None:
    """Join ``client`` and ``upstream`` both ways until both ends are done."""
    ways = [
        asyncio.ensure_future(pump(client, upstream, True, count)),
        asyncio.ensure_future(pump(upstream, client, False, count)),
    ]
    try:
        await asyncio.gather(*ways)
    finally:
        for way in ways:
            way.cancel()
