"""Fuzzing what the code's bytes reach on the host, bounded for CI (Hypothesis, a fixed number
of examples): the proxy's HTTP request heads (h11) and SOCKS5, through a real door of the
proxy, and the worker's frame headers. Any bytes get a clean refusal or error of the kind each
documents, never another exception or a hang.

The door's allow-list is one loopback port, so whatever a request names, nothing but loopback
is ever connected to: a name is refused before it is resolved, an address other than
127.0.0.1:1 before it is connected to."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewyn_kernel.errors import ProtocolError
from rewyn_kernel.runtime.egress.policy import NetworkPolicy
from rewyn_kernel.runtime.egress.proxy import SERVICE, Door
from rewyn_kernel.runtime.host.protocol import decode_header
from rewyn_kernel.runtime.worker.codeframes import CHILD_KINDS
from rewyn_kernel.runtime.worker.wire import frame_kind

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANSWER_WAIT = 30.0
"""Seconds an answer and the proxy's close may take before the example counts as a hang
(the proxy ends a connection whose client has finished sending at once)."""


@contextmanager
def door() -> Iterator[Door]:
    found = SERVICE.open_door(NetworkPolicy.model_validate(["127.0.0.1:1"]))
    try:
        yield found
    finally:
        found.close()


def exchange(way_in: Door, data: bytes) -> bytes:
    """Send ``data`` to the door's proxy socket, end the sending, and read until it closes."""
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(ANSWER_WAIT)
        client.connect(str(way_in.folder / "proxy.sock"))
        try:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except OSError:  # (the proxy may answer and close before reading it all)
            pass
        answer = b""
        while True:
            try:
                chunk = client.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(f"the proxy hangs on {data[:200]!r}") from None
            if not chunk:
                break
            answer += chunk
    return answer


def check(way_in: Door, data: bytes) -> None:
    answer = exchange(way_in, data)
    if data[:1] == b"\x05":  # (SOCKS5: its replies start with the version)
        assert answer == b"" or answer[:1] == b"\x05", answer[:200]
    else:  # (an HTTP refusal: nothing is allowed that answers otherwise)
        assert answer == b"" or answer.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")), answer[:200]
    failed = [a.reason for a in way_in.take().attempts if a.reason.startswith("the proxy failed")]
    assert not failed, (data[:200], failed)


TOKENS = st.sampled_from(
    [b"GET", b"CONNECT", b"POST", b"HEAD", b"PUT", b"G\x00T", b"", b"OPTIONS", b"BREW"]
)
TARGETS = st.one_of(
    st.sampled_from(
        [
            b"http://127.0.0.1:1/",
            b"127.0.0.1:1",
            b"[::ffff:127.0.0.1]:1",
            b"http://[::1/",
            b"http://example.org/",
            b"example.org:443",
            b"http://127.0.0.1:99999/",
            b"*",
            b"/",
            b"http://xn--zz.de/",
            b"\x1b]0;x\x07:1",
        ]
    ),
    st.binary(max_size=64),
)
HEADERS = st.lists(
    st.tuples(
        st.sampled_from([b"Host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"X"])
        | st.binary(max_size=16),
        st.sampled_from([b"1", b"-1", b"chunked", b"close", b"99999999999999999999", b""])
        | st.binary(max_size=32),
    ),
    max_size=6,
)


@st.composite
def http_heads(draw: st.DrawFn) -> bytes:
    line = (
        draw(TOKENS)
        + b" "
        + draw(TARGETS)
        + b" "
        + draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9", b""]))
    )
    headers = b"".join(name + b": " + value + b"\r\n" for name, value in draw(HEADERS))
    end = draw(st.sampled_from([b"\r\n", b"\n", b"", b"\r\n\r\n"]))
    return line + b"\r\n" + headers + end + draw(st.binary(max_size=64))


@st.composite
def socks_requests(draw: st.DrawFn) -> bytes:
    methods = draw(st.sampled_from([b"\x00", b"\x02\x00", b"\x02"]) | st.binary(max_size=4))
    count = len(methods) if draw(st.integers(0, 9)) else draw(st.integers(0, 255))
    greeting = b"\x05" + bytes([count]) + methods
    kind = draw(st.sampled_from([1, 3, 4, 0, 2, 255]))
    address = {
        1: draw(st.sampled_from([b"\x7f\x00\x00\x01", b"\x08\x08\x08\x08", b"\x00\x00\x00\x00"])),
        3: bytes([draw(st.integers(0, 255))]) + draw(st.binary(max_size=40)),
        4: draw(st.binary(min_size=16, max_size=16)),
    }.get(kind, draw(st.binary(max_size=8)))
    port = draw(st.sampled_from([b"\x00\x01", b"\x01\xbb", b"\x00"]))
    request = bytes([draw(st.sampled_from([5, 4])), draw(st.sampled_from([1, 2, 3])), 0, kind])
    whole = greeting + request + address + port + draw(st.binary(max_size=16))
    return whole[: draw(st.integers(1, len(whole)))]


@BOUNDED
@given(data=st.one_of(http_heads(), st.binary(max_size=512)))
def test_any_request_head_gets_an_http_refusal_or_a_close(data: bytes) -> None:
    with door() as way_in:
        check(way_in, data)


@BOUNDED
@given(data=st.one_of(socks_requests(), st.binary(max_size=64).map(lambda b: b"\x05" + b)))
def test_any_socks_request_gets_a_socks_reply_or_a_close(data: bytes) -> None:
    with door() as way_in:
        check(way_in, data)


@st.composite
def frame_headers(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*CHILD_KINDS, "done", "ready", "gone", "x", ""]))
    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
    fields = draw(st.dictionaries(st.text(max_size=10), values, max_size=6))
    text = json.dumps({"t": kind, **fields}, separators=(",", ":"))
    cut = draw(st.integers(0, len(text)))
    return (text[:cut] if draw(st.booleans()) else text).encode("utf-8", "surrogatepass")


@BOUNDED
@given(body=st.one_of(frame_headers(), st.binary(max_size=512)))
def test_any_frame_header_is_a_frame_or_a_protocol_error(body: bytes) -> None:
    with suppress(ProtocolError):
        decode_header(body)
    kind = frame_kind(memoryview(body), tuple(CHILD_KINDS))
    assert kind is None or body.startswith(b'{"t":"' + kind.encode() + b'"')
