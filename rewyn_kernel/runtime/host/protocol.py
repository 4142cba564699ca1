"""The channel between the host and the worker: frame models, codec and hard size bounds.

Everything the worker sends is hostile input. Each frame is ``>II`` (header length, payload
length), a JSON header and a raw payload; the host checks both lengths before it reads a byte of
either, validates the header against the models below, and replaces unpaired surrogates so no
string from the sandbox can break an encoder downstream. Anything else is a ``ProtocolError``,
which ends that sandbox (never the host).
"""

from __future__ import annotations

import json
import os
import struct
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from rewyn_kernel.errors import ProtocolError

HEADER = struct.Struct(">II")
MAX_HEADER_BYTES = 16 * 1024 * 1024
"""Largest JSON header accepted: rich outputs (an inline PNG) travel in headers."""
MAX_PAYLOAD_BYTES = 1024 * 1024
"""Largest raw payload accepted; the worker sends output in chunks of 64 KiB."""
MAX_JSON_CONTAINERS = 100_000
"""Most objects and arrays one header may hold: parsed JSON can take many times its size in
memory, and nesting can exhaust the parser's recursion."""

BOOTSTRAP = (
    "import sys,struct;b=sys.stdin.buffer;n,=struct.unpack('>I',b.read(4));"
    "exec(compile(b.read(n),'<rewyn-worker>','exec'))"
)
"""The one line a sandbox runs: read the worker's length-prefixed source from stdin, run it.

The host sends nothing more until the worker says ``ready``, so the buffered read above can
never swallow a frame meant for the worker's own reader.
"""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReadyFrame(_Frame):
    t: Literal["ready"]
    pid: int
    python: Annotated[str, Field(max_length=64)]
    implementation: Annotated[str, Field(max_length=64)]
    executable: Annotated[str, Field(max_length=4096)]
    platform: Annotated[str, Field(max_length=64)]


class OutFrame(_Frame):
    t: Literal["out"]
    s: Literal["stdout", "stderr"]


class DisplayFrame(_Frame):
    t: Literal["display"]
    data: dict[str, Any]
    metadata: dict[str, Any]


class ResultFrame(_Frame):
    t: Literal["result"]
    data: dict[str, Any]
    metadata: dict[str, Any]
    count: int


class ErrorFrame(_Frame):
    t: Literal["error"]
    ename: Annotated[str, Field(max_length=4096)]
    evalue: str
    traceback: list[str]


class DoneFrame(_Frame):
    t: Literal["done"]
    id: str
    exit_code: int
    status: Literal["ok", "error", "exit", "interrupted", "crashed", "protocol_error"]
    signal: int | None = None
    oom: bool = False
    detail: Annotated[str, Field(max_length=4096)] = ""


class InputRequestFrame(_Frame):
    t: Literal["input_request"]
    prompt: str
    password: bool
    id: int | None = None
    main: bool = False


class CompleteReplyFrame(_Frame):
    t: Literal["complete_reply"]
    id: str | None
    matches: list[str]
    cursor_start: int
    cursor_end: int


class InspectReplyFrame(_Frame):
    t: Literal["inspect_reply"]
    id: str | None
    found: bool
    data: dict[str, str]


WorkerFrame = Annotated[
    ReadyFrame
    | OutFrame
    | DisplayFrame
    | ResultFrame
    | ErrorFrame
    | DoneFrame
    | InputRequestFrame
    | CompleteReplyFrame
    | InspectReplyFrame,
    Field(discriminator="t"),
]


@cache
def _frame_adapter() -> TypeAdapter[WorkerFrame]:
    """Built on first use: it costs ~15 ms, which a kernel's start-up need not pay."""
    return TypeAdapter(WorkerFrame)


class TruncatedFrameError(ProtocolError):
    """The channel ended in the middle of a frame (usually: the sandbox process died)."""


def scrub(value: Any) -> Any:
    """Return JSON data with every unpaired surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, dict):
        return {scrub(key): scrub(item) for key, item in value.items()}
    return value


def encode_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """Encode one host-to-worker frame."""
    body = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return HEADER.pack(len(body), len(payload)) + body + payload


def decode_header(body: bytes) -> WorkerFrame:
    """Validate one frame header from the worker, or raise ProtocolError."""
    if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
        raise ProtocolError(
            f"the sandbox sent a frame with more than {MAX_JSON_CONTAINERS} JSON objects"
        )
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, huge ints
        raise ProtocolError(f"the sandbox sent a frame that is not JSON ({exc})") from exc
    try:
        return _frame_adapter().validate_python(scrub(raw))
    except RecursionError as exc:
        raise ProtocolError("the sandbox sent a frame nested too deeply") from exc
    except ValidationError as exc:
        summary = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<frame>'}: {err['msg']}"
            for err in exc.errors()[:3]
        )
        raise ProtocolError(f"the sandbox sent an invalid frame ({summary})") from exc


def read_exact(fd: int, size: int) -> bytes | None:
    """Read exactly ``size`` bytes from ``fd``; None at a clean end of stream before any byte."""
    parts: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            if parts:
                raise TruncatedFrameError("the sandbox's channel ended in the middle of a frame")
            return None
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def read_frame(fd: int) -> tuple[WorkerFrame, bytes, int] | None:
    """Read and validate one frame: (frame, payload, header size in bytes); None when the
    channel has ended cleanly."""
    head = read_exact(fd, HEADER.size)
    if head is None:
        return None
    header_len, payload_len = HEADER.unpack(head)
    if header_len > MAX_HEADER_BYTES or payload_len > MAX_PAYLOAD_BYTES:
        raise ProtocolError(
            f"the sandbox announced a frame of {header_len} + {payload_len} bytes, over the "
            f"limits of {MAX_HEADER_BYTES} + {MAX_PAYLOAD_BYTES}"
        )
    body = read_exact(fd, header_len) if header_len else b""
    if body is None:
        raise TruncatedFrameError("the sandbox's channel ended in the middle of a frame")
    frame = decode_header(body)
    payload = b""
    if payload_len:
        payload = read_exact(fd, payload_len) or b""
        if len(payload) != payload_len:
            raise TruncatedFrameError("the sandbox's channel ended in the middle of a frame")
    if payload and not isinstance(frame, OutFrame):
        raise ProtocolError(f"the sandbox sent a payload with a {frame.t!r} frame")
    return frame, payload, header_len


WORKER_PARTS = ("wire.py", "frontend.py", "executor.py", "main.py")
"""The worker program, in the order its parts are put together (each uses the ones before)."""
STRIP_MARK = "# worker-source: strip"


@cache
def worker_source() -> str:
    """Return the worker program's source text (read once per process).

    The parts are files of their own for people and linters; in the sandbox they are one
    program, so the imports between them (marked ``worker-source: strip``) are dropped.
    """
    package = resources.files("rewyn_kernel.runtime.worker")
    kept: list[str] = []
    for name in WORKER_PARTS:
        in_import = False
        for line in package.joinpath(name).read_text("utf-8").splitlines():
            if in_import:  # the rest of a parenthesised import marked for stripping
                in_import = line.strip() != ")"
            elif STRIP_MARK in line:
                in_import = line.split("#", 1)[0].rstrip().endswith("(")
            else:
                kept.append(line)
        kept.append("")
    return "\n".join(kept)


def worker_program(config: dict[str, Any]) -> bytes:
    """Return the length-prefixed program that ``BOOTSTRAP`` reads: the worker plus its config."""
    source = worker_source() + f"\nmain(json.loads({json.dumps(json.dumps(config))}))\n"
    data = source.encode("utf-8")
    return struct.pack(">I", len(data)) + data
