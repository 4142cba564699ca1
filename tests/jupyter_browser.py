"""A real Jupyter server and headless Chromium, for the frontend extension's end-to-end tests.

The page is driven through the application object that ``expose_app_in_browser`` puts on
``window.jupyterapp`` (how JupyterLab's own browser tests drive it): commands, not keystrokes, so
a test waits on what the application says it has done.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import (
    Browser,
    BrowserContext,
    FloatRect,
    Locator,
    Page,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError

CHROMIUM = os.environ.get("REWYN_CHROMIUM", "/usr/bin/chromium")
# What this machine's Chromium needs to start without reaching for the (closed) internet.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FRONTENDS = ("lab", "notebook")
"""JupyterLab 4 (/lab/tree/PATH) and Notebook 7 (/notebooks/PATH), one server for both."""
VIEWPORT = {"width": 1280, "height": 800}
DEVICE_SCALE = 1
"""Every page's size and pixel ratio, fixed: the screenshots the tests take are reproducible."""


@dataclass(frozen=True)
class JupyterServer:
    """A running ``jupyter lab`` (see ``jupyter_server``): where it is and how to reach it."""

    url: str
    token: str
    root: Path
    runtime_dir: Path
    log: Path

    def notebook_url(self, frontend: str, path: str) -> str:
        if frontend == "lab":  # reset: open only this notebook, not the last test's workspace
            return f"{self.url}/lab/tree/{path}?reset&token={self.token}"
        return f"{self.url}/notebooks/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        headers = {"Authorization": f"token {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"{self.url}/api/{path}",
            method=method,
            headers=headers,
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


COLLABORATION_EXTENSIONS = ("@jupyter/collaboration-extension", "@jupyter/docprovider-extension")
"""jupyter-collaboration's frontend extensions (installed with the tests for the live notebook)."""


def without_collaboration(config_dir: Path) -> None:
    """Turn jupyter-collaboration's frontend extensions off in the pages of a server whose
    config is in ``config_dir`` (other disabled extensions kept): with real-time collaboration
    off the pages are a plain JupyterLab's and Notebook 7's (in Notebook 7 one of its plugins
    fails to start: it asks for a status bar that Notebook 7 does not have)."""
    path = config_dir / "labconfig" / "page_config.json"
    config: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    disabled = config.setdefault("disabledExtensions", {})
    for name in COLLABORATION_EXTENSIONS:
        disabled.setdefault(name, True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))


def without_news(settings_dir: Path) -> None:
    """Answer JupyterLab's question "get notified about official Jupyter news?" with no, in the
    settings of a server whose settings are in ``settings_dir``: the page asks no question in
    its corner (where a screenshot would catch it) and never fetches the news feed."""
    path = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"fetchNews": "false"}))


