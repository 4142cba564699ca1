"""The way out of a sandbox with no network namespace and an allow-list: the supervisor makes
every TCP connection the code asks for, to the relay, and to nothing else.

A landlock sandbox shares the host's network. Each code process, before any code runs, loads a
second seccomp filter (``arm``): ``socket()`` only for IPv4 and IPv6 streams, no ``listen()``,
no TCP Fast Open (a ``sendto`` that connects), and every ``connect()`` reported to the
supervisor (``SECCOMP_RET_USER_NOTIF``) instead of made. For each one the supervisor makes a
socket of its own, connects it to the relay (``relay.py``), whatever address the code named,
puts it in the place of the code's socket (``SECCOMP_IOCTL_NOTIF_ADDFD``, the same descriptor
number, its blocking and close-on-exec flags kept) and answers the call as the connection went.
What it reads of the code (the address's family, from its memory; the socket's flags, from
``/proc``) only shapes the socket it hands over: nothing the code changes meanwhile can lead
anywhere but the relay. A client that uses the proxy variables names the relay anyway; one that
does not reaches the proxy all the same, which refuses what is no proxy request, and records
it. The relay accepts only the connections the broker made (by their port), not another
process of the host's. Options the code set on its socket before ``connect()`` do not carry
over (``TCP_NODELAY``, say: the relay sets it on its side).

The supervisor reads the code's process, so such a code process is dumpable (the supervisor is
its ancestor, in the Landlock domain its own is nested in: nothing outside could trace it).
``pidfd_getfd``, which would hand over the code's own socket, is refused in a container without
CAP_SYS_PTRACE, where this must work too (JupyterHub).
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import selectors
import socket
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Callable, Dict, Optional, Tuple

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
"""``seccomp(2)``'s number (no C library wrapper): the machines this package runs on."""
NOTIF_SIZE, RESP_SIZE, ADDFD_SIZE = 80, 24, 24
"""``struct seccomp_notif``, ``struct seccomp_notif_resp`` and ``struct seccomp_notif_addfd``."""
NOTIF_RECV = (3 << 30) | (NOTIF_SIZE << 16) | (0x21 << 8) | 0
NOTIF_SEND = (3 << 30) | (RESP_SIZE << 16) | (0x21 << 8) | 1
NOTIF_ADDFD = (1 << 30) | (ADDFD_SIZE << 16) | (0x21 << 8) | 3
"""``SECCOMP_IOCTL_NOTIF_RECV``, ``_SEND`` (``_IOWR('!', 0 and 1, ...)``) and ``_ADDFD``
(``_IOW('!', 3, ...)``)."""
ADDFD_FLAG_SETFD = 1
"""Put the descriptor at the number given, in place of what is there."""
O_CLOEXEC_OCTAL, O_NONBLOCK_OCTAL = 0o2000000, 0o4000
"""The flags of ``/proc/PID/fdinfo/FD``'s ``flags:`` line (octal)."""
MAX_PENDING = 256
"""Connections under way at once (a blocking socket's, answered once connected): more are
refused with EAGAIN."""


def arm(program: bytes) -> int:
    """(In a code process, before any code runs and before any thread starts.) Load
    ``program``, the code's filter, asking for its listener; return the listener's
    descriptor. Raises OSError where it cannot."""
    import ctypes
    import platform

    from .system import libc, set_no_new_privs

    c = libc()
    number = SECCOMP_SYSCALL.get(platform.machine())
    if c is None or number is None:
        raise OSError(errno.ENOSYS, "seccomp(2) cannot be called here")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    set_no_new_privs()
    c.syscall.restype = ctypes.c_long
    fd = int(
        c.syscall(
            number,
            ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(SECCOMP_FILTER_FLAG_NEW_LISTENER),
            ctypes.byref(fprog),
        )
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, "seccomp(SECCOMP_SET_MODE_FILTER): " + os.strerror(code))
    return fd


