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
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import h11

from rewyn_kernel.runtime._result import NetworkAttempt, NetworkLog
from rewyn_kernel.runtime.egress.policy import Decision, Gate, IPAddress, NetworkPolicy, entry_for

CHUNK = 256 * 1024
"""Bytes read at once while relaying."""
MAX_HEAD = 16 * 1024
"""The longest request head (request line and headers) a client may send."""
HEAD_TIMEOUT = 15.0
"""Seconds a client has to send a whole request head (a slow one is dropped: slowloris)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to reach a host, all of its addresses together."""
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
    """One client connection: its writer (closed to stop it) and when it last moved bytes."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    seen: float
    attempt: Attempt | None = None
    upstream: asyncio.StreamWriter | None = None

    def close(self) -> None:
        for writer in (self.writer, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()


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
    _server: asyncio.AbstractServer | None = None
    _links: set[_Link] = field(default_factory=set)
    _done: list[NetworkAttempt] = field(default_factory=list)
    _omitted: int = 0
    _spent: int = 0
    _limit: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False
    _watcher: asyncio.Future[None] | None = None

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
        opened = [attempt.record(still_open=True) for attempt in still]
        kept = (done + opened)[:MAX_RECORDS]
        omitted += len(done) + len(opened) - len(kept)
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
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.path), limit=MAX_HEAD
        )
        os.chmod(self.path, 0o666)  # (the code may run as another uid than this process)

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._watcher is not None:
            self._watcher.cancel()
        for link in list(self._links):
            link.close()

    def _note(self, attempt: Attempt) -> None:
        with self._lock:
            if len(self._done) < MAX_RECORDS:
                self._done.append(attempt.record())
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
        return not over

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(reader, writer, time.monotonic())
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
                    first = await asyncio.wait_for(reader.read(1), 1.0)
                    await self._refuse(first, reader, writer, attempt, 503)
                return
            await self._handle(link)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, h11.ProtocolError):
            pass
        finally:
            with self._lock:
                self._links.discard(link)
            if link.attempt is not None:
                self._note(link.attempt)
            link.close()

    async def _handle(self, link: _Link) -> None:
        first = await asyncio.wait_for(link.reader.read(1), HEAD_TIMEOUT)
        if not first:
            return
        with self._lock:
            limit = self._limit
        if first == b"\x05":
            await self._socks(link, limit)
        else:
            await self._http(link, first, limit)

    async def _refuse(
        self,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        attempt: Attempt,
        status: int,
    ) -> None:
        """Answer a refusal the client can read (a limit, before its request was read)."""
        if first == b"\x05":
            writer.write(b"\x05\xff")
        else:
            writer.write(refusal(status, "", 0, attempt.reason))
        await writer.drain()

    # -- HTTP -------------------------------------------------------------------------------

    async def _http(self, link: _Link, first: bytes, limit: str) -> None:
        reader, writer = link.reader, link.writer
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        conn.receive_data(first)
        while True:
            try:
                request = await _next(conn, reader, h11.Request)
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                attempt = link.attempt = Attempt("", 0, "unknown", reason=f"bad request: {exc}")
                writer.write(refusal(status, "", 0, attempt.reason))
                await writer.drain()
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
        reader, writer = link.reader, link.writer
        host, port = split_authority(request.target.decode("ascii", "replace"))
        attempt = link.attempt = Attempt(host, port, "connect")
        try:
            if limit:
                raise Refused(limit, 429)
            await _next(conn, reader, h11.EndOfMessage)
            up_reader, up_writer = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            writer.write(refusal(exc.status, host, port, exc.reason))
            await writer.drain()
            return
        link.upstream = up_writer
        writer.write(
            conn.send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
            or b""
        )
        early, _ = conn.trailing_data
        if early:
            up_writer.write(early)
            attempt.bytes_out += len(early)
        await self._pipe(link, attempt, up_reader)

    async def _forward(
        self, link: _Link, conn: h11.Connection, request: h11.Request, limit: str
    ) -> bool:
        """Carry one plain HTTP request to its origin and the answer back; True: the client's
        connection may carry another."""
        writer = link.writer
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        url = urllib.parse.urlsplit(target)
        host, port = url.hostname or "", url.port if _has_port(url) else 80
        attempt = link.attempt = Attempt(host, port or 80, "http", method=method)
        try:
            if limit:
                raise Refused(limit, 429)
            if url.scheme.lower() != "http" or not host:
                raise Refused(
                    f"{target[:200]!r} is not an absolute http:// URL (a proxy is asked for "
                    "http://host/path, or CONNECT host:443 for https)",
                    400,
                )
            up_reader, up_writer = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            writer.write(refusal(exc.status, host, port or 80, exc.reason))
            await writer.drain()
            return False
        link.upstream = up_writer
        try:
            return await self._exchange(link, conn, request, url, up_reader)
        finally:
            link.upstream = None
            up_writer.transport.abort()

    async def _exchange(
        self,
        link: _Link,
        conn: h11.Connection,
        request: h11.Request,
        url: urllib.parse.SplitResult,
        up_reader: asyncio.StreamReader,
    ) -> bool:
        attempt, reader, writer, up_writer = link.attempt, link.reader, link.writer, link.upstream
        assert attempt is not None
        assert up_writer is not None
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
        await self._send(link, attempt, up_writer, out, "out")
        while True:  # the request's body
            event = await _next(conn, reader, h11.Data, h11.EndOfMessage)
            if event is None:
                return False
            await self._send(link, attempt, up_writer, origin.send(event), "out")
            if isinstance(event, h11.EndOfMessage):
                break
        try:
            response = await _next(origin, up_reader, h11.Response, count=(self, link, attempt))
        except h11.RemoteProtocolError as exc:
            attempt.verdict, attempt.reason = "failed", f"the host's answer is not HTTP: {exc}"
            writer.write(refusal(502, attempt.host, attempt.port, attempt.reason))
            await writer.drain()
            return False
        if response is None:
            attempt.verdict, attempt.reason = "failed", "the host closed the connection"
            writer.write(refusal(502, attempt.host, attempt.port, attempt.reason))
            await writer.drain()
            return False
        back = [(k, v) for k, v in response.headers if k.lower() not in HOP_HEADERS]
        writer.write(
            conn.send(
                h11.Response(status_code=response.status_code, headers=back, reason=response.reason)
            )
            or b""
        )
        while True:
            event = await _next(
                origin, up_reader, h11.Data, h11.EndOfMessage, count=(self, link, attempt)
            )
            if event is None:  # (cut short: the client sees its connection end)
                return False
            data = conn.send(event) or b""
            if isinstance(event, h11.Data):
                # The answer's end, if it came with this: recorded before the client can have
                # it (the execution may end as soon as it does, and its record be read).
                end = origin.next_event()
                if isinstance(end, h11.EndOfMessage):
                    data += conn.send(end) or b""
                    event = end
                elif end is not h11.NEED_DATA:
                    return False
            if isinstance(event, h11.EndOfMessage):
                self._note(attempt)
                link.attempt = None
            writer.write(data)
            await writer.drain()
            if isinstance(event, h11.EndOfMessage):
                return True

    async def _send(
        self,
        link: _Link,
        attempt: Attempt,
        writer: asyncio.StreamWriter,
        data: bytes | None,
        way: str,
    ) -> None:
        if not data:
            return
        if way == "out":
            attempt.bytes_out += len(data)
        else:
            attempt.bytes_in += len(data)
        if not self._count(link, len(data)):
            raise ConnectionAbortedError("the execution's bytes are spent")
        writer.write(data)
        await writer.drain()

    # -- SOCKS5 -----------------------------------------------------------------------------

    async def _socks(self, link: _Link, limit: str) -> None:
        reader, writer = link.reader, link.writer

        async def read(size: int) -> bytes:
            return await asyncio.wait_for(reader.readexactly(size), HEAD_TIMEOUT)

        attempt = link.attempt = Attempt("", 0, "socks5")
        (count,) = await read(1)
        methods = await read(count)
        if 0 not in methods:
            attempt.reason = "SOCKS5 without the no-authentication method"
            writer.write(b"\x05\xff")
            await writer.drain()
            return
        writer.write(b"\x05\x00")
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
            if limit:
                raise Refused(limit, socks="not allowed")
            up_reader, up_writer = await self._reach(attempt)
        except Refused as exc:
            attempt.reason = exc.reason
            writer.write(bytes([5, SOCKS_REPLIES[exc.socks], 0, 1, 0, 0, 0, 0, 0, 0]))
            await writer.drain()
            return
        link.upstream = up_writer
        writer.write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        await self._pipe(link, attempt, up_reader)

    # -- reaching a host --------------------------------------------------------------------

    async def _reach(self, attempt: Attempt) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Decide, resolve, check each address and connect; Refused says why not."""
        decision = self.gate.decide(attempt.host, attempt.port)
        if decision.verdict != "allowed":
            raise Refused(decision.reason)
        addresses = await self._resolve(attempt, decision)
        last = ""
        deadline = time.monotonic() + CONNECT_TIMEOUT
        for address in addresses:
            try:
                left = max(0.1, deadline - time.monotonic())
                streams = await asyncio.wait_for(
                    asyncio.open_connection(str(address), attempt.port, limit=CHUNK), left
                )
            except (OSError, asyncio.TimeoutError) as exc:
                failure = exc.strerror if isinstance(exc, OSError) else None
                last = f"{address}: {failure or 'timed out'}"
                continue
            attempt.verdict, attempt.address = "allowed", str(address)
            return streams
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

    async def _pipe(self, link: _Link, attempt: Attempt, up_reader: asyncio.StreamReader) -> None:
        """Relay both ways until either side ends (or a limit ends it)."""
        reader, writer, up_writer = link.reader, link.writer, link.upstream
        assert up_writer is not None

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, out: bool) -> None:
            try:
                while True:
                    data = await source.read(CHUNK)
                    if not data:
                        break
                    if out:
                        attempt.bytes_out += len(data)
                    else:
                        attempt.bytes_in += len(data)
                    if not self._count(link, len(data)):
                        break
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    if sink.can_write_eof() and not sink.is_closing():
                        sink.write_eof()

        ways = [
            asyncio.ensure_future(copy(reader, up_writer, True)),
            asyncio.ensure_future(copy(up_reader, writer, False)),
        ]
        try:
            await asyncio.gather(*ways)
        finally:
            for way in ways:
                way.cancel()


