"""End to end in a real browser: the extension keeps events in cell metadata; output is inert.

One ``jupyter lab`` server (with Notebook 7 beside it) and one headless Chromium per module; each
test opens its own notebook in JupyterLab and in Notebook 7, runs its cells on a real kernel,
saves through the page, and reads the .ipynb from disk.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Request, sync_playwright

from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY
from rewyn_kernel.runtime.events import SandboxEvent
from tests.conftest import unavailable
from tests.jupyter_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FRONTENDS,
    JupyterServer,
    current_notebook,
    jupyter_server,
    kernels_left,
    open_notebook,
    run_cells,
    save,
    wait_for_event_counts,
    write_notebook,
)
from tests.kernel_client import write_spec

pytestmark = pytest.mark.slow

SANDBOX_KERNEL = "rewyn-browser"
PLAIN_KERNEL = "python3"

# Each part would set window.pwned and call the server's API if the browser ran it.
HOSTILE_HTML = (
    "<b>kept</b><script>window.pwned = 'script'; fetch('/api/contents?rewyn-pwned=script')</script>"
    "<img src=x onerror=\"window.pwned = 'onerror'; fetch('/api/contents?rewyn-pwned=onerror')\">"
)
HOSTILE_JS = "window.pwned = 'javascript'; fetch('/api/contents?rewyn-pwned=javascript')"
HOSTILE_SVG = (
    "<svg xmlns='http://www.w3.org/2000/svg' onload=\"window.pwned = 'svg'\">"
    "<script>fetch('/api/contents?rewyn-pwned=svg')</script></svg>"
)
SANDBOX_HOSTILE_CELL = (
    f"display({{'text/html': {HOSTILE_HTML!r}, 'text/plain': 'html'}}, raw=True)\n"
    f"display({{'application/javascript': {HOSTILE_JS!r}, 'text/plain': 'js'}}, raw=True)\n"
    f"display({{'image/svg+xml': {HOSTILE_SVG!r}}}, raw=True)\n"
)
PLAIN_HOSTILE_CELL = (
    "from IPython.display import HTML, SVG, Javascript, display\n"
    f"display(HTML({HOSTILE_HTML!r}))\n"
    f"display(Javascript({HOSTILE_JS!r}))\n"
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
        ["--SandboxKernel.timeout=3", "--SandboxKernel.output_limit_bytes=4096"],
    )
    with jupyter_server(root, kernels, work) as running:
        yield running
    assert kernels_left(running.runtime_dir) == [], "a kernel outlived the server"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is missing: run scripts/browser.sh (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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

    def pwned(self) -> Any:
        return self.page.evaluate("() => window.pwned")

    def hostile_requests(self) -> list[str]:
        return [url for url in self.requests if "rewyn-pwned" in url]


@pytest.fixture
def page(browser: Browser, server: JupyterServer) -> Iterator[Watched]:
    context = browser.new_context()
    watched = Watched(context.new_page())
    yield watched
    context.close()
    for session in server.api("sessions"):  # leave no kernel running between tests
        server.api(f"sessions/{session['id']}", method="DELETE")


def saved_cells(server: JupyterServer, name: str) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads((server.root / name).read_text())["cells"]
    return cells


def event_output(cell: dict[str, Any]) -> dict[str, Any]:
    (output,) = [o for o in cell["outputs"] if EVENT_MIME in o.get("data", {})]
    data: dict[str, Any] = output["data"][EVENT_MIME]
    return data


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_events_are_saved_in_the_metadata_of_the_cells_that_ran(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"events-{frontend}.ipynb"
    write_notebook(server.root / name, SANDBOX_KERNEL, SANDBOX_CELLS)
    assert open_notebook(page.page, server, frontend, name) == "rewyn-kernel"

    run_cells(page.page, [FIRST, SECOND, FLOOD, HOSTILE, RAISES, SLEEPS, FIRST])
    wait_for_event_counts(page.page, [0, 2, 1, 1, 1, 1, 1])
    save(page.page)

    cells = saved_cells(server, name)
    assert METADATA_KEY not in cells[0]["metadata"]  # markdown: nothing ran
    for cell in cells[1:]:
        record = cell["metadata"][METADATA_KEY]
        assert set(record) == {"events"}  # the shape `rewyn-kernel run` writes
        events = [SandboxEvent.model_validate(event) for event in record["events"]]
        # The last event is the one the cell's persisted output shows.
        assert events[-1].id == event_output(cell)["id"]
    first = [
        SandboxEvent.model_validate(e) for e in cells[FIRST]["metadata"][METADATA_KEY]["events"]
    ]
    assert [e.execution_count for e in first] == [1, 7]  # appended per execution, in order
    assert first[0].stdout == "hello from the sandbox\n"
    assert first[0].id != first[1].id

    def event(index: int) -> dict[str, Any]:
        event: dict[str, Any] = cells[index]["metadata"][METADATA_KEY]["events"][-1]
        return event

    assert event(SECOND)["stdout"] == "42\n"
    assert event(FLOOD)["stdout_truncated"] is True
    assert event(RAISES)["ending"] == "exception"
    assert event(SLEEPS)["ending"] == "timeout"
    assert event(SLEEPS)["timed_out"] is True


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_the_event_output_reads_as_one_status_line(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"line-{frontend}.ipynb"
    write_notebook(server.root / name, SANDBOX_KERNEL, SANDBOX_CELLS)
    open_notebook(page.page, server, frontend, name)
    run_cells(page.page, [FIRST, FLOOD, RAISES, SLEEPS])
    wait_for_event_counts(page.page, [0, 1, 0, 1, 0, 1, 1])

    notebook = current_notebook(page.page)
    assert notebook.locator(".rewyn-Event").count() == 4
    statuses = notebook.locator(".rewyn-Event-status").all_inner_texts()
    assert statuses == ["ok", "ok", "error", "timed out"]
    assert notebook.locator(".rewyn-Event-badge").all_inner_texts() == [
        "output truncated (97.7 KiB printed)",
        "sandbox restarted: variables lost",  # the timeout killed the sandbox
    ]
    facts = notebook.locator(".rewyn-Event-facts").first.inner_text()
    assert facts.startswith("sandbox · exit 0 · ")
    assert facts.endswith("subprocess, network isolated")
    # The renderer replaced the text fallback; the details open on a click.
    assert "sandbox: exit" not in notebook.inner_text()
    rows = notebook.locator(".rewyn-Event-rows").last
    assert not rows.is_visible()
    notebook.locator(".rewyn-Event-line").last.click()
    assert rows.is_visible()
    assert "timeout 3 s" in rows.inner_text()
    assert "message" in rows.inner_text()
    assert page.console_errors == []


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_hostile_output_stays_inert_in_the_live_page_and_after_reopening(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    name = f"hostile-{frontend}.ipynb"
    write_notebook(server.root / name, SANDBOX_KERNEL, SANDBOX_CELLS)
    open_notebook(page.page, server, frontend, name)
    run_cells(page.page, [HOSTILE])
    wait_for_event_counts(page.page, [0, 0, 0, 0, 1, 0, 0])
    page.page.wait_for_timeout(1000)  # time for a handler or an image load to fire

    assert page.pwned() is None
    assert page.hostile_requests() == []
    assert "kept" in current_notebook(page.page).locator(".jp-Cell").nth(HOSTILE).inner_text()

    save(page.page)  # saving signs the notebook as trusted: reopening must not replay anything
    open_notebook(page.page, server, frontend, name)
    page.page.wait_for_timeout(1000)
    assert page.pwned() is None
    assert page.hostile_requests() == []
    outputs = saved_cells(server, name)[HOSTILE]["outputs"]
    assert all("application/javascript" not in output.get("data", {}) for output in outputs)
    for part in ("<script", "onerror", "onload", "window.pwned"):
        assert part not in json.dumps(outputs)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_on_a_plain_kernel_the_same_output_runs_and_nothing_is_recorded(
    server: JupyterServer, page: Watched, frontend: str
) -> None:
    """The control: without the sandbox kernel the browser does run it (so the check above can
    fail), and the extension leaves other kernels' cells alone."""
    name = f"plain-{frontend}.ipynb"
    write_notebook(
        server.root / name, PLAIN_KERNEL, [("code", "print('plain')"), ("code", PLAIN_HOSTILE_CELL)]
    )
    assert open_notebook(page.page, server, frontend, name) == "ipython"
    run_cells(page.page, [0, 1])
    page.page.wait_for_function("() => window.pwned !== undefined", timeout=15000)
    save(page.page)

    assert page.pwned() in ("script", "onerror", "javascript")
    assert page.hostile_requests() != []
    for cell in saved_cells(server, name):
        assert METADATA_KEY not in cell["metadata"]
        assert cell["execution_count"] is not None