class Broker:
    """(The supervisor's.) Answers the code's ``connect()`` calls on each code process's
    listener: connected to the relay at ``port``, or refused."""

    def __init__(
        self, selector: selectors.BaseSelector, port: int, expect: Callable[[int], None]
    ) -> None:
        self.selector = selector
        self.port = port
        self.expect = expect
        """Tells the relay the local port of a connection the broker made."""
        self.listeners: Dict[int, int] = {}
        """Listener descriptor -> the pid of the code process that sent it."""
        self.pending: Dict[int, Tuple[int, int, int, bool, socket.socket]] = {}
        """Our socket's descriptor -> (listener, notification id, the code's descriptor, its
        close-on-exec, our socket): a blocking socket's connection under way."""

    # -- listeners -------------------------------------------------------------------------

    def watch(self, carrier: int, pid: int) -> None:
        """Take the listener the code process ``pid`` will send over ``carrier`` once it comes
        (``take``)."""
        os.set_blocking(carrier, False)
        self.selector.register(carrier, selectors.EVENT_READ, lambda fd: self.take(fd, pid))

    def take(self, carrier: int, pid: int) -> None:
        """Read the listener a code process (``pid``) sent over ``carrier``, then close it."""
        try:
            self.selector.unregister(carrier)
        except (KeyError, ValueError):
            pass
        try:
            sock = socket.socket(fileno=os.dup(carrier))
        except OSError:
            os.close(carrier)
            return
        try:
            _, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(4))
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(data) >= 4:
                    fd = struct.unpack("i", data[:4])[0]
                    os.set_blocking(fd, False)
                    self.listeners[fd] = pid
                    self.selector.register(fd, selectors.EVENT_READ, self.on_notify)
        except OSError:
            pass
        finally:
            sock.close()
            os.close(carrier)

    def drop(self, pid: int) -> None:
        """The code process ``pid`` and what it started are gone: close its listener."""
        for fd, owner in list(self.listeners.items()):
            if owner == pid:
                self._close_listener(fd)

    def close_in_child(self) -> None:
        """(In a forked code process.) Close the supervisor's listeners and copies."""
        for fd in self.listeners:
            _close(fd)
        for _, _, _, _, sock in self.pending.values():
            sock.close()
        self.listeners.clear()
        self.pending.clear()

    def _close_listener(self, fd: int) -> None:
        self.listeners.pop(fd, None)
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        _close(fd)

    # -- notifications ---------------------------------------------------------------------

    def on_notify(self, fd: int) -> None:
        # (a listener whose processes are all gone polls as hung up, and a receive on it would
        # wait for good: look first)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        events = poller.poll(0)
        ready = events[0][1] if events else 0
        if not ready & select.POLLIN:
            if ready & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                self._close_listener(fd)
            return
        notif = bytearray(NOTIF_SIZE)
        try:
            fcntl.ioctl(fd, NOTIF_RECV, notif, True)
        except OSError as exc:
            if exc.errno in (errno.EINTR, errno.ENOENT, errno.EAGAIN):
                return  # (the caller went, or a spurious wake-up)
            self._close_listener(fd)  # (no process under its filter is left)
            return
        notif_id, pid = struct.unpack_from("=QI", notif, 0)
        target, address = struct.unpack_from("=qQ", notif, 32)  # (args[0] and args[1])
        result = self._connect(fd, notif_id, pid, target, address)
        if result is not None:
            self._answer(fd, notif_id, result)

    def _connect(
        self, listener: int, notif_id: int, pid: int, target: int, address: int
    ) -> Optional[int]:
        """Put a socket connected to the relay in the place of ``pid``'s descriptor ``target``;
        the errno to answer with (0: connected), or None where the answer waits for the
        connection (``pending``)."""
        if not 0 <= target < (1 << 31):
            return errno.EBADF
        facts = _socket_facts(pid, target)
        if facts is None:
            return errno.EBADF
        blocking, cloexec = facts
        family = _family_named(pid, address)
        if len(self.pending) >= MAX_PENDING:
            return errno.EAGAIN
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            return exc.errno or errno.EMFILE
        keep = False
        try:
            sock.setblocking(False)
            host = "127.0.0.1" if family == socket.AF_INET else "::ffff:127.0.0.1"
            err = sock.connect_ex((host, self.port))
            self.expect(int(sock.getsockname()[1]))
            if err not in (0, errno.EINPROGRESS):
                return err
            if blocking and err == errno.EINPROGRESS:
                self.pending[sock.fileno()] = (listener, notif_id, target, cloexec, sock)
                self.selector.register(sock, selectors.EVENT_WRITE, self.on_connected)
                keep = True
                return None
            if blocking:
                sock.setblocking(True)
            return _hand_over(listener, notif_id, sock.fileno(), target, cloexec) or err
        except OSError as exc:
            return exc.errno or errno.EIO
        finally:
            if not keep:
                sock.close()

    def on_connected(self, fd: int) -> None:
        listener, notif_id, target, cloexec, sock = self.pending.pop(fd)
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if not err:
                sock.setblocking(True)
                err = _hand_over(listener, notif_id, fd, target, cloexec)
        except OSError as exc:
            err = exc.errno or errno.EIO
        sock.close()
        if listener in self.listeners:
            self._answer(listener, notif_id, err)

    @staticmethod
    def _answer(listener: int, notif_id: int, err: int) -> None:
        response = struct.pack("=QqiI", notif_id, 0, -err if err else 0, 0)
        try:
            fcntl.ioctl(listener, NOTIF_SEND, bytearray(response), True)
        except OSError:
            pass  # (the caller went: ENOENT)


