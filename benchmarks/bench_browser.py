"""Print what a cell costs in a real JupyterLab page: plain ipykernel, the sandbox kernel, and the
sandbox kernel with the frontend extension turned off, one run each. Never asserts on timings.

Each figure is the time the page's ``notebook:run-cell`` command takes (request to reply and
idle, rendering included), measured in the page with performance.now() after warm-up runs, for
the cell ``1`` and for a cell printing 16 KiB (whose events, kept in the cell's metadata with
the extension on, go back to the kernel with every request). Each configuration gets its own
server and page in one browser. Needs Chromium (scripts/browser-tests.sh).

    python -m benchmarks.bench_browser            # 100 cells per kernel
    python -m benchmarks.bench_browser --cells 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

from tests.jupyter_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    jupyter_server,
    open_notebook,
    write_notebook,
)
from tests.kernel_client import write_spec

SANDBOX = "rewyn-bench-browser"
CELLS = {"cell '1'": "1", "cell printing 16 KiB": "print('x' * 16_384)"}
_TIME_CELLS = """async ([index, n]) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  panel.content.activeCellIndex = index;
  const times = [];
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    await app.commands.execute('notebook:run-cell');
    times.push(performance.now() - started);
  }
  return times;
}"""


def measure(
    browser: Browser, work: Path, kernel: str, cells: int, *, extension: bool
) -> dict[str, list[float]]:
    """Run each of CELLS ``cells`` times on ``kernel`` in JupyterLab; return the milliseconds."""
    root = work / f"{kernel}-{extension}"
    (root / "notebooks").mkdir(parents=True)
    config = root / "config" / "labconfig"
    config.mkdir(parents=True)
    disabled = {} if extension else {"rewyn-kernel": True}
    (config / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    name = "bench.ipynb"
    write_notebook(root / "notebooks" / name, kernel, [("code", code) for code in CELLS.values()])
    times: dict[str, list[float]] = {}
    with jupyter_server(root / "notebooks", work / "kernels-path", root) as server:
        context = browser.new_context()
        page = context.new_page()
        open_notebook(page, server, "lab", name)
        for index, label in enumerate(CELLS):
            page.evaluate(_TIME_CELLS, [index, 10])  # warm up: renderers, caches, 10 events
            times[label] = page.evaluate(_TIME_CELLS, [index, cells])
        loaded = page.evaluate("() => window.jupyterapp.hasPlugin('rewyn-kernel:cell-events')")
        context.close()
    if loaded != extension:
        raise SystemExit(f"the extension was {'' if loaded else 'not '}loaded, contrary to plan")
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100, help="timed cells per kernel")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: run scripts/browser-tests.sh", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        work = Path(tmp)
        write_spec(work / "kernels-path", SANDBOX)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        runs = {
            "python3 (plain ipykernel)": measure(
                browser, work, "python3", args.cells, extension=True
            ),
            "sandbox, extension off": measure(browser, work, SANDBOX, args.cells, extension=False),
            "sandbox, extension on": measure(browser, work, SANDBOX, args.cells, extension=True),
        }
        browser.close()
    plain = runs["python3 (plain ipykernel)"]
    print(f"JupyterLab, {args.cells} runs of each cell per kernel, ms (same run, same browser)")
    for cell in CELLS:
        print(f"  {cell}")
        baseline = statistics.median(plain[cell])
        for label, times in runs.items():
            ordered = sorted(times[cell])
            p50 = statistics.median(ordered)
            p90 = ordered[int(0.9 * (len(ordered) - 1))]
            print(f"    {label:28} p50 {p50:6.1f}  p90 {p90:6.1f}  ({p50 / baseline:.2f}x plain)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
