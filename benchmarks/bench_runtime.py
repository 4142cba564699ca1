"""Print latency and throughput figures for the subprocess provider (never asserts on timings).

Measures, in one run on this machine:

1. the baseline: wall time of ``subprocess.run([sys.executable, "-I", "-c", "pass"])`` (p50);
2. one-shot ``box.execute("print(1)")`` p50/p99, back to back and spaced by a pause (not
   counted) that lets the pre-started spare worker finish starting, each p50 as a ratio of the
   baseline (target <= 1.5x);
3. a session round trip for ``x = 1`` (p50/p99 after warm-ups; target p50 < 1 ms);
4. 50 MiB of stdout relayed under the default 1 MiB cap: wall time, MiB/s, bytes counted,
   truncation, and the growth of this process's VmRSS and VmHWM (peak RSS);
5. the same flood through ``session.execute`` with an ``on_stream`` callback that counts.

Run from the repository root::

    python -m benchmarks.bench_runtime            # full run
    python -m benchmarks.bench_runtime --quick    # fewer runs, 10 MiB flood
    python -m benchmarks.bench_runtime --runs 50  # one-shot and baseline runs
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from rewyn_kernel.runtime import Sandbox, SandboxResult, Session, create

MIB = 1024 * 1024
SPACING_SECONDS = 0.05
FLOOD_CODE = """\
import sys
chunk = 'x' * 1023 + '\\n'
for _ in range({lines}):
    sys.stdout.write(chunk)
