"""A scripted provider: a fake worker, written as a Python function, that speaks the wire protocol.

For tests of the layers above providers (sessions, executions, events, the kernel), and for the
orderings real processes only hit by chance: an answer that arrives after ``close()``, a ``done``
racing a timeout, a worker that dies in the middle of a frame. The script runs in a thread and
talks through real pipes, so the host side is exactly the one real sandboxes use; it never
replaces the tests against real providers (httpx's ``MockTransport`` is the model)::

    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        header, code = worker.expect("exec")
        worker.out("stdout", b"hi\\n")
        worker.done(header["id"])

    box = ScriptedProvider(script).create()
    assert box.execute("print('hi')").stdout == "hi\\n"
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.host.base import BaseSandbox
from rewyn_kernel.runtime.providers.base import CheckItem, ExitInfo, SandboxFiles
from rewyn_kernel.runtime.providers.local.files import LocalFiles, host_folder
from rewyn_kernel.runtime.worker.config import WorkerConfig
from rewyn_kernel.runtime.worker.frames import read_host_frame

__all__ = ["ScriptedProcess", "ScriptedProvider", "ScriptedSandbox", "ScriptedWorker"]

_HEADER = struct.Struct(">II")
F_SETPIPE_SZ = 1031
Script = Callable[["ScriptedWorker"], None]


class Killed(EOFError):
    """The host killed the scripted worker, or closed its channel."""


class ScriptedWorker:
    """What a script sees: the host's frames, and ways to answer them or misbehave."""

    def __init__(self, process: ScriptedProcess) -> None:
        self._process = process

    def recv(self, timeout: float = 30.0) -> tuple[dict[str, Any], bytes]:
        """The next frame from the host; ``Killed`` when the host killed or closed the worker."""
        fd = self._process.inner_stdin
        head = self._read(fd, _HEADER.size, timeout)
        body_len, payload_len = _HEADER.unpack(head)
        header = json.loads(self._read(fd, body_len, timeout))
        payload = self._read(fd, payload_len, timeout) if payload_len else b""
        self._process.received.append(header)
        read_host_frame(header)  # (a frame the real worker would refuse fails the script)
        return header, payload

    def expect(self, kind: str, timeout: float = 30.0) -> tuple[dict[str, Any], bytes]:
        """Receive until a frame of ``kind`` arrives (earlier frames are recorded, not lost)."""
        while True:
            header, payload = self.recv(timeout)
            if header.get("t") == kind:
                return header, payload

    def send(self, frame: dict[str, Any], payload: bytes = b"") -> None:
        body = json.dumps(frame).encode()
        self.write(_HEADER.pack(len(body), len(payload)) + body + payload)

    def write(self, data: bytes) -> None:
        """Raw bytes on the channel (half a frame, garbage, ...)."""
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._process.inner_stdout, view) :]
            except OSError as exc:
                raise Killed("the host closed the channel") from exc

    def ready(self, **fields: Any) -> None:
        frame = {
            "t": "ready",
            "pid": 1,
            "python": "3.11.0",
            "implementation": "cpython",
            "executable": "/scripted/python",
            "platform": "linux",
        }
        self.send({**frame, **fields})

    def out(self, stream: str, data: bytes) -> None:
        self.send({"t": "out", "s": stream}, data)

    def done(self, exec_id: str, exit_code: int = 0, status: str = "ok", **fields: Any) -> None:
        self.send({"t": "done", "id": exec_id, "exit_code": exit_code, "status": status, **fields})

    def stderr(self, text: str) -> None:
        """Diagnostics (the worker's own stderr, not the code's)."""
        with contextlib.suppress(OSError):
            os.write(self._process.inner_stderr, text.encode())

    def exit(self, code: int = 0, signum: int | None = None) -> None:
        """End the fake process: its pipes close, and ``exit_info`` reports this."""
        self._process.end(code, signum)
        raise Killed("the script ended the process")

    def _read(self, fd: int, size: int, timeout: float) -> bytes:
        parts: list[bytes] = []
        while size:
            if self._process.killed.is_set():
                raise Killed("the host killed the worker")
            ready = select.select([fd], [], [], min(timeout, 0.05))[0]
            if not ready:
                timeout -= 0.05
                if timeout <= 0:
                    raise TimeoutError("the host sent nothing in time")
                continue
            try:
                chunk = os.read(fd, size)
            except OSError as exc:
                raise Killed("the host closed the channel") from exc
            if not chunk:
                raise Killed("the host closed the channel")
            parts.append(chunk)
            size -= len(chunk)
        return b"".join(parts)


