"""HTTP through the proxy: ``CONNECT host:port`` (a tunnel, for TLS) and plain requests with an
absolute URL, each parsed by h11 and decided by the door's policy before anything is sent on.

A plain request goes to its host on a connection of its own, rewritten to origin form with
``Connection: close`` and without one hop's headers; the answer's head comes back parsed, its
body as bytes (spliced) where its length is known or the host's close ends it, else re-framed
by h11 chunk by chunk.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import TYPE_CHECKING, Any

import h11

from rewyn_kernel.runtime.egress.attempt import Attempt, Refused, refusal
from rewyn_kernel.runtime.egress.pump import CHUNK, Conn, Count, pump

if TYPE_CHECKING:
    from rewyn_kernel.runtime.egress.proxy import Door, Link

MAX_HEAD = 16 * 1024
"""The longest request head (request line and headers) a client may send."""
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


async def serve_http(door: Door, link: Link, first: bytes, limit: str) -> None:
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
            await _connect(door, link, conn, request, limit)
            return
        keep = await _forward(door, link, conn, request, limit)
        if not keep or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return
        conn.start_next_cycle()


async def _connect(
    door: Door, link: Link, conn: h11.Connection, request: h11.Request, limit: str
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
        link.upstream = await door.reach(attempt)
    except Refused as exc:
        attempt.reason = exc.reason
        await link.conn.send(refusal(exc.status, host, port, exc.reason))
        return
    established = h11.Response(status_code=200, headers=[], reason=b"Connection established")
    await link.conn.send(conn.send(established) or b"")
    early, _ = conn.trailing_data
    await door.join(link, attempt, bytes(early) + link.conn.rest())


async def _forward(
    door: Door, link: Link, conn: h11.Connection, request: h11.Request, limit: str
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
        upstream = link.upstream = await door.reach(attempt)
    except Refused as exc:
        attempt.reason = exc.reason
        await link.conn.send(refusal(exc.status, host, port, exc.reason))
        return False
    try:
        return await _exchange(door, link, conn, request, url=url, origin_conn=Conn(upstream))
    finally:
        link.upstream = None
        upstream.close()


async def _exchange(
    door: Door,
    link: Link,
    conn: h11.Connection,
    request: h11.Request,
    *,
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
    # (a chunked body stays chunked: h11 frames what it sends by the headers it is given)
    headers += [(k, v) for k, v in request.headers if k.lower() == b"transfer-encoding"]
    out = origin.send(
        h11.Request(method=request.method, target=path.encode("ascii"), headers=headers)
    )
    await door.send_out(link, attempt, origin_conn, out)
    while True:  # the request's body
        event = await _next(conn, link.conn, h11.Data, h11.EndOfMessage)
        if event is None:
            return False
        await door.send_out(link, attempt, origin_conn, origin.send(event))
        if isinstance(event, h11.EndOfMessage):
            break
    try:
        response = await _next(origin, origin_conn, h11.Response, count=door.counter(link, attempt))
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
        await _pass_body(door, link, attempt, origin=origin, origin_conn=origin_conn, length=length)
        return False
    answer = h11.Response(status_code=response.status_code, headers=back, reason=response.reason)
    await link.conn.send(conn.send(answer) or b"")
    while True:  # (a chunked answer: re-framed chunk by chunk)
        event = await _next(
            origin, origin_conn, h11.Data, h11.EndOfMessage, count=door.counter(link, attempt)
        )
        if event is None:  # (cut short: the client sees its connection end)
            return False
        data = conn.send(event) or b""
        if isinstance(event, h11.EndOfMessage):
            door.note(attempt)
            link.attempt = None
        await link.conn.send(data)
        if isinstance(event, h11.EndOfMessage):
            return True


async def _pass_body(
    door: Door,
    link: Link,
    attempt: Attempt,
    *,
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
    count = door.counter(link, attempt)
    if early:
        if not count(len(early), False):
            return
        await link.conn.send(early)
    if event is not h11.NEED_DATA:  # (the whole body came with the head)
        return
    left = int(length) - len(early) if length is not None and length.isdigit() else None
    await pump(origin_conn.sock, link.conn.sock, False, count, left)


async def _next(
    conn: h11.Connection,
    peer: Conn,
    *kinds: type[Any],
    count: Count | None = None,
) -> Any:
    """The next event of ``conn`` that is one of ``kinds`` (None: the peer ended), reading
    ``peer`` as needed: a client's request in small reads (h11 bounds a head's size as it
    grows; the watch, its time); ``count``: what is read is the host's answer, counted."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await peer.some(4096 if count is None else CHUNK)
            if count is not None and not count(len(data), False):
                return None
            conn.receive_data(data)
            continue
        if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, kinds):
            return event


def _absolute_url(target: str) -> urllib.parse.SplitResult:
    """A plain request's absolute URL, its host and port readable; Refused if it is not one.
    An IPv6 address without its brackets (``http://::1:8080/``, as httpx writes the target
    for a proxy) is read as the address and the port after its last colon."""
    try:
        url = urllib.parse.urlsplit(target)
        url = _bracketed(url)
        url.port  # noqa: B018 (it raises for a port that is not one)
    except ValueError as exc:
        raise Refused(f"{target[:200]!r} is not a URL a proxy can carry ({exc})", 400) from None
    return url


def _bracketed(url: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """``url`` with a bare IPv6 address in its authority put in brackets (else as it is)."""
    netloc = url.netloc
    if "[" in netloc or "@" in netloc or netloc.count(":") < 2:
        return url
    for host, port in ((netloc, ""), netloc.rpartition(":")[::2]):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            continue
        if port and not port.isdigit():
            continue
        return url._replace(netloc=f"[{host}]" + (f":{port}" if port else ""))
    return url


def split_authority(target: str) -> tuple[str, int]:
    """(host, port) of a CONNECT target ``host:port`` / ``[v6]:port``; Refused if not one."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise Refused(f"CONNECT {target[:200]!r} is not host:port", 400)
    return host, int(port)
