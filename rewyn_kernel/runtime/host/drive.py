"""One execution on one worker: send the code, relay its frames, keep its deadline.

``Session`` (``_session.py``) owns the workers and decides which one runs what; ``drive`` is the
loop of a single execution on one of them, and ``channel_ended`` says what happened when the
worker's channel ends before the execution does.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from rewyn_kernel.runtime._result import EXIT_KILLED, ErrorInfo
from rewyn_kernel.runtime.host.channel import ChannelEnded, LiveWorker
from rewyn_kernel.runtime.host.execution import Execution
from rewyn_kernel.runtime.host.protocol import (
    DisplayFrame,
    DoneFrame,
    ErrorFrame,
    InputRequestFrame,
    OutFrame,
    ResultFrame,
    TruncatedFrameError,
)

GRACE_SECONDS = 0.5
"""After a timeout the code gets an interrupt and this long to report where it was stuck."""
DEATH_WAIT_SECONDS = 2.0
"""How long a worker whose channel ended gets to exit before its exit is read."""
MAX_INPUT_PAUSE = 900.0
"""Seconds of waiting for input() answers that do not count against one execution's timeout."""


def drive(
    worker: LiveWorker,
    execution: Execution,
    timeout: float | None,
    *,
    keep_state: bool,
    memory_limit_mb: int | None,
    take_ending_reason: Callable[[], str],
) -> None:
    """Run ``execution`` on ``worker`` to its end, whatever it is; record it on ``execution``.

    Past ``timeout`` the code gets an interrupt and GRACE_SECONDS to say where it was, then the
    execution is a timeout (the caller kills the worker). ``take_ending_reason`` returns (and
    clears) why the session killed the worker, if it did, for a channel that ends.
    """
    ended = functools.partial(
        channel_ended,
        memory_limit_mb=memory_limit_mb,
        take_ending_reason=take_ending_reason,
    )
    payload = execution.code.encode("utf-8", "surrogatepass")
    deadline = None if timeout is None else time.monotonic() + timeout
    if not worker.send({"t": "exec", "id": execution.id}, payload, timeout=timeout or 60.0):
        ended(worker, execution, ChannelEnded())
        return
    if execution.cancel.is_set():  # cancelled while the frame was on its way
        worker.send({"t": "interrupt", "id": execution.id}, timeout=1.0)
    grace_until: float | None = None
    questions = _Questions()
    while True:
        polling = grace_until is None and questions.waiting_for_a_person()
        if grace_until is not None:
            limit: float | None = grace_until
        elif polling:  # a person typing is not the code running: no deadline meanwhile
            limit = time.monotonic() + 0.1
        else:
            limit = None if deadline is None else deadline + questions.paused
        item = worker.next_frame(None if limit is None else max(0.0, limit - time.monotonic()))
        if item is None and polling:
            continue
        if item is None:
            if grace_until is not None:
                break
            worker.send({"t": "interrupt", "id": execution.id}, timeout=GRACE_SECONDS)
            grace_until = time.monotonic() + GRACE_SECONDS
            continue
        if isinstance(item, ChannelEnded):
            if grace_until is None:
                ended(worker, execution, item)
                return
            break
        frame, data, size = item
        if isinstance(frame, OutFrame):
            execution.on_stream(frame.s, data)
        elif isinstance(frame, DisplayFrame | ResultFrame):
            execution.on_rich(frame, size)
        elif isinstance(frame, ErrorFrame):
            execution.on_error(frame)
        elif isinstance(frame, InputRequestFrame):
            # Answered in a thread, so an interrupt or the end of the code is still seen
            # while the person types; a late answer is dropped by the worker (its id).
            answer = functools.partial(_reply, worker, execution, frame)
            if not questions.ask(answer, pauses=frame.main):
                refusal = {"t": "input_reply", "id": frame.id}
                refusal["error"] = "another input() is already waiting for an answer"
                worker.send(refusal, timeout=5.0)
        elif isinstance(frame, DoneFrame) and frame.id == execution.id:
            if grace_until is None:
                execution.finish(
                    frame.exit_code, frame.status, frame.signal, frame.oom, frame.detail
                )
                return
            break
    assert timeout is not None
    where = execution.error.traceback if execution.error else ()
    restarted = " and its state lost" if keep_state else ""
    message = f"timed out after {timeout:g} s; the sandbox was killed{restarted}"
    execution.fail("timeout", 0, message)
    execution.error = ErrorInfo(ename="TimeoutError", evalue=message, traceback=where)


