"""What every part of the container provider shares about the engine: the labels that mark a
container as ours, and how its CLI is run."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

__all__ = [
    "BOOT_LABEL",
    "CLI_WAIT_SECONDS",
    "DAEMONLESS",
    "HOST_PID_LABEL",
    "LABEL",
    "PIDNS_LABEL",
    "boot_id",
    "daemonless",
    "labels",
    "pid_ns",
    "run_cli",
]

LABEL = "io.rewyn-kernel.sandbox"
"""Every container carries this label (value: its name), so it can always be found and removed."""
HOST_PID_LABEL = "io.rewyn-kernel.host-pid"
BOOT_LABEL = "io.rewyn-kernel.boot"
"""This machine's boot id: a host pid only means something on the boot that started it."""
PIDNS_LABEL = "io.rewyn-kernel.host-pidns"
"""The PID namespace the host pid is a pid of (a host in a container has its own)."""
CLI_WAIT_SECONDS = 15.0
DAEMONLESS = {"podman"}
"""CLIs that take the OCI runtime as a global option (``podman --runtime X run``)."""


def daemonless(runtime: str) -> bool:
    """Whether the CLI ``runtime`` (a name or a path) runs containers without a daemon."""
    return Path(runtime).name in DAEMONLESS


@functools.cache
def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


@functools.cache
def pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def labels(name: str) -> list[str]:
    """What marks a container (or volume) as this process's, on this boot: ``--label`` options."""
    return [
        *("--label", f"{LABEL}={name}", "--label", f"{HOST_PID_LABEL}={os.getpid()}"),
        *("--label", f"{BOOT_LABEL}={boot_id()}", "--label", f"{PIDNS_LABEL}={pid_ns()}"),
    ]


def run_cli(argv: list[str], timeout: float = 15) -> subprocess.CompletedProcess[str]:
    """Run an engine command and capture its output; a CLI that cannot start or hangs past
    ``timeout`` seconds reads as a failed command (exit 1) that says why."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))