@contextmanager
def jupyter_server(
    root: Path,
    jupyter_path: Path,
    work: Path,
    *,
    collaboration: bool = False,
    extra_args: Sequence[str] = (),
) -> Iterator[JupyterServer]:
    """Run ``jupyter lab`` over ``root`` with kernelspecs from ``jupyter_path``; stop it after.

    Config, runtime, settings and workspaces live under ``work``, so the user's own Jupyter set-up
    plays no part; extensions come from the environment, as a user's ``pip install`` puts them.
    Real-time collaboration (jupyter-collaboration, installed with the tests) is off unless
    ``collaboration``: a notebook then loads and saves as it does on a plain JupyterLab.
    ``extra_args`` go to ``jupyter lab`` as they are.
    """
    token = secrets.token_hex(16)
    port = free_port()
    runtime_dir = work / "runtime"
    if not collaboration:
        without_collaboration(work / "config")
    without_news(work / "settings")
    env = {
        **os.environ,
        "JUPYTER_PATH": str(jupyter_path),
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_DATA_DIR": str(work / "data"),  # notebook signatures, user extensions
        "JUPYTER_RUNTIME_DIR": str(runtime_dir),
        "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
    }
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--JupyterNotebookApp.expose_app_in_browser=True",
        "--LabApp.extension_manager=readonly",  # no PyPI queries from the test server
        *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []),
        *([] if collaboration else ["--YDocExtension.disable_rtc=True"]),
        *extra_args,
    ]
    log = work / "jupyter-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=work,  # (collaboration keeps its document store in the working directory)
        )
    server = JupyterServer(f"http://127.0.0.1:{port}", token, root, runtime_dir, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {process.returncode}:\n{server.log_tail()}"
                )
            with suppress(OSError):
                server.api("status")
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer in 60 s:\n{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def kernels_left(runtime_dir: Path) -> list[int]:
    """Pids of processes started with a connection file in ``runtime_dir`` (kernels)."""
    marker = str(runtime_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError):
            if marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def write_notebook(
    path: Path,
    kernel: str,
    cells: list[tuple[str, str]],
    outputs: dict[int, list[dict[str, Any]]] | None = None,
    metadata: dict[int, dict[str, Any]] | None = None,
) -> None:
    """Write an nbformat 4 notebook of (cell_type, source) pairs for the kernelspec ``kernel``,
    with ``outputs`` and ``metadata`` of cells by index (unsigned: the page treats them as
    untrusted)."""
    outputs = outputs or {}
    metadata = metadata or {}
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": kernel, "display_name": kernel, "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            {
                "id": f"cell-{index}",
                "cell_type": kind,
                "metadata": metadata.get(index, {}),
                "source": source,
                **(
                    {"outputs": outputs.get(index, []), "execution_count": None}
                    if kind == "code"
                    else {}
                ),
            }
            for index, (kind, source) in enumerate(cells)
        ],
    }
    path.write_text(json.dumps(notebook, indent=1))


# The notebook open in the page, once the application shows it with a kernel ready.
_OPEN = """async (path) => {
  const deadline = Date.now() + 60000;
  const within = (promise, what) => Promise.race([promise, new Promise((_, reject) =>
    setTimeout(() => reject(new Error('no ' + what + ' in 60 s')), deadline - Date.now()))]);
  const app = window.jupyterapp;
  await within(app.restored, 'application');
  const panel = () => app.shell.currentWidget;
  while (!(panel() && panel().context && panel().context.path === path)) {
    if (Date.now() > deadline) throw new Error('the notebook did not open: ' + path);
    await new Promise(resolve => setTimeout(resolve, 100));
  }
  await within(panel().context.ready, 'notebook model');
  await within(panel().sessionContext.ready, 'kernel session');
  const kernel = panel().sessionContext.session.kernel;
  return (await within(kernel.info, 'kernel_info reply')).implementation;
}"""

# Run the given cells one at a time (an error in one does not stop the next, unlike run-all).
_RUN = """async (indices) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  for (const index of indices) {
    panel.content.activeCellIndex = index;
    await app.commands.execute('notebook:run-cell');
  }
}"""

_RUN_ALL = """async () => {
  await window.jupyterapp.commands.execute('notebook:run-all-cells');
}"""

_RESTART = """async () => {
  await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart();
}"""

# The federated extensions the server told this page to load ({name: load path}).
_EXTENSIONS = """() => {
  const config = JSON.parse(document.getElementById('jupyter-config-data').textContent);
  return Object.fromEntries(config.federated_extensions.map(e => [e.name, e.load]));
}"""

_SAVE = """async () => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await app.commands.execute('docmanager:save');
  while (panel.context.model.dirty) {
    await new Promise(resolve => setTimeout(resolve, 50));
  }
}"""

# Events recorded per cell in the live model (what a save would write): kept plus dropped.
_RECORDS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return Array.from(panel.content.model.cells).map(cell => {
    const entry = cell.getMetadata('rewyn_kernel');
    const record = entry && entry.record;
    return record && Number.isInteger(record.execution_count)
      ? [record.execution_count, String(record.ending)] : [0, null];
  });
}"""


def open_notebook(page: Page, server: JupyterServer, frontend: str, path: str) -> str:
    """Open ``path`` in ``frontend``; return the kernel's ``implementation`` once it is ready."""
    page.goto(server.notebook_url(frontend, path))
    try:
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
        implementation: str = page.evaluate(_OPEN, path)
    except PlaywrightError as exc:
        raise AssertionError(f"{exc}\n--- jupyter server log ---\n{server.log_tail()}") from exc
    return implementation


