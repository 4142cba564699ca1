"""The MCP server's ``run_python`` tool: code in a session, with progress, output for a model.

The gate (``gate.py``) decides first; then the code runs in the named session (made on its
first call), the server keeps a checkpoint for ``undo`` meanwhile (``undo.py``), and the result
gives the model the output's head and tail (the whole saved to files the result names), the
files the code wrote, and its images (``results.py``).
"""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations, and
# ``run_python``'s name a resolver held by ``add_run_tool``'s gate.)
import asyncio
import contextlib
import time
from typing import Annotated, Any

from mcp.server.mcpserver import AcceptedElicitation, Context, ElicitationResult, MCPServer, Resolve
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from rewyn_kernel.mcp import results
from rewyn_kernel.mcp.gate import Approval, Gate
from rewyn_kernel.mcp.record import BadArguments, Denied, notes, tool_errors
from rewyn_kernel.mcp.sessions import DEFAULT_SESSION, Entry, SessionName, SessionTable
from rewyn_kernel.runtime.sandbox import Isolation
from rewyn_kernel.runtime.tool import result_payload
from rewyn_kernel.tools import RiskLevel

MAX_CODE_CHARS = 4_000_000
"""The longest code a call may send (an agent pasting a data set into a cell, say)."""
PROGRESS_EVERY = 1.0
"""Seconds between progress notifications while code runs (clients that count a call's time
from its last notification do not give up on a long one)."""


def add_run_tool(
    server: MCPServer[SessionTable],
    table: SessionTable,
    gate: Gate,
    *,
    about: str,
    level: RiskLevel,
    isolation: Isolation,
    limit: float | None,
    budget: int,
) -> None:
    """Add ``run_python``: code in a session, as ``gate`` allows, ``about`` the sandbox
    (``level`` its risk), at most ``limit`` seconds a call and ``budget`` characters of output
    for the model."""
    open_world = isolation.network != "isolated"
    host_files = isolation.files != "isolated"

    @server.tool(
        title=f"Run Python ({level} risk)",
        description=about
        + " Variables and imports are kept between calls to the same session (unless the "
        "result says state_lost); the value of a last expression is shown, plots come back as "
        "images. Long output is shortened: write big results to a file and print a summary.",
        annotations=ToolAnnotations(
            title=f"Run Python in a sandbox ({level} risk)",
            read_only_hint=False,
            destructive_hint=host_files,
            idempotent_hint=False,
            open_world_hint=open_world,
        ),
    )
    async def run_python(
        code: Annotated[
            str,
            Field(description="Python source, like a notebook cell.", max_length=MAX_CODE_CHARS),
        ],
        ctx: Context,
        approval: Annotated[ElicitationResult[Approval], Resolve(gate.approval_for)],
        session: SessionName = DEFAULT_SESSION,
        timeout: Annotated[
            float | None,
            Field(
                description="Seconds before the code is stopped; at most, and by default, the "
                "server's limit.",
                gt=0,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, results.RunOutput]:
        if not (isinstance(approval, AcceptedElicitation) and approval.data.approve):
            verdict, reason = gate.judge(code, ctx)
            if verdict == "ask":
                reason = f"not approved: the person did not approve this call ({reason})"
            raise Denied(reason)
        if timeout is not None and limit is not None and timeout > limit:
            raise BadArguments(f"timeout {timeout:g} s is over this server's limit of {limit:g} s")
        notes().timeout = timeout
        with tool_errors():
            async with table.use(session) as (entry, fresh):
                notes().used(entry)
                skipped = await entry.history.keep(entry.session, code)
                try:
                    return await _run(
                        entry,
                        code,
                        timeout=timeout,
                        note="; ".join(text for text in (fresh, skipped) if text) or None,
                        ctx=ctx,
                        budget=budget,
                    )
                finally:
                    entry.history.prepare(entry.session)  # (the next call's, meanwhile)


async def _run(
    entry: Entry, code: str, *, timeout: float | None, note: str | None, ctx: Context, budget: int
) -> CallToolResult:
    """One execution in ``entry``'s session, with progress while it runs."""
    session = entry.session
    limit = session.spec.timeout
    in_workspace = session.spec.workspace is not None
    before = {} if in_workspace else await asyncio.to_thread(results.snapshot, session.files)
    started = time.monotonic()
    streamed = [0]

    def count(name: str, text: str) -> None:
        streamed[0] += len(text)

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            elapsed = time.monotonic() - started
            message = f"running for {elapsed:.0f} s; {streamed[0]:,} characters of output so far"
            with contextlib.suppress(Exception):  # (a client gone mid-call: the call goes on)
                await ctx.report_progress(elapsed, total=timeout or limit, message=message)

    ticker = asyncio.ensure_future(progress())
    try:
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        result = await session.aexecute(code, on_stream=count, **kwargs)
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    if in_workspace:  # (what the execution published: host/workspace.py)
        files = result.files
        written = sorted([*files.created, *files.changed]) if files is not None else []
    else:
        after = await asyncio.to_thread(results.snapshot, session.files)
        written = results.written(before, after)
    whole: dict[str, str] = {}
    payload = result_payload(result, budget)  # (once: the text, the files and the schema)
    for name, text in results.shortened_streams(result, payload).items():
        # (Forks share the folder and count on from their parent's calls: each its own.)
        folder = results.OUTPUTS_DIR + (f"/{entry.name}" if entry.forked_from else "")
        path = f"{folder}/call-{session.execution_count}.{name}.txt"
        with contextlib.suppress(OSError):  # (a full quota: the result says it was shortened)
            await asyncio.to_thread(session.write_file, path, text.encode("utf-8", "replace"))
            whole[name] = path
    images, left_out = results.images_of(result)
    if left_out:
        extra = f"{left_out} image(s) left out (over {results.MAX_IMAGES}, too big, or broken)"
        note = f"{note}; {extra}" if note else extra
    out = results.structured(
        result,
        payload,
        session=entry.name,
        execution_count=session.execution_count,
        images=len(images),
        whole_output=whole,
        files_written=written[: results.MAX_LISTED_FILES],
        note=note,
        call=notes().number,
    )
    text = results.as_text(out)
    notes().execution_id = result.execution_id  # (what the model read: record.py keeps it)
    content: list[ContentBlock] = [TextContent(text=text)]
    content += [ImageContent(data=data, mime_type=kind) for kind, data in images]
    return CallToolResult(content=content, structured_content=out.model_dump(mode="json"))
