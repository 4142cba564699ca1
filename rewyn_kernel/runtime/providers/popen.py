"""A worker process started with Popen: the common part of every shell-out provider."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.providers.base import ExitInfo
from rewyn_kernel.runtime.providers.local.cgroup import (
    TCP_WATCH,
    WorkerCgroup,
    move_tree,
    read_counter,
    watch_threshold,
)
from rewyn_kernel.runtime.worker.config import Clean, Egress, WorkspaceSetting


class LaunchSettings(TypedDict, total=False):
    """Fields of the worker's config (``worker/config.py``) that only a launch knows."""

    egress: Egress
    workspace: WorkspaceSetting
    binds: tuple[tuple[str, str], ...]
    cgroup_gate: int
    clean: Clean


class PopenWorker:
    """A worker started with ``subprocess.Popen`` in its own session (process group).

    Subclasses override ``kill`` when a signal to the process group does not reach everything
    the launch started (a container, say).
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        *,
        farewell: float = 0.0,
        pass_fds: Sequence[int] = (),
        cgroup: WorkerCgroup | None = None,
        settings: LaunchSettings | None = None,
        workspace: WorkspaceCells | None = None,
        on_close: Sequence[Callable[[], None]] = (),
    ) -> None:
        """``farewell``: seconds ``kill`` first gives the worker, its input closed, to end by
        itself (and end what it started) before the process group is killed. ``pass_fds``:
        descriptors the launched program inherits (the caller still owns and closes them).
        ``cgroup``: the cgroups the launch's processes are moved into while they start (the
        supervisor forks no code before they are); this worker owns them from here on and
        removes them once its processes are gone. ``settings``: worker
        settings only this launch knows (added to the provider's ``worker_config``).
        ``workspace``: the worker's workspace (host/cells.py): this worker owns it, and closes it
        (what is left published) once its processes are gone.
        ``on_close``: what to release once the worker is dead (a view mounted for it)."""
        self.argv = list(argv)
        self.settings: LaunchSettings = {**(settings or {})}
        self.workspace = workspace
        self._on_close = ([workspace.close] if workspace is not None else []) + list(on_close)
        self._cgroup = cgroup
        self._oom_kills = 0
        """The cgroup's OOM kills, as last read (it is removed at close)."""
        self._farewell = farewell
        self._mover: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()
        self._overrun = ""
        """Why the watcher killed the sandbox (it held too much, see ``_watch``), or ""."""
        gate = door = None
        if cgroup is not None:
            # The supervisor reads its go from ``gate`` before it forks any code (see _move).
            gate, door = os.pipe()
            self.settings["cgroup_gate"] = gate
            pass_fds = (*pass_fds, gate)
        # start_new_session: the kernel's interrupts (SIGINT to its process group) must not hit
        # the sandbox directly; the session forwards them once, on purpose.
        try:
            self._popen = self._start(env, cwd, pass_fds)
        except BaseException:
            if door is not None:
                os.close(door)
            if cgroup is not None:
                cgroup.remove(0)
            self._release()
            raise
        finally:
            if gate is not None:
                os.close(gate)
        if cgroup is not None and door is not None:
            mover = threading.Thread(
                target=self._move, args=(cgroup, door), name="rewyn-cgroup", daemon=True
            )
            try:
                mover.start()
            except BaseException:  # (no thread: the door is still this one's, the rest too)
                os.close(door)
                self.signal_group(signal.SIGKILL)
                self._popen.wait()
                cgroup.remove()
                self._release()
                raise
            self._mover = mover
        if cgroup is not None and cgroup.watched:
            watcher = threading.Thread(
                target=self._watch, args=(cgroup,), name="rewyn-memory", daemon=True
            )
            try:
                watcher.start()
            except BaseException:  # (unwatched, the cap would not hold: no sandbox)
                self.signal_group(signal.SIGKILL)
                self._popen.wait()
                self._closing.set()
                if self._mover is not None:
                    self._mover.join()
                cgroup.remove()
                self._release()
                raise
            self._watcher = watcher
        assert self._popen.stdin is not None
        assert self._popen.stdout is not None
        assert self._popen.stderr is not None
        self._streams = (self._popen.stdin, self._popen.stdout, self._popen.stderr)

    def _start(
        self, env: Mapping[str, str], cwd: Path, pass_fds: Sequence[int]
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
            bufsize=0,
        )

    def _move(self, group: WorkerCgroup, door: int) -> None:
        """(The mover thread, owner of ``door``.) Move the worker's processes into ``group``
        while they start, then tell the supervisor: a zero byte, or a one and why not, ended by
        a newline (it then fails to start and says so). It decides on that first byte, so a
        copy of ``door`` that a fork of this process holds delays nothing. Joining costs an
        RCU grace period: here it overlaps the start instead of delaying it."""
        why: str | None = "the host could not move it"
        try:
            why = move_tree(group, self._popen.pid, lambda: self._popen.poll() is None)
        except Exception as exc:
            why = f"the sandbox's processes could not be moved: {exc!r}"
        finally:
            if why is None:
                answer = b"\0"
            else:
                answer = b"\1" + " ".join(why.split()).encode("utf-8", "replace")[:1000] + b"\n"
            try:
                with contextlib.suppress(OSError):  # (a supervisor already gone reads nothing)
                    os.write(door, answer)
            finally:
                os.close(door)

    def _watch(self, group: WorkerCgroup) -> None:
        """(The watcher thread, under cgroup v1.) Kill the sandbox once what it holds, memory
        and TCP buffers together (``WorkerCgroup.held``), comes within ``watch_threshold`` of
        its cap: the kernel lets each connection queue its first buffers past the TCP limit,
        and kills nothing for it (see local/cgroup.py)."""
        cap = group.limit_bytes
        assert cap is not None
        most = watch_threshold(cap)
        fds: list[int] = []
        try:
            with contextlib.suppress(OSError):  # (none: each look reads the files by path)
                for path in group.counters:
                    fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            counters = fds if len(fds) == len(group.counters) else group.counters
            while not self._closing.wait(TCP_WATCH) and self._popen.poll() is None:
                try:
                    held = sum(read_counter(counter) for counter in counters)
                    if held > most:  # (an upper bound: then less the cache it can drop)
                        held = group.held()
                except (OSError, ValueError):
                    continue  # (the cgroup is being removed; or a torn read: look again)
                if held > most:
                    self._overrun = (
                        f"it held {held >> 20} MiB, socket buffers included: within "
                        f"{(cap - most) >> 20} MiB of its cap of {cap >> 20} MiB"
                    )
                    self.signal_group(signal.SIGKILL)
                    return
        finally:
            for fd in fds:
                os.close(fd)

    def on_ready(self) -> None:
        """Called by the channel once the sandbox is up, before any code runs in it."""
        if self.workspace is not None:
            self.workspace.ready()

    @property
    def pid(self) -> int:
        return self._popen.pid

    # The descriptors are asked of their files each time, never cached: once a file is closed,
    # fileno() raises ValueError instead of naming a number the OS may have given to another.
    @property
    def stdin(self) -> int:
        return self._streams[0].fileno()

    @property
    def stdout(self) -> int:
        return self._streams[1].fileno()

    @property
    def stderr(self) -> int:
        return self._streams[2].fileno()

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the worker's process group; a group already gone is fine."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self._popen.send_signal(signum)

    def kill(self) -> None:
        if self._farewell and self._popen.returncode is None and self._popen.stdin is not None:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()  # the supervisor's channel ends: it cleans up, exits
            self.wait(self._farewell)
        if self._popen.returncode is None:
            self.signal_group(signal.SIGKILL)
        self.wait(10)

    def exit_info(self) -> ExitInfo:
        code = self._popen.returncode
        oom = self._read_oom_kills() > 0 or bool(self._overrun)
        note = self._overrun
        if code is None:
            return ExitInfo(exit_code=-1)
        if code < 0:
            return ExitInfo(exit_code=128 - code, signal=-code, oom_killed=oom, note=note)
        oom = oom and code == 128 + signal.SIGKILL
        return ExitInfo(exit_code=code, oom_killed=oom, note=note if oom else "")

    def close(self) -> None:
        for stream in self._streams:
            with contextlib.suppress(OSError):
                stream.close()
        if self._mover is not None:  # (its passes end once the processes are gone)
            self._mover.join()
            self._mover = None
        self._closing.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        if self._cgroup is not None:
            self._read_oom_kills()
            self._cgroup.remove()
            self._cgroup = None
        self._release()

    def _release(self) -> None:
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            with contextlib.suppress(OSError):
                callback()

    def memory_usage(self) -> tuple[int, int | None]:
        """What the sandbox's processes use now, and its memory cap (None: none); OSError
        where it has no cgroup of its own (see ``LiveWorker.fork``)."""
        if self._cgroup is None:
            raise OSError("the sandbox has no memory cgroup of its own")
        return self._cgroup.memory_usage()

    def _read_oom_kills(self) -> int:
        if self._cgroup is not None:
            self._oom_kills = self._cgroup.oom_kills() or self._oom_kills
        return self._oom_kills