def loaded_extensions(page: Page) -> dict[str, str]:
    """The prebuilt extensions the server told the page to load: {name: path of its entry}."""
    extensions: dict[str, str] = page.evaluate(_EXTENSIONS)
    return extensions


def current_notebook(page: Page) -> Locator:
    """The open notebook's panel (JupyterLab keeps other open documents in the page too)."""
    panel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    return page.locator(f"[id='{panel_id}']")


def run_cells(page: Page, indices: list[int]) -> None:
    page.evaluate(_RUN, indices)


def run_all(page: Page) -> None:
    page.evaluate(_RUN_ALL)


def restart_kernel(page: Page) -> None:
    page.evaluate(_RESTART)


def save(page: Page) -> None:
    page.evaluate(_SAVE)


def wait_until(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    """Poll ``condition`` until it holds; past ``timeout`` seconds fail, saying ``what()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def wait_for_records(
    page: Page,
    expected: list[int],
    timeout: float = 30.0,
    endings: list[str | None] | None = None,
) -> None:
    """Wait until each cell's metadata holds the record of the execution numbered as in
    ``expected`` (0: no record), replies may lag a run; then, if ``endings`` is given, check
    how each of those executions ended ("completed", "timeout", ...)."""
    records: list[tuple[int, str | None]] = []

    def reached() -> bool:
        records[:] = [(count, ending) for count, ending in page.evaluate(_RECORDS)]
        return [count for count, _ in records] == expected

    wait_until(
        reached,
        timeout,
        lambda: f"recorded (execution, ending) per cell: {records}, expected {expected}",
    )
    if endings is not None:
        assert [ending for _, ending in records] == endings, records


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless Chromium for a module's tests (missing: the test fails under CI, else skips)."""
    from tests.conftest import unavailable

    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is missing: run scripts/browser-tests.sh (or set REWYN_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_context(browser: Browser) -> BrowserContext:
    """A browser context of the fixed size, pixel ratio, colours, language and clock zone."""
    return browser.new_context(
        viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]},
        device_scale_factor=DEVICE_SCALE,
        color_scheme="light",
        reduced_motion="reduce",
        locale="en-US",
        timezone_id="UTC",
    )


@contextmanager
def fresh_page(browser: Browser, server: JupyterServer) -> Iterator[Page]:
    """A page in a context of its own; after it, no kernel is left running on ``server``."""
    context = new_context(browser)
    try:
        yield context.new_page()
    finally:
        context.close()
        for session in server.api("sessions"):
            server.api(f"sessions/{session['id']}", method="DELETE")


# -- screenshots for the documentation ---------------------------------------------------------

SCREENS = Path(__file__).resolve().parent.parent / "docs" / "_static" / "screens"
"""Where the documentation's screenshots live (``docs/_static/screens/NAME.png``)."""
WRITE_SCREENS = os.environ.get("REWYN_SCREENSHOTS") == "write"
"""Set by ``python3 tasks.py screenshots``: the tests write their shots instead of comparing."""
PALETTE = 64
"""Colours kept: a page of text, a few tints and their anti-aliased edges fit in 64."""
SIZE_SLACK = 0.06
"""How far a shot's width or height may move from the stored one's (at least 12 px): a line
of text more or fewer is further than that on every shot."""
BLOCK = 8
"""Side of the squares the two images are averaged over before they are compared."""
BLOCK_LEVELS = 16
"""A square differs when its mean grey level moved by more than this (of 255)."""
BLOCKS_DIFFERING = 0.02
"""The share of squares that may differ. Measured: two runs of the same tests differ in at most
0.5% of squares (durations, a temporary folder's name, a version's id, ids); a pending cell's
banner without its two buttons differs in 3.2%, without its text in 15%. A change of a word
passes: the test's own assertions check the words."""
REGENERATE = "run python3 tasks.py screenshots"


