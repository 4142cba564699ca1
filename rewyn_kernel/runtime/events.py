"""SANDBOX_EXECUTED events: one per execution, whatever its ending, and where they go.

Every execution emits exactly one ``SandboxEvent``. It goes to the listeners given to
``create(listeners=...)``, to process-wide listeners added with ``add_listener`` (a JSONL run log,
say), and to the ``rewyn_kernel.events`` logger. A listener that raises is logged and skipped; it
never changes the result of the execution.

A tool an agent calls (``sandbox_tool``, the MCP server) also writes a ``TOOL_CALL`` line per call
to the run logs among them (``record_tool_call``; the record is ``_tool_call.ToolCall``). Logs
written before it hold a ``TOOL_RESULT`` line after each event instead; both are read back.
The kernel writes a ``NETWORK_GRANTED`` line when the person allows a host from the page
(``record_grant``).
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
    "GRANT_TYPE",
    "JsonlRunLog",
    "NetworkGrant",
    "SandboxEvent",
    "TOOL_CALL_TYPE",
    "TOOL_RESULT_TYPE",
    "ToolCall",
    "ToolResult",
    "add_listener",
    "emit",
    "record_grant",
    "record_tool_call",
    "record_tool_result",
    "remove_listener",
]

EVENT_TYPE: Literal["SANDBOX_EXECUTED"] = "SANDBOX_EXECUTED"
TOOL_RESULT_TYPE: Literal["TOOL_RESULT"] = "TOOL_RESULT"
GRANT_TYPE: Literal["NETWORK_GRANTED"] = "NETWORK_GRANTED"
logger = logging.getLogger("rewyn_kernel.events")


class OutputSummary(BaseModel):
    """One rich output, summarised: its MIME types and a plain-text excerpt."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    output_type: str
    """display_data (what display() showed) or execute_result (the last expression's value)."""
    mime_types: tuple[str, ...]
    """The MIME types of its data, sorted."""
    text: str = ""
    """Its text/plain form, shortened to 2,000 characters (head and tail); '' without one."""


