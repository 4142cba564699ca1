"""SandboxPool: many one-shot executions at once, at most ``size`` running, ``warm`` ready.

    from rewyn_kernel.runtime import SandboxPool

    with SandboxPool(size=4) as pool:
        results = pool.map(snippets)            # in order; a progress bar on a terminal
        print(pool.summary)                     # ok / failed / timed out, p50 / p99

Each of the pool's ``size`` runners is a thread that owns one sandbox and runs one item at a
time in it, as ``sandbox.execute`` does: in a fresh fork of a warm worker, so no variable of
one item reaches the next, and the sandbox's scratch directory is emptied between items (no
file either). A timeout, a crash or running out of memory is that item's result; the runtime
restarts the sandbox's worker when it has to, and other items never notice. With ``preload``
(``"import numpy, pandas"``), each sandbox's warm worker runs that code once and every item
runs in a fresh fork of it: no item pays for the imports, and each still starts from the same
clean state. ``warm`` runners
start their sandbox when the pool starts and keep it; the others start theirs when the work
needs them and close it once the queue is empty, so an idle pool holds ``warm`` sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rewyn_kernel.runtime._result import SandboxResult
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.factory import create, get_default_provider
from rewyn_kernel.runtime.host.base import BaseSandbox, Sandbox
from rewyn_kernel.runtime.host.session import UNSET, Session
from rewyn_kernel.runtime.host.sync import Closeable
from rewyn_kernel.runtime.providers.base import SandboxProvider

__all__ = ["BatchSummary", "Lease", "SandboxPool"]


@dataclass(frozen=True)
class BatchSummary:
    """How a batch went: counts by outcome and the time per item."""

    items: int
    ok: int
    failed: int
    timed_out: int
    seconds: float
    p50_ms: float
    p99_ms: float
    endings: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, results: Sequence[SandboxResult], seconds: float) -> BatchSummary:
        durations = sorted(result.duration_ms for result in results)
        endings: dict[str, int] = {}
        for result in results:
            endings[result.ending] = endings.get(result.ending, 0) + 1
        timed_out = sum(result.timed_out for result in results)
        ok = sum(result.ok for result in results)
        return cls(
            items=len(results),
            ok=ok,
            failed=len(results) - ok - timed_out,
            timed_out=timed_out,
            seconds=seconds,
            p50_ms=_nearest_rank(durations, 0.5),
            p99_ms=_nearest_rank(durations, 0.99),
            endings=endings,
        )

    @property
    def per_second(self) -> float:
        """Items per second over the batch (0.0 for an empty one)."""
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.items} items in {self.seconds:.2f} s ({self.per_second:.1f}/s): {self.ok} ok, "
            f"{self.failed} failed, {self.timed_out} timed out; each p50 {self.p50_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms"
        )


def _nearest_rank(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))]


class Lease(Closeable):
    """A session leased from a pool: a sandbox of its own with a live worker, state kept
    between executions, closed with the lease (``with pool.lease() as lease: ...``). A pool
    with ``lease_ttl`` closes a lease left idle that long; its session then says so."""

    def __init__(self, sandbox: Sandbox, session: Session) -> None:
        self.sandbox = sandbox
        self.session = session
        self._used = time.monotonic()
        self._busy = 0
        self._lock = threading.Lock()
        self.closed_because: str | None = None

    @property
    def idle_seconds(self) -> float:
        """Seconds since the lease last ran code (0.0 while it runs some)."""
        with self._lock:
            return 0.0 if self._busy else time.monotonic() - self._used

    def execute(self, code: str, *, timeout: float | None = UNSET) -> SandboxResult:
        """``session.execute`` that counts as use (the idle clock stops while it runs)."""
        with self._lock:
            self._busy += 1
        try:
            return self.session.execute(code, timeout=timeout)
        finally:
            with self._lock:
                self._busy -= 1
                self._used = time.monotonic()

    async def aexecute(self, code: str, *, timeout: float | None = UNSET) -> SandboxResult:
        """``execute`` without blocking the event loop."""
        with self._lock:
            self._busy += 1
        try:
            return await self.session.aexecute(code, timeout=timeout)
        finally:
            with self._lock:
                self._busy -= 1
                self._used = time.monotonic()

    @property
    def closed(self) -> bool:
        """Whether the lease is closed (by its holder, its pool, or ``lease_ttl``)."""
        return self.session.closed

    def close(self, because: str = "closed") -> None:
        """Close the session and remove the sandbox's scratch directory. Idempotent."""
        if self.closed_because is None:
            self.closed_because = because
        try:
            self.session.close()
        finally:
            self.sandbox.close()


