"""The sandbox's end of its proxy: a loopback port that leads to the host's proxy.

Where the sandbox's ``network`` is an allow-list, its network namespace holds nothing but a
loopback; the host's proxy (host: runtime/egress/proxy.py) is reached through Unix sockets the
provider shows here. Programs expect a proxy at a host and port, so the supervisor listens on
``127.0.0.1``, and the proxy variables of the code's environment point at that port.

Each connection accepted there is handed to the host whole: its descriptor goes over the
folder's ``hand.sock`` (SCM_RIGHTS), and the host's proxy reads and writes it itself, so the
bytes take no detour through this process. Where descriptors cannot cross (gVisor's sockets
are its own), the supervisor relays the bytes to ``proxy.sock`` instead, in its own selector
loop (no thread: the code's processes are forked from it). This end decides nothing: the
host's proxy checks every request.
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import socket
import struct
from array import array

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Callable, Dict, Optional, Set

    from .config import Egress

CHUNK = 256 * 1024
BACKLOG = 128
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINPROGRESS)


def loopback_up() -> str:
    """Bring up the loopback of this (new) network namespace, as bubblewrap and container
    engines do and ``unshare`` does not; '' when it is up, else why not."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH14s", b"lo", 0, b"")
            (flags,) = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1:]
            if not flags & IFF_UP:
                fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


SANDBOX_LOOPBACK = "localhost,127.0.0.1,::1"
"""``NO_PROXY`` where the host's proxy says nothing (the sandbox's own loopback, directly)."""


def proxy_environment(port: int, no_proxy: str = SANDBOX_LOOPBACK) -> Dict[str, str]:
    """The variables that send the code's clients to the relay (both cases: curl reads only
    the lower-case ``http_proxy``). ``NO_PROXY``: what the host's proxy wrote in its folder
    (egress/proxy.py, ``sandbox_no_proxy``): the sandbox's own loopback, reached directly,
    unless an allow entry names a loopback address, which is the host's and reached through
    the proxy (an empty ``NO_PROXY`` is removed). ``ALL_PROXY`` names the port as an HTTP proxy
    too: a ``socks5h://`` there makes httpx, without its SOCKS extra, fail every request; a
    client that asks for SOCKS5 gets it on the same port."""
    http = "http://127.0.0.1:%d" % port
    names = {"HTTP_PROXY": http, "HTTPS_PROXY": http, "ALL_PROXY": http, "NO_PROXY": no_proxy}
    found = dict(names)
    found.update((name.lower(), value) for name, value in names.items())
    return found


_SPLICE = getattr(os, "splice", None)  # (Python 3.10 on Linux; else bytes are copied)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_SET_PIPE_SIZE = getattr(fcntl, "F_SETPIPE_SZ", None)


