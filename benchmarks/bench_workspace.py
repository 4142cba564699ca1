"""Print what the workspace costs (issue 23), beside plain ipykernel (``python3``) in the same run.

Never asserts on timings. Three kernels, each started in a notebook folder of its own: plain
ipykernel, the sandbox kernel with the notebook's folder as its workspace (the default), and
the sandbox kernel without one (``--no-notebook-workspace``), all on the default provider.

- a cell that writes nothing (``x = 1``): reply and idle, the median of N; the workspace's
  cost per cell is the difference of the two sandbox kernels (a fresh view and an empty
  publication after each cell);
- a cell that writes a 1 GiB file in 8 MiB writes, against the same cell on ipykernel (each
  run starts after ``sync``: the disk's writeback of the last one would count otherwise);
- a cell that writes 10,000 files of 100 bytes, against ipykernel; and the publication of
  10,000 such files alone (``Workspace.publish`` of an upper folder on the host, timed).

    python -m benchmarks.bench_workspace            # 200 trivial cells, 5 runs of each write
    python -m benchmarks.bench_workspace --quick    # 50 trivial cells, 1 run of each write
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from benchmarks.bench_kernel import (
    Kernel,
    compile_as_installed,
    execute,
    kernels_on_path,
    sandbox_spec,
    start,
)
from rewyn_kernel.runtime.host.workspace import Workspace

PLAIN, WORKSPACE, NONE = "python3", "rewyn-bench-workspace", "rewyn-bench-no-workspace"
GIB = (
    "with open('big.bin', 'wb') as f:\n"
    "    chunk = b'x' * (8 << 20)\n"
    "    for _ in range(128):\n"
    "        f.write(chunk)"
)
MANY = (
    "import os\nos.makedirs('many', exist_ok=True)\n"
    "for i in range(10_000):\n"
    "    with open(f'many/{i}.txt', 'w') as f:\n"
    "        f.write('x' * 100)"
)


def folder_of(kernel: Kernel) -> Path:
    """The notebook folder the kernel was started in (its workspace)."""
    launched = kernel.km._launch_args or {}
    return Path(str(launched["cwd"]))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def trivial(kernel: Kernel, cells: int) -> float:
    for _ in range(5):
        execute(kernel.kc, "x = 1")  # (warm: IPython's first cells, the first view)
    return statistics.median(execute(kernel.kc, "x = 1").seconds for _ in range(cells))


def writes(kernels: dict[str, Kernel], code: str, runs: int, leftover: str) -> dict[str, float]:
    """The median seconds of ``code``'s cell on each kernel, the kernels taking turns run by
    run (the disk's state drifts: each kernel meets the same); what it wrote is removed
    between runs (from the host, as the person would, where it is in the notebook's folder)."""
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(runs):
        for name, kernel in kernels.items():
            os.sync()  # (each starts with nothing of the last one's still being written back)
            cell = execute(kernel.kc, code, timeout=600)
            status = cell.reply["content"]["status"]
            if status != "ok":
                raise RuntimeError(f"{code[:30]!r}: {status} {cell.reply['content']}")
            times[name].append(cell.seconds)
            remove(kernel, leftover)
    return {name: statistics.median(found) for name, found in times.items()}


def remove(kernel: Kernel, leftover: str) -> None:
    target = folder_of(kernel) / leftover
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    else:  # (no workspace: in the sandbox's scratch directory; removed there)
        execute(
            kernel.kc,
            f"import shutil\nshutil.rmtree({leftover!r}, True)\n"
            f"import os\nos.path.isfile({leftover!r}) and os.remove({leftover!r})",
        )
    os.sync()


def publication_alone(root: Path, files: int) -> float:
    """Seconds to publish ``files`` new files of 100 bytes from an upper folder (host side)."""
    workspace = Workspace(root)
    upper = workspace.prepare(None) / "bench" / "upper"
    (upper / "many").mkdir(parents=True)
    for index in range(files):
        (upper / "many" / f"{index}.txt").write_text("x" * 100)
    began = time.perf_counter()
    changes = workspace.publish(upper, label="bench")
    took = time.perf_counter() - began
    if changes.counts["created"] != files:
        raise RuntimeError(f"published {changes.counts}, expected {files} files")
    return took


def bench(cells: int, runs: int, log: IO[str]) -> None:
    kernels = {name: start(name, log) for name in (PLAIN, WORKSPACE, NONE)}
    try:
        print(f"{'cell':<44}{'ipykernel':>12}{'workspace':>12}{'none':>12}  ratio")
        row = {name: trivial(kernel, cells) for name, kernel in kernels.items()}
        cost = row[WORKSPACE] - row[NONE]
        print(
            f"{f'x = 1 (median of {cells})':<44}{ms(row[PLAIN]):>12}{ms(row[WORKSPACE]):>12}"
            f"{ms(row[NONE]):>12}  workspace's cost per cell: {cost * 1000:+.2f} ms"
        )
        for label, code, leftover in (
            ("1 GiB written (8 MiB writes)", GIB, "big.bin"),
            ("10,000 files of 100 bytes", MANY, "many"),
        ):
            row = writes(kernels, code, runs, leftover)
            print(
                f"{f'{label} (median of {runs})':<44}{ms(row[PLAIN]):>12}"
                f"{ms(row[WORKSPACE]):>12}{ms(row[NONE]):>12}  "
                f"{row[WORKSPACE] / row[PLAIN]:.2f}x ipykernel"
            )
    finally:
        for kernel in kernels.values():
            kernel.stop()
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-publish-") as root:
        took = publication_alone(Path(root), 10_000)
    print(f"publication alone: 10,000 files of 100 bytes in {ms(took)} (host side)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="50 trivial cells, 1 run each")
    args = parser.parse_args(argv)
    compile_as_installed()
    import benchmarks.bench_kernel as kernels

    with tempfile.TemporaryDirectory(prefix="rewyn-bench-", dir="/var/tmp") as root:
        kernels.NOTEBOOKS = root  # (each kernel's notebook folder: a disk, not a tmpfs)
        sandbox_spec(root, WORKSPACE)
        sandbox_spec(root, NONE, "--SandboxKernel.notebook_workspace=False")
        with kernels_on_path(root) as log:
            bench(50 if args.quick else 200, 1 if args.quick else 5, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
