"""End to end in a real browser: the person allows, from a cell's status line, a host the proxy
refused; the same kernel reaches it with its state kept; a restart keeps the grant; the CLI
revokes it (rewyn_kernel/kernel/grants.py, labextension/src/grant.ts).

The "index" is a local server, reached by a name the proxy's test-only map sends to loopback
(tests/egress_servers.py); the kernel's allow-list names only that loopback address and port.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from rewyn_kernel.cli import main as cli_main
from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.runtime.egress import proxy
from tests.conftest import unavailable
from tests.egress_servers import FETCH, TEST_HOSTS, Servers, local_servers
from tests.jupyter_browser import (
    JupyterServer,
    chromium,
    current_notebook,
    jupyter_server,
    new_context,
    open_notebook,
    restart_kernel,
    run_cells,
    save,
    wait_for_records,
    wait_until,
    write_notebook,
)
from tests.kernel_client import write_spec
from tests.test_packages import local_index

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]
KERNEL = "rewyn-browser-grants"
INDEX_KERNEL = "rewyn-browser-grants-index"


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with local_servers() as found:
        yield found


@pytest.fixture(scope="module")
def index_port() -> Iterator[int]:
    """The port of a package index (PEP 503) served on 127.0.0.1: tests/test_packages.py's."""
    with local_index() as port:
        yield port


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, servers: Servers, index_port: int
) -> Iterator[JupyterServer]:
    if importlib.util.find_spec("jupyterlab") is None:
        unavailable("JupyterLab is not installed: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("jupyter-grants")
    root = work / "notebooks"
    root.mkdir()
    kernels = work / "kernels-path"
    write_spec(kernels, KERNEL, [f"--SandboxKernel.network=127.0.0.1:{servers.http_port}"])
    # (the package index's address listed, not its name: the person grants the name)
    write_spec(kernels, INDEX_KERNEL, [f"--SandboxKernel.network=127.0.0.1:{index_port}"])
    old = os.environ.get(proxy.TEST_HOSTS)
    os.environ[proxy.TEST_HOSTS] = TEST_HOSTS  # (the server's environment, its kernels')
    try:
        with jupyter_server(root, kernels, work) as running:
            yield running
    finally:
        if old is None:
            os.environ.pop(proxy.TEST_HOSTS, None)
        else:
            os.environ[proxy.TEST_HOSTS] = old


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as running:
        yield running


@pytest.fixture
def page(browser: Browser, server: JupyterServer) -> Iterator[Page]:
    context = new_context(browser)
    yield context.new_page()
    context.close()
    for session in server.api("sessions"):
        server.api(f"sessions/{session['id']}", method="DELETE")


def output_of(page: Page, index: int) -> str:
    cell = current_notebook(page).locator(".jp-Cell").nth(index)
    return " ".join(cell.locator(".jp-OutputArea-output").all_inner_texts())


def test_the_person_allows_a_refused_host_from_the_status_line(
    server: JupyterServer,
    servers: Servers,
    page: Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = f"index.test:{servers.http_port}"
    url = f"http://{entry}/simple/"
    cells = [
        ("code", "kept = 41"),
        ("code", FETCH + f"print('status', fetch({url!r}))"),
        ("code", "print('kept', kept + 1)"),
    ]
    write_notebook(server.root / "grants.ipynb", KERNEL, cells)
    assert open_notebook(page, server, "lab", "grants.ipynb") == "rewyn-kernel"
    run_cells(page, [0])
    wait_for_records(page, [1, 0, 0])
    run_cells(page, [1])
    wait_for_records(page, [1, 2, 0])
    assert "status 403" in output_of(page, 1)

    button = current_notebook(page).locator(
        "button.rewyn-CellStatus-grant", has_text=f"Allow {entry} for this notebook"
    )
    wait_until(lambda: button.count() == 1, 30, lambda: "no Allow button")
    button.click()
    allowed = current_notebook(page).locator(".rewyn-CellStatus-grant", has_text="allowed")
    wait_until(lambda: allowed.count() == 1, 30, lambda: "the grant was not confirmed")

    run_cells(page, [1])
    wait_for_records(page, [1, 3, 0])
    wait_until(lambda: "status 200" in output_of(page, 1), 30, lambda: output_of(page, 1))
    run_cells(page, [2])
    wait_for_records(page, [1, 3, 4])
    assert "kept 42" in output_of(page, 2)  # (the same kernel: its state kept)
    save(page)

    def records() -> list[dict[str, Any]]:
        saved = json.loads((server.root / "grants.ipynb").read_text())["cells"]
        return [cell["metadata"].get(METADATA_KEY, {}).get("record", {}) for cell in saved]

    wait_until(lambda: records()[1].get("grants") == [entry], 30, lambda: str(records()))
    saved_text = (server.root / "grants.ipynb").read_text()
    assert "allow" in records()[1]["spec"]["network"]
    grants_dir = server.root.parent / "data" / "rewyn-kernel" / "grants"
    assert not any(str(grants_dir) in line for line in saved_text.splitlines())

    restart_kernel(page)  # (a new kernel of the notebook: it starts with the grant)
    run_cells(page, [1])
    wait_for_records(page, [1, 1, 4], timeout=60)
    assert "status 200" in output_of(page, 1)

    # The command lists the grant, with a Revoke button, and the presets with their hosts.
    page.evaluate(  # (not awaited: the command ends when its dialog closes)
        "() => { void window.jupyterapp.commands.execute('rewyn-kernel:network-grants'); }"
    )
    dialog = page.locator(".jp-Dialog")
    wait_until(lambda: entry in " ".join(dialog.all_inner_texts()), 30, lambda: "no dialog")
    shown = dialog.inner_text()
    assert "Revoke" in shown
    assert "pypi.org, files.pythonhosted.org" in shown
    dialog.locator("button", has_text="Close").click()

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(server.root.parent / "data"))
    assert cli_main(["grants", "revoke", str(server.root / "grants.ipynb"), entry]) == 0
    restart_kernel(page)
    run_cells(page, [0, 1])
    wait_for_records(page, [1, 2, 4], timeout=60)
    assert "status 403" in output_of(page, 1)


def test_a_package_from_an_index_the_person_allows_stays_after_a_restart(
    server: JupyterServer,
    page: Page,
    index_port: int,
) -> None:
    """The data scientist's path, from the page alone: %pip install from an index the kernel
    does not list is refused; the person allows the index from the cell's status line; the
    same cell installs, in the same kernel (its state kept); after a restart of the kernel the
    package is still there."""
    entry = f"index.test:{index_port}"
    install = (
        f"%pip install --no-cache-dir --retries 0 --timeout 10 --index-url http://{entry}/simple"
        " --trusted-host index.test tinypkg==1.0"
    )
    cells = [
        ("code", "kept = 41"),
        ("code", install),
        ("code", "import tinypkg\nprint(tinypkg.GREETING, kept + 1)"),
        ("code", "import tinypkg\nprint(tinypkg.GREETING)"),
    ]
    write_notebook(server.root / "packages.ipynb", INDEX_KERNEL, cells)
    assert open_notebook(page, server, "lab", "packages.ipynb") == "rewyn-kernel"
    run_cells(page, [0, 1])
    wait_for_records(page, [1, 2, 0, 0], timeout=120)
    assert "Successfully installed" not in output_of(page, 1)

    button = current_notebook(page).locator(
        "button.rewyn-CellStatus-grant", has_text=f"Allow {entry} for this notebook"
    )
    wait_until(lambda: button.count() == 1, 30, lambda: "no Allow button: " + output_of(page, 1))
    button.click()
    allowed = current_notebook(page).locator(".rewyn-CellStatus-grant", has_text="allowed")
    wait_until(lambda: allowed.count() == 1, 30, lambda: "the grant was not confirmed")

    run_cells(page, [1])
    wait_for_records(page, [1, 3, 0, 0], timeout=120)
    installed = output_of(page, 1)
    assert "Successfully installed tinypkg-1.0" in installed, installed
    run_cells(page, [2])
    wait_for_records(page, [1, 3, 4, 0])
    assert "hello from tinypkg 42" in output_of(page, 2)  # (the same kernel: its state kept)

    restart_kernel(page)  # (the next kernel of the notebook: the grant and the package stay)
    run_cells(page, [3])
    wait_for_records(page, [1, 3, 4, 1], timeout=90)
    assert "hello from tinypkg" in output_of(page, 3), output_of(page, 3)
