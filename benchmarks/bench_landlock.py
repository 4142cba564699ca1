"""Print the landlock provider's figures beside bubblewrap's, sandlock's and ipykernel's, one run.

Never asserts on timings. Every figure is printed with the baseline measured in the same run and
its ratio to it; the subjects of a figure are run in turn, round after round, so that drift hits
them alike. Measures (issue 37, "Figures"):

1. the baseline: a bare ``python -I -c 'print(1)'`` subprocess (this venv's python);
2. cold one-shots, each against that baseline: the same command under sandlock (Landlock +
   seccomp + seccomp-notify; it runs commands, it keeps no warm worker) with the filesystem
   policy the landlock provider applies (the same readable paths, a scratch folder writable, no
   network), and create + first ``execute("print(1)")`` + close for landlock and bubblewrap;
3. warm one-shots: ``box.execute("print(1)")`` on a sandbox created once (after warm-ups), and a
   session round trip ``session.execute("x = 1")``, landlock and bubblewrap, each against the
   baseline and landlock's against bubblewrap's;
4. a trivial kernel cell ``x = 1`` (request to reply and idle) on the sandbox kernel started with
   ``--SandboxKernel.provider=landlock`` in its kernelspec's argv (the cell's record must name
   landlock), against plain ipykernel (``python3``), after warm-ups.

Median and p90 of each. sandlock is optional (``pip install sandlock``, Linux 6.7+ with Landlock
ABI 6): where it cannot be imported or run, the benchmark says why and goes on.

    python -m benchmarks.bench_landlock            # 10 runs, 100 session runs, 50 cells
    python -m benchmarks.bench_landlock --quick    # 3 runs, 30 session runs, 20 cells
    python -m benchmarks.bench_landlock --runs 5   # runs of each one-shot figure
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from benchmarks import bench_kernel
from benchmarks.bench_runtime import percentile
from rewyn_kernel.runtime import BubblewrapProvider, create
from rewyn_kernel.runtime.providers.landlock import DEVICES, LandlockProvider
from rewyn_kernel.runtime.sandbox import (
    Sandbox,
    SandboxProvider,
    SandboxResult,
    SandboxSpec,
    Session,
)

PRINT_ONE = [sys.executable, "-I", "-c", "print(1)"]
LANDLOCK_KERNEL = "rewyn-bench-landlock"
WARM_UPS = 3


def checked(result: SandboxResult) -> None:
    if not result.ok:
        raise SystemExit(f"benchmark cell failed: {result.ending} {result.message}")


def bare() -> None:
    """The baseline: ``python -I -c 'print(1)'`` with nothing around it."""
    done = subprocess.run(PRINT_ONE, capture_output=True, check=True)
    if done.stdout != b"1\n":
        raise SystemExit(f"bare python printed {done.stdout!r}")


@dataclass
class Figure:
    """The samples of one subject, in ms."""

    label: str
    samples: list[float]
    short: str = ""
    """Its name in another figure's ratio."""

    @property
    def p50(self) -> float:
        return percentile(self.samples, 0.5)

    @property
    def p90(self) -> float:
        return percentile(self.samples, 0.9)


def header(title: str) -> None:
    print(f"\n{title}\n{'figure':<46} {'median':>10} {'p90':>10}  ratio of medians")
    print(f"{'-' * 46} {'-' * 10} {'-' * 10}  {'-' * 30}")


def row(figure: Figure, *baselines: Figure) -> None:
    ratios = ", ".join(
        f"{figure.p50 / b.p50:.2f}x {b.short or b.label}" for b in baselines if b.p50 > 0
    )
    line = f"{figure.label:<46} {figure.p50:>7.2f} ms {figure.p90:>7.2f} ms  {ratios}"
    print(line.rstrip(), flush=True)


