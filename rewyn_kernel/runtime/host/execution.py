"""One execution's bookkeeping: bounded output, rich outputs, its result and its event."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal as signals
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rewyn_kernel.runtime._result import (
    ErrorInfo,
    Isolation,
    NetworkLog,
    Payload,
    RichOutput,
    SandboxResult,
    WorkspaceFiles,
    plain_traceback,
)
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.events import OutputSummary, SandboxEvent

if TYPE_CHECKING:
    from rewyn_kernel.runtime.host.channel import Forking, LiveWorker
    from rewyn_kernel.runtime.host.drive import Outcome
from rewyn_kernel.runtime.host.capture import StreamCapture, excerpt
from rewyn_kernel.runtime.host.protocol import (
    CommFrame,
    DisplayFrame,
    ErrorFrame,
    PayloadFrame,
    ResultFrame,
    scrub,
)
from rewyn_kernel.runtime.worker.frames import InterruptFrame

logger = logging.getLogger(__name__)

_MISSING_PATH = re.compile(r"No such file or directory: '([^']{1,4096})'")

StreamCallback = Callable[[str, str], None]
"""Called with (stream name, text) as output arrives: "stdout" or "stderr"."""
OutputCallback = Callable[[RichOutput], None]
"""Called with each rich output (display data, the last expression's value) as it arrives."""
InputCallback = Callable[[str, bool], str]
"""Called with (prompt, password) when the code calls input(); returns the line typed."""
ClearCallback = Callable[[bool], None]
"""Called with ``wait`` when the code calls ``clear_output(wait)``."""
CommCallback = Callable[[CommFrame], None]
"""Called with each comm message the code sends (ipywidgets' models), unchecked."""

MAX_OUTPUTS = 1000
MAX_PAYLOADS = 16
PAGE_CHARS = 1024 * 1024
"""Characters of pager text (``zip?``) kept; a next cell's text is bounded the same."""
MAX_RICH_BYTES = 32 * 1024 * 1024
"""Rich output kept per execution, counted as the JSON the sandbox sent (metadata included)."""
EVENT_EXCERPT_CHARS = 8 * 1024
EVENT_CODE_CHARS = 256 * 1024
TRACEBACK_CHARS = 64 * 1024
"""Characters of an uncaught exception's traceback added to the end of stderr."""


@dataclass
class Callbacks:
    on_stream: StreamCallback | None = None
    on_output: OutputCallback | None = None
    on_input: InputCallback | None = None
    on_clear: ClearCallback | None = None
    on_comm: CommCallback | None = None


@dataclass
class Execution:
    """Everything one execution collects on its way to a SandboxResult."""

    code: str
    spec: SandboxSpec
    callbacks: Callbacks
    count: int
    silent: bool = False
    """Run without a trace in the shell's history and counters (a frontend's silent request)."""
    parent: str = ""
    """The id of the request this answers, as the caller knows it (a Jupyter message's): the
    code's IPython gives it as its parent (an Output widget captures by it)."""
    comm: bool = False
    """``code`` is a comm message from the frontend (JSON) for the code's comms, not code."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    error: ErrorInfo | None = None
    outputs: list[RichOutput] = field(default_factory=list)
    payloads: list[Payload] = field(default_factory=list)
    dropped_outputs: int = 0
    rich_bytes: int = 0
    state_lost: bool = False
    """This execution runs in a fresh worker: the previous one was lost with its state."""
    lost_why: str = ""
    """How the previous worker was lost (``state_lost``), in words: what it ran, and how."""
    then_fork: Forking | None = None
    """The checkpoint the sandbox makes as this execution ends (``execute(checkpoint_after=)``)."""
    cancel: threading.Event = field(default_factory=threading.Event)
    _sent: bool = False
    _interrupt_asked: bool = False
    _interrupt_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        limit = self.spec.output_limit_bytes
        self.streams = {
            "stdout": StreamCapture("stdout", limit),
            "stderr": StreamCapture("stderr", limit),
        }

    # -- interrupts ------------------------------------------------------------------------

    def interrupt(self, worker: LiveWorker) -> bool:
        """Raise KeyboardInterrupt in this execution's code: now, or (if its code is still on
        its way to the worker) right after the code, so the interrupt is never lost."""
        with self._interrupt_lock:
            if not self._sent:
                self._interrupt_asked = True
                return True
        return worker.send(InterruptFrame(id=self.id), timeout=1.0)

    def sent(self, worker: LiveWorker) -> None:
        """(From drive.) The code has been sent: an interrupt asked for meanwhile goes now."""
        with self._interrupt_lock:
            self._sent = True
            asked = self._interrupt_asked or self.cancel.is_set()
        if asked:
            worker.send(InterruptFrame(id=self.id), timeout=1.0)

    # -- what arrives ----------------------------------------------------------------------

    def on_stream(self, name: str, data: bytes) -> None:
        text = self.streams[name].feed(data)
        if text and self.callbacks.on_stream:
            _call(self.callbacks.on_stream, name, text)

    def on_rich(self, frame: DisplayFrame | ResultFrame, size: int) -> None:
        if isinstance(frame, DisplayFrame) and frame.update:
            self._update(frame)
            return
        if len(self.outputs) >= MAX_OUTPUTS or self.rich_bytes + size > MAX_RICH_BYTES:
            self.dropped_outputs += 1
            return
        self.rich_bytes += size
        if isinstance(frame, ResultFrame):
            output = RichOutput(
                output_type="execute_result",
                data=frame.data,
                metadata=frame.metadata,
                execution_count=self.count,
            )
        else:
            output = RichOutput(
                output_type="display_data",
                data=frame.data,
                metadata=frame.metadata,
                display_id=frame.display_id,
            )
        self.outputs.append(output)
        if self.callbacks.on_output:
            _call(self.callbacks.on_output, output)

    def _update(self, frame: DisplayFrame) -> None:
        """``update_display``: relayed (a frontend updates every output with that id, in any
        cell), and the kept output of that id, if this execution showed one, changes too."""
        output = RichOutput(
            output_type="display_data",
            data=frame.data,
            metadata=frame.metadata,
            display_id=frame.display_id,
            update=True,
        )
        for index, kept in enumerate(self.outputs):
            if kept.display_id == frame.display_id and kept.output_type == "display_data":
                self.outputs[index] = output.model_copy(update={"update": False})
        if self.callbacks.on_output:
            _call(self.callbacks.on_output, output)

    def on_comm(self, frame: CommFrame) -> None:
        """A comm message from the code: for the caller (a kernel) to check and relay."""
        if self.callbacks.on_comm:
            _call(self.callbacks.on_comm, frame)

    def on_clear(self, wait: bool) -> None:
        """``clear_output``: what the cell showed so far is no longer in its outputs."""
        self.outputs.clear()
        self.rich_bytes = 0
        if self.callbacks.on_clear:
            _call(self.callbacks.on_clear, wait)

    def on_payload(self, frame: PayloadFrame) -> None:
        if len(self.payloads) >= MAX_PAYLOADS:
            return
        data: dict[str, object] = {}
        if frame.source == "page":
            # The pager's text alone: its other forms (HTML) would bypass what a cell's output
            # goes through, and a pager has no use for them.
            text = frame.data.get("text/plain", "")
            data = {"text/plain": excerpt(text if isinstance(text, str) else str(text), PAGE_CHARS)}
        self.payloads.append(
            Payload(
                source=frame.source,
                data=data,
                start=frame.start,
                text=excerpt(frame.text, PAGE_CHARS),
                replace=frame.replace,
            )
        )

    def on_error(self, frame: ErrorFrame) -> None:
        self.error = ErrorInfo(
            ename=frame.ename, evalue=frame.evalue, traceback=tuple(frame.traceback)
        )

    def note(self, text: str) -> None:
        """Add a line from the host (or the sandbox's diagnostics) to stderr."""
        self.on_stream("stderr", text.encode("utf-8", "replace"))

    # -- how it ended ----------------------------------------------------------------------

    def result(
        self,
        outcome: Outcome,
        duration_ms: float,
        provider: str,
        isolation: Isolation | None,
        *,
        sandbox_restarted: bool,
        disk_full: bool = False,
        files: WorkspaceFiles | None = None,
        network: NetworkLog | None = None,
    ) -> SandboxResult:
        """Make the result from what arrived and how it ended (``outcome``); ``disk_full``:
        the scratch quota was used up when it ended; ``files``: what it changed in its
        workspace."""
        for name, capture in self.streams.items():
            text = capture.finish()
            if text and self.callbacks.on_stream:
                _call(self.callbacks.on_stream, name, text)
        if self.dropped_outputs:
            extra = (
                f"[rewyn: {self.dropped_outputs} rich outputs dropped, over the limit of "
                f"{MAX_OUTPUTS} outputs or {MAX_RICH_BYTES:,} bytes per execution]\n"
            )
            self.streams["stderr"].append(extra)
            if self.callbacks.on_stream:
                _call(self.callbacks.on_stream, "stderr", extra)
        ending, exit_code, error = outcome.ending, outcome.exit_code, self.error
        message = outcome.message
        memory_exceeded = outcome.oom or ending == "oom"
        if ending == "timeout":
            where = error.traceback if error else ()
            error = ErrorInfo(ename="TimeoutError", evalue=message, traceback=where)
        elif ending == "exception" and error is not None and not message:
            first = error.evalue.splitlines()[0] if error.evalue else ""
            message = excerpt(f"{error.ename}: {first}".rstrip(": "), 500)
            if error.ename == "MemoryError" and self.spec.memory_limit_mb:
                memory_exceeded = True
                message = (
                    f"the code hit the memory limit of {self.spec.memory_limit_mb} MiB "
                    "(MemoryError)"
                )
        elif ending == "exit" and not message:
            message = f"the code called sys.exit({exit_code})"
        elif ending == "interrupted" and not message:
            message = "interrupted: KeyboardInterrupt was raised in the code"
        if outcome.oom and ending != "oom":
            limit = self.spec.memory_limit_mb
            killed = (
                f"a process the code started was killed for exceeding the memory limit of "
                f"{limit} MiB (the sandbox's processes together)"
            )
            message = message or killed
            # (the code went on: only this line says why its program died)
            self.streams["stderr"].append(f"[rewyn: {killed}]\n")
            if self.callbacks.on_stream:
                _call(self.callbacks.on_stream, "stderr", f"[rewyn: {killed}]\n")
        if error is not None and ending != "completed":
            # As Python prints it, at the end of stderr: what a log of stderr alone should show.
            self.streams["stderr"].append(excerpt(plain_traceback(error), TRACEBACK_CHARS))
        if disk_full:
            full = (
                f"the scratch quota of {self.spec.disk_limit_mb} MiB is used up: "
                "writes past it fail (No space left on device; where a watcher keeps it, File "
                "too large until the code removes some, and a session writes again once "
                "restarted)"
            )
            message = f"{message}; {full}" if message else full
        hidden = self.hidden_path(error)
        if hidden:
            self.streams["stderr"].append(f"[rewyn: {hidden}]\n")
            if self.callbacks.on_stream:
                _call(self.callbacks.on_stream, "stderr", f"[rewyn: {hidden}]\n")
            message = f"{message}; {hidden}" if message else hidden
        if files is not None and files.notes:
            for note in files.notes:
                self.streams["stderr"].append(f"[rewyn: {note}]\n")
                if self.callbacks.on_stream:
                    _call(self.callbacks.on_stream, "stderr", f"[rewyn: {note}]\n")
        if self.state_lost:
            why = f" ({self.lost_why})" if self.lost_why else ""
            lost = (
                f"the previous sandbox was lost{why}, so this ran in a fresh one without "
                "earlier state"
            )
            message = f"{lost}; {message}" if message else lost
        out, err = self.streams["stdout"], self.streams["stderr"]
        return SandboxResult(
            exit_code=exit_code,
            stdout=out.text,
            stderr=err.text,
            timed_out=ending == "timeout",
            interrupted=ending == "interrupted",
            duration_ms=duration_ms,
            code_hash=code_hash(self.code),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            error=error,
            outputs=tuple(self.outputs),
            payloads=tuple(self.payloads),
            ending=ending,
            message=message,
            state_lost=self.state_lost,
            sandbox_restarted=sandbox_restarted,
            memory_exceeded=memory_exceeded,
            disk_full=disk_full,
            files=files,
            network=network,
            execution_id=self.id,
            provider=provider,
            isolation=isolation,
        )

    def hidden_path(self, error: ErrorInfo | None) -> str:
        """A note for a FileNotFoundError whose path the host has but the sandbox does not
        show (``../data/other.csv`` beside the workspace), saying how to show it; or ''."""
        if error is None or error.ename != "FileNotFoundError":
            return ""
        found = _MISSING_PATH.search(error.evalue)
        if found is None:
            return ""
        name = found.group(1)
        base = self.spec.workspace or self.spec.workdir
        path = Path(name) if os.path.isabs(name) else (base / name if base else None)
        if path is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            real = Path(os.path.normpath(path))
            if real.exists():
                folder = real if real.is_dir() else real.parent
                return (
                    f"{real} is on the host, but the sandbox does not show it: show its folder "
                    f"with read_dirs (--read {folder}; c.SandboxKernel.read_dirs)"
                )
        return ""

    def event(
        self,
        result: SandboxResult,
        sandbox_id: str,
        session_id: str,
        forked_from: str | None = None,
    ) -> SandboxEvent:
        code_bytes = len(self.code.encode("utf-8", "surrogatepass"))
        error = result.error
        if error is not None:
            error = ErrorInfo(
                ename=error.ename,
                evalue=excerpt(error.evalue, EVENT_EXCERPT_CHARS),
                traceback=tuple(
                    excerpt(line, EVENT_EXCERPT_CHARS) for line in error.traceback[-50:]
                ),
            )
        return SandboxEvent(
            id=result.execution_id,
            sandbox_id=sandbox_id,
            session_id=session_id,
            forked_from=forked_from,
            execution_count=self.count,
            started_at=self.started_at,
            finished_at=datetime.now(timezone.utc),
            duration_ms=result.duration_ms,
            provider=result.provider,
            isolation=result.isolation,
            spec=self.spec.summary(),
            code=scrub(excerpt(self.code, EVENT_CODE_CHARS)),
            code_hash=result.code_hash,
            code_bytes=code_bytes,
            code_truncated=len(self.code) > EVENT_CODE_CHARS,
            exit_code=result.exit_code,
            ending=result.ending,
            ok=result.ok,
            timed_out=result.timed_out,
            interrupted=result.interrupted,
            memory_exceeded=result.memory_exceeded,
            disk_full=result.disk_full,
            files=result.files,
            network=result.network,
            state_lost=result.state_lost,
            sandbox_restarted=result.sandbox_restarted,
            message=result.message,
            stdout=excerpt(result.stdout, EVENT_EXCERPT_CHARS),
            stderr=excerpt(result.stderr, EVENT_EXCERPT_CHARS),
            stdout_bytes=result.stdout_bytes,
            stderr_bytes=result.stderr_bytes,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
            error=error,
            outputs=tuple(_summarise(output) for output in result.outputs),
        )


def _call(callback: Callable[..., object], *args: object) -> None:
    """Run a caller's callback; one that raises is logged, and the execution goes on."""
    try:
        callback(*args)
    except Exception:
        logger.exception("an output callback failed; the execution goes on without it")


def _summarise(output: RichOutput) -> OutputSummary:
    text = output.data.get("text/plain", "")
    return OutputSummary(
        output_type=output.output_type,
        mime_types=tuple(sorted(output.data)),
        text=excerpt(text if isinstance(text, str) else str(text), 2000),
    )


def describe_exit(exit_code: int, signal: int | None) -> str:
    """Say how a process ended: 'exited with code 3', 'was killed by signal 11 (SIGSEGV; ...)'."""
    if signal is not None:
        try:
            name = signals.Signals(signal).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {signal} ({name}; exit code {exit_code})"
    return f"exited with code {exit_code}"


def code_hash(code: str) -> str:
    """Return the sha256 hex digest of ``code``'s UTF-8 bytes."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
