"""What a call gives the model: a sandbox result within the output budget, as text, images and
structured content, and which files the code wrote.

Everything here reads hostile input (the code's output, the scratch directory the code owns)
and bounds it: text to the budget (head and tail kept, the whole output saved to a file in
scratch whose path the result names), images by count, size and a real base64 check, the
scratch walk by entries and depth, never through a link.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field

from rewyn_kernel.runtime.contract import SandboxFiles
from rewyn_kernel.runtime.sandbox import Ending, SandboxResult

OUTPUTS_DIR = ".rewyn-mcp/outputs"
"""Where the whole output of a shortened result is saved."""
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGES = 8
MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_LISTED_FILES = 100
MAX_SCANNED = 5_000
MAX_DEPTH = 8


class ErrorOut(BaseModel):
    ename: str
    evalue: str
    traceback: str


class RunOutput(BaseModel):
    """The structured result of ``run_python`` (its ``outputSchema``)."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="The code ran to its end: exit 0, no exception, no timeout.")
    exit_code: int
    ending: str = Field(description=", ".join(get_args(Ending)))
    message: str = Field(description="What happened, in words (short).")
    timed_out: bool
    state_lost: bool = Field(
        description="This call ran in a fresh interpreter: earlier variables and imports are gone."
    )
    sandbox_restarted: bool = Field(
        description="The code did not stop and was killed: the next call starts afresh."
    )
    duration_ms: float
    stdout: str
    stderr: str
    error: ErrorOut | None
    outputs: list[str] = Field(description="The text form of each display and the last value.")
    images: int = Field(description="How many images come with this result as image content.")
    truncated: dict[str, dict[str, int]] = Field(
        description="Per shortened field: shown_chars, omitted_chars (and written_bytes)."
    )
    whole_output: dict[str, str] = Field(
        description="Per shortened stream: the file in the session's directory holding all of it."
    )
    files_written: list[str] = Field(
        description="Files the call created or changed in the session's folder (its workspace, "
        "where the server has one: published there as the call ended)."
    )
    session: str
    execution_count: int
    call: int | None = Field(
        default=None,
        description="This call's number among the server's calls ('call N' in the run log's "
        "review).",
    )
    note: str | None = Field(default=None, description="Something the agent should know.")


# -- files --------------------------------------------------------------------------------------

Snapshot = dict[str, tuple[int, int]]


def snapshot(files: SandboxFiles) -> Snapshot:
    """The regular files of a session's scratch (path -> size, mtime), bounded, without
    following a link, wherever the provider keeps them; hidden folders (caches, our own saved
    outputs) left out."""
    return files.facts(limit=MAX_SCANNED, depth=MAX_DEPTH, hidden_folders=False)


def written(before: Snapshot, after: Snapshot) -> list[str]:
    """The files new or changed from ``before`` to ``after``, by name, at most a hundred."""
    return sorted(path for path, facts in after.items() if before.get(path) != facts)[
        :MAX_LISTED_FILES
    ]


# -- images -------------------------------------------------------------------------------------


def images_of(result: SandboxResult) -> tuple[list[tuple[str, str]], int]:
    """(MIME type, base64 data) of the images among the result's outputs, checked and bounded;
    and how many were left out (too many, too big, or not base64)."""
    found: list[tuple[str, str]] = []
    left_out = 0
    for output in result.outputs:
        kind = next((kind for kind in IMAGE_TYPES if kind in output.data), None)
        if kind is None:
            continue
        clean = checked_image(output.data[kind])
        if clean is None or len(found) >= MAX_IMAGES:
            left_out += 1
            continue
        found.append((kind, clean))
    return found, left_out


def checked_image(data: Any) -> str | None:
    """An image's base64 (a string, or a list of strings as nbformat splits it), whitespace
    taken out, if it is real base64 of at most MAX_IMAGE_BYTES that is not empty; else None."""
    if isinstance(data, list):
        data = "".join(part for part in data if isinstance(part, str))
    if not isinstance(data, str) or len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        return None
    clean = "".join(data.split())
    try:
        raw = base64.b64decode(clean, validate=True)
    except (ValueError, binascii.Error):
        return None
    return clean if raw else None


# -- the result ---------------------------------------------------------------------------------


def structured(
    result: SandboxResult,
    payload: dict[str, Any],
    *,
    session: str,
    execution_count: int,
    images: int,
    whole_output: dict[str, str],
    files_written: list[str],
    note: str | None,
    call: int | None = None,
) -> RunOutput:
    """The structured result: ``payload`` is ``result`` within the budget (``result_payload``)."""
    error = payload["error"]
    return RunOutput(
        ok=payload["ok"],
        exit_code=payload["exit_code"],
        ending=payload["ending"],
        message=payload["message"],
        timed_out=payload["timed_out"],
        state_lost=payload["state_lost"],
        sandbox_restarted=result.sandbox_restarted,
        duration_ms=payload["duration_ms"],
        stdout=payload["stdout"],
        stderr=payload["stderr"],
        error=ErrorOut(**error) if error else None,
        outputs=payload["outputs"],
        images=images,
        truncated=payload["truncated"],
        whole_output=whole_output,
        files_written=files_written,
        session=session,
        execution_count=execution_count,
        call=call,
        note=note,
    )


def shortened_streams(result: SandboxResult, payload: dict[str, Any]) -> dict[str, str]:
    """The streams ``payload`` shortened, and their whole text (as the sandbox kept it)."""
    truncated: dict[str, Any] = payload["truncated"]
    return {name: getattr(result, name) for name in ("stdout", "stderr") if name in truncated}


def as_text(out: RunOutput) -> str:
    """The result as the model reads it: a status line, then each non-empty part."""
    status = "ok" if out.ok else out.ending
    head = f"[{status}] call {out.call} · " if out.call is not None else f"[{status}] "
    head += f"exit {out.exit_code} · {out.duration_ms:g} ms · session {out.session!r}"
    head += f" [{out.execution_count}]"
    parts = [head]
    if out.note:
        parts.append(f"note: {out.note}")
    if not out.ok or out.truncated:
        parts.append(f"message: {out.message}")
    if out.state_lost:
        parts.append("state lost: this ran in a fresh interpreter; earlier variables are gone")
    if out.sandbox_restarted:
        parts.append(
            "state lost: the code did not stop when interrupted and was killed; the next call "
            "starts a fresh interpreter (files stay)"
        )
    parts += output_parts(out.stdout, out.stderr, out.error, out.outputs, out.images)
    if out.whole_output:
        where = ", ".join(f"{name}: {path}" for name, path in out.whole_output.items())
        parts.append(f"whole output saved (read it with read_file): {where}")
    if out.files_written:
        parts.append("files written: " + ", ".join(out.files_written))
    return "\n".join(parts)


def output_parts(
    stdout: str, stderr: str, error: ErrorOut | None, outputs: list[str], images: int
) -> list[str]:
    """What the code printed, raised and displayed, each non-empty part under its heading, as
    the model reads it (the notebook server's results too)."""
    parts = []
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if text:
            parts.append(f"--- {name} ---\n{text.rstrip(chr(10))}")
    if error is not None:
        parts.append(f"--- error: {error.ename} ---\n{error.traceback.rstrip()}")
    for index, text in enumerate(outputs):
        parts.append(f"--- output {index} ---\n{text.rstrip()}")
    if images:
        parts.append(f"({images} image{'s' if images > 1 else ''} below)")
    return parts
