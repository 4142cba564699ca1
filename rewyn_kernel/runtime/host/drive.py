"""One execution on one worker: send the code, relay its frames, keep its deadline.

``drive`` is the loop of a single execution; it returns the execution's ``Outcome``, the one
value its ending is made from. ``Session`` (``session.py``) owns the workers and decides which
one runs what, and what to do with a worker after an outcome.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rewyn_kernel.runtime._result import EXIT_KILLED, EXIT_TIMEOUT, Ending
from rewyn_kernel.runtime.host.channel import ChannelEnded, Frame, LiveWorker
from rewyn_kernel.runtime.host.execution import Execution, describe_exit
from rewyn_kernel.runtime.host.protocol import (
    ClearOutputFrame,
    CommFrame,
    DisplayFrame,
    DoneFrame,
    ErrorFrame,
    InputRequestFrame,
    OutFrame,
    PayloadFrame,
    ResultFrame,
    TruncatedFrameError,
)
from rewyn_kernel.runtime.worker.frames import (
    AbortFrame,
    ExecFrame,
    InputReplyFrame,
    InterruptFrame,
)

GRACE_SECONDS = 0.5
"""After a timeout one-shot code gets an interrupt and this long to report where it was stuck."""
SESSION_GRACE_SECONDS = 3.0
"""After a timeout a session's code gets an interrupt and this long to stop; if it does, the
session keeps its state (a person's variables after a slow cell), else its sandbox is killed."""
ABORT_SECONDS = 2.0
"""Then a one-shot sandbox's supervisor gets this long to kill the execution and say so,
before the whole sandbox is killed."""
DEATH_WAIT_SECONDS = 2.0
"""How long a worker whose channel ended gets to exit before its exit is read."""
MAX_INPUT_PAUSE = 900.0
"""Seconds of waiting for input() answers that do not count against one execution's timeout."""


@dataclass(frozen=True)
class Outcome:
    """How one execution ended, decided once, from values."""

    ending: Ending
    exit_code: int
    message: str = ""
    """What happened in words; '' lets the result say it from the code's error or exit."""
    oom: bool = False
    worker_lost: bool = False
    """The worker is dead or must not run anything more (the session replaces it)."""


_ENDINGS: dict[str, Ending] = {
    "ok": "completed",
    "error": "exception",
    "exit": "exit",
    "interrupted": "interrupted",
}


def drive(
    worker: LiveWorker,
    execution: Execution,
    timeout: float | None,
    *,
    keep_state: bool,
    memory_limit_mb: int | None,
) -> Outcome:
    """Run ``execution`` on ``worker`` to its end, whatever it is, and say how it ended.

    Past ``timeout`` the code gets an interrupt. A session's code that stops within
    SESSION_GRACE_SECONDS keeps its state; one that does not has its worker killed. One-shot code
    gets GRACE_SECONDS to say where it was, then its execution is aborted by the sandbox's
    supervisor (the worker lives on).
    """
    payload = execution.code.encode("utf-8", "surrogatepass")
    deadline = None if timeout is None else time.monotonic() + timeout
    worker.want(execution.id)
    dropped = worker.take_dropped()
    if dropped:
        execution.note(
            f"[rewyn: {dropped} frames of output written between executions were dropped]\n"
        )
    try:
        header = ExecFrame(
            id=execution.id,
            count=execution.count,
            silent=execution.silent,
            comm=execution.comm,
            parent=execution.parent,
            fork=execution.then_fork.id if execution.then_fork is not None else "",
            fork_n=execution.then_fork.port.branch if execution.then_fork is not None else 0,
        )
        if not worker.send(header, payload, timeout=timeout or 60.0):
            if execution.then_fork is not None:
                worker.give_up(execution.then_fork, "the execution was not sent")
            return channel_ended(worker, ChannelEnded(), memory_limit_mb)
        execution.sent(worker)  # an interrupt asked for meanwhile goes now
        questions = _Questions(worker, execution)
        late: float | None = None  # past the deadline: when the current step gives up
        aborting = False
        while True:
            polling = late is None and questions.waiting_for_a_person()
            if late is not None:
                limit: float | None = late
            elif polling:  # a person typing is not the code running: no deadline meanwhile
                limit = time.monotonic() + 0.1
            else:
                limit = None if deadline is None else deadline + questions.paused
            item = worker.next_frame(None if limit is None else max(0.0, limit - time.monotonic()))
            if item is None and polling:
                continue
            if item is None:  # past the deadline
                if late is None:
                    grace = SESSION_GRACE_SECONDS if keep_state else GRACE_SECONDS
                    worker.send(InterruptFrame(id=execution.id), timeout=grace)
                    late = time.monotonic() + grace
                elif not keep_state and not aborting:
                    worker.send(AbortFrame(id=execution.id), timeout=ABORT_SECONDS)
                    aborting, late = True, time.monotonic() + ABORT_SECONDS
                else:
                    worker.kill(_timed_out(timeout, keep_state))
                    return _timeout(timeout, keep_state, worker_lost=True)
                continue
            if isinstance(item, ChannelEnded):
                if late is not None:
                    return _timeout(timeout, keep_state, worker_lost=True)
                return channel_ended(worker, item, memory_limit_mb)
            if output_frame(execution, item):
                continue
            frame = item[0]
            if isinstance(frame, PayloadFrame):
                execution.on_payload(frame)
            elif isinstance(frame, ErrorFrame):
                execution.on_error(frame)
            elif isinstance(frame, InputRequestFrame):
                questions.ask(frame)
            elif isinstance(frame, DoneFrame) and frame.id == execution.id:
                questions.close()
                if late is not None:
                    # The code stopped, or was stopped, after its time was up. A session's
                    # state is whole when its process stopped by itself or by the interrupt.
                    lost = frame.lost or (
                        not keep_state and frame.status not in ("interrupted", "aborted")
                    )
                    return _timeout(timeout, keep_state, worker_lost=lost)
                return outcome_of(frame, memory_limit_mb, keep_state)
    finally:
        worker.want(None)


def output_frame(execution: Execution, item: Frame) -> bool:
    """Hand ``item`` to ``execution`` if it is output (a stream, a display or result, a clear,
    a comm message); False if it is not."""
    frame, data, size = item
    if isinstance(frame, OutFrame):
        execution.on_stream(frame.s, data)
    elif isinstance(frame, DisplayFrame | ResultFrame):
        execution.on_rich(frame, size)
    elif isinstance(frame, ClearOutputFrame):
        execution.on_clear(frame.wait)
    elif isinstance(frame, CommFrame):
        execution.on_comm(frame)
    else:
        return False
    return True


def _timed_out(timeout: float | None, keep_state: bool) -> str:
    restarted = " and its state lost" if keep_state else ""
    return f"timed out after {timeout:g} s; the sandbox was killed{restarted}"


def _timeout(timeout: float | None, keep_state: bool, *, worker_lost: bool) -> Outcome:
    if worker_lost:
        message = _timed_out(timeout, keep_state)
    elif keep_state:
        message = f"timed out after {timeout:g} s; the code was interrupted and the state is kept"
    else:
        message = f"timed out after {timeout:g} s; the execution was killed"
    return Outcome("timeout", EXIT_TIMEOUT, message, worker_lost=worker_lost)


def outcome_of(frame: DoneFrame, memory_limit_mb: int | None, keep_state: bool) -> Outcome:
    """The outcome a ``done`` frame of the supervisor reports."""
    lost = frame.lost
    if frame.status == "protocol_error":
        what = frame.detail or "the code's process sent something that is not a frame"
        return Outcome(
            "protocol_error", frame.exit_code, f"{what}; that process was killed", worker_lost=lost
        )
    if frame.status == "crashed":
        if frame.oom:
            message = f"the code was killed for exceeding the memory limit of {memory_limit_mb} MiB"
            return Outcome("oom", frame.exit_code, message, oom=True, worker_lost=lost)
        what = describe_exit(frame.exit_code, frame.signal)
        note = f" ({frame.detail})" if frame.detail else ""
        message = f"the sandbox process {what} while running the code{note}"
        return Outcome("crashed", frame.exit_code, message, worker_lost=lost)
    if frame.status == "aborted":  # (only sent after an abort, which only follows a timeout)
        return Outcome("crashed", EXIT_KILLED, "the execution was aborted", worker_lost=lost)
    return Outcome(_ENDINGS[frame.status], frame.exit_code, oom=frame.oom, worker_lost=lost)


def channel_ended(worker: LiveWorker, end: ChannelEnded, memory_limit_mb: int | None) -> Outcome:
    """The channel ended mid-execution: say why, as precisely as the provider can."""
    reason = worker.kill_reason
    if reason is not None:  # the host killed it (closed, restarted, a cancelled task)
        worker.kill(reason)
        info = worker.process.exit_info()
        return Outcome(
            "crashed",
            info.exit_code if info.exit_code >= 0 else EXIT_KILLED,
            reason,
            worker_lost=True,
        )
    if end.gone is not None:  # a branch's process ended; the sandbox's others live on
        worker.kill(end.gone)
        return Outcome("crashed", EXIT_KILLED, end.gone, worker_lost=True)
    if end.error is not None and not isinstance(end.error, TruncatedFrameError):
        worker.kill("the sandbox broke the protocol")
        return Outcome(
            "protocol_error", EXIT_KILLED, f"{end.error}; the sandbox was killed", worker_lost=True
        )
    # The channel ended (perhaps mid-frame): a sandbox that died says why by its exit.
    exited = worker.process.wait(DEATH_WAIT_SECONDS) is not None
    if not exited:
        worker.kill("its channel ended but it kept running")
        what = end.error or "the sandbox closed its channel"
        return Outcome(
            "protocol_error",
            EXIT_KILLED,
            f"{what} but kept running; the sandbox was killed",
            worker_lost=True,
        )
    worker.kill("its channel ended")
    info = worker.process.exit_info()
    if info.oom_killed:
        note = f" ({info.note})" if info.note else ""
        message = (
            f"the sandbox was killed for exceeding its memory limit of {memory_limit_mb} MiB{note}"
        )
        return Outcome("oom", info.exit_code, message, oom=True, worker_lost=True)
    note = f" ({info.note})" if info.note else ""
    what = describe_exit(info.exit_code, info.signal)
    return Outcome(
        "crashed",
        info.exit_code,
        f"the sandbox {what} while running the code{note}",
        worker_lost=True,
    )


class _Questions:
    """The input() question of one execution waiting for an answer (one at a time).

    Each answer is found in a thread of its own, so an interrupt or the end of the code is
    still seen while the person types. That thread only ever writes through ``worker.send``,
    which refuses once the worker is killed; an answer that comes after the execution is over
    is dropped by the worker (its question id is no longer waited for).

    Only the code's main thread asking stops the clock (a person typing is not the code
    running), and for at most MAX_INPUT_PAUSE in all: a question left open from a background
    thread, or forged, cannot switch the deadline off.
    """

    def __init__(self, worker: LiveWorker, execution: Execution) -> None:
        self._worker = worker
        self._execution = execution
        self._lock = threading.Lock()
        self._pending = False
        self._pauses = False
        self._asked = 0.0
        self._closed = False
        self.paused = 0.0

    def ask(self, frame: InputRequestFrame) -> None:
        with self._lock:
            if self._pending or self._closed:
                busy = True
            else:
                busy = False
                self._pending, self._pauses, self._asked = True, frame.main, time.monotonic()
        if busy:
            self._send(frame, error="another input() is already waiting for an answer")
            return
        threading.Thread(
            target=self._answer, args=(frame,), daemon=True, name="rewyn-input"
        ).start()

    def _answer(self, frame: InputRequestFrame) -> None:
        try:
            ask = self._execution.callbacks.on_input
            if ask is None:
                self._send(frame, error="input() is not available here", unavailable=True)
                return
            try:
                value = str(ask(frame.prompt, frame.password))
            except Exception as exc:
                self._send(frame, error=f"input() failed: {exc}")
                return
            self._send(frame, value=value)
        finally:
            with self._lock:
                if self._pauses:
                    self.paused += time.monotonic() - self._asked
                self._pending = self._pauses = False

    def _send(
        self,
        frame: InputRequestFrame,
        *,
        value: str = "",
        error: str = "",
        unavailable: bool = False,
    ) -> None:
        # (``unavailable``: no one to ask, the frontend allows no stdin)
        header = InputReplyFrame(
            id=frame.id, exec=self._execution.id, error=error, unavailable=unavailable
        )
        self._worker.send(header, value.encode("utf-8", "surrogatepass"), timeout=5.0)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def waiting_for_a_person(self) -> bool:
        with self._lock:
            if not (self._pending and self._pauses):
                return False
            return self.paused + (time.monotonic() - self._asked) < MAX_INPUT_PAUSE
