"""How the server is reached: stdio (the default), or streamable HTTP behind a bearer token.

Both end the same way on SIGTERM or SIGINT: the server's lifespan closes every session (no
sandbox outlives the server), then the process exits. Over stdio only protocol goes to
stdout: the SDK points file descriptor 1 at stderr while it serves, and nothing here prints.
"""

from __future__ import annotations

import hmac
import os
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from rewyn_kernel.mcp.token import MIN_CHARS

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
STOP_WAIT = 10.0
"""Seconds the sessions get to close after a signal before the process exits anyway."""


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve over stdin/stdout until the client closes stdin or a signal comes."""
    done = anyio.Event()

    async def serve() -> None:
        try:
            await server.run_stdio_async()
        finally:
            done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        group.start_soon(_stop_on_signal, group.cancel_scope, done)
        await done.wait()
        group.cancel_scope.cancel()


async def _stop_on_signal(scope: anyio.CancelScope, done: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()  # the lifespan's cleanup runs as the server task unwinds
            with anyio.move_on_after(STOP_WAIT, shield=True):
                await done.wait()
            # stdin's reader is a thread blocked in read() that no cancellation reaches: with
            # the client still holding the pipe open, the process would never end by itself.
            os._exit(0)


class BearerToken:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401; the
    lifespan (where the SDK starts its session manager) passes through."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if len(token) < MIN_CHARS:
            raise ValueError(f"the token must be at least {MIN_CHARS} characters")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            given = b""
            for name, value in scope.get("headers") or ():
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self._expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"www-authenticate", b'Bearer realm="rewyn-kernel"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


def serve_http(server: MCPServer[Any], host: str, port: int, token: str) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until SIGTERM or SIGINT (uvicorn's
    own graceful stop runs the lifespan's cleanup)."""
    import uvicorn

    app = BearerToken(server.streamable_http_app(host=host), token)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="on")
