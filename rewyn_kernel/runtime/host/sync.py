"""Bridging the blocking core to asyncio: one thread per call, callbacks back on the loop."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import Self

T = TypeVar("T")


async def run_in_thread(fn: Callable[[], T], on_cancel: Callable[[], None]) -> T:
    """Run ``fn`` on a thread of its own and await its result.

    Not the loop's default executor: that one has a handful of workers, and twenty sandboxes
    executing at once must not queue behind each other (``_run_on_a_thread`` takes an idle
    thread, or starts one). If the awaiting task is cancelled, ``on_cancel`` is called and the
    call still waits for ``fn`` to return, so nothing runs on behind the caller's back; then
    the cancellation propagates.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = fn()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, value, error)

    _run_on_a_thread(target)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        on_cancel()
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(future)
        raise


IDLE_SECONDS = 30.0
"""How long a thread that ran a call waits for the next before it ends."""
_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_idle_lock = threading.Lock()
_idle = 0
"""Threads waiting for a call that no call has claimed yet."""


def _run_on_a_thread(job: Callable[[], None]) -> None:
    """Run ``job`` on a thread of its own: an idle one, else a new one (never queued behind
    another call). Starting a thread costs the caller half a millisecond on a busy loop
    (``Thread.start`` waits for it to run): a widget's round trip is a few milliseconds."""
    global _idle
    with _idle_lock:
        if _idle > 0:
            _idle -= 1
            _jobs.put(job)  # (under the lock: a waiter that times out sees the claim)
            return
    threading.Thread(target=_serve, args=(job,), daemon=True, name="rewyn-execute").start()


def _serve(job: Callable[[], None]) -> None:
    global _idle
    while True:
        job()  # (never raises: run_in_thread's target catches everything)
        with _idle_lock:
            _idle += 1
        while True:
            try:
                job = _jobs.get(timeout=IDLE_SECONDS)
                break
            except queue.Empty:
                with _idle_lock:
                    if _idle > 0:  # (else every waiter is claimed: a job is on its way)
                        _idle -= 1
                        return


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any] | None) -> Any:
    """Wrap a fire-and-forget callback so it runs on ``loop``, in order."""
    if fn is None:
        return None

    def relay(*args: Any) -> None:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    return relay


def ask_on_loop(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., str | Awaitable[str]] | None
) -> Callable[..., str] | None:
    """Wrap a question callback (sync or async) so the worker thread can block on its answer."""
    if fn is None:
        return None

    async def call(*args: Any) -> str:
        answer = fn(*args)
        if inspect.isawaitable(answer):
            answer = await answer
        return str(answer)

    def ask(*args: Any) -> str:
        return asyncio.run_coroutine_threadsafe(call(*args), loop).result()

    return ask


class Closeable:
    """``close()`` also as ``aclose()`` and both context managers (sync and async)."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
