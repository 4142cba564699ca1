"""The MCP server's file tools: ``write_file``, ``read_file`` and ``list_files``, in a
session's folder (``files.py``: its workspace, else its scratch directory). Paths the folder's
rules refuse (outside it, through a link) are refused calls, as are files over the limits."""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations.)
import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from rewyn_kernel.mcp.files import SessionFiles
from rewyn_kernel.mcp.record import BadArguments, Refused, notes, tool_errors
from rewyn_kernel.mcp.sessions import DEFAULT_SESSION, Entry, SessionName, SessionTable
from rewyn_kernel.runtime.scratch import ScratchError

MAX_WRITE_BYTES = 16 * 1024 * 1024
MAX_READ_BYTES = 16 * 1024 * 1024
DEFAULT_READ_BYTES = 256 * 1024
MAX_LISTED = 1_000
IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}

FOLDER = "the session's folder: the workspace the server was given, else its own directory"


class Written(BaseModel):
    path: str
    bytes: int
    session: str
    replaced_version: str | None = Field(
        default=None,
        description="The kept version of the file this write replaced (in a workspace; "
        "rewyn-kernel files restores it).",
    )


class FileEntry(BaseModel):
    name: str
    kind: Literal["file", "dir", "link", "other"]
    size: int


class Listing(BaseModel):
    path: str
    session: str
    entries: list[FileEntry]
    truncated: bool = Field(description="More entries than listed (at most 1000 are).")


def add_file_tools(server: MCPServer[SessionTable], table: SessionTable) -> None:
    """Add ``write_file``, ``read_file`` and ``list_files``, in a session's folder."""

    @server.tool(
        title="Write a file",
        annotations=ToolAnnotations(
            title="Write a file into a session", destructive_hint=True, idempotent_hint=True
        ),
    )
    async def write_file(
        path: Annotated[str, Field(description=f"Relative to {FOLDER}.")],
        content: Annotated[str, Field(description="The file's content (see encoding).")],
        session: SessionName = DEFAULT_SESSION,
        encoding: Annotated[
            Literal["text", "base64"],
            Field(description="text: written as UTF-8; base64: decoded first (binary files)."),
        ] = "text",
    ) -> Written:
        """Put a file in the session's folder for the code (folders made as needed). In a
        workspace, the version it replaces is kept; protected paths are refused."""
        data = _decode(content, encoding)
        notes().file(path, data, "in")
        async with _files(session) as entry:
            changes = await asyncio.to_thread(SessionFiles(entry.session).write, path, data)
        kept = changes.versions[0] if changes is not None and changes.versions else None
        return Written(path=path, bytes=len(data), session=session, replaced_version=kept)

    @server.tool(
        title="Read a file",
        annotations=ToolAnnotations(title="Read a file from a session", read_only_hint=True),
    )
    async def read_file(
        path: Annotated[str, Field(description=f"Relative to {FOLDER}.")],
        session: SessionName = DEFAULT_SESSION,
        max_bytes: Annotated[
            int, Field(description="The largest file to return.", gt=0, le=MAX_READ_BYTES)
        ] = DEFAULT_READ_BYTES,
        encoding: Annotated[
            Literal["auto", "text", "base64"],
            Field(description="auto: text if it is UTF-8, an image as an image, else base64."),
        ] = "auto",
    ) -> CallToolResult:
        """A file the code wrote (a link is never followed; images come back as images)."""
        async with _files(session) as entry:
            data = await asyncio.to_thread(SessionFiles(entry.session).read, path, max_bytes)
        notes().file(path, data, "out")
        kind = next((k for magic, k in IMAGE_MAGIC.items() if data.startswith(magic)), None)
        if encoding == "auto" and kind is not None:
            text = f"{path}: {len(data):,} bytes, {kind}"
            image = ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=kind)
            return CallToolResult(content=[TextContent(text=text), image])
        if encoding != "base64":
            try:
                return CallToolResult(content=[TextContent(text=data.decode("utf-8"))])
            except UnicodeDecodeError:
                if encoding == "text":
                    raise ToolError(f"{path} is not UTF-8 text: read it as base64") from None
        return CallToolResult(content=[TextContent(text=base64.b64encode(data).decode("ascii"))])

    @server.tool(
        title="List files",
        annotations=ToolAnnotations(title="List a session's files", read_only_hint=True),
    )
    async def list_files(
        path: Annotated[str, Field(description=f"A folder, relative to {FOLDER}.")] = ".",
        session: SessionName = DEFAULT_SESSION,
    ) -> Listing:
        """The entries of a folder of the session's; links shown as links (the sandbox's own
        folders left out)."""
        async with _files(session) as entry:
            found = await asyncio.to_thread(SessionFiles(entry.session).list, path, MAX_LISTED + 1)
        entries = [FileEntry.model_validate(vars(e)) for e in found]
        return Listing(
            path=path,
            session=session,
            entries=entries[:MAX_LISTED],
            truncated=len(entries) > MAX_LISTED,
        )

    @contextlib.asynccontextmanager
    async def _files(session: str) -> AsyncIterator[Entry]:
        """The session for a file tool: made if needed; bad paths become tool errors."""
        try:
            with tool_errors():
                async with table.use(session) as (entry, _):
                    notes().used(entry)
                    yield entry
        except ScratchError as exc:  # (a path the folder's rules refuse: outside, a link...)
            raise Refused(f"{exc.filename}: {exc.strerror}") from None
        except FileNotFoundError as exc:
            raise ToolError(f"{exc.filename or 'that path'}: no such file or folder") from None
        except IsADirectoryError:
            raise ToolError("that is a folder: use list_files") from None
        except OSError as exc:
            raise ToolError(f"{exc.strerror or exc}") from None


def _decode(content: str, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            data = base64.b64decode("".join(content.split()), validate=True)
        except ValueError:
            raise BadArguments("content is not valid base64") from None
    else:
        data = content.encode("utf-8", "surrogateescape")
    if len(data) > MAX_WRITE_BYTES:
        raise BadArguments(f"{len(data):,} bytes is over the limit of {MAX_WRITE_BYTES:,}")
    return data
