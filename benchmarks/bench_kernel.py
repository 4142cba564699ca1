"""Print figures for the sandbox kernel beside plain ipykernel (``python3``), one run each.

Never asserts on timings. Measures start to ready (``kernel_info_reply`` and a first iopub
message, as ``start_new_kernel`` waits for) and shutdown; trivial cells (``1``, ``print(1)``)
to reply and idle, and ``x = 1`` after ``import pandas, matplotlib.pyplot, scipy.stats`` (undo's
checkpoints on, the default); a widget's round trip (a slider moved in the frontend to its
callback's output); 50 MiB printed in 1 KiB lines (wall, stream bytes and messages, the kernel
process's VmRSS); interrupt of ``time.sleep(30)`` to the error reply, and survival after it.

    python -m benchmarks.bench_kernel            # 9 starts, 200 cells, 50 MiB, 5 interrupts
    python -m benchmarks.bench_kernel --quick    # 2 starts, 50 cells, 10 MiB, 2 interrupts
    python -m benchmarks.bench_kernel --runs 9   # kernel starts (interrupts: 3 to 5)
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import IO, Any
from unittest.mock import patch

import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

import rewyn_kernel

PLAIN, SANDBOX = "python3", "rewyn-bench-sandbox"
After = tuple[float, Callable[[], object]] | None
FLOOD = "for _ in range({lines}):\n    print('x' * 1023)"
NOTEBOOKS = tempfile.gettempdir()
"""Where each kernel gets a directory to start in (main makes it a temporary one)."""
IMPORTS = "import pandas, matplotlib.pyplot, scipy.stats"
PLOT = "plt.plot(range(100), [n * n for n in range(100)])\nplt.title('squares')\nplt.show()"


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``samples`` (``fraction`` in 0..1)."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))]


def proc_kib(pid: int, key: str) -> int:
    """Return a field of ``/proc/PID/status`` such as VmRSS or VmHWM, in KiB (0 if gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def children_kib(pid: int) -> int:
    """Return the summed VmRSS of every descendant of ``pid``, in KiB."""
    total, todo = 0, [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo.extend(kids := [int(k) for k in task.read_text().split()])
                total += sum(proc_kib(k, "VmRSS") for k in kids)
    return total


@dataclass
class Kernel:
    km: KernelManager
    kc: BlockingKernelClient
    ready_s: float  # to kernel_info_reply and a first iopub message
    started_s: float  # plus start_new_kernel's iopub flush (0.2 s of quiet)

    @property
    def pid(self) -> int:
        return int(getattr(self.km.provisioner, "pid", 0) or 0)

    def stop(self) -> float:
        """Shut the kernel down politely (and wait); return the seconds it took."""
        began = time.perf_counter()
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        return time.perf_counter() - began


def start(name: str, log: IO[str], timeout: float = 60) -> Kernel:
    """Do what ``start_new_kernel(kernel_name=name)`` does, timing when the kernel is ready."""
    began = time.perf_counter()
    km = KernelManager(kernel_name=name)
    # In a notebook directory of its own, as Jupyter starts a kernel (the sandbox kernel's
    # workspace).
    km.start_kernel(stderr=log, cwd=tempfile.mkdtemp(prefix="notebook-", dir=NOTEBOOKS))
    kc = km.client()
    kc.start_channels()
    kernel = Kernel(km, kc, 0.0, 0.0)
    try:
        while True:  # as KernelClient.wait_for_ready
            if time.perf_counter() - began > timeout or not km.is_alive():
                raise RuntimeError(f"kernel {name!r} not ready after {timeout} s (or died)")
            kc.kernel_info()
            try:
                if kc.get_shell_msg(timeout=1)["msg_type"] == "kernel_info_reply":
                    kc.get_iopub_msg(timeout=0.2)
                    break
            except Empty:
                continue
        kernel.ready_s = time.perf_counter() - began
        with contextlib.suppress(Empty):
            while True:  # start_new_kernel's flush: until iopub is quiet for 0.2 s
                kc.get_iopub_msg(timeout=0.2)
        kernel.started_s = time.perf_counter() - began
        return kernel
    except BaseException:
        kernel.stop()
        raise


@dataclass
class Cell:
    seconds: float = 0.0  # request to reply and idle
    reply_s: float = 0.0  # request to reply
    after_s: float = 0.0  # request to the ``after`` call
    reply: dict[str, Any] = field(default_factory=dict)
    stream_bytes: int = 0
    stream_msgs: int = 0
    text: str = ""  # what it printed (the first 4 KiB)


def execute(kc: BlockingKernelClient, code: str, timeout: float = 300, after: After = None) -> Cell:
    """Run ``code``, reading its iopub messages to idle and its reply; ``after=(s, call)``
    makes ``call`` from this thread s seconds in (sync jupyter_client calls from other threads
    leak event loops)."""
    shell, iopub, poller = kc.shell_channel.socket, kc.iopub_channel.socket, zmq.Poller()
    for socket in (shell, iopub):
        poller.register(socket, zmq.POLLIN)
    cell, idle, began, msg_id = Cell(), False, time.perf_counter(), kc.execute(code)
    while not (idle and cell.reply):
        now = time.perf_counter() - began
        if now > timeout:
            raise TimeoutError(f"no reply and idle within {timeout} s for {code[:40]!r}")
        if after is not None and now >= after[0]:
            after[1]()
            cell.after_s, after = time.perf_counter() - began, None
        wait = after[0] - now if after is not None else 1.0
        ready = dict(poller.poll(max(1, int(wait * 1000))))
        if shell in ready:
            reply = kc.get_shell_msg(timeout=0)
            if reply["parent_header"].get("msg_id") == msg_id:
                cell.reply, cell.reply_s = reply, time.perf_counter() - began
        if iopub in ready:
            msg = kc.get_iopub_msg(timeout=0)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                idle = idle or msg["content"]["execution_state"] == "idle"
            elif msg["msg_type"] == "stream":
                cell.stream_msgs += 1
                cell.stream_bytes += len(msg["content"]["text"])
                if len(cell.text) < 4096:
                    cell.text += msg["content"]["text"][:4096]
    cell.seconds = time.perf_counter() - began
    return cell


SLIDER = (
    "import ipywidgets\n"
    "_bench_slider = ipywidgets.IntSlider(max=10**6)\n"
    "_bench_slider.observe(lambda change: print(change['new']), 'value')\n"
    "print(_bench_slider.comm.comm_id)"
)


def slider_moved(kc: BlockingKernelClient, comm_id: str, value: int) -> float:
    """Seconds from a frontend's slider move (a comm_msg) to the callback's printed value."""
    state = {"value": value}
    content = {"comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}
    message = kc.session.msg("comm_msg", content)
    began = time.perf_counter()
    kc.shell_channel.send(message)
    printed = ""  # (ipykernel may send "5" and "\n" apart)
    while time.perf_counter() - began < 30:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Empty:
            continue
        ours = msg["parent_header"].get("msg_id") == message["header"]["msg_id"]
        if ours and msg["msg_type"] == "stream":
            printed += msg["content"]["text"]
        if ours and msg["msg_type"] == "stream" and printed == f"{value}\n":
            seconds = time.perf_counter() - began
            while not (
                ours and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
            ):
                msg = kc.get_iopub_msg(timeout=30)
                ours = msg["parent_header"].get("msg_id") == message["header"]["msg_id"]
            return seconds
    raise TimeoutError(f"the slider's callback did not print {value} within 30 s")


def status(kc: BlockingKernelClient, code: str) -> str:
    return str(execute(kc, code, timeout=30).reply["content"]["status"])


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def row(metric: str, pair: Sequence[Any], show: Callable[[Any], str] = str, **kw: str) -> None:
    """Print one aligned row (plain, sandbox, ratio sandbox/plain, target, note)."""
    plain, sandbox = pair
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)
    ratio = kw.get("ratio") or (f"{sandbox / plain:.2f}x" if numbers and plain > 0 else "-")
    cells = (metric, show(plain), show(sandbox), ratio, kw.get("target", ""), kw.get("note", ""))
    print("{:<30} {:>17} {:>17} {:>6}  {:<13} {}".format(*cells).rstrip(), flush=True)


def pcts(samples: Sequence[Sequence[float]], fraction: float = 0.5) -> list[float]:
    return [percentile(s, fraction) for s in samples]


def bench(starts: int, cells: int, flood_mib: int, interrupts: int, log: IO[str]) -> None:
    spec = KernelSpecManager().get_kernel_spec(PLAIN)
    print(f"plain kernelspec: {spec.resource_dir}, argv {spec.argv[:3]}")
    times: list[list[float]] = [[], [], [], [], [], []]  # ready, started, shutdown; per kernel
    for i in range(starts):
        for k, name in enumerate((PLAIN, SANDBOX)):  # alternated: drift hits both alike
            kernel = start(name, log)
            try:
                if i == 0 and name == PLAIN:
                    exe = os.readlink(f"/proc/{kernel.pid}/exe")
                    venv = exe == os.path.realpath(sys.executable)
                    print(f"plain kernel process runs {exe} (this venv's python: {venv})")
                times[k].append(kernel.ready_s)
                times[2 + k].append(kernel.started_s)
            finally:
                times[4 + k].append(kernel.stop())
    row("metric", ("plain", "sandbox"), ratio="ratio", target="target", note="note")
    print("-" * 30, "-" * 17, "-" * 17, "-" * 6, " " + "-" * 13, "-" * 24)
    note = f"p50 of {starts}"
    row("start to ready p50", pcts(times[0:2]), ms, target="<= 1.3x", note=note)
    row("start_new_kernel() p50", pcts(times[2:4]), ms, note="+ its 0.2 s iopub flush")
    row("shutdown_kernel() p50", pcts(times[4:6]), ms, note=note)
    both: list[Kernel] = []
    try:
        both.append(start(PLAIN, log))
        both.append(start(SANDBOX, log))
        for code in ("1", "print(1)"):
            times = [[], []]
            for i in range(cells + 10):  # 10 warm-ups each, interleaved
                for k, kernel in enumerate(both):
                    seconds = execute(kernel.kc, code).seconds
                    times[k].extend([seconds] if i >= 10 else [])
            target = "<= 1.0x" if code == "1" else ""
            row(f"cell {code!r} reply+idle p50", pcts(times), ms, target=target, note=f"of {cells}")
            if code == "1":
                row("cell '1' reply+idle p99", pcts(times, 0.99), ms)

        comms = [execute(kernel.kc, SLIDER).text.strip() for kernel in both]
        times = [[], []]
        for i in range(cells + 10):  # 10 warm-ups each, interleaved
            for k, kernel in enumerate(both):
                seconds = slider_moved(kernel.kc, comms[k], i + 1)  # (it starts at 0)
                times[k].extend([seconds] if i >= 10 else [])
        note = f"comm_msg to the callback's output, of {cells}"
        row("widget round trip p50", pcts(times), ms, target="<= 1.5x", note=note)

        for kernel in both:  # (the usual libraries, imported once: the process's mappings grow)
            assert status(kernel.kc, IMPORTS) == "ok", "pandas, matplotlib and scipy are needed"
        times = [[], []]
        for i in range(cells + 10):  # 10 warm-ups each, interleaved
            for k, kernel in enumerate(both):
                seconds = execute(kernel.kc, "x = 1").seconds
                times[k].extend([seconds] if i >= 10 else [])
        note = f"of {cells}, after {IMPORTS!r}, checkpoints on"
        row("cell 'x = 1' after imports p50", pcts(times), ms, target="<= 1.1x", note=note)

        records = [
            len(
                json.dumps(
                    execute(both[1].kc, code).reply["metadata"]["rewyn_kernel"]["record"],
                    separators=(",", ":"),
                )
            )
            for code in ("1", "print('hi')", "1 / 0", "for i in range(10**5): print(i)")
        ]
        row("record bytes per cell, max", ["-", max(records)], target="< 400", ratio="-")

        for kernel in both:  # (matplotlib's import, once, outside the figures)
            execute(kernel.kc, "import matplotlib.pyplot as plt\nplt.figure(); plt.show()")
        times = [[], []]
        for i in range(max(cells // 10, 5) + 2):
            for k, kernel in enumerate(both):
                cell = execute(kernel.kc, PLOT)
                times[k].extend([cell.seconds] if i >= 2 else [])
        row("640x480 plot cell p50", pcts(times), ms, target="<= 1.1x")

        before = [proc_kib(k.pid, "VmRSS") for k in both]
        floods = [execute(k.kc, FLOOD.format(lines=flood_mib * 1024)) for k in both]
        after = [proc_kib(k.pid, "VmRSS") for k in both]
        label = f"{flood_mib} MiB print:"
        row(f"{label} wall to idle", [c.seconds for c in floods], ms, target="<= 1.0x")
        note = "sandbox keeps 1 MiB/stream (head+tail, marker) by design"
        row(f"{label} stream bytes", [c.stream_bytes for c in floods], note=note)
        row(f"{label} stream msgs", [c.stream_msgs for c in floods])
        row(f"{label} reply", [c.reply["content"]["status"] for c in floods])
        row("kernel VmRSS before print", before, mib)
        row("kernel VmRSS after print", after, mib)
        growth = [a - b for a, b in zip(after, before, strict=True)]
        row("kernel VmRSS growth", growth, mib, target="< 20 MB (sbx)", ratio="-")
        row("kernel VmHWM (lifetime peak)", [proc_kib(k.pid, "VmHWM") for k in both], mib)
        row("child processes' VmRSS", [children_kib(k.pid) for k in both], mib)

        for kernel in both:
            execute(kernel.kc, "_bench_state = 41")
        times, enames, alive = [[], []], [set[str](), set[str]()], [True, True]
        for _ in range(interrupts):
            for k, kernel in enumerate(both):
                call = (0.5, kernel.km.interrupt_kernel)
                cell = execute(kernel.kc, "import time; time.sleep(30)", timeout=60, after=call)
                times[k].append(cell.reply_s - cell.after_s)
                enames[k].add(str(cell.reply["content"].get("ename", "(no error)")))
                alive[k] = alive[k] and kernel.km.is_alive() and status(kernel.kc, "1") == "ok"
        row("interrupt to error reply p50", pcts(times), ms, note=f"of {interrupts}")
        row("interrupt reply ename", [",".join(sorted(e)) for e in enames])
        row("alive, runs '1' after", ["yes" if a else "NO" for a in alive])
        kept = [status(k.kc, "_bench_state + 1") for k in both]
        row("state kept after interrupts", ["yes" if s == "ok" else "NO" for s in kept])
    finally:
        for kernel in both:
            kernel.stop()


@contextlib.contextmanager
def kernels_on_path(root: str) -> Iterator[IO[str]]:
    """Put ``root`` (where the caller wrote kernelspecs under ``kernels/``) first on
    JUPYTER_PATH and yield the log the kernels' stderr goes to; if the body fails, print the
    log's tail."""
    path = os.pathsep.join(p for p in (root, os.environ.get("JUPYTER_PATH")) if p)
    log = open(Path(root, "kernels.log"), "w+", encoding="utf-8")  # noqa: SIM115
    with log, patch.dict(os.environ, {"JUPYTER_PATH": path}):
        try:
            yield log
        except BaseException:
            log.seek(0)
            print("kernels' stderr (tail):\n" + log.read()[-3000:], file=sys.stderr)
            raise


def sandbox_spec(root: str, name: str, *flags: str) -> None:
    """Write the kernelspec ``name``: the sandbox kernel with ``flags``, as installed."""
    spec_dir = Path(root, "kernels", name)
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "rewyn_kernel", "-f", "{connection_file}", *flags]
    spec = {"argv": argv, "display_name": name, "language": "python", "interrupt_mode": "signal"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def compile_as_installed() -> None:
    """Compile the package's modules, as ``pip install`` leaves an installed package (and as
    ipykernel's are). This checkout may run with PYTHONDONTWRITEBYTECODE (tasks.py sets it),
    and a kernel start would then time Python compiling the package's source each time, which
    no installed kernel does."""
    package = Path(rewyn_kernel.__file__).parent
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit(f"could not compile {package}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="kernel starts (5; quick: 2)")
    parser.add_argument("--quick", action="store_true", help="fewer runs, 10 MiB printed")
    args = parser.parse_args(argv)
    compile_as_installed()
    starts = args.runs or (2 if args.quick else 9)
    interrupts = 2 if args.quick and args.runs is None else min(max(starts, 3), 5)
    global NOTEBOOKS
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-") as root:
        NOTEBOOKS = root
        sandbox_spec(root, SANDBOX)
        with kernels_on_path(root) as log:
            bench(starts, 50 if args.quick else 200, 10 if args.quick else 50, interrupts, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
