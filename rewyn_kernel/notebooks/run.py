"""``rewyn-kernel run``: execute a notebook headless on the sandbox kernel and keep the record.

Each cell keeps the compact record of its latest execution (from the execute_reply, which no
frontend saves) in ``cell.metadata["rewyn_kernel"]["record"]``; the whole SANDBOX_EXECUTED
events go to the run log (by default ``<output>.events.jsonl`` beside the output); the
notebook's metadata gets a summary of the run. The output file is rewritten after every cell,
so a failure or Ctrl-C leaves everything executed so far on disk.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from rewyn_kernel import __version__
from rewyn_kernel.kernel.kernelspec import KernelSettings, build_kernel_dict
from rewyn_kernel.kernel.record import METADATA_KEY, cell_record, reply_record, set_cell_record
from rewyn_kernel.runtime.printable import printable

RUN_KERNEL = "rewyn-run"


@dataclass
class RunSummary:
    """What ``run_notebook`` did, for the caller and for the notebook's metadata."""

    path: Path
    output: Path
    cells: int = 0
    executed: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    rows: list[tuple[int, str, int, float, str]] = field(default_factory=list)
    interrupted: bool = False
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted and not self.error


@contextlib.contextmanager
def _kernel_on_path(settings: KernelSettings, notebook: Path) -> Iterator[str]:
    """Write a kernelspec with ``settings`` to a temporary Jupyter path for the run, and name
    ``notebook`` to the kernel as JupyterLab does (``JPY_SESSION_NAME``: the notebook's folder is
    its workspace, its kept versions named after it)."""
    with tempfile.TemporaryDirectory(prefix="rewyn-run-") as root:
        spec_dir = Path(root) / "kernels" / RUN_KERNEL
        spec_dir.mkdir(parents=True)
        spec = build_kernel_dict(settings, python=sys.executable)
        (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
        previous = {name: os.environ.get(name) for name in ("JUPYTER_PATH", "JPY_SESSION_NAME")}
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [root, previous["JUPYTER_PATH"]]))
        os.environ["JPY_SESSION_NAME"] = str(notebook.resolve())
        try:
            yield RUN_KERNEL
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def events_log(output: Path) -> Path:
    """Where a run's whole events go when no run log is given: beside its output notebook."""
    return output.with_name(output.name.removesuffix(".ipynb") + ".events.jsonl")