def rounds(runs: int, subjects: dict[str, Callable[[], object]]) -> dict[str, Figure]:
    """Time each subject ``runs`` times, in turn round after round (ms)."""
    figures = {label: Figure(label, []) for label in subjects}
    for _ in range(runs):
        for label, call in subjects.items():
            start = time.perf_counter()
            call()
            figures[label].samples.append((time.perf_counter() - start) * 1000)
    return figures


def sandlock_run(scratch: str) -> tuple[Callable[[], None] | None, str]:
    """A call running ``python -I -c 'print(1)'`` under sandlock with the landlock provider's
    filesystem policy, and what it is; or None and why sandlock cannot run here."""
    try:
        import sandlock
    except ImportError as error:
        return None, f"sandlock is not installed ({error}): pip install sandlock"
    abi, needed = sandlock.landlock_abi_version(), sandlock.min_landlock_abi()
    if abi < needed:
        return None, f"sandlock {sandlock.__version__} needs Landlock ABI {needed}; here {abi}"
    # What the landlock provider lets a sandbox read (sandlock refuses a path that does not
    # exist), its device files, and a scratch folder as the one writable place, cwd and HOME.
    ours = LandlockProvider()._read(SandboxSpec())
    readable = [path for path in (*ours, *DEVICES) if os.path.exists(path)]
    box = sandlock.Sandbox(
        fs_readable=readable,
        fs_writable=[scratch],
        cwd=scratch,
        clean_env=True,
        env={"HOME": scratch, "TMPDIR": scratch, "PATH": "/usr/bin:/bin"},
    )

    def run() -> None:
        result = box.run(PRINT_ONE, timeout=60)
        if not result.success or result.stdout != b"1\n":
            raise RuntimeError(f"sandlock: {result}")

    try:
        run()
    except Exception as error:  # any failure: say why and go on
        return None, f"sandlock {sandlock.__version__} cannot run here: {error}"
    version = f"sandlock {sandlock.__version__}, Landlock ABI {abi}"
    return run, f"{version}; {len(readable)} readable paths, 1 writable, no network"


def cold(provider: SandboxProvider) -> Callable[[], None]:
    """create + first ``execute("print(1)")`` + close, on a fresh sandbox."""

    def run() -> None:
        box = create(SandboxSpec(timeout=60), provider=provider)
        try:
            checked(box.execute("print(1)"))
        finally:
            box.close()

    return run


def one_shot(box: Sandbox) -> Callable[[], object]:
    return lambda: checked(box.execute("print(1)"))


def assign(session: Session) -> Callable[[], object]:
    return lambda: checked(session.execute("x = 1"))


def bench_providers(runs: int, session_runs: int) -> None:
    providers: dict[str, SandboxProvider] = {
        "landlock": LandlockProvider(),
        "bubblewrap": BubblewrapProvider(),
    }
    for name, provider in providers.items():
        if not provider.available:
            raise SystemExit(f"{name} cannot run here")
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-sandlock-") as scratch:
        sandlock, about = sandlock_run(scratch)
        print(f"sandlock: {about}")
        subjects: dict[str, Callable[[], object]] = {"bare python -I -c print(1)": bare}
        if sandlock is not None:
            subjects["sandlock: python -I -c print(1)"] = sandlock
        for name, provider in providers.items():
            subjects[f"{name}: create+print(1)+close"] = cold(provider)
        rounds(1, subjects)  # warm-up: page cache, imports
        figures = rounds(runs, subjects)
    baseline = figures.pop("bare python -I -c print(1)")
    baseline.short = "bare"
    header(f"Cold one-shot print(1), {runs} runs each, in turn; baseline: bare python")
    row(baseline)
    if sandlock is None:
        print(f"{'sandlock: python -I -c print(1)':<46} {'-':>10} {'-':>10}  not run: {about}")
    for figure in figures.values():
        row(figure, baseline)

    boxes = {name: create(SandboxSpec(timeout=60), provider=p) for name, p in providers.items()}
    try:
        sessions = {name: box.session() for name, box in boxes.items()}
        one_shots: dict[str, Callable[[], object]] = {"bare": bare}
        one_shots.update({name: one_shot(box) for name, box in boxes.items()})
        assigns = {name: assign(session) for name, session in sessions.items()}
        rounds(WARM_UPS, one_shots)
        warm = rounds(runs, one_shots)
        rounds(WARM_UPS * 5, assigns)
        assigned = rounds(session_runs, assigns)
    finally:
        for box in boxes.values():
            box.close()
    bare_warm = warm.pop("bare")
    bare_warm.label, bare_warm.short = "bare python -I -c print(1)", "bare"
    header(
        f"Warm sandbox ({runs} one-shots, {session_runs} session runs, in turn, after "
        "warm-ups); baseline: bare python, measured beside them"
    )
    row(bare_warm)
    for name in ("bubblewrap", "landlock"):
        warm[name].label = f"{name}: warm box.execute('print(1)')"
        warm[name].short = name
    row(warm["bubblewrap"], bare_warm)
    row(warm["landlock"], bare_warm, warm["bubblewrap"])
    for name in ("bubblewrap", "landlock"):
        assigned[name].label = f"{name}: session.execute('x = 1')"
        assigned[name].short = name
    row(assigned["bubblewrap"], bare_warm)
    row(assigned["landlock"], bare_warm, assigned["bubblewrap"])


