"""SOCKS5 through the proxy (RFC 1928): no authentication, CONNECT only, an IPv4 or IPv6
address or a name, each decided by the door's policy; a refusal is the reply code that says
why (the record holds the reason in words)."""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING

from rewyn_kernel.runtime.egress.attempt import SOCKS_REPLIES, Attempt, Refused

if TYPE_CHECKING:
    from rewyn_kernel.runtime.egress.proxy import Door, Link


async def serve_socks(door: Door, link: Link, limit: str) -> None:
    read = link.conn.exactly
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
        link.upstream = await door.reach(attempt)
    except Refused as exc:
        attempt.reason = exc.reason
        await link.conn.send(bytes([5, SOCKS_REPLIES[exc.socks], 0, 1, 0, 0, 0, 0, 0, 0]))
        return
    await link.conn.send(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
    await door.join(link, attempt, link.conn.rest())
