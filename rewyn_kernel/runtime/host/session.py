"""Session: executions on a live worker, with deadlines, interrupts, restarts and events.

A session that keeps state runs every execution on the same worker until it dies or times out;
then the next execution starts a fresh one and its result says ``state_lost``. ``fork()`` makes
a branch: a session of its own in the same sandbox, whose worker is a fork of this one's code
process (the channel's port for that branch); ``checkpoint()`` keeps a paused one, which
``restore()`` makes the session's state again (a cell's undo). The one-shot
``Sandbox.execute`` is a session that does not keep state: each execution takes a fresh worker
(started ahead of time, so it costs a pipe round trip, not an interpreter start) and retires it
afterwards. Both are this one class; the loop of one execution on a worker is in ``_drive``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from rewyn_kernel.errors import ForkError, SandboxClosedError
from rewyn_kernel.runtime._result import (
    EXIT_INTERRUPTED,
    EXIT_KILLED,
    Isolation,
    NetworkLog,
    SandboxResult,
    WorkspaceFiles,
)
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.events import EventListener, emit
from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.host.channel import Forking, LiveWorker
from rewyn_kernel.runtime.host.drive import DEATH_WAIT_SECONDS, Outcome, drive, output_frame
from rewyn_kernel.runtime.host.execution import (
    Callbacks,
    ClearCallback,
    CommCallback,
    Execution,
    InputCallback,
    OutputCallback,
    StreamCallback,
    describe_exit,
)
from rewyn_kernel.runtime.host.protocol import (
    CompleteReplyFrame,
    InspectReplyFrame,
    ReadyFrame,
)
from rewyn_kernel.runtime.host.scratch import (
    READ_LIMIT,
    ScratchEntry,
)
from rewyn_kernel.runtime.host.sync import Closeable, ask_on_loop, on_loop, run_in_thread
from rewyn_kernel.runtime.providers.base import ExitInfo, SandboxFiles
from rewyn_kernel.runtime.worker.frames import CompleteFrame, InspectFrame

if TYPE_CHECKING:
    from rewyn_kernel.runtime.host.core import SandboxCore

MAX_REASON_CHARS = 500
"""At most this much of a supervisor's own word on why it did not start goes in the message
(all of its stderr is in the result's)."""

LISTEN_WAIT_SECONDS = 5.0
"""How long ``listen`` waits for an execution that holds the session to end before giving up."""
LISTEN_POLL_SECONDS = 0.5
"""How often ``alisten`` looks whether its worker still lives (cancelling it stops it at once)."""

REFUSED_EXIT = 70
"""The exit status of a supervisor that refuses to start without a protection it was promised
(worker/sandbox_setup.py's ``fail``)."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Listening:
    """A listener of ``Session.listen``: ``stop()`` ends it (after it returns, no callback
    is called); ``active`` is False once stopped or once its worker ended."""

    worker: LiveWorker
    key: str

    @property
    def active(self) -> bool:
        return self.worker.listening(self.key)

    def stop(self) -> None:
        self.worker.unlisten(self.key)


@dataclass(eq=False)
class Checkpoint:
    """A session's state as it was at one moment: a paused fork of its code process, in the
    same sandbox (``Session.checkpoint``), which ``Session.restore`` makes the session's
    state again. It shares memory with the session until either writes; the kernel drops it
    first when memory runs short (its process is then gone: ``alive`` is False, ``lost`` says
    how). Files are not part of it.

    One taken with ``checkpoint(wait=False)`` may still be in the making: ``taken`` is None
    until the sandbox says whether it was made (False: it was not, ``lost`` says why), and
    ``restore`` waits for that word."""

    worker: LiveWorker
    session_id: str
    execution_count: int
    taken_at: float
    used: bool = False
    forking: Forking | None = None

    @property
    def alive(self) -> bool:
        """Not used, dropped or killed, nor refused by the sandbox (one in the making is)."""
        return not self.used and not self.worker.ended

    @property
    def busy(self) -> bool:
        """Not made because the next execution came first (``execute(checkpoint_after=)``)."""
        return self.forking is not None and self.forking.busy

    @property
    def taken(self) -> bool | None:
        """Whether the sandbox made it (None: its word has not come yet)."""
        return True if self.forking is None else self.forking.made

    def settle(self, timeout: float) -> None:
        """Wait for the sandbox's word on it; ForkError if it was not made."""
        if self.forking is not None:
            self.forking.result(timeout)

    @property
    def lost(self) -> str | None:
        """How it ended, if it did without being used or closed (its process was killed)."""
        end = self.worker._port_end  # (the channel's record of this branch's end)
        return end.gone if end is not None else None

    def close(self) -> None:
        """Drop it (its process is killed). Idempotent."""
        if not self.used:
            self.used = True
            self.worker.kill("the checkpoint was dropped")


class Session(Closeable):
    """A live worker in a sandbox: run code many times, interrupt it, restart it.

    Get one with ``sandbox.session()``; with ``keep_state=True`` (the default there) variables
    survive between executions. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        core: SandboxCore,
        *,
        keep_state: bool = True,
        owner: object = None,
        _branch: tuple[LiveWorker, Session] | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.forked_from: str | None = None
        """The id of the session this one was forked from (``fork``), or None."""
        self.keep_state = keep_state
        self._core = core
        self._owner = owner  # keeps a user's sandbox alive as long as its session
        self._exec_lock = threading.Lock()
        self._forking = False  # (the lock is held for a fork, not an execution: see _ask)
        self._lock = threading.Lock()
        self._next: LiveWorker | Outcome | None = None
        self._filling: threading.Thread | None = None
        self._current: tuple[Execution, LiveWorker] | None = None
        self._listening: Listening | None = None
        self._count = 0
        self._used = False
        self._state_lost = False
        self._lost_why = ""  # (how, in words: said by the next execution)
        self._checkpoint_after: Checkpoint | None = None  # (under _lock) see take_checkpoint
        self._checkpoint_refused: ForkError | None = None
        self._closed = False
        self.ready: ReadyFrame | None = None
        if _branch is None:
            self._fill(background=False)
            return
        worker, parent = _branch
        self._next, self.ready = worker, worker.ready
        self.forked_from, self._count, self._used = parent.id, parent._count, True

    # -- public ------------------------------------------------------------------------------

    @property
    def execution_count(self) -> int:
        """How many executions the session has counted so far."""
        return self._count

    @property
    def closed(self) -> bool:
        """Whether the session is closed."""
        return self._closed

    @property
    def provider_name(self) -> str:
        """The name of the provider that runs the session's sandbox."""
        return self._core.provider.name

    @property
    def spec(self) -> SandboxSpec:
        """The spec of the sandbox this session runs in."""
        return self._core.spec

    @property
    def listeners(self) -> tuple[EventListener, ...]:
        """Where this session's events go (its sandbox's listeners)."""
        return self._core.listeners

    @property
    def isolation(self) -> Isolation:
        """What the provider applies to this session's sandbox; once its worker is up, also
        what runs the code (``shell``) and what the worker itself could not apply."""
        base, ready = self._core.isolation, self.ready
        if ready is None:
            return base
        shell: Literal["python", "ipython"] = "ipython" if ready.shell == "ipython" else "python"
        notes = tuple(dict.fromkeys((*base.notes, *ready.notes)))
        return base.model_copy(update={"shell": shell, "notes": notes})

    # -- the scratch directory, from the host (as on the sandbox) -----------------------------

    @property
    def workdir(self) -> Path:
        """The sandbox's scratch directory on the host (shared by its sessions); ScratchError
        where the provider keeps the files elsewhere (see ``files``)."""
        return self._core.workdir()

    @property
    def files(self) -> SandboxFiles:
        """The sandbox's files as the host reaches them, wherever the provider keeps them."""
        return self._core.files

    def read_file(self, path: str | os.PathLike[str], *, limit: int = READ_LIMIT) -> bytes:
        """A file the code wrote, by its path relative to the scratch directory: a link on the
        way, anything but a regular file and a file over ``limit`` bytes raise ScratchError."""
        return self._core.files.read(os.fspath(path), limit)

    def write_file(self, path: str | os.PathLike[str], data: bytes) -> None:
        """Put a file in the scratch directory for the code (folders made as needed), never
        through a link the code made; it belongs to the code's user."""
        self._core.files.write(os.fspath(path), data)

    def list_files(
        self, path: str | os.PathLike[str] = ".", *, limit: int | None = None
    ) -> list[ScratchEntry]:
        """The entries of a directory in scratch, links shown as links (never followed)."""
        return self._core.files.list(os.fspath(path), limit)

    def execute(
        self,
        code: str,
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_input: InputCallback | None = None,
        on_clear: ClearCallback | None = None,
        count: int | None = None,
        silent: bool = False,
        on_comm: CommCallback | None = None,
        parent: str = "",
        checkpoint_after: bool = False,
        _cancel: threading.Event | None = None,
        _comm: bool = False,
    ) -> SandboxResult:
        """Run ``code`` and return its result; never raises for anything the code does.

        ``on_stream(name, text)`` receives stdout and stderr as they arrive, within the output
        cap: what it is given, joined, is exactly the result's ``stdout``/``stderr`` (past the
        first half of the cap, the kept tail comes at the end, after the marker). ``on_output``
        receives each rich output, ``on_input(prompt, password)`` answers ``input()`` (without
        it, input() raises EOFError in the code), ``on_clear(wait)`` is told of
        ``clear_output()``. ``timeout`` overrides the spec's for this execution. ``count`` numbers
        the execution (``Out[n]``, ``_n`` in IPython; a kernel passes its own), else the session
        counts; ``silent`` leaves no trace in IPython's history and counter. ``on_comm``
        receives the comm messages the code sends (ipywidgets), unchecked; ``parent`` is the id
        of the request this answers, as the caller knows it (what an Output widget captures by).

        ``checkpoint_after=True`` keeps the state the code leaves as a checkpoint, made by the
        sandbox after the execution (no round trip, and nothing waits for it): take it with
        ``take_checkpoint()`` before the next execution. The sandbox forks it 50 ms after the
        execution, unless the next execution comes first: then it is not made
        (``Checkpoint.taken`` False, ``busy`` True), and executions sent one after another
        (a notebook's "Run All", a batch) pay no fork.
        """
        with self._exec_lock:
            if self._closed:
                raise SandboxClosedError("this session is closed; open a new one with session()")
            if not _comm:
                self._count = self._count + 1 if count is None else count
            spec = self._core.spec
            execution = Execution(
                code=code,
                spec=spec,
                callbacks=Callbacks(on_stream, on_output, on_input, on_clear, on_comm),
                count=self._count,
                silent=silent,
                parent=parent,
                comm=_comm,
            )
            started = time.monotonic()
            execution.cancel = _cancel or threading.Event()
            raised: BaseException | None = None
            restarted = False
            files: WorkspaceFiles | None = None
            network: NetworkLog | None = None
            cancelled = execution.cancel.is_set()
            taken = self._cancelled() if cancelled else self._take(execution)
            if self._state_lost and not (_comm or silent or cancelled):
                # Said first, in words, before anything the code prints: its variables are
                # gone. Only by what a person sees: a comm delivery shows no ending, and what
                # a silent execution prints is dropped; the next cell says it then.
                execution.state_lost, execution.lost_why = True, self._lost_why
                self._state_lost, self._lost_why = False, ""
                why = execution.lost_why or "its sandbox ended"
                execution.note(
                    f"[rewyn: the session's state was lost: {why}. This runs in a fresh "
                    "sandbox, without the variables and imports of the "
                    "code run before.]\n"
                )
            if isinstance(taken, Outcome):
                outcome = taken
            else:
                worker = taken
                self._drop_checkpoint_after()
                if checkpoint_after and self.keep_state and not _comm:
                    try:
                        # (the room is looked at as it ends: ``_keep_after``, before the fork)
                        execution.then_fork = worker.expect_fork(
                            pause=True, headroom=False, asked=False
                        )
                    except ForkError as exc:
                        self._checkpoint_refused = exc
                with self._lock:
                    self._current = (execution, worker)
                try:
                    with worker.watch_memory():
                        outcome = drive(
                            worker,
                            execution,
                            spec.timeout if timeout is UNSET else timeout,
                            keep_state=self.keep_state,
                            memory_limit_mb=spec.memory_limit_mb,
                        )
                except BaseException as exc:
                    # The host stopped waiting (a KeyboardInterrupt in this thread, say):
                    # nothing may go on running unseen, and the execution still gets its event.
                    raised = exc
                    reason = (
                        f"the host stopped the execution ({type(exc).__name__}); "
                        "the sandbox was killed"
                    )
                    worker.kill(reason)
                    outcome = Outcome("crashed", EXIT_KILLED, reason, worker_lost=True)
                finally:
                    with self._lock:
                        self._current = None
                restarted = self._after(worker, outcome, comm=_comm)
                if execution.then_fork is not None:
                    self._keep_after(worker, execution.then_fork)
                files = published(worker, execution.id[:8]) if not _comm else None
                if worker.egress is not None and not _comm:  # (a comm's: the next cell's)
                    network = worker.egress.take()
            result = execution.result(
                outcome,
                (time.monotonic() - started) * 1000,
                self._core.provider.name,
                self.isolation,  # (with what its worker could not apply)
                sandbox_restarted=restarted,
                disk_full=self._core.files.full(),
                files=files if not isinstance(taken, Outcome) else None,
                network=network,
            )
        if not _comm:  # (a comm message is no execution of code: no event, no count)
            event = execution.event(result, self._core.id, self.id, self.forked_from)
            emit(event, self._core.listeners)
        if raised is not None:
            raise raised
        return result

    def deliver_comm(
        self,
        message: Mapping[str, Any],
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_clear: ClearCallback | None = None,
        on_comm: CommCallback | None = None,
        _cancel: threading.Event | None = None,
    ) -> SandboxResult:
        """Hand a comm message from a frontend (``msg_type``, ``msg_id``, ``content``,
        ``metadata``, ``buffers`` as base64) to the code's comms, as ipykernel does between
        cells: the handlers it runs (a widget's callback) are the code's, under the session's
        limits; their output and comm messages reach the callbacks. No event: no code was
        given. The caller checks what it delivers (the kernel's ``widgets.py``)."""
        return self.execute(
            _comm_frame(message),
            timeout=timeout,
            on_stream=on_stream,
            on_output=on_output,
            on_clear=on_clear,
            on_comm=on_comm,
            parent=str(message.get("msg_id") or ""),
            _cancel=_cancel,
            _comm=True,
        )

    async def aexecute(
        self,
        code: str,
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_input: Callable[[str, bool], str | Awaitable[str]] | None = None,
        on_clear: ClearCallback | None = None,
        count: int | None = None,
        silent: bool = False,
        on_comm: CommCallback | None = None,
        parent: str = "",
        checkpoint_after: bool = False,
        _comm: bool = False,
    ) -> SandboxResult:
        """Run ``code`` without blocking the event loop; callbacks run on the loop, in order.

        Cancelling the awaiting task interrupts the code (and kills the sandbox if it does not
        stop within two seconds); the execution still ends in a result and an event.
        """
        import asyncio

        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        return await run_in_thread(
            lambda: self.execute(
                code,
                timeout=timeout,
                on_stream=on_loop(loop, on_stream),
                on_output=on_loop(loop, on_output),
                on_input=ask_on_loop(loop, on_input),
                on_clear=on_loop(loop, on_clear),
                count=count,
                silent=silent,
                on_comm=on_loop(loop, on_comm),
                parent=parent,
                checkpoint_after=checkpoint_after,
                _cancel=cancel,
                _comm=_comm,
            ),
            lambda: self._cancel(cancel),
        )

    async def adeliver_comm(
        self,
        message: Mapping[str, Any],
        *,
        timeout: float | None = UNSET,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_clear: ClearCallback | None = None,
        on_comm: CommCallback | None = None,
    ) -> SandboxResult:
        """``deliver_comm`` without blocking the event loop; callbacks run on the loop."""
        return await self.aexecute(
            _comm_frame(message),
            timeout=timeout,
            on_stream=on_stream,
            on_output=on_output,
            on_clear=on_clear,
            on_comm=on_comm,
            parent=str(message.get("msg_id") or ""),
            _comm=True,
        )

    @property
    def listening(self) -> bool:
        """Whether a listener (``listen``) is handed what the code sends between executions."""
        with self._lock:
            listening = self._listening
        return listening is not None and listening.active

    def listen(
        self,
        *,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_clear: ClearCallback | None = None,
        on_comm: CommCallback | None = None,
    ) -> Listening | None:
        """Hand what the code sends while no execution runs to the callbacks, as it comes: what
        threads it started print, display or send to its widgets (a progress bar that a thread
        moves), until ``stop()`` on what this returns, or the worker ends. An execution or a
        request takes the sandbox over meanwhile and gives it back after; the output is
        bounded as one execution's is. The callbacks are called on the thread that reads the
        sandbox, in order: they must be quick and must not block (``alisten`` runs them on an
        event loop). None for a session that does not keep state, or with no live worker.
        Without a listener, such output is dropped, and the next execution's stderr says how
        much."""
        if not self.keep_state or not self._exec_lock.acquire(timeout=LISTEN_WAIT_SECONDS):
            return None
        try:
            worker = self._next
        finally:
            self._exec_lock.release()
        if not isinstance(worker, LiveWorker) or worker.ready is None or worker.ended:
            return None
        execution = Execution(
            code="",
            spec=self._core.spec,
            callbacks=Callbacks(on_stream, on_output, None, on_clear, on_comm),
            count=self._count,
            comm=True,
        )
        listening = Listening(worker, f"listen-{uuid.uuid4().hex}")
        worker.listen(listening.key, lambda item: output_frame(execution, item))
        with self._lock:
            self._listening = listening
        return listening

    async def alisten(
        self,
        *,
        on_stream: StreamCallback | None = None,
        on_output: OutputCallback | None = None,
        on_clear: ClearCallback | None = None,
        on_comm: CommCallback | None = None,
    ) -> None:
        """``listen`` with the callbacks run on the event loop, in order, for as long as the
        worker lives; cancelling the awaiting task stops it (nothing is handed over after)."""
        import asyncio

        loop = asyncio.get_running_loop()
        listening = self.listen(
            on_stream=on_loop(loop, on_stream),
            on_output=on_loop(loop, on_output),
            on_clear=on_loop(loop, on_clear),
            on_comm=on_loop(loop, on_comm),
        )
        if listening is None:
            return
        try:
            while listening.active:
                await asyncio.sleep(LISTEN_POLL_SECONDS)
        finally:
            listening.stop()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the session's worker is up (it starts in the background)."""
        self._wait_fill()
        worker = self._next
        if isinstance(worker, LiveWorker) and worker.wait_ready(timeout):
            self.ready = worker.ready
            return True
        return False

    # -- branches ----------------------------------------------------------------------------

    @overload
    def fork(self, n: None = None, *, reseed: bool = False) -> Session: ...

    @overload
    def fork(self, n: int, *, reseed: bool = False) -> list[Session]: ...

    def fork(self, n: int | None = None, *, reseed: bool = False) -> Session | list[Session]:
        """A new session with this one's state (variables, imports, open figures), in the
        same sandbox and under the same limits: a copy-on-write fork of its code process,
        made between executions (one running now is waited for). ``fork(n)`` gives ``n``
        branches. Each is a session of its own: it runs at the same time as the others, with
        its own output, input, interrupts and records (their events name this session as
        ``forked_from``), and closing it closes only it.

        What branches share: the sandbox's files (scratch, the workspace, ``/tmp``), its
        memory cap and process limit, and files and sockets that were open when it forked.
        What they do not: threads the code started (a fork copies only the thread that
        forks), and state written after the fork. Random state is copied as it is (the same
        numbers follow in each branch); ``reseed=True`` reseeds ``random`` and NumPy's
        global generator in the new branches.

        Raise ForkError when it cannot be done (a session that does not keep state, a memory
        cap with too little room left, a sandbox that is gone); this session is unchanged.
        """
        count = 1 if n is None else n
        if count < 1:
            raise ValueError("fork(n) makes at least one branch")
        made: list[Session] = []
        with self._exec_lock, self._fork_turn():
            worker = self._live_worker()
            try:
                for _ in range(count):
                    branch = worker.fork(reseed=reseed, timeout=self._core.spec.startup_timeout)
                    made.append(
                        Session(
                            self._core,
                            owner=self._owner,
                            _branch=(branch, self),
                        )
                    )
            except BaseException:
                for session in made:
                    session.close()
                raise
        return made[0] if n is None else made

    async def afork(self, n: int | None = None, *, reseed: bool = False) -> Session | list[Session]:
        """``fork`` without blocking the event loop."""
        return await run_in_thread(lambda: self.fork(n, reseed=reseed), lambda: None)

    def checkpoint(self, *, wait: bool = True) -> Checkpoint:
        """Keep this session's state as it is now (between executions), paused, to
        ``restore`` later: a fork that runs nothing and that the kernel kills first when
        memory runs short. Raise ForkError when it cannot be taken.

        ``wait=False`` returns once the sandbox has been asked, before the fork is made: an
        execution started after it runs once the state is kept (the code's process forks
        before it reads the execution), so the fork is never on its way for longer than the
        fork itself. Whether it was made comes later (``Checkpoint.taken``, ``lost``);
        ForkError is raised here only for what is known at once (the memory cap's room, a
        sandbox that is gone)."""
        timeout = self._core.spec.startup_timeout
        with self._exec_lock, self._fork_turn():
            worker = self._live_worker()
            forking = worker.begin_fork(pause=True, timeout=timeout)
        checkpoint = Checkpoint(
            forking.port, self.id, self._count, time.monotonic(), forking=forking
        )
        if wait:
            checkpoint.settle(timeout)
        return checkpoint

    def take_checkpoint(self) -> Checkpoint:
        """The checkpoint the last execution kept as it ended (``execute(checkpoint_after=True)``),
        now the caller's. Raise ForkError when there is none: it was not asked for, the memory
        cap had no room, or something ran since (its state is not the session's any more)."""
        with self._lock:
            checkpoint, self._checkpoint_after = self._checkpoint_after, None
            refused, self._checkpoint_refused = self._checkpoint_refused, None
        if checkpoint is not None:
            return checkpoint
        raise refused or ForkError("no checkpoint was kept as the last execution ended")

    def _keep_after(self, worker: LiveWorker, forking: Forking) -> None:
        """(With ``_exec_lock`` held.) The checkpoint the execution kept as it ended, for
        ``take_checkpoint``; dropped if the memory the execution left is too near the cap for
        it (the sandbox forked it as it ended, before the host could look: it is killed now,
        as the one ``checkpoint()`` would have refused)."""
        checkpoint = Checkpoint(
            forking.port, self.id, self._count, time.monotonic(), forking=forking
        )
        try:
            worker.check_headroom()
        except ForkError as exc:
            checkpoint.close()
            with self._lock:
                self._checkpoint_refused = exc
            return
        with self._lock:
            self._checkpoint_after = checkpoint

    def _drop_checkpoint_after(self) -> None:
        """Something runs: the checkpoint kept as the last execution ended is not taken now."""
        with self._lock:
            checkpoint, self._checkpoint_after = self._checkpoint_after, None
            self._checkpoint_refused = None
        if checkpoint is not None:
            checkpoint.close()

    @contextlib.contextmanager
    def _fork_turn(self) -> Iterator[None]:
        """(With ``_exec_lock`` held.) A fork holds the session, briefly: completions and
        inspections wait for it instead of answering nothing, as they do while code runs."""
        self._forking = True
        try:
            yield
        finally:
            self._forking = False

    def restore(self, checkpoint: Checkpoint) -> None:
        """Make ``checkpoint`` this session's state (its variables as they were when it was
        taken); the state it had is gone. Files are not restored. The checkpoint is used up.
        Raise ForkError if it is gone (dropped, or killed when memory ran short)."""
        with self._exec_lock:
            if self._closed:
                raise SandboxClosedError("this session is closed; open a new one with session()")
            if checkpoint.session_id != self.id:
                raise ForkError("that checkpoint is another session's")
            with contextlib.suppress(ForkError):  # (one not made is not alive: said below)
                checkpoint.settle(self._core.spec.startup_timeout)
            if not checkpoint.alive or not checkpoint.worker.resume():
                why = checkpoint.lost or "it was used or dropped"
                raise ForkError(f"the checkpoint is gone: {why}")
            checkpoint.used = True
            self._drop_checkpoint_after()  # (the state it was kept from is gone)
            before, self._next = self._next, checkpoint.worker
            self.ready = checkpoint.worker.ready
            self._used, self._state_lost, self._lost_why = True, False, ""
            if isinstance(before, LiveWorker):
                before.kill("the session's state was restored from a checkpoint")

    def _live_worker(self) -> LiveWorker:
        """(With ``_exec_lock`` held.) The session's worker, up; ForkError if there is none."""
        if self._closed:
            raise SandboxClosedError("this session is closed; open a new one with session()")
        if not self.keep_state:
            raise ForkError("a session that does not keep state has no state to fork")
        self._wait_fill()
        worker = self._next
        if not isinstance(worker, LiveWorker) or worker.ended:
            raise ForkError("the session has no live sandbox to fork (run code in it first)")
        if not worker.wait_ready(self._core.spec.startup_timeout + 0.2):
            raise ForkError("the session's sandbox did not start")
        self.ready = worker.ready
        self._used = True
        return worker

    def interrupt(self) -> bool:
        """Raise KeyboardInterrupt in the running code; False if nothing is running."""
        with self._lock:
            current = self._current
        if current is None:
            return False
        execution, worker = current
        return execution.interrupt(worker)

    def restart(self) -> None:
        """Kill the worker (and anything running on it) and start a fresh one; state is gone."""
        with self._lock:
            if self._closed:
                raise SandboxClosedError("this session is closed; open a new one with session()")
        self._kill_workers("the session was restarted while the code ran")
        with self._exec_lock:
            self._drop_checkpoint_after()
            self._used = False
            self._state_lost, self._lost_why = False, ""
            self._fill(background=False)

    def complete(
        self, code: str, cursor_pos: int, timeout: float = 2.0
    ) -> CompleteReplyFrame | None:
        """Ask the worker for completions; None while code runs or if it does not answer."""
        ask = CompleteFrame(id=uuid.uuid4().hex, code=code, cursor_pos=cursor_pos)
        reply = self._ask(ask, timeout)
        return reply if isinstance(reply, CompleteReplyFrame) else None

    def inspect(
        self, code: str, cursor_pos: int, timeout: float = 2.0, *, detail_level: int = 0
    ) -> InspectReplyFrame | None:
        """Ask the worker to describe the name at ``cursor_pos`` (``detail_level`` 1: with its
        source, as ``??``); None when it cannot."""
        ask = InspectFrame(
            id=uuid.uuid4().hex, code=code, cursor_pos=cursor_pos, detail=detail_level
        )
        reply = self._ask(ask, timeout)
        return reply if isinstance(reply, InspectReplyFrame) else None

    def close(self) -> None:
        """Kill the worker and everything it started; wait until it is gone. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._kill_workers("the sandbox was closed while the code ran")

    def _kill_workers(self, reason: str) -> None:
        """Kill the running worker (its execution ends with ``reason``) and the next one."""
        with self._lock:
            current = self._current
        if current is not None:
            current[1].kill(reason)
        with self._exec_lock:
            self._wait_fill()
            if isinstance(self._next, LiveWorker):
                self._next.kill(reason)
            self._next = None

    # -- workers -----------------------------------------------------------------------------

    def _launch(self) -> LiveWorker | Outcome:
        try:
            return self._core.launch_worker(fork_per_exec=not self.keep_state)
        except Exception as exc:
            message = f"the sandbox did not start: the provider failed to launch it: {exc}"
            return Outcome("start_failed", 1, message)

    def _fill(self, *, background: bool) -> None:
        """Start the next worker now, or in a thread (which ``_wait_fill`` joins)."""
        if self._closed:
            return

        def fill() -> None:
            worker = self._launch()
            with self._lock:
                closed = self._closed
                if not closed:
                    self._next = worker
            if closed and isinstance(worker, LiveWorker):
                worker.kill("the session was closed while it started")

        if background:
            self._filling = threading.Thread(target=fill, daemon=True, name="rewyn-prestart")
            self._filling.start()
        else:
            fill()

    def _wait_fill(self) -> None:
        if self._filling is not None:
            self._filling.join()
            self._filling = None

    @staticmethod
    def _cancelled() -> Outcome:
        return Outcome("interrupted", EXIT_INTERRUPTED, "cancelled before the code started")

    def _take(self, execution: Execution) -> LiveWorker | Outcome:
        """Return a ready worker for ``execution``, or the outcome that says why there is none."""
        self._wait_fill()
        worker = self._next
        if isinstance(worker, LiveWorker) and worker.ended and worker.ready is not None:
            # It died while idle (a background thread called os._exit, say): start afresh.
            if self.keep_state and self._used:
                self._lost(f"it ended between executions: {ended_how(worker)}")
            worker.kill("it ended between executions")
            worker = None
        if worker is None:
            worker = self._launch()
        self._next = worker
        if isinstance(worker, Outcome):
            self._next = None
            return worker
        # (A little past the startup time: a program not taken by then is the reason to give.)
        if worker.wait_ready(self._core.spec.startup_timeout + 0.2):
            self.ready = worker.ready
            self._used = True
            return worker
        self._next = None
        killed, failure = worker.kill_reason, worker.start_failure
        waited = DEATH_WAIT_SECONDS if (worker.ended or failure) else 0.0
        exited = killed is None and worker.process.wait(waited) is not None
        worker.kill(failure or "it was not ready in time")
        info = worker.process.exit_info()
        if killed is not None:
            why = killed  # the host's own (closed while it started, say)
        elif exited:
            why = f"it {describe_exit(info.exit_code, info.signal)} before it was ready"
        elif failure is not None:
            why = failure.removeprefix("the sandbox ")
        else:
            info = ExitInfo(exit_code=EXIT_KILLED, signal=signal.SIGKILL)
            why = f"it was not ready within {self._core.spec.startup_timeout:g} s"
        diagnostics = worker.diagnostics(wait=1.0)
        if diagnostics:
            execution.note(diagnostics)
        if exited and info.exit_code == REFUSED_EXIT:
            # A supervisor that refuses to start says why on its last line: what the sandbox
            # said, printable characters only, and framed as the sandbox's word.
            said = [line for line in diagnostics.splitlines() if line.startswith("rewyn: ")]
            if said:
                last = said[-1].removeprefix("rewyn: ")
                text = "".join(ch if ch.isprintable() else " " for ch in last)
                why = f"{why}; it said: {text[:MAX_REASON_CHARS]}"
        return Outcome("start_failed", info.exit_code, f"the sandbox did not start: {why}")

    def _after(self, worker: LiveWorker, outcome: Outcome, *, comm: bool = False) -> bool:
        """Keep, or retire and replace, the worker once an execution is over; True: replaced."""
        if not (outcome.worker_lost or worker.ended):
            return False
        how = outcome.message or ended_how(worker)
        worker.kill("it was retired after the execution")
        if self.keep_state:
            what = "a widget's callback (a comm message from the frontend)" if comm else "the code"
            self._lost(f"{how}, in {what} run before" if how else "")
        self._next = None
        self._fill(background=True)
        return True

    def _lost(self, why: str) -> None:
        """The session's state is gone (its worker was retired, or died while idle): the next
        execution a person sees says so, with ``why``. A loss not said yet keeps its word."""
        if not self._state_lost:
            self._state_lost, self._lost_why = True, why

    # -- one execution ---------------------------------------------------------------------

    def _cancel(self, token: threading.Event) -> None:
        """An awaiting task was cancelled: interrupt its execution (not before it starts: it
        then never starts), and kill the sandbox if the code does not stop in two seconds."""
        with self._lock:
            token.set()
            current = self._current
        if current is None or current[0].cancel is not token:
            return
        execution, worker = current
        execution.interrupt(worker)

        def escalate() -> None:
            with self._lock:
                still = self._current
            if still is not None and still[0] is execution:
                worker.kill("the awaiting task was cancelled and the code did not stop")

        timer = threading.Timer(2.0, escalate)
        timer.daemon = True
        timer.start()

    def _ask(self, ask: CompleteFrame | InspectFrame, timeout: float) -> object:
        if not self._exec_lock.acquire(blocking=False) and not (
            self._forking and self._exec_lock.acquire(timeout=timeout)
        ):
            return None
        try:
            self._wait_fill()
            worker = self._next
            if not isinstance(worker, LiveWorker) or not worker.wait_ready(timeout):
                return None
            return worker.request(ask, f"{ask.t}_reply", timeout)
        finally:
            self._exec_lock.release()


def ended_how(worker: LiveWorker) -> str:
    """How ``worker`` (or its branch) ended, in words, as far as the host knows."""
    end = worker._port_end or worker._root._ended  # (the channel's record of the end)
    if end is not None and end.gone:
        return end.gone
    if end is not None and end.error is not None:
        return str(end.error)
    if worker.kill_reason:
        return f"the host ended it: {worker.kill_reason}"
    return "its process ended"


def published(worker: LiveWorker, label: str) -> WorkspaceFiles | None:
    """After an execution on ``worker``: publish what it wrote in its workspace (and renew the
    view for the next one), whatever its ending; None without a workspace."""
    cells = getattr(worker.process, "workspace", None)
    if not isinstance(cells, WorkspaceCells):
        return None
    try:
        changes = cells.end(None if worker.ended else worker, label)
    except OSError as exc:  # (what was not published stays in staging: the next end tries)
        return WorkspaceFiles(notes=(f"the workspace could not be published: {exc}",))
    return WorkspaceFiles(
        created=tuple(changes.created),
        changed=tuple(changes.changed),
        deleted=tuple(changes.deleted),
        refused=tuple(changes.refused),
        counts=dict(changes.counts),
        versions=tuple(changes.versions),
        notes=tuple(changes.notes),
    )


def _comm_frame(message: Mapping[str, Any]) -> str:
    """What a comm delivery sends as its code: the message, as ASCII JSON."""
    return json.dumps(dict(message), ensure_ascii=True)
