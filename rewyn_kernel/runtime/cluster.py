"""RaySandboxPool: the SandboxPool's one-shot executions spread over a Ray cluster.

    import ray
    from rewyn_kernel.runtime.cluster import RaySandboxPool

    ray.init(address="auto")                    # or a local cluster
    with RaySandboxPool(SandboxSpec(timeout=2.0)) as pool:
        results = pool.map(snippets)            # in order, as SandboxPool.map

One Ray actor per alive node holds a local ``SandboxPool`` made there, with that node's own
default provider (bubblewrap where it works) and as many sandboxes as the node has CPUs
(``per_node`` to choose). The driver hands each node's actor at most twice its pool's size
at a time, so a fast node takes more. Nodes that join the cluster later are taken in as they
come (the driver looks every ``watch`` seconds, default 5; None: only the nodes alive at the
start), so an autoscaled cluster's new nodes share the batch under way. When a node is lost
mid-batch its items are run again on
another node (``retries`` times, default 1), and an item that still cannot finish comes back as
a ``crashed`` result that names the node it was lost with: never silently dropped, never hung.
A retry is at least once, not exactly once: a node Ray reports lost may still have finished the
item (its raylet killed, its actor not), so an item's effects outside its sandbox must bear
running twice. Results come back from the nodes as JSON and are validated here, as any
sandbox output is.

Needs ``ray`` (the ``ray`` extra: ``pip install '.[ray]'`` from a clone); importing this module
without it raises an ImportError that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TextIO

from rewyn_kernel.runtime._result import SandboxResult
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.host.session import UNSET
from rewyn_kernel.runtime.host.sync import Closeable
from rewyn_kernel.runtime.pool import BatchSummary, SandboxPool, collect

try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "RaySandboxPool needs Ray: install the ray extra (from a clone: pip install '.[ray]'; "
        "see the README's Install)"
    ) from exc

__all__ = ["RaySandboxPool"]

_LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
_WAIT = 0.2
"""Seconds the dispatcher waits for any result before it looks at the cluster again."""
_JOIN_TIMEOUT = 300.0
"""Seconds a node that joined has to start its sandboxes before the pool gives up on it."""


class _NodeSandboxes:
    """The actor on one node: a local pool, its provider chosen there."""

    def __init__(self, spec_json: dict[str, Any], per_node: int | None) -> None:
        import os

        spec = SandboxSpec.model_validate(spec_json)
        size = per_node or len(os.sched_getaffinity(0)) or 1
        self.pool = SandboxPool(spec, size=size, warm=size)
        self.node_id = ray.get_runtime_context().get_node_id()

    def describe(self) -> dict[str, Any]:
        return {"node": self.node_id, "size": self.pool.size, "provider": self.pool.provider.name}

    def run(self, code: str, timeout: float | str | None) -> dict[str, Any]:
        # (The spec's own timeout travels as "spec": the UNSET sentinel does not survive
        # pickling as itself.)
        limit = UNSET if timeout == "spec" else timeout
        result = self.pool.submit(code, timeout=limit).result()  # type: ignore[arg-type]
        return result.model_dump(mode="json", exclude={"ok"})  # (computed, not a field)

    def close(self) -> None:
        self.pool.close()


@dataclass(eq=False)
class _Node:
    node_id: str
    actor: Any
    size: int
    provider: str
    running: dict[Any, _Job] = field(default_factory=dict)  # ObjectRef -> job
    alive: bool = True


@dataclass(eq=False)
class _Job:
    index: int
    code: str
    timeout: float | None
    future: Future[SandboxResult]
    tries: int = 0
    lost_on: list[str] = field(default_factory=list)
    node: str = ""


class RaySandboxPool(Closeable):
    """One-shot executions over every alive node of the Ray cluster ``ray.init`` joined."""

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        per_node: int | None = None,
        retries: int = 1,
        watch: float | None = 5.0,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("call ray.init() first (address='auto', or a local cluster)")
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        if watch is not None and not watch > 0:
            raise ValueError("watch must be a number of seconds above 0, or None")
        self.spec = spec or SandboxSpec()
        self.retries = retries
        self.watch = watch
        self.summary: BatchSummary | None = None
        self.nodes_of: list[str] = []
        """For the last batch: the node each item ran on (in order)."""
        self._per_node = per_node
        self._spec_json = self.spec.model_dump(mode="json")
        self._nodes: list[_Node] = []
        self._joining: dict[Any, tuple[str, Any, float]] = {}  # describe ref -> node, actor, since
        self._seen: set[str] = set()  # every node id ever taken in or tried
        self._last_look = time.monotonic()
        self._refused: dict[str, str] = {}
        self._queue: deque[_Job] = deque()
        self._lock = threading.Condition()
        self._closed = False
        self._stopped = False  # (its dispatcher ended: by close(), or by an error)
        first: dict[Any, tuple[str, Any, float]] = {}
        self._new_nodes(first)
        for ref, (node_id, actor, _) in first.items():
            facts = ray.get(ref)
            self._nodes.append(_Node(node_id, actor, int(facts["size"]), str(facts["provider"])))
        if not self._nodes:
            raise RuntimeError("the Ray cluster has no alive node")
        self._dispatcher = threading.Thread(target=self._dispatch, daemon=True, name="rewyn-ray")
        self._dispatcher.start()

    def _new_nodes(self, into: dict[Any, tuple[str, Any, float]]) -> None:
        """Start an actor on each alive node not seen before; put its ``describe`` ref in
        ``into`` as it is made (so an error half-way loses none of those already started)."""
        actor_class: Any = ray.remote(_NodeSandboxes)
        listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        for node in listed:
            node_id = str(node.get("NodeID", ""))
            if not node.get("Alive") or not node_id or node_id in self._seen:
                continue
            self._seen.add(node_id)
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            # (no CPU of its own: its sandboxes are its node's work; a thread per call)
            options = {"num_cpus": 0, "max_concurrency": 1_000, "scheduling_strategy": strategy}
            actor = actor_class.options(**options).remote(self._spec_json, self._per_node)
            into[actor.describe.remote()] = (node_id, actor, time.monotonic())

    def _look_for_nodes(self) -> None:
        """(The dispatcher.) Every ``watch`` seconds, start taking in the nodes that joined
        since; on every call, give up on those that have not come up in time."""
        now = time.monotonic()
        if self.watch is not None and not self._closed and now - self._last_look >= self.watch:
            self._last_look = now
            with contextlib.suppress(Exception):  # (Ray did not answer: looked at next time)
                self._new_nodes(self._joining)
        for ref, (node_id, actor, since) in list(self._joining.items()):
            if now - since > _JOIN_TIMEOUT:  # its sandboxes never came up
                del self._joining[ref]
                self._refuse(node_id, f"its sandboxes did not start in {_JOIN_TIMEOUT:g} s")
                with contextlib.suppress(Exception):
                    ray.kill(actor)

    def _refuse(self, node_id: str, why: str) -> None:
        with self._lock:
            self._refused[node_id] = why[:500]

    @property
    def refused_nodes(self) -> dict[str, str]:
        """Nodes that joined but could not take items (their sandboxes did not start), and
        why: the pool does not try them again."""
        with self._lock:
            return dict(self._refused)

    def _joined(self, ref: Any) -> None:
        """A joining node's actor answered (or failed): from now on it takes items."""
        node_id, actor, _ = self._joining.pop(ref)
        try:
            facts = ray.get(ref)
        except Exception as exc:  # (it left again, or its pool could not start: never used)
            self._refuse(node_id, f"{type(exc).__name__}: {exc}")
            _stop(actor)
            return
        with self._lock:
            if self._closed:
                joined = None
            else:
                joined = _Node(node_id, actor, int(facts["size"]), str(facts["provider"]))
                self._nodes.append(joined)
                self._lock.notify_all()
        if joined is None:
            _stop(actor)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """Each node the pool uses: its id, its pool's size, its provider, alive or not."""
        with self._lock:
            return [
                {"node": n.node_id, "size": n.size, "provider": n.provider, "alive": n.alive}
                for n in self._nodes
            ]

    # -- work --------------------------------------------------------------------------------

    def submit(self, code: str, *, timeout: float | None = UNSET) -> Future[SandboxResult]:
        """Queue one execution on the cluster; its future holds the result (an execution never
        raises: a lost node's item comes back as a ``crashed`` result)."""
        return self._submit(code, timeout, index=-1)

    def _submit(self, code: str, timeout: float | None, index: int) -> Future[SandboxResult]:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        future: Future[SandboxResult] = Future()
        job = _Job(index, code, timeout, future)
        future.rewyn_job = job  # type: ignore[attr-defined]  # (which node: nodes_of)
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._stopped:
                raise RuntimeError("the pool's dispatcher stopped: close it and make another")
            self._queue.append(job)
            self._lock.notify_all()
        return future

    def map(
        self,
        codes: Iterable[str],
        *,
        timeout: float | None = UNSET,
        progress: bool | None = None,
        file: TextIO | None = None,
    ) -> list[SandboxResult]:
        """Run every code on the cluster's nodes; the results in the codes' order (as
        ``SandboxPool.map``; ``nodes_of`` then says where each ran)."""
        started = time.monotonic()
        futures = [self._submit(code, timeout, n) for n, code in enumerate(codes)]
        results, self.summary = collect(futures, started, progress, file)
        self.nodes_of = [future.rewyn_job.node for future in futures]  # type: ignore[attr-defined]
        return results

    async def amap(
        self, codes: Iterable[str], *, timeout: float | None = UNSET
    ) -> list[SandboxResult]:
        """``map`` without blocking the event loop (in a thread, without a progress bar)."""
        return await asyncio.to_thread(self.map, list(codes), timeout=timeout, progress=False)

    # -- the dispatcher ----------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand jobs to nodes with room, collect results, re-run what a lost node held."""
        try:
            self._dispatch_until_closed()
        finally:  # (normally nothing is left; if this thread failed, no future may hang)
            with self._lock:
                self._stopped = True
                left = [*self._queue, *(j for n in self._nodes for j in n.running.values())]
                self._queue.clear()
            for job in left:
                self._lose(job, "the pool's dispatcher stopped")
            for _, actor, _ in self._joining.values():  # (closed while they were joining)
                _stop(actor)
            self._joining.clear()

    def _dispatch_until_closed(self) -> None:
        while True:
            self._look_for_nodes()  # (its calls to Ray are made outside the lock)
            with self._lock:
                if self._closed and not self._queue and not self._running():
                    break
                self._hand_out()
                refs = [ref for node in self._nodes if node.alive for ref in node.running]
                refs += self._joining  # (only this thread touches them)
                if not refs:
                    self._lock.wait(timeout=_WAIT)
                    continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=_WAIT)
            for ref in ready:
                if ref in self._joining:
                    self._joined(ref)
                else:
                    self._settle(ref)

    def _running(self) -> int:
        return sum(len(node.running) for node in self._nodes if node.alive)

    def _hand_out(self) -> None:
        """(Under the lock.) Give queued jobs to the alive node with the most room."""
        while self._queue:
            alive = [node for node in self._nodes if node.alive]
            if not alive and self._joining:
                return  # (a node is joining: the queue waits for it)
            if not alive:
                while self._queue:
                    self._lose(self._queue.popleft(), "no node of the cluster is left")
                return
            node = max(alive, key=lambda n: 2 * n.size - len(n.running))
            if len(node.running) >= 2 * node.size:
                return
            job = self._queue.popleft()
            if job.future.cancelled():
                continue
            job.tries += 1
            job.node = node.node_id
            limit = "spec" if job.timeout is UNSET else job.timeout
            node.running[node.actor.run.remote(job.code, limit)] = job

    def _settle(self, ref: Any) -> None:
        with self._lock:
            node = next(n for n in self._nodes if ref in n.running)
            job = node.running.pop(ref)
        try:
            data = ray.get(ref)
        except _LOST as exc:
            self._node_lost(node, job, exc)
            return
        except Exception as exc:  # (the node's actor failed: the item's result says so)
            job.future.set_result(_failed(job, f"the node could not run it: {exc}"))
            return
        try:
            result = SandboxResult.model_validate(data)
        except Exception as exc:  # a node's answer is checked like any sandbox output
            result = _failed(job, f"the node's answer was not a result: {exc}")
        if not job.future.done():
            job.future.set_result(result)

    def _node_lost(self, node: _Node, job: _Job, exc: BaseException) -> None:
        with self._lock:
            node.alive = False
            orphans = [job, *node.running.values()]
            node.running.clear()
            for lost in orphans:
                lost.lost_on.append(node.node_id)
                elsewhere = self._joining or any(n.alive for n in self._nodes)
                if lost.tries <= self.retries and elsewhere:
                    self._queue.appendleft(lost)  # (first: they have waited longest)
                else:
                    self._lose(
                        lost, f"its node {node.node_id} left the cluster ({type(exc).__name__})"
                    )
            self._lock.notify_all()

    def _lose(self, job: _Job, why: str) -> None:
        if not job.future.done():
            tried = (
                f"; tried {job.tries} time(s), on {', '.join(job.lost_on)}" if job.lost_on else ""
            )
            job.future.set_result(_failed(job, f"lost: {why}{tried}", ending="crashed"))

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel what has not started, wait for what runs, and stop every node's sandboxes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while self._queue:
                self._queue.popleft().future.cancel()
            self._lock.notify_all()
        self._dispatcher.join()
        for node in self._nodes:
            if node.alive:
                _stop(node.actor)
            else:
                with contextlib.suppress(Exception):
                    ray.kill(node.actor)


def _stop(actor: Any) -> None:
    """Close a node's actor (its sandboxes first), then end it."""
    with contextlib.suppress(*_LOST, ray.exceptions.RayError):
        ray.get(actor.close.remote(), timeout=30)
    with contextlib.suppress(Exception):
        ray.kill(actor)


def _failed(job: _Job, message: str, ending: str = "start_failed") -> SandboxResult:
    import hashlib

    return SandboxResult.model_validate(
        {
            "exit_code": 1,
            "duration_ms": 0.0,
            "code_hash": hashlib.sha256(job.code.encode("utf-8", "surrogatepass")).hexdigest(),
            "ending": ending,
            "message": message,
        }
    )
