"""End to end in a real browser: the extension keeps events in cell metadata; output is inert.

One ``jupyter lab`` server (with Notebook 7 beside it) and one headless Chromium per module; each
test opens its own notebook in JupyterLab and in Notebook 7, runs its cells on a real kernel,
saves through the page, and reads the .ipynb from disk.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Request

from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY
from rewyn_kernel.runtime import JsonlRunLog, create, local_provider
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import SandboxSpec
from tests.conftest import unavailable
from tests.jupyter_browser import (
    FRONTENDS,
    JupyterServer,
    chromium,
    current_notebook,
    jupyter_server,
    kernels_left,
    loaded_extensions,
    new_context,
    open_notebook,
    restart_kernel,
    run_all,
    run_cells,
    save,
    shoot,
    wait_for_records,
    wait_until,
    write_notebook,
)
from tests.kernel_client import write_spec

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

SANDBOX_KERNEL = "rewyn-browser"
PATIENT_KERNEL = "rewyn-browser-patient"
"""The same kernel with the default timeout, for cells that import pandas or matplotlib: on a
loaded machine (the suite runs on two processes) their first import can outlast 3 s."""
SANDBOX_DISPLAY_NAME = "Python (sandboxed)"
"""What JupyterLab calls the installed sandbox kernel (kernelspec/kernel.json)."""
OTHER_KERNEL = "forging"  # an IPython kernel whose replies carry made-up rewyn_kernel events
BUILT = Path(__file__).resolve().parent.parent / "rewyn_kernel" / "labextension"

VECTORS = ("script", "onerror", "javascript")


def attack(vector: str) -> str:
    """Script that records ``vector`` in window.pwned and calls the server's API, if it runs."""
    return (
        f"(window.pwned = window.pwned || []).push('{vector}'); "
        f"fetch('/api/contents?rewyn-pwned={vector}')"
    )


HOSTILE_HTML = (
    f'<b>kept</b><script>{attack("script")}</script><img src=x onerror="{attack("onerror")}">'
)
HOSTILE_JS = attack("javascript")
# No script at all: TeX that MathJax turns into a style whose background the browser fetches.
HOSTILE_MATH = "$\\style{background-image:url(/api/contents?rewyn-pwned=style)}{x}$"
# What a deny-list of TeX commands missed (issue 22): MathJax's \mmlToken sets any attribute,
# and its safe mode lets a cursor through, whose image the browser fetches as the pointer
# passes over the math (no click).
HOSTILE_TOKEN = '$\\mmlToken{{mi}}[style="cursor:url(/api/contents?rewyn-pwned={name}),auto"]{{x}}$'
TEX_VECTORS = ("latex_token", "markdown_token", "html_token")
SANDBOX_HOSTILE_CELL = (
    f"display({{'text/html': {HOSTILE_HTML!r}, 'text/plain': 'html'}}, raw=True)\n"
    f"display({{'application/javascript': {HOSTILE_JS!r}, 'text/plain': 'js'}}, raw=True)\n"
    f"display({{'text/markdown': {HOSTILE_MATH!r}, 'text/plain': 'math'}}, raw=True)\n"
    + "".join(
        f"display({{'text/{kind}': {HOSTILE_TOKEN.format(name=f'{kind}_token')!r}, "
        f"'text/plain': 'token'}}, raw=True)\n"
        for kind in ("latex", "markdown", "html")
    )
)
OTHER_HOSTILE_CELL = (
    "from IPython.display import HTML, Javascript, Latex, Markdown, display\n"
    f"display(HTML({HOSTILE_HTML!r}))\n"
    f"display(Javascript({HOSTILE_JS!r}))\n"
    f"display(Markdown({HOSTILE_MATH!r}))\n"
    f"display(Latex({HOSTILE_TOKEN.format(name='latex_token')!r}))\n"
    f"display(Markdown({HOSTILE_TOKEN.format(name='markdown_token')!r}))\n"
    f"display(HTML({HOSTILE_TOKEN.format(name='html_token')!r}))\n"
)

