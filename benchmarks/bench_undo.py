"""Print what the kernel's undo checkpoints cost a cell, beside the same kernel without them and
plain ipykernel, in the same run.

Never asserts on timings. A trivial cell (``x += 1``), 40 times, back to back and 200 ms
apart (a person's pace: the next cell's checkpoint is taken while the last one's output is
read), median reply time through jupyter_client, on the installed ``rewyn-sandbox`` kernel
with ``--SandboxKernel.checkpoints`` 1 (the default) and 0, and on ``python3``.

    python -m benchmarks.bench_undo
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence

from jupyter_client.manager import start_new_kernel

CELLS = 40


def median_ms(name: str, extra: Sequence[str] = (), gap: float = 0.0) -> float:
    km, kc = start_new_kernel(kernel_name=name, extra_arguments=list(extra), cwd=tempfile.mkdtemp())
    try:
        kc.execute_interactive("x = 0", timeout=30)
        times = []
        for _ in range(CELLS):
            if gap:
                time.sleep(gap)  # (the pace of the cells: what is measured, not an ordering)
            started = time.perf_counter()
            kc.execute_interactive("x += 1", timeout=30, output_hook=lambda msg: None)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        return times[CELLS // 2]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> int:
    print(f"a trivial cell, median of {CELLS}:")
    for gap in (0.0, 0.2):
        plain = median_ms("python3", gap=gap)
        on = median_ms("rewyn-sandbox", gap=gap)
        off = median_ms("rewyn-sandbox", ["--SandboxKernel.checkpoints=0"], gap=gap)
        pace = "back to back" if not gap else f"{gap * 1000:.0f} ms apart"
        print(
            f"  {pace}: checkpoints on {on:.1f} ms ({on / plain:.2f}x), off {off:.1f} ms "
            f"({off / plain:.2f}x); python3 ipykernel {plain:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