async def _next(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    *kinds: type[Any],
    count: tuple[Door, _Link, Attempt] | None = None,
) -> Any:
    """The next event of ``conn`` that is one of ``kinds`` (None: the peer ended), reading as
    needed: a request head within HEAD_TIMEOUT; ``count``: bytes read count as the host's."""
    deadline = time.monotonic() + HEAD_TIMEOUT
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            timeout = None if count is not None else max(0.0, deadline - time.monotonic())
            data = await asyncio.wait_for(reader.read(CHUNK), timeout)
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


def _has_port(url: urllib.parse.SplitResult) -> bool:
    try:
        return url.port is not None
    except ValueError:
        raise Refused(f"{url.netloc!r} has no valid port", 400) from None


def split_authority(target: str) -> tuple[str, int]:
    """(host, port) of a CONNECT target ``host:port`` / ``[v6]:port``; Refused if not one."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise Refused(f"CONNECT {target[:200]!r} is not host:port", 400)
    return host, int(port)


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

    def open_door(self, policy: NetworkPolicy, owner: tuple[int, int] | None = None) -> Door:
        """A door for one worker, listening already; ``owner``: the uid and gid the code runs
        as, where not this process's (its folder is theirs to pass through)."""
        folder = Path(tempfile.mkdtemp(prefix="rewyn-egress-"))
        os.chmod(folder, 0o755)
        door = Door(self, Gate(policy), folder, test_hosts())
        try:
            self.call(door._open())
            self.call(_watch(door))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return door


async def _watch(door: Door) -> None:
    """Start the task that closes ``door``'s idle connections (every second)."""

    async def watch() -> None:
        while not door._closed:
            await asyncio.sleep(1.0)
            cutoff = time.monotonic() - door.policy.idle_timeout
            for link in list(door._links):
                if link.seen < cutoff:
                    if link.attempt is not None and not link.attempt.reason:
                        link.attempt.reason = (
                            f"closed after {door.policy.idle_timeout:g} s without traffic"
                        )
                    link.close()

    door._watcher = asyncio.ensure_future(watch())


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
