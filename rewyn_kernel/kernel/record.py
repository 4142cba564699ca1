"""How a cell's SANDBOX_EXECUTED event is kept with the notebook.

Three places, one shape: ``execute_reply`` metadata under ``METADATA_KEY`` (``{"event": ...}``),
a small persisted ``display_data`` output of type ``EVENT_MIME`` with a one-line ``text/plain``
summary, and (for what sees the replies: ``rewyn-kernel run``, the JupyterLab extension) the
cell's metadata under ``METADATA_KEY`` as ``{"events": [...]}``, appended per execution. Also
the error a cell shows when its execution did not end well (``cell_error``; the review
notebooks name errors from the same ``ERROR_NAMES``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import SandboxResult

METADATA_KEY = "rewyn_kernel"
ERROR_NAMES = {
    "timeout": "TimeoutError",
    "crashed": "SandboxCrashed",
    "oom": "MemoryError",
    "start_failed": "SandboxStartFailed",
    "protocol_error": "SandboxProtocolError",
    "interrupted": "KeyboardInterrupt",
    "exit": "SystemExit",
}
"""The error name a cell shows for an ending that raised no exception in the code."""
EVENT_MIME = "application/vnd.rewyn.sandbox-event+json"
CELL_EVENTS_KEPT = 20
CELL_EVENTS_BUDGET = 16 * 1024
"""A cell's metadata keeps its latest CELL_EVENTS_KEPT events, and of those only as many of the
newest as fit in CELL_EVENTS_BUDGET characters of JSON (the newest always stays);
``events_dropped`` counts the others. JupyterLab sends a cell's metadata with every
execute_request, so an unbounded list would grow each request, and the notebook, with every
re-run. The run log keeps every event. The frontend extension (labextension/src/event.ts)
applies the same rule; tests/test_labextension.py runs both on the same cases."""

# The persisted output keeps what a reviewer needs to judge the run, not the output itself
# (that is in the cell already) nor the code (likewise).
_SUMMARY_FIELDS = (
    "id",
    "started_at",
    "finished_at",
    "duration_ms",
    "provider",
    "isolation",
    "spec",
    "code_hash",
    "code_bytes",
    "exit_code",
    "ending",
    "ok",
    "timed_out",
    "interrupted",
    "memory_exceeded",
    "state_lost",
    "sandbox_restarted",
    "message",
    "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated",
    "stderr_truncated",
)


def cell_error(result: SandboxResult, timeout: float | None) -> dict[str, Any] | None:
    """Return the error a cell shows for ``result`` (ename, evalue, traceback), or None.

    ``timeout`` is the kernel's limit, named in the text of a timed-out cell with how to raise it.
    """
    if result.ending in ("completed", "exit") and result.exit_code == 0:
        return None
    if result.ending == "interrupted":
        ename, evalue = "KeyboardInterrupt", ""
    elif result.error is not None and result.ending == "exception":
        ename, evalue = result.error.ename, result.error.evalue
    elif result.ending == "exit":
        ename, evalue = "SystemExit", str(result.exit_code)
    else:
        ename, evalue = ERROR_NAMES.get(result.ending, "SandboxError"), result.message
    traceback = list(result.error.traceback) if result.error else []
    if result.ending == "timeout":
        traceback.append(
            f"TimeoutError: the cell ran past the kernel's limit of {timeout:g} s. The sandbox "
            "was restarted and its state lost: run the cells this one needs again. Raise the "
            "limit with --SandboxKernel.timeout=SECONDS (or None for no limit)."
        )
    elif result.ending not in ("exception", "interrupted") and result.message:
        traceback.append(f"{ename}: {result.message}")
    if not traceback:
        traceback = [f"{ename}: {evalue}" if evalue else ename]
    return {"ename": ename, "evalue": evalue, "traceback": traceback}


def event_json(event: SandboxEvent) -> dict[str, Any]:
    """Return the whole event as JSON data (what reply and cell metadata hold)."""
    return event.model_dump(mode="json")


def event_summary(event: SandboxEvent) -> dict[str, Any]:
    """Return the fields of ``event`` that the persisted output keeps."""
    data = event_json(event)
    return {name: data[name] for name in _SUMMARY_FIELDS}


def summary_line(event: SandboxEvent) -> str:
    """One line for people: 'sandbox: exit 0 · 12 ms · subprocess (network isolated)'."""
    network = event.isolation.network if event.isolation else "unknown"
    parts = [f"exit {event.exit_code}", f"{event.duration_ms:,.0f} ms", f"{event.provider}"]
    parts[-1] += f" (network {network})"
    if event.ending not in ("completed", "exception", "exit"):
        parts.insert(0, event.ending.replace("_", " "))
    if event.stdout_truncated or event.stderr_truncated:
        parts.append(f"output truncated ({event.stdout_bytes + event.stderr_bytes:,} bytes)")
    if event.state_lost:
        parts.append("state lost before this cell")
    return "sandbox: " + " · ".join(parts)


def reply_event(reply: dict[str, Any]) -> dict[str, Any] | None:
    """Return the event an execute_reply carries in its metadata, or None."""
    event: dict[str, Any] | None = (reply.get("metadata") or {}).get(METADATA_KEY, {}).get("event")
    return event


def cell_record(metadata: dict[str, Any]) -> dict[str, Any]:
    """Return the cell's record under METADATA_KEY, replacing a value that is not an object."""
    if not isinstance(metadata.get(METADATA_KEY), dict):
        metadata[METADATA_KEY] = {}
    record: dict[str, Any] = metadata[METADATA_KEY]  # (nbformat stores a copy of what it gets)
    return record


def append_cell_event(record: dict[str, Any], event: dict[str, Any]) -> None:
    """Append ``event`` to a cell's record ({"events": [...]}) under the rule above.

    An event already there (by id) is not added twice; a malformed ``events`` starts afresh.
    """
    events = record.get("events")
    if not isinstance(events, list):
        events = []
    event_id = event.get("id")
    if isinstance(event_id, str) and any(
        isinstance(known, dict) and known.get("id") == event_id for known in events
    ):
        return
    events = [*events, event]
    keep = min(len(events), CELL_EVENTS_KEPT)
    size = 0
    for index in range(len(events) - 1, len(events) - 1 - keep, -1):
        size += len(json.dumps(events[index], ensure_ascii=False, separators=(",", ":")))
        if size > CELL_EVENTS_BUDGET and index < len(events) - 1:
            keep = len(events) - 1 - index
            break
    excess = len(events) - keep
    record["events"] = events[excess:]
    if excess:
        record["events_dropped"] = _count(record.get("events_dropped")) + excess


def _count(value: object) -> int:
    """A positive whole number as JavaScript reads one (JSON has one number type: 2.0 is 2)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or value != int(value) or not 0 < value < 2**53:
        return 0
    return int(value)


def event_output(event: SandboxEvent) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (data, metadata) of the persisted event output."""
    data = {EVENT_MIME: event_summary(event), "text/plain": summary_line(event)}
    return data, {METADATA_KEY: {"event_id": event.id}}
