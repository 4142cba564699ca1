"""TOOL_CALL records: every call an agent made to a tool, and what the model was given back.

A run log holds one ``SANDBOX_EXECUTED`` event per execution. Beside them, a tool that an agent
calls (``sandbox_tool``, the MCP server's tools) writes one ``ToolCall`` line per call, whatever
came of it: code that ran (its ``execution_id`` names the event), a file written or read, a
session reset or closed, a path refused, a call the policy denied, arguments that did not
validate. ``rewyn-kernel review`` turns each into a cell, in call order.

The record is versioned (``version``: 1) and bounded, so a log stays readable and a review
reproducible:

- ``text``, what the model read, keeps its head and tail within ``MAX_TEXT_CHARS``;
- each string of ``arguments`` keeps its head and tail within ``MAX_ARGUMENT_CHARS``, and the
  whole within ``MAX_ARGUMENTS_BYTES`` of JSON;
- a file given to the sandbox or read from it keeps its name, size and sha256, and its content
  up to ``MAX_FILE_BYTES`` (whole below that: what ``review --check`` writes again);
- an image given to the model keeps its type, size and sha256, and its data up to
  ``MAX_IMAGE_BYTES`` (at most ``MAX_IMAGES`` a call).

A log is untrusted input to whoever reads it (the agent's code could have written it): reading
validates every field, decodes every base64 payload and checks its size and hash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewyn_kernel.runtime.host.capture import excerpt

TOOL_CALL_TYPE: Literal["TOOL_CALL"] = "TOOL_CALL"
TOOL_CALL_VERSION: Literal[1] = 1
MAX_TEXT_CHARS = 64 * 1024
MAX_ARGUMENT_CHARS = 20_000
MAX_ARGUMENTS_BYTES = 256 * 1024
MAX_FILE_BYTES = 1024 * 1024
MAX_FILES = 8
MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_IMAGES = 8
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""Images a review may show as they are (never SVG: it can carry script)."""
_MARKER_CHARS = 64
"""Room for the ``[... N characters omitted ...]`` line that a shortened text carries."""
_DEPTH = 8
_ITEMS = 100

Outcome = Literal["ok", "error", "refused", "denied", "invalid_arguments", "cancelled"]
"""How a call ended. ok: the tool did its work (code that raised still ran: its event says how
it ended). error: the tool could not (no such file, no such session). refused: the tool would
not touch that path (outside the folder, a link, a protected path). denied: the permission
policy, or the person asked, said no. invalid_arguments: the arguments did not validate, so
nothing ran. cancelled: the client cancelled the call before its result (the code it had
started was interrupted: its event says how it ended)."""


