"""The session's asyncio loop, run as ipykernel runs its own: cells in it, and between cells.

On ipykernel every cell runs inside the kernel's asyncio loop, and the loop goes on while the
kernel is idle: a cell may ``asyncio.create_task`` or ``asyncio.ensure_future`` and the task
makes progress before the next cell, ``asyncio.get_running_loop()`` answers, top-level
``await`` runs in that loop, and ``asyncio.run()`` refuses (a loop is running). ``CellLoop``
does the same in the code's process: ``run_cell`` runs an IPython cell in the loop, and
``next_request`` runs the loop while the process waits for its next request, when the loop has
anything to run. A process that never imported asyncio runs its cells and waits as before, and
one whose loop has nothing to do waits as before: neither pays anything.

A fork of the process (a checkpoint, a branch, the code's own ``fork()``) copies the loop. Its
selector is ``poll``, which keeps its registrations in the process (an epoll instance would be
shared by both processes, and each would see the other's events); the copy's wake-up pipe is
renewed (the two would otherwise read each other's wake-ups), and the copy runs no task until
its first request: a checkpoint stays the state it was taken in.
"""

from __future__ import annotations

import os
import queue
import sys
import threading

from .executor import Gate

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Optional

    from .ipython import IPythonRunner

WAKER_JOIN = 1.0
"""Seconds ``next_request`` waits for its waker thread to end (it ends as a request comes)."""


