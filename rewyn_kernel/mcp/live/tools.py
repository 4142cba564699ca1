"""The tools of an agent attached to a notebook: ``run_python`` (a cell of the notebook, run in
its sandbox kernel or put to the person first), ``list_cells`` and ``read_cell`` (what the person
and other agents did there, bounded)."""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations.)
import asyncio
import contextlib
import time
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from rewyn_kernel.mcp.live.attachment import Attachment
from rewyn_kernel.mcp.live.jupyter import JupyterError
from rewyn_kernel.mcp.live.outcome import LiveOutput, as_text, read_outputs
from rewyn_kernel.mcp.record import BadArguments, Denied, notes
from rewyn_kernel.mcp.run_tool import MAX_CODE_CHARS, PROGRESS_EVERY
from rewyn_kernel.notebooks.agent_cells import (
    agent_mark,
    author,
    clip,
    count_of,
    record_of,
    source_of,
)
from rewyn_kernel.runtime.tool import shorten
from rewyn_kernel.tools import MaxRiskLevel, Tool

MAX_LISTED_CELLS = 200
PREVIEW_CHARS = 300
MAX_SOURCE_CHARS = 50_000


def agent_name(ctx: Context) -> str:
    """The agent's name as its MCP client gives it (its client info), printable and short."""
    with contextlib.suppress(Exception):
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        if info is not None:
            name = "".join(ch for ch in (info.name or "") if ch.isprintable()).strip()
            if name:
                return clip(name, 100)
    return "agent"


class CellSummary(BaseModel):
    index: int
    id: str
    cell_type: str
    author: str = Field(description='"person" or "agent NAME"')
    state: str | None = Field(description="An agent cell's state (pending, done, rejected...).")
    execution_count: int | None
    ending: str | None = Field(description="How its latest sandboxed execution ended.")
    preview: str = Field(description="The start of its source.")
    outputs: int


class CellList(BaseModel):
    path: str
    cells: list[CellSummary]
    total: int


class CellRead(BaseModel):
    index: int
    id: str
    cell_type: str
    author: str
    state: str | None
    execution_count: int | None
    source: str
    stdout: str
    stderr: str
    outputs: list[str]
    error: str | None
    truncated: dict[str, int]


