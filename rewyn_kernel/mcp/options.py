"""The MCP server's options, declared once: the sandbox's (``KernelSettings``, the kernel's
own flags, those tagged ``Surface.MCP``) and the server's (sessions, output budget, policy, run
log, undo), the fields of ``ServerOptions``.

Each server option's field carries its flag (``server_option``) and is declared there alone:
``rewyn-kernel mcp`` derives its flag, type, choices and help from the field
(``option_arguments``), and gives ``ServerOptions`` only the options typed
(``option_values``), so the defaults are the fields' own.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewyn_kernel.mcp.undo import MAX_UNDO_DEPTH
from rewyn_kernel.runtime.tool import DEFAULT_MAX_RESULT_CHARS
from rewyn_kernel.settings import KernelSettings, Surface, plain_type, taken_by
from rewyn_kernel.tools import RiskLevel

MCP_TIMEOUT = 120.0
"""Seconds a call may run unless ``--timeout`` says otherwise: an agent waits on each call
(the kernel's 600 s suits a notebook cell that trains a model, not a tool call)."""
SANDBOX_OPTIONS = taken_by(Surface.MCP)
"""The kernel settings ``rewyn-kernel mcp`` takes for its sandboxes."""


def default_run_log() -> Path:
    """One run log per server process, in Jupyter's data directory (where no sandbox writes)."""
    from jupyter_core.paths import jupyter_data_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(
        jupyter_data_dir(), "rewyn-kernel", "runs", f"mcp-{stamp}-{os.getpid()}.events.jsonl"
    )


@dataclass(frozen=True)
class Flag:
    """How ``rewyn-kernel mcp`` takes one ServerOptions field."""

    flag: str
    help: str
    """What it does; the help adds the field's default (or ``default``)."""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    """The words it takes, read into the field's value by ``read``."""
    read: Callable[[Any], Any] | None = None
    """The parsed value to the field's (without: as parsed, by the field's type)."""
    default: str | None = None
    """The default as the help says it, where the field's own is not how a person writes it."""


def server_option(flag: str, help: str, **how: Any) -> dict[str, Flag]:
    """The metadata of a ServerOptions field that ``rewyn-kernel mcp`` takes as ``flag``."""
    return {"flag": Flag(flag, help, **how)}


LEVELS = tuple(str(level) for level in RiskLevel)


def _approve_above(text: str) -> RiskLevel | None:
    return None if text == "none" else RiskLevel(text)


def _absolute(path: Path) -> Path:
    return path.absolute()


@dataclass(frozen=True)
class ServerOptions:
    settings: KernelSettings = field(default_factory=KernelSettings)
    """The sandbox of every session (the code works in the workspace, when one is given, else
    in its scratch directory)."""
    max_sessions: int = field(
        default=8,
        metadata=server_option("--max-sessions", "sessions open at once, at most", metavar="N"),
    )
    idle_ttl: float | None = field(
        default=1800.0,
        metadata=server_option(
            "--idle-ttl",
            "close a session after this long without a call (0: never)",
            metavar="SECONDS",
            read=lambda seconds: seconds or None,
        ),
    )
    """Seconds a session may go without a call before it is closed; None: never."""
    max_output_chars: int = field(
        default=DEFAULT_MAX_RESULT_CHARS,
        metadata=server_option(
            "--max-output-chars",
            "characters of output a result gives the model (head and tail kept; the whole "
            "output is saved to a file the result names)",
            metavar="N",
        ),
    )
    deny_above: RiskLevel = field(
        default=RiskLevel.HIGH,
        metadata=server_option(
            "--max-risk",
            "deny every run_python call if the sandbox is riskier than this",
            choices=LEVELS,
            read=RiskLevel,
        ),
    )
    approve_above: RiskLevel | None = field(
        default=RiskLevel.MEDIUM,
        metadata=server_option(
            "--approve-above",
            "ask the person (through the client) before running code when the sandbox is "
            "riskier than this; a client that cannot ask gets a denial (none: never ask)",
            choices=(*LEVELS, "none"),
            read=_approve_above,
        ),
    )
    approve_all: bool = field(
        default=False,
        metadata=server_option(
            "--approve-all",
            "ask the person before every run_python call, whatever the sandbox's risk (low "
            "too; --approve-above then asks nothing more): with --notebook each cell waits "
            "for the person's Run",
        ),
    )
    run_log: Path | None = field(
        default=None,
        metadata=server_option(
            "--run-log",
            "JSONL file for every call's event",
            metavar="PATH",
            read=_absolute,
            default="a new one per server in <Jupyter data dir>/rewyn-kernel/runs/",
        ),
    )
    """Where every call's SANDBOX_EXECUTED event goes; None: ``default_run_log()``."""
    undo_depth: int = field(
        default=1,
        metadata=server_option(
            "--undo-depth",
            "run_python calls of each session that undo can take back: a checkpoint (a paused "
            "copy-on-write fork of the session's Python, a few ms, memory only as the session "
            f"writes over it) is kept before each of the last N; 0: off, no undo tool (at most "
            f"{MAX_UNDO_DEPTH})",
            metavar="N",
        ),
    )

    notebook: str | None = field(
        default=None,
        metadata=server_option(
            "--notebook",
            "work in this notebook of a running Jupyter server (its path under the server's "
            "root), the one a person has open: run_python adds a cell there and runs it in the "
            "notebook's sandboxed kernel; the person sees it live and approves where the policy "
            "asks (needs jupyter-collaboration on the server; the sandbox settings are then the "
            "kernel's own)",
            metavar="PATH",
        ),
    )
    jupyter_url: str = field(
        default_factory=lambda: os.environ.get("JUPYTER_URL", "http://localhost:8888"),
        metadata=server_option(
            "--jupyter-url",
            "the Jupyter server of --notebook",
            metavar="URL",
            default="$JUPYTER_URL, else http://localhost:8888",
        ),
    )
    jupyter_token: str | None = field(
        default_factory=lambda: os.environ.get("JUPYTER_TOKEN") or None,
        metadata=server_option(
            "--jupyter-token",
            "the token for --jupyter-url (rewyn-kernel agent-token makes one that opens that "
            "notebook and nothing else)",
            metavar="TOKEN",
            default="$JUPYTER_TOKEN",
        ),
    )
    approval_timeout: float = field(
        default=300.0,
        metadata=server_option(
            "--approval-timeout",
            "with --notebook: seconds a call waits, as a pending cell, for the person to run or "
            "reject it before it is refused",
            metavar="SECONDS",
        ),
    )

    def __post_init__(self) -> None:
        if self.approval_timeout <= 0:
            raise ValueError("approval_timeout must be positive")
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if self.idle_ttl is not None and self.idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None: never)")
        if self.max_output_chars < 2_000:
            raise ValueError("max_output_chars must be at least 2000")
        if self.approve_above is not None and self.approve_above > self.deny_above:
            raise ValueError(
                f"approve_above ({self.approve_above}) is above deny_above ({self.deny_above}): "
                "nothing could need approval"
            )
        if not 0 <= self.undo_depth <= MAX_UNDO_DEPTH:
            raise ValueError(f"undo_depth must be between 0 and {MAX_UNDO_DEPTH}")

    def sandbox_settings(self) -> KernelSettings:
        """The sandbox settings as the server runs them: its own timeout unless one was given;
        the workspace it was given (``--workspace``), else none (each session then works in a
        scratch directory of its own)."""
        values = self.settings.model_dump(exclude_unset=True)
        values.setdefault("timeout", MCP_TIMEOUT)
        values["notebook_workspace"] = False
        if values.get("workspace") is not None:
            values.setdefault("workspace_name", "mcp")  # (its staging folders and versions)
        values.pop("run_log", None)
        return KernelSettings.model_validate(values)


