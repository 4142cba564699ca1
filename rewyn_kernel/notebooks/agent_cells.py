"""What an agent's cell keeps in its metadata, and reading it back.

Under the kernel's key (``rewyn_kernel``, beside the record of the cell's latest execution):

    "agent": {
      "name": str,          the agent (the MCP client's name)
      "call": str,          the MCP call's id (its TOOL_CALL record in the run log)
      "number": int,        the call's number in that run log ("call N" in its result and review)
      "client": int,        the agent's client id in the shared document's awareness (the page
                            sees the agent gone when it leaves)
      "state": one of STATES,
      "risk": str, "reason": str,       on a cell that asked for approval
      "code": str,          on a pending cell: the code as the agent proposed it
      "note": str,          the person's note on a rejection
      "decision": {"action": "reject", "note": str}   the person's, from the extension
    }

The notebook is the person's, and anything that edits it can write any JSON there: every field
is read through checks, bounded, and a malformed entry reads as no agent at all.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from rewyn_kernel.kernel.record import METADATA_KEY

AGENT_KEY = "agent"
State = Literal[
    "running",
    "done",
    "interrupted",
    "pending",
    "approved",
    "edited",
    "rejected",
    "expired",
    "withdrawn",
]
"""``withdrawn``: a pending cell whose call ended before the person decided (the agent
cancelled it, or went away): nothing runs it for the agent any more."""
STATES: tuple[State, ...] = typing.get_args(State)
MAX_NAME = 100
MAX_REASON = 2_000
MAX_NOTE = 2_000


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class AgentMark:
    """An agent's cell, as its metadata says."""

    name: str
    call: str
    state: State
    risk: str | None = None
    reason: str | None = None
    code: str | None = None
    note: str | None = None
    rejected: str | None = None
    """The person's rejection note, where they rejected it and the server has not yet said so
    in ``state`` ("" for no note)."""
    number: int | None = None
    client: int | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "call": self.call, "state": self.state}
        for key in ("number", "client", "risk", "reason", "code", "note"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def agent_mark(metadata: Any) -> AgentMark | None:
    """The agent mark of a cell's metadata, or None (no mark, or one that does not read)."""
    if not isinstance(metadata, dict):
        return None
    holder = metadata.get(METADATA_KEY)
    entry = holder.get(AGENT_KEY) if isinstance(holder, dict) else None
    if not isinstance(entry, dict):
        return None
    name, call, state = entry.get("name"), entry.get("call"), entry.get("state")
    if not (isinstance(name, str) and isinstance(call, str) and state in STATES):
        return None

    def text(key: str, limit: int) -> str | None:
        value = entry.get(key)
        return clip(value, limit) if isinstance(value, str) else None

    decision = entry.get("decision")
    rejected = None
    if isinstance(decision, dict) and decision.get("action") == "reject":
        note = decision.get("note")
        rejected = clip(note, MAX_NOTE) if isinstance(note, str) else ""
    return AgentMark(
        name=clip(name, MAX_NAME),
        call=clip(call, 64),
        state=state,
        risk=text("risk", 20),
        reason=text("reason", MAX_REASON),
        code=entry.get("code") if isinstance(entry.get("code"), str) else None,
        note=text("note", MAX_NOTE),
        rejected=rejected,
        number=_whole(entry.get("number")),
        client=_whole(entry.get("client")),
    )


def _whole(value: Any) -> int | None:
    """A whole number the shared document kept (as a float, maybe), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() and 0 <= value < 2**53 else None


def record_of(metadata: Any) -> dict[str, Any] | None:
    """The record of the cell's latest execution (the kernel's compact record), or None."""
    if not isinstance(metadata, dict):
        return None
    holder = metadata.get(METADATA_KEY)
    record = holder.get("record") if isinstance(holder, dict) else None
    if isinstance(record, dict) and isinstance(record.get("id"), str):
        return record
    return None


def source_of(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat may keep it as a list of lines)."""
    source = cell.get("source")
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def author(metadata: Any) -> str:
    """Who wrote a cell, in words: "agent NAME", or "person"."""
    mark = agent_mark(metadata)
    return f"agent {mark.name}" if mark is not None else "person"


def count_of(cell: dict[str, Any]) -> int | None:
    """A cell's execution count (the shared document keeps numbers as floats)."""
    count = cell.get("execution_count")
    if isinstance(count, bool) or not isinstance(count, int | float):
        return None
    return int(count) if float(count).is_integer() and count > 0 else None
