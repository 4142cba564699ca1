"""SandboxResult and the small models it is made of."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from rewyn_kernel.runtime.printable import printable

Ending = Literal[
    "completed",
    "exception",
    "exit",
    "interrupted",
    "timeout",
    "crashed",
    "oom",
    "start_failed",
    "protocol_error",
]
"""How an execution ended; ``SandboxResult.message`` says it in words.

completed: ran to the end. exception: an uncaught exception (exit code 1). exit: ``sys.exit``
was called. interrupted: ``interrupt()`` raised KeyboardInterrupt in the code (exit code 130).
timeout: past the spec's timeout; the sandbox was killed (exit code 124). crashed: the sandbox
process died (``os._exit``, a signal: exit code 128 + signal number). oom: killed for exceeding
the memory limit. start_failed: the sandbox never started (the provider's message is in stderr).
protocol_error: the sandbox sent something that is not a valid frame and was killed.
"""

EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_KILLED = 128 + 9


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ErrorInfo(_Model):
    """An uncaught exception in the sandboxed code."""

    ename: str = Field(description="Exception class name, e.g. 'ZeroDivisionError'.")
    evalue: str = Field(description="str() of the exception.")
    traceback: tuple[str, ...] = Field(
        default=(), description="Formatted traceback lines, as traceback.format_exception."
    )


class RichOutput(_Model):
    """A rich output: what ``display()`` showed or the last expression's value."""

    output_type: Literal["display_data", "execute_result"]
    """display_data (what display() showed) or execute_result (the last expression's value)."""
    data: dict[str, Any] = Field(description="MIME type -> content, as in a Jupyter output.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The output's metadata, as in a Jupyter output."""
    execution_count: int | None = None
    """An execute_result's execution count; None for a display."""
    display_id: str | None = Field(
        default=None, description="The id ``display(..., display_id=...)`` gave it, if any."
    )
    update: bool = Field(
        default=False,
        description="An ``update_display``: it replaces the output shown under ``display_id``.",
    )


class Payload(_Model):
    """Something IPython asked of the frontend (an execute reply's payload), as the sandbox sent
    it: the pager's text (``zip?``), the next cell's text (``%load``), or ``exit()``. Hostile
    input: a kernel decides what to relay."""

    source: Literal["page", "set_next_input", "ask_exit"]
    """page: text for the pager; set_next_input: the next cell's text; ask_exit: the code called
    exit()."""
    data: dict[str, Any] = Field(default_factory=dict, description="The pager's MIME bundle.")
    start: int = 0
    """The line the pager starts at (page)."""
    text: str = ""
    """The next cell's text (set_next_input)."""
    replace: bool = False
    """Whether that text replaces the current cell (set_next_input)."""


class Isolation(_Model):
    """What a provider actually applied to a sandbox (never what was merely requested)."""

    provider: str
    """The provider's name."""
    network: Literal["isolated", "filtered", "allowed", "not_isolated"] = Field(
        description="isolated: no network at all; filtered: no network but a proxy on the host "
        "that lets through the hosts of its allow-list (network=[...]); allowed: "
        "network='allow'; not_isolated: the network cut was asked for but could not be "
        "enforced here (an allow-list is then only followed by code that uses the proxy)."
    )
    pid_namespace: bool = Field(description="The sandbox has its own process tree.")
    user_namespace: bool = Field(description="The sandbox runs in its own user namespace.")
    memory: str | None = Field(description="How the memory cap is enforced; None: no cap.")
    disk: str | None = Field(
        default=None,
        description="How the scratch quota is enforced, or why it is not; None: none asked.",
    )
    workspace: Literal["versioned", "direct", "read_only"] | None = Field(
        default=None,
        description="versioned: the code works in a view of the workspace whose writes are "
        "published after each execution, the versions they replace kept; direct: it changes "
        "the workspace's files itself, and nothing it replaces is kept; read_only: it reads the "
        "workspace's files but cannot change them (no view can be had: the landlock provider); "
        "None: no workspace.",
    )
    pids: str | None = Field(
        default=None, description="How the number of processes is bounded; None: not at all."
    )
    user: str | None = Field(
        default=None, description="The host uid the code runs as, and why that one."
    )
    seccomp: str | None = Field(
        default=None, description="The system-call filter in force for the code; None: none."
    )
    files: Literal["isolated", "open"] = Field(
        description="isolated: the code sees none of the host's files but what runs it and "
        "what it was given (its scratch directory, its workspace, read_dirs); open: it reads "
        "and writes the host's files with the rights of the user running the host."
    )
    filesystem: str = Field(description="What of the host's filesystem the code can reach.")
    environment: str = "allow-list"
    """How the code's environment variables are chosen: an allow-list (the names of inherit_env,
    and env)."""
    shell: Literal["python", "ipython"] | None = Field(
        default=None,
        description="What runs a session's code, once its worker is up: IPython, or plain "
        "Python (asked for, or IPython is not installed in the sandbox).",
    )
    upstream_proxy: str | None = Field(
        default=None,
        description="With an allow-list: the upstream proxy the host's proxy connects through "
        "and where it came from (the host's HTTPS_PROXY, or the setting), never its "
        "credentials; None: it connects directly.",
    )
    ca_files: tuple[str, ...] = Field(
        default=(),
        description="The host's CA configuration given to the sandbox read-only, with the "
        "variables that name it (SSL_CERT_FILE=..., PIP_CERT=...), for TLS behind an "
        "inspecting proxy; empty: none.",
    )
    notes: tuple[str, ...] = Field(default=(), description="Protections that were not applied.")


class NetworkAttempt(_Model):
    """One connection the code tried through its sandbox's proxy (``network=[...]``)."""

    host: str = Field(description="The host as the code asked for it (a name or an address).")
    port: int
    """The port it asked for."""
    protocol: Literal["connect", "http", "socks5", "unknown"] = Field(
        description="How it asked: HTTP CONNECT (TLS), a plain HTTP request, SOCKS5; unknown: "
        "what it sent was neither."
    )
    verdict: Literal["allowed", "refused", "failed"] = Field(
        description="allowed: connected; refused: the policy or a limit said no; failed: "
        "allowed, but the host did not answer (no address, refused, timed out)."
    )
    reason: str = Field(default="", description="Why it was refused or failed, in words.")
    address: str | None = Field(default=None, description="The address it connected to.")
    bytes_out: int = Field(default=0, description="Bytes from the code to the host.")
    bytes_in: int = Field(default=0, description="Bytes from the host to the code.")
    method: str | None = Field(default=None, description="A plain HTTP request's method.")
    open: bool = Field(
        default=False, description="Still open when the execution ended (its bytes so far)."
    )


class NetworkLog(_Model):
    """What the code tried on the network during one execution (``network=[...]`` only)."""

    attempts: tuple[NetworkAttempt, ...] = ()
    """The connections the code tried, in order."""
    omitted: int = Field(default=0, description="Attempts past the record's bound, not listed.")
    limit_reached: str = Field(
        default="", description="A limit that stopped the code's traffic, in words; '' if none."
    )

    @property
    def refused(self) -> tuple[NetworkAttempt, ...]:
        return tuple(attempt for attempt in self.attempts if attempt.verdict == "refused")

    def lines(self, limit: int = 20) -> list[str]:
        """The attempts in words, one a line (at most ``limit``; the rest counted)."""
        found = []
        for attempt in self.attempts[:limit]:
            how = attempt.method or attempt.protocol
            line = f"{printable(attempt.host or '?')}:{attempt.port} ({how}) {attempt.verdict}"
            if attempt.verdict == "allowed":
                line += f", {attempt.bytes_out:,} bytes out, {attempt.bytes_in:,} in"
                line += " (still open)" if attempt.open else ""
            if attempt.reason:
                line += f": {printable(attempt.reason)}"
            found.append(line)
        more = len(self.attempts) - len(found) + self.omitted
        if more:
            found.append(f"and {more} more")
        if self.limit_reached:
            found.append(f"stopped: {printable(self.limit_reached)}")
        return found


class WorkspaceFiles(_Model):
    """What one execution changed in its workspace, as published when it ended."""

    created: tuple[str, ...] = ()
    """Paths, relative to the workspace, the execution created (a folder ends in '/')."""
    changed: tuple[str, ...] = ()
    """Paths of files that were there and that the execution changed."""
    deleted: tuple[str, ...] = ()
    """Paths the execution deleted."""
    refused: tuple[str, ...] = Field(
        default=(),
        description="What the code wrote that was not published, each 'path: why' (a protected "
        "path, a link out of the workspace, over the disk quota...).",
    )
    counts: dict[str, int] = Field(
        default_factory=dict,
        description="How many of each kind (the lists stop at 200 paths).",
    )
    versions: tuple[str, ...] = Field(
        default=(),
        description="The ids of the versions of the person's files this execution replaced or "
        "deleted, kept in <workspace>/.rewyn/versions (rewyn-kernel files restores them).",
    )
    notes: tuple[str, ...] = ()
    """What publishing said, in words: a kept version dropped, the disk quota used up, a
    workspace that could not be published."""

    @property
    def empty(self) -> bool:
        """Whether the execution changed nothing in its workspace and nothing was said."""
        return not any(self.counts.values()) and not self.notes


class SandboxResult(_Model):
    """The outcome of one execution. Failures are reported here, never raised."""

    exit_code: int = Field(
        description="0 on success, 1 for an uncaught exception, n for sys.exit(n), 124 on "
        "timeout, 130 when interrupted, 128 + N when killed by signal N."
    )
    stdout: str = ""
    """What the code wrote to stdout, within output_limit_bytes (head and tail kept)."""
    stderr: str = ""
    """What the code wrote to stderr, within output_limit_bytes; after an uncaught exception it
    ends with the traceback."""
    timed_out: bool = False
    """The execution ran past its timeout."""
    interrupted: bool = False
    """The execution was interrupted (KeyboardInterrupt in the code)."""
    duration_ms: float
    """How long the execution took, in milliseconds."""
    code_hash: str = Field(description="sha256 hex digest of the code's UTF-8 bytes.")
    stdout_bytes: int = Field(default=0, description="Bytes the code wrote to stdout in all.")
    stderr_bytes: int = 0
    """Bytes the code wrote to stderr in all."""
    stdout_truncated: bool = False
    """stdout was cut to output_limit_bytes."""
    stderr_truncated: bool = False
    """stderr was cut to output_limit_bytes."""
    error: ErrorInfo | None = None
    """The uncaught exception, if the code raised one."""
    outputs: tuple[RichOutput, ...] = Field(
        default=(),
        description="The rich outputs the cell shows at its end: ``clear_output`` removes "
        "those before it, an ``update_display`` changes the one it names in place.",
    )
    payloads: tuple[Payload, ...] = ()
    """What IPython asked of the frontend (a session with ipython=True)."""
    ending: Ending = "completed"
    """How the execution ended (see ``Ending``); ``message`` says it in words."""
    message: str = Field(default="", description="What happened, in words; '' when completed.")
    state_lost: bool = Field(
        default=False,
        description="In a session: this execution ran in a fresh worker because the previous "
        "one was killed or died, so earlier variables are gone.",
    )
    sandbox_restarted: bool = Field(
        default=False,
        description="The sandbox was killed at the end of this execution; a session starts a "
        "fresh one and its state is lost.",
    )
    memory_exceeded: bool = False
    """The sandbox went over its memory cap."""
    files: WorkspaceFiles | None = Field(
        default=None,
        description="The files this execution created, changed and deleted in its workspace "
        "(None without one).",
    )
    disk_full: bool = Field(
        default=False,
        description="The scratch quota (disk_limit_mb) was used up when the execution ended: "
        "the code's writes past it failed with ENOSPC.",
    )
    network: NetworkLog | None = Field(
        default=None,
        description="Every connection the code tried through its proxy, allowed or refused "
        "(None unless the sandbox has an allow-list).",
    )
    execution_id: str = ""
    """The id of this execution, and of its SANDBOX_EXECUTED event."""
    provider: str = ""
    """The name of the provider that ran the sandbox."""
    isolation: Isolation | None = None
    """What that provider applied to the sandbox."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """True when the code ran to the end: exit code 0, no timeout, no exception."""
        return self.exit_code == 0 and not self.timed_out and self.error is None


def without_traceback(stderr: str, error: ErrorInfo | None) -> str:
    """``stderr`` without the traceback its end repeats from ``error`` (for a view that shows
    the error on its own: a notebook's error output, a tool result's ``error``)."""
    if error is None:
        return stderr
    return stderr.removesuffix(plain_traceback(error))


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain_traceback(error: ErrorInfo) -> str:
    """The traceback as Python prints it: IPython's entries (coloured, one per frame, no
    newline at their end) joined by newlines, without the colours; a plain one as it is."""
    entries = error.traceback
    if not entries:
        return ""  # (shown by the code's shell itself: IPython's UsageError, say)
    if all(entry.endswith("\n") for entry in entries):
        return "".join(entries)
    return _ANSI.sub("", "\n".join(entries)) + "\n"
