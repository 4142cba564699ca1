"""A notebook cell's outputs as the agent's result: text within the budget, images, and how
the execution (or the person) ended it.

The outputs are the kernel's (the sandbox's, filtered by the kernel) or, for a cell the person
ran, the notebook's as their JupyterLab wrote them: either way hostile input, read through
checks and bounded like the plain server's results (``mcp/results.py``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rewyn_kernel.mcp.results import (
    IMAGE_TYPES,
    MAX_IMAGES,
    ErrorOut,
    checked_image,
    output_parts,
)
from rewyn_kernel.runtime.tool import shorten

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
Approval = Literal["not asked", "approved", "edited", "rejected", "expired"]


class CellRef(BaseModel):
    index: int
    id: str


class LiveOutput(BaseModel):
    """The structured result of ``run_python`` in a notebook (its ``outputSchema``)."""

    model_config = ConfigDict(extra="forbid")

    ran: bool = Field(description="The code ran (in the notebook's kernel).")
    ok: bool = Field(description="It ran to its end: no exception, no timeout, no interrupt.")
    ending: str = Field(
        description="completed, exception, timeout, interrupted, rejected, expired, lost, ..."
    )
    message: str = Field(description="What happened, in words (short).")
    interrupted_by: Literal["person", "agent"] | None = Field(
        default=None, description="Who interrupted the execution, where it was interrupted."
    )
    approval: Approval = Field(
        description="not asked; approved (run as proposed); edited (the person changed the code "
        "and ran it: see code); rejected (see note); expired (nobody decided in time)"
    )
    code: str | None = Field(
        default=None, description="The code as it ran, where the person edited it."
    )
    note: str | None = Field(default=None, description="The person's note, or ours.")
    call: int | None = Field(
        default=None,
        description="This call's number among the server's calls: the cell's metadata and the "
        "run log's review say 'call N' too.",
    )
    cell: CellRef | None = Field(description="The notebook cell the call became.")
    execution_count: int | None
    duration_ms: float | None
    stdout: str
    stderr: str
    error: ErrorOut | None
    outputs: list[str] = Field(description="The text form of each display and the last value.")
    images: int
    truncated: dict[str, int] = Field(description="Per shortened field: characters left out.")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(part for part in value if isinstance(part, str))
    return value if isinstance(value, str) else ""


def read_outputs(outputs: Any, budget: int) -> tuple[dict[str, Any], list[tuple[str, str]], int]:
    """The parts of a cell's outputs (nbformat's shape) for a result: streams, error, texts;
    the images (MIME type, base64), checked; and how many images were left out."""
    stdout: list[str] = []
    stderr: list[str] = []
    texts: list[str] = []
    error: ErrorOut | None = None
    images: list[tuple[str, str]] = []
    left_out = 0
    for output in outputs if isinstance(outputs, list) else []:
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            (stderr if output.get("name") == "stderr" else stdout).append(_text(output.get("text")))
        elif kind == "error":
            traceback = output.get("traceback")
            lines = traceback if isinstance(traceback, list) else []
            error = ErrorOut(
                ename=_text(output.get("ename"))[:200],
                evalue=_text(output.get("evalue"))[:2000],
                traceback=ANSI.sub("", "\n".join(line for line in lines if isinstance(line, str))),
            )
        elif kind in ("display_data", "execute_result"):
            data = output.get("data")
            if not isinstance(data, dict):
                continue
            image = next((kind for kind in IMAGE_TYPES if kind in data), None)
            if image is not None:
                checked = checked_image(data[image])
                if checked is None or len(images) >= MAX_IMAGES:
                    left_out += 1
                else:
                    images.append((image, checked))
            if "text/plain" in data:
                texts.append(_text(data["text/plain"]))
    truncated: dict[str, int] = {}
    share = max(budget // 3, 500)
    parts: dict[str, Any] = {}
    for name, value in (("stdout", "".join(stdout)), ("stderr", "".join(stderr))):
        parts[name], cut = shorten(ANSI.sub("", value), share)
        if cut:
            truncated[name] = cut
    kept = []
    for index, text in enumerate(texts[:50]):
        shown, cut = shorten(text, max(share // 4, 200))
        kept.append(shown)
        if cut:
            truncated[f"output {index}"] = cut
    parts["outputs"] = kept
    if error is not None:
        traceback, cut = shorten(error.traceback, share)
        if cut:
            truncated["traceback"] = cut
        error = ErrorOut(ename=error.ename, evalue=error.evalue, traceback=traceback)
    parts["error"] = error
    parts["truncated"] = truncated
    return parts, images, left_out


def as_text(out: LiveOutput) -> str:
    """The result as the model reads it: a status line, then each non-empty part."""
    status = "ok" if out.ok else out.ending
    where = f"cell {out.cell.index}" if out.cell is not None else "no cell"
    head = (
        f"[{status}] call {out.call} · {where}" if out.call is not None else f"[{status}] {where}"
    )
    if out.execution_count is not None:
        head += f" · [{out.execution_count}]"
    if out.duration_ms is not None:
        head += f" · {out.duration_ms:g} ms"
    parts = [head]
    if out.approval != "not asked":
        parts.append(f"approval: {out.approval}")
    if not out.ok:
        parts.append(f"message: {out.message}")
    if out.note:
        parts.append(f"note: {out.note}")
    if out.code is not None:
        parts.append(f"--- the code as the person ran it ---\n{out.code}")
    parts += output_parts(out.stdout, out.stderr, out.error, out.outputs, out.images)
    return "\n".join(parts)
