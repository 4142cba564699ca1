"""ipympl's interactive figures from the sandbox in JupyterLab (headless Chromium), and hostile
figure and widget models that fetch and run nothing.

The fixtures and helpers are ``test_browser``'s (its own server, with ipympl's, anywidget's and
bqplot's extensions where they are installed, and a browser).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import test_browser
from tests.jupyter_browser import (
    JupyterServer,
    current_notebook,
    loaded_extensions,
    run_cells,
    wait_for_records,
    wait_until,
)
from tests.test_browser import OTHER_KERNEL, PATIENT_KERNEL, Watched, attack, hover_outputs, start

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]
server = test_browser.server  # (the fixtures, by name: a server and a browser of this module's)
browser = test_browser.browser
page = test_browser.page
pytest.importorskip("ipympl", reason="ipympl is a test dependency: pip install -e '.[dev]'")

FIGURE_CELL = (
    "%matplotlib widget\n"
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(4, 3))\n"
    "ax.plot([0, 10], [0, 10], linewidth=6)\n"
)
ESM = f"export default {{ render({{ el }}) {{ {attack('anywidget')}; }} }}"
"""An anywidget's module: script the page imports and runs as it renders the widget."""
HOSTILE_FIGURES_CELL = (
    "%matplotlib widget\n"
    "import matplotlib.pyplot as plt\n"
    "from comm import create_comm\n"
    "fig, ax = plt.subplots(figsize=(3, 2))\n"
    "fig.canvas._cursor = 'url(/api/contents?rewyn-pwned=mpl_cursor), auto'\n"
    "version = fig.canvas._model_module_version\n"
    "state = {'_model_module': 'jupyter-matplotlib', '_model_module_version': version,\n"
    "    '_model_name': 'MPLCanvasModel', '_view_module': 'jupyter-matplotlib',\n"
    "    '_view_module_version': version, '_view_name': 'MPLCanvasView', '_size': [50, 50],\n"
    "    '_data_url': '/api/contents?rewyn-pwned=mpl_data_url'}\n"
    "evil = create_comm(target_name='jupyter.widget',\n"
    "    data={'state': state, 'buffer_paths': []}, metadata={'version': '2.1.0'})\n"
    "try:\n"
    "    import anywidget, traitlets\n"
    "    class Evil(anywidget.AnyWidget):\n"
    f"        _esm = {ESM!r}\n"
    "    display(Evil())\n"
    "except ImportError:\n"
    "    pass\n"
    "print('made')\n"
)
FIGURE_VECTORS = ("mpl_data_url",)
"""What the hostile figure makes any page fetch on sight (the control shows it); the cursor's
image loads only where the pointer rests on the figure, which the tests do too."""

INKED = """canvas => {
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0;
  for (let i = 0; i < data.length; i += 4) if (data[i + 3] > 0 && data[i] < 128) inked++;
  return inked;
}"""
"""Pixels of a canvas drawn dark (the plotted line), as the page shows them."""


def figure(cell: Any) -> Any:
    return cell.locator(".jupyter-matplotlib-figure").first


def test_an_ipympl_figure_is_drawn_and_answers_the_pointer_and_a_zoom(
    server: JupyterServer, page: Watched
) -> None:
    """``%matplotlib widget`` in the sandbox: JupyterLab (with ipympl's extension) draws the
    frames the sandbox's matplotlib sends; the pointer's position comes back in the footer,
    and a zoom with the toolbar redraws the figure (events to the sandbox, frames back)."""
    cells = [("code", FIGURE_CELL)]
    start(server, page, "ipympl.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    assert "jupyter-matplotlib" in loaded_extensions(page.page)
    run_cells(page.page, [0])
    wait_for_records(page.page, [1], timeout=90, endings=["completed"])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    shown = figure(cell)
    shown.wait_for(timeout=30_000)
    canvas = shown.locator("canvas").first
    wait_until(
        lambda: canvas.evaluate(INKED) > 200,
        30.0,
        lambda: f"the figure's canvas is blank: {canvas.evaluate(INKED)} inked pixels",
    )
    before = canvas.evaluate("c => c.toDataURL()")

    top = shown.locator("canvas").nth(1)
    box = top.bounding_box()
    assert box is not None
    page.page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    footer = shown.locator(".jupyter-matplotlib-footer")
    wait_until(
        lambda: "x=" in (footer.text_content() or "") or "(x, y)" in (footer.text_content() or ""),
        15.0,
        lambda: f"footer: {footer.text_content()!r}",
    )

    shown.hover()
    cell.locator("button:has(.fa-square-o)").click()  # (the toolbar's zoom)
    page.page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.3)
    page.page.mouse.down()
    page.page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5, steps=5)
    page.page.mouse.up()
    wait_until(
        lambda: canvas.evaluate("c => c.toDataURL()") != before,
        30.0,
        lambda: "the figure was not redrawn after the zoom",
    )
    assert "rewyn: not shown" not in cell.inner_text()
    assert page.hostile_requests() == set()


def test_a_hostile_figure_and_an_anywidget_fetch_nothing_and_run_nothing(
    server: JupyterServer, page: Watched
) -> None:
    cells = [("code", HOSTILE_FIGURES_CELL)]
    start(server, page, "hostile-figures.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0])
    wait_for_records(page.page, [1], timeout=90, endings=["completed"])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    cell.get_by_text("made", exact=True).wait_for(timeout=30_000)
    figure(cell).wait_for(timeout=30_000)  # (the figure itself is drawn)
    page.page.wait_for_timeout(1000)  # time for an image or a module to load
    hover_outputs(page.page)
    figure(cell).locator("canvas").nth(1).hover()
    page.page.wait_for_timeout(500)
    assert page.pwned() is None
    assert page.hostile_requests() == set()
    said = cell.inner_text()
    assert "'_cursor'" in said, said
    assert "_esm" in said, said  # (the anywidget, named, and why)


def test_on_another_kernel_the_same_figures_fetch_and_run(
    server: JupyterServer, page: Watched
) -> None:
    """The control: ipykernel relays the same models as they are; the page loads the figure's
    image URL and runs the anywidget's module."""
    cells = [("code", HOSTILE_FIGURES_CELL)]
    start(server, page, "hostile-figures-other.ipynb", "lab", kernel=OTHER_KERNEL, cells=cells)
    run_cells(page.page, [0])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    figure(cell).wait_for(timeout=60_000)
    figure(cell).locator("canvas").nth(1).hover()
    vectors = {*FIGURE_VECTORS, "mpl_cursor", "anywidget"}
    wait_until(
        lambda: vectors <= page.hostile_requests(),
        20.0,
        lambda: f"requests from the figures: {page.hostile_requests()}",
    )
    assert "anywidget" in (page.pwned() or [])
