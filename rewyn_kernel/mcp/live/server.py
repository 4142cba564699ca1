"""The MCP server of an agent attached to a notebook (``rewyn-kernel mcp --notebook PATH``).

Its tools are ``run_python``, ``list_cells`` and ``read_cell`` (``tools.py``), over one
``Attachment``; nothing else of the Jupyter server is within the agent's reach. Every call is a
TOOL_CALL record in the server's run log, whose id the agent's cell names in its metadata; the
execution's SANDBOX_EXECUTED event is the kernel's, in the kernel's own run log, and its record
in the cell.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import MCPServer

from rewyn_kernel import __version__
from rewyn_kernel.mcp.live.attachment import Attachment
from rewyn_kernel.mcp.live.jupyter import JupyterServer, notebook_path, runner_of
from rewyn_kernel.mcp.live.tools import add_live_tools
from rewyn_kernel.mcp.options import ServerOptions, default_run_log
from rewyn_kernel.mcp.record import RecordingServer
from rewyn_kernel.runtime.events import JsonlRunLog
from rewyn_kernel.tools import MaxRiskLevel


def build_live_server(options: ServerOptions) -> MCPServer[Attachment]:
    """The server for ``options`` (its ``notebook`` set): nothing connects until a call."""
    if options.notebook is None:
        raise ValueError("build_live_server needs options.notebook")
    token = options.jupyter_token
    jupyter = JupyterServer(options.jupyter_url, token, runner_of(token))
    attachment = Attachment(
        jupyter, notebook_path(options.notebook), approval_timeout=options.approval_timeout
    )
    policy = MaxRiskLevel(
        options.deny_above, approve_above=options.approve_above, approve_all=options.approve_all
    )

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer[Attachment]) -> AsyncIterator[Attachment]:
        try:
            yield attachment
        finally:
            await attachment.close()

    server: MCPServer[Any] = RecordingServer(
        "rewyn-kernel",
        version=__version__,
        instructions=(
            f"You work in the notebook {attachment.path}, which a person has open in "
            "JupyterLab: run_python adds a cell to it and runs it in the notebook's sandboxed "
            "kernel (state shared with the person's cells); list_cells and read_cell show what "
            "is there, including what the person did. The person may interrupt a cell, and "
            "where the policy asks, approves, edits or rejects a call before it runs: read the "
            "result's approval and note."
        ),
        lifespan=lifespan,
        log_level="WARNING",
        run_log=JsonlRunLog(options.run_log or default_run_log()),
    )
    add_live_tools(server, attachment, policy=policy, budget=options.max_output_chars)
    return server
