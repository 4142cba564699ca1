"""RaySandboxPool on a real local Ray cluster: a head and two worker nodes on this machine
(``ray.cluster_utils.Cluster``), each node running its items in its own sandboxes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise  # (CI installs the ray extra: missing, it fails rather than skips)
    pytest.skip("the ray extra is not installed", allow_module_level=True)

from rewyn_kernel.runtime import SandboxSpec
from rewyn_kernel.runtime.cluster import RaySandboxPool

pytestmark = pytest.mark.xdist_group("ray")  # (one local cluster at a time)

NODE: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 80 * 2**20,
    "include_dashboard": False,
}
"""A light node: one CPU, a small object store, no dashboard (the cluster starts in seconds)."""
HEAD = {**NODE, "no_monitor": True, "include_log_monitor": False}


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, list[Any]]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # (no prompt, no report home)
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    made = Cluster(initialize_head=True, head_node_args=HEAD)
    workers = [made.add_node(**NODE) for _ in range(2)]
    made.wait_for_nodes()
    ray.init(address=made.address, log_to_driver=False)
    try:
        yield made, workers
    finally:
        ray.shutdown()
        made.shutdown()  # type: ignore[no-untyped-call]


def test_items_spread_over_the_nodes_and_come_back_in_order(
    cluster: tuple[Cluster, list[Any]],
) -> None:
    codes = [f"print({n})" for n in range(12)]
    codes[3] = "raise ValueError('three')"
    codes[7] = "import time; time.sleep(30)"
    with RaySandboxPool(SandboxSpec(timeout=3.0), per_node=1) as pool:
        assert len(pool.nodes) == 3
        assert all(node["alive"] for node in pool.nodes)
        results = pool.map(codes)
        nodes_used = set(pool.nodes_of)
    assert [r.stdout for i, r in enumerate(results) if i not in (3, 7)] == [
        f"{n}\n" for n in range(12) if n not in (3, 7)
    ]
    assert results[3].error is not None
    assert results[3].error.evalue == "three"
    assert results[7].timed_out
    assert len(nodes_used) == 3  # every node took some
    assert pool.summary is not None
    assert (pool.summary.items, pool.summary.ok, pool.summary.timed_out) == (12, 10, 1)


def test_a_node_that_joins_later_takes_items(cluster: tuple[Cluster, list[Any]]) -> None:
    """An autoscaled cluster: a node that joins while a batch runs is taken in (the pool looks
    every ``watch`` seconds) and takes items of that batch, which finishes whole; the next batch
    uses it too. A pool that does not watch keeps to the nodes it started with."""
    made, _ = cluster
    spec = SandboxSpec(timeout=30.0)
    late = None
    try:
        with (
            RaySandboxPool(spec, per_node=1, watch=0.2) as pool,
            RaySandboxPool(spec, per_node=1, watch=None) as fixed,
        ):
            first = [node["node"] for node in pool.nodes]
            late = made.add_node(**NODE)
            made.wait_for_nodes()
            # The batch starts as the node has joined the cluster, before the pool has taken it
            # in (that takes its actor's start, about 1.5 s here); the batch lasts about 10 s
            # on the first nodes alone, so the new one comes in while items are still queued.
            codes = ["import time; time.sleep(1); print(1)"] * (10 * len(first))
            results = pool.map(codes)
            assert [r.stdout for r in results] == ["1\n"] * len(codes)
            assert [node["node"] for node in pool.nodes] == [*first, late.node_id]
            assert late.node_id in pool.nodes_of
            assert pool.refused_nodes == {}
            pool.map(["print(2)"] * (2 * len(pool.nodes)))
            assert late.node_id in pool.nodes_of
            fixed.map(["print(3)"] * 8)
            assert late.node_id not in [n["node"] for n in fixed.nodes]
            assert late.node_id not in fixed.nodes_of
    finally:
        if late is not None:  # (the other tests count the module's nodes)
            made.remove_node(late)


@pytest.mark.parametrize("retries", [1, 0])
def test_a_lost_nodes_items_run_elsewhere_or_say_they_were_lost(
    cluster: tuple[Cluster, list[Any]], retries: int
) -> None:
    """A worker node is removed while it runs items (each case its own: the cluster has two).
    With a retry they finish on the other nodes; without, they come back as lost, naming the
    node. None hangs, none is dropped."""
    made, workers = cluster
    doomed = workers[retries]
    with RaySandboxPool(SandboxSpec(timeout=30.0), per_node=1, retries=retries) as pool:
        before = sum(node["alive"] for node in pool.nodes)
        pool.map(["1"] * (2 * before))  # (every node's sandbox warm)
        codes = ["import time; time.sleep(1.5); print('done')"] * (3 * before)
        timer = threading.Timer(0.8, made.remove_node, args=(doomed,))
        timer.start()
        started = time.monotonic()
        results = pool.map(codes)
        timer.join()
        elapsed = time.monotonic() - started
        alive = sum(node["alive"] for node in pool.nodes)
    assert elapsed < 60
    assert alive == before - 1
    if retries:
        assert [r.stdout for r in results] == ["done\n"] * len(codes)
        assert doomed.node_id not in pool.nodes_of  # (its items ran again elsewhere)
    else:
        lost = [r for r in results if r.ending == "crashed"]
        assert lost, [r.ending for r in results]
        assert all(doomed.node_id in r.message for r in lost)
        assert all(r.stdout == "done\n" for r in results if r.ending != "crashed")
