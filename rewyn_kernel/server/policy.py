"""What an agent token opens: a table of the Jupyter server's handlers, by class and HTTP method,
each with the check that ties the request to the token's notebook. Anything not in the table is
refused, including every handler an extension adds later (deny by default).

The table is keyed by the handler's qualified class name, not its URL: a subclass or a handler
mounted elsewhere is not in it. Each entry also names the ``(action, resource)`` that the
handler's ``@authorized`` asks for, so the authorizer refuses a handler that asks for something
else. The rows are what ``rewyn-kernel mcp --notebook`` uses (jupyter_nbmodel_client and
jupyter_kernel_client): sessions, the notebook's kernel (model, interrupt, channels), the
kernelspecs, and the notebook's collaboration session and room. The kernel's websocket is
checked again message by message (``channels``): the agent token reads, only the grant's runner
token runs code, and neither restarts or interrupts it there; the REST interrupt is the runner
token's alone.

What a row does not stop: whatever the kernel of the notebook runs can reach what that kernel
can reach (the sandboxed kernel is the wall there, not this table); and in the collaboration room
the agent edits the notebook as a person in JupyterLab would, the server saving it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import JupyterHandler

from rewyn_kernel.server.tokens import Grant

Check = Callable[[JupyterHandler, Grant], Awaitable[str | None]]
"""Return why the request is refused, or None to let it through."""

_ROOM = re.compile(r"json:notebook:([0-9A-Za-z-]+)")


def same_notebook(path: object, grant: Grant) -> bool:
    """Whether a path from the server (a session's, the collaboration's) is the grant's notebook."""
    return isinstance(path, str) and path.strip("/") == grant.path


async def _sessions(handler: JupyterHandler) -> list[dict[str, Any]]:
    sessions = handler.session_manager
    listed: list[Any] = await ensure_async(sessions.list_sessions())  # type: ignore[no-untyped-call]
    return [session for session in listed if isinstance(session, dict)]


async def own_kernels(handler: JupyterHandler, grant: Grant) -> set[str]:
    """The ids of the kernels of the grant's notebook's sessions (the person's or the agent's)."""
    return {
        str(session["kernel"]["id"])
        for session in await _sessions(handler)
        if same_notebook(session.get("path"), grant) and session.get("kernel")
    }


async def _anything(handler: JupyterHandler, grant: Grant) -> str | None:
    return None


async def _new_session(handler: JupyterHandler, grant: Grant) -> str | None:
    """POST /api/sessions: for the notebook only, never onto a kernel named by id, and a new
    kernel only of the grant's kernelspecs (the server's default when the body names none)."""
    try:
        model = json.loads(handler.request.body or b"null")
    except ValueError:
        return "the body is not JSON"
    if not isinstance(model, dict):
        return "the body is not a session model"
    path = model.get("path")
    notebook = model.get("notebook")
    if isinstance(notebook, dict):  # the legacy shape, read as SessionRootHandler.post reads it
        path = notebook.get("name", notebook.get("path", path))
    if not same_notebook(path, grant):
        return f"a session only for {grant.path}"
    kernel = model.get("kernel") or {}
    if not isinstance(kernel, dict):
        return "the kernel field is not an object"
    if kernel.get("id"):
        return "a session may not take a running kernel by id"
    if any(same_notebook(session.get("path"), grant) for session in await _sessions(handler)):
        return None  # the server answers with the notebook's session as it is
    name = kernel.get("name") or handler.kernel_manager.default_kernel_name
    if grant.kernels is not None and name not in grant.kernels:
        return f"the kernelspec {name!r} is not one this token may start ({list(grant.kernels)})"
    return None


async def _own_session(handler: JupyterHandler, grant: Grant) -> str | None:
    session_id = handler.path_kwargs.get("session_id")
    for session in await _sessions(handler):
        if session.get("id") == session_id and same_notebook(session.get("path"), grant):
            return None
    return f"not a session of {grant.path}"


async def _own_kernel(handler: JupyterHandler, grant: Grant) -> str | None:
    if handler.path_kwargs.get("kernel_id") in await own_kernels(handler, grant):
        return None
    return f"not the kernel of {grant.path}"


