"""The MCP server: Python in sandboxed sessions, files in and out, over the official SDK.

``build_server(options)`` returns an ``MCPServer`` (the SDK's high-level server) with these
tools: ``run_python``, ``list_sessions``, ``reset_session``, ``close_session``, ``write_file``,
``read_file``, ``list_files``, and ``fork_session`` and ``undo`` (``branching.py``). Each
session is a sandbox of its own, or a fork sharing another's (``sessions.py``);
every execution is a SANDBOX_EXECUTED event in the run log, and every call, whatever came of
it, a TOOL_CALL record (``record.py``); a call that the policy puts above ``approve_above`` asks
the person through the client (elicitation), and is denied where the client cannot ask.
"""

# (No ``from __future__ import annotations``: the SDK reads each tool's annotations, and
# ``run_python``'s name a resolver local to ``build_server``.)
import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from rewyn_kernel import __version__
from rewyn_kernel.mcp import results
from rewyn_kernel.mcp.approval import message as approval_message
from rewyn_kernel.mcp.approval import too_long
from rewyn_kernel.mcp.branching import add_branch_tools
from rewyn_kernel.mcp.files import SessionFiles
from rewyn_kernel.mcp.options import ServerOptions, default_run_log
from rewyn_kernel.mcp.record import (
    BadArguments,
    Denied,
    RecordingServer,
    Refused,
    notes,
    tool_errors,
)
from rewyn_kernel.mcp.sessions import DEFAULT_SESSION, Entry, SessionName, SessionTable
from rewyn_kernel.runtime._tool import assess, result_payload
from rewyn_kernel.runtime.events import JsonlRunLog
from rewyn_kernel.runtime.host.scratch import ScratchError
from rewyn_kernel.runtime.pool import SandboxPool
from rewyn_kernel.runtime.sandbox import Isolation, Sandbox, Session
from rewyn_kernel.tools import MaxRiskLevel, PermissionPolicy, RiskLevel, Tool

MAX_CODE_CHARS = 4_000_000
"""The longest code a call may send (an agent pasting a data set into a cell, say)."""
MAX_WRITE_BYTES = 16 * 1024 * 1024
MAX_READ_BYTES = 16 * 1024 * 1024
DEFAULT_READ_BYTES = 256 * 1024
MAX_LISTED = 1_000
PROGRESS_EVERY = 1.0
"""Seconds between progress notifications while code runs (clients that count a call's time
from its last notification do not give up on a long one)."""
IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}

FOLDER = "the session's folder: the workspace the server was given, else its own directory"


class Approval(BaseModel):
    approve: bool = Field(description="Run this code in the sandbox?")


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


class Gate:
    """Whether the policy lets a run_python call run, asks the person for it, or denies it."""

    def __init__(self, policy: PermissionPolicy, judged: Tool) -> None:
        self.policy = policy
        self.judged = judged

    def judge(self, code: str, ctx: Context) -> tuple[Literal["run", "ask", "deny"], str]:
        """What the policy says of this call, and why; a call that needs a person's approval
        is denied where the client cannot ask one (no elicitation)."""
        try:
            decision = self.policy.check(self.judged, {"code": code})
        except Exception as exc:  # (a policy that fails denies)
            return "deny", f"the policy failed: {exc}"
        if not decision.allowed:
            return "deny", f"denied: {decision.reason}"
        if not decision.requires_approval:
            return "run", decision.reason
        unreadable = too_long(code)
        if unreadable is not None:
            return "deny", f"not approved: {unreadable} ({decision.reason})"
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return "deny", (
                f"not approved: {decision.reason}; this client cannot ask a person (it offers "
                "no elicitation): use a sandbox of lower risk (bubblewrap or a container, no "
                "network, no secret-named variables) or start the server with a higher "
                "--approve-above"
            )
        return "ask", decision.reason

    async def approval_for(self, code: str, ctx: Context) -> Elicit[Approval] | Approval:
        verdict, reason = self.judge(code, ctx)
        if verdict != "ask":
            return Approval(approve=verdict == "run")
        return Elicit(approval_message(code, reason), Approval)


def build_server(options: ServerOptions | None = None) -> MCPServer[SessionTable]:
    """The server for ``options``: nothing starts until the first call needs a session."""
    options = options or ServerOptions()
    settings = options.sandbox_settings()
    provider, spec = settings.make_provider(), settings.spec()
    isolation = provider.isolation(spec)
    level, reasons = assess(isolation, spec)
    policy = MaxRiskLevel(options.deny_above, approve_above=options.approve_above)
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


async def _run(
    entry: Entry, code: str, *, timeout: float | None, note: str | None, ctx: Context, budget: int
) -> CallToolResult:
    """One execution in ``entry``'s session, with progress while it runs."""
    session = entry.session
    limit = session.spec.timeout
    in_workspace = session.spec.workspace is not None
    before = {} if in_workspace else await asyncio.to_thread(results.snapshot, session.workdir)
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
        after = await asyncio.to_thread(results.snapshot, session.workdir)
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
    )
    text = results.as_text(out)
    notes().execution_id = result.execution_id  # (what the model read: record.py keeps it)
    content: list[ContentBlock] = [TextContent(text=text)]
    content += [ImageContent(data=data, mime_type=kind) for kind, data in images]
    return CallToolResult(content=content, structured_content=out.model_dump(mode="json"))


def risk_of_server(options: ServerOptions) -> tuple[RiskLevel, list[str]]:
    """The risk level of the server's ``run_python`` and why (``rewyn-kernel mcp`` prints it)."""
    settings = options.sandbox_settings()
    provider, spec = settings.make_provider(), settings.spec()
    return assess(provider.isolation(spec), spec)
