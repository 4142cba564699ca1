"""How a cell's SANDBOX_EXECUTED event is kept with the notebook.

The ``execute_reply`` metadata under ``METADATA_KEY`` holds the whole event and its compact
record (``{"event": ..., "record": ...}``). What sees the replies (``rewyn-kernel run``, the
JupyterLab extension) keeps the record in the cell's metadata (``{"record": ...}``, the latest
execution's, replaced on each run: a notebook stays small and a re-run changes a few lines);
the whole events go to the run log. On request (``event_output``) a small persisted
``display_data`` output of type ``EVENT_MIME`` carries a summary too. Review notebooks keep
their recorded events in ``{"events": [...], "recorded": true}``. Also the error a cell shows
when its execution did not end well (``cell_error``; the review notebooks name errors from the
same ``ERROR_NAMES``), and the error output a traceback shown while a cell went on stands for
(``shown_error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
SHOWN_ERROR_MIME = "application/vnd.rewyn.shown-error+json"
"""How the sandbox's IPython sends a traceback it showed while the cell went on (``%run`` of a
failing script, an event callback): a display of ``{ename, evalue, traceback}`` (the worker's
ipython.py declares the same name)."""
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
    # One line per entry, as ipykernel sends them (a plain Python traceback's end in "\n").
    traceback = [line.rstrip("\n") for line in result.error.traceback] if result.error else []
    if result.ending == "timeout":
        what = (
            "The sandbox was restarted and its state lost: run the cells this one needs again."
            if result.sandbox_restarted
            else "The code was interrupted; its variables are kept."
        )
        traceback.append(
            f"TimeoutError: the cell ran past the kernel's limit of {timeout:g} s. {what} "
            "Raise the limit with `rewyn-kernel install --timeout SECONDS` (or `--timeout none`) "
            "and restart the kernel."
        )
    elif result.ending not in ("exception", "interrupted") and result.message:
        traceback.append(f"{ename}: {result.message}")
    if not traceback:
        traceback = [f"{ename}: {evalue}" if evalue else ename]
    return {"ename": ename, "evalue": evalue, "traceback": traceback}


def shown_error(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``error`` output a display of ``SHOWN_ERROR_MIME`` stands for, bounded as an Output
    widget's error is (``widgets.py``), or None for any other display. Nothing the code could
    not show anyway: its own exceptions carry any name, message and traceback text."""
    error = data.get(SHOWN_ERROR_MIME)
    if not isinstance(error, Mapping):
        return None
    lines = error.get("traceback")
    return {
        "ename": str(error.get("ename", ""))[:200],
        "evalue": str(error.get("evalue", ""))[:65536],
        "traceback": [str(line)[:16384] for line in lines[:200]] if isinstance(lines, list) else [],
    }


def event_json(event: SandboxEvent) -> dict[str, Any]:
    """Return the whole event as JSON data (what reply and cell metadata hold)."""
    return event.model_dump(mode="json")


def event_summary(event: SandboxEvent) -> dict[str, Any]:
    """Return the fields of ``event`` that the persisted output keeps."""
    data = event_json(event)
    return {name: data[name] for name in _SUMMARY_FIELDS}


def summary_line(event: SandboxEvent) -> str:
    """One line for people: 'sandbox: exit 0 · 12 ms · bubblewrap (network isolated, files
    isolated)'; a provider that leaves the host's files open says 'host files open'."""
    network = event.isolation.network if event.isolation else "unknown"
    files = event.isolation.files if event.isolation else "unknown"
    parts = [f"exit {event.exit_code}", f"{event.duration_ms:,.0f} ms", f"{event.provider}"]
    parts[-1] += (
        f" (network {network}, {'host files open' if files == 'open' else 'files ' + files})"
    )
    if event.ending not in ("completed", "exception", "exit"):
        parts.insert(0, event.ending.replace("_", " "))
    if event.stdout_truncated or event.stderr_truncated:
        parts.append(f"output truncated ({event.stdout_bytes + event.stderr_bytes:,} bytes)")
    if event.state_lost:
        parts.append("state lost before this cell")
    return "sandbox: " + " · ".join(parts)


