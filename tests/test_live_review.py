"""``rewyn-kernel review NOTEBOOK.ipynb`` of a notebook an agent and a person shared: who wrote
each cell and what the person did with each call, from the cells' metadata (hostile: shown as
plain text)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat

from rewyn_kernel.kernel.record import METADATA_KEY


def code_cell(source: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": f"cell-{abs(hash(source)) % 10**8}",
        "metadata": metadata or {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def agent_cell(source: str, **agent: Any) -> dict[str, Any]:
    record = agent.pop("record", None)
    entry: dict[str, Any] = {"agent": {"name": "claude", "call": "c" * 32, **agent}}
    if record is not None:
        entry["record"] = record
    return code_cell(source, {METADATA_KEY: entry})


def read(path: Path) -> dict[str, Any]:
    nb: dict[str, Any] = json.loads(path.read_text())
    nbformat.validate(nb)
    return nb


def sources(nb: dict[str, Any], *, notes: bool) -> list[str]:
    """The sources of the review's own cells (``notes``), or of the notebook's."""
    return [
        "".join(cell["source"])
        for cell in nb["cells"]
        if bool(cell["metadata"].get(METADATA_KEY, {}).get("live_review")) == notes
    ]


def shared_notebook(path: Path) -> None:
    cells = [
        code_cell("data = load()"),
        agent_cell("print(data)", state="done", record={"id": "r1", "ending": "completed"}),
        agent_cell(
            "print(data.head(20))",
            state="edited",
            risk="medium",
            reason="the code can read this user's files",
            code="print(data)",
            record={"id": "r2", "ending": "completed"},
        ),
        agent_cell("import shutil; shutil.rmtree('x')", state="rejected", note="not that folder"),
        agent_cell("print(1)", state="expired", risk="medium", reason="asked"),
        agent_cell(
            "x = 1",
            name='<img src=x onerror="alert(1)"> [link](http://198.51.100.1/) **bold**',
            state="rejected",
            note="![pic](http://198.51.100.1/p.png) <script>alert(2)</script>\n# heading",
        ),
        code_cell("x = 2", {METADATA_KEY: {"agent": "not a mark"}}),
    ]
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
    nbformat.validate(nb)
    path.write_text(json.dumps(nb))


def review(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rewyn_kernel.cli", "review", str(path), *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_review_says_who_wrote_each_cell_and_what_the_person_decided(tmp_path: Path) -> None:
    source = tmp_path / "shared.ipynb"
    shared_notebook(source)
    done = review(source)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "shared.review.ipynb"
    assert f"Wrote {out}" in done.stdout
    assert "person: 2 cells" in done.stdout
    assert "agent cells rejected: 2" in done.stdout
    nb = read(out)
    header = "".join(nb["cells"][0]["source"])
    assert "Cells by author:" in header
    assert "| 0 | code | person |" in header
    assert "| 2 | code | agent claude | edited by the person, then run | completed |" in header
    notes = sources(nb, notes=True)
    assert len(notes) == 1 + 5  # (the header, and one above each agent cell)
    notes = notes[1:]  # (past the header's table)
    edited = next(note for note in notes if "edited by the person" in note and "diff" in note)
    assert "-print(data)" in edited
    assert "+print(data.head(20))" in edited
    rejected = next(note for note in notes if "not that folder" in note)
    assert "rejected by the person" in rejected
    expired = next(note for note in notes if "not approved in time" in note)
    assert "Asked because: asked" in expired
    # Every original cell is kept, in order, with its metadata.
    assert sources(nb, notes=False) == sources(read(source), notes=False)
    assert nb["metadata"][METADATA_KEY]["live_review"]["agent_cells"] == {
        "done": 1,
        "edited": 1,
        "rejected": 2,
        "expired": 1,
    }


def test_hostile_names_and_notes_render_as_text(tmp_path: Path) -> None:
    source = tmp_path / "shared.ipynb"
    shared_notebook(source)
    assert review(source, "-o", str(tmp_path / "out.ipynb")).returncode == 0
    notes = sources(read(tmp_path / "out.ipynb"), notes=True)
    text = notes[0]
    hostile = next(note for note in notes[1:] if "198" in note and "note" in note)
    for markup in ("<img", "<script", "](http", "![", "**bold**", "\n# heading", "http://"):
        assert markup not in hostile, hostile
        assert markup not in text
    assert "&lt;script" in hostile


def test_a_review_notebook_or_a_non_notebook_is_refused_clearly(tmp_path: Path) -> None:
    made = tmp_path / "made.ipynb"
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {METADATA_KEY: {"review": {"kernel": "rewyn-sandbox"}}},
        "cells": [],
    }
    made.write_text(json.dumps(nb))
    refused = review(made)
    assert refused.returncode == 2
    assert "is a review notebook already (re-run it with --check)" in refused.stderr
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    refused = review(broken)
    assert refused.returncode == 2
    assert "not a notebook" in refused.stderr
