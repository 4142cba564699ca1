"""The host's proxy: a sandbox's only way out when its ``network`` is an allow-list.

One thread per host process runs an asyncio loop (``EgressService``); each worker of such a
sandbox gets a ``Door``: a folder of its own, which the provider shows to the sandbox, with two
Unix sockets, and the record of what came through them. ``proxy.sock`` takes connections that
speak to the proxy; ``hand.sock`` takes connections the sandbox's supervisor accepted on its
loopback port, handed over as descriptors (worker/relay.py). The sandbox's network namespace
stays empty, and the code's proxy variables point at that port. The folder also holds
``no_proxy``, what the sandbox's ``NO_PROXY`` holds (``sandbox_no_proxy``).

A client speaks HTTP (http.py: ``CONNECT host:port`` for TLS, or a plain request with an
absolute URL) or SOCKS5 (socks.py). Each request's host and port are decided by the policy
(policy.py); names are resolved here and only the addresses checked are connected to. A
tunnel's bytes are spliced, never read (pump.py). Everything that comes through is hostile:
the request head is bounded in size and time, connections in number and idleness, bytes per
execution, and what is handed over must be a TCP socket.

Every limit stops the code, never the host: what one door holds of this process's descriptors
is bounded (``HAND_CONNECTIONS`` hand-over connections, ``max_connections`` connections each
with its host and pipes, ``REFUSING`` being turned away), a hand-over connection that hands
nothing over is cut, and past a limit the code's new connection is refused or waits unaccepted
in the kernel's backlog, never another sandbox's or the host's own work. Nor is any of the
code's taken once the process's descriptors run low (``RESERVE``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import resource
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import h11

from rewyn_kernel.runtime._result import NetworkAttempt, NetworkLog
from rewyn_kernel.runtime.egress.attempt import Attempt, Refused, refusal
from rewyn_kernel.runtime.egress.http import serve_http
from rewyn_kernel.runtime.egress.policy import (
    Decision,
    Gate,
    IPAddress,
    NetworkPolicy,
    names_loopback,
    parse_host,
)
from rewyn_kernel.runtime.egress.pump import Conn, Count, tunnel, wait_ready
from rewyn_kernel.runtime.egress.socks import serve_socks
from rewyn_kernel.runtime.egress.upstream import Routes, Upstream, choose, open_tunnel

HEAD_TIMEOUT = 15.0
"""Seconds a client has to send a whole request head (a slow one is dropped: slowloris)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to reach a host, all of its addresses together."""
HANDED_AT_ONCE = 16
"""Descriptors read from one message of the relay (more are closed by the kernel)."""
HAND_CONNECTIONS = 4
"""Connections to a door's ``hand.sock`` served at once (the supervisor's relay needs one);
more wait, unaccepted, in the listener's backlog (no descriptor of this process's)."""
HAND_IDLE = 10.0
"""Seconds a hand-over connection may hand no descriptor over before it is cut; the first of
a door's, the supervisor's (made before any code runs), is not cut."""
REFUSING = 8
"""Connections past ``max_connections`` answered with a refusal they can read at once (each
for at most ``REFUSE_WAIT``); past these, closed unanswered."""
REFUSE_WAIT = 1.0
"""Seconds a connection turned away has to send its first byte (its answer: HTTP or SOCKS)."""
RESERVE = (64, 1024)
"""The descriptors kept for the host's own work: an eighth of the process's limit, within
these bounds. The code's new connection is refused when its descriptor is numbered within
them of the limit (descriptors are numbered lowest free first: the table is nearly full)."""
SETTLE = 0.05
"""Seconds ``take`` waits for connections still open to close."""
MAX_RECORDS = 512
"""Attempts kept per execution; past it they are counted."""
TEST_HOSTS = "REWYN_KERNEL_TEST_HOSTS"
"""For tests only: ``name=address,...`` resolved so instead of by the system's resolver. The
addresses are checked as any other (a loopback one still needs an entry naming it); ``name=-``:
the name does not resolve here (an upstream proxy resolves it)."""
SANDBOX_LOOPBACK = "localhost,127.0.0.1,::1"
"""The sandbox's own loopback, as its ``NO_PROXY`` names it where no entry names loopback
(worker/relay.py has the same: the sandbox's end imports nothing of the host's)."""
NO_PROXY_FILE = "no_proxy"
"""The file of a door's folder that holds the sandbox's ``NO_PROXY`` (worker/relay.py)."""
T = TypeVar("T")


LOG = logging.getLogger("rewyn_kernel.egress")


class Unresolved(Refused):
    """A name that does not resolve on this host (an upstream proxy may resolve it)."""


@dataclass(eq=False)
class Link:
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
    """One worker's way out: the Unix sockets in ``folder`` and the record of its connections.

    Made and closed from any thread; everything else runs on the service's loop. The worker
    (host/core.py) owns it and closes it when the worker is gone."""

    service: EgressService
    gate: Gate
    folder: Path
    hosts: Mapping[str, tuple[str, ...]]
    routes: Routes = field(default_factory=Routes)
    """The upstream proxy its connections go through, if any (upstream.py)."""
    _listeners: list[socket.socket] = field(default_factory=list)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)
    _links: set[Link] = field(default_factory=set)
    _done: list[tuple[int, NetworkAttempt]] = field(default_factory=list)
    _omitted: int = 0
    _spent: int = 0
    _limit: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False
    _refusing: int = 0
    """Connections being turned away with an answer (on the loop only)."""

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

    def change_policy(self, policy: NetworkPolicy) -> None:
        """Decide every connection from now on by ``policy`` (the person granted a host to a
        running kernel: kernel/grants.py). What was refused stays refused, and what is open
        stays open: only new requests meet the new rules."""
        gate = Gate(policy)  # (parsed here, off the loop; the loop reads ``gate`` once a request)
        with self._lock:
            self.gate = gate

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
        no_proxy = self.folder / NO_PROXY_FILE
        no_proxy.write_text(sandbox_no_proxy(self.policy))
        no_proxy.chmod(0o644)
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
        self._start(self._accept_hands(hand))
        self._start(self._watch())

    def _start(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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

    async def _accept_hands(self, listener: socket.socket) -> None:
        """Accept hand-over connections, ``HAND_CONNECTIONS`` at once (the others wait in the
        backlog, and past it are refused by the kernel); only the first is never cut idle."""
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(HAND_CONNECTIONS)
        idle: float | None = None  # (the first: the supervisor's)
        while True:
            await slots.acquire()
            try:
                hand, _ = await loop.sock_accept(listener)
            except OSError:
                slots.release()
                await asyncio.sleep(0.1)
                continue
            if not room(hand):
                hand.close()
                slots.release()
                continue
            hand.setblocking(False)
            task = self._start(self._take_handed(hand, idle))
            task.add_done_callback(lambda _: slots.release())
            idle = HAND_IDLE

    async def _take_handed(self, hand: socket.socket, idle: float | None) -> None:
        """Serve the connections the sandbox's relay hands over ``hand``: each message carries
        one descriptor of a TCP connection the code opened to the relay's port (the code may
        send anything here: what is not a connected TCP socket is closed unused). ``idle``:
        seconds without a descriptor after which ``hand`` is cut (None: never). Its reading
        is shut first, so that what is sent from then on fails for the sender (EPIPE) instead
        of being lost with the socket, and what came before is still served."""
        deadline = None if idle is None else time.monotonic() + idle
        try:
            while True:
                try:
                    data, fds, _, _ = socket.recv_fds(hand, 64, HANDED_AT_ONCE)
                except BlockingIOError:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        hand.shutdown(socket.SHUT_RD)  # (then recv reads what is queued, then b"")
                        continue
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(wait_ready(hand, write=False), left)
                    continue
                for fd in fds:
                    client = handed_socket(fd)
                    if client is not None:
                        self._start(self._serve(client))
                if fds and idle is not None:
                    deadline = time.monotonic() + idle
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

    def note(self, attempt: Attempt) -> None:
        with self._lock:
            if len(self._done) < MAX_RECORDS:
                self._done.append((attempt.order, attempt.record()))
            else:
                self._omitted += 1

    def tally(self, link: Link, attempt: Attempt, size: int, outward: bool) -> bool:
        """Count ``size`` bytes of ``attempt`` one way; False when the execution's are spent."""
        if outward:
            attempt.bytes_out += size
        else:
            attempt.bytes_in += size
        return self.count_bytes(link, size)

    def counter(self, link: Link, attempt: Attempt) -> Count:
        """``tally`` for ``attempt``'s bytes, as a pump counts them."""
        return functools.partial(self.tally, link, attempt)

    def count_bytes(self, link: Link, size: int) -> bool:
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
        link = Link(Conn(client), time.monotonic())
        with self._lock:  # (the set is read from other threads: see take)
            crowded = len(self._links) >= self.policy.max_connections
            if not crowded:
                self._links.add(link)
        try:
            if crowded or not room(client):
                why = (
                    f"{self.policy.max_connections} connections are open already (the limit)"
                    if crowded
                    else "the host process is short of descriptors"
                )
                await self._turn_away(link, Attempt("", 0, "unknown", reason=why))
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
                self.note(link.attempt)
            link.cut()
            for sock in (client, link.upstream):
                if sock is not None:
                    sock.close()

    async def _handle(self, link: Link) -> None:
        link.reading_head(True)
        first = await link.conn.some(4096)  # (a whole request head, usually)
        if not first:
            return
        with self._lock:
            limit = self._limit
        if first[:1] == b"\x05":  # (SOCKS5's version byte: no HTTP method starts so)
            link.conn.buffer[:0] = first[1:]  # (the version byte read)
            await serve_socks(self, link, limit)
        else:
            await serve_http(self, link, first, limit)

    async def _turn_away(self, link: Link, attempt: Attempt) -> None:
        """Refuse ``link`` before its request is read: with an answer it can read, while no
        more than ``REFUSING`` are answered so; else at once, unanswered."""
        link.attempt = attempt
        if self._refusing >= REFUSING:
            return
        self._refusing += 1
        try:
            with contextlib.suppress(Exception):
                first = await asyncio.wait_for(link.conn.some(1), REFUSE_WAIT)
                await asyncio.wait_for(self._refuse(first, link.conn, attempt, 503), REFUSE_WAIT)
        finally:
            self._refusing -= 1

    async def _refuse(self, first: bytes, conn: Conn, attempt: Attempt, status: int) -> None:
        """Answer a refusal the client can read (a limit, before its request was read)."""
        await conn.send(b"\x05\xff" if first == b"\x05" else refusal(status, "", 0, attempt.reason))

    async def send_out(self, link: Link, attempt: Attempt, conn: Conn, data: bytes | None) -> None:
        """Send what goes to the host, counted."""
        if not data:
            return
        if not self.tally(link, attempt, len(data), True):
            raise ConnectionAbortedError("the execution's bytes are spent")
        await conn.send(data)

    # -- reaching a host --------------------------------------------------------------------

    async def reach(self, attempt: Attempt) -> socket.socket:
        """Decide, resolve, check each address and connect (through the upstream proxy, where
        there is one: upstream.py); Refused says why not."""
        decision = self.gate.decide(attempt.host, attempt.port)
        if decision.verdict != "allowed":
            raise Refused(decision.reason)
        upstream = self.routes.upstream(attempt.protocol)
        if upstream is not None:
            target = parse_host(attempt.host)
            if isinstance(target, str) and self.routes.direct(target):
                upstream = None  # (NO_PROXY names it)
        try:
            addresses = await self._resolve(attempt, decision)
        except Unresolved:
            if upstream is None:
                raise
            # (no name service of the internet here: the upstream resolves it; see upstream.py)
            name = str(parse_host(attempt.host))
            sock = await self._tunnel(attempt, upstream, name)
            attempt.verdict = "allowed"
            return sock
        last = ""
        deadline = time.monotonic() + CONNECT_TIMEOUT
        loop = asyncio.get_running_loop()
        for address in addresses:
            if upstream is not None and not self.routes.direct(address):
                sock = await self._tunnel(attempt, upstream, str(address))
                attempt.verdict, attempt.address = "allowed", str(address)
                return sock
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            if not room(sock):
                sock.close()
                raise Refused("the host process is short of descriptors", 503, "failure")
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

    async def _tunnel(self, attempt: Attempt, upstream: Upstream, host: str) -> socket.socket:
        """A tunnel to ``host`` on the attempt's port through ``upstream``."""
        try:
            sock = await open_tunnel(upstream, host, attempt.port, CONNECT_TIMEOUT)
        except Refused:
            attempt.verdict = "failed"
            raise
        if not room(sock):
            sock.close()
            raise Refused("the host process is short of descriptors", 503, "failure")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    async def _resolve(self, attempt: Attempt, decision: Decision) -> list[IPAddress]:
        target = parse_host(attempt.host)
        if not isinstance(target, str):
            found: list[IPAddress] = [target]
        elif target in self.hosts:
            found = [ipaddress.ip_address(text) for text in self.hosts[target] if text != "-"]
            if not found:  # (a test's name that does not resolve here: see TEST_HOSTS)
                attempt.verdict = "failed"
                raise Unresolved(f"{target} does not resolve here", 502, "unreachable")
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(target, attempt.port, type=socket.SOCK_STREAM),
                    CONNECT_TIMEOUT,
                )
            except (OSError, asyncio.TimeoutError) as exc:
                attempt.verdict = "failed"
                raise Unresolved(f"{target} does not resolve ({exc})", 502, "unreachable") from None
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

    async def join(self, link: Link, attempt: Attempt, early: bytes) -> None:
        """Join the client and its host both ways until both ends are done (or a limit or the
        idle watch cuts them); ``early``: what the client sent past its request."""
        upstream = link.upstream
        assert upstream is not None
        if early:
            await self.send_out(link, attempt, Conn(upstream), early)
        await tunnel(link.conn.sock, upstream, self.counter(link, attempt))