def compact_png(png: bytes) -> bytes:
    """``png`` in a palette of ``PALETTE`` colours, without dithering, optimised: the
    documentation's screenshots come out at 35% to 42% of Chromium's own PNG, looking the same."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        rgb = image.convert("RGB")
    palette = rgb.quantize(
        colors=PALETTE, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return out.getvalue()


def screen_difference(stored: Path, taken: bytes) -> str | None:
    """How the shot ``taken`` differs from the ``stored`` one beyond what is let pass, or None.

    Loose on purpose: pixel-exact comparison would fail on each run's durations, temporary
    paths and ids, and on font rendering. It fails on what a reader would see as another
    picture: a size moved past ``SIZE_SLACK`` (a line, a button or a note more or fewer), or
    more than ``BLOCKS_DIFFERING`` of the ``BLOCK``-pixel squares changed in grey level (a
    badge, a colour, a layout)."""
    import io

    from PIL import Image, ImageChops

    with Image.open(stored) as old_file, Image.open(io.BytesIO(taken)) as new_file:
        old, new = old_file.convert("L"), new_file.convert("L")
    for what, then, now in (("width", old.width, new.width), ("height", old.height, new.height)):
        if abs(now - then) > max(12, SIZE_SLACK * then):
            return f"its {what} is {now} px, the stored one's {then} px"
    small = (max(1, old.width // BLOCK), max(1, old.height // BLOCK))
    box = Image.Resampling.BOX
    diff = ImageChops.difference(old.resize(small, box), new.resize(small, box))
    differing = sum(diff.histogram()[BLOCK_LEVELS + 1 :])
    share = differing / (small[0] * small[1])
    if share > BLOCKS_DIFFERING:
        return f"{share:.1%} of its {BLOCK}-pixel squares differ (at most {BLOCKS_DIFFERING:.0%})"
    return None


def shoot(page: Page, name: str, *parts: Locator, pad: int = 6, to_last: bool = False) -> None:
    """Screenshot the region that holds ``parts`` (elements of ``page``) as ``NAME.png``; with
    ``to_last``, the region ends where the last part ends (what is below it is left out).

    Always taken, so a state the documentation shows that no longer exists fails the test
    first. With ``REWYN_SCREENSHOTS=write`` (``python3 tasks.py screenshots``) the shot is
    written into docs/_static/screens; otherwise it is compared with the one there
    (``screen_difference``), and a missing or different one fails, saying how to make it
    again (the new shot is left in the temporary folder to look at)."""
    import tempfile

    assert parts, "shoot: name at least one element"
    page.mouse.move(0, VIEWPORT["height"] - 1)  # (no hover styles on what is shot)
    parts[-1].scroll_into_view_if_needed()
    parts[0].scroll_into_view_if_needed()
    boxes = [part.bounding_box() for part in parts]
    assert all(boxes), f"shoot {name}: an element is not shown"
    left = max(0.0, min(b["x"] for b in boxes if b) - pad)
    top = max(0.0, min(b["y"] for b in boxes if b) - pad)
    right = min(float(VIEWPORT["width"]), max(b["x"] + b["width"] for b in boxes if b) + pad)
    ends = [b["y"] + b["height"] for b in boxes if b]
    bottom = min(float(VIEWPORT["height"]), ends[-1] + 2 if to_last else max(ends) + pad)
    clip = FloatRect(x=left, y=top, width=right - left, height=bottom - top)
    png = compact_png(page.screenshot(clip=clip, animations="disabled", caret="hide"))
    stored = SCREENS / f"{name}.png"
    if WRITE_SCREENS:
        SCREENS.mkdir(parents=True, exist_ok=True)
        stored.write_bytes(png)
        return
    taken = Path(tempfile.gettempdir()) / "rewyn-screens" / f"{name}.png"
    taken.parent.mkdir(exist_ok=True)
    taken.write_bytes(png)
    assert stored.exists(), f"{stored} is missing: {REGENERATE}"
    difference = screen_difference(stored, png)
    assert difference is None, (
        f"the page no longer looks like docs/_static/screens/{name}.png: {difference} "
        f"(the new shot: {taken}); if the change is meant, {REGENERATE}"
    )
