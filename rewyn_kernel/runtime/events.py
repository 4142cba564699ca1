"""SANDBOX_EXECUTED events: one per execution, whatever its ending, and where they go.

Every execution emits exactly one ``SandboxEvent``. It goes to the listeners given to
``create(listeners=...)``, to process-wide listeners added with ``add_listener`` (a JSONL run log,
say), and to the ``rewyn_kernel.events`` logger. A listener that raises is logged and skipped; it
never changes the result of the execution.

A tool an agent calls (``sandbox_tool``, the MCP server) also writes a ``TOOL_CALL`` line per call
to the run logs among them (``record_tool_call``; the record is ``_tool_call.ToolCall``). Logs
written before it hold a ``TOOL_RESULT`` line after each event instead; both are read back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rewyn_kernel.runtime._result import (
    Ending,
    ErrorInfo,
    Isolation,
    NetworkLog,
    WorkspaceFiles,
)
from rewyn_kernel.runtime._tool_call import TOOL_CALL_TYPE, ToolCall

__all__ = [
    "EVENT_TYPE",
    "EventListener",
    "JsonlRunLog",
    "SandboxEvent",
    "TOOL_CALL_TYPE",
    "TOOL_RESULT_TYPE",
    "ToolCall",
    "ToolResult",
    "add_listener",
    "emit",
    "record_tool_call",
    "record_tool_result",
    "remove_listener",
]

EVENT_TYPE: Literal["SANDBOX_EXECUTED"] = "SANDBOX_EXECUTED"
TOOL_RESULT_TYPE: Literal["TOOL_RESULT"] = "TOOL_RESULT"
logger = logging.getLogger("rewyn_kernel.events")


class OutputSummary(BaseModel):
    """One rich output, summarised: its MIME types and a plain-text excerpt."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    output_type: str
    mime_types: tuple[str, ...]
    text: str = ""


class SandboxEvent(BaseModel):
    """What ran, where, under which limits, and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    type: Literal["SANDBOX_EXECUTED"] = EVENT_TYPE
    id: str = Field(description="Unique id of this event (and of the execution).")
    sandbox_id: str
    session_id: str
    forked_from: str | None = Field(
        default=None,
        description="The session this one is a branch of (session.fork()), if it is one.",
    )
    execution_count: int = Field(description="1 for a session's first execution, and so on.")
    started_at: datetime
    finished_at: datetime
    duration_ms: float
    provider: str
    isolation: Isolation | None
    spec: dict[str, Any] = Field(description="The spec's limits; env names only, never values.")
    code: str = Field(description="The code, shortened past the event's code limit.")
    code_hash: str
    code_bytes: int
    code_truncated: bool
    exit_code: int
    ending: Ending
    ok: bool
    timed_out: bool
    interrupted: bool
    memory_exceeded: bool
    disk_full: bool = False
    files: WorkspaceFiles | None = None
    network: NetworkLog | None = Field(
        default=None,
        description="Every connection the code tried through its proxy, with its host, port, "
        "bytes each way and verdict (network=[...] only).",
    )
    state_lost: bool
    sandbox_restarted: bool
    message: str
    stdout: str = Field(description="Excerpt of stdout (head and tail).")
    stderr: str = Field(description="Excerpt of stderr (head and tail).")
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    error: ErrorInfo | None
    outputs: tuple[OutputSummary, ...] = ()


class ToolResult(BaseModel):
    """What a model was given for one execution, beside its event in a run log: the event
    keeps excerpts of the output, the tool gave the model its own shortened form of it
    (``sandbox_tool``'s payload, the MCP server's text). Written before ``ToolCall`` (which
    holds the same and more); ``rewyn-kernel review`` still reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    type: Literal["TOOL_RESULT"] = TOOL_RESULT_TYPE
    execution_id: str = Field(description="The id of the SANDBOX_EXECUTED event it answers.")
    tool: str = Field(description="The tool's name (run_code, run_python ...).")
    session: str | None = Field(default=None, description="The MCP session's name, if any.")
    text: str = Field(description="What the model read, as it read it.")
    truncated: bool = Field(description="The tool shortened the output for the model.")
    images: int = Field(default=0, description="Images given beside the text.")


EventListener = Callable[[SandboxEvent], None]
_listeners: list[EventListener] = []
_listeners_lock = threading.Lock()


def add_listener(listener: EventListener) -> None:
    """Send every event of this process to ``listener`` (e.g. a ``JsonlRunLog``)."""
    with _listeners_lock:
        _listeners.append(listener)


def remove_listener(listener: EventListener) -> None:
    """Stop sending events to ``listener``; unknown listeners are ignored."""
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


def record_tool_call(call: ToolCall, listeners: Iterable[EventListener] = ()) -> None:
    """Write ``call`` to the run logs among ``listeners`` and the process-wide listeners
    (other listeners take events only)."""
    _record(call, listeners)


def record_tool_result(given: ToolResult, listeners: Iterable[EventListener] = ()) -> None:
    """Give ``given`` to the run logs among ``listeners`` and the process-wide listeners
    (other listeners take events only)."""
    _record(given, listeners)


def _record(item: ToolCall | ToolResult, listeners: Iterable[EventListener]) -> None:
    with _listeners_lock:
        everyone = [*listeners, *_listeners]
    for listener in everyone:
        if isinstance(listener, JsonlRunLog):
            try:
                listener.record(item)
            except Exception:
                logger.exception("run log %r failed; the %s was not recorded", listener, item.type)


def emit(event: SandboxEvent, listeners: Iterable[EventListener] = ()) -> None:
    """Deliver ``event`` to ``listeners``, the process-wide listeners and the logger."""
    with _listeners_lock:
        everyone = [*listeners, *_listeners]
    for listener in everyone:
        try:
            listener(event)
        except Exception:
            logger.exception(
                "event listener %r failed; the event was not delivered to it", listener
            )
    logger.info(
        "%s %s exit=%d ending=%s duration=%.1fms",
        EVENT_TYPE,
        event.id,
        event.exit_code,
        event.ending,
        event.duration_ms,
    )


class JsonlRunLog:
    """An append-only run log: one JSON line per event, flushed as it is written.

    Each line goes out in a single ``write`` on a file opened with ``O_APPEND``, so several
    processes may share one log without interleaving lines.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __call__(self, event: SandboxEvent) -> None:
        self._append(event)

    def record(self, item: ToolCall | ToolResult) -> None:
        """Append a tool's record of a call (after the event of the code it ran, if any)."""
        self._append(item)

    def _append(self, item: BaseModel) -> None:
        # ASCII escapes: a lone surrogate in the code or its output must not lose the event.
        line = (json.dumps(item.model_dump(mode="json"), ensure_ascii=True) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"JsonlRunLog({str(self.path)!r})"

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[SandboxEvent]:
        """Read every event of a run log (tool calls and results left out); a malformed line
        raises ValueError naming it."""
        events = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    if json.loads(line).get("type") in (TOOL_CALL_TYPE, TOOL_RESULT_TYPE):
                        continue
                except (ValueError, AttributeError):
                    pass  # (reported below, as not an event)
                try:
                    events.append(SandboxEvent.model_validate_json(line))
                except ValueError as exc:
                    raise ValueError(
                        f"{path}:{number}: not a SANDBOX_EXECUTED event: {exc}"
                    ) from exc
        return events
