"""NetworkPolicy: the hosts a sandbox may reach through its proxy, and the addresses it may not.

An entry names a host and, optionally, its ports:

- ``pypi.org``: that name exactly, on ports 80 and 443 (the web's; a deny entry without a
  port covers every port);
- ``pypi.org:8080``, ``pypi.org:*``: one port, or any;
- ``*.githubusercontent.com``: every name *under* it (not the name itself); a bare ``*`` is
  refused, as is a ``*`` anywhere but a leading ``*.``;
- ``203.0.113.7``, ``[2001:db8::1]:443``, ``10.0.0.0/8``, ``[fd00::/8]:443``: addresses.

A connection is allowed when an ``allow`` entry matches its host and port and no ``deny``
entry does. The proxy resolves names itself and connects only to the addresses it checked:
those that are not public (loopback, private, link-local and the cloud metadata address,
carrier-grade NAT, unique-local IPv6, multicast, unspecified...) only where an address entry
of ``allow`` covers them. So a name that resolves to the host's own services (DNS rebinding,
a redirect to ``localhost``) is refused, unless an entry names those addresses; the name
``localhost`` itself, in an entry, names the loopback addresses it resolves to.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import idna
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

WEB_PORTS = frozenset({80, 443})
"""The ports an entry without one allows."""
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
"""The loopback networks, IPv4's and IPv6's."""
LOOPBACK_NAME = "localhost"
"""The name an entry gives this machine's loopback by."""


@dataclass(frozen=True)
class HostRule:
    """One parsed entry of an allow or deny list."""

    text: str
    name: str = ""
    """The name (``pypi.org``), or the suffix under which names match (``*.x.org``: ``x.org``)."""
    wildcard: bool = False
    network: IPNetwork | None = None
    ports: frozenset[int] | None = WEB_PORTS
    """None: any port."""

    def matches_port(self, port: int) -> bool:
        return self.ports is None or port in self.ports

    def matches_name(self, name: str) -> bool:
        if self.network is not None:
            return False
        if self.wildcard:
            return name.endswith("." + self.name)
        return name == self.name

    def covers(self, address: IPAddress) -> bool:
        return (
            self.network is not None
            and address.version == self.network.version
            and (address in self.network)
        )

    def matches(self, host: str | IPAddress, port: int) -> bool:
        if not self.matches_port(port):
            return False
        if isinstance(host, str):
            return self.matches_name(host)
        return self.covers(host)


def parse_rule(text: str, *, deny: bool = False) -> HostRule:
    """Parse one entry (see the module's docstring); ValueError says what is wrong with it.
    ``deny``: a deny entry, which without a port covers every port."""
    entry = text.strip()
    if not entry:
        raise ValueError("an empty host entry")
    if any(c.isspace() for c in entry):
        raise ValueError(f"{text!r}: a host entry has no spaces")
    host, ports = _split_port(entry)
    if deny and ports == WEB_PORTS and not _has_port(entry):
        ports = None
    if host in ("*", "*.", ""):
        raise ValueError(
            f"{text!r}: a bare '*' would allow every host (that is network='allow'); name the "
            "hosts, or '*.example.org' for the names under one"
        )
    network = _as_network(host)
    if network is not None:
        return HostRule(entry, network=network, ports=ports)
    wildcard = host.startswith("*.")
    name = normal_name(host[2:] if wildcard else host)
    if "*" in name:
        raise ValueError(f"{text!r}: '*' may only start an entry, as in '*.example.org'")
    if not name:
        raise ValueError(f"{text!r} names no host")
    return HostRule(entry, name=name, wildcard=wildcard, ports=ports)


def _has_port(entry: str) -> bool:
    if entry.startswith("["):
        return "]:" in entry
    return entry.count(":") == 1