def _socket_facts(pid: int, target: int) -> Optional[Tuple[bool, bool]]:
    """Whether ``pid``'s descriptor ``target`` is a blocking socket, and close-on-exec; None
    where it is no socket (or is gone)."""
    try:
        if not os.readlink("/proc/%d/fd/%d" % (pid, target)).startswith("socket:"):
            return None
        with open("/proc/%d/fdinfo/%d" % (pid, target)) as handle:
            for line in handle:
                if line.startswith("flags:"):
                    flags = int(line.split()[1], 8)
                    return not flags & O_NONBLOCK_OCTAL, bool(flags & O_CLOEXEC_OCTAL)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _family_named(pid: int, address: int) -> int:
    """The address family the code's ``connect()`` named (AF_INET unless it says AF_INET6):
    it shapes only the socket handed over, which leads to the relay whatever it says."""
    try:
        with open("/proc/%d/mem" % pid, "rb", buffering=0) as memory:
            memory.seek(address)
            raw = memory.read(2)
        if len(raw) == 2 and struct.unpack("=H", raw)[0] == socket.AF_INET6:
            return socket.AF_INET6
    except (OSError, ValueError, OverflowError):
        pass
    return socket.AF_INET


def _hand_over(listener: int, notif_id: int, fd: int, target: int, cloexec: bool) -> int:
    """Put ``fd`` in the caller's place of its descriptor ``target``; 0, or the errno."""
    addfd = struct.pack(
        "=QIIII", notif_id, ADDFD_FLAG_SETFD, fd, target, os.O_CLOEXEC if cloexec else 0
    )
    try:
        fcntl.ioctl(listener, NOTIF_ADDFD, bytearray(addfd), True)
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def carrier_pair() -> Tuple[int, int]:
    """The socket pair a code process sends its listener over, as bare descriptors: the
    supervisor's end (it only reads) first, the code's (it only writes) second."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.shutdown(socket.SHUT_RD)
    return ours.detach(), theirs.detach()


def send_listener(carrier: int, listener: int) -> None:
    """(In a code process.) Send ``listener`` to the supervisor over ``carrier``; close both."""
    sock = socket.socket(fileno=carrier)
    try:
        sock.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", listener))])
    finally:
        sock.close()
        os.close(listener)


__all__ = ["Broker", "arm", "send_listener"]