SANDBOX_CELLS = [
    ("markdown", "# Events in cell metadata"),
    ("code", "x = 21\nprint('hello from the sandbox')"),
    ("code", "print(x * 2)"),
    ("code", "print('y' * 100_000)"),
    ("code", SANDBOX_HOSTILE_CELL),
    ("code", "raise ValueError('boom')"),
    ("code", "import time\ntime.sleep(60)"),
]
FIRST, SECOND, FLOOD, HOSTILE, RAISES, SLEEPS = range(1, 7)
RUN_LOG = "run.jsonl"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    if importlib.util.find_spec("jupyterlab") is None:
        unavailable("JupyterLab is not installed: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("jupyter")
    root = work / "notebooks"
    root.mkdir()
    kernels = work / "kernels-path"
    # A short timeout and a small output cap, so one cell of each shows its badge quickly.
    write_spec(
        kernels,
        SANDBOX_KERNEL,
        [
            "--SandboxKernel.timeout=3",
            "--SandboxKernel.output_limit_bytes=4096",
            f"--SandboxKernel.run_log={work / RUN_LOG}",
        ],
    )
    write_spec(kernels, PATIENT_KERNEL, [f"--SandboxKernel.run_log={work / RUN_LOG}"])
    forging = kernels / "kernels" / OTHER_KERNEL
    forging.mkdir(parents=True)
    argv = [
        sys.executable,
        str(Path(__file__).with_name("forging_kernel.py")),
        "-f",
        "{connection_file}",
    ]
    spec = {"argv": argv, "display_name": "forging", "language": "python"}
    (forging / "kernel.json").write_text(json.dumps(spec))
    with jupyter_server(root, kernels, work) as running:
        yield running
    assert kernels_left(running.runtime_dir) == [], "a kernel outlived the server"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as running:
        yield running


def hover_outputs(page: Page) -> None:
    """Pass the pointer over every output of the notebook (a cursor image loads then)."""
    outputs = current_notebook(page).locator(".jp-OutputArea-output")
    for index in range(outputs.count()):
        outputs.nth(index).hover()
        page.wait_for_timeout(100)


class Watched:
    """A page and what it did: requests it sent, and errors of the application it logged."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        page.on("request", self._on_request)
        page.on("console", lambda message: self._on_console(message.type, message.text))

    def _on_request(self, request: Request) -> None:
        self.requests.append(request.url)

    def _on_console(self, kind: str, text: str) -> None:
        if kind == "error":
            self.console_errors.append(text)

    def pwned(self) -> list[str] | None:
        """The vectors whose script ran in the page (window.pwned), or None."""
        vectors: list[str] | None = self.page.evaluate("() => window.pwned")
        return vectors

    def hostile_requests(self) -> set[str]:
        """The vectors whose request the page sent."""
        return {m.group(1) for url in self.requests if (m := re.search(r"rewyn-pwned=(\w+)", url))}


@pytest.fixture
def page(browser: Browser, server: JupyterServer) -> Iterator[Watched]:
    context = new_context(browser)
    watched = Watched(context.new_page())
    yield watched
    context.close()
    for session in server.api("sessions"):  # leave no kernel running between tests
        server.api(f"sessions/{session['id']}", method="DELETE")


def start(
    server: JupyterServer,
    page: Watched,
    name: str,
    frontend: str = "lab",
    *,
    kernel: str = SANDBOX_KERNEL,
    cells: list[tuple[str, str]] = SANDBOX_CELLS,
) -> str:
    """Write the notebook ``name`` and open it; return its kernel's implementation."""
    write_notebook(server.root / name, kernel, cells)
    return open_notebook(page.page, server, frontend, name)


def saved_cells(server: JupyterServer, name: str) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads((server.root / name).read_text())["cells"]
    return cells


def event_outputs(cell: dict[str, Any]) -> list[dict[str, Any]]:
    return [o["data"][EVENT_MIME] for o in cell["outputs"] if EVENT_MIME in o.get("data", {})]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_events_are_saved_in_the_metadata_of_the_cells_that_ran(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"events-{frontend}.ipynb"
    assert start(server, page, name, frontend) == "rewyn-kernel"
    committed = json.loads((BUILT / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    assert loaded_extensions(page.page)["rewyn-kernel"].endswith(committed), "pip install -e ."

    run_cells(page.page, [FIRST, SECOND, FLOOD, HOSTILE, RAISES, SLEEPS, FIRST])
    wait_for_records(page.page, [0, 7, 2, 3, 4, 5, 6])
    save(page.page)

    cells = saved_cells(server, name)
    assert METADATA_KEY not in cells[0]["metadata"]  # markdown: nothing ran
    events = {event.id: event for event in JsonlRunLog.read(server.root.parent / RUN_LOG)}
    for cell in cells[1:]:
        entry = cell["metadata"][METADATA_KEY]
        assert set(entry) == {"record"}  # the shape `rewyn-kernel run` writes
        record = entry["record"]
        assert len(json.dumps(record, separators=(",", ":"))) <= 400
        # The whole event is in the run log, tied by its id and the code's hash.
        assert events[record["id"]].code_hash.startswith(record["code_hash"])
        assert events[record["id"]].execution_count == record["execution_count"]
        assert event_outputs(cell) == []  # (the event output is opt-in)

    def event(index: int) -> SandboxEvent:
        return events[cells[index]["metadata"][METADATA_KEY]["record"]["id"]]

    assert event(FIRST).stdout == "hello from the sandbox\n"
    assert event(FIRST).execution_count == 7  # the latest execution's record, replaced
    assert event(SECOND).stdout == "42\n"
    assert event(FLOOD).stdout_truncated is True
    assert cells[FLOOD]["metadata"][METADATA_KEY]["record"]["stdout_truncated"] is True
    assert event(RAISES).ending == "exception"
    assert event(SLEEPS).ending == "timeout"
    assert event(SLEEPS).timed_out is True


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_each_cell_that_ran_has_one_status_line(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    start(server, page, f"line-{frontend}.ipynb", frontend)
    run_cells(page.page, [FIRST, FLOOD, RAISES, SLEEPS])
    wait_for_records(page.page, [0, 1, 0, 2, 0, 3, 4])

    notebook = current_notebook(page.page)
    assert notebook.locator(".rewyn-Event").count() == 4
    statuses = notebook.locator(".rewyn-Event-status").all_inner_texts()
    assert statuses == ["ok", "ok", "error", "timed out"]
    # The kernel's provider is the local default (bubblewrap where it works, else subprocess):
    # where the network could not be cut, or the host's files are open, every line says so.
    local = local_provider()
    isolation = local.isolation(SandboxSpec())
    network = isolation.network
    every = ([] if network == "isolated" else ["network not isolated"]) + (
        ["host files open"] if isolation.files == "open" else []
    )
    assert notebook.locator(".rewyn-Event-badge").all_inner_texts() == [
        *every,
        *every,
        "output truncated (97.7 KiB printed)",
        *every,
        *every,  # (the timeout interrupted the sleep: the sandbox was not restarted)
    ]
    facts = notebook.locator(".rewyn-Event-facts").first.inner_text()
    assert facts.startswith("sandbox · exit 0 · ")
    where = f"{local.name}, network {network.replace('_', ' ')}"
    assert facts.endswith(f"{where}, files isolated" if isolation.files == "isolated" else where)
    # Drawn from the cells' metadata: there is no event output; the details open on a click.
    assert "sandbox: exit" not in notebook.inner_text()
    rows = notebook.locator(".rewyn-Event-rows").last
    assert not rows.is_visible()
    notebook.locator(".rewyn-Event-line").last.click()
    assert rows.is_visible()
    assert "timeout 3 s" in rows.inner_text()
    assert "message" in rows.inner_text()
    # The details' sizes are the cell's own (the record carries them).
    notebook.locator(".rewyn-Event-line").first.click()
    first = notebook.locator(".rewyn-Event-rows").first.inner_text()
    code, printed = SANDBOX_CELLS[FIRST][1], len("hello from the sandbox\n")
    assert f"stdout\n{printed} bytes" in first, first
    assert "stderr\n0 bytes" in first, first
    assert f"code\n{len(code.encode())} bytes, sha256 " in first, first
    flood = notebook.locator(".rewyn-Event-rows").nth(1)
    notebook.locator(".rewyn-Event-line").nth(1).click()
    assert "stdout\n97.7 KiB, truncated" in flood.inner_text(), flood.inner_text()
    assert page.console_errors == []
    if frontend == "lab":  # (the documentation's pictures: a line opened, a cell past its limit)
        # From the code to the status line (the undo note under it moves from run to run)
        ok, late = (notebook.locator(".jp-Cell").nth(index) for index in (FIRST, SLEEPS))
        shoot(page.page, "status-line", ok, ok.locator(".rewyn-Event"), to_last=True)
        shoot(page.page, "timeout-badge", late, late.locator(".rewyn-Event"), to_last=True)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_hostile_output_stays_inert_in_the_live_page_and_after_reopening(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"hostile-{frontend}.ipynb"
    start(server, page, name, frontend)
    run_cells(page.page, [HOSTILE])
    wait_for_records(page.page, [0, 0, 0, 0, 1, 0, 0])
    page.page.wait_for_timeout(1000)  # time for a handler or an image load to fire
    hover_outputs(page.page)
    page.page.wait_for_timeout(500)

    assert page.pwned() is None
    assert page.hostile_requests() == set()
    assert "kept" in current_notebook(page.page).locator(".jp-Cell").nth(HOSTILE).inner_text()

    save(page.page)  # saving signs the notebook as trusted: reopening must not replay anything
    open_notebook(page.page, server, frontend, name)
    page.page.wait_for_timeout(1000)
    hover_outputs(page.page)
    page.page.wait_for_timeout(500)
    assert page.pwned() is None
    assert page.hostile_requests() == set()
    outputs = saved_cells(server, name)[HOSTILE]["outputs"]
    assert all("application/javascript" not in output.get("data", {}) for output in outputs)
    for part in ("<script", "onerror", "window.pwned", "\\\\style", "rewyn-pwned=style"):
        assert part not in json.dumps(outputs)
    assert "mmlToken" not in json.dumps(outputs)
    # The math that styled itself was dropped by the kernel, its text/plain kept. (JupyterLab
    # 4.6's MathJax also strips \\style here, on any kernel: the control below shows no request.)
    plain = ["".join(output.get("data", {}).get("text/plain", "")) for output in outputs]
    assert "math" in plain
    assert plain.count("token") == 3  # (each kept its text/plain)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_on_another_kernel_the_same_output_runs_and_nothing_is_recorded(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    """The control: without the sandbox kernel the browser does run it (so the check above can
    fail), and the extension leaves other kernels' cells alone, even when their replies carry
    what looks like an event."""
    name = f"other-{frontend}.ipynb"
    cells = [("code", "print('other')"), ("code", OTHER_HOSTILE_CELL)]
    assert start(server, page, name, frontend, kernel=OTHER_KERNEL, cells=cells) == "ipython"
    run_cells(page.page, [0, 1])
    every_vector = f"() => (window.pwned || []).length >= {len(VECTORS)}"
    page.page.wait_for_function(every_vector, timeout=15_000)
    hover_outputs(page.page)
    wait_until(
        lambda: page.hostile_requests() == {*VECTORS, *TEX_VECTORS},
        5.0,
        lambda: f"requests from the attack vectors: {page.hostile_requests()}",
    )
    assert sorted(page.pwned() or []) == sorted(VECTORS)
    assert "style" not in page.hostile_requests()  # (MathJax's own safe mode, on this kernel)
    save(page.page)

    for cell in saved_cells(server, name):
        assert METADATA_KEY not in cell["metadata"]
        assert cell["execution_count"] is not None
    # Saving signed the notebook: reopened, its outputs run again (the sandbox's do not).
    page.requests.clear()
    open_notebook(page.page, server, frontend, name)
    page.page.wait_for_function(every_vector, timeout=15_000)
    hover_outputs(page.page)
    wait_until(
        lambda: page.hostile_requests() == {*VECTORS, *TEX_VECTORS},
        5.0,
        lambda: f"requests from the attack vectors: {page.hostile_requests()}",
    )


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_run_all_stops_at_an_error_and_recording_goes_on_after_a_restart(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"run-all-{frontend}.ipynb"
    # The kernel aborts the requests queued when the error happens (one arriving later runs):
    # the failing cell waits until Run All has sent them all.
    failing = "import time\ntime.sleep(1)\nraise ValueError('stop here')"
    cells = [("code", failing), ("code", "print(1)"), ("code", "print(2)")]
    start(server, page, name, frontend, cells=cells)

    run_all(page.page)  # the cells queued behind the error ran nothing: no records for them
    wait_for_records(page.page, [1, 0, 0])

    restart_kernel(page.page)
    runs = 5
    run_cells(page.page, [1] * runs)
    wait_for_records(page.page, [1, runs, 0])  # numbered afresh after the restart
    save(page.page)

    saved = saved_cells(server, name)
    assert saved[0]["metadata"][METADATA_KEY]["record"]["ending"] == "exception"
    assert saved[1]["metadata"][METADATA_KEY]["record"]["execution_count"] == runs
    assert METADATA_KEY not in saved[2]["metadata"]


CSS_VECTORS = ("css_import", "css_background", "css_inline")
"""What Chromium fetches of HOSTILE_CSS on any page (the control below shows it does)."""
HOSTILE_CSS = (
    "<style>@import url(/api/contents?rewyn-pwned=css_import);"
    "@font-face { font-family: leak; src: url(/api/contents?rewyn-pwned=css_font) }"
    ".probe td { font-family: leak;"
    " background-image: url(/api/contents?rewyn-pwned=css_background) }"
    ".probe th { background-image: image-set('/api/contents?rewyn-pwned=css_imageset' 1x) }"
    ".probe { cursor: url(/api/contents?rewyn-pwned=css_cursor), auto }"
    "div { outline: 3px solid rgb(1, 2, 3) }"
    "</style>"
    "<table class='probe'><tr><th>h</th><td>cell</td></tr></table><div>a div of its own</div>"
    "<span style='display: block; background: url(/api/contents?rewyn-pwned=css_inline)'>in</span>"
)
STYLED_CELL = (
    "import pandas as pd\n"
    "from IPython.display import HTML, display\n"
    "frame = pd.DataFrame({'a': [1.0, 2.5, 3.25], 'b': [7.0, 1.5, 0.125]})\n"
    "display(frame.style.highlight_max(color='yellow').format('{:.2f}'))\n"
    f"display(HTML({HOSTILE_CSS!r}))\n"
)
YELLOW = "rgb(255, 255, 0)"


def cell_background(page: Page, text: str) -> str:
    """The computed background colour of the table cell of the notebook that reads ``text``."""
    cell = current_notebook(page).locator("td", has_text=text).first
    colour: str = cell.evaluate("node => getComputedStyle(node).backgroundColor")
    return colour


def test_a_styled_table_shows_its_colours_and_its_css_fetches_nothing(
    server: JupyterServer, page: Watched
) -> None:
    """pandas' Styler through the sandbox kernel: its colours reach its own cells; a hostile
    stylesheet in the same cell fetches nothing and styles nothing outside its output."""
    cells = [("code", STYLED_CELL)]
    start(server, page, "styled.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0])
    wait_for_records(page.page, [1], endings=["completed"])
    hover_outputs(page.page)
    page.page.wait_for_timeout(1000)  # time for a stylesheet, font or image to load
    assert cell_background(page.page, "3.25") == YELLOW
    assert cell_background(page.page, "7.00") == YELLOW
    assert cell_background(page.page, "1.00") != YELLOW
    assert page.hostile_requests() == set()
    # Its rule for every div reaches the divs of its own output, and no other div of the page.
    outlined = page.page.evaluate(
        "() => [...document.querySelectorAll('div')].filter("
        "d => getComputedStyle(d).outlineColor === 'rgb(1, 2, 3)').map("
        "d => !!d.closest('.jp-OutputArea-output'))"
    )
    assert outlined
    assert all(outlined), outlined
    assert page.console_errors == []


def test_on_another_kernel_the_same_stylesheet_fetches(
    server: JupyterServer, page: Watched
) -> None:
    """The control: on an unsandboxed kernel the browser loads what the stylesheet names (so
    the check above can fail), and its rule styles the page's own divs."""
    cells = [("code", STYLED_CELL)]
    assert start(server, page, "styled-other.ipynb", "lab", kernel=OTHER_KERNEL, cells=cells)
    run_cells(page.page, [0])
    page.page.wait_for_function(
        "() => document.querySelectorAll('.jp-OutputArea-output table').length >= 2"
    )
    hover_outputs(page.page)
    wait_until(
        lambda: set(CSS_VECTORS) <= page.hostile_requests(),
        5.0,
        lambda: f"requests from the stylesheet: {page.hostile_requests()}",
    )
    assert cell_background(page.page, "3.25") == YELLOW
    outside = page.page.evaluate(
        "() => [...document.querySelectorAll('div')].some(d => "
        "getComputedStyle(d).outlineColor === 'rgb(1, 2, 3)' && !d.closest('.jp-OutputArea'))"
    )
    assert outside


PROGRESS_CELL = (
    "from tqdm.notebook import tqdm\nimport time\nfor _ in tqdm(range(20)):\n    time.sleep(0.02)"
)
INTERACT_CELL = (
    "import matplotlib.pyplot as plt\n"
    "from ipywidgets import interact\n"
    "@interact(n=(1, 10))\n"
    "def plot(n=3):\n"
    "    plt.plot(range(n)); plt.title(f'n={n}'); plt.show()\n"
    "    print('n is', n)\n"
)


def test_widgets_work_a_progress_bar_ends_full_and_a_slider_drives_a_plot(
    server: JupyterServer, page: Watched
) -> None:
    """tqdm's notebook bar and an ``interact`` plot through the sandbox kernel, in JupyterLab
    with ipywidgets' own extension: the slider's moves run the callback in the sandbox."""
    cells = [("code", PROGRESS_CELL), ("code", INTERACT_CELL)]
    start(server, page, "widgets.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0, 1])
    wait_for_records(page.page, [1, 2], endings=["completed", "completed"])
    notebook = current_notebook(page.page)
    bar = notebook.locator(".jp-Cell").nth(0).locator(".progress-bar")
    bar.wait_for(timeout=15_000)
    assert bar.evaluate("node => node.style.width") == "100%"
    assert "100%" in notebook.locator(".jp-Cell").nth(0).inner_text()

    widget = notebook.locator(".jp-Cell").nth(1)
    widget.get_by_text("n is 3").wait_for(timeout=15_000)
    assert widget.locator(".widget-output img").count() == 1
    handle = widget.locator(".noUi-handle").first
    handle.focus()
    handle.press("ArrowRight")
    widget.get_by_text("n is 4").wait_for(timeout=15_000)
    assert widget.locator(".widget-output img").count() == 1  # (the plot, drawn again)
    assert "n is 3" not in widget.inner_text()
    assert page.console_errors == []


HOSTILE_WIDGETS_CELL = (
    "import ipywidgets as w\n"
    "from IPython.display import display\n"
    f"script = {HOSTILE_HTML!r}\n"
    "style = '<style>*{background-image:url(/api/contents?rewyn-pwned=widget_style)}</style>'\n"
    "math = '$\\\\style{background:url(/api/contents?rewyn-pwned=widget_math)}{x}$'\n"
    "display(w.HTML(value=script + style), w.HTMLMath(value=math), w.Label(value=math))\n"
    "display(w.Checkbox(description=script, description_allow_html=True))\n"
    "display(w.Image(value=b'/api/contents?rewyn-pwned=widget_image', format='url'))\n"
    "display(w.Box([w.Label('boxed')], layout=w.Layout("
    "border='4px solid url(/api/contents?rewyn-pwned=widget_layout)')))\n"
)
WIDGET_VECTORS = ("onerror", "widget_style", "widget_image")
"""What the hostile widgets make any page run or fetch (the control below shows it; a
<script> put in with innerHTML never runs)."""


def test_a_hostile_widget_runs_nothing_and_fetches_nothing(
    server: JupyterServer, page: Watched
) -> None:
    cells = [("code", HOSTILE_WIDGETS_CELL)]
    start(server, page, "hostile-widgets.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0])
    wait_for_records(page.page, [1], endings=["completed"])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    cell.locator(".widget-label", has_text="boxed").wait_for(timeout=15_000)
    page.page.wait_for_timeout(1000)  # time for a handler, a stylesheet or an image to fire
    hover_outputs(page.page)
    page.page.wait_for_timeout(500)
    assert page.pwned() is None
    assert page.hostile_requests() == set()
    assert "kept" in cell.inner_text()  # (the HTML widget's harmless part shows)
    assert "load its value from a URL" in cell.inner_text()  # (the refused image, said)


def test_on_another_kernel_the_same_widgets_run_and_fetch(
    server: JupyterServer, page: Watched
) -> None:
    """The control: ipykernel relays the same widgets as they are, and the page runs their
    script and loads what they name."""
    cells = [("code", HOSTILE_WIDGETS_CELL)]
    start(server, page, "hostile-widgets-other.ipynb", "lab", kernel=OTHER_KERNEL, cells=cells)
    run_cells(page.page, [0])
    hover_outputs(page.page)
    wait_until(
        lambda: set(WIDGET_VECTORS) <= page.hostile_requests(),
        15.0,
        lambda: f"requests from the widgets: {page.hostile_requests()}",
    )


PLOTLY_CELL = (
    "import plotly.express as px\npx.bar(x=['a', 'b', 'c'], y=[1, 3, 2], title='three bars').show()"
)
ALTAIR_CELL = (
    "import altair as alt, pandas as pd\n"
    "alt.renderers.enable('mimetype')  # (JupyterLab's: Altair's default loads Vega from a CDN)\n"
    "frame = pd.DataFrame({'a': ['x', 'y', 'z'], 'b': [1, 3, 2]})\n"
    "alt.Chart(frame).mark_bar().encode(x='a', y='b', tooltip=['a', 'b']).interactive()"
)
HOSTILE_CHARTS_CELL = (
    "import plotly.graph_objects as go\n"
    "from IPython.display import display\n"
    "cursor = 'cursor:url(/api/contents?rewyn-pwned=plotly_cursor),auto'\n"
    "fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2], mode='markers+text',\n"
    "    text=[f'<span style=\"{cursor}\">hover me</span>'] * 2))\n"
    "fig.add_layout_image(source='/api/contents?rewyn-pwned=plotly_image', x=0, y=1,\n"
    "    sizex=1, sizey=1, xref='paper', yref='paper')\n"
    "fig.add_annotation(text='<a href=\"/api/contents?rewyn-pwned=plotly_link\">link</a>',\n"
    "    x=1.5, y=1.5)\n"
    "fig.show()\n"
    "spec = {'data': {'url': '/api/contents?rewyn-pwned=vega_data'}, 'mark': 'point',\n"
    "    'encoding': {'x': {'field': 'a', 'type': 'quantitative'}}}\n"
    "display({'application/vnd.vegalite.v5+json': spec, 'text/plain': 'vega'}, raw=True)\n"
)
CHART_VECTORS = ("plotly_image", "vega_data")
"""What the hostile charts make any page fetch on sight (the control below shows it)."""


def links_out(cell: Any) -> int:
    """Links (HTML's or SVG's, whose href plotly.js writes as xlink:href) to the hostile URL."""
    count: int = cell.evaluate(
        "node => [...node.querySelectorAll('a')].filter(a => (a.getAttribute('href') || "
        "a.getAttribute('xlink:href') || '').includes('rewyn-pwned')).length"
    )
    return count


def test_a_plotly_figure_and_an_altair_chart_are_drawn(
    server: JupyterServer, page: Watched
) -> None:
    """The sandbox's charts reach plotly.js (jupyterlab-plotly, from the plotly wheel) and
    vega-embed (JupyterLab's vega5 extension), which draw them."""
    cells = [("code", PLOTLY_CELL), ("code", ALTAIR_CELL)]
    start(server, page, "charts.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0, 1])
    wait_for_records(page.page, [1, 2], timeout=90, endings=["completed", "completed"])
    notebook = current_notebook(page.page)
    plot = notebook.locator(".jp-Cell").nth(0)
    plot.locator(".plot-container svg.main-svg").first.wait_for(timeout=30_000)
    assert plot.locator(".trace.bars g.point").count() == 3  # (its three bars)
    assert "three bars" in (plot.locator(".gtitle").text_content() or "")
    chart = notebook.locator(".jp-Cell").nth(1)
    chart.locator(".vega-embed canvas, .vega-embed svg.marks").first.wait_for(timeout=30_000)
    assert "rewyn: dropped" not in notebook.inner_text()
    assert page.hostile_requests() == set()


def test_a_hostile_chart_fetches_nothing_and_links_nowhere(
    server: JupyterServer, page: Watched
) -> None:
    cells = [("code", HOSTILE_CHARTS_CELL)]
    start(server, page, "hostile-charts.ipynb", "lab", kernel=PATIENT_KERNEL, cells=cells)
    run_cells(page.page, [0])
    wait_for_records(page.page, [1], timeout=90, endings=["completed"])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    cell.locator(".plot-container svg.main-svg").first.wait_for(timeout=30_000)
    page.page.wait_for_timeout(1000)  # time for an image or data to load
    hover_outputs(page.page)
    page.page.wait_for_timeout(500)
    assert page.hostile_requests() == set()
    # (plotly's drag layer covers its text, so no pointer rests on it: the style is checked)
    assert "hover me" in cell.inner_text()
    assert cell.locator("[style*='rewyn-pwned']").count() == 0
    assert links_out(cell) == 0  # (the annotation's link)
    assert "link" in (cell.locator(".annotation").text_content() or "")  # (its text kept)
    assert "remote data or an image" in cell.inner_text()  # (the refused spec, said)


def test_on_another_kernel_the_same_charts_fetch(server: JupyterServer, page: Watched) -> None:
    """The control: ipykernel relays the charts as they are; the page loads what they name."""
    cells = [("code", HOSTILE_CHARTS_CELL)]
    start(server, page, "hostile-charts-other.ipynb", "lab", kernel=OTHER_KERNEL, cells=cells)
    run_cells(page.page, [0])
    cell = current_notebook(page.page).locator(".jp-Cell").nth(0)
    cell.locator(".plot-container svg.main-svg").first.wait_for(timeout=60_000)
    # (vega-embed's chunk loads on first use, after plotly's: on 2 busy cores it took over 15 s)
    cell.locator(".vega-embed").first.wait_for(state="attached", timeout=60_000)
    wait_until(
        lambda: set(CHART_VECTORS) <= page.hostile_requests(),
        45.0,
        lambda: f"requests from the charts: {page.hostile_requests()}",
    )
    assert links_out(cell) >= 1
    assert cell.locator("[style*='rewyn-pwned']").count() >= 1


def test_a_hostile_event_output_renders_as_inert_text(server: JupyterServer, page: Watched) -> None:
    """The status line treats the saved event as untrusted: a notebook from anywhere can hold
    any JSON under the event's MIME type."""
    hostile = f'<img src=x onerror="{attack("event")}">'
    summary = {
        "ending": f"<script>{attack('ending')}</script>" + "E" * 5000,
        "provider": "P" * 5000,
        "exit_code": "0",
        "duration_ms": -1,
        "stdout_bytes": -5,
        "stdout_truncated": True,
        "message": hostile,
        "isolation": {"network": "isolated", "notes": [hostile] * 30 + [{"not": "text"}]},
        "spec": {"timeout": "<b>x</b>", "network": "none"},
    }
    output = {
        "output_type": "display_data",
        "data": {EVENT_MIME: summary, "text/plain": "sandbox: forged"},
        "metadata": {},
    }
    name = "hostile-event.ipynb"
    write_notebook(server.root / name, SANDBOX_KERNEL, [("code", "pass")], {0: [output]})
    open_notebook(page.page, server, "lab", name)

    line = current_notebook(page.page).locator(".rewyn-Event")
    assert line.count() == 1
    check_inert(page, line)

    # The same in a cell's metadata, where the status line under a cell reads it.
    name = "hostile-record.ipynb"
    metadata = {0: {METADATA_KEY: {"record": {"id": "forged", **summary}}}}
    write_notebook(server.root / name, SANDBOX_KERNEL, [("code", "pass")], metadata=metadata)
    open_notebook(page.page, server, "lab", name)
    line = current_notebook(page.page).locator(".rewyn-CellStatus .rewyn-Event")
    assert line.count() == 1
    check_inert(page, line)


def check_inert(page: Watched, line: Any) -> None:
    line.locator(".rewyn-Event-line").click()
    page.page.wait_for_timeout(500)
    assert page.pwned() is None
    assert page.hostile_requests() == set()
    shown = line.inner_text()
    assert "onerror=" in shown  # shown as text
    assert "exit ?" in shown
    assert "output truncated (0 bytes printed)" in shown
    assert line.locator("dt").all_inner_texts().count("note") == 10  # bounded
    width = line.evaluate("node => [node.scrollWidth, node.clientWidth]")
    assert width[0] <= width[1] + 1, f"the line overflows: {width}"


WORKSPACE_CELLS = [
    ("code", "_ = open('written-by-the-cell.csv', 'w').write('a,b\\n')"),
    ("code", "print(open('person.txt').read())"),
]


def test_a_file_a_cell_writes_appears_in_the_file_browser_and_the_persons_edit_is_read(
    server: JupyterServer, page: Watched
) -> None:
    """The code works in the notebook's folder, as on ipykernel: the file its cell writes is
    there when the cell ends (the file browser shows it, and the contents API serves it), and a
    file the person saves between two cells is what the second reads."""
    (server.root / "person.txt").write_text("first\n")
    name = "workspace-lab.ipynb"
    assert start(server, page, name, cells=WORKSPACE_CELLS) == "rewyn-kernel"
    run_cells(page.page, [0])
    wait_for_records(page.page, [1, 0])
    listed = page.page.locator(".jp-DirListing-itemText", has_text="written-by-the-cell.csv")
    wait_until(lambda: listed.count() == 1, 40, lambda: "the file browser does not list it")
    served = server.api("contents/written-by-the-cell.csv?content=1")
    assert served["content"] == "a,b\n"
    saved = {"type": "file", "format": "text", "content": "edited by the person\n"}
    server.api("contents/person.txt", method="PUT", body=saved)  # (as the editor saves)
    run_cells(page.page, [1])
    wait_for_records(page.page, [1, 2])
    save(page.page)
    cells = saved_cells(server, name)
    record = cells[1]["metadata"][METADATA_KEY]["record"]
    events = {event.id: event for event in JsonlRunLog.read(server.root.parent / RUN_LOG)}
    assert events[record["id"]].stdout == "edited by the person\n\n"
    assert cells[0]["metadata"][METADATA_KEY]["record"]["files"]["created"] == [
        "written-by-the-cell.csv"
    ]
    assert page.console_errors == []


# Open ``path`` and wait for what comes first: its kernel, or a dialog (Select Kernel).
_KERNEL_OR_DIALOG = """async (path) => {
  const app = window.jupyterapp;
  await app.restored;
  const deadline = Date.now() + 60000;
  const pause = () => new Promise(resolve => setTimeout(resolve, 100));
  const panel = () => app.shell.currentWidget;
  while (!(panel() && panel().context && panel().context.path === path)) {
    if (Date.now() > deadline) return 'the notebook did not open';
    await pause();
  }
  await panel().context.ready;
  while (Date.now() < deadline) {
    const dialog = document.querySelector('.jp-Dialog .jp-Dialog-header');
    if (dialog) return 'dialog: ' + dialog.textContent.trim();
    const kernel = panel().sessionContext.session && panel().sessionContext.session.kernel;
    if (kernel) {
      await new Promise(resolve => setTimeout(resolve, 1000));  // (and no dialog after it)
      const late = document.querySelector('.jp-Dialog .jp-Dialog-header');
      return late ? 'dialog: ' + late.textContent.trim() : 'kernel: ' + kernel.name;
    }
    await pause();
  }
  return 'neither a kernel nor a dialog in 60 s';
}"""


def test_a_review_opens_on_its_kernel_without_asking(
    server: JupyterServer, page: Watched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: JupyterLab asked "Select Kernel" for a review, which named a kernel that was
    not installed. A review names one that is (the run's, else the sandbox kernel); the same
    notebook naming the missing kernel brings the dialog up, as this test would see it."""
    from rewyn_kernel.cli import main as cli

    monkeypatch.chdir(tmp_path)  # (the review names the log as given: a short name, shown)
    log = Path("run.jsonl")
    with create(timeout=5, listeners=[JsonlRunLog(log)]) as box, box.session() as session:
        session.execute("print('reviewed')")
    assert cli(["review", str(log), "-o", str(server.root / "review.ipynb")]) == 0
    nb = json.loads((server.root / "review.ipynb").read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "rewyn-sandbox"

    page.page.goto(server.notebook_url("lab", "review.ipynb"))
    page.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    assert page.page.evaluate(_KERNEL_OR_DIALOG, "review.ipynb") == "kernel: rewyn-sandbox"
    notebook = current_notebook(page.page)
    notebook.locator(".jp-MarkdownOutput").first.wait_for(timeout=30_000)
    shoot(page.page, "review-notebook", notebook)

    nb["metadata"]["kernelspec"]["name"] = nb["metadata"][METADATA_KEY]["review"]["kernel"]
    (server.root / "missing.ipynb").write_text(json.dumps(nb))
    page.page.goto(server.notebook_url("lab", "missing.ipynb"))
    page.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    assert page.page.evaluate(_KERNEL_OR_DIALOG, "missing.ipynb") == "dialog: Select Kernel"
    # The kernel a person picks there: the sandbox kernel, by the name its kernelspec gives it.
    dialog = page.page.locator(".jp-Dialog-content")
    dialog.locator("select").select_option(label=SANDBOX_DISPLAY_NAME)
    shoot(page.page, "kernel-picker", dialog, pad=0)


UNDO_CELLS = [("code", "x = 1"), ("code", "x = 2"), ("code", "print('x is', x)")]
UNDO_LABEL = "Undo the last cell's changes to the state"
UNDONE = "its changes to the state were undone"


def test_the_undo_command_brings_back_the_variables_before_the_last_cell(
    server: JupyterServer, page: Watched
) -> None:
    """The Kernel menu's undo (its shortcut shown beside it) asks the sandbox kernel for an
    undo; the status line says when one is available, and that it was made."""
    assert start(server, page, "undo.ipynb", cells=UNDO_CELLS) == "rewyn-kernel"
    run_cells(page.page, [0])
    wait_for_records(page.page, [1, 0, 0])
    time.sleep(0.3)  # (a person's pace: cells sent at once share one checkpoint, test_undo)
    run_cells(page.page, [1])
    wait_for_records(page.page, [1, 2, 0])
    notes = current_notebook(page.page).locator(".rewyn-CellStatus-undo")

    def said() -> list[str]:
        return notes.all_inner_texts()

    def said_text() -> str:
        return str(said())

    wait_until(lambda: len(said()) == 1 and "undo available" in said()[0], 30, lambda: str(said()))
    under = "node => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]" + (
        ".filter(cell => cell.offsetParent).indexOf(node.closest('.jp-Cell'))"
    )
    assert notes.first.evaluate(under) == 1  # (under the cell an undo would undo)
    page.page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").click()
    item = page.page.locator(".lm-Menu-item", has_text=UNDO_LABEL)
    assert "Ctrl+Alt+Z" in item.inner_text()
    item.click()
    # (the kernel keeps 10 cells by default: the first cell's undo is there next)
    wait_until(
        lambda: len(said()) == 2 and said()[0].startswith("undo available") and said()[1] == UNDONE,
        30,
        said_text,
    )
    run_cells(page.page, [2])
    output = current_notebook(page.page).locator(".jp-OutputArea-output")
    wait_until(lambda: "x is 1" in " ".join(output.all_inner_texts()), 30, lambda: "no output")
    # The print ran after a checkpoint of its own: the shortcut undoes it, and says so.
    wait_until(lambda: len(said()) == 2, 30, lambda: str(said()))
    current_notebook(page.page).locator(".jp-Cell").nth(2).click()
    page.page.keyboard.press("Escape")
    page.page.keyboard.press("Control+Alt+z")
    toast = page.page.locator(".Toastify__toast", has_text="Undid cell")
    wait_until(lambda: toast.count() > 0, 30, lambda: "no note of the undo")
    assert "Files are not rolled back" in toast.first.inner_text()
    wait_until(lambda: said().count(UNDONE) == 2, 30, said_text)


BAD_LOOK_CELLS = [
    ("code", "data = [1, 2, 3]"),
    ("code", "data.clear() # the bad cell"),
    ("code", "print('data is', data)"),
]
UNDO_TO_LABEL = "Undo back to this cell"


def test_undo_back_to_a_cell_from_its_context_menu(server: JupyterServer, page: Watched) -> None:
    """The natural sequence on a kernel installed without flags: a bad cell, a cell to look at
    the damage, then "Undo back to this cell" on the bad cell (its context menu) brings back
    the state before it, names both cells, and is offered only on cells it can go back to."""
    assert start(server, page, "undo-to.ipynb", cells=BAD_LOOK_CELLS) == "rewyn-kernel"
    for index, records in enumerate(([1, 0, 0], [1, 2, 0], [1, 2, 3])):
        run_cells(page.page, [index])
        wait_for_records(page.page, records)
        time.sleep(0.3)  # (a person's pace: cells sent at once share one checkpoint, test_undo)
    notebook = current_notebook(page.page)
    output = notebook.locator(".jp-OutputArea-output")
    wait_until(lambda: "data is []" in " ".join(output.all_inner_texts()), 30, lambda: "no output")
    notes = notebook.locator(".rewyn-CellStatus-undo")
    wait_until(lambda: notes.count() == 1, 30, lambda: str(notes.all_inner_texts()))
    item = page.page.locator(".lm-Menu-item", has_text=UNDO_TO_LABEL)

    def menu_on(index: int) -> None:
        page.page.keyboard.press("Escape")
        notebook.locator(".jp-Cell").nth(index).locator(".jp-InputPrompt").click()
        notebook.locator(".jp-Cell").nth(index).locator(".jp-InputPrompt").click(button="right")
        page.page.locator(".lm-Menu").first.wait_for(timeout=10_000)

    menu_on(1)
    item.click()
    toast = page.page.locator(".Toastify__toast", has_text="Undid cell")
    wait_until(lambda: toast.count() > 0, 30, lambda: "no note of the undo")
    said = toast.first.inner_text()
    assert "Undid cell [2] `data.clear() # the bad cell` and cell [3]" in said, said
    assert "before cell [2] ran" in said, said
    wait_until(
        lambda: notes.all_inner_texts().count(UNDONE) == 2, 30, lambda: str(notes.all_inner_texts())
    )
    menu_on(2)  # (undone: the kernel no longer keeps the state before it)
    assert not item.first.is_visible()
    menu_on(0)  # (the state before the first cell is still kept)
    assert item.first.is_visible()
    page.page.keyboard.press("Escape")
    run_cells(page.page, [2])
    wait_until(
        lambda: "data is [1, 2, 3]" in " ".join(output.all_inner_texts()),
        30,
        lambda: str(output.all_inner_texts()),
    )


VERSIONS_CELLS = [
    ("code", "_ = open('results.csv', 'w').write('rewritten by the cell\\n')"),
    ("code", "%undo"),
]
RESTORE = re.compile(r"rewyn-kernel files (\S+) --restore (\S+)")


def test_an_undo_names_the_kept_version_of_the_file_a_cell_replaced(
    server: JupyterServer, page: Watched
) -> None:
    """A cell overwrites a file the person had; the undo under it says the files stay as the
    cell left them, and names the command that puts the person's version back, which does."""
    from rewyn_kernel.cli import main as cli

    results = server.root / "results.csv"
    results.write_text("the person's results\n")
    assert start(server, page, "versions.ipynb", cells=VERSIONS_CELLS) == "rewyn-kernel"
    run_cells(page.page, [0])
    wait_for_records(page.page, [1, 0])
    assert results.read_text() == "rewritten by the cell\n"
    notebook = current_notebook(page.page)
    notes = notebook.locator(".rewyn-CellStatus-undo")
    wait_until(
        lambda: "undo available" in " ".join(notes.all_inner_texts()),
        30,
        lambda: str(notes.all_inner_texts()),
    )
    run_cells(page.page, [1])
    cells = notebook.locator(".jp-Cell")
    output = cells.nth(1).locator(".jp-OutputArea-output")
    wait_until(lambda: "--restore" in " ".join(output.all_inner_texts()), 30, lambda: "no note")
    note = output.first.inner_text()
    assert "Cell [1] changed files in the workspace, which stay as it left them:" in note, note
    assert "changed: results.csv" in note, note
    found = RESTORE.search(note)
    assert found is not None, note
    assert Path(found.group(1)) == server.root
    shoot(page.page, "workspace-versions", cells.nth(0), cells.nth(1))
    assert cli(["files", found.group(1), "--restore", found.group(2)]) == 0
    assert results.read_text() == "the person's results\n"