RECORD_FLAGS = (
    "timed_out",
    "interrupted",
    "memory_exceeded",
    "state_lost",
    "sandbox_restarted",
    "stdout_truncated",
    "stderr_truncated",
)
RECORD_MESSAGE_CHARS = 80


def compact_record(event: SandboxEvent) -> dict[str, Any]:
    """What a cell keeps of its latest execution: how it ended, where, under which limits and
    how long, the sizes of its code and output, and the code's hash (its first 128 bits: what
    ties the record to the source and to the whole event in the run log); not the code or
    output, which the cell has. Under 400
    bytes of JSON (the message is cut; flags appear only when set). Shaped as the event's
    summary, so the status line reads either."""
    record: dict[str, Any] = {
        "id": event.id,
        "ending": event.ending,
        "exit_code": event.exit_code,
        "duration_ms": round(event.duration_ms, 1),
        "provider": event.provider[:64],
        "execution_count": event.execution_count,
        "isolation": {
            "network": event.isolation.network if event.isolation else "unknown",
            "files": event.isolation.files if event.isolation else "unknown",
        },
        "spec": {name: event.spec.get(name) for name in ("timeout", "memory_limit_mb", "network")},
        "code_hash": event.code_hash[:32],
    }
    for flag in RECORD_FLAGS:
        if getattr(event, flag):
            record[flag] = True
    # (what the status line's details show: the sizes of what the cell printed and ran)
    record.update(
        stdout_bytes=event.stdout_bytes,
        stderr_bytes=event.stderr_bytes,
        code_bytes=event.code_bytes,
    )
    if event.message and not event.ok:
        message = event.message
        if len(message) > RECORD_MESSAGE_CHARS:
            message = message[: RECORD_MESSAGE_CHARS - 1] + "…"
        record["message"] = message
    files = event.files
    if files is not None and any(files.counts.get(kind) for kind in FILE_KINDS):
        record["files"] = {
            kind: list(getattr(files, kind)) for kind in FILE_KINDS if files.counts.get(kind)
        }
        record["files"]["counts"] = {k: files.counts[k] for k in FILE_KINDS if files.counts.get(k)}
    return _fit(record)


FILE_KINDS = ("created", "changed", "deleted")
MAX_RECORD_BYTES = 400
MAX_FILES_BYTES = 320
"""A record may be this much longer where its cell changed files in its workspace: the paths
it created, changed and deleted (as many as fit; the counts are always whole)."""


def _size(record: dict[str, Any]) -> int:
    return len(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode())


def _fit(record: dict[str, Any]) -> dict[str, Any]:
    """Within MAX_RECORD_BYTES (and MAX_FILES_BYTES for the files' paths): the paths cut
    first, then the message shortened, then the byte counts dropped."""
    files = record.get("files")
    if files is not None:
        while _size({"files": files}) > MAX_FILES_BYTES:
            longest = max(FILE_KINDS, key=lambda kind: len(files.get(kind, [])))
            if not files.get(longest):
                break
            files[longest].pop()
        record.pop("files")
    while _size(record) > MAX_RECORD_BYTES and len(record.get("message", "")) > 24:
        record["message"] = record["message"][: len(record["message"]) - 17] + "…"
    for name in ("code_bytes", "stdout_bytes", "stderr_bytes", "message"):
        if _size(record) > MAX_RECORD_BYTES:
            record.pop(name, None)
    if files is not None:
        record["files"] = files
    return record


def set_cell_record(record: dict[str, Any], compact: dict[str, Any]) -> bool:
    """Make ``compact`` the cell's ``record`` (other keys kept); False when it is already."""
    known = record.get("record")
    if isinstance(known, dict) and known.get("id") == compact.get("id"):
        return False
    record["record"] = compact
    return True


def reply_record(reply: dict[str, Any]) -> dict[str, Any] | None:
    """Return the compact record an execute_reply carries in its metadata, or None."""
    found = (reply.get("metadata") or {}).get(METADATA_KEY, {}).get("record")
    return found if isinstance(found, dict) else None


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


def event_output(event: SandboxEvent) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (data, metadata) of the persisted event output."""
    data = {EVENT_MIME: event_summary(event), "text/plain": summary_line(event)}
    return data, {METADATA_KEY: {"event_id": event.id}}
