"""The sweep of dead hosts' containers: a host killed outright (SIGKILL, a crash) leaves its
containers running; the next process on the same engine removes them, judging by their labels."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime.providers.container.engine import (
    BOOT_LABEL,
    HOST_PID_LABEL,
    LABEL,
    PIDNS_LABEL,
    boot_id,
    daemonless,
    pid_ns,
)

__all__ = ["EngineSweep"]

_SWEPT: set[tuple[str, ...]] = set()
_SWEEP_LOCK = threading.Lock()


class EngineSweep:
    """The rewyn containers (and podman's volumes) of one engine, reached through its CLI."""

    def __init__(self, cli: Sequence[str], runtime: str) -> None:
        self._argv = list(cli)
        self.runtime = runtime

    def _cli(self) -> list[str]:
        return list(self._argv)

    def containers(self, *, host_pid: int | None = None, everyone: bool = False) -> list[str]:
        """Names of rewyn containers (running or not) started by this process (or by
        ``host_pid``, or by anyone)."""
        label = LABEL if everyone else f"{HOST_PID_LABEL}={host_pid or os.getpid()}"
        done = subprocess.run(
            [*self._cli(), "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:  # (an empty list would claim there are none)
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise ProviderUnavailableError(f"{self.runtime} ps failed: {why}")
        return [line for line in done.stdout.split() if line]

    def sweep(self) -> list[str]:
        """Remove rewyn containers whose host process is gone; return their names.

        Only containers started on this boot of this machine, by a host in this PID namespace,
        are judged (a pid means nothing elsewhere, nor to a host in another container; one with
        no such labels, from an older version, counts as ours), and a pid that is alive keeps
        its containers. Every provider sweeps once per
        process when it first launches (in the background), so a host that died (SIGKILL, a
        crash) leaves nothing behind for longer than its next start.
        """
        stale = _stale(self._labelled("container"))
        with contextlib.suppress(subprocess.TimeoutExpired):  # (the volumes are still swept)
            self._remove_stale(stale)
        # and the named volumes: podman's files views, every engine's scratch='volume' ones
        _remove_volumes(self._cli(), _stale(self._labelled("volume")))
        return stale

    def _remove_stale(self, stale: list[str]) -> None:
        if stale:
            # podman: no 10 s grace, and --ignore, without which one name gone since the
            # listing makes its rm remove none of the others (podman 4.3, exit 0).
            grace = ["-t", "0", "--ignore"] if daemonless(self.runtime) else []
            subprocess.run(
                [*self._cli(), "rm", "-f", "-v", *grace, *stale],
                capture_output=True,
                timeout=60,
                check=False,
            )

    def _labelled(self, kind: str) -> dict[str, dict[str, str]]:
        """Each rewyn ``kind`` ("container" or "volume") the engine lists, by name, with its
        labels; nothing at all when either listing fails (a sweep must never judge a guess).

        The labels come from ``inspect``, whose template reads the same on docker and podman
        (podman's ``ps`` has no ``.Label``: its listing errs half-way through each line).
        """
        listing = (
            ["ps", "-a", "--format", "{{.Names}}"]
            if kind == "container"
            else ["volume", "ls", "--format", "{{.Name}}"]
        )
        listed = subprocess.run(
            [*self._cli(), *listing, "--filter", f"label={LABEL}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        names = listed.stdout.split()
        if listed.returncode != 0 or not names:
            return {}
        field = ".Config.Labels" if kind == "container" else ".Labels"
        inspected = subprocess.run(
            [
                *self._cli(),
                kind,
                "inspect",
                "--format",
                "{{.Name}}\t{{json " + field + "}}",
                *names,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        found: dict[str, dict[str, str]] = {}
        for line in inspected.stdout.splitlines():  # (one gone since it was listed: no line)
            name, _, labels = line.partition("\t")
            try:
                parsed = json.loads(labels)
            except ValueError:
                continue
            if isinstance(parsed, dict) and name.lstrip("/") in names:
                found[name.lstrip("/")] = {str(k): str(v) for k, v in parsed.items()}
        return found

    def sweep_once(self) -> None:
        """Start this process's one sweep for this engine (see ``sweep``), in the background."""
        key = (*self._cli(), os.environ.get("DOCKER_HOST", ""))
        with _SWEEP_LOCK:
            if key in _SWEPT:
                return
            _SWEPT.add(key)

        def sweep() -> None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.sweep()

        threading.Thread(target=sweep, daemon=True, name="rewyn-sweep").start()


def _stale(labelled: dict[str, dict[str, str]]) -> list[str]:
    """The names whose host process is gone. Only this boot's and this PID namespace's are
    judged (a pid means nothing elsewhere; no such label, from an older version, counts as
    ours)."""
    stale = []
    for name, labels in labelled.items():
        if labels.get(LABEL) is None:
            continue  # not one of ours after all
        if labels.get(BOOT_LABEL, "") not in ("", boot_id()):
            continue  # another boot, or another machine on the same engine: not ours
        if labels.get(PIDNS_LABEL, "") not in ("", pid_ns()):
            continue  # a host in another PID namespace (a container): its pid is not ours to judge
        pid = labels.get(HOST_PID_LABEL, "")
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            stale.append(name)
    return stale


def _remove_volumes(cli: Sequence[str], names: Sequence[str]) -> None:
    if names:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [*cli, "volume", "rm", "-f", *names], capture_output=True, timeout=30, check=False
            )
