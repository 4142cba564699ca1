"""One worker container: ``<cli> run`` of it, its removal, and what its end means."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.host.views import HostMount
from rewyn_kernel.runtime.providers.base import ExitInfo
from rewyn_kernel.runtime.providers.container.engine import CLI_WAIT_SECONDS, LABEL, daemonless
from rewyn_kernel.runtime.providers.local import cgroup
from rewyn_kernel.runtime.providers.popen import LaunchSettings, PopenWorker

__all__ = ["ContainerWorker"]


class ContainerWorker(PopenWorker):
    """``<cli> run`` of one worker container; killing it removes the container."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        *,
        cli: Sequence[str],
        name: str,
        memory_capped: bool,
        tcp_limit: tuple[Path, int] | None = None,
        workspace: WorkspaceCells | None = None,
        mounts: Sequence[HostMount] = (),
        settings: LaunchSettings | None = None,
    ) -> None:
        super().__init__(
            argv,
            env,
            cwd,
            settings=settings,
            workspace=workspace,
            on_close=[mount.remove for mount in mounts],
        )
        self._tcp_limit = tcp_limit
        """Where the engine writes the container's id, and the memory cap whose share bounds
        its TCP buffers (cgroup v1: see on_ready)."""
        self._cli = list(cli)
        self._name = name
        self._memory_capped = memory_capped
        self._gvisor = any(Path(arg).name == "runsc" for arg in argv)
        self._killed = False

    def kill(self) -> None:
        """Remove the container, then see the CLI end; nothing of this name is left after.

        The CLI is not killed first: killed while the engine creates the container, it would
        leave it behind in "Created" state (the engine finishes the creation, and nobody starts
        or removes it). So the container is removed, again and again until the CLI has exited
        (it does once its container is gone); only a CLI that hangs past CLI_WAIT_SECONDS is
        killed. Then the name is removed until it is no longer listed.
        """
        self._killed = self._killed or self.poll() is None
        deadline = time.monotonic() + CLI_WAIT_SECONDS
        while self.poll() is None and time.monotonic() < deadline:
            self._remove()
            self.wait(0.2)
        if self.poll() is None:
            self.signal_group(signal.SIGKILL)
            self.wait(10)
        deadline = time.monotonic() + 5
        while self._listed() and time.monotonic() < deadline:
            self._remove()
            time.sleep(0.1)
        self._let_go()

    def _let_go(self) -> None:
        """(Nothing but the container was the engine's: the workspace and its mounts are this
        worker's, released at close.)"""

    def on_ready(self) -> None:
        """Called by the channel when the container's supervisor is up, before any code runs:
        bound its TCP buffers, which cgroup v1 counts apart from its memory, and only once a
        limit is written (providers/local/cgroup.py); mount the workspace's first view."""
        super().on_ready()
        if self._tcp_limit is None:
            return
        cidfile, limit = self._tcp_limit
        try:
            container_id = cidfile.read_text().strip()
        except OSError as exc:
            raise OSError(f"the engine wrote no container id ({exc})") from exc
        if not re.fullmatch(r"[0-9a-f]{64}", container_id):
            raise OSError(f"the engine wrote an unexpected container id {container_id[:80]!r}")
        cgroup.bound_container_tcp(container_id, limit)

    def memory_usage(self) -> tuple[int, int | None]:
        """What the container uses now and its cap, from its cgroup (v1, found by its id:
        where its TCP buffers are bounded); OSError elsewhere (gVisor, cgroup v2)."""
        if self._tcp_limit is None:
            raise OSError("the container's cgroup is not known here")
        container_id = self._tcp_limit[0].read_text().strip()
        if not re.fullmatch(r"[0-9a-f]{64}", container_id):
            raise OSError("the engine has not written the container's id yet")
        return cgroup.memory_usage(cgroup.container_memory_cgroup(container_id), 1)

    def close(self) -> None:
        super().close()
        self._let_go()
        if self._tcp_limit is not None:
            with contextlib.suppress(OSError):
                self._tcp_limit[0].unlink()

    def _remove(self) -> None:
        # podman's rm -f waits 10 s for a graceful stop unless told not to.
        grace = ["-t", "0"] if daemonless(self._cli[0]) else []
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [*self._cli, "rm", "-f", "-v", *grace, self._name],
                capture_output=True,
                timeout=15,
                check=False,
            )

    def _listed(self) -> bool:
        try:
            done = subprocess.run(
                [*self._cli, "ps", "-aq", "--filter", f"label={LABEL}={self._name}"],
                capture_output=True,
                timeout=15,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return bool(done.stdout.strip())

    def exit_info(self) -> ExitInfo:
        info = super().exit_info()
        # PID 1 of a container ignores every signal sent from inside it, so a SIGKILL that the
        # host did not send comes from the kernel: under a memory cap, the OOM killer (which,
        # under gVisor, kills the whole sandbox).
        oom = info.exit_code == 137 and self._memory_capped and not self._killed
        note = ""
        if oom and self._gvisor:
            note = "most likely; under gVisor code can also SIGKILL its own init"
        elif self._gvisor and info.exit_code == 2 and not self._killed:
            note = "under gVisor, reaching the pids limit ends the whole sandbox this way"
        return ExitInfo(exit_code=info.exit_code, signal=info.signal, oom_killed=oom, note=note)
