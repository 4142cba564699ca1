"""Print figures for ``rewyn-kernel mcp`` beside the same work in-process, one run each.

Never asserts on timings. Measures the ``1+1`` round trip of ``run_python`` over stdio (the
SDK's client against the real server process) against ``session.execute("1+1")`` in this
process on the same provider; a trivial tool (``list_sessions``) over stdio, which is the
protocol's own share; and the server's memory with 20 sessions open (its own VmRSS, and its
sandboxes' processes).

    python -m benchmarks.bench_mcp            # 300 calls each
    python -m benchmarks.bench_mcp --quick    # 60 calls, 5 sessions
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from benchmarks.bench_kernel import children_kib, percentile, proc_kib
from rewyn_kernel.runtime.sandbox import create


def ms(samples: Sequence[float], fraction: float) -> str:
    return f"{percentile(samples, fraction) * 1000:.2f} ms"


def in_process(calls: int) -> list[float]:
    times = []
    with create() as box, box.session() as session:
        session.execute("1+1")
        for _ in range(calls + 10):
            started = time.perf_counter()
            session.execute("1+1")
            times.append(time.perf_counter() - started)
    return times[10:]


@dataclass
class Served:
    run: list[float] = field(default_factory=list)  # run_python 1+1
    protocol: list[float] = field(default_factory=list)  # list_sessions
    rss_one: int = 0  # KiB, the server with one session
    rss_all: int = 0  # with every session
    sandboxes: int = 0  # KiB, the sandboxes' processes


async def over_stdio(calls: int, sessions: int, run_log: Path) -> Served:
    args = ["-m", "rewyn_kernel.cli", "mcp", "--run-log", str(run_log), "--max-sessions"]
    params = StdioServerParameters(
        command=sys.executable, args=[*args, str(sessions + 1)], env=dict(os.environ)
    )
    served = Served()
    async with Client(params) as client:
        await client.call_tool("run_python", {"code": "1+1"})
        for times, tool, arguments in (
            (served.run, "run_python", {"code": "1+1"}),
            (served.protocol, "list_sessions", {}),
        ):
            for i in range(calls + 10):
                started = time.perf_counter()
                await client.call_tool(tool, arguments)
                if i >= 10:
                    times.append(time.perf_counter() - started)
        pid = pid_of_server()
        served.rss_one = proc_kib(pid, "VmRSS")
        for n in range(sessions - 1):
            await client.call_tool("run_python", {"code": "1+1", "session": f"s{n}"})
        served.rss_all, served.sandboxes = proc_kib(pid, "VmRSS"), children_kib(pid)
    return served


def pid_of_server() -> int:
    """The server process's pid: this process's child running ``rewyn_kernel.cli mcp``."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and b"rewyn_kernel.cli" in cmdline and b"mcp" in cmdline:
                return int(entry.name)
    raise RuntimeError("the server process was not found")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="60 calls, 5 sessions")
    args = parser.parse_args(argv)
    calls, sessions = (60, 5) if args.quick else (300, 20)
    baseline = in_process(calls)
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-mcp-") as root:
        figures = anyio.run(over_stdio, calls, sessions, Path(root, "run.jsonl"))
    served, protocol = figures.run, figures.protocol
    print(f"{'metric':<44} {'p50':>10} {'p99':>10}  note")
    print(
        f"{'in-process session.execute(1+1)':<44} {ms(baseline, 0.5):>10} {ms(baseline, 0.99):>10}"
    )
    print(
        f"{'MCP stdio run_python 1+1 (round trip)':<44} {ms(served, 0.5):>10} "
        f"{ms(served, 0.99):>10}  target < 3 ms; "
        f"{percentile(served, 0.5) / percentile(baseline, 0.5):.2f}x in-process"
    )
    print(
        f"{'MCP stdio list_sessions (the protocol alone)':<44} {ms(protocol, 0.5):>10} "
        f"{ms(protocol, 0.99):>10}"
    )
    before, after, children = figures.rss_one, figures.rss_all, figures.sandboxes
    print(
        f"server VmRSS: {before / 1024:.1f} MiB with 1 session, {after / 1024:.1f} MiB with "
        f"{sessions} (+{(after - before) / 1024 / max(sessions - 1, 1):.2f} MiB per session); "
        f"its sandboxes' processes: {children / 1024:.1f} MiB ({children / 1024 / sessions:.1f} "
        "MiB per session)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