def run_notebook(
    path: Path,
    output: Path | None = None,
    *,
    settings: KernelSettings | None = None,
    allow_errors: bool = False,
    progress: TextIO | None = None,
) -> RunSummary:
    """Execute ``path`` on a sandbox kernel with ``settings``; write the result to ``output``."""
    output = output or path.with_name(path.stem + ".out.ipynb")
    settings = settings or KernelSettings()
    values = settings.model_dump(exclude_unset=True)
    if settings.run_log is None:  # the whole events, beside the output
        values["run_log"] = events_log(output)
    # A run has nobody to undo a cell: no checkpoint before each (a fork each) unless asked.
    values.setdefault("checkpoints", 0)
    settings = KernelSettings.model_validate(values)
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    summary = RunSummary(path=path, output=output, cells=_code_cells(nb))
    started = datetime.now(timezone.utc)
    out = progress or sys.stderr

    def on_cell_executed(**kwargs: Any) -> None:
        cell, index, reply = kwargs["cell"], kwargs["cell_index"], kwargs["execute_reply"]
        summary.executed += 1
        event = reply_record(reply)
        status = reply["content"].get("status", "?")
        if event is not None:
            set_cell_record(cell_record(cell.metadata), event)
        ending = event["ending"] if event else status
        exit_code = event["exit_code"] if event else (0 if status == "ok" else 1)
        duration = event["duration_ms"] if event else 0.0
        message = (event or {}).get("message", "") or reply["content"].get("ename", "")
        summary.rows.append((index, ending, exit_code, duration, message))
        expected = "raises-exception" in cell.metadata.get("tags", [])  # as nbclient reads it
        if status != "ok" and not expected:
            summary.failed.append({"cell_index": index, "ending": ending, "message": message})
        mark = "ok " if status == "ok" else "ERR"
        print(
            f"[{summary.executed}/{summary.cells}] cell {index}: {mark} {ending} "
            f"exit={exit_code} {duration:,.0f} ms {printable(message[:60])}".rstrip(),
            file=out,
            flush=True,
        )
        _save(nb, summary, settings, started)  # this thread only, while the run goes on
        if summary.interrupted:
            raise _Stopped  # no further cells after a Ctrl-C, errors allowed or not

    # The sandbox enforces the cell timeout; nbclient's own is only a backstop.
    # (A whole number: nbclient 0.10.0 takes an Int.)
    backstop = None if settings.timeout is None else math.ceil(settings.timeout) + 60
    with _kernel_on_path(settings, path) as kernel_name:
        client = NotebookClient(
            nb,
            kernel_name=kernel_name,
            timeout=backstop,
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent.resolve())}},
            on_cell_executed=on_cell_executed,
        )

        finished = threading.Event()

        def execute() -> None:
            try:
                client.execute()
            except (CellExecutionError, _Stopped):
                pass  # recorded by on_cell_executed: the run stops at the first failing cell
            except Exception as exc:  # the kernel died, would not start, ...
                summary.error = f"{type(exc).__name__}: {exc}"
            finally:
                finished.set()

        # nbclient runs in a thread so that Ctrl-C reaches this one: it interrupts the cell
        # (the kernel passes that on to the sandbox), and the run ends there, recorded. Ctrl-C
        # is taken by a handler, not as KeyboardInterrupt: that is raised wherever this thread
        # happens to be (between two lines of the loop below, outside any try), and a run
        # that lost it went on to the end. The wait is on an Event: a KeyboardInterrupt
        # inside Thread.join can mark a thread that still runs as finished (CPython bpo-45274).
        def on_sigint(signum: int, frame: Any) -> None:
            summary.interrupted = True
            _interrupt_kernel(client)

        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, on_sigint) if main else None
        try:
            worker = threading.Thread(target=execute, name="rewyn-run")
            worker.start()
            while not finished.wait(0.2):
                pass
            worker.join()
        finally:
            if main and previous is not None:
                signal.signal(signal.SIGINT, previous)
        _save(nb, summary, settings, started)
    return summary


class _Stopped(Exception):
    """Raised from the cell hook to end a run that was interrupted."""


def _interrupt_kernel(client: NotebookClient) -> None:
    """Interrupt the running cell: SIGINT to the kernel, as jupyter_client's signal mode does."""
    pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)


def _code_cells(nb: Any) -> int:
    return sum(1 for cell in nb.cells if cell.cell_type == "code")


def _save(nb: Any, summary: RunSummary, settings: KernelSettings, started: datetime) -> None:
    """Write the notebook as it stands, atomically: a crash never leaves half a file."""
    nb.metadata[METADATA_KEY] = {
        "run": {
            "source": str(summary.path),
            "started_at": started.isoformat(),
            "finished_at": datetime.now(timezone.utc).isoformat(),
            "settings": settings.summary(),
            "versions": {"rewyn_kernel": __version__, "python": platform.python_version()},
            "counts": {
                "code_cells": summary.cells,
                "executed": summary.executed,
                "failed": len(summary.failed),
            },
            "failures": summary.failed,
            "interrupted": summary.interrupted,
            "error": summary.error,
        }
    }
    target = summary.output
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    nbformat.write(nb, partial)  # type: ignore[no-untyped-call]
    partial.replace(target)


def print_summary(summary: RunSummary, out: TextIO = sys.stdout) -> None:
    """A short table of the run: one row per executed cell, then the totals."""
    print(f"{'cell':>4}  {'ending':<14} {'exit':>4} {'ms':>9}  message", file=out)
    for index, ending, exit_code, duration, message in summary.rows:
        print(
            f"{index:>4}  {ending:<14} {exit_code:>4} {duration:>9,.0f}  {printable(message[:50])}",
            file=out,
        )
    state = "ok" if summary.ok else "FAILED"
    if summary.interrupted:
        state = "INTERRUPTED"
    print(
        f"{state}: {summary.executed} of {summary.cells} code cells run, "
        f"{len(summary.failed)} failed; wrote {summary.output}",
        file=out,
    )
    if summary.error:
        print(f"error: {printable(summary.error, lines=True)}", file=out)