class SandboxEvent(BaseModel):
    """What ran, where, under which limits, and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    type: Literal["SANDBOX_EXECUTED"] = EVENT_TYPE
    """Always SANDBOX_EXECUTED: what tells an event from the other lines of a run log."""
    id: str = Field(description="Unique id of this event (and of the execution).")
    sandbox_id: str
    """The sandbox that ran the code; its sessions and branches share it."""
    session_id: str
    """The session that ran the code. One-shot executions of a sandbox share one session of
    their own, which keeps no state."""
    forked_from: str | None = Field(
        default=None,
        description="The session this one is a branch of (session.fork()), if it is one.",
    )
    execution_count: int = Field(description="1 for a session's first execution, and so on.")
    started_at: datetime
    """When the execution started (UTC)."""
    finished_at: datetime
    """When its event was made (UTC)."""
    duration_ms: float
    """How long the execution took, in milliseconds."""
    provider: str
    """The name of the provider that ran the sandbox (bubblewrap, subprocess...)."""
    isolation: Isolation | None
    """What that provider applied to the sandbox (the reference's isolation page); None where it
    is not known."""
    spec: dict[str, Any] = Field(description="The spec's limits; env names only, never values.")
    code: str = Field(description="The code, shortened past the event's code limit.")
    code_hash: str
    """sha256 hex digest of the whole code's UTF-8 bytes (not of the shortened ``code``)."""
    code_bytes: int
    """Size of the whole code in UTF-8 bytes."""
    code_truncated: bool
    """``code`` was shortened (the code was longer than 262,144 characters)."""
    exit_code: int
    """As the result's: 0, 1 for an uncaught exception, n for sys.exit(n), 124 on timeout, 130
    when interrupted, 128 + N when killed by signal N."""
    ending: Ending
    """How the execution ended (completed, exception, exit, interrupted, timeout, crashed, oom,
    start_failed, protocol_error); ``message`` says it in words."""
    ok: bool
    """The code ran to the end: exit code 0, no timeout, no exception."""
    timed_out: bool
    """The execution ran past its timeout."""
    interrupted: bool
    """The execution was interrupted (KeyboardInterrupt in the code)."""
    memory_exceeded: bool
    """The sandbox went over its memory cap."""
    disk_full: bool = False
    """The scratch quota (disk_limit_mb) was used up when the execution ended."""
    files: WorkspaceFiles | None = None
    """What the execution created, changed, deleted and refused in its workspace; None without
    one."""
    network: NetworkLog | None = Field(
        default=None,
        description="Every connection the code tried through its proxy, with its host, port, "
        "bytes each way and verdict (network=[...] only).",
    )
    state_lost: bool
    """In a session: the execution ran in a fresh worker because the previous one was killed or
    died, so earlier variables are gone."""
    sandbox_restarted: bool
    """The sandbox was killed at the end of this execution; its session starts afresh."""
    message: str
    """What happened, in words; '' when the execution completed."""
    stdout: str = Field(description="Excerpt of stdout (head and tail).")
    stderr: str = Field(description="Excerpt of stderr (head and tail).")
    stdout_bytes: int
    """Bytes the code wrote to stdout in all."""
    stderr_bytes: int
    """Bytes the code wrote to stderr in all."""
    stdout_truncated: bool
    """The result's stdout was cut to the spec's output limit."""
    stderr_truncated: bool
    """The result's stderr was cut to the spec's output limit."""
    error: ErrorInfo | None
    """The uncaught exception (its value and traceback lines shortened); None if there was none.
    """
    outputs: tuple[OutputSummary, ...] = ()
    """The rich outputs the execution ended with, summarised (types and a text excerpt)."""


class ToolResult(BaseModel):
    """What a model was given for one execution, beside its event in a run log: the event
    keeps excerpts of the output, the tool gave the model its own shortened form of it
    (``sandbox_tool``'s payload, the MCP server's text). Written before ``ToolCall`` (which
    holds the same and more); ``rewyn-kernel review`` still reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    type: Literal["TOOL_RESULT"] = TOOL_RESULT_TYPE
    """Always TOOL_RESULT."""
    execution_id: str = Field(description="The id of the SANDBOX_EXECUTED event it answers.")
    tool: str = Field(description="The tool's name (run_code, run_python ...).")
    session: str | None = Field(default=None, description="The MCP session's name, if any.")
    text: str = Field(description="What the model read, as it read it.")
    truncated: bool = Field(description="The tool shortened the output for the model.")
    images: int = Field(default=0, description="Images given beside the text.")


class NetworkGrant(BaseModel):
    """The person allowed the code of a notebook to reach more hosts, from the page
    (kernel/grants.py): the executions after it show the longer allow-list in their spec."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    type: Literal["NETWORK_GRANTED"] = GRANT_TYPE
    """Always NETWORK_GRANTED."""
    granted_at: datetime = Field(description="When the person granted it.")
    notebook: str = Field(description="The notebook's key (its name and a hash of its path).")
    grant: str = Field(description="The preset's name ('pypi'), or the host entry granted.")
    hosts: tuple[str, ...] = Field(min_length=1, description="The allow entries it added.")
    live: bool = Field(
        description="The running kernel took it at once (its state kept); false: from the "
        "notebook's next kernel (a kernel with no network has no proxy to take it)."
    )
    session_id: str | None = Field(
        default=None, description="The kernel's session, as its events name it."
    )


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


def record_grant(grant: NetworkGrant, listeners: Iterable[EventListener] = ()) -> None:
    """Write ``grant`` to the run logs among ``listeners`` and the process-wide listeners."""
    _record(grant, listeners)


def _record(item: ToolCall | ToolResult | NetworkGrant, listeners: Iterable[EventListener]) -> None:
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

    def record(self, item: ToolCall | ToolResult | NetworkGrant) -> None:
        """Append a tool's record of a call (after the event of the code it ran, if any), or
        a person's grant."""
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
        """Read every event of a run log (tool calls, results and grants left out); a malformed line
        raises ValueError naming it."""
        events = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    if json.loads(line).get("type") in (
                        TOOL_CALL_TYPE,
                        TOOL_RESULT_TYPE,
                        GRANT_TYPE,
                    ):
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