def bench_cell(cells: int, log: IO[str]) -> None:
    """``x = 1`` to reply and idle, plain ipykernel against the landlock sandbox kernel."""
    kernels: list[bench_kernel.Kernel] = []
    try:
        kernels.append(bench_kernel.start(bench_kernel.PLAIN, log))
        kernels.append(bench_kernel.start(LANDLOCK_KERNEL, log))
        reply = bench_kernel.execute(kernels[1].kc, "x = 1").reply
        record = reply["metadata"].get("rewyn_kernel", {}).get("record", {})
        ran = record.get("provider")
        print(f"sandbox kernel: --SandboxKernel.provider=landlock; its cell record: {ran!r}")
        if ran != "landlock":
            raise SystemExit(f"the sandbox kernel ran {ran!r}, not landlock")
        figures = [
            Figure("ipykernel: cell 'x = 1' reply+idle", [], "ipykernel"),
            Figure("landlock kernel: cell 'x = 1' reply+idle", []),
        ]
        for i in range(cells + 10):  # 10 warm-ups each, in turn
            for figure, kernel in zip(figures, kernels, strict=True):
                seconds = bench_kernel.execute(kernel.kc, "x = 1").seconds
                figure.samples.extend([seconds * 1000] if i >= 10 else [])
    finally:
        for kernel in kernels:
            kernel.stop()
    header(f"Kernel cell, {cells} each, in turn, after 10 warm-ups; baseline: plain ipykernel")
    row(figures[0])
    row(figures[1], figures[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="one-shot runs per figure (10)")
    parser.add_argument("--quick", action="store_true", help="3 runs, 30 session runs, 20 cells")
    args = parser.parse_args(argv)
    runs: int = args.runs or (3 if args.quick else 10)
    session_runs, cells = (30, 20) if args.quick else (100, 50)
    print(f"python {sys.version.split()[0]} at {sys.executable}; runs={runs}, uid {os.getuid()}")
    bench_providers(runs, session_runs)
    bench_kernel.compile_as_installed()
    where = subprocess.run(  # the package the kernel imports, run from a notebook's directory
        [sys.executable, "-c", "import rewyn_kernel; print(rewyn_kernel.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    print(f"\nthe kernels import {where}")
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-") as root:
        bench_kernel.NOTEBOOKS = root
        bench_kernel.sandbox_spec(root, LANDLOCK_KERNEL, "--SandboxKernel.provider=landlock")
        with bench_kernel.kernels_on_path(root) as log:
            bench_cell(cells, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
