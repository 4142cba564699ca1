"""What an agent's kernel websocket may carry to the kernel: a short list of message types, by
channel, checked in the server before the message reaches the kernel.

Jupyter's kernel websocket carries every channel, so a token that opens it could run code no
cell shows (``execute_request``), restart or stop the kernel, the person's state lost with it
(``shutdown_request``), or interrupt the person's cell (``interrupt_request``). So:

- the agent token sends ``kernel_info_request`` alone (shell or control): the kernel's identity
  and, for the sandbox kernel, its risk, which is what attaching needs;
- the runner token (``rewyn-kernel mcp --notebook``'s, which it uses only as the person's
  policy and approval say) may also send ``execute_request`` on shell;
- nothing else, for either: no shutdown or restart, no interrupt (the runner interrupts through
  the REST endpoint), no stdin, no comms, no debugger. ``inspect_request`` and
  ``complete_request`` are refused too: IPython answers them by looking attributes up on the
  person's objects, which runs their properties and ``__getattr__``, that is code; and
  ``history_request`` gives the kernel's inputs, more than the notebook shows.

A message is read as jupyter_server's connection reads it (the v1 binary protocol or the legacy
JSON one), and one that cannot be read so, or whose header names a key twice (two parsers could
take different ones), is refused. A refused message is dropped and the websocket closed as a
policy violation (1008), naming the message type; nothing the socket sends after it goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
)
from tornado.websocket import WebSocketHandler

V1 = "v1.kernel.websocket.jupyter.org"
READING: frozenset[tuple[str, str]] = frozenset(
    {("shell", "kernel_info_request"), ("control", "kernel_info_request")}
)
"""What the agent token sends."""
RUNNING: frozenset[tuple[str, str]] = READING | {("shell", "execute_request")}
"""What the runner token sends."""
REFUSED = "not a message the agent token sends"


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key named twice")
    return dict(pairs)


def message_of(message: str | bytes, subprotocol: str | None) -> tuple[str, str] | None:
    """The (channel, msg_type) of a websocket message, as jupyter_server's connection reads it
    (a missing channel is shell there); None for one that cannot be read."""
    try:
        if subprotocol == V1:
            if not isinstance(message, bytes):
                return None
            channel, parts = deserialize_msg_from_ws_v1(message)  # type: ignore[no-untyped-call]
            header = json.loads(parts[0], object_pairs_hook=_no_twice) if parts else None
        else:
            if isinstance(message, bytes):
                msg = deserialize_binary_message(message)  # type: ignore[no-untyped-call]
            else:
                msg = json.loads(message, object_pairs_hook=_no_twice)
            if not isinstance(msg, dict):
                return None
            channel = msg.get("channel")
            channel = "shell" if channel is None else channel  # (as the connection takes it)
            header = msg.get("header")
    except (ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError):
        return None
    kind = header.get("msg_type") if isinstance(header, dict) else None
    if not isinstance(channel, str) or not isinstance(kind, str):
        return None
    return channel, kind


def _printable(text: str, limit: int) -> str:
    return "".join(ch if ch.isascii() and ch.isprintable() else "?" for ch in text[:limit])


def guard(
    handler: WebSocketHandler, allowed: frozenset[tuple[str, str]], who: str, log: logging.Logger
) -> None:
    """Let through ``handler``'s incoming messages in ``allowed`` only (by wrapping its
    ``on_message``: the kernel websocket's one way to the kernel); close it at the first
    other."""
    forward: Callable[[str | bytes], Awaitable[None] | None] = handler.on_message
    refused = False

    def checked(message: str | bytes) -> Awaitable[None] | None:
        nonlocal refused
        if refused:
            return None
        what = message_of(message, handler.selected_subprotocol)
        if what in allowed:
            return forward(message)
        refused = True
        named = "an unreadable message" if what is None else f"{what[1]} on {what[0]}"
        named = _printable(named, 60)
        log.warning("%s: %s refused on %s", who, named, handler.request.path)
        handler.close(1008, f"{named}: {REFUSED}")
        return None

    handler.on_message = checked  # type: ignore[method-assign]
