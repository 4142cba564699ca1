"""The MCP server: Python in sandboxed sessions, files in and out, over the official SDK.

``build_server(options)`` returns an ``MCPServer`` (the SDK's high-level server) with these
tools: ``run_python`` (``run_tool.py``, as ``gate.py`` allows), ``list_sessions``,
``reset_session`` and ``close_session`` (``session_tools.py``), ``write_file``, ``read_file``
and ``list_files`` (``file_tools.py``), and ``fork_session`` and ``undo`` (``branching.py``).
Each session is a sandbox of its own, or a fork sharing another's (``sessions.py``); every
execution is a SANDBOX_EXECUTED event in the run log, and every call, whatever came of it, a
TOOL_CALL record (``record.py``); a call that the policy puts above ``approve_above`` asks the
person through the client (elicitation), and is denied where the client cannot ask.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mcp.server.mcpserver import MCPServer

from rewyn_kernel import __version__
from rewyn_kernel.mcp.branching import add_branch_tools
from rewyn_kernel.mcp.file_tools import (
    DEFAULT_READ_BYTES,
    FOLDER,
    IMAGE_MAGIC,
    MAX_LISTED,
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    FileEntry,
    Listing,
    Written,
    add_file_tools,
)
from rewyn_kernel.mcp.gate import Approval, Gate
from rewyn_kernel.mcp.options import ServerOptions, default_run_log
from rewyn_kernel.mcp.record import RecordingServer
from rewyn_kernel.mcp.run_tool import MAX_CODE_CHARS, PROGRESS_EVERY, add_run_tool
from rewyn_kernel.mcp.session_tools import SessionInfo, Sessions, add_session_tools
from rewyn_kernel.mcp.sessions import SessionTable
from rewyn_kernel.runtime.events import JsonlRunLog
from rewyn_kernel.runtime.pool import SandboxPool
from rewyn_kernel.runtime.sandbox import Sandbox, Session
from rewyn_kernel.runtime.tool import assess
from rewyn_kernel.tools import MaxRiskLevel, RiskLevel, Tool

__all__ = [
    "Approval",
    "DEFAULT_READ_BYTES",
    "FOLDER",
    "FileEntry",
    "Gate",
    "IMAGE_MAGIC",
    "Listing",
    "MAX_CODE_CHARS",
    "MAX_LISTED",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "PROGRESS_EVERY",
    "SessionInfo",
    "Sessions",
    "Written",
    "build_server",
    "risk_of_server",
]


def build_server(options: ServerOptions | None = None) -> MCPServer[SessionTable]:
    """The server for ``options``: nothing starts until the first call needs a session."""
    options = options or ServerOptions()
    settings = options.sandbox_settings()
    provider, spec = settings.make_provider(), settings.spec()
    isolation = provider.isolation(spec)
    level, reasons = assess(isolation, spec)
    policy = MaxRiskLevel(
        options.deny_above, approve_above=options.approve_above, approve_all=options.approve_all
    )
    limit = spec.timeout
    about = (
        f"Runs Python in a sandbox ({isolation.provider}; network {isolation.network}; files "
        f"{isolation.files}; {f'{limit:g} s' if limit else 'no time limit'} per call"
        + (f"; {spec.memory_limit_mb} MiB" if spec.memory_limit_mb else "")
        + f"). Risk: {level} ({'; '.join(reasons)})."
        + (
            f" The code works in {spec.workspace} (relative paths start there); what it "
            "writes there stays after the session, the versions it replaces kept."
            if spec.workspace is not None
            else ""
        )
    )
    judged = Tool(
        name="run_python",
        description=about,
        input_schema={"type": "object"},
        risk_level=level,
        risk_reason="; ".join(reasons),
        handler=lambda arguments: {},
    )
    run_log = JsonlRunLog(options.run_log or default_run_log())

    # Sessions are leases from a pool that keeps one spare ready: a new session's first call
    # does not wait for a sandbox (and IPython in it) to start.
    pool: list[SandboxPool] = []

    def make_session() -> tuple[Sandbox, Session]:
        lease = pool[0].lease()
        return lease.sandbox, lease.session

    table = SessionTable(
        make_session,
        max_sessions=options.max_sessions,
        idle_ttl=options.idle_ttl,
        undo_depth=options.undo_depth,
    )

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer[SessionTable]) -> AsyncIterator[SessionTable]:
        pool.append(
            SandboxPool(
                spec, provider=provider, size=1, warm=0, listeners=[run_log], spare_leases=1
            )
        )
        reaper = asyncio.ensure_future(table.reap_forever())
        try:
            yield table
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await asyncio.shield(table.close_all())
            await asyncio.shield(pool.pop().aclose())

    server: MCPServer[SessionTable] = RecordingServer(
        "rewyn-kernel",
        version=__version__,
        instructions=(
            "Run Python with run_python: state is kept per session (default: 'default'); "
            "files go in and out with write_file, read_file and list_files, in the session's "
            "working directory. Long output is shortened (head and tail kept) and saved whole "
            "to a file the result names. fork_session copies a session's state into a new one "
            "(to try an approach and keep the original)"
            + (
                ", undo takes back a session's last run_python call. "
                if options.undo_depth
                else ". "
            )
            + about
        ),
        lifespan=lifespan,
        log_level="WARNING",
        run_log=run_log,
    )
    gate = Gate(policy, judged)
    add_run_tool(
        server,
        table,
        gate,
        about=about,
        level=level,
        isolation=isolation,
        limit=limit,
        budget=options.max_output_chars,
    )
    add_session_tools(server, table)
    add_file_tools(server, table)
    add_branch_tools(server, table)
    return server


def risk_of_server(options: ServerOptions) -> tuple[RiskLevel, list[str]]:
    """The risk level of the server's ``run_python`` and why (``rewyn-kernel mcp`` prints it)."""
    settings = options.sandbox_settings()
    provider, spec = settings.make_provider(), settings.spec()
    return assess(provider.isolation(spec), spec)
