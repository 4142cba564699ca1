"""The host's proxy: a sandbox's only way out when its ``network`` is an allow-list.

One thread per host process runs an asyncio loop (``EgressService``); each worker of such a
sandbox gets a ``Door``: a Unix socket in a folder of its own, which the provider shows to the
sandbox, and the record of what came through it. The sandbox's network namespace stays empty;
its supervisor relays a loopback port to the door (worker/relay.py), and the code's proxy
variables point at that port.

Through a door, a client speaks HTTP (``CONNECT host:port`` for TLS, or a plain request with
an absolute URL; parsed by h11) or SOCKS5 (no authentication, CONNECT only). Each request's
host and port are decided by the policy (policy.py); names are resolved here and only the
addresses checked are connected to. Everything that comes through is hostile: the request head
is bounded in size and time, connections in number and idleness, bytes per execution.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import h11

from rewyn_kernel.runtime._result import NetworkAttempt, NetworkLog
from rewyn_kernel.runtime.egress.policy import Decision, Gate, IPAddress, NetworkPolicy, entry_for
from rewyn_kernel.runtime.egress.pump import CHUNK, Conn, pump, tunnel, wait_ready

MAX_HEAD = 16 * 1024
"""The longest request head (request line and headers) a client may send."""
HEAD_TIMEOUT = 15.0
"""Seconds a client has to send a whole request head (a slow one is dropped: slowloris)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to reach a host, all of its addresses together."""
HANDED_AT_ONCE = 16
"""Descriptors read from one message of the relay (more are closed by the kernel)."""
SETTLE = 0.05
"""Seconds ``take`` waits for connections still open to close."""
MAX_RECORDS = 512
"""Attempts kept per execution; past it they are counted."""
TEST_HOSTS = "REWYN_KERNEL_TEST_HOSTS"
"""For tests only: ``name=address,...`` resolved so instead of by the system's resolver. The
addresses are checked as any other (a loopback one still needs an entry naming it)."""
HOP_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Headers of one hop that a proxy does not pass on (RFC 9110, 7.6.1)."""
SOCKS_REPLIES = {
    "ok": 0,
    "failure": 1,
    "not allowed": 2,
    "unreachable": 4,
    "refused": 5,
    "command": 7,
    "address type": 8,
}
T = TypeVar("T")


_ORDER = itertools.count()
LOG = logging.getLogger("rewyn_kernel.egress")


class Refused(Exception):
    """A request the proxy will not carry: ``status`` for HTTP, ``socks`` for SOCKS5."""

    def __init__(self, reason: str, status: int = 403, socks: str = "not allowed") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.socks = socks


@dataclass
class Attempt:
    """One connection through a door, while it lasts (a ``NetworkAttempt`` once recorded)."""

    host: str
    port: int
    protocol: Literal["connect", "http", "socks5", "unknown"]
    verdict: Literal["allowed", "refused", "failed"] = "refused"
    reason: str = ""
    address: str | None = None
    bytes_out: int = 0
    bytes_in: int = 0
    method: str | None = None
    order: int = field(default_factory=lambda: next(_ORDER))
    """When it started, among this process's attempts (a record lists them so)."""

    def record(self, *, still_open: bool = False) -> NetworkAttempt:
        return NetworkAttempt(
            host=self.host[:255],
            port=self.port,
            protocol=self.protocol,
            verdict=self.verdict,
            reason=self.reason[:500],
            address=self.address,
            bytes_out=self.bytes_out,
            bytes_in=self.bytes_in,
            method=self.method,
            open=still_open,
        )


