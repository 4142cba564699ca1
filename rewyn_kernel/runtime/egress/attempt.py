"""One connection the code tried through its sandbox's proxy: its record while it lasts, and
the answers that refuse one (an HTTP status the code and a model can read, a SOCKS5 reply)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from rewyn_kernel.runtime._result import NetworkAttempt
from rewyn_kernel.runtime.egress.policy import entry_for

SOCKS_REPLIES = {
    "ok": 0,
    "failure": 1,
    "not allowed": 2,
    "unreachable": 4,
    "refused": 5,
    "command": 7,
    "address type": 8,
}
"""SOCKS5's reply codes (RFC 1928, 6), by what they say."""
_ORDER = itertools.count()


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
