"""Print what a cell costs in a real JupyterLab page: plain ipykernel, the sandbox kernel, and the
sandbox kernel with the frontend extension turned off, one run each. Never asserts on timings.

Each figure is the time the page's ``notebook:run-cell`` command takes for the cell ``1``
(request to reply and idle, rendering included), measured in the page with performance.now(),
after warm-up cells. Needs Chromium (scripts/browser-tests.sh).

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
_TIME_CELLS = """async (n) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  panel.content.activeCellIndex = 0;
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
) -> list[float]:
    """Run ``cells`` cells of ``1`` on ``kernel`` in JupyterLab; return each one's milliseconds."""
    root = work / f"{kernel}-{extension}"
    (root / "notebooks").mkdir(parents=True)
    config = root / "config" / "labconfig"
    config.mkdir(parents=True)
    disabled = {} if extension else {"rewyn-kernel": True}
    (config / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    name = "bench.ipynb"
    write_notebook(root / "notebooks" / name, kernel, [("code", "1")])
    with jupyter_server(root / "notebooks", work / "kernels-path", root) as server:
        context = browser.new_context()
        page = context.new_page()
        open_notebook(page, server, "lab", name)
        page.evaluate(_TIME_CELLS, 10)  # warm up: first cells load renderers and fill caches
        times: list[float] = page.evaluate(_TIME_CELLS, cells)
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
    baseline = statistics.median(runs["python3 (plain ipykernel)"])
    print(f"cell '1' in JupyterLab, {args.cells} cells each, ms (same run, same browser)")
    for label, times in runs.items():
        ordered = sorted(times)
        p50 = statistics.median(ordered)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        print(f"  {label:28} p50 {p50:6.1f}  p90 {p90:6.1f}  ({p50 / baseline:.2f}x plain)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