async def _interrupt_own_kernel(handler: JupyterHandler, grant: Grant) -> str | None:
    if handler.path_kwargs.get("action") != "interrupt":
        return "only an interrupt"
    return await _own_kernel(handler, grant)


async def _own_document_session(handler: JupyterHandler, grant: Grant) -> str | None:
    """PUT /api/collaboration/session/PATH: the notebook, as a notebook (the room it names)."""
    if not handler.path_args or not same_notebook(handler.path_args[0], grant):
        return f"a collaboration session only for {grant.path}"
    try:
        body = json.loads(handler.request.body or b"null")
    except ValueError:
        return "the body is not JSON"
    if not isinstance(body, dict) or (body.get("format"), body.get("type")) != ("json", "notebook"):
        return "only the json:notebook document"
    return None


async def _own_room(handler: JupyterHandler, grant: Grant) -> str | None:
    """The room websocket json:notebook:FILE_ID, where the file id names the notebook.

    The room id is read as YDocWebSocketHandler reads it (the last segment of the raw path) and
    must equal the routed one, so an encoded or nested path cannot name two rooms.
    """
    room = handler.request.path.split("/")[-1]
    match = _ROOM.fullmatch(room)
    if match is None or handler.path_args != [room]:
        return "only a json:notebook room"
    file_ids = handler.settings.get("file_id_manager")
    if file_ids is None:
        return "no file id manager"
    if not same_notebook(file_ids.get_path(match.group(1)), grant):
        return f"not the room of {grant.path}"
    return None


@dataclass(frozen=True)
class Route:
    """One handler and method an agent token opens: the ``@authorized`` action and resource it
    asks for, and the check against the grant."""

    action: str
    resource: str
    check: Check
    runner_only: bool = False
    """Only the grant's runner token (``rewyn-kernel mcp --notebook``'s) opens it."""


_SERVER = "jupyter_server.services"
SESSION_LIST = Route("read", "sessions", _anything)
KERNEL_CHANNELS = Route("execute", "kernels", _own_kernel)
"""The kernel's websocket: what it carries is checked message by message (``channels``)."""
ROUTES: dict[tuple[str, str], Route] = {
    (f"{_SERVER}.sessions.handlers.SessionRootHandler", "GET"): SESSION_LIST,
    (f"{_SERVER}.sessions.handlers.SessionRootHandler", "POST"): Route(
        "write", "sessions", _new_session
    ),
    (f"{_SERVER}.sessions.handlers.SessionHandler", "GET"): Route("read", "sessions", _own_session),
    (f"{_SERVER}.kernels.handlers.KernelHandler", "GET"): Route("read", "kernels", _own_kernel),
    (f"{_SERVER}.kernels.handlers.KernelActionHandler", "POST"): Route(
        "write", "kernels", _interrupt_own_kernel, runner_only=True
    ),
    (f"{_SERVER}.kernels.websocket.KernelWebsocketHandler", "GET"): KERNEL_CHANNELS,
    (f"{_SERVER}.kernelspecs.handlers.MainKernelSpecHandler", "GET"): Route(
        "read", "kernelspecs", _anything
    ),
    (f"{_SERVER}.kernelspecs.handlers.KernelSpecHandler", "GET"): Route(
        "read", "kernelspecs", _anything
    ),
    ("jupyter_server_ydoc.handlers.DocSessionHandler", "PUT"): Route(
        "write", "contents", _own_document_session
    ),
    ("jupyter_server_ydoc.handlers.YDocWebSocketHandler", "GET"): Route(
        "read", "contents", _own_room
    ),
}


def route_of(handler: JupyterHandler) -> Route | None:
    kind = type(handler)
    return ROUTES.get((f"{kind.__module__}.{kind.__qualname__}", handler.request.method or ""))


async def refusal(handler: JupyterHandler, grant: Grant, *, runner: bool) -> str | None:
    """Why ``grant``'s agent token (its runner token: ``runner``) does not open this request
    (None: it does)."""
    route = route_of(handler)
    if route is None:
        return "not an endpoint an agent token opens"
    if route.runner_only and not runner:
        return "only the MCP server's runner token interrupts the kernel"
    return await route.check(handler, grant)
