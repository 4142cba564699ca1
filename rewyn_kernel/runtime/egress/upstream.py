"""The upstream proxy: where the host reaches the internet only through a proxy of its own.

``NetworkPolicy.upstream_proxy`` says which: ``"env"`` (the default) the host's environment
(``HTTPS_PROXY``/``HTTP_PROXY`` and ``NO_PROXY``, either case, as curl and urllib read them),
``"none"`` none, or a URL ``http://[user:password@]host:port``. The egress proxy then opens
each allowed connection as an HTTP ``CONNECT`` to the upstream, for TLS and plain HTTP alike,
with ``Proxy-Authorization: Basic`` from the URL's user and password where it has them. What
the code sees does not change, and the policy is decided as before, on the target.

Which address the upstream is asked for (the private-address protection, policy.py):

- a name that resolves here is checked as it always is, address by address, and the upstream
  is asked for the checked address (``CONNECT 151.101.0.223:443``; the client's TLS still
  names the host): what is connected to is what was checked, even if the name would resolve
  otherwise there (DNS rebinding);
- a name that does not resolve here (the host may have no DNS of the internet, only its
  proxy) is sent to the upstream as a name, which resolves it. That is the one case the
  addresses are not checked here; it is safe for this host because the upstream is another
  machine: this host's loopback and link-local (metadata) addresses are not what it reaches,
  and what it lets through into the private network is its operators' rule, which binds
  every client of theirs. An upstream on this host's own loopback (a local forwarder like
  cntlm or px) passes the name on to its parent, which is again another machine.
- an address of this host's loopback, link-local or unspecified ranges (only an entry naming
  it lets one in) is connected to directly, never through the upstream (whose loopback is its
  own); so is a host ``NO_PROXY`` names (a name, a ``.domain`` suffix, an address or range,
  ``*``: all).

The credentials are never shown: the URL is written without them in every note, error and
record (``shown``), and only the ``Proxy-Authorization`` header carries them, to the upstream.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from rewyn_kernel.runtime.egress.attempt import Refused
from rewyn_kernel.runtime.egress.policy import (
    IPAddress,
    Upstream,
    authority_of,
    check_upstream_setting,
    normal_name,
    parse_proxy_url,
    redact,
    unmapped,
)
from rewyn_kernel.runtime.egress.pump import wait_ready

MAX_ANSWER = 16 * 1024
"""The longest answer head to a CONNECT read from the upstream."""


@dataclass(frozen=True)
class Routes:
    """Which upstream, if any, a door's connections go through (``choose``)."""

    http: Upstream | None = None
    """For plain HTTP requests."""
    https: Upstream | None = None
    """For CONNECT and SOCKS5 (and plain HTTP where no other is named)."""
    bypass: tuple[str, ...] = ()
    """``NO_PROXY``'s entries: hosts reached directly."""
    source: str = ""
    """Where the upstream came from, in words."""
    problem: str = ""
    """Why a proxy of the host's environment is not used ('' if none is left out)."""

    def upstream(self, protocol: str) -> Upstream | None:
        """The upstream for a connection of ``protocol`` ('http', 'connect', 'socks5')."""
        if protocol == "http":
            return self.http or self.https
        return self.https or self.http

    @property
    def any(self) -> bool:
        return self.http is not None or self.https is not None

    def describe(self) -> str | None:
        """In words, without credentials: what the egress proxy connects through; None: no
        upstream (it connects directly)."""
        if not self.any:
            return None
        shown = sorted({u.shown for u in (self.https, self.http) if u is not None})
        text = f"through the upstream proxy {' and '.join(shown)} ({self.source})"
        if self.bypass:
            text += "; directly to what NO_PROXY names: " + ",".join(self.bypass)[:300]
        return text + "; this host's loopback and link-local addresses directly"

    def direct(self, host: str | IPAddress) -> bool:
        """Whether ``host`` (a name, or a resolved address) is reached directly: this host's
        loopback, link-local and unspecified addresses always, and what NO_PROXY names."""
        if not isinstance(host, str):
            address = unmapped(host)
            if address.is_loopback or address.is_link_local or address.is_unspecified:
                return True
        return any(_bypassed(entry, host) for entry in self.bypass)


def _bypassed(entry: str, host: str | IPAddress) -> bool:
    """Whether one ``NO_PROXY`` entry covers ``host`` (curl's and requests' reading: ``*``,
    a name and the names under it, ``.domain``, an address, a range; a port is ignored)."""
    if entry == "*":
        return True
    text = entry
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    if not isinstance(host, str):
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return False
        return host.version == network.version and host in network
    try:
        name = normal_name(text.lstrip("*").lstrip("."))
    except ValueError:
        return False
    return host == name or host.endswith("." + name)