class CellLoop:
    """The one asyncio loop of the code's process: cells run in it; it runs between cells.

    Made at the first cell that may use it (asyncio imported, or ``async``/``await`` in the
    cell): a session that never does imports no asyncio and pays nothing per cell."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.loop: Any = None
        self.resting = False
        """True in a fork until its first request: it runs no task before it is asked to."""

    def start(self) -> Any:
        """Make the loop (poll-based: see the module's docstring), the main thread's."""
        import asyncio
        import selectors

        loop = self.loop = asyncio.SelectorEventLoop(selectors.PollSelector())
        asyncio.set_event_loop(loop)  # (ensure_future outside a cell finds it too)
        try:  # (the loop IPython's autoawait falls back to, outside a running loop)
            from IPython.core import async_helpers

            async_helpers._asyncio_event_loop = loop
        except Exception:
            pass
        os.register_at_fork(after_in_child=self.after_fork)
        return loop

    # -- cells -----------------------------------------------------------------------------

    def run_cell(self, shell: Any, code: str, store_history: bool, silent: bool) -> Any:
        """Run ``code`` in the loop, as ipykernel's ``do_execute`` does; return IPython's
        ExecutionResult.

        The cell stops the loop as it ends, so a task it started takes its first step after
        the cell, between cells, as on ipykernel (where the reply goes out first). An
        interrupt that leaves the cell's task waiting (an ``await`` in the cell) cancels it
        before it propagates: the cell never goes on later."""
        self.resting = False
        loop = self.loop
        if loop is None and ("asyncio" in sys.modules or "async" in code or "await" in code):
            loop = self.start()
        if loop is None or loop.is_closed() or loop.is_running():  # (closed by the code)
            return shell.run_cell(code, store_history=store_history, silent=silent)
        task = loop.create_task(_cell(loop, shell, code, store_history, silent))
        try:
            while not task.done():  # (a stop the code asked for does not end the cell)
                loop.run_forever()
        except BaseException:
            if not task.done():
                task.cancel()
                try:
                    loop.run_forever()  # (the cancelled cell stops the loop as it ends)
                except BaseException:
                    pass
            raise
        return task.result()

    # -- between cells ---------------------------------------------------------------------

    def next_request(self, requests: queue.Queue[Any]) -> Any:
        """The next request from ``requests``; meanwhile the loop runs, if it has work.

        A thread waits for the request and wakes the loop; it ends as the request comes. The
        loop runs as code does (``gate.in_code``): the supervisor signals an interrupt only
        for an execution it sent, so one that comes now is meant for the request waiting, and
        stops the task that keeps the loop from taking it."""
        if self.resting or self.loop is None:
            item = requests.get()
            self.resting = False
            return item
        if not self.busy():
            return requests.get()
        try:
            return requests.get_nowait()
        except queue.Empty:
            pass
        loop = self.loop
        arrived = threading.Event()
        waker = threading.Thread(
            target=_wake_on_arrival, args=(requests, loop, arrived), name="rewyn-idle", daemon=True
        )
        waker.start()
        try:
            while not arrived.is_set() and not loop.is_closed():
                self.gate.in_code = True
                try:
                    loop.run_forever()  # (until the waker stops it; a stop of the code's too)
                except (KeyboardInterrupt, SystemExit):
                    continue  # (a task that raised it holds it: asyncio logs it, unretrieved)
                except Exception as exc:  # (the loop itself broke: wait as without one)
                    sys.stderr.write("[rewyn: the asyncio loop stopped between cells: %s]\n" % exc)
                    break
                finally:
                    self.gate.in_code = False
        finally:
            item = requests.get()
            waker.join(WAKER_JOIN)
        return item

    def busy(self) -> bool:
        """Whether the loop has anything to run: a callback, a timer, a task, or a file it
        watches besides its own wake-up pipe (a server's socket)."""
        import asyncio

        loop = self.loop
        if loop is None or loop.is_closed():
            return False
        if getattr(loop, "_ready", None) or getattr(loop, "_scheduled", None):
            return True
        if asyncio.all_tasks(loop):
            return True
        selector = getattr(loop, "_selector", None)
        return selector is not None and len(selector.get_map()) > 1

    # -- forks -----------------------------------------------------------------------------

    def after_fork(self) -> None:
        """(In every fork of this process.) A wake-up pipe of its own; no task runs until
        the copy's first request; the loop is still this thread's (Python 3.12 forgets it)."""
        self.resting = True
        loop: Any = self.loop
        if loop.is_closed():
            return
        try:
            loop._close_self_pipe()  # (the poll selector: only this process's registrations)
            loop._make_self_pipe()
        except Exception:
            pass
        if threading.current_thread() is threading.main_thread():
            import asyncio

            asyncio.set_event_loop(loop)


async def _cell(loop: Any, shell: Any, code: str, store_history: bool, silent: bool) -> Any:
    """A cell as ipykernel's ``do_execute`` runs it in its loop: awaited when it awaits at the
    top level (then this triggers post_execute and post_run_cell, as ipykernel does), else
    through ``run_cell``, synchronously, while the loop is running. It stops the loop as it
    ends, whatever happened."""
    try:
        return await _run(shell, code, store_history, silent)
    finally:
        loop.stop()


async def _run(shell: Any, code: str, store_history: bool, silent: bool) -> Any:
    if "async" in code or "await" in code:  # (else it cannot await: no look at its syntax)
        preprocessing = None
        try:
            transformed = shell.transform_cell(code)
        except Exception:
            transformed, preprocessing = code, sys.exc_info()
        if _awaits(shell, code, transformed, preprocessing):
            result = None
            try:
                result = await shell.run_cell_async(
                    code,
                    store_history=store_history,
                    silent=silent,
                    transformed_cell=transformed,
                    preprocessing_exc_tuple=preprocessing,
                )
            finally:
                shell.events.trigger("post_execute")
                if not silent:
                    shell.events.trigger("post_run_cell", result)
            return result
    return shell.run_cell(code, store_history=store_history, silent=silent)


def _awaits(shell: Any, code: str, transformed: Any, preprocessing: Any) -> bool:
    """Whether the cell awaits at the top level, with asyncio as IPython's runner (with
    ``%autoawait trio`` IPython runs it itself, as on ipykernel)."""
    try:
        from IPython.core.async_helpers import _asyncio_runner

        return shell.loop_runner is _asyncio_runner and bool(
            shell.should_run_async(
                code, transformed_cell=transformed, preprocessing_exc_tuple=preprocessing
            )
        )
    except (ImportError, AttributeError, TypeError):  # (an older IPython)
        return False


def _wake_on_arrival(requests: queue.Queue[Any], loop: Any, arrived: threading.Event) -> None:
    """(The waker's thread.) Wait until a request is in ``requests``, without taking it; then
    stop the loop."""
    with requests.not_empty:
        while not requests.queue:
            requests.not_empty.wait()
    arrived.set()
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:  # (the loop was closed meanwhile: nothing runs it)
        pass


def next_request(requests: queue.Queue[Any], runner: Optional[IPythonRunner]) -> Any:
    """The code's process's next request: with the session's asyncio loop running meanwhile
    where cells run in IPython (``CellLoop.next_request``), else simply the next one."""
    if runner is None:
        return requests.get()
    return runner.loop.next_request(requests)
