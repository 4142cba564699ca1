"""Print figures for branches of a session's state, each beside a baseline from the same run.

Never asserts on timings. On the default provider (bubblewrap where it works):

- fork: a session holding 2 GiB of NumPy arrays forks; the time until the branch is usable (its
  first execution answered) and how much the sandbox's memory grew until the branch writes;
  beside it, building the same state in a fresh session.
- undo: a cell rewrites 1 GiB in place; restoring the checkpoint kept before it, against
  running the notebook again from the top (the cells that built the state).
- tree search: 8 branches x 20 steps from one loaded state, against loading the state in a
  fresh sandbox for each branch.
- pool preload: snippets that use NumPy through ``SandboxPool(preload="import numpy")``,
  against the pool without it and against one ``python -I -c`` per snippet (a sample of them,
  per snippet).

    python -m benchmarks.bench_fork             # 2000 pool snippets (loops: 100)
    python -m benchmarks.bench_fork --quick     # 300 pool snippets (loops: 30), 512 MiB
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from rewyn_kernel.runtime import SandboxPool, SandboxSpec, create
from rewyn_kernel.runtime.host.session import Session

LOAD = """
import numpy
arrays = [numpy.full(({mib} << 20) // 8 // 4, float(i)) for i in range(4)]
"""
"""The state: {mib} MiB of arrays, in four, written (so every page is the session's)."""
STEP = "score = float(arrays[0][:1000].sum()) + len(history); history.append(score)"
TREE_LOAD = "import numpy\ndata = numpy.random.default_rng(1).random((4000, 1000))\nhistory = []"
TREE_STEP = "history.append(float((data[len(history) :: 97] @ data[0]).sum()))"
SNIPPET = "import numpy\nprint(numpy.arange({n}).sum())"


def seconds(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def checked(session: Session, code: str) -> None:
    result = session.execute(code)
    if not result.ok:
        raise SystemExit(f"the benchmark's code failed: {result.message}\n{result.stderr}")


def usage(session: Session) -> int:
    """The sandbox's memory now, from its cgroup (see LiveWorker.fork)."""
    worker: Any = session._next  # (the benchmark reads the worker's cgroup, as fork does)
    return int(worker.process.memory_usage()[0])


def fork_figures(mib: int) -> None:
    spec = SandboxSpec(memory_limit_mb=mib * 2 + 1024, timeout=300)
    with create(spec) as box:
        session = box.session()
        build = seconds(lambda: checked(session, LOAD.format(mib=mib)))
        checked(session, "history = []")
        times, growth = [], []
        for _ in range(5):
            before = usage(session)
            started = time.perf_counter()
            branch = session.fork()
            checked(branch, "1")
            times.append(time.perf_counter() - started)
            growth.append((usage(session) - before) / before)
            branch.close()
    times.sort()
    median = times[len(times) // 2]
    print(f"fork of a session holding {mib} MiB of NumPy arrays (5 forks, median):")
    print(
        f"  to a usable branch: {median * 1000:7.1f} ms  (target < 30 ms; building the state "
        f"in a fresh session: {build * 1000:.0f} ms, {build / median:.0f}x)"
    )
    print(f"  memory growth until the branch writes: {max(growth) * 100:.1f}%  (target < 5%)")


def undo_figures(mib: int) -> None:
    spec = SandboxSpec(memory_limit_mb=mib * 2 + 1024, timeout=300)
    load = f"import numpy\nbig = numpy.zeros(({mib} << 20) // 8)\nbig += 1.0"
    with create(spec) as box:
        session = box.session()
        top = seconds(lambda: checked(session, load))
        restores = []
        for _ in range(5):
            checkpoint = session.checkpoint()
            checked(session, "big *= 3.0")  # the cell: every page rewritten in place
            # (to a usable session: the restored state answers its first execution)
            started = time.perf_counter()
            session.restore(checkpoint)
            checked(session, "1")
            restores.append(time.perf_counter() - started)
        checked(session, "assert float(big[0]) == 1.0 and float(big[-1]) == 1.0")
    restores.sort()
    median = restores[len(restores) // 2]
    print(f"undo of a cell that rewrote {mib} MiB in place (5 undos to a usable session, median):")
    print(
        f"  restore the checkpoint: {median * 1000:7.1f} ms  (target < 50 ms; running the "
        f"notebook again from the top: {top * 1000:.0f} ms, {top / median:.0f}x)"
    )


def tree_figures(branches: int, steps: int) -> None:
    def walk(session: Session) -> None:
        for _ in range(steps):
            checked(session, TREE_STEP)

    spec = SandboxSpec(timeout=300)
    with create(spec) as box:
        root = box.session()
        load = seconds(lambda: checked(root, TREE_LOAD))

        def forked() -> None:
            for branch in root.fork(branches):
                walk(branch)
                branch.close()

        with_fork = seconds(forked) + load

    def fresh() -> None:
        for _ in range(branches):
            with create(spec) as other:
                session = other.session()
                checked(session, TREE_LOAD)
                walk(session)

    without = seconds(fresh)
    print(f"tree search, {branches} branches x {steps} steps from one loaded state:")
    print(
        f"  forked from one load: {with_fork:6.2f} s  (the state loaded in a fresh sandbox per "
        f"branch: {without:.2f} s, {without / with_fork:.1f}x)"
    )


def pool_figures(count: int, loops: int, size: int) -> None:
    codes = [SNIPPET.format(n=n % 1000) for n in range(count)]
    rates = {}
    for preload in ("import numpy", None):
        with SandboxPool(size=size, preload=preload) as pool:
            pool.map(codes[:size], progress=False)  # (every runner's sandbox warm)
            taken = codes if preload else codes[:loops]
            took = seconds(lambda: pool.map(taken, progress=False))  # noqa: B023
            failed = [r for r in pool.map(codes[:size], progress=False) if not r.ok]
            if failed:
                raise SystemExit(f"a pool snippet failed: {failed[0].message}")
            rates[preload] = len(taken) / took
    started = time.perf_counter()
    for code in codes[:loops]:
        subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, check=True)
    alone = loops / (time.perf_counter() - started)
    fast, slow = rates["import numpy"], rates[None]
    print(f"pool of {size} with preload='import numpy', {count} snippets that import numpy:")
    print(f"  with preload: {fast:7.1f}/s")
    print(
        f"  without:      {slow:7.1f}/s  ({loops} snippets; preload {fast / slow:.1f}x, "
        "target >= 5x)"
    )
    print(
        f"  python -I -c: {alone:7.1f}/s  ({loops} snippets, no sandbox; preload "
        f"{fast / alone:.1f}x, target >= 20x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller state and batches")
    parser.add_argument("--size", type=int, default=2, help="the pool's size (default 2)")
    args = parser.parse_args(argv)
    fork_mib, undo_mib = (512, 256) if args.quick else (2048, 1024)
    count, loops = (300, 30) if args.quick else (2000, 100)
    fork_figures(fork_mib)
    undo_figures(undo_mib)
    tree_figures(8, 20)
    pool_figures(count, loops, args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