def add_live_tools(
    server: MCPServer[Any], attachment: Attachment, *, policy: MaxRiskLevel, budget: int
) -> None:
    @server.tool(
        title="Run Python in the notebook",
        description=(
            f"Runs Python as a new cell of the notebook {attachment.path}, in its sandboxed "
            "kernel, the one the person has open: variables are shared with the person's cells "
            "and kept between calls. The person sees the cell appear and run, and may interrupt "
            "it; where the policy asks, the cell waits for the person to run, edit or reject "
            "it, and the result says which. Long output is shortened (head and tail)."
        ),
        annotations=ToolAnnotations(
            title="Run Python in the notebook's sandbox kernel",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )
    async def run_python(
        code: Annotated[
            str,
            Field(description="Python source, like a notebook cell.", max_length=MAX_CODE_CHARS),
        ],
        ctx: Context,
        timeout: Annotated[
            float | None,
            Field(description="Seconds before the code is stopped (within the kernel's).", gt=0),
        ] = None,
    ) -> Annotated[CallToolResult, LiveOutput]:
        agent = agent_name(ctx)
        noted = notes()
        noted.timeout = timeout
        try:
            _, kernel, risk = await attachment.ready(agent)
        except JupyterError as exc:
            raise BadArguments(str(exc)) from None
        noted.session, noted.session_id = attachment.path, kernel.kernel_id
        judged = Tool(
            name="run_python",
            description="run_python in the notebook",
            input_schema={"type": "object"},
            risk_level=risk.level,
            risk_reason="; ".join(risk.reasons),
            handler=lambda arguments: {},
        )
        decision = policy.check(judged, {"code": code})
        if not decision.allowed:
            raise Denied(f"denied: {decision.reason}")
        started = time.monotonic()

        async def progress() -> None:
            while True:
                await asyncio.sleep(PROGRESS_EVERY)
                elapsed = time.monotonic() - started
                what = "waiting for the person" if decision.requires_approval else "running"
                with contextlib.suppress(Exception):
                    await ctx.report_progress(elapsed, message=f"{what} for {elapsed:.0f} s")

        ticker = asyncio.ensure_future(progress())
        try:
            if decision.requires_approval:
                out, images = await attachment.propose(
                    agent,
                    noted.call_id,
                    code,
                    risk=risk,
                    reason=decision.reason,
                    budget=budget,
                    number=noted.number,
                )
            else:
                out, images = await attachment.run(
                    agent, noted.call_id, code, timeout, budget, number=noted.number
                )
        except JupyterError as exc:
            raise BadArguments(str(exc)) from None
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        out = out.model_copy(update={"call": noted.number})
        where = f" (cell {out.cell.index})" if out.cell is not None else ""
        if out.approval in ("rejected", "expired"):
            raise Denied(f"not run{where}: {out.message}")
        if not out.ran:
            raise ToolError(f"no result{where}: {out.message}")
        noted.execution_id = _record_id(attachment, out)
        content: list[ContentBlock] = [TextContent(text=as_text(out))]
        content += [ImageContent(data=data, mime_type=kind) for kind, data in images]
        return CallToolResult(content=content, structured_content=out.model_dump(mode="json"))

    @server.tool(
        title="List the notebook's cells",
        annotations=ToolAnnotations(title="List the notebook's cells", read_only_hint=True),
    )
    async def list_cells(
        ctx: Context,
        start: Annotated[int, Field(ge=0, description="The first cell's index.")] = 0,
        count: Annotated[
            int, Field(ge=1, le=MAX_LISTED_CELLS, description="How many cells, at most.")
        ] = 50,
    ) -> CellList:
        """The notebook's cells from ``start``: who wrote each (the person or an agent), its
        state, how its latest execution ended, and the start of its source."""
        notebook = await _notebook(attachment, ctx)
        cells = notebook.cells()
        listed = []
        for index in range(start, min(start + count, len(cells))):
            cell = cells[index]
            metadata = cell.get("metadata")
            mark = agent_mark(metadata)
            record = record_of(metadata)
            source = source_of(cell)
            listed.append(
                CellSummary(
                    index=index,
                    id=str(cell.get("id", ""))[:64],
                    cell_type=str(cell.get("cell_type", "?"))[:16],
                    author=author(metadata),
                    state=mark.state if mark is not None else None,
                    execution_count=count_of(cell),
                    ending=str(record["ending"])[:40] if record and record.get("ending") else None,
                    preview=clip(source, PREVIEW_CHARS),
                    outputs=len(cell.get("outputs") or []),
                )
            )
        return CellList(path=attachment.path, cells=listed, total=len(cells))

    @server.tool(
        title="Read a cell of the notebook",
        annotations=ToolAnnotations(title="Read a cell of the notebook", read_only_hint=True),
    )
    async def read_cell(
        ctx: Context,
        index: Annotated[int, Field(description="The cell's index (negative: from the end).")],
    ) -> CellRead:
        """One cell: its whole source (bounded), who wrote it, and its outputs as text."""
        notebook = await _notebook(attachment, ctx)
        cells = notebook.cells()
        if not -len(cells) <= index < len(cells):
            raise BadArguments(f"no cell {index}: the notebook has {len(cells)}")
        position = index % len(cells)
        cell = cells[position]
        metadata = cell.get("metadata")
        mark = agent_mark(metadata)
        parts, _, _ = read_outputs(cell.get("outputs"), budget)
        source, cut = shorten(source_of(cell), MAX_SOURCE_CHARS)
        truncated = dict(parts["truncated"])
        if cut:
            truncated["source"] = cut
        error = parts["error"]
        return CellRead(
            index=position,
            id=str(cell.get("id", ""))[:64],
            cell_type=str(cell.get("cell_type", "?"))[:16],
            author=author(metadata),
            state=mark.state if mark is not None else None,
            execution_count=count_of(cell),
            source=source,
            stdout=parts["stdout"],
            stderr=parts["stderr"],
            outputs=parts["outputs"],
            error=f"{error.ename}: {error.evalue}\n{error.traceback}" if error else None,
            truncated=truncated,
        )


async def _notebook(attachment: Attachment, ctx: Context) -> Any:
    try:
        notebook = await attachment.document(agent_name(ctx))
    except JupyterError as exc:
        raise BadArguments(str(exc)) from None
    return notebook


def _record_id(attachment: Attachment, out: LiveOutput) -> str | None:
    notebook = attachment.notebook
    if notebook is None or out.cell is None:
        return None
    cell = notebook.cell(out.cell.id)
    record = record_of(cell.get("metadata")) if cell else None
    return str(record["id"])[:64] if record else None