def _split_port(entry: str) -> tuple[str, frozenset[int] | None]:
    """(host, ports) of ``entry``: ``[v6]:port``, ``name:port``, a bare IPv6 address."""
    if entry.startswith("["):
        close = entry.find("]")
        if close < 0:
            raise ValueError(f"{entry!r}: an IPv6 entry is written '[address]:port'")
        host, rest = entry[1:close], entry[close + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{entry!r}: only ':port' may follow ']'")
        return host, _ports(rest[1:], entry) if rest else WEB_PORTS
    if entry.count(":") > 1:  # a bare IPv6 address or network: no port
        return entry, WEB_PORTS
    host, sep, port = entry.partition(":")
    return host, _ports(port, entry) if sep else WEB_PORTS


def _ports(text: str, entry: str) -> frozenset[int] | None:
    if text == "*":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535, or '*'")
    return frozenset({int(text)})


def _as_network(host: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(host, strict=False) if "/" in host else _single(host)
    except ValueError:
        if "/" in host:
            raise ValueError(f"{host!r} is not an address range such as '10.0.0.0/8'") from None
        return None


def _single(host: str) -> IPNetwork:
    address = unmapped(ipaddress.ip_address(host))
    return ipaddress.ip_network(address)


def normal_name(name: str) -> str:
    """``name`` as the rules compare it: lower case, no trailing dot, each label an A-label of
    IDNA 2008 with UTS 46's mapping (non-transitional: 'faß.de' is 'xn--fa-hia.de', as
    browsers and curl send it, never 'fass.de', another domain). An ASCII label is kept as it
    is (underscores included); an 'xn--' one must decode. ValueError for what is not a host
    name, naming the label at fault."""
    name = name.rstrip(".")
    if not name.isascii():
        try:
            name = idna.uts46_remap(name, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise ValueError(
                f"{name!r} is not a host name: not a valid IDNA label ({exc})"
            ) from None
    name = name.lower().rstrip(".")
    labels = [_a_label(label, name) for label in name.split(".")]
    ascii_name = ".".join(labels)
    if len(ascii_name) > 253 or not all(_LABEL.match(label) for label in labels if label != "*"):
        raise ValueError(f"{name!r} is not a host name")
    return ascii_name


def _a_label(label: str, name: str) -> str:
    """``label`` (of ``name``) as an ASCII label of a host name; ValueError if it is none."""
    try:
        if not label.isascii():
            return idna.alabel(label).decode("ascii")
        if label.startswith("xn--"):
            idna.ulabel(label)  # (it raises for one that does not decode, or not to IDNA 2008)
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(
            f"{name!r} is not a host name: {label!r} is not a valid IDNA label ({exc})"
        ) from None
    return label


def unmapped(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), else ``address``: a check
    of ``::ffff:127.0.0.1`` is a check of ``127.0.0.1``."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address in _6TO4 and address.sixtofour is not None:
            return address.sixtofour
    return address


def not_public(address: IPAddress) -> str:
    """Why ``address`` is not a public one ('' when it is): loopback, private, link-local..."""
    address = unmapped(address)
    for test, what in (
        ("is_loopback", "a loopback address (this machine)"),
        ("is_link_local", "a link-local address (cloud metadata lives there)"),
        ("is_unspecified", "the unspecified address (this machine)"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    ):
        if getattr(address, test):
            return what
    if not address.is_global:  # (carrier-grade NAT, benchmarking, documentation ranges...)
        return "not a public address"
    return ""


def parse_host(host: str) -> str | IPAddress:
    """A request's host as the rules compare it: an address (unmapped), or a normal name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return unmapped(ipaddress.ip_address(text))
    except ValueError:
        return normal_name(text)


Rules = tuple[HostRule, ...]


# -- the upstream proxy setting (egress/upstream.py connects through it) ------------------------

UPSTREAM_CHOICES = ("env", "none")
"""The words ``upstream_proxy`` takes besides a URL."""


def check_upstream_setting(value: str) -> str:
    """``value`` if it is ``env``, ``none`` or an ``http://host:port`` URL; ValueError (without
    the URL's credentials) if not."""
    value = value.strip()
    if value in UPSTREAM_CHOICES:
        return value
    try:
        parse_proxy_url(value)
    except ValueError as exc:
        raise ValueError(f"upstream_proxy: {exc}") from None
    return value


@dataclass(frozen=True)
class Upstream:
    """One upstream proxy: where it listens, and the header that authenticates to it."""

    host: str
    port: int
    shown: str
    """Its URL without the credentials (what any note or error says)."""
    authorization: bytes = field(default=b"", repr=False)
    """``Basic ...`` from the URL's user and password; b'': none."""


def parse_proxy_url(url: str) -> Upstream:
    """The upstream ``url`` names (``http://[user:password@]host[:port]``, the port 80 by
    default; a bare ``host:port`` is read as http://); ValueError without the credentials."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError(f"{redact(url)!r} is not a proxy URL such as http://proxy:3128") from None
    if parts.scheme.lower() != "http" or not host:
        raise ValueError(
            f"{redact(url)!r}: only an http:// proxy is supported (TLS to the proxy, and SOCKS, "
            "are not)"
        )
    authorization = b""
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode())
        authorization = b"Basic " + token
    shown = f"http://{authority_of(host, port or 80)}"
    return Upstream(host, port or 80, shown, authorization)


def redact(url: str) -> str:
    """``url`` without the user and password it may carry."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return (scheme + sep if sep else "") + authority + slash + path


def authority_of(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


UpstreamProxy = Annotated[
    str,
    AfterValidator(check_upstream_setting),
    PlainSerializer(redact, when_used="json"),
]
"""An upstream proxy setting (``env``, ``none`` or a URL: upstream.py checks it), whose JSON
form never holds the URL's credentials (a dump goes into events, logs and kernelspecs)."""


class NetworkPolicy(BaseModel):
    """``network=[...]``: the hosts the code may reach, through a proxy on the host."""

    # (an error does not repeat what it was given: upstream_proxy may hold a password)
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    allow: tuple[str, ...] = Field(
        min_length=1,
        description="Hosts the code may reach: 'name', 'name:port', '*.domain', addresses "
        "and ranges ('10.0.0.0/8', '[fd00::/8]:443'); without a port, 80 and 443.",
    )
    deny: tuple[str, ...] = Field(
        default=(), description="Hosts refused even where an allow entry matches them."
    )
    max_connections: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=64, description="Connections open at once; past it new ones are refused."
    )
    max_bytes: Annotated[int, Field(ge=1024)] | None = Field(
        default=4 * 1024**3,
        description="Bytes each way together per execution; past it connections are closed "
        "and new ones refused until the next execution. None: no limit.",
    )
    idle_timeout: Annotated[float, Field(gt=0, le=86400)] = Field(
        default=120.0, description="Seconds a connection may pass nothing before it is closed."
    )
    upstream_proxy: UpstreamProxy = Field(
        default="env",
        max_length=2048,
        repr=False,
        description="The proxy the host's proxy connects through (HTTP CONNECT, for TLS and "
        "plain HTTP alike): 'env', the host's HTTPS_PROXY/HTTP_PROXY and NO_PROXY where set; "
        "'none', directly; or a URL http://[user:password@]host:port (Basic auth; the "
        "credentials are never shown). The allow-list is still decided here.",
    )

    @field_validator("allow", "deny", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("allow", "deny")
    @classmethod
    def _check(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            parse_rule(entry)
        return tuple(entry.strip() for entry in value)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            return policy_fields(data.split(","))
        if isinstance(data, (list, tuple)):
            return policy_fields(data)
        return data

    @property
    def allow_rules(self) -> Rules:
        return tuple(parse_rule(entry) for entry in self.allow)

    @property
    def deny_rules(self) -> Rules:
        return tuple(parse_rule(entry, deny=True) for entry in self.deny)

    def __str__(self) -> str:
        """The comma form ``network`` takes on a command line: ``a,b,!c`` (``!``: deny)."""
        return ",".join([*self.allow, *(f"!{entry}" for entry in self.deny)])


def policy_fields(entries: Any) -> dict[str, Any]:
    """The fields of a list of entries, those starting with ``!`` denied: the comma form
    ``'pypi.org,*.pythonhosted.org,!bad.pypi.org'`` split, or a list as given."""
    parts = [str(part).strip() for part in entries if str(part).strip()]
    return {
        "allow": [part for part in parts if not part.startswith("!")],
        "deny": [part[1:].strip() for part in parts if part.startswith("!")],
    }


Verdict = Literal["allowed", "refused"]


@dataclass(frozen=True)
class Decision:
    """Whether a host and port may be reached: ``reason`` says why not, in words."""

    verdict: Verdict
    reason: str = ""
    explicit: Rules = ()
    """The address entries of ``allow`` that match the port (they let non-public addresses in)."""


class Gate:
    """A policy's rules, parsed once; decides names first, then each resolved address."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self.policy = policy
        self.allow = policy.allow_rules
        self.deny = policy.deny_rules

    def decide(self, host: str, port: int) -> Decision:
        """Whether ``host`` (as a client wrote it) on ``port`` may be reached at all."""
        try:
            target = parse_host(host)
        except ValueError as exc:
            return Decision("refused", str(exc))
        if not 0 < port < 65536:
            return Decision("refused", f"port {port} is not a port")
        for rule in self.deny:
            if rule.matches(target, port):
                return Decision("refused", f"denied by the entry {rule.text!r}")
        explicit = tuple(rule for rule in self.allow if rule.network is not None)
        explicit = tuple(rule for rule in explicit if rule.matches_port(port))
        if target == LOOPBACK_NAME and any(rule.matches(target, port) for rule in self.allow):
            # (an entry 'localhost:PORT' names this machine's loopback: what the name resolves
            # to is let in, as with an entry naming the address)
            explicit += tuple(HostRule(LOOPBACK_NAME, network=net, ports=None) for net in LOOPBACK)
        if not any(rule.matches(target, port) for rule in self.allow):
            other = [rule for rule in self.allow if _any_port(rule, target)]
            if other:
                return Decision(
                    "refused",
                    f"port {port} is not allowed for this host (the entry {other[0].text!r} "
                    f"allows {_port_text(other[0])})",
                )
            return Decision("refused", "not in the allow-list")
        return Decision("allowed", explicit=explicit)

    def check_address(self, decision: Decision, address: IPAddress, port: int) -> str:
        """Why ``address`` (one the host resolved to) may not be connected to, or ''."""
        address = unmapped(address)
        for rule in self.deny:
            if rule.covers(address) and rule.matches_port(port):
                return f"{address} is denied by the entry {rule.text!r}"
        why = not_public(address)
        if why and not any(rule.covers(address) for rule in decision.explicit):
            return (
                f"{address} is {why}; only an allow entry naming it (such as "
                f"'{_entry_for(address, port)}') lets the sandbox reach it"
            )
        return ""


def names_loopback(rule: HostRule) -> bool:
    """Whether ``rule`` names a loopback address (of either family, or a network holding one)
    or ``localhost``: a host the sandbox's own loopback would answer for, were it asked."""
    if rule.network is None:
        return not rule.wildcard and rule.name == LOOPBACK_NAME
    return any(
        rule.network.overlaps(net) for net in LOOPBACK if net.version == rule.network.version
    )


def _any_port(rule: HostRule, target: str | IPAddress) -> bool:
    if isinstance(target, str):
        return rule.matches_name(target)
    return rule.covers(target)


def _port_text(rule: HostRule) -> str:
    if rule.ports is None:
        return "any port"
    ports = sorted(rule.ports)
    return ("port " if len(ports) == 1 else "ports ") + ", ".join(map(str, ports))


def _entry_for(address: IPAddress, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def entry_for(host: str, port: int) -> str:
    """The allow entry that names ``host`` on ``port`` (for a note that says how to allow it)."""
    try:
        target = parse_host(host)
    except ValueError:
        return f"{host}:{port}"
    if isinstance(target, str):
        return target if port in WEB_PORTS else f"{target}:{port}"
    return _entry_for(target, port)