"""


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``samples`` (``fraction`` in 0..1)."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def proc_status_kib(field: str) -> int:
    """Return a ``/proc/self/status`` field such as VmRSS or VmHWM, in KiB (0 if unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Table:
    """Print rows of (metric, value, target/ratio) in aligned columns as they are measured."""

    widths = (44, 16)

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.row("metric", "value", "target / ratio")
        self.row("-" * self.widths[0], "-" * self.widths[1], "-" * 24)

    def row(self, metric: str, value: str, note: str = "") -> None:
        print(f"{metric:<{self.widths[0]}} {value:>{self.widths[1]}}  {note}".rstrip(), flush=True)

    def check(self, label: str, result: SandboxResult) -> None:
        if not result.ok:
            self.failures.append(
                f"{label}: {result.ending} {result.message} {result.stderr[-300:]}"
            )


def timed(calls: int, call: Callable[[], object], pause: float = 0.0) -> list[float]:
    """Return the wall times in ms of ``calls`` calls, sleeping ``pause`` s (untimed) first."""
    samples: list[float] = []
    for _ in range(calls):
        if pause:
            time.sleep(pause)
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def ms(value: float) -> str:
    return f"{value:.3f} ms"


class StreamCounter:
    """An ``on_stream`` callback that only counts the characters of stdout."""

    def __init__(self) -> None:
        self.chars = 0

    def __call__(self, name: str, text: str) -> None:
        if name == "stdout":
            self.chars += len(text)


def bench_flood(
    table: Table,
    label: str,
    run: Callable[[str], SandboxResult],
    mib: int,
    counter: StreamCounter | None = None,
) -> None:
    """Relay ``mib`` MiB of stdout through ``run`` and print time, rate, bytes and RSS growth."""
    code = FLOOD_CODE.format(lines=mib * 1024)
    rss0, hwm0 = proc_status_kib("VmRSS"), proc_status_kib("VmHWM")
    start = time.perf_counter()
    result = run(code)
    seconds = time.perf_counter() - start
    rss1, hwm1 = proc_status_kib("VmRSS"), proc_status_kib("VmHWM")
    table.check(label, result)
    expected = mib * MIB
    note = "expected" if result.stdout_bytes == expected else f"expected {expected}"
    table.row(f"{label}: wall time", ms(seconds * 1000), f"{expected / MIB / seconds:.0f} MiB/s")
    table.row(f"{label}: stdout_bytes", str(result.stdout_bytes), note)
    kept = len(result.stdout.encode())
    table.row(f"{label}: truncated / kept", f"{result.stdout_truncated} / {kept}", "cap 1 MiB")
    table.row(f"{label}: VmRSS delta", f"{(rss1 - rss0) / 1024:.1f} MiB", f"now {rss1 / 1024:.0f}")
    table.row(f"{label}: VmHWM delta", f"{(hwm1 - hwm0) / 1024:.1f} MiB", f"peak {hwm1 / 1024:.0f}")
    if counter is not None:
        same = "= kept: it sees the capped view" if counter.chars == len(result.stdout) else ""
        table.row(f"{label}: on_stream chars", str(counter.chars), same)


IDLE_FLOOD = """
import threading
def flood():
    for i in range(16):
        display({{'text/plain': 'x' * (16 * 1024 * 1024 - 16384)}}, raw=True)
    open({done!r}, 'w').close()
threading.Thread(target=flood).start()
"""


def bench_idle_flood(table: Table, session: Session, box: Sandbox) -> None:
    """16 displays of 16 MiB from a thread the cell left running, while the host is idle: the
    host reads and drops them unparsed; what it costs in host memory."""
    done = box.workdir / "flooded"
    rss0, hwm0 = proc_status_kib("VmRSS"), proc_status_kib("VmHWM")
    start = time.perf_counter()
    session.execute(IDLE_FLOOD.format(done=str(done)))
    peak = rss0
    while not done.exists() and time.perf_counter() - start < 120:
        peak = max(peak, proc_status_kib("VmRSS"))
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    dropped = session.execute("pass").stderr
    table.row("256 MiB of displays between executions", ms(seconds * 1000), dropped.strip()[:24])
    table.row(
        "  host VmRSS peak delta", f"{(peak - rss0) / 1024:.1f} MiB", "read, dropped unparsed"
    )
    hwm = proc_status_kib("VmHWM")
    table.row("  host VmHWM delta", f"{(hwm - hwm0) / 1024:.1f} MiB", f"peak {hwm / 1024:.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="baseline and one-shot runs (20)")
    parser.add_argument("--quick", action="store_true", help="5 runs, 100 session runs, 10 MiB")
    args = parser.parse_args(argv)
    runs: int = args.runs or (5 if args.quick else 20)
    session_runs = 100 if args.quick else 500
    flood_mib = 10 if args.quick else 50

    print(f"python {sys.version.split()[0]} at {sys.executable}; runs={runs}\n")
    table = Table()
    argv_pass = [sys.executable, "-I", "-c", "pass"]
    baseline = percentile(timed(runs, lambda: subprocess.run(argv_pass, check=True)), 0.5)
    table.row("baseline: python -I -c pass p50", ms(baseline), "subprocess.run")

    start = time.perf_counter()
    box = create(timeout=120)
    table.row("create() (first worker launched)", ms((time.perf_counter() - start) * 1000))
    session: Session | None = None
    try:

        def print_one() -> None:
            table.check("print(1)", box.execute("print(1)"))

        print_one()  # warm-up: imports and the first spare worker
        for label, pause in (
            ("back-to-back", 0.0),
            (f"{SPACING_SECONDS * 1000:.0f} ms apart", SPACING_SECONDS),
        ):
            samples = timed(runs, print_one, pause)
            p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
            table.row(
                f"one-shot print(1), {label}: p50", ms(p50), f"{p50 / baseline:.2f}x (<= 1.5x)"
            )
            table.row(f"one-shot print(1), {label}: p99", ms(p99), f"{p99 / baseline:.2f}x")

        session = box.session()
        active = session

        def assign() -> None:
            table.check("x = 1", active.execute("x = 1"))

        timed(20, assign)
        samples = timed(session_runs, assign)
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        table.row(f"session x = 1 ({session_runs} runs): p50", ms(p50), "target < 1 ms")
        table.row(f"session x = 1 ({session_runs} runs): p99", ms(p99))

        bench_flood(table, f"one-shot {flood_mib} MiB", box.execute, flood_mib)
        counter = StreamCounter()
        bench_flood(
            table,
            f"session {flood_mib} MiB, on_stream",
            lambda code: active.execute(code, on_stream=counter),
            flood_mib,
            counter,
        )
        bench_idle_flood(table, active, box)
    finally:
        start = time.perf_counter()
        if session is not None:
            session.close()
        box.close()
        table.row("close() session and sandbox", ms((time.perf_counter() - start) * 1000))
    for failure in table.failures[:10]:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if table.failures else 0


if __name__ == "__main__":
    sys.exit(main())
