"""The MCP server's tools over its sessions: ``list_sessions``, ``reset_session`` and
``close_session`` (the table itself is ``sessions.py``)."""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations.)
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from rewyn_kernel.mcp.record import notes, tool_errors
from rewyn_kernel.mcp.sessions import SessionName, SessionTable


class SessionInfo(BaseModel):
    name: str
    calls: int
    busy: bool
    idle_seconds: float
    age_seconds: float
    forked_from: str | None = Field(description="The session it was forked from, if it was.")
    undo_points: int = Field(description="How many of its last calls undo can take back.")


class Sessions(BaseModel):
    sessions: list[SessionInfo]
    max_sessions: int
    idle_ttl_seconds: float | None


def add_session_tools(server: MCPServer[SessionTable], table: SessionTable) -> None:
    """Add ``list_sessions``, ``reset_session`` and ``close_session``."""

    @server.tool(
        title="List sessions",
        annotations=ToolAnnotations(title="List sessions", read_only_hint=True),
    )
    async def list_sessions() -> Sessions:
        """The open sessions: calls made, whether one is running, seconds idle, what each was
        forked from, how many calls undo can take back."""
        return Sessions(
            sessions=[SessionInfo.model_validate(info) for info in table.describe()],
            max_sessions=table.max_sessions,
            idle_ttl_seconds=table.idle_ttl,
        )

    @server.tool(
        title="Reset a session",
        annotations=ToolAnnotations(
            title="Reset a session", destructive_hint=True, idempotent_hint=True
        ),
    )
    async def reset_session(session: SessionName) -> str:
        """Start the session's Python afresh: its variables, imports and undo history go, its
        files stay."""
        with tool_errors():
            notes().used(table.get(session))
            notes().session_effect = "restarted"
            await table.reset(session)
        return (
            f"session {session!r} restarted: variables, imports and undo points are gone, "
            "files stay"
        )

    @server.tool(
        title="Close a session",
        annotations=ToolAnnotations(
            title="Close a session", destructive_hint=True, idempotent_hint=True
        ),
    )
    async def close_session(session: SessionName) -> str:
        """Close the session: its Python stops and its directory, with every file, is removed
        (with the last of the sessions that share it, when it was forked or has forks)."""
        with tool_errors():
            notes().used(table.get(session))
            notes().session_effect = "closed"
            sharing = table.sharing(table.get(session))
            await table.close(session)
        if sharing:
            return (
                f"session {session!r} closed: its variables are gone; its files stay for "
                f"{', '.join(map(repr, sharing))} (forked sessions share one sandbox) until the "
                "last of them closes"
            )
        return f"session {session!r} closed: its variables and files are gone"