def sandbox_no_proxy(policy: NetworkPolicy) -> str:
    """What the sandbox's ``NO_PROXY`` holds: its own loopback (a server the code starts there
    answers directly), unless an allow entry names a loopback address or ``localhost``. Then
    nothing: such an entry means the host's loopback, which only the proxy reaches (the
    sandbox's is empty), and clients cannot be told one loopback port from another (``NO_PROXY``
    has no ports in most of them). The code's own loopback servers are then reached by what
    bypasses the proxy (a socket, requests' ``proxies={"http": None}``, a ``NO_PROXY`` the
    code sets itself)."""
    if any(names_loopback(rule) for rule in policy.allow_rules):
        return ""
    return SANDBOX_LOOPBACK


def room(sock: socket.socket) -> bool:
    """Whether this process may take ``sock`` (new) for the code: False when its number is
    within ``RESERVE`` of the process's descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return True
    low, high = RESERVE
    return sock.fileno() < soft - min(high, max(low, soft // 8))


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
        door = Door(self, Gate(policy), folder, test_hosts(), choose(policy.upstream_proxy))
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
            if address != "-":
                ipaddress.ip_address(address)  # (a bad one fails the door, loudly)
            found.setdefault(name.lower().rstrip("."), []).append(address)
    return {name: tuple(addresses) for name, addresses in found.items()}


SERVICE = EgressService()
"""This process's proxy."""
