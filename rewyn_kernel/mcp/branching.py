"""The MCP server's tools to try an approach and go back: ``fork_session`` and ``undo``.

``fork_session`` makes a new named session with an open one's state (``SessionTable.fork``),
in the same sandbox and counted against the same ``max_sessions``; ``undo`` restores the
checkpoint the server kept before a session's latest ``run_python`` call (``undo.py``). Neither
runs the agent's code, so the risk policy that judges ``run_python`` has nothing to judge here:
the code a branch runs later goes through ``run_python``, and its policy, like any other.
Both are recorded in the run log like every tool call (``record.py``).
"""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations.)
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from rewyn_kernel.mcp.record import notes, tool_errors
from rewyn_kernel.mcp.sessions import SessionTable

COPIED = (
    "variables, imports, open figures, and the random generators' state as it was (the same "
    "numbers follow in both sessions)"
)
NOT_COPIED = (
    "threads the code started (a fork copies only the thread that runs it: start them again "
    "in the new session), and the undo history (the new session starts with none)"
)
SHARED = (
    "the sandbox: its files (the session's folder, the workspace, /tmp: what one writes the "
    "other sees), its memory cap and process limit, and files and sockets that were open when "
    "it forked; the folder goes with the last of the sessions that share it"
)


class Forked(BaseModel):
    session: str = Field(description="The new session's name.")
    forked_from: str
    execution_count: int = Field(description="The calls the state has seen (as forked_from).")
    copied: str
    not_copied: str
    shared: str
    sessions_open: int
    max_sessions: int


def add_branch_tools(server: MCPServer[SessionTable], table: SessionTable) -> None:
    """Add ``fork_session`` to ``server``, and ``undo`` when the table keeps checkpoints."""

    @server.tool(
        title="Fork a session",
        annotations=ToolAnnotations(
            title="Fork a session (a copy of its state)",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    async def fork_session(
        session: Annotated[str, Field(description="The open session to copy.", max_length=64)],
        new_name: Annotated[
            str,
            Field(
                description="The new session's name (1-64 letters, digits, '_', '.', '-'; not "
                "one that is open).",
                max_length=64,
            ),
        ],
    ) -> Forked:
        """Make a new session with the state of an open one (its variables, imports and
        figures, copied in milliseconds however large), to try something in one and keep the
        other as it was; run_python with session=new_name then works on the copy. Threads
        are not copied; files are shared (one sandbox). Counts as an open session: close the
        ones you no longer need."""
        with tool_errors():
            notes().used(table.get(session))
            entry = await table.fork(session, new_name)
        return Forked(
            session=entry.name,
            forked_from=session,
            execution_count=entry.session.execution_count,
            copied=COPIED,
            not_copied=NOT_COPIED,
            shared=SHARED,
            sessions_open=len(table),
            max_sessions=table.max_sessions,
        )

    if table.undo_depth == 0:
        return
    depth = table.undo_depth
    calls = "call" if depth == 1 else f"{depth} calls"

    @server.tool(
        title="Undo the last run",
        description=f"Put a session's variables back as they were before its last run_python "
        f"call (the server keeps a checkpoint before each call, for the last {calls}); the "
        "result says which call was undone. Files are not rolled back: what the call wrote "
        "stays. A call run when memory was too full to keep a checkpoint cannot be undone "
        "alone (its result said so).",
        annotations=ToolAnnotations(
            title="Undo a session's last run",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    async def undo(
        session: Annotated[str, Field(description="The open session to undo in.", max_length=64)],
    ) -> str:
        with tool_errors():
            entry = table.get(session)
            notes().used(entry)
            async with table.hold(entry):
                return await entry.history.undo(entry.session, session)
