"""What every call to the MCP server leaves in its run log: one TOOL_CALL record per call.

``RecordingServer.call_tool`` is where every ``tools/call`` passes: the SDK's request handler
(``MCPServer._handle_call_tool``) calls it and turns what it raises into the error result the
model reads, ``str()`` of the ``ToolError``. So the override sees all of it, in the order the
calls come: the arguments as sent; a call whose arguments the SDK refused before the tool's
function ran (its ``ToolError`` has pydantic's ``ValidationError`` as ``__cause__``); an unknown
tool; the tool's own errors; and the content of a result, text and images. A tool's function
adds what only it knows through ``notes()``: the session it used, the execution it ran, the
files it wrote or read.

A tool raises ``Refused`` for a path it will not touch, ``Denied`` for a policy's no and
``BadArguments`` for arguments it found wrong itself (all ``ToolError``: the model reads the
same); any other error is recorded as an error. A failure to record never fails the call. A
call the client cancels is recorded as cancelled (a review pairs it with the execution it
interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, InputRequiredResult, TextContent
from pydantic import ValidationError

from rewyn_kernel.errors import ForkError
from rewyn_kernel.mcp.arguments import CheckedServer, LifespanT, UnknownArguments
from rewyn_kernel.mcp.sessions import BadSessionName, Entry, SessionError
from rewyn_kernel.mcp.undo import UndoError
from rewyn_kernel.runtime.events import TOOL_CALL_TYPE, JsonlRunLog, ToolCall, record_tool_call
from rewyn_kernel.runtime.tool_call import (
    MAX_FILES,
    MAX_IMAGES,
    LoggedFile,
    LoggedImage,
    Outcome,
    bounded_arguments,
    bounded_text,
    logged_file,
    logged_image,
)

logger = logging.getLogger(__name__)


class Refused(ToolError):
    """The tool will not touch that path: outside the session's folder, a link, protected."""


class Denied(ToolError):
    """The permission policy, or the person asked, said no."""


class BadArguments(ToolError):
    """Arguments that passed the schema but not the tool (a timeout over the server's limit,
    content that is not base64, a session name it cannot use)."""


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """A session that cannot be used, forked or undone is the agent's error (a tool error
    whose text says why), not the server's."""
    try:
        yield
    except BadSessionName as exc:
        raise BadArguments(str(exc)) from None
    except (SessionError, UndoError, ForkError) as exc:
        raise ToolError(str(exc)) from None


@dataclass
class CallNotes:
    """What a tool's function knows of its call, for the record."""

    session: str | None = None
    """The session's name the call gives (its argument, or the tool's default)."""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The id of the call's TOOL_CALL record (known from its start: a notebook cell the call
    makes names it)."""
    number: int | None = None
    """The call's number in its run log, from 1 in the order the calls started: "call N" in the
    result, the notebook cell the call makes, and the run log's review alike."""
    session_id: str | None = None
    sandbox_id: str | None = None
    execution_id: str | None = None
    timeout: float | None = None
    session_effect: Literal["restarted", "closed"] | None = None
    files: list[LoggedFile] = field(default_factory=list)

    def used(self, entry: Entry) -> None:
        """The call works in ``entry``'s session."""
        self.session_id, self.sandbox_id = entry.session.id, entry.sandbox.id

    def file(self, path: str, data: bytes, direction: Literal["in", "out"]) -> None:
        """``data`` went into the sandbox at ``path`` (in) or came out of it (out)."""
        if len(self.files) < MAX_FILES:
            self.files.append(logged_file(path, data, direction))


_current: contextvars.ContextVar[CallNotes | None] = contextvars.ContextVar(
    "rewyn_mcp_call", default=None
)


def notes() -> CallNotes:
    """The notes of the call being handled (a throwaway one outside a call: a tool function
    called directly, in a test, is not recorded)."""
    return _current.get() or CallNotes()