def _reply(worker: LiveWorker, execution: Execution, frame: InputRequestFrame) -> None:
    worker.send(_answer(execution, frame), timeout=5.0)


def _answer(execution: Execution, frame: InputRequestFrame) -> dict[str, Any]:
    ask = execution.callbacks.on_input
    reply: dict[str, Any] = {"t": "input_reply", "id": frame.id}
    if ask is None:
        return {**reply, "error": "input() is not available in this sandbox"}
    try:
        return {**reply, "value": str(ask(frame.prompt, frame.password))}
    except Exception as exc:
        return {**reply, "error": f"input() failed: {exc}"}


def channel_ended(
    worker: LiveWorker,
    execution: Execution,
    end: ChannelEnded,
    *,
    memory_limit_mb: int | None,
    take_ending_reason: Callable[[], str],
) -> None:
    """The channel ended mid-execution: say why, as precisely as the provider can."""
    execution.worker_lost = True
    if end.error is not None and not isinstance(end.error, TruncatedFrameError):
        worker.kill()
        execution.fail("protocol_error", EXIT_KILLED, f"{end.error}; the sandbox was killed")
        return
    # The channel ended (perhaps mid-frame): a sandbox that died says why by its exit.
    exited = worker.process.wait(DEATH_WAIT_SECONDS) is not None
    worker.kill()
    if not exited:
        what = end.error or "the sandbox closed its channel"
        execution.fail(
            "protocol_error", EXIT_KILLED, f"{what} but kept running; the sandbox was killed"
        )
        return
    info = worker.process.exit_info()
    diagnostics = worker.diagnostics(wait=1.0)
    if diagnostics:
        execution.note(diagnostics)
    reason = take_ending_reason()
    if reason:
        execution.fail("crashed", info.exit_code, reason)
    elif info.oom_killed:
        limit = memory_limit_mb
        note = f" ({info.note})" if info.note else ""
        execution.fail(
            "oom",
            info.exit_code,
            f"the sandbox was killed for exceeding its memory limit of {limit} MiB{note}",
        )
    else:
        execution.finish(info.exit_code, "crashed", info.signal, detail=info.note)


class _Questions:
    """The input() question of one execution waiting for an answer (one at a time).

    Only the code's main thread asking stops the clock (a person typing is not the code
    running), and for at most MAX_INPUT_PAUSE in all: a question left open from a background
    thread, or forged, cannot switch the deadline off.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending = False
        self._pauses = False
        self._asked = 0.0
        self.paused = 0.0

    def ask(self, answer: Callable[[], object], *, pauses: bool) -> bool:
        """Answer in a thread; False (and nothing done) if a question is already open."""
        with self._lock:
            if self.pending:
                return False
            self.pending, self._pauses, self._asked = True, pauses, time.monotonic()

        def run() -> None:
            try:
                answer()
            finally:
                with self._lock:
                    if self._pauses:
                        self.paused += time.monotonic() - self._asked
                    self.pending = self._pauses = False

        threading.Thread(target=run, daemon=True, name="rewyn-input").start()
        return True

    def waiting_for_a_person(self) -> bool:
        with self._lock:
            if not (self.pending and self._pauses):
                return False
            return self.paused + (time.monotonic() - self._asked) < MAX_INPUT_PAUSE
