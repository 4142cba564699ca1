"""Print what an agent attached to a notebook costs (``rewyn-kernel mcp --notebook``), each figure
beside a baseline from the same run. Never asserts on timings.

- visible: from the agent's ``run_python`` call to its cell showing in the person's JupyterLab
  page (a MutationObserver in the page stamps the moment its source appears; the agent stamps
  the moment it sends the call: one clock, this machine's).
- call: the whole ``run_python`` call (``x = 1``; and a cell printing 16 KiB) through the
  attached server, against the same call through ``rewyn-kernel mcp`` with no notebook (a
  sandbox session of its own, on the same provider), and against the same cell run by the
  person's page itself (``notebook:run-cell``, request to reply), all after warm-up calls.

One JupyterLab with real-time collaboration, one Chromium page with the notebook open, the MCP
SDK's client over stdio. Needs Chromium (scripts/browser-tests.sh).

    python -m benchmarks.bench_live            # 30 calls of each
    python -m benchmarks.bench_live --calls 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation
from playwright.sync_api import sync_playwright

from tests.jupyter_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    jupyter_server,
    open_notebook,
    write_notebook,
)
from tests.kernel_client import write_spec
from tests.live_agent import Agent

KERNEL = "rewyn-bench-live"
CODES = {"cell 'x = 1'": "x = 1", "cell printing 16 KiB": "print('x' * 16_384)"}
_WATCH = """() => {
  window.rewynSeen = {};
  const check = () => {
    for (const node of document.querySelectorAll('.jp-Cell .cm-content')) {
      const found = node.textContent.match(/# call (\\d+)/);
      if (found && !(found[1] in window.rewynSeen)) window.rewynSeen[found[1]] = Date.now();
    }
  };
  new MutationObserver(check).observe(document.body,
    {subtree: true, childList: true, characterData: true});
}"""
_RUN_IN_PAGE = """async ([code, n]) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  const model = panel.content.model;
  model.sharedModel.insertCell(model.cells.length, {cell_type: 'code', source: code});
  panel.content.activeCellIndex = model.cells.length - 1;
  const times = [];
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    await app.commands.execute('notebook:run-cell');
    times.push(performance.now() - started);
  }
  return times;
}"""


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(values):7.1f} ms  p90 {p90:7.1f} ms"


async def plain_calls(work: Path, code: str, calls: int) -> list[float]:
    """``calls`` of ``run_python(code)`` through ``rewyn-kernel mcp`` with no notebook."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rewyn_kernel.cli", "mcp", "--run-log", str(work / "plain.jsonl")],
        env=dict(os.environ),
    )
    times = []
    with (work / "plain.err").open("w") as err:
        async with Client(
            stdio_client(params, errlog=err), client_info=Implementation(name="bench", version="1")
        ) as client:
            for _ in range(3):
                await client.call_tool("run_python", {"code": code})
            for _ in range(calls):
                started = time.perf_counter()
                await client.call_tool("run_python", {"code": code})
                times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-live-") as temp:
        work = Path(temp)
        root = work / "notebooks"
        root.mkdir()
        write_spec(work / "kernels", KERNEL, [])
        write_notebook(root / "live.ipynb", KERNEL, [("markdown", "# Benchmark")])
        with (
            jupyter_server(root, work / "kernels", work, collaboration=True) as server,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            open_notebook(page, server, "lab", "live.ipynb")
            page.evaluate(_WATCH)
            attached: dict[str, list[float]] = {name: [] for name in CODES}
            visible: list[float] = []
            number = 0
            with Agent("bench", server.url, server.token, "live.ipynb", work) as agent:
                for name, code in CODES.items():
                    for warm in range(3):
                        agent.run("run_python", {"code": f"# warm {warm}\n{code}"})
                    for _ in range(args.calls):
                        number += 1
                        sent = time.time()
                        started = time.perf_counter()
                        agent.run("run_python", {"code": f"# call {number}\n{code}"})
                        attached[name].append((time.perf_counter() - started) * 1000)
                        seen = page.evaluate(f"() => window.rewynSeen['{number}']")
                        if seen is not None:
                            visible.append(seen - sent * 1000)
            in_page = {
                name: page.evaluate(_RUN_IN_PAGE, [code, args.calls + 3])[3:]
                for name, code in CODES.items()
            }
            browser.close()
        plain = {
            name: asyncio.run(plain_calls(work, code, args.calls)) for name, code in CODES.items()
        }
    print(f"rewyn-kernel mcp --notebook, {args.calls} calls of each (this machine)")
    print(f"  call to the cell visible in the page: {summary(visible)}  ({len(visible)} seen)")
    for name in CODES:
        ratio = statistics.median(attached[name]) / statistics.median(plain[name])
        print(f"  {name}:")
        print(f"    attached to the notebook    {summary(attached[name])}")
        print(f"    no notebook (own sandbox)   {summary(plain[name])}  -> attached {ratio:.2f}x")
        print(f"    run by the person's page    {summary(in_page[name])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
