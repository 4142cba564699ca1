"""Print figures for SandboxPool beside a sequential loop and a subprocess per snippet.

Never asserts on timings. A mixed batch, as RL evaluation sends: mostly quick snippets, 10%
raising, 1% running past a 2 s timeout, a few printing 1 MB. Snippets per second for the pool
(its warm sandboxes ready), for a sequential loop of today's ``create().execute`` (a new
sandbox per snippet, as code that does not know about pools does), and for one
``python -I -c`` subprocess per snippet (the upstream SDK's way, no sandbox at all). Then the
memory per warm sandbox, and a container sandbox from the warm pool against a cold one.

    python -m benchmarks.bench_pool            # 2000 snippets (the loops: 200, scaled)
    python -m benchmarks.bench_pool --quick    # 300 snippets (the loops: 100)
    python -m benchmarks.bench_pool --container rewyn-test-python:3.11 --ray
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.bench_kernel import children_kib, percentile
from rewyn_kernel.runtime import SandboxPool, SandboxSpec, create

TIMEOUT = 2.0


def snippets(count: int) -> list[str]:
    """The mixed batch, the same for every contender: every 100 snippets hold exactly one
    past the timeout, ten raising and two printing 1 MB (so a prefix of 100s is the mix)."""
    made = []
    for n in range(count):
        if n % 100 == 50:
            made.append("import time\ntime.sleep(60)")  # past the timeout
        elif n % 10 == 3:
            made.append(f"raise ValueError('candidate {n} is wrong')")
        elif n % 50 == 7:
            made.append("print('x' * 1_000_000)")
        else:
            made.append(f"total = sum(i * i for i in range({n % 500}))\nprint(total)")
    return made


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.1f}/s"


def sequential(codes: Sequence[str]) -> float:
    started = time.monotonic()
    for code in codes:
        with create(SandboxSpec(timeout=TIMEOUT)) as box:
            box.execute(code)
    return time.monotonic() - started


def subprocesses(codes: Sequence[str]) -> float:
    started = time.monotonic()
    for code in codes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [sys.executable, "-I", "-c", code],
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 snippets (the loops: 100)")
    parser.add_argument(
        "--size",
        type=int,
        default=4 * (os.cpu_count() or 1),
        help="the pool's size (default: 4 per CPU: the mix waits on timeouts more than it "
        "computes)",
    )
    parser.add_argument(
        "--container", metavar="IMAGE", help="also a docker sandbox, warm against cold"
    )
    parser.add_argument("--ray", action="store_true", help="also over a local Ray cluster")
    args = parser.parse_args(argv)
    count, loops = (300, 100) if args.quick else (2000, 200)
    codes = snippets(count)
    spec = SandboxSpec(timeout=TIMEOUT)
    with SandboxPool(spec, size=args.size) as pool:
        pool.map(["1"] * pool.size)  # (every runner's sandbox warm: the figures measure work)
        results = pool.map(codes, progress=False)
        summary = pool.summary
        assert summary is not None
        kib = children_kib(_self())
        size = pool.size
        provider = pool.provider.name
    seq = sequential(codes[:loops])
    sub = subprocesses(codes[:loops])
    print(
        f"{count} mixed snippets on {provider} (10% raising, 1% past {TIMEOUT:g} s, 2% print 1 MB)"
    )
    print(f"  pool (size {size}, warm):     {rate(count, summary.seconds)}  {summary}")
    endings = ", ".join(f"{k} {v}" for k, v in sorted(summary.endings.items()))
    print(f"    endings: {endings}")
    print(
        f"  sequential create().execute: {rate(loops, seq)}  ({loops} snippets; pool "
        f"{(count / summary.seconds) / (loops / seq):.1f}x, target >= 3x)"
    )
    print(
        f"  python -I -c per snippet:    {rate(loops, sub)}  ({loops} snippets, no sandbox; pool "
        f"{(count / summary.seconds) / (loops / sub):.1f}x, target >= 10x)"
    )
    print(f"  memory: {kib / 1024 / size:.1f} MiB of processes per warm sandbox ({size} warm)")
    durations = sorted(result.duration_ms / 1000 for result in results if result.ok)
    print(f"  ok items: p50 {percentile(durations, 0.5) * 1000:.1f} ms")
    if args.container:
        container(args.container)
    if args.ray:
        on_ray(codes[: count // 2], size, summary.per_second)
    return 0


def on_ray(codes: Sequence[str], size: int, local_rate: float) -> None:
    """The same mix over a local Ray cluster: a head and one more node on this machine, each
    with half the local pool's sandboxes; the overhead per item against the local pool."""
    import os

    import ray
    from ray.cluster_utils import Cluster

    from rewyn_kernel.runtime.cluster import RaySandboxPool

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    started = time.monotonic()
    node: dict[str, Any] = {
        "num_cpus": 1,
        "object_store_memory": 80 * 2**20,
        "include_dashboard": False,
    }
    head = {**node, "no_monitor": True, "include_log_monitor": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    up = time.monotonic() - started
    try:
        with RaySandboxPool(SandboxSpec(timeout=TIMEOUT), per_node=max(size // 2, 1)) as pool:
            pool.map(["1"] * size)
            pool.map(codes)
            summary = pool.summary
            assert summary is not None
            spread = {node: pool.nodes_of.count(node) for node in set(pool.nodes_of)}
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
    overhead = (1 / summary.per_second - 1 / local_rate) * 1000 * size
    print(
        f"  ray, 2 local nodes x {max(size // 2, 1)} sandboxes: {rate(len(codes), summary.seconds)}"
        f"  ({len(codes)} snippets; items per node {sorted(spread.values())}; cluster up in "
        f"{up:.1f} s); overhead per item vs the local pool: {overhead:+.1f} ms of a sandbox's time"
    )


def container(image: str) -> None:
    """A docker sandbox from a warm pool against a cold one (create, first execute, close)."""
    from rewyn_kernel.runtime import ContainerProvider

    provider = ContainerProvider(image=image)
    cold = []
    for _ in range(10):
        started = time.monotonic()
        with create(SandboxSpec(timeout=30.0), provider=provider) as box:
            box.execute("print(1)")
        cold.append(time.monotonic() - started)
    warm = []
    with SandboxPool(SandboxSpec(timeout=30.0), provider=provider, size=1) as pool:
        pool.map(["1"])
        for _ in range(30):
            started = time.monotonic()
            pool.submit("print(1)").result()
            warm.append(time.monotonic() - started)
    print(
        f"  docker ({image}): from the warm pool p50 {percentile(warm, 0.5) * 1000:.1f} ms, "
        f"cold create + first execute p50 {percentile(cold, 0.5) * 1000:.1f} ms"
    )


def _self() -> int:
    return os.getpid()


if __name__ == "__main__":
    sys.exit(main())