class ScriptedProcess:
    """A ``WorkerProcess`` whose worker is a script in a thread, on real pipes."""

    def __init__(self, script: Script, *, read_program: bool = True) -> None:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        self.inner_stdin, self._stdin = stdin_r, stdin_w
        self._stdout, self.inner_stdout = stdout_r, stdout_w
        self._stderr, self.inner_stderr = stderr_r, stderr_w
        self.killed = threading.Event()
        self.received: list[dict[str, Any]] = []
        """Every frame header the script received, in order."""
        self.error: BaseException | None = None
        self._exit: ExitInfo | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._read_program = read_program
        if not read_program:
            # A small pipe, so that writing the program has to wait for a reader.
            with contextlib.suppress(OSError):
                fcntl.fcntl(stdin_w, F_SETPIPE_SZ, 4096)
        self._thread = threading.Thread(
            target=self._run, args=(script,), daemon=True, name="rewyn-scripted"
        )
        self._thread.start()

    def _run(self, script: Script) -> None:
        worker = ScriptedWorker(self)
        try:
            if self._read_program:  # what protocol.worker_program writes: the program, the modules
                (size,) = struct.unpack(">I", worker._read(self.inner_stdin, 4, 30.0))
                worker._read(self.inner_stdin, size, 30.0)
                _, size = struct.unpack(">BI", worker._read(self.inner_stdin, 5, 30.0))
                worker._read(self.inner_stdin, size, 30.0)
            else:
                self.killed.wait()  # a worker that never reads its program
            script(worker)
        except (Killed, TimeoutError):
            pass
        except BaseException as exc:  # a broken script is the test's failure, not a hang
            self.error = exc
        self.end(0, None)

    def end(self, code: int, signum: int | None) -> None:
        """(From the script's thread.) The fake process exits: its ends of the pipes close."""
        self._record(code, signum)
        with self._lock:
            if not self._closed:
                self._closed = True
                for fd in (self.inner_stdout, self.inner_stderr, self.inner_stdin):
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _record(self, code: int, signum: int | None) -> None:
        with self._lock:
            if self._exit is None:
                exit_code = 128 + signum if signum else code
                self._exit = ExitInfo(exit_code=exit_code, signal=signum)

    @property
    def pid(self) -> int:
        return os.getpid()

    @property
    def stdin(self) -> int:
        return self._stdin

    @property
    def stdout(self) -> int:
        return self._stdout

    @property
    def stderr(self) -> int:
        return self._stderr

    def poll(self) -> int | None:
        return None if self._exit is None else self._exit.exit_code

    def wait(self, timeout: float | None = None) -> int | None:
        self._thread.join(timeout)
        return self.poll()

    def kill(self) -> None:
        """The script notices within 50 ms (it is not waited for: it may be blocked in a test);
        its pipes' numbers stay its own until its thread closes them."""
        self._record(128 + signal.SIGKILL, signal.SIGKILL)
        self.killed.set()

    def exit_info(self) -> ExitInfo:
        return self._exit or ExitInfo(exit_code=-1)

    def close(self) -> None:
        for fd in (self._stdin, self._stdout, self._stderr):
            with contextlib.suppress(OSError):
                os.close(fd)


class ScriptedProvider:
    """A provider whose workers are scripts: one per launch, the last one repeated."""

    name = "scripted"
    available = True

    def __init__(self, *scripts: Script, read_program: bool = True) -> None:
        if not scripts:
            raise ValueError("give at least one script")
        self._scripts = list(scripts)
        self._read_program = read_program
        self.processes: list[ScriptedProcess] = []
        """Every process launched, in order (to look at what each received)."""

    def isolation(self, spec: SandboxSpec) -> Isolation:
        return Isolation(
            provider=self.name,
            network="isolated",
            pid_namespace=False,
            user_namespace=False,
            memory=None,
            files="open",
            filesystem="none: the worker is a script in the host process",
            notes=("a scripted worker for tests: nothing is isolated",),
        )

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        return LocalFiles.make(spec, sandbox_id)

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        return WorkerConfig(cwd=str(host_folder(files)))

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> ScriptedProcess:
        if egress is not None:
            from rewyn_kernel.errors import ProviderUnavailableError

            raise ProviderUnavailableError("a scripted worker has no proxy (network=[...])")
        script = self._scripts[min(len(self.processes), len(self._scripts) - 1)]
        process = ScriptedProcess(script, read_program=self._read_program)
        self.processes.append(process)
        return process

    def check(self) -> Sequence[CheckItem]:
        return [CheckItem("script", True, f"{len(self._scripts)} scripted worker(s)")]

    def create(
        self, spec: SandboxSpec | None = None, *, listeners: Sequence[EventListener] = ()
    ) -> ScriptedSandbox:
        return ScriptedSandbox(self, spec or SandboxSpec(), listeners)


class ScriptedSandbox(BaseSandbox):
    """A sandbox whose workers are scripted (see ScriptedProvider)."""