@dataclass(eq=False)
class _Item:
    code: str
    timeout: float | None
    future: Future[SandboxResult]


_STOP = object()


class SandboxPool(Closeable):
    """At most ``size`` one-shot executions at once (default: the CPUs), ``warm`` sandboxes
    kept ready (default: ``size``), each made from ``spec`` by ``provider`` (the default
    provider: bubblewrap where it works); ``preload``: code each sandbox's worker runs once
    before the items it forks (see ``BaseSandbox.warm_up``). Close it (or use ``with``) to
    stop every sandbox."""

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        provider: SandboxProvider | None = None,
        size: int | None = None,
        warm: int | None = None,
        listeners: Sequence[EventListener] = (),
        spare_leases: int = 0,
        lease_ttl: float | None = None,
        preload: str | None = None,
    ) -> None:
        self.spec = spec or SandboxSpec()
        self.preload = preload
        if self.spec.workdir is not None:
            raise ValueError(
                "a pool's sandboxes each need a scratch directory of their own (it is emptied "
                "between items): leave workdir unset"
            )
        self.provider = provider or get_default_provider()
        self.size = size or os.cpu_count() or 1
        self.warm = self.size if warm is None else warm
        if self.size < 1:
            raise ValueError("size must be at least 1")
        if not 0 <= self.warm <= self.size:
            raise ValueError(f"warm must be between 0 and size ({self.size})")
        self._listeners = tuple(listeners)
        self._queue: queue.SimpleQueue[_Item | object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._boxes: set[Sandbox] = set()
        if spare_leases < 0 or (lease_ttl is not None and lease_ttl <= 0):
            raise ValueError("spare_leases must be 0 or more, lease_ttl positive (or None)")
        self.spare_leases = spare_leases
        self.lease_ttl = lease_ttl
        self._spares: list[Lease] = []
        self._leases: set[Lease] = set()
        self._leasing = threading.Condition(self._lock)
        self._filling = 0
        self._reaper: threading.Thread | None = None
        self.summary: BatchSummary | None = None
        """The last ``map``/``amap`` batch's summary."""
        self._runners = [
            threading.Thread(
                target=self._run, args=(n < self.warm,), daemon=True, name=f"rewyn-pool-{n}"
            )
            for n in range(self.size)
        ]
        for runner in self._runners:
            runner.start()
        if spare_leases or lease_ttl is not None:
            self._reaper = threading.Thread(target=self._tend, daemon=True, name="rewyn-leases")
            self._reaper.start()

    # -- work --------------------------------------------------------------------------------

    def submit(self, code: str, *, timeout: float | None = UNSET) -> Future[SandboxResult]:
        """Queue one execution; its future holds the result (an execution never raises)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        future: Future[SandboxResult] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._queue.put(_Item(code, timeout, future))
        return future

    def map(
        self,
        codes: Iterable[str],
        *,
        timeout: float | None = UNSET,
        progress: bool | None = None,
        file: TextIO | None = None,
    ) -> list[SandboxResult]:
        """Run every code, at most ``size`` at once; the results in the codes' order.
        ``progress``: a bar (tqdm) on ``file`` (stderr), by default when it is a terminal."""
        started = time.monotonic()
        futures = [self.submit(code, timeout=timeout) for code in codes]
        results, self.summary = collect(futures, started, progress, file)
        return results

    async def amap(
        self,
        codes: Iterable[str],
        *,
        timeout: float | None = UNSET,
        progress: bool | None = None,
        file: TextIO | None = None,
    ) -> list[SandboxResult]:
        """``map`` without blocking the event loop. Cancelling it cancels the items that have
        not started; those running finish (each is bounded by its timeout)."""
        started = time.monotonic()
        futures = [self.submit(code, timeout=timeout) for code in codes]
        bar = _track(futures, progress, file)
        try:
            results = list(await asyncio.gather(*map(asyncio.wrap_future, futures)))
        except asyncio.CancelledError:
            for queued in futures:
                queued.cancel()
            raise
        finally:
            _end(bar)
        self.summary = _summarize(results, started, bar, file)
        return results

    # -- leases ------------------------------------------------------------------------------

    def lease(self) -> Lease:
        """A session of its own, in a sandbox of its own (a spare one, ready, when the pool
        keeps ``spare_leases``); close it, or the pool's ``lease_ttl`` does once it idles."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            spare = self._spares.pop() if self._spares else None
            self._leasing.notify_all()  # (the tender makes another spare)
        lease = spare if spare is not None and not spare.closed else self._new_lease()
        with self._lock:
            closed = self._is_closed()
            if not closed:
                self._leases = {held for held in self._leases if not held.closed}
                self._leases.add(lease)
        if closed:
            lease.close("the pool was closed")
            raise RuntimeError("the pool is closed")
        return lease

    @property
    def leases(self) -> list[Lease]:
        """The leases handed out and still open."""
        with self._lock:
            return [lease for lease in self._leases if not lease.closed]

    def _new_lease(self) -> Lease:
        box = create(self.spec, provider=self.provider, listeners=self._listeners)
        try:
            session = box.session()
            session.wait_ready(self.spec.startup_timeout)
        except BaseException:
            box.close()
            raise
        return Lease(box, session)

    def _tend(self) -> None:
        """Keep ``spare_leases`` spares made, and close leases idle past ``lease_ttl``."""
        period = min(self.lease_ttl / 4, 1.0) if self.lease_ttl else 1.0
        while True:
            with self._lock:
                if self._closed:
                    return
                wanted = self.spare_leases - len(self._spares) - self._filling
                if wanted <= 0:
                    self._leasing.wait(timeout=period)
                    wanted = self.spare_leases - len(self._spares) - self._filling
                if self._is_closed():  # (closed while it waited)
                    return
                self._filling += max(wanted, 0)
                held = list(self._leases)
            for _ in range(max(wanted, 0)):
                try:
                    spare: Lease | None = self._new_lease()
                except Exception:  # (the next lease() makes its own, and says why)
                    spare = None
                with self._lock:
                    self._filling -= 1
                    keep = spare is not None and not self._closed
                    if keep and spare is not None:
                        self._spares.append(spare)
                if spare is not None and not keep:
                    spare.close("the pool was closed")
            if self.lease_ttl is not None:
                for lease in held:
                    if not lease.closed and lease.idle_seconds > self.lease_ttl:
                        lease.close(f"closed after {self.lease_ttl:g} s idle")
                        with self._lock:
                            self._leases.discard(lease)

    def _is_closed(self) -> bool:
        return self._closed

    @property
    def workdirs(self) -> list[Path]:
        """The scratch directories of the sandboxes the pool holds now (``warm`` when idle)."""
        with self._lock:
            return sorted(box.workdir for box in self._boxes)

    # -- the runners -------------------------------------------------------------------------

    def _run(self, keep: bool) -> None:
        """One runner: take items, run each in this runner's own sandbox."""
        box, why = self._start() if keep else (None, "")
        try:
            while True:
                item = self._take(box is not None and not keep)
                if item is None:  # queue empty: a runner that is not warm lets its sandbox go
                    if box is not None and not keep:
                        self._let_go(box)
                        box = None
                    continue
                if item is _STOP:
                    return
                assert isinstance(item, _Item)
                if not item.future.set_running_or_notify_cancel():
                    continue
                if box is None or box.closed:
                    box, why = self._start()
                result = self._execute(box, item, why)
                if result.ending == "start_failed" and box is not None:
                    # The code never ran (the sandbox's worker did not come up): once more, in
                    # a fresh sandbox; a second failure is the item's result.
                    self._let_go(box)
                    box, why = self._start()
                    result = self._execute(box, item, why)
                item.future.set_result(result)
        finally:
            if box is not None:
                self._let_go(box)

    def _let_go(self, box: Sandbox) -> None:
        with self._lock:
            self._boxes.discard(box)
        box.close()

    def _take(self, idle_matters: bool) -> _Item | object | None:
        """The next item; None once the queue has been empty for a moment (only when this
        runner has a sandbox it should let go of)."""
        try:
            return self._queue.get(timeout=0.5 if idle_matters else None)
        except queue.Empty:
            return None

    def _start(self) -> tuple[Sandbox | None, str]:
        """A sandbox for a runner, or None and why not (each item then says so)."""
        try:
            box = create(self.spec, provider=self.provider, listeners=self._listeners)
        except Exception as exc:
            return None, f"the pool could not make a sandbox: {type(exc).__name__}: {exc}"
        if isinstance(box, BaseSandbox):  # (a failure shows in the first result)
            box.warm_up(self.spec.startup_timeout, preload=self.preload)
        with self._lock:
            self._boxes.add(box)
        return box, ""

    def _execute(self, box: Sandbox | None, item: _Item, why: str) -> SandboxResult:
        if box is not None:
            try:
                result = box.execute(item.code, timeout=item.timeout)
            except Exception as exc:  # (the runtime reports failures in results: a last resort)
                why = f"the pool could not run this item: {type(exc).__name__}: {exc}"
                with contextlib.suppress(Exception):
                    self._let_go(box)
            else:
                _empty(box)
                return result
        return SandboxResult(
            exit_code=1,
            duration_ms=0.0,
            code_hash=hashlib.sha256(item.code.encode("utf-8", "surrogatepass")).hexdigest(),
            ending="start_failed",
            message=why,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel what has not started, let what runs finish, and close every sandbox."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        while True:  # (items still queued: cancelled, never run)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Item):
                item.future.cancel()
        for _ in self._runners:
            self._queue.put(_STOP)
        with self._lock:
            self._leasing.notify_all()
            leases = [*self._spares, *self._leases]
            self._spares.clear()
            self._leases.clear()
        if self._reaper is not None:
            self._reaper.join()
        for lease in leases:
            lease.close("the pool was closed")
        for runner in self._runners:
            runner.join()


def _empty(box: Sandbox) -> None:
    """Remove what the item left in the scratch directory (never through a link), so the next
    item finds it as a fresh sandbox would; the worker's own temporary directory stays, empty."""
    box.files.empty()


def collect(
    futures: Sequence[Future[SandboxResult]],
    started: float,
    progress: bool | None,
    file: TextIO | None,
) -> tuple[list[SandboxResult], BatchSummary]:
    """Wait for every future, in order, with the bar (see ``map``); the results and the
    batch's summary (printed under the bar)."""
    bar = _track(futures, progress, file)
    try:
        results = [future.result() for future in futures]
    finally:
        _end(bar)
    return results, _summarize(results, started, bar, file)


def _track(
    futures: Sequence[Future[SandboxResult]], progress: bool | None, file: TextIO | None
) -> Any:
    """A progress bar that counts ``futures`` as they finish, or None (see ``_bar``)."""
    bar = _bar(len(futures), progress, file)
    if bar is not None:
        for future in futures:
            future.add_done_callback(lambda _: bar.update(1))
    return bar


def _end(bar: Any) -> None:
    if bar is not None:
        bar.close()


def _summarize(
    results: Sequence[SandboxResult], started: float, bar: Any, file: TextIO | None
) -> BatchSummary:
    summary = BatchSummary.of(results, time.monotonic() - started)
    if bar is not None:
        print(summary, file=file or _stderr())
    return summary


def _stderr() -> TextIO:
    import sys

    return sys.stderr


def _bar(total: int, progress: bool | None, file: TextIO | None) -> Any:
    out = file or _stderr()
    if progress is None:
        progress = total > 1 and out.isatty()
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, file=out, unit="item", desc="sandboxes", dynamic_ncols=True)