@dataclass(eq=False)
class _Link:
    """One client connection, its upstream once there is one, and when it last moved bytes.
    ``cut`` shuts both down (what waits on them wakes and ends); the sockets are closed by
    the task that serves the link, when it ends."""

    conn: Conn
    seen: float
    attempt: Attempt | None = None
    upstream: socket.socket | None = None
    head_by: float | None = None
    """While a request head is read: when it must be whole (the watch cuts it after)."""

    def reading_head(self, reading: bool) -> None:
        self.head_by = time.monotonic() + HEAD_TIMEOUT if reading else None

    def cut(self) -> None:
        for sock in (self.conn.sock, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@dataclass(eq=False)
class Door:
    """One worker's way out: a Unix socket at ``path`` and the record of its connections.

    Made and closed from any thread; everything else runs on the service's loop. The worker
    (host/core.py) owns it and closes it when the worker is gone."""

    service: EgressService
    gate: Gate
    folder: Path
    hosts: Mapping[str, tuple[str, ...]]
    path: Path = field(init=False)
    _listeners: list[socket.socket] = field(default_factory=list)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)
    _links: set[_Link] = field(default_factory=set)
    _done: list[tuple[int, NetworkAttempt]] = field(default_factory=list)
    _omitted: int = 0
    _spent: int = 0
    _limit: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.path = self.folder / "proxy.sock"

    @property
    def policy(self) -> NetworkPolicy:
        return self.gate.policy

    # -- from any thread --------------------------------------------------------------------

    def take(self) -> NetworkLog:
        """What came through since the last call (one execution's), and start the next count.

        Connections still open are listed as open with their bytes so far, and again, with
        their totals, in the record during which they close. Those the code's end is closing
        right now (its process exited: the relay passes the close on) are waited for, briefly.
        """
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            with self._lock:
                if not any(link.attempt is not None for link in self._links):
                    break
            time.sleep(0.005)
        with self._lock:
            done, self._done = self._done, []
            omitted, self._omitted = self._omitted, 0
            limit, self._limit = self._limit, ""
            self._spent = 0
            still = [link.attempt for link in self._links if link.attempt is not None]
        opened = [(attempt.order, attempt.record(still_open=True)) for attempt in still]
        every = sorted(done + opened, key=lambda pair: pair[0])  # (in the order they started)
        kept = [record for _, record in every[:MAX_RECORDS]]
        omitted += len(every) - len(kept)
        return NetworkLog(attempts=tuple(kept), omitted=omitted, limit_reached=limit)

    def close(self) -> None:
        """Stop listening and cut every connection (idempotent); the folder goes too."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(RuntimeError):  # (the service's loop is gone: nothing runs)
            self.service.call(self._shut())
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- on the loop -------------------------------------------------------------------------

    async def _open(self) -> None:
        for name in ("proxy.sock", "hand.sock"):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listeners.append(listener)
            path = self.folder / name
            listener.bind(str(path))
            os.chmod(path, 0o666)  # (the code may run as another uid than this process)
            listener.listen(256)
            listener.setblocking(False)
        proxy, hand = self._listeners
        self._start(self._accept(proxy, self._serve))
        self._start(self._accept(hand, self._take_handed))
        self._start(self._watch())

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(
        self, listener: socket.socket, serve: Callable[[socket.socket], Coroutine[Any, Any, None]]
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listener)
            except OSError:  # (too many files: a moment, then on)
                await asyncio.sleep(0.1)
                continue
            client.setblocking(False)
            self._start(serve(client))

    async def _take_handed(self, hand: socket.socket) -> None:
        """Serve the connections the sandbox's relay hands over ``hand``: each message carries
        one descriptor of a TCP connection the code opened to the relay's port (the code may
        send anything here: what is not a connected TCP socket is closed unused)."""
        try:
            while True:
                try:
                    data, fds, _, _ = socket.recv_fds(hand, 64, HANDED_AT_ONCE)
                except BlockingIOError:
                    await wait_ready(hand, write=False)
                    continue
                for fd in fds:
                    client = handed_socket(fd)
                    if client is not None:
                        self._start(self._serve(client))
                if not data:
                    return
        except OSError:
            return
        finally:
            hand.close()

    async def _watch(self) -> None:
        """Close the connections idle past the policy's timeout (looked at every second)."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            cutoff = now - self.policy.idle_timeout
            for link in list(self._links):
                if link.head_by is not None and now > link.head_by:
                    link.cut()  # (slowloris: the client sees its connection end)
                elif link.seen < cutoff:
                    if link.attempt is not None and not link.attempt.reason:
                        link.attempt.reason = (
                            f"closed after {self.policy.idle_timeout:g} s without traffic"
                        )
                    link.cut()

    async def _shut(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for link in list(self._links):
            link.cut()
        for listener in self._listeners:
            listener.close()

    def _note(self, attempt: Attempt) -> None:
        with self._lock:
            if len(self._done) < MAX_RECORDS:
                self._done.append((attempt.order, attempt.record()))
            else:
                self._omitted += 1

    def _count(self, link: _Link, size: int) -> bool:
        """Count ``size`` bytes of ``link``'s; False when the execution's bytes are spent."""
        link.seen = time.monotonic()
        limit = self.policy.max_bytes
        with self._lock:
            self._spent += size
            over = limit is not None and self._spent > limit
            if over and not self._limit:
                self._limit = f"the execution's {limit:,} bytes through the proxy were spent"
        if over:
            link.cut()
        return not over

    async def _serve(self, client: socket.socket) -> None:
        link = _Link(Conn(client), time.monotonic())
        with self._lock:  # (the set is read from other threads: see take)
            self._links.add(link)
            crowded = len(self._links) > self.policy.max_connections
        try:
            if crowded:
                attempt = Attempt("", 0, "unknown", reason="")
                attempt.reason = (
                    f"{self.policy.max_connections} connections are open already (the limit)"
                )
                link.attempt = attempt
                with contextlib.suppress(Exception):
                    first = await asyncio.wait_for(link.conn.some(1), 1.0)
                    await self._refuse(first, link.conn, attempt, 503)
                return
            await self._handle(link)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, h11.ProtocolError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (a bug of ours: the connection ends, the record says so)
            LOG.exception("the proxy failed on a connection")
            if link.attempt is not None:
                link.attempt.reason = f"the proxy failed: {exc!r}"[:500]
        finally:
            with self._lock:
                self._links.discard(link)
            if link.attempt is not None:
                self._note(link.attempt)
            link.cut()
            for sock in (client, link.upstream):
                if sock is not None:
                    sock.close()

    async def _handle(self, link: _Link) -> None:
        link.reading_head(True)
        first = await link.conn.some(1)
        if not first:
            return
        with self._lock:
            limit = self._limit
        if first == b"\x05":
            await self._socks(link, limit)
        else:
            await self._http(link, first, limit)

    async def _refuse(self, first: bytes, conn: Conn, attempt: Attempt, status: int) -> None:
        """Answer a refusal the client can read (a limit, before its request was read)."""
        await conn.send(b"\x05\xff" if first == b"\x05" else refusal(status, "", 0, attempt.reason))

    # -- HTTP -------------------------------------------------------------------------------

    async def _http(self, link: _Link, first: bytes, limit: str) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        conn.receive_data(first)
        while True:
            link.reading_head(True)
            try:
                request = await _next(conn, link.conn, h11.Request)
                link.reading_head(False)
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                attempt = link.attempt = Attempt("", 0, "unknown", reason=f"bad request: {exc}")
                await link.conn.send(refusal(status, "", 0, attempt.reason))
                return
            if request is None:
                return
            if request.method == b"CONNECT":
                await self._connect(link, conn, request, limit)
                return
            keep = await self._forward(link, conn, request, limit)
            if not keep or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _connect(
        self, link: _Link, conn: h11.Connection, request: h11.Request, limit: str
    ) -> None:
        attempt = link.attempt = Attempt("", 0, "connect")
        host, port = "", 0
        try:
            host, port = split_authority(request.target.decode("ascii", "replace"))
            attempt.host, attempt.port = host, port
            if limit:
                raise Refused(limit, 429)
            link.reading_head(True)
            await _next(conn, link.conn, h11.EndOfMessage)
            link.reading_head(False)
            link.upstream = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            await link.conn.send(refusal(exc.status, host, port, exc.reason))
            return
        established = h11.Response(status_code=200, headers=[], reason=b"Connection established")
        await link.conn.send(conn.send(established) or b"")
        early, _ = conn.trailing_data
        await self._tunnel(link, attempt, bytes(early) + link.conn.rest())

    async def _forward(
        self, link: _Link, conn: h11.Connection, request: h11.Request, limit: str
    ) -> bool:
        """Carry one plain HTTP request to its origin and the answer back; True: the client's
        connection may carry another."""
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        attempt = link.attempt = Attempt("", 80, "http", method=method)
        host, port = "", 80
        try:
            url = _absolute_url(target)
            host, port = url.hostname or "", url.port or 80
            attempt.host, attempt.port = host, port
            if limit:
                raise Refused(limit, 429)
            if url.scheme.lower() != "http" or not host:
                raise Refused(
                    f"{target[:200]!r} is not an absolute http:// URL (a proxy is asked for "
                    "http://host/path, or CONNECT host:443 for https)",
                    400,
                )
            upstream = link.upstream = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            await link.conn.send(refusal(exc.status, host, port or 80, exc.reason))
            return False
        try:
            return await self._exchange(link, conn, request, url, Conn(upstream))
        finally:
            link.upstream = None
            upstream.close()

    async def _exchange(
        self,
        link: _Link,
        conn: h11.Connection,
        request: h11.Request,
        url: urllib.parse.SplitResult,
        origin_conn: Conn,
    ) -> bool:
        attempt = link.attempt
        assert attempt is not None
        origin = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_HEADERS]
        headers = [(k, v) for k, v in headers if k.lower() != b"host"]
        headers.insert(0, (b"host", url.netloc.rpartition("@")[2].encode("ascii")))
        headers.append((b"connection", b"close"))
        framed = [
            (k, v)
            for k, v in request.headers
            if k.lower() in (b"content-length", b"transfer-encoding")
        ]
        headers += [(k, v) for k, v in framed if k.lower() == b"transfer-encoding"]
        out = origin.send(
            h11.Request(method=request.method, target=path.encode("ascii"), headers=headers)
        )
        await self._send(link, attempt, origin_conn, out)
        while True:  # the request's body
            event = await _next(conn, link.conn, h11.Data, h11.EndOfMessage)
            if event is None:
                return False
            await self._send(link, attempt, origin_conn, origin.send(event))
            if isinstance(event, h11.EndOfMessage):
                break
        try:
            response = await _next(origin, origin_conn, h11.Response, count=(self, link, attempt))
        except h11.RemoteProtocolError as exc:
            attempt.verdict, attempt.reason = "failed", f"the host's answer is not HTTP: {exc}"
            await link.conn.send(refusal(502, attempt.host, attempt.port, attempt.reason))
            return False
        if response is None:
            attempt.verdict, attempt.reason = "failed", "the host closed the connection"
            await link.conn.send(refusal(502, attempt.host, attempt.port, attempt.reason))
            return False
        back = [(k, v) for k, v in response.headers if k.lower() not in HOP_HEADERS]
        framing = {k.lower(): v.lower() for k, v in response.headers}
        if b"chunked" not in framing.get(b"transfer-encoding", b""):
            # Known length, or to the host's close: the body goes on as it comes (spliced),
            # and the client's connection ends with it (it is told so).
            length = framing.get(b"content-length")
            answer = h11.Response(
                status_code=response.status_code,
                headers=[*back, (b"connection", b"close")],
                reason=response.reason,
            )
            await link.conn.send(conn.send(answer) or b"")
            await self._pass_body(link, attempt, origin, origin_conn, length)
            return False
        answer = h11.Response(
            status_code=response.status_code, headers=back, reason=response.reason
        )
        await link.conn.send(conn.send(answer) or b"")
        while True:  # (a chunked answer: re-framed chunk by chunk)
            event = await _next(
                origin, origin_conn, h11.Data, h11.EndOfMessage, count=(self, link, attempt)
            )
            if event is None:  # (cut short: the client sees its connection end)
                return False
            data = conn.send(event) or b""
            if isinstance(event, h11.EndOfMessage):
                self._note(attempt)
                link.attempt = None
            await link.conn.send(data)
            if isinstance(event, h11.EndOfMessage):
                return True

    async def _pass_body(
        self,
        link: _Link,
        attempt: Attempt,
        origin: h11.Connection,
        origin_conn: Conn,
        length: bytes | None,
    ) -> None:
        """Pass an answer's body on as bytes: what h11 read past the head (the body's first
        bytes, as they came), then the rest, up to its length (or the host's close)."""
        early = b""
        while True:
            event = origin.next_event()
            if not isinstance(event, h11.Data):
                break
            early += event.data
        if early:
            attempt.bytes_in += len(early)
            if not self._count(link, len(early)):
                return
            await link.conn.send(early)
        if event is not h11.NEED_DATA:  # (the whole body came with the head)
            return
        left = int(length) - len(early) if length is not None and length.isdigit() else None

        def count(size: int, outward: bool) -> bool:
            attempt.bytes_in += size
            return self._count(link, size)

        await pump(origin_conn.sock, link.conn.sock, False, count, left)

    async def _send(self, link: _Link, attempt: Attempt, conn: Conn, data: bytes | None) -> None:
        """Send what goes to the host, counted."""
        if not data:
            return
        attempt.bytes_out += len(data)
        if not self._count(link, len(data)):
            raise ConnectionAbortedError("the execution's bytes are spent")
        await conn.send(data)

    # -- SOCKS5 -----------------------------------------------------------------------------

    async def _socks(self, link: _Link, limit: str) -> None:
        async def read(size: int) -> bytes:
            return await link.conn.exactly(size)

        attempt = link.attempt = Attempt("", 0, "socks5")
        (count,) = await read(1)
        methods = await read(count)
        if 0 not in methods:
            attempt.reason = "SOCKS5 without the no-authentication method"
            await link.conn.send(b"\x05\xff")
            return
        await link.conn.send(b"\x05\x00")
        version, command, _, kind = await read(4)
        try:
            if kind == 1:
                host = str(ipaddress.IPv4Address(await read(4)))
            elif kind == 4:
                host = f"[{ipaddress.IPv6Address(await read(16))}]"
            elif kind == 3:
                (size,) = await read(1)
                host = (await read(size)).decode("ascii", "replace")
            else:
                raise Refused(f"SOCKS5 address type {kind} is not one", socks="address type")
            (port,) = struct.unpack("!H", await read(2))
            attempt.host, attempt.port = host, port
            if version != 5:
                raise Refused(f"SOCKS version {version} in the request", socks="failure")
            if command != 1:
                raise Refused("only SOCKS5 CONNECT is carried (no BIND, no UDP)", socks="command")
            link.reading_head(False)
            if limit:
                raise Refused(limit, socks="not allowed")
            link.upstream = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            await link.conn.send(bytes([5, SOCKS_REPLIES[exc.socks], 0, 1, 0, 0, 0, 0, 0, 0]))
            return
        await link.conn.send(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        await self._tunnel(link, attempt, link.conn.rest())

    # -- reaching a host --------------------------------------------------------------------

    async def _reach(self, attempt: Attempt) -> socket.socket:
        """Decide, resolve, check each address and connect; Refused says why not."""
        decision = self.gate.decide(attempt.host, attempt.port)
        if decision.verdict != "allowed":
            raise Refused(decision.reason)
        addresses = await self._resolve(attempt, decision)
        last = ""
        deadline = time.monotonic() + CONNECT_TIMEOUT
        loop = asyncio.get_running_loop()
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                left = max(0.1, deadline - time.monotonic())
                await asyncio.wait_for(loop.sock_connect(sock, (str(address), attempt.port)), left)
            except (OSError, asyncio.TimeoutError) as exc:
                sock.close()
                failure = exc.strerror if isinstance(exc, OSError) else None
                last = f"{address}: {failure or 'timed out'}"
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            attempt.verdict, attempt.address = "allowed", str(address)
            return sock
        attempt.verdict = "failed"
        raise Refused(f"could not connect ({last})", 502, socks="unreachable")

    async def _resolve(self, attempt: Attempt, decision: Decision) -> list[IPAddress]:
        from rewyn_kernel.runtime.egress.policy import parse_host

        target = parse_host(attempt.host)
        if not isinstance(target, str):
            found: list[IPAddress] = [target]
        elif target in self.hosts:
            found = [ipaddress.ip_address(text) for text in self.hosts[target]]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(target, attempt.port, type=socket.SOCK_STREAM),
                    CONNECT_TIMEOUT,
                )
            except (OSError, asyncio.TimeoutError) as exc:
                attempt.verdict = "failed"
                raise Refused(f"{target} does not resolve ({exc})", 502, "unreachable") from None
            found = []
            for info in infos:
                address = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
                if address not in found:
                    found.append(address)
        allowed: list[IPAddress] = []
        reasons: list[str] = []
        for address in found:
            why = self.gate.check_address(decision, address, attempt.port)
            if why:
                reasons.append(why)
            else:
                allowed.append(address)
        if not allowed:
            raise Refused("; ".join(reasons[:3]) or f"{target} has no address")
        return allowed

    async def _tunnel(self, link: _Link, attempt: Attempt, early: bytes) -> None:
        """Join the client and its host both ways until both ends are done (or a limit or the
        idle watch cuts them); ``early``: what the client sent past its request."""
        upstream = link.upstream
        assert upstream is not None
        if early:
            await self._send(link, attempt, Conn(upstream), early)

        def count(size: int, outward: bool) -> bool:
            if outward:
                attempt.bytes_out += size
            else:
                attempt.bytes_in += size
            return self._count(link, size)

        await tunnel(link.conn.sock, upstream, count)