class RecordingServer(CheckedServer[LifespanT]):
    """The SDK's server, recording each tool call in ``run_log`` as it ends (argument errors
    as ``CheckedServer`` words them, which is what the model was told)."""

    def __init__(self, *args: Any, run_log: JsonlRunLog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_log = run_log
        self._calls = _calls_in(run_log.path)
        """Calls numbered so far (those of an earlier server writing to the same log too)."""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[LifespanT, Any] | None = None,
    ) -> CallToolResult | InputRequiredResult:
        started = datetime.now(timezone.utc)
        self._calls += 1
        noted = CallNotes(session=await self._session_of(name, arguments), number=self._calls)
        token = _current.set(noted)
        try:
            result = await super().call_tool(name, arguments, context)
        except Exception as exc:
            self._record(name, arguments, started, noted, outcome=_outcome(exc), error=str(exc))
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):  # (the client cancelled the call)
                error = "the client cancelled the call before its result"
                self._record(name, arguments, started, noted, outcome="cancelled", error=error)
            raise
        finally:
            _current.reset(token)
        if isinstance(result, CallToolResult):  # (not a request for input: its retry is)
            outcome: Outcome = "error" if result.is_error else "ok"
            self._record(name, arguments, started, noted, outcome=outcome, result=result)
        return result

    def _record(
        self,
        name: str,
        arguments: dict[str, Any],
        started: datetime,
        noted: CallNotes,
        *,
        outcome: Outcome,
        error: str = "",
        result: CallToolResult | None = None,
    ) -> None:
        try:
            text, images, left_out = _given(result) if result is not None else (error, [], 0)
            shown, cut = bounded_text(text)
            call = ToolCall(
                id=noted.call_id,
                tool=name[:64] or "?",
                session=noted.session,
                session_id=noted.session_id,
                sandbox_id=noted.sandbox_id,
                execution_id=noted.execution_id,
                keeps_state=True if noted.execution_id else None,
                timeout=noted.timeout,
                session_effect=noted.session_effect if outcome == "ok" else None,
                started_at=started,
                finished_at=datetime.now(timezone.utc),
                arguments=bounded_arguments(arguments if isinstance(arguments, dict) else {}),
                outcome=outcome,
                text=shown,
                text_truncated=cut,
                images=tuple(images),
                images_left_out=left_out,
                files=tuple(noted.files),
            )
            record_tool_call(call, [self.run_log])
        except Exception:
            logger.exception("the call to %r was not recorded in %r", name[:64], self.run_log)

    async def _session_of(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The session a call names: its argument, else the tool's default (None for a tool
        without sessions, or a name that is not one)."""
        tool = next((tool for tool in await self.list_tools() if tool.name == name), None)
        schema = (tool.input_schema.get("properties") or {}).get("session") if tool else None
        if not isinstance(schema, dict):
            return None
        session = arguments.get("session", schema.get("default"))
        return session[:64] if isinstance(session, str) and session else None


def _calls_in(path: Path) -> int:
    """How many TOOL_CALL records the run log at ``path`` holds (0 where there is none yet)."""
    count = 0
    with contextlib.suppress(OSError), path.open("rb") as lines:
        for line in lines:
            if TOOL_CALL_TYPE.encode() in line:
                with contextlib.suppress(ValueError, AttributeError):
                    count += json.loads(line).get("type") == TOOL_CALL_TYPE
    return count


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what raised it (the SDK wraps a tool's ``ToolError`` in its own)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__


def _outcome(exc: BaseException) -> Outcome:
    for cause in _causes(exc):
        if isinstance(cause, ValidationError | BadArguments | UnknownArguments):
            return "invalid_arguments"
        if isinstance(cause, Denied):
            return "denied"
        if isinstance(cause, Refused):
            return "refused"
    return "error"


def _given(result: CallToolResult) -> tuple[str, list[LoggedImage], int]:
    """The text, images, and images left out of what a result gave the model."""
    texts: list[str] = []
    images: list[LoggedImage] = []
    left_out = 0
    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ImageContent):
            image = logged_image(block.mime_type, block.data)
            if image is None or len(images) >= MAX_IMAGES:
                left_out += 1
            else:
                images.append(image)
        else:
            texts.append(f"[a {block.type} block, not kept in the run log]")
    return "\n".join(texts), images, left_out