def _flags() -> list[tuple[dataclasses.Field[Any], Flag]]:
    """The ServerOptions fields that have a flag, with it."""
    return [
        (item, item.metadata["flag"])
        for item in dataclasses.fields(ServerOptions)
        if "flag" in item.metadata
    ]


def _dest(item: dataclasses.Field[Any]) -> str:
    # (Apart from the sandbox settings' dests: the server's run_log is not the kernel's.)
    return f"server_{item.name}"


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def option_arguments() -> list[tuple[str, dict[str, Any]]]:
    """The ``add_argument`` arguments (flag, keywords) of the ServerOptions fields that have a
    flag: their type the field's (or words, with choices), their help the flag's and the
    field's default. An option not typed stays out of the parsed namespace."""
    hints = typing.get_type_hints(ServerOptions)
    arguments: list[tuple[str, dict[str, Any]]] = []
    for item, flag in _flags():
        kind, _ = plain_type(hints[item.name])
        kwargs: dict[str, Any] = {"dest": _dest(item), "default": argparse.SUPPRESS}
        if kind is bool:  # (a switch: the flag alone turns it on)
            kwargs["action"] = "store_true"
        elif flag.choices is not None:
            kwargs["choices"] = flag.choices
        else:
            kwargs["type"] = kind
        if flag.metavar is not None:
            kwargs["metavar"] = flag.metavar
        default = flag.default if flag.default is not None else _shown(item.default)
        kwargs["help"] = flag.help if kind is bool else f"{flag.help} (default: {default})"
        arguments.append((flag.flag, kwargs))
    return arguments


def option_values(args: argparse.Namespace) -> dict[str, Any]:
    """The options ``option_arguments`` declared that were typed, as ServerOptions keywords."""
    values: dict[str, Any] = {}
    for item, flag in _flags():
        if hasattr(args, _dest(item)):
            value = getattr(args, _dest(item))
            values[item.name] = value if flag.read is None else flag.read(value)
    return values


def with_flags(message: str) -> str:
    """``message`` (a ServerOptions error) with each option's field name as its flag."""
    for item, flag in _flags():
        message = re.sub(rf"\b{item.name}\b", flag.flag, message)
    return message
