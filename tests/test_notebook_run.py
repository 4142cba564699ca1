"""rewyn-kernel run: real notebooks on real sandbox kernels, through the real command."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from rewyn_kernel.kernel.record import (
    CELL_EVENTS_KEPT,
    METADATA_KEY,
    append_cell_event,
    cell_record,
)

ROOT = Path(__file__).resolve().parent.parent


def notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]  # type: ignore[no-untyped-call]
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rewyn_kernel.cli", "run", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def read(path: Path) -> nbformat.NotebookNode:
    node: nbformat.NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    return node


def test_the_quickstart_runs_and_every_cell_keeps_its_event(tmp_path: Path) -> None:
    out = tmp_path / "quickstart.out.ipynb"
    done = run(str(ROOT / "notebooks" / "quickstart.ipynb"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "ok: 10 of 10 code cells run, 0 failed" in done.stdout
    nb = read(out)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code_cells:
        (event,) = cell.metadata[METADATA_KEY]["events"]
        assert event["type"] == "SANDBOX_EXECUTED"
        assert event["ending"] == "completed"
    summary = nb.metadata[METADATA_KEY]["run"]
    assert summary["counts"] == {"code_cells": 10, "executed": 10, "failed": 0}
    assert summary["versions"]["rewyn_kernel"]
    nbformat.validate(nb)


def test_a_failing_cell_stops_the_run_and_the_partial_notebook_is_kept(tmp_path: Path) -> None:
    source = notebook(tmp_path / "fails.ipynb", "x = 1", "1 / 0", "print('never')")
    done = run(str(source), "-o", str(tmp_path / "out.ipynb"), "--timeout", "5")
    assert done.returncode == 1
    assert "FAILED: 2 of 3 code cells run, 1 failed" in done.stdout
    nb = read(tmp_path / "out.ipynb")
    assert nb.cells[1].outputs[0]["ename"] == "ZeroDivisionError"
    assert METADATA_KEY not in nb.cells[2].metadata
    assert nb.metadata[METADATA_KEY]["run"]["failures"][0]["cell_index"] == 1
    assert nb.metadata[METADATA_KEY]["run"]["settings"]["timeout"] == 5


def test_allow_errors_runs_everything_and_exits_zero(tmp_path: Path) -> None:
    source = notebook(tmp_path / "fails.ipynb", "1 / 0", "print('after')")
    done = run(str(source), "--allow-errors")
    assert done.returncode == 0, done.stderr
    nb = read(tmp_path / "fails.out.ipynb")
    assert nb.cells[1].outputs[0]["text"] == "after\n"


def test_ctrl_c_keeps_what_ran(tmp_path: Path) -> None:
    started = tmp_path / "second-cell-started"
    second = f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(60)"
    source = notebook(tmp_path / "long.ipynb", "print('first')", second)
    out = tmp_path / "long.out.ipynb"
    command = [sys.executable, "-m", "rewyn_kernel.cli", "run", str(source), "-o", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:  # (the host's own files)
        time.sleep(0.05)
    assert started.exists()
    process.send_signal(signal.SIGINT)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "INTERRUPTED" in stdout
    nb = read(out)
    assert nb.cells[0].outputs[0]["text"] == "first\n"
    assert nb.metadata[METADATA_KEY]["run"]["interrupted"]


def test_bad_settings_and_missing_files_fail_clearly(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2
    assert "no such notebook" in missing.stderr
    source = notebook(tmp_path / "ok.ipynb", "1")
    bad = run(str(source), "--network", "maybe")
    assert bad.returncode == 2
    assert "invalid choice" in bad.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_example_notebook_runs_clean(tmp_path: Path, name: str) -> None:
    path = ROOT / "notebooks" / name
    if read(path).metadata["kernelspec"]["name"] != "python3":
        done = run(str(path), "-o", str(tmp_path / name))
        assert done.returncode == 0, done.stdout + done.stderr
        return
    # Notebooks about the magic and the runtime API run on the ordinary kernel, as users would.
    from nbclient import NotebookClient

    nb = read(path)
    resources = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, kernel_name="python3", timeout=300, resources=resources).execute()
    outputs = [o for cell in nb.cells for o in cell.get("outputs", [])]
    assert [o for o in outputs if o.get("output_type") == "error"] == []


def test_a_cell_tagged_raises_exception_is_not_a_failure(tmp_path: Path) -> None:
    path = notebook(tmp_path / "tagged.ipynb", "raise ValueError('expected')", "print('after')")
    nb = read(path)
    nb.cells[0].metadata["tags"] = ["raises-exception"]
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]
    done = run(str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: 2 of 2 code cells run, 0 failed" in done.stdout


def test_a_cell_keeps_its_latest_events_and_counts_the_rest() -> None:
    record: dict[str, Any] = {}
    for n in range(CELL_EVENTS_KEPT + 3):
        append_cell_event(record, {"id": str(n)})
    assert [e["id"] for e in record["events"]] == [str(n) for n in range(3, CELL_EVENTS_KEPT + 3)]
    assert record["events_dropped"] == 3
    append_cell_event(record, {"id": str(CELL_EVENTS_KEPT + 2)})  # the same reply seen twice
    assert len(record["events"]) == CELL_EVENTS_KEPT
    assert record["events_dropped"] == 3


def test_a_malformed_cell_record_starts_its_events_afresh() -> None:
    metadata = {METADATA_KEY: "garbage", "tags": ["x"]}
    cell = nbformat.v4.new_code_cell("pass", metadata=metadata)  # type: ignore[no-untyped-call]
    append_cell_event(cell_record(cell.metadata), {"id": "a"})
    assert cell.metadata == {METADATA_KEY: {"events": [{"id": "a"}]}, "tags": ["x"]}
    cell.metadata[METADATA_KEY]["events"] = "not a list"
    append_cell_event(cell_record(cell.metadata), {"id": "b"})
    assert cell.metadata[METADATA_KEY] == {"events": [{"id": "b"}]}
