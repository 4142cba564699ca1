"""papermill runs keep each cell's record too: the real papermill, its ``rewyn`` engine found
through the entry point, on a real sandbox kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import papermill

from rewyn_kernel.kernel.record import METADATA_KEY

from .kernel_client import write_spec


def test_the_rewyn_engine_keeps_each_cells_record(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    parameters = nbformat.v4.new_code_cell("n = 1")  # type: ignore[no-untyped-call]
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [parameters, nbformat.v4.new_code_cell("print(n * 42)")]  # type: ignore[no-untyped-call]
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)  # type: ignore[no-untyped-call]
    write_spec(tmp_path / "jupyter", "rewyn-papermill")
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(tmp_path / "jupyter")
    try:
        papermill.execute_notebook(
            str(source),
            str(output),
            parameters={"n": 2},
            kernel_name="rewyn-papermill",
            engine_name="rewyn",
            language="python",
            cwd=str(tmp_path),
        )
    finally:
        if previous is None:
            os.environ.pop("JUPYTER_PATH")
        else:
            os.environ["JUPYTER_PATH"] = previous
    cells = json.loads(output.read_text())["cells"]
    ran = [cell for cell in cells if cell["cell_type"] == "code"]
    assert "".join(ran[-1]["outputs"][0]["text"]) == "84\n"
    records = [cell["metadata"][METADATA_KEY]["record"] for cell in ran]
    assert [record["ending"] for record in records] == ["completed"] * len(ran)
    assert len({record["id"] for record in records}) == len(ran)
