"""rewyn-kernel run: real notebooks on real sandbox kernels, through the real command."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from rewyn_kernel.kernel.record import METADATA_KEY, cell_record, set_cell_record
from rewyn_kernel.runtime import JsonlRunLog

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


def test_the_quickstart_runs_and_every_cell_keeps_its_record(tmp_path: Path) -> None:
    """A cell keeps a compact record of its latest execution (under 400 bytes: what the
    notebook has already, code and output, is not copied); the whole events go to the run
    log beside the output."""
    out = tmp_path / "quickstart.out.ipynb"
    done = run(str(ROOT / "notebooks" / "quickstart.ipynb"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "ok: 10 of 10 code cells run, 0 failed" in done.stdout
    nb = read(out)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    events = JsonlRunLog.read(tmp_path / "quickstart.out.events.jsonl")
    assert len(events) == len(code_cells) == 10
    for cell, event in zip(code_cells, events, strict=True):
        record = cell.metadata[METADATA_KEY]["record"]
        assert list(cell.metadata[METADATA_KEY]) == ["record"]
        assert record["ending"] == "completed"
        assert record["id"] == event.id
        assert event.code_hash.startswith(record["code_hash"])
        assert len(json.dumps(record)) < 400
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
    # The code writes in its notebook's folder: the file is published when the cell ends, and
    # while it runs it is in the cell's staging folder (where the test looks for it).
    second = "import time\nopen('second-cell-started', 'w').close()\ntime.sleep(60)"
    source = notebook(tmp_path / "long.ipynb", "print('first')", second)

    def staged() -> bool:
        return any((tmp_path / ".rewyn" / "staging").glob("long-*/cell-*/upper/second-cell-*"))

    out = tmp_path / "long.out.ipynb"
    command = [sys.executable, "-m", "rewyn_kernel.cli", "run", str(source), "-o", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not staged() and time.monotonic() < deadline:  # (the host's own files)
            time.sleep(0.05)
        assert staged()
        process.send_signal(signal.SIGINT)
        stdout, _ = process.communicate(timeout=30)  # (the cell would run 60 s)
    finally:  # (a run left behind would spill its warnings into the next test)
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert "INTERRUPTED" in stdout
    nb = read(out)
    assert nb.cells[0].outputs[0]["text"] == "first\n"
    assert nb.metadata[METADATA_KEY]["run"]["interrupted"]
    assert (tmp_path / "second-cell-started").exists()  # (what the cell wrote is kept)


def test_bad_settings_and_missing_files_fail_clearly(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2
    assert "no such notebook" in missing.stderr
    source = notebook(tmp_path / "ok.ipynb", "1")
    bad = run(str(source), "--network", "maybe")
    assert bad.returncode == 2
    assert "argument --network: network must be 'none' or 'allow'" in bad.stderr


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


def test_a_cell_keeps_its_latest_record_only() -> None:
    entry: dict[str, Any] = {}
    assert set_cell_record(entry, {"id": "1"})
    assert set_cell_record(entry, {"id": "2"})
    assert not set_cell_record(entry, {"id": "2"})  # the same reply seen twice
    assert entry == {"record": {"id": "2"}}


def test_a_malformed_cell_record_is_replaced() -> None:
    metadata = {METADATA_KEY: "garbage", "tags": ["x"]}
    cell = nbformat.v4.new_code_cell("pass", metadata=metadata)  # type: ignore[no-untyped-call]
    set_cell_record(cell_record(cell.metadata), {"id": "a"})
    assert cell.metadata == {METADATA_KEY: {"record": {"id": "a"}}, "tags": ["x"]}