def _b64(data: str, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not base64") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class LoggedFile(_Model):
    """A file a call gave the sandbox (``in``: write_file) or read from it (``out``)."""

    path: str = Field(max_length=4096, description="As the agent named it.")
    direction: Literal["in", "out"]
    """in: given to the sandbox (write_file); out: read from it."""
    size: int = Field(ge=0, description="Bytes in the whole file.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Of the whole file.")
    content: str = Field(
        max_length=(MAX_FILE_BYTES + 2) // 3 * 4,
        description="Base64 of its first bytes, at most MAX_FILE_BYTES: all of them when "
        "``complete``.",
    )

    @model_validator(mode="after")
    def _content_fits(self) -> LoggedFile:
        data = _b64(self.content, "content")
        if len(data) != min(self.size, MAX_FILE_BYTES):
            raise ValueError(f"content holds {len(data)} bytes of a {self.size}-byte file")
        if self.complete and _sha256(data) != self.sha256:
            raise ValueError("content does not match its sha256")
        return self

    @property
    def complete(self) -> bool:
        """The log holds every byte of the file."""
        return self.size <= MAX_FILE_BYTES

    def data(self) -> bytes:
        """The bytes the log holds (the whole file when ``complete``)."""
        return base64.b64decode(self.content)


class LoggedImage(_Model):
    """An image the model was given (a plot, a PNG it read)."""

    mime_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    """The image's type (never SVG)."""
    size: int = Field(ge=0)
    """Bytes in the image."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Of the image's bytes."""
    data: str | None = Field(
        default=None,
        max_length=(MAX_IMAGE_BYTES + 2) // 3 * 4,
        description="Base64 of the image; None when it was over MAX_IMAGE_BYTES.",
    )

    @model_validator(mode="after")
    def _data_fits(self) -> LoggedImage:
        if self.data is not None:
            raw = _b64(self.data, "image data")
            if len(raw) != self.size or _sha256(raw) != self.sha256:
                raise ValueError("image data does not match its size and sha256")
        return self


class ToolCall(_Model):
    """One call to a tool, in a run log: what was asked, what came of it, what the model read."""

    type: Literal["TOOL_CALL"] = TOOL_CALL_TYPE
    """Always TOOL_CALL."""
    version: Literal[1] = TOOL_CALL_VERSION
    """The record's version: 1."""
    id: str = Field(max_length=64, description="Unique id of this call.")
    tool: str = Field(min_length=1, max_length=64, description="The tool's name, as called.")
    session: str | None = Field(
        default=None, max_length=64, description="The session's name the agent gave (MCP)."
    )
    session_id: str | None = Field(
        default=None, max_length=64, description="The runtime session the call used, if any."
    )
    sandbox_id: str | None = Field(default=None, max_length=64)
    """The sandbox the call used, if any."""
    execution_id: str | None = Field(
        default=None, max_length=64, description="The SANDBOX_EXECUTED event of the code it ran."
    )
    keeps_state: bool | None = Field(
        default=None,
        description="Variables survive between the session's calls (False: each call runs in "
        "a fresh interpreter, files kept).",
    )
    timeout: float | None = Field(
        default=None, gt=0, description="The timeout the call asked for, in seconds."
    )
    session_effect: Literal["restarted", "closed"] | None = Field(
        default=None,
        description="What the call did to its session: its interpreter restarted (variables "
        "gone, files kept), or the session closed (its folder gone too).",
    )
    started_at: datetime
    """When the call started."""
    finished_at: datetime
    """When it ended."""
    arguments: dict[str, Any] = Field(description="As sent, bounded (see the module).")
    outcome: Outcome
    """How the call ended: ok, error, refused, denied, invalid_arguments or cancelled."""
    text: str = Field(max_length=MAX_TEXT_CHARS + _MARKER_CHARS, description="What it read.")
    text_truncated: bool = False
    """``text`` was shortened to its bound (head and tail kept)."""
    images: tuple[LoggedImage, ...] = Field(default=(), max_length=MAX_IMAGES)
    """The images the model was given (at most 8)."""
    images_left_out: int = Field(default=0, ge=0, description="Images past MAX_IMAGES.")
    files: tuple[LoggedFile, ...] = Field(default=(), max_length=MAX_FILES)
    """The files the call gave the sandbox or read from it (at most 8)."""

    @model_validator(mode="after")
    def _arguments_bounded(self) -> ToolCall:
        size = len(json.dumps(self.arguments, ensure_ascii=True))
        if size > MAX_ARGUMENTS_BYTES + _MARKER_CHARS:
            raise ValueError(f"arguments: {size:,} bytes of JSON, over {MAX_ARGUMENTS_BYTES:,}")
        return self

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"


# -- making records ----------------------------------------------------------------------------


def bounded_text(text: str) -> tuple[str, bool]:
    """``text`` within MAX_TEXT_CHARS (head and tail), and whether it was shortened."""
    return excerpt(text, MAX_TEXT_CHARS), len(text) > MAX_TEXT_CHARS


def bounded_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as JSON data within the record's bounds: long strings keep head and tail,
    long lists and objects their first items, deep nesting and other types a short note."""
    bounded = _bounded(dict(arguments), 0)
    assert isinstance(bounded, dict)
    size = len(json.dumps(bounded, ensure_ascii=True))
    if size > MAX_ARGUMENTS_BYTES:
        return {"[arguments left out]": f"{size:,} bytes of JSON, over {MAX_ARGUMENTS_BYTES:,}"}
    return bounded


def _bounded(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return excerpt(value, MAX_ARGUMENT_CHARS)
    if depth >= _DEPTH:
        return "[... nested too deep ...]"
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {excerpt(str(k), 200): _bounded(v, depth + 1) for k, v in items[:_ITEMS]}
        if len(items) > _ITEMS:
            out["[...]"] = f"{len(items) - _ITEMS} more keys"
        return out
    if isinstance(value, list | tuple):
        kept = [_bounded(item, depth + 1) for item in value[:_ITEMS]]
        return kept + ([f"[... {len(value) - _ITEMS} more items ...]"] * (len(value) > _ITEMS))
    return excerpt(f"[{type(value).__name__}] {value!r}", 200)


def logged_file(path: str, data: bytes, direction: Literal["in", "out"]) -> LoggedFile:
    """The record of ``data`` given to the sandbox at ``path`` (in) or read from it (out)."""
    return LoggedFile(
        path=excerpt(path, 4000),
        direction=direction,
        size=len(data),
        sha256=_sha256(data),
        content=base64.b64encode(data[:MAX_FILE_BYTES]).decode("ascii"),
    )


def logged_image(mime_type: str, data: str) -> LoggedImage | None:
    """The record of an image (base64 ``data``) the model was given; None for a type a review
    does not show as an image or data that is not base64."""
    if mime_type not in IMAGE_TYPES:
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return LoggedImage.model_validate(
        {
            "mime_type": mime_type,
            "size": len(raw),
            "sha256": _sha256(raw),
            "data": base64.b64encode(raw).decode("ascii") if len(raw) <= MAX_IMAGE_BYTES else None,
        }
    )
