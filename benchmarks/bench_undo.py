"""Print what the kernel's undo checkpoints cost a cell, in time and memory, with the default
(10 cells back), with the former default (1) and without them, beside plain ipykernel, in the
same run.

Never asserts on timings. Each kernel is this checkout's (kernelspecs written to a temporary
JUPYTER_PATH, started with this interpreter), on the default provider.

- time: a trivial cell (``x += 1``), 40 times, back to back and 200 ms apart (a person's pace:
  the next cell's checkpoint is taken while the last one's output is read); the median reply
  time through jupyter_client.
- memory: the proportional set size (PSS: a page shared by N processes counts 1/N) of the
  kernel's whole process tree (the kernel, the sandbox's supervisor, the code's process and
  its checkpoints), after 40 trivial cells, and after 12 cells that each rewrite a 16 MiB
  array in place (the worst case for a copy-on-write checkpoint: each keeps its own copy of
  the pages the next cell wrote, until the memory watch drops it).

    python -m benchmarks.bench_undo
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from rewyn_kernel.kernel.kernelspec import LAUNCH

CELLS = 40
REWRITES = 12
ARRAY = "import numpy\na = numpy.zeros((16 << 20) // 8)"
REWRITE = "a += 1"
KERNELS = {
    "ipykernel": None,
    "checkpoints 10 (default)": [],
    "checkpoints 1 (before)": ["--SandboxKernel.checkpoints=1"],
    "checkpoints 0 (off)": ["--SandboxKernel.checkpoints=0"],
}


def write_specs(root: Path) -> None:
    for index, flags in enumerate(KERNELS.values()):
        spec_dir = root / "kernels" / f"bench-undo-{index}"
        spec_dir.mkdir(parents=True)
        if flags is None:
            argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        else:
            argv = [sys.executable, *LAUNCH, "-f", "{connection_file}", *flags]
        spec = {"argv": argv, "display_name": "bench", "language": "python"}
        (spec_dir / "kernel.json").write_text(json.dumps(spec))


@contextmanager
def kernel(index: int) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    km, kc = start_new_kernel(
        kernel_name=f"bench-undo-{index}", startup_timeout=120, cwd=tempfile.mkdtemp()
    )
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc: BlockingKernelClient, code: str) -> None:
    reply = kc.execute_interactive(code, timeout=60, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise SystemExit(f"the benchmark's cell failed: {code!r}: {reply['content']}")


def median_ms(kc: BlockingKernelClient, gap: float) -> float:
    run(kc, "x = 0")
    times = []
    for _ in range(CELLS):
        if gap:
            time.sleep(gap)  # (the pace of the cells: what is measured, not an ordering)
        started = time.perf_counter()
        run(kc, "x += 1")
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[CELLS // 2]


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def pss_mib(km: KernelManager) -> float:
    """The PSS of the kernel's process tree, in MiB."""
    provisioner = km.provisioner
    process = getattr(provisioner, "process", None)
    if process is None:
        raise SystemExit("the kernel's process is not known (not a local provisioner)")
    total = 0
    for pid in tree(int(process.pid)):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # (gone meanwhile, or not readable: counted as nothing)
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total / 1024


def settle() -> None:
    time.sleep(1.0)  # (the last cell's checkpoint is made after it ends: measured once made)


def figures(index: int) -> dict[str, float]:
    got: dict[str, float] = {}
    with kernel(index) as (km, kc):
        for gap in (0.0, 0.2):
            got[f"time {gap}"] = median_ms(kc, gap)
        settle()
        got["memory trivial"] = pss_mib(km)
        run(kc, ARRAY)
        for _ in range(REWRITES):
            time.sleep(0.2)
            run(kc, REWRITE)
        settle()
        got["memory rewrites"] = pss_mib(km)
    return got


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-undo-"))
    write_specs(root)
    os.environ["JUPYTER_PATH"] = str(root)
    results = {name: figures(index) for index, name in enumerate(KERNELS)}
    plain = results["ipykernel"]
    print(f"a trivial cell, median of {CELLS} (ratio: against ipykernel in this run):")
    for gap in (0.0, 0.2):
        pace = "back to back" if not gap else f"{gap * 1000:.0f} ms apart"
        print(f"  {pace}:")
        for name, got in results.items():
            ms = got[f"time {gap}"]
            print(f"    {name:26} {ms:7.1f} ms  {ms / plain[f'time {gap}']:5.2f}x")
    print("memory of the kernel's process tree (PSS):")
    for key, what in (
        ("memory trivial", f"after {CELLS * 2 + 1} trivial cells"),
        ("memory rewrites", f"after {REWRITES} cells each rewriting 16 MiB"),
    ):
        print(f"  {what}:")
        for name, got in results.items():
            mib = got[key]
            print(f"    {name:26} {mib:7.1f} MiB  {mib / plain[key]:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
