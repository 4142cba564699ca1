"""The MCP server's options, declared once: the sandbox's (``KernelSettings``, the kernel's
own flags) and the server's (sessions, output budget, policy, run log, transport)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from rewyn_kernel.runtime._tool import DEFAULT_MAX_RESULT_CHARS
from rewyn_kernel.settings import SANDBOX_SETTINGS, KernelSettings
from rewyn_kernel.tools import RiskLevel

MCP_TIMEOUT = 120.0
"""Seconds a call may run unless ``--timeout`` says otherwise: an agent waits on each call
(the kernel's 600 s suits a notebook cell that trains a model, not a tool call)."""
SANDBOX_OPTIONS = (
    *SANDBOX_SETTINGS,
    "workspace",
    "protected",
    "read_dirs",
    "env",
    "output_limit_bytes",
    "ipython",
)
"""The kernel settings ``rewyn-kernel mcp`` takes for its sandboxes."""


def default_run_log() -> Path:
    """One run log per server process, in Jupyter's data directory (where no sandbox writes)."""
    from jupyter_core.paths import jupyter_data_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(
        jupyter_data_dir(), "rewyn-kernel", "runs", f"mcp-{stamp}-{os.getpid()}.events.jsonl"
    )


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

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if self.idle_ttl is not None and self.idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None: never)")
        if self.max_output_chars < 2_000:
            raise ValueError("max_output_chars must be at least 2000")
        if self.approve_above is not None and self.approve_above > self.deny_above:
            raise ValueError("approve_above is above deny_above: nothing could need approval")

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
