"""SandboxCore: what sessions need of a sandbox, without a reference back to it.

Sessions hold the core, not the sandbox, so a sandbox nobody references any more is collected
(``create().execute(...)`` with no ``close()``) and its finalizer, which holds only the core,
kills what is still running and removes the scratch directory.
"""

from __future__ import annotations

import errno
import functools
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rewyn_kernel.runtime._result import (
    ErrorInfo,
    Isolation,
    NetworkAttempt,
    NetworkLog,
    Payload,
    RichOutput,
    SandboxResult,
    WorkspaceFiles,
)
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime._tool_call import LoggedFile, LoggedImage
from rewyn_kernel.runtime.events import (
    EventListener,
    OutputSummary,
    SandboxEvent,
    ToolCall,
    ToolResult,
)
from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.host.channel import FORK_HEADROOM_BYTES, FORK_HEADROOM_SHARE, LiveWorker
from rewyn_kernel.runtime.host.protocol import MAX_HEADER_BYTES, frame_adapter, worker_program
from rewyn_kernel.runtime.host.workspace import Budget
from rewyn_kernel.runtime.providers.base import SandboxFiles, ScratchError
from rewyn_kernel.runtime.worker.config import WorkerConfig

if TYPE_CHECKING:
    from rewyn_kernel.runtime.egress.policy import NetworkPolicy
    from rewyn_kernel.runtime.providers.base import SandboxProvider

_BUILT = threading.Lock()


