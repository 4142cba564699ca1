"""SandboxPool on real sandboxes: order, isolation between items, the concurrency cap, warm
sandboxes, failures that stay with their item, and the summary."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable

import pytest

from rewyn_kernel.runtime import SandboxPool, SandboxSpec
from rewyn_kernel.runtime.providers.base import SandboxProvider

from .conftest import processes_with, wait_until_gone

SPAN = (
    "import json, time\nstart = time.time()\ntime.sleep({s})\n"
    "print(json.dumps([start, time.time()]))"
)


def overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans running at one moment."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def held(pool: SandboxPool) -> int:
    """How many sandboxes the pool holds, checked against the host where it can see them: a
    local sandbox is a live process tree whose environment names its scratch directory (a
    container's sees it under another path)."""
    workdirs = pool.workdirs
    local = pool.provider.name in ("subprocess", "bubblewrap")
    if local and not all(processes_with(str(workdir)) for workdir in workdirs):
        return -1  # (one is starting or stopping: ask again)
    return len(workdirs)


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_results_come_back_in_order_each_with_its_own_ending(provider: SandboxProvider) -> None:
    codes = {
        "ok": "print('fine')",
        "raises": "raise ValueError('item 2')",
        "times out": "import time; time.sleep(30)",
        "exits": "import sys; sys.exit(3)",
        "prints a lot": "print('x' * 1_000_000)",
        "killed": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    }
    spec = SandboxSpec(timeout=2.0)
    with SandboxPool(spec, provider=provider, size=2) as pool:
        results = pool.map([*codes.values(), "print('after')"])
    by_name = dict(zip([*codes, "after"], results, strict=True))
    assert by_name["ok"].stdout == "fine\n"
    assert by_name["raises"].error is not None
    assert by_name["raises"].error.evalue == "item 2"
    assert by_name["times out"].timed_out
    assert by_name["exits"].exit_code == 3
    assert by_name["prints a lot"].stdout_bytes == 1_000_001
    assert by_name["killed"].ending == "crashed"
    assert by_name["after"].stdout == "after\n"  # nothing carried over from the others
    summary = pool.summary
    assert summary is not None
    assert (summary.items, summary.ok, summary.timed_out) == (7, 3, 1)
    assert summary.failed == 3
    assert "7 items" in str(summary)


def test_no_item_sees_another_items_variables_or_files(provider: SandboxProvider) -> None:
    write = "import os\nx = 'left'\nopen('left.txt', 'w').write('x')\nos.makedirs('d/e')\n"
    look = "import os\nprint('x' in globals(), sorted(p for p in os.listdir('.') if p != '.tmp'))"
    with SandboxPool(provider=provider, size=1) as pool:  # one sandbox: the same for both
        first, second = pool.map([write, look])
    assert first.ok, first.stderr
    assert second.stdout == "False []\n"


def test_at_most_size_run_at_once_and_all_of_them_do(provider: SandboxProvider) -> None:
    with SandboxPool(provider=provider, size=3) as pool:
        pool.map(["1"] * 6)  # (every runner has its sandbox up: the spans measure the work)
        results = pool.map([SPAN.format(s=0.6)] * 9)
    spans = [(float(a), float(b)) for a, b in (json.loads(r.stdout) for r in results)]
    assert overlap(spans) == 3


def test_warm_sandboxes_stay_and_the_others_go_when_idle(provider: SandboxProvider) -> None:
    with SandboxPool(provider=provider, size=3, warm=1) as pool:
        assert wait_for(lambda: held(pool) == 1)  # ready before any work
        pool.map([SPAN.format(s=0.5)] * 6)
        assert wait_for(lambda: held(pool) == 1)  # the two started for the batch let go
        gone = pool.workdirs
        started = time.monotonic()
        (quick,) = pool.map(["print('warm')"])
        assert quick.stdout == "warm\n"
        assert time.monotonic() - started < 5
    assert pool.workdirs == []
    assert all(wait_until_gone(str(workdir)) == [] for workdir in gone)
    assert not any(workdir.exists() for workdir in gone)


def test_submit_amap_a_progress_bar_and_close(provider: SandboxProvider) -> None:
    pool = SandboxPool(provider=provider, size=2)
    try:
        future = pool.submit("print(6 * 7)")
        assert future.result(timeout=30).stdout == "42\n"
        results = asyncio.run(pool.amap([f"print({n})" for n in range(5)]))
        assert [result.stdout for result in results] == [f"{n}\n" for n in range(5)]
        shown = io.StringIO()
        pool.map(["1", "2"], progress=True, file=shown)
        assert "2/2" in shown.getvalue()
        assert "2 items in" in shown.getvalue()
        slow = [pool.submit("import time; time.sleep(5)") for _ in range(6)]
    finally:
        pool.close()
    assert sum(future.cancelled() for future in slow) >= 4  # queued ones never ran
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("1")


def test_a_pool_that_cannot_make_a_sandbox_says_so_for_every_item() -> None:
    from rewyn_kernel.runtime import ContainerProvider

    broken = ContainerProvider(runtime="/nonexistent/docker")
    with SandboxPool(provider=broken, size=2, warm=0) as pool:
        results = pool.map(["1", "2", "3"])
    assert [result.ending for result in results] == ["start_failed"] * 3
    assert all("/nonexistent/docker" in result.message for result in results)


def test_leases_keep_state_a_spare_is_ready_and_idle_ones_are_closed(
    provider: SandboxProvider,
) -> None:
    with SandboxPool(provider=provider, size=1, warm=0, spare_leases=1, lease_ttl=1.0) as pool:
        assert wait_for(lambda: len(pool._spares) == 1)  # a spare, its worker up
        spare_dir = pool._spares[0].sandbox.workdir
        lease = pool.lease()
        assert lease.sandbox.workdir == spare_dir  # the spare, not a new one
        assert lease.execute("x = 41").ok
        assert lease.execute("print(x + 1)").stdout == "42\n"
        assert wait_for(lambda: len(pool._spares) == 1)  # replaced
        other = pool.lease()
        assert other.execute("print('x' in globals())").stdout == "False\n"  # its own
        other.close()
        assert wait_for(lambda: lease.closed, timeout=10)  # idle past the TTL
        assert lease.closed_because == "closed after 1 s idle"
        assert wait_for(lambda: not spare_dir.exists())
        kept = pool.lease()
    assert kept.closed  # the pool's close closes its leases and spares


def test_an_item_whose_sandbox_did_not_start_runs_once_more_in_a_fresh_one() -> None:
    """(A worker that dies as it starts, as podman's CLI once did: the code never ran.)"""
    from pathlib import Path

    from rewyn_kernel.runtime import SubprocessProvider
    from rewyn_kernel.runtime.providers.base import SandboxFiles
    from rewyn_kernel.runtime.providers.popen import PopenWorker

    class FailsOnce(SubprocessProvider):
        launches = 0

        def launch(
            self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
        ) -> PopenWorker:
            type(self).launches += 1
            if type(self).launches == 1:
                raise OSError("the engine went away")
            return super().launch(spec, files, name, egress=egress)

    with SandboxPool(provider=FailsOnce(), size=1, warm=0) as pool:
        (result,) = pool.map(["print('ran')"])
    assert result.stdout == "ran\n"
    assert FailsOnce.launches == 2

    class AlwaysFails(SubprocessProvider):
        def launch(
            self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
        ) -> PopenWorker:
            raise OSError("the engine went away")

    with SandboxPool(provider=AlwaysFails(), size=1, warm=0) as pool:
        (result,) = pool.map(["print('ran')"])
    assert result.ending == "start_failed"
    assert "the engine went away" in result.message
