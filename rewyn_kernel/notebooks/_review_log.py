"""Reading a run log for a review: its records, validated, and the steps of the run in call order.

A run log holds SANDBOX_EXECUTED events, TOOL_CALL records (one per call an agent made, the code
it ran named by ``execution_id``), NETWORK_GRANTED records (a person's grant from the page) and,
in logs from before TOOL_CALL, TOOL_RESULT lines. Each
line is untrusted input (the agent's code could have written the file): it is parsed and
validated on its own, and a bad one becomes a problem naming its line, never the end of the
review. ``steps_of`` pairs each call with the event of its execution and orders the steps by
the time each call started, so calls to sessions that ran at once read in the order they came.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from rewyn_kernel.runtime.events import (
    EVENT_TYPE,
    GRANT_TYPE,
    TOOL_CALL_TYPE,
    TOOL_RESULT_TYPE,
    NetworkGrant,
    SandboxEvent,
    ToolCall,
    ToolResult,
)
from rewyn_kernel.runtime.result import scrub
from rewyn_kernel.runtime.tool_call import TOOL_CALL_VERSION

Record = SandboxEvent | ToolCall | ToolResult | NetworkGrant
Line = tuple[int, SandboxEvent]
"""An event and the number of the log line it came from."""


@dataclass(frozen=True)
class Step:
    """One thing the agent did, as one cell shows it: a tool call (with the event of the code
    it ran, if it ran any), or an execution no call names (a log written before TOOL_CALL, or
    by something other than a tool: a kernel, ``create(listeners=...)``)."""

    line: int
    """The log line of the call, else of the event."""
    call: ToolCall | None = None
    event: SandboxEvent | None = None
    given: ToolResult | None = None
    """An older log's TOOL_RESULT: what the tool gave the model for ``event``."""
    event_missing: bool = False
    """The call names an execution whose event is not in the log."""

    @property
    def started(self) -> datetime:
        """When the call started (a time without a zone read as UTC: they sort together)."""
        record = self.call if self.call is not None else self.event
        assert record is not None
        return _aware(record.started_at)

    @property
    def seconds(self) -> float:
        """How long the call took (its execution, for a step without a call)."""
        if self.call is not None:
            took = _aware(self.call.finished_at) - _aware(self.call.started_at)
            return max(took.total_seconds(), 0.0)
        assert self.event is not None
        return self.event.duration_ms / 1000

    @property
    def session_id(self) -> str | None:
        if self.call is not None and self.call.session_id:
            return self.call.session_id
        return self.event.session_id if self.event is not None else None

    @property
    def sandbox_id(self) -> str | None:
        if self.call is not None and self.call.sandbox_id:
            return self.call.sandbox_id
        return self.event.sandbox_id if self.event is not None else None

    @property
    def failed(self) -> bool:
        """The call failed, or the code it ran did not end well."""
        if self.call is not None and self.call.failed:
            return True
        return self.event is not None and not self.event.ok


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def read_records(path: str | Path) -> tuple[list[tuple[int, Record]], list[str]]:
    """Every valid record of a run log with its line number, and a problem per bad line.

    Each problem reads ``file:line: what is wrong``. A last line without a newline that is not
    complete JSON is reported as cut off (a writer killed mid-line, or a log copied mid-write).
    """
    records: list[tuple[int, Record]] = []
    problems: list[str] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                records.append((number, _parse(raw)))
            except ValueError as exc:
                if not raw.endswith(b"\n") and isinstance(exc, _NotJson):
                    exc = ValueError(
                        "the last line is cut off: no newline at its end and incomplete JSON "
                        "(the log was copied while being written, or its writer was killed)"
                    )
                problems.append(f"{path}:{number}: {exc}")
    return records, problems


def read_log(
    path: str | Path, given: dict[str, ToolResult] | None = None
) -> tuple[list[Line], list[str]]:
    """Return the events of a run log with their line numbers, and a problem per bad line
    (``read_records``'). What an older log's TOOL_RESULT lines say the tools gave the model
    goes into ``given``, by execution id; TOOL_CALL records are left out (``steps_of``)."""
    records, problems = read_records(path)
    for _, record in records:
        if isinstance(record, ToolResult) and given is not None:
            given[record.execution_id] = record
    return [(n, r) for n, r in records if isinstance(r, SandboxEvent)], problems


def steps_of(records: list[tuple[int, Record]]) -> list[Step]:
    """The steps of a run, in the order the calls started (the log's order on a tie)."""
    events = {r.id: r for _, r in records if isinstance(r, SandboxEvent)}
    given = {r.execution_id: r for _, r in records if isinstance(r, ToolResult)}
    claimed: set[str] = set()
    steps: list[Step] = []
    for number, record in records:
        if isinstance(record, ToolCall):
            wanted = record.execution_id
            event = events.get(wanted) if wanted and wanted not in claimed else None
            if event is None and not wanted and record.outcome == "cancelled":
                event = _interrupted_by(record, events.values(), claimed)
            if event is not None:
                claimed.add(event.id)
            missing = bool(wanted) and event is None
            steps.append(Step(number, call=record, event=event, event_missing=missing))
    for number, record in records:
        if isinstance(record, SandboxEvent) and record.id not in claimed:
            steps.append(Step(number, event=record, given=given.get(record.id)))
    return sorted(steps, key=lambda step: (step.started, step.line))


def _interrupted_by(
    call: ToolCall, events: Iterable[SandboxEvent], claimed: set[str]
) -> SandboxEvent | None:
    """The execution a cancelled call started (its result, with the execution's id, never
    came): the first unclaimed one of the call's session that started while the call ran."""
    begun, ended = _aware(call.started_at), _aware(call.finished_at)
    for event in sorted(events, key=lambda event: _aware(event.started_at)):
        if (
            event.id not in claimed
            and call.session_id is not None
            and event.session_id == call.session_id
            and begun <= _aware(event.started_at) <= ended
        ):
            return event
    return None


_MODELS: dict[str, type[SandboxEvent] | type[ToolCall] | type[ToolResult] | type[NetworkGrant]] = {
    EVENT_TYPE: SandboxEvent,
    TOOL_CALL_TYPE: ToolCall,
    TOOL_RESULT_TYPE: ToolResult,
    GRANT_TYPE: NetworkGrant,
}


class _NotJson(ValueError):
    """A line that does not parse as JSON."""


def _parse(raw: bytes) -> Record:
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
    try:
        # A lone surrogate (valid as a JSON escape) cannot be written to a notebook: U+FFFD.
        data = scrub(json.loads(text))
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        hint = "; the line ends before the JSON does" if cut else ""
        raise _NotJson(
            f"not JSON ({exc.msg.removesuffix(' at')} at column {exc.colno}{hint})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an event object")  # noqa: TRY004
    kind = data.get("type")
    if kind == TOOL_CALL_TYPE and data.get("version") != TOOL_CALL_VERSION:
        version = repr(data.get("version"))[:20]
        raise ValueError(
            f"a {TOOL_CALL_TYPE} record of version {version}: this rewyn-kernel reads version "
            f"{TOOL_CALL_VERSION} (a newer one may read this log)"
        )
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None or not isinstance(kind, str):
        named = repr(kind)[:60] if "type" in data else "no type"
        raise ValueError(f"an event of {named}, not {EVENT_TYPE}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        more = f"; and {len(errors) - 3} more" if len(errors) > 3 else ""
        what = {EVENT_TYPE: "event", TOOL_RESULT_TYPE: "line"}.get(kind, "record")
        raise ValueError(f"not a valid {kind} {what}: {'; '.join(errors[:3])}{more}") from None