class _Side:
    """One socket of a relayed pair and what waits to be written to it: a pipe where the
    bytes stay in the kernel (``splice``), else a buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.pending = b""
        self.queued = 0  # bytes in the pipe
        self.pipe = os.pipe() if _SPLICE is not None else None
        self.room = 64 * 1024  # (what the pipe holds: a pipe's default, unless it grows)
        if self.pipe is not None and _SET_PIPE_SIZE is not None:
            try:
                self.room = min(CHUNK, fcntl.fcntl(self.pipe[1], _SET_PIPE_SIZE, CHUNK))
            except OSError:
                pass
        self.ended = False  # its peer will send nothing more (EOF read on the other side)
        self.eof_read = False
        self.mask = 0

    @property
    def waiting(self) -> bool:
        """Bytes wait to be written to this side."""
        return bool(self.pending) or self.queued > 0

    def take_from(self, source: "_Side") -> bool:
        """Read what ``source`` has for this side; False at its end. (OSError: it failed.)"""
        if self.pipe is not None and _SPLICE is not None:
            try:
                moved = int(_SPLICE(source.fd, self.pipe[1], self.room, flags=_FLAGS))
            except OSError as exc:
                if exc.errno in _AGAIN:
                    return True
                raise
            self.queued += moved
            return moved > 0
        try:
            data = source.sock.recv(CHUNK)
        except OSError as exc:
            if exc.errno in _AGAIN:
                return True
            raise
        self.pending = data
        return bool(data)

    def write_out(self) -> None:
        """Write what waits, as much as the socket takes now."""
        try:
            if self.queued and _SPLICE is not None and self.pipe is not None:
                self.queued -= _SPLICE(self.pipe[0], self.fd, self.queued, flags=_FLAGS)
            elif self.pending:
                self.pending = self.pending[self.sock.send(self.pending) :]
        except OSError as exc:
            if exc.errno not in _AGAIN:
                raise

    def close(self) -> None:
        self.sock.close()
        for fd in self.pipe or ():
            os.close(fd)


class Relay:
    """Accepts on a loopback port and hands each connection to the host's proxy, or joins it
    to the proxy's socket where it cannot be handed over."""

    def __init__(self, selector: selectors.BaseSelector, folder: str) -> None:
        self.selector = selector
        # The proxy's folder, held open: the socket is reached through it once the set-up
        # has hidden or covered the path (the subprocess provider hides the host's folders).
        self.folder = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.socket_path = "/proc/self/fd/%d/proxy.sock" % self.folder
        self.hand_path = "/proc/self/fd/%d/hand.sock" % self.folder
        self.hand = self._hand(self.hand_path)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(BACKLOG)
        self.listener.setblocking(False)
        self.port = int(self.listener.getsockname()[1])
        self.peers: Dict[int, _Side] = {}
        self.sides: Dict[int, _Side] = {}
        self.expected: Optional[Set[int]] = None
        """(On the host's own loopback: ``broker.py``.) The local ports of the connections the
        broker made, the only ones accepted; None: every connection (the sandbox's own
        loopback, which only its processes reach)."""
        selector.register(self.listener, selectors.EVENT_READ, self.on_accept)

    def expect(self, port: int) -> None:
        """Accept a connection from ``port`` (the broker made it); and, from the first call,
        only those the broker names (``broker.py`` calls it with 0 before any code runs)."""
        if self.expected is None:
            self.expected = set()
        if not port:
            return
        if len(self.expected) >= 4096:  # (made and never arrived: forget the oldest half)
            self.expected = set(sorted(self.expected)[2048:])
        self.expected.add(port)

    def close_in_child(self) -> None:
        """Close this relay's descriptors in a forked code process (the supervisor's stay
        open: nothing is shut down, only this process's copies go)."""
        self.listener.close()
        if self.hand is not None:
            self.hand.close()
        for side in self.sides.values():
            side.close()
        os.close(self.folder)

    @staticmethod
    def _hand(path: str, wait: bool = True) -> Optional[socket.socket]:
        """The connection that hands accepted sockets to the host, or None (bytes relayed).
        ``wait``: False once the code runs (its connections may fill the host's backlog: a
        connection made then is refused at once rather than wait in this loop)."""
        hand = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        hand.setblocking(wait)
        try:
            hand.connect(path)
        except OSError:
            hand.close()
            return None
        hand.setblocking(False)
        return hand

    def _handed(self, client: socket.socket) -> bool:
        """Hand ``client`` to the host's proxy; False if it stays here (relayed). A full hand
        keeps it here; a hand the host closed (it cuts one that idles, though never the first
        it took, this one's) is made again, once; one that cannot carry descriptors at all is
        dropped for good."""
        for attempt in range(2):
            if self.hand is None:
                return False
            rights = array("i", [client.fileno()])
            try:
                self.hand.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            except OSError as exc:
                if exc.errno in _AGAIN:
                    return False
                self.hand.close()
                gone = exc.errno in (errno.EPIPE, errno.ECONNRESET)
                self.hand = self._hand(self.hand_path, False) if gone and not attempt else None
                continue
            client.close()  # (the host holds it now)
            return True
        return False

    def on_accept(self, fd: int) -> None:
        for _ in range(64):  # (a burst, without starving the supervisor's other work)
            try:
                client, peer = self.listener.accept()
            except OSError:
                return
            if self.expected is not None:
                if peer[1] not in self.expected:
                    client.close()  # (another process of the host's, not the code's broker)
                    continue
                self.expected.discard(peer[1])
            # (what the proxy sends in parts, a head then a body, goes on at once)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._handed(client):
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.setblocking(False)  # (a full backlog: refused, never a wait in this loop)
            try:
                upstream.connect(self.socket_path)  # (a local socket: at once or never)
            except OSError:
                upstream.close()
                client.close()  # (the client sees its connection reset)
                continue
            one, two = _Side(client), _Side(upstream)
            for side, peer in ((one, two), (two, one)):
                side.sock.setblocking(False)
                self.sides[side.fd] = side
                self.peers[side.fd] = peer
                self._watch(side, selectors.EVENT_READ)

    def _watch(self, side: _Side, mask: int) -> None:
        if mask == side.mask:
            return
        if side.mask and mask:
            self.selector.modify(side.fd, mask, self.on_ready)
        elif mask:
            self.selector.register(side.fd, mask, self.on_ready)
        else:
            self.selector.unregister(side.fd)
        side.mask = mask

    def on_ready(self, fd: int) -> None:
        side = self.sides.get(fd)
        if side is None:
            return
        peer = self.peers[fd]
        try:
            self._flush(side)
            if not side.eof_read and not peer.waiting:
                self._read(side, peer)
        except OSError:
            self._close(side)
            return
        self._settle(side, peer)

    def _read(self, side: _Side, peer: _Side) -> None:
        if not peer.take_from(side):
            side.eof_read = True
            peer.ended = True
        self._flush(peer)

    def _flush(self, side: _Side) -> None:
        side.write_out()
        if side.ended and not side.waiting:
            try:
                side.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _settle(self, side: _Side, peer: _Side) -> None:
        """Watch each socket for what it waits on; close the pair once both ways ended."""
        if side.eof_read and peer.eof_read and not side.waiting and not peer.waiting:
            self._close(side)
            return
        for one, other in ((side, peer), (peer, side)):
            mask = 0
            if not one.eof_read and not other.waiting:
                mask |= selectors.EVENT_READ
            if one.waiting:
                mask |= selectors.EVENT_WRITE
            self._watch(one, mask)

    def _close(self, side: _Side) -> None:
        for one in (side, self.peers.get(side.fd)):
            if one is None or one.fd not in self.sides:
                continue
            self._watch(one, 0)
            del self.sides[one.fd]
            del self.peers[one.fd]
            one.close()


def start_relay(
    selector: selectors.BaseSelector, egress: Optional[Egress], note: Callable[[str], None]
) -> Optional[Relay]:
    """The relay the config asks for (``egress``: the proxy's folder here), its variables set
    in this process's environment for the code's processes; None (and a note) if it cannot."""
    if egress is None:
        return None
    why = loopback_up()
    if why:
        note("the loopback could not be brought up (%s): the proxy may be unreachable" % why)
    try:
        relay = Relay(selector, egress.folder)
    except OSError as exc:
        note("the network proxy could not be reached from here: %s" % exc)
        return None
    os.environ.update(proxy_environment(relay.port, read_no_proxy(relay.folder)))
    for name in ("NO_PROXY", "no_proxy"):
        if not os.environ.get(name):
            os.environ.pop(name, None)  # (empty: no variable at all)
    return relay


def read_no_proxy(folder: int) -> str:
    """The ``NO_PROXY`` the host's proxy wrote in its folder (held open as ``folder``); the
    sandbox's own loopback where it wrote none."""
    try:
        fd = os.open("no_proxy", os.O_RDONLY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return SANDBOX_LOOPBACK
    try:
        text = os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)
    return ",".join(part for part in text.strip().split(",") if part.strip())
