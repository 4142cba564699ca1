"""End to end in a real browser: the banner on the cells an MCP agent wrote (issue 28).

A real JupyterLab with real-time collaboration on, as the live-notebook MCP mode needs, and
headless Chromium. The notebook is written with the agent's metadata in place (what the MCP
server writes into the shared document); the test checks what the person sees, clicks "Run" and
"Reject…", and reads back from the page's model and from the file the server saves what the
extension wrote.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from rewyn_kernel.kernel.record import METADATA_KEY
from tests.conftest import unavailable
from tests.jupyter_browser import (
    FRONTENDS,
    JupyterServer,
    chromium,
    current_notebook,
    fresh_page,
    jupyter_server,
    kernels_left,
    loaded_extensions,
    open_notebook,
    save,
    shoot,
    wait_for_records,
    wait_until,
    write_notebook,
)
from tests.kernel_client import write_spec

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

KERNEL = "rewyn-agent-banner"
BUILT = Path(__file__).resolve().parent.parent / "rewyn_kernel" / "labextension"
# Right-to-left override and a zero-width space: they would make the text read otherwise.
HOSTILE_NAME = "evil\u202eetirw\u200b <b>bot</b>"
HOSTILE_REASON = 'writes files <img src=x onerror="window.pwned = 1">' + "x" * 5000


def agent(state: str, **fields: Any) -> dict[str, Any]:
    return {METADATA_KEY: {"agent": {"name": "claude", "call": "c1", "state": state, **fields}}}


CELLS = [
    ("code", "print('proposed')"),
    ("code", "print('ran')"),
    ("code", "print('refused')"),
    ("code", "print('the person\\'s own')"),
    ("code", "print('to run')"),
    ("code", "print('after it')"),
]
PROPOSED, APPROVED, REJECTED, OWN, TO_RUN, AFTER = range(6)
METADATA = {
    PROPOSED: agent("pending", risk="high", reason="writes files outside the notebook"),
    APPROVED: agent("approved"),
    REJECTED: agent("rejected", note="not on this data"),
    TO_RUN: agent("pending", risk="low", reason="reads a file"),
    AFTER: agent("done"),
}

_ENTRY = """(index) => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.model.cells.get(index).getMetadata('rewyn_kernel') ?? null;
}"""

_SET_ENTRY = """([index, entry]) => {
  const panel = window.jupyterapp.shell.currentWidget;
  panel.content.model.cells.get(index).setMetadata('rewyn_kernel', entry);
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    if importlib.util.find_spec("jupyterlab") is None:
        unavailable("JupyterLab is not installed: pip install -e '.[dev]'")
    if importlib.util.find_spec("jupyter_collaboration") is None:
        unavailable("jupyter-collaboration is not installed: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("jupyter")
    root = work / "notebooks"
    root.mkdir()
    kernels = work / "kernels-path"
    write_spec(kernels, KERNEL)
    # The extension as built in this tree, ahead of the one the environment installed (Jupyter
    # takes the first it finds, JUPYTER_PATH first): the test checks the committed bundle.
    (kernels / "labextensions").mkdir()
    (kernels / "labextensions" / "rewyn-kernel").symlink_to(BUILT, target_is_directory=True)
    with jupyter_server(root, kernels, work, collaboration=True) as running:
        yield running
    assert kernels_left(running.runtime_dir) == [], "a kernel outlived the server"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as running:
        yield running


@pytest.fixture
def page(browser: Browser, server: JupyterServer) -> Iterator[Page]:
    with fresh_page(browser, server) as opened:
        yield opened


def entry(page: Page, index: int) -> Any:
    return page.evaluate(_ENTRY, index)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_agent_cells_show_who_wrote_them_and_what_became_of_them(
    server: JupyterServer, page: Page, frontend: str
) -> None:
    name = f"banners-{frontend}.ipynb"
    write_notebook(server.root / name, KERNEL, CELLS, metadata=METADATA)
    assert open_notebook(page, server, frontend, name) == "rewyn-kernel"
    committed = json.loads((BUILT / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    assert loaded_extensions(page)["rewyn-kernel"].endswith(committed)
    cells = current_notebook(page).locator(".jp-Cell")
    wait_until(
        lambda: current_notebook(page).locator(".rewyn-AgentBanner").count() == 5,
        30,
        lambda: f"banners: {current_notebook(page).locator('.rewyn-AgentBanner').count()}",
    )

    marked = ["rewyn-AgentCell" in (cells.nth(i).get_attribute("class") or "") for i in range(6)]
    assert marked == [True, True, True, False, True, True]
    assert cells.nth(OWN).locator(".rewyn-AgentBanner").count() == 0
    banners = [cells.nth(i).locator(".rewyn-AgentBanner") for i in range(6)]
    states = {i: banners[i].get_attribute("data-state") for i in METADATA}
    assert states == {
        PROPOSED: "pending",
        APPROVED: "approved",
        REJECTED: "rejected",
        TO_RUN: "pending",
        AFTER: "done",
    }
    assert {banners[i].get_attribute("data-agent") for i in METADATA} == {"claude"}

    proposed = banners[PROPOSED].inner_text()
    assert "agent claude" in proposed
    assert "asks to run this cell — risk HIGH: writes files outside the notebook" in proposed
    assert banners[PROPOSED].locator(".rewyn-AgentRun").is_enabled()
    assert banners[PROPOSED].locator(".rewyn-AgentReject").is_enabled()
    assert "approved" in banners[APPROVED].inner_text()
    assert banners[APPROVED].locator("button").count() == 0
    assert "rejected: not on this data" in banners[REJECTED].inner_text()
    assert banners[AFTER].locator("button").count() == 0
    if frontend == "lab":  # (the documentation's picture of a cell waiting for the person)
        shoot(page, "approval-banner", cells.nth(PROPOSED))

    # The server moves a cell on (here through the page's model, as a remote change arrives):
    # the banner follows, and the buttons go.
    moved = agent("expired", risk="high", reason="writes files outside the notebook")
    page.evaluate(_SET_ENTRY, [PROPOSED, moved[METADATA_KEY]])
    wait_until(
        lambda: banners[PROPOSED].get_attribute("data-state") == "expired",
        10,
        lambda: f"state: {banners[PROPOSED].get_attribute('data-state')}",
    )
    assert banners[PROPOSED].locator("button").count() == 0
    assert "expired" in banners[PROPOSED].inner_text()


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_reject_writes_the_decision_with_the_note_and_keeps_the_rest(
    server: JupyterServer, page: Page, frontend: str
) -> None:
    name = f"reject-{frontend}.ipynb"
    write_notebook(server.root / name, KERNEL, CELLS, metadata=METADATA)
    open_notebook(page, server, frontend, name)
    banner = current_notebook(page).locator(".jp-Cell").nth(PROPOSED).locator(".rewyn-AgentBanner")
    banner.locator(".rewyn-AgentReject").click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("input").fill("use the copy in /tmp")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()

    expected = {
        "agent": {
            **METADATA[PROPOSED][METADATA_KEY]["agent"],
            "decision": {"action": "reject", "note": "use the copy in /tmp"},
        }
    }
    wait_until(lambda: entry(page, PROPOSED) == expected, 10, lambda: f"{entry(page, PROPOSED)}")
    wait_until(
        lambda: banner.locator(".rewyn-AgentReject").is_disabled(),
        10,
        lambda: "the Reject button is still enabled after the decision",
    )
    assert banner.locator(".rewyn-AgentRun").is_disabled()
    assert banner.get_attribute("data-state") == "pending"  # until the server acts on it
    # The decision reached the server's copy of the document (a save writes that).
    save(page)
    saved = json.loads((server.root / name).read_text())["cells"]
    assert saved[PROPOSED]["metadata"][METADATA_KEY] == expected
    assert saved[TO_RUN]["metadata"] == METADATA[TO_RUN]  # the other cells untouched


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_cancelling_the_rejection_leaves_the_cell_pending(
    server: JupyterServer, page: Page, frontend: str
) -> None:
    name = f"cancel-{frontend}.ipynb"
    write_notebook(server.root / name, KERNEL, CELLS, metadata=METADATA)
    open_notebook(page, server, frontend, name)
    banner = current_notebook(page).locator(".jp-Cell").nth(PROPOSED).locator(".rewyn-AgentBanner")
    banner.locator(".rewyn-AgentReject").click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("input").fill("never mind")
    dialog.locator(".jp-Dialog-button.jp-mod-reject").click()
    wait_until(
        lambda: banner.locator(".rewyn-AgentReject").is_enabled(),
        10,
        lambda: "the Reject button stayed disabled after the dialog was cancelled",
    )
    assert entry(page, PROPOSED) == METADATA[PROPOSED][METADATA_KEY]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_run_runs_exactly_the_proposed_cell(
    server: JupyterServer, page: Page, frontend: str
) -> None:
    name = f"run-{frontend}.ipynb"
    write_notebook(server.root / name, KERNEL, CELLS, metadata=METADATA)
    open_notebook(page, server, frontend, name)
    cells = current_notebook(page).locator(".jp-Cell")
    cells.nth(TO_RUN).locator(".rewyn-AgentRun").click()

    wait_for_records(page, [0, 0, 0, 0, 1, 0], endings=[None, None, None, None, "completed", None])
    assert cells.nth(TO_RUN).locator(".jp-OutputArea-output").inner_text().strip() == "to run"
    active = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex")
    assert active == TO_RUN  # not moved on to the next cell
    stored = entry(page, TO_RUN)
    assert stored["agent"] == METADATA[TO_RUN][METADATA_KEY]["agent"]  # the recorder kept it
    assert stored["record"]["ending"] == "completed"


def test_hostile_agent_metadata_is_shown_as_bounded_text(server: JupyterServer, page: Page) -> None:
    name = "hostile.ipynb"
    metadata = {
        PROPOSED: agent("pending", name=HOSTILE_NAME, risk="severe", reason=HOSTILE_REASON),
        APPROVED: {METADATA_KEY: {"agent": "claude"}},  # not an object: not an agent's cell
        REJECTED: agent("rejected", note=["not", "a", "string"], name=7),
        TO_RUN: agent("made-up"),
    }
    write_notebook(server.root / name, KERNEL, CELLS, metadata=metadata)
    open_notebook(page, server, "lab", name)
    cells = current_notebook(page).locator(".jp-Cell")
    wait_until(
        lambda: current_notebook(page).locator(".rewyn-AgentBanner").count() == 3,
        30,
        lambda: f"banners: {current_notebook(page).locator('.rewyn-AgentBanner').count()}",
    )
    banner = cells.nth(PROPOSED).locator(".rewyn-AgentBanner")
    assert banner.get_attribute("data-agent") == "eviletirw <b>bot</b>"  # no hidden characters
    text = banner.inner_text()
    assert "risk" not in text  # an unknown level is not shown as one
    assert "<img src=x" in text  # as text
    assert banner.locator("img, b").count() == 0
    assert page.evaluate("() => window.pwned") is None
    reason = banner.locator(".rewyn-AgentBanner-reason").inner_text()
    assert len(reason) == 2001
    assert reason.endswith("…")
    assert cells.nth(APPROVED).locator(".rewyn-AgentBanner").count() == 0
    rejected = cells.nth(REJECTED).locator(".rewyn-AgentBanner")
    assert rejected.get_attribute("data-agent") == "an agent"
    assert rejected.inner_text().strip().endswith("rejected")
    assert cells.nth(TO_RUN).locator(".rewyn-AgentBanner").get_attribute("data-state") == (
        "unknown"
    )