def choose(setting: str, environ: Mapping[str, str] | None = None) -> Routes:
    """The routes ``setting`` (``env``, ``none`` or a URL) gives; ``environ``: the host's
    environment (``os.environ`` if None). A proxy of the environment that is not an
    ``http://`` one is left out, and ``problem`` says so (without its credentials)."""
    if setting == "none":
        return Routes()
    if setting != "env":
        named = parse_proxy_url(setting)
        return Routes(named, named, (), "the setting upstream_proxy")
    env = dict(os.environ if environ is None else environ)
    # (urllib's reading: the lower-case name wins, as curl's does; REQUEST_METHOD set means a
    # CGI script, where HTTP_PROXY is a request's header: then not read)
    proxies = _proxies(env)
    http, https = proxies.get("http"), proxies.get("https")
    if not http and not https:
        return Routes()
    names = []
    if https:
        names.append("HTTPS_PROXY")
    if http:
        names.append("HTTP_PROXY")
    bypass = tuple(part.strip() for part in proxies.get("no", "").split(",") if part.strip())
    found: dict[str, Upstream | None] = {"http": None, "https": None}
    problems = []
    for kind, url in (("https", https), ("http", http)):
        if url:
            try:
                found[kind] = parse_proxy_url(url)
            except ValueError as exc:
                problems.append(f"the host's {kind.upper()}_PROXY is not used: {exc}")
    names = [f"{kind.upper()}_PROXY" for kind in ("https", "http") if found[kind] is not None]
    return Routes(
        found["http"],
        found["https"],
        bypass,
        "the host's " + " and ".join(names),
        "; ".join(problems),
    )


def _proxies(env: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in env.items():
        lower = name.lower()
        if value and lower.endswith("_proxy") and name == lower:
            found[lower[:-6]] = value
    for name, value in env.items():
        lower = name.lower()
        if value and lower.endswith("_proxy") and name != lower:
            found.setdefault(lower[:-6], value)
    if "REQUEST_METHOD" in env:
        found.pop("http", None)
    return {key: found[key] for key in ("http", "https", "no") if key in found}


async def open_tunnel(upstream: Upstream, host: str, port: int, timeout: float) -> socket.socket:
    """A connection to ``host`` (a name or an address) on ``port`` through ``upstream``: its
    ``CONNECT`` answered 2xx. Refused (502) says why not, naming the upstream without its
    credentials; the socket is non-blocking, the tunnel's first byte unread."""
    loop = asyncio.get_running_loop()
    target = authority_of(host, port)
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(upstream.host, upstream.port, type=socket.SOCK_STREAM), timeout
        )
    except (OSError, asyncio.TimeoutError) as exc:
        raise Refused(
            f"the upstream proxy {upstream.shown} does not resolve ({exc})", 502, "unreachable"
        ) from None
    last = ""
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
            await _ask(sock, upstream, target, timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            sock.close()
            last = (exc.strerror if isinstance(exc, OSError) else None) or "timed out"
            continue
        except Refused:
            sock.close()
            raise
        return sock
    raise Refused(
        f"the upstream proxy {upstream.shown} could not be reached ({last})", 502, "unreachable"
    )


async def _ask(sock: socket.socket, upstream: Upstream, target: str, timeout: float) -> None:
    """Send ``CONNECT target`` and read the answer's head; Refused unless it is 2xx."""
    loop = asyncio.get_running_loop()
    lines = [f"CONNECT {target} HTTP/1.1".encode(), f"Host: {target}".encode()]
    if upstream.authorization:
        lines.append(b"Proxy-Authorization: " + upstream.authorization)
    await loop.sock_sendall(sock, b"\r\n".join(lines) + b"\r\n\r\n")
    head = await asyncio.wait_for(_head(sock), timeout)
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise Refused(f"the upstream proxy {upstream.shown} did not answer HTTP", 502, "failure")
    if not 200 <= int(parts[1]) < 300:
        said = " ".join(parts[1:])[:200]
        raise Refused(
            f"the upstream proxy {upstream.shown} refused CONNECT {target}: {said}",
            502,
            "failure",
        )


async def _head(sock: socket.socket) -> bytes:
    """The answer's head, read to its blank line and no further (what follows is the
    tunnel's): peeked first, then taken to its end."""
    while True:
        await wait_ready(sock, write=False)
        peeked = sock.recv(MAX_ANSWER, socket.MSG_PEEK)
        if not peeked:
            raise ConnectionResetError("the upstream proxy closed the connection")
        end = peeked.find(b"\r\n\r\n")
        if end >= 0:
            return sock.recv(end + 4)
        if len(peeked) >= MAX_ANSWER:
            raise ConnectionResetError("the upstream proxy's answer is too long")
        await asyncio.sleep(0.005)  # (more of the head is on its way: peek again)


__all__ = [
    "Routes",
    "Upstream",
    "check_upstream_setting",
    "choose",
    "open_tunnel",
    "parse_proxy_url",
    "redact",
]