async def _next(
    conn: h11.Connection,
    peer: Conn,
    *kinds: type[Any],
    count: tuple[Door, _Link, Attempt] | None = None,
) -> Any:
    """The next event of ``conn`` that is one of ``kinds`` (None: the peer ended), reading
    ``peer`` as needed: a client's request in small reads (h11 bounds a head's size as it
    grows; the watch, its time); ``count``: what is read is the host's answer, counted."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await peer.some(4096 if count is None else CHUNK)
            if count is not None:
                door, link, attempt = count
                attempt.bytes_in += len(data)
                if not door._count(link, len(data)):
                    return None
            conn.receive_data(data)
            continue
        if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, kinds):
            return event


def _absolute_url(target: str) -> urllib.parse.SplitResult:
    """A plain request's absolute URL, its host and port readable; Refused if it is not one."""
    try:
        url = urllib.parse.urlsplit(target)
        url.port  # noqa: B018 (it raises for a port that is not one)
    except ValueError as exc:
        raise Refused(f"{target[:200]!r} is not a URL a proxy can carry ({exc})", 400) from None
    return url


def split_authority(target: str) -> tuple[str, int]:
    """(host, port) of a CONNECT target ``host:port`` / ``[v6]:port``; Refused if not one."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise Refused(f"CONNECT {target[:200]!r} is not host:port", 400)
    return host, int(port)


def handed_socket(fd: int) -> socket.socket | None:
    """The socket a sandbox handed over as descriptor ``fd``, if it is a TCP one (non-blocking
    now, this process's to close); anything else is closed at once."""
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError("not a socket")
        client = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return None
    if client.family not in (socket.AF_INET, socket.AF_INET6) or client.type != socket.SOCK_STREAM:
        client.close()
        return None
    client.setblocking(False)
    return client


def refusal(status: int, host: str, port: int, reason: str) -> bytes:
    """An HTTP answer that says why, for the code and for a model to read: the reason in the
    status line (what requests, pip and curl show of a refused CONNECT) and the body."""
    where = f"{host}:{port}" if host else "this request"
    text = f"rewyn sandbox proxy: {where} refused: {reason}" if status == 403 else reason
    phrase = text.encode("ascii", "replace")[:300].replace(b"\r", b" ").replace(b"\n", b" ")
    lines = [f"The sandbox's proxy did not carry {where}: {reason}."]
    if status == 403 and host:
        lines.append(
            f"Only the hosts of the sandbox's allow-list are reachable. To allow this one, add "
            f"'{entry_for(host, port)}' to network=[...] (a kernel: rewyn-kernel install "
            f"--allow-host {entry_for(host, port)}; the magic and run: --allow-host)."
        )
    body = ("\n".join(lines) + "\n").encode("utf-8", "replace")
    head = [
        f"HTTP/1.1 {status} ".encode() + phrase,
        b"Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}".encode(),
        b"Connection: close",
        b"Proxy-Status: rewyn-kernel; error=destination_ip_prohibited"
        if status == 403
        else b"Proxy-Status: rewyn-kernel; error=proxy_internal_error",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class EgressService:
    """The thread and asyncio loop every door of this process runs on (started when the first
    door opens; a daemon: it ends with the process, and every sandbox's proxy with it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="rewyn-egress", daemon=True)
                thread.start()
                self._loop = loop
            return self._loop

    def call(self, work: Awaitable[T], timeout: float = 30.0) -> T:
        """Run ``work`` on the loop and wait for it (not from the loop's own thread)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._running())  # type: ignore[arg-type]
        return future.result(timeout)

    def open_door(self, policy: NetworkPolicy) -> Door:
        """A door for one worker, listening already (its folder open to every uid: the code
        may run as another than this process)."""
        folder = Path(tempfile.mkdtemp(prefix="rewyn-egress-"))
        os.chmod(folder, 0o755)
        door = Door(self, Gate(policy), folder, test_hosts())
        try:
            self.call(door._open())
        except BaseException:
            for listener in door._listeners:
                listener.close()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return door


def test_hosts() -> dict[str, tuple[str, ...]]:
    """The names ``REWYN_KERNEL_TEST_HOSTS`` maps (tests only; see TEST_HOSTS)."""
    found: dict[str, list[str]] = {}
    for item in os.environ.get(TEST_HOSTS, "").split(","):
        name, sep, address = item.strip().partition("=")
        if sep and name and address:
            ipaddress.ip_address(address)  # (a bad one fails the door, loudly)
            found.setdefault(name.lower().rstrip("."), []).append(address)
    return {name: tuple(addresses) for name, addresses in found.items()}


SERVICE = EgressService()
"""This process's proxy."""