@functools.cache
def ipykernel_version() -> str:
    """The version of the ipykernel installed here (the sandbox's IPython says it runs under
    it, as the kernel that relays its cells does), or ''."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ipykernel")
    except PackageNotFoundError:
        return ""


def build_models() -> None:
    """Build the validators of what a worker sends and of a result (pydantic builds them on
    first use: they are declared ``defer_build``, so importing the runtime, and a kernel's
    start, does not pay for them). Called once a worker is on its way up, which takes far
    longer, and before its channel's thread starts reading frames: a pydantic model is not
    built safely in two threads at once. The lock keeps two sessions from doing it together."""
    with _BUILT:
        frame_adapter()
        models = (ErrorInfo, RichOutput, Payload, SandboxResult, OutputSummary, SandboxEvent)
        # (Those a session makes on their own, not only as a result's fields.)
        parts = (WorkspaceFiles, NetworkLog, NetworkAttempt)
        for model in (*models, *parts, ToolResult, ToolCall, LoggedFile, LoggedImage):
            if not model.__pydantic_complete__:
                model.model_rebuild()


@dataclass(eq=False)
class SandboxCore:
    id: str
    provider: SandboxProvider
    spec: SandboxSpec
    files: SandboxFiles
    """The scratch directory, wherever the provider keeps it (closed at cleanup)."""
    isolation: Isolation
    listeners: tuple[EventListener, ...]
    budget: Budget = field(default_factory=lambda: Budget(None))
    """What the code may still write in its workspace (disk_limit_mb: host/workspace.py)."""
    _live: set[LiveWorker] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _cleaned: bool = False
    preload: str | None = None
    """Code a one-shot worker runs once before it forks the executions (``warm_up``)."""

    def launch_worker(self, *, fork_per_exec: bool) -> LiveWorker:
        """Start one worker for this sandbox (called from Session).

        ``fork_per_exec``: run each execution in a fresh fork of the worker, so nothing
        survives between executions (the one-shot ``execute``).
        """
        with self._lock:
            if self._cleaned:
                raise RuntimeError("the sandbox is closed")
            name = f"rewyn-{self.id}-{next(self._names)}"
        door = None
        policy = self.spec.allow_list
        if policy is not None:  # (the worker's way out, through this process's proxy)
            # (Imported here: the proxy and h11 are a start's cost only for an allow-list.)
            from rewyn_kernel.runtime.egress.proxy import SERVICE

            door = SERVICE.open_door(policy)
        try:
            process = (
                self.provider.launch(self.spec, self.files, name, egress=door.folder)
                if door is not None
                else self.provider.launch(self.spec, self.files, name)
            )
        except BaseException:
            if door is not None:
                door.close()
            raise
        cells = getattr(process, "workspace", None)
        if isinstance(cells, WorkspaceCells):  # (the sandbox's, for all of its workers)
            cells.budget = self.budget
            quota = getattr(self.files, "quota", None)  # (a LocalFiles' own filesystem)
            cells.scratch = self.files.host_path if quota is not None else None
        try:
            # The provider's fields, what only the launch knows (a view it mounted for this
            # worker, say), then the sandbox's own: each field given by one of them only, and
            # a field misspelt or mistyped is a WireError here (the process is killed).
            config = WorkerConfig(
                **self.provider.worker_config(self.spec, self.files).given(),
                **getattr(process, "settings", {}),
                fork_per_exec=fork_per_exec,
                preload=self.preload if fork_per_exec else None,
                fork_headroom=(FORK_HEADROOM_BYTES, FORK_HEADROOM_SHARE),
                shell="ipython" if self.spec.ipython and not fork_per_exec else "python",
                # ("proxy": an allow-list, reached through the proxy's variables)
                network=self.spec.network if isinstance(self.spec.network, str) else "proxy",
                memory_limit_mb=self.spec.memory_limit_mb,
                kernel_version=ipykernel_version(),
                max_rich_bytes=MAX_HEADER_BYTES - 4096,
            )
            build_models()  # (the worker starts meanwhile; its frames are read from here on)
            worker = LiveWorker(
                process,
                worker_program(config),
                startup_timeout=self.spec.startup_timeout,
                on_kill=self._forget,
            )
        except BaseException:
            process.kill()
            process.close()
            if door is not None:
                door.close()
            raise
        worker.egress = door
        if door is not None and worker.kill_reason is not None:  # (killed while it started)
            door.close()
        if isinstance(cells, WorkspaceCells):
            cells.watch(worker.teardown)  # (the quota, while the code writes in its workspace)
        watch = getattr(self.files, "watch", None)
        if callable(watch):  # (a scratch folder bounded by a watcher: providers/local/files.py)
            watch(worker.teardown, stateless=fork_per_exec)
        with self._lock:
            closed = self.closed()  # again: cleanup may have run while the worker started
            if not closed:
                self._live.add(worker)
            now = self.spec.allow_list  # (hosts granted while it started: ``allow_hosts``)
        if door is not None and now is not None and now != policy:
            door.change_policy(now)
        if closed:  # the sandbox closed while this worker was starting
            worker.kill("the sandbox was closed while it started")
            raise RuntimeError("the sandbox is closed")
        return worker

    def allow_hosts(self, entries: tuple[str, ...]) -> NetworkPolicy | None:
        """Add ``entries`` to the allow-list of this sandbox's proxy, live: for the workers
        running now (their doors, forks' included: they share their root's) and those started
        later. None where the network is no allow-list (``none``: no proxy to take them)."""
        with self._lock:
            policy = self.spec.allow_list
            if policy is None:
                return None
            added = tuple(entry for entry in entries if entry not in policy.allow)
            if added:
                policy = policy.model_copy(update={"allow": (*policy.allow, *added)})
                self.spec = self.spec.model_copy(update={"network": policy})
            doors = [worker.egress for worker in self._live if worker.egress is not None]
        for door in doors:
            door.change_policy(policy)
        return policy

    def closed(self) -> bool:
        return self._cleaned

    def _forget(self, worker: LiveWorker) -> None:
        with self._lock:
            self._live.discard(worker)
        if worker.egress is not None:  # (its record stays readable: see Door.take)
            worker.egress.close()

    def cleanup(self) -> None:
        """Kill every worker still running and remove what the sandbox put on disk."""
        with self._lock:
            self._cleaned = True
            live = list(self._live)
        for worker in live:
            worker.teardown("the sandbox was closed")
        self.files.close()  # (its workers are gone: nothing holds it)

    def workdir(self) -> Path:
        """The scratch directory on this host; ScratchError where the provider keeps the files
        elsewhere (read them through ``files``)."""
        path = self.files.host_path
        if path is None:
            raise ScratchError(
                errno.ENOENT,
                "this sandbox's files are not on this host: use read_file, write_file and "
                "list_files (or .files)",
                f"{self.provider.name} sandbox {self.id}",
            )
        return path
