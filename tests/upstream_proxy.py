"""A corporate network's proxy, for tests: an HTTP CONNECT proxy on 127.0.0.1 that records
every request and, if asked, wants Basic credentials.

It resolves names from its own map only (the host's proxy sends it names that do not resolve
on the host), and connects only to loopback addresses: nothing leaves this machine.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import select
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Seen:
    """One request the upstream got: its request line's target and the credentials given."""

    method: str
    target: str
    credentials: str | None


@dataclass
class Upstream:
    """The running proxy: its port, what it got, and the names it resolves."""

    port: int
    names: dict[str, str]
    credentials: str | None = None
    """``user:password`` it wants (407 without them); None: none."""
    seen: list[Seen] = field(default_factory=list)

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        upstream = self.server.upstream
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        head, _, early = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        given = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "proxy-authorization":
                kind, _, token = value.strip().partition(" ")
                if kind.lower() == "basic":
                    given = base64.b64decode(token).decode()
        upstream.seen.append(Seen(method, target, given))
        if upstream.credentials is not None and given != upstream.credentials:
            self.request.sendall(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n'
            )
            return
        if method != "CONNECT":
            self.request.sendall(b"HTTP/1.1 405 Only CONNECT\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = target.rpartition(":")
        host = upstream.names.get(host.strip("[]"), host.strip("[]"))
        if not ipaddress.ip_address(host).is_loopback:  # (never off this machine)
            self.request.sendall(b"HTTP/1.1 403 Not loopback\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            origin = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self.request.sendall(b"HTTP/1.1 502 Unreachable\r\nContent-Length: 0\r\n\r\n")
            return
        with origin:
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if early:
                origin.sendall(early)
            _join(self.request, origin)


def _join(one: socket.socket, two: socket.socket) -> None:
    ends = {one: two, two: one}
    while ends:
        ready, _, _ = select.select(list(ends), [], [], 30)
        if not ready:
            return
        for sock in ready:
            data = b""
            with contextlib.suppress(OSError):
                data = sock.recv(65536)
            if not data:
                with contextlib.suppress(OSError):
                    ends[sock].shutdown(socket.SHUT_WR)
                del ends[sock]
                continue
            ends[sock].sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    upstream: Upstream


@contextlib.contextmanager
def upstream_proxy(names: dict[str, str], credentials: str | None = None) -> Iterator[Upstream]:
    """A recording CONNECT proxy on 127.0.0.1 for the ``with``; ``names``: what it resolves."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.upstream = Upstream(int(server.server_address[1]), names, credentials)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.upstream
    finally:
        server.shutdown()
        server.server_close()
