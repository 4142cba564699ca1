"""The MCP server's options, declared once: the sandbox's (``KernelSettings``, the kernel's
own flags) and the server's (sessions, output budget, policy, run log, transport).

A server option whose field carries ``flag`` metadata (``server_option``) is declared there
alone: ``rewyn-kernel mcp`` derives its flag, type, default and help from the field
(``option_arguments``, ``option_values``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewyn_kernel.mcp.undo import MAX_UNDO_DEPTH
from rewyn_kernel.runtime._tool import DEFAULT_MAX_RESULT_CHARS
from rewyn_kernel.settings import KernelSettings, Surface, taken_by
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


def server_option(flag: str, metavar: str, help: str) -> dict[str, str]:
    """The metadata of a ServerOptions field that ``rewyn-kernel mcp`` takes as ``flag``."""
    return {"flag": flag, "metavar": metavar, "help": help}


@dataclass(frozen=True)
class ServerOptions:
    settings: KernelSettings = field(default_factory=KernelSettings)
    """The sandbox of every session (the code works in the workspace, when one is given, else
    in its scratch directory)."""
    max_sessions: int = 8
    idle_ttl: float | None = 1800.0
    """Seconds a session may go without a call before it is closed; None: never."""
    max_output_chars: int = DEFAULT_MAX_RESULT_CHARS
    deny_above: RiskLevel = RiskLevel.HIGH
    approve_above: RiskLevel | None = RiskLevel.MEDIUM
    run_log: Path | None = None
    """Where every call's SANDBOX_EXECUTED event goes; None: ``default_run_log()``."""
    undo_depth: int = field(
        default=1,
        metadata=server_option(
            "--undo-depth",
            "N",
            "run_python calls of each session that undo can take back: a checkpoint (a paused "
            "copy-on-write fork of the session's Python, a few ms, memory only as the session "
            f"writes over it) is kept before each of the last N; 0: off, no undo tool (at most "
            f"{MAX_UNDO_DEPTH})",
        ),
    )

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if self.idle_ttl is not None and self.idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None: never)")
        if self.max_output_chars < 2_000:
            raise ValueError("max_output_chars must be at least 2000")
        if self.approve_above is not None and self.approve_above > self.deny_above:
            raise ValueError("approve_above is above deny_above: nothing could need approval")
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


def option_arguments() -> list[tuple[str, dict[str, Any]]]:
    """The ``add_argument`` arguments (flag, keywords) of the ServerOptions fields that have a
    flag: their type and default the field's, their help its metadata's."""
    hints = typing.get_type_hints(ServerOptions)
    arguments: list[tuple[str, dict[str, Any]]] = []
    for item in dataclasses.fields(ServerOptions):
        if "flag" not in item.metadata:
            continue
        arguments.append(
            (
                item.metadata["flag"],
                {
                    "dest": item.name,
                    "type": hints[item.name],
                    "default": item.default,
                    "metavar": item.metadata["metavar"],
                    "help": f"{item.metadata['help']} (default {item.default})",
                },
            )
        )
    return arguments


def option_values(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags ``option_arguments`` declared, as ServerOptions keywords."""
    return {kwargs["dest"]: getattr(args, kwargs["dest"]) for _, kwargs in option_arguments()}
