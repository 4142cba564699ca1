"""An agent and a person in one notebook (``rewyn-kernel mcp --notebook``), end to end: a real
JupyterLab with real-time collaboration (jupyter-collaboration), real Chromium for the person,
the MCP SDK's client for each agent, and the sandbox kernel the notebook runs on.

The person's side goes through the page as a person would (the toolbar's interrupt, the
banner's buttons, typing in a cell); the agent's through its tools only.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types
from playwright.sync_api import Browser, Page

from rewyn_kernel.mcp.live.document import MAX_CELL_OUTPUT_CHARS
from tests.conftest import unavailable
from tests.jupyter_browser import (
    JupyterServer,
    chromium,
    current_notebook,
    fresh_page,
    jupyter_server,
    open_notebook,
    run_cells,
    wait_for_records,
    wait_until,
    write_notebook,
)
from tests.kernel_client import write_spec
from tests.live_agent import Agent, text_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

KERNEL = "rewyn-live"
"""The sandbox kernel (bubblewrap where it runs): low risk, so calls run without approval."""
RISKY_KERNEL = "rewyn-live-open"
"""The sandbox kernel on the subprocess provider, whose code can read the user's files: medium
risk, so an agent started with --approve-above low asks for every call."""
PLAIN_KERNEL = "plain-ipykernel"

# Every cell of the open notebook as the page's model holds it.
_CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return Array.from(panel.content.model.cells).map(cell => {
    const entry = cell.getMetadata('rewyn_kernel');
    return {
      id: cell.id,
      type: cell.type,
      source: cell.sharedModel.getSource(),
      agent: entry && entry.agent ? entry.agent : null,
      record: entry && entry.record ? entry.record : null,
      outputs: cell.type === 'code' ? cell.outputs.toJSON() : [],
    };
  });
}"""

# When (ms since the epoch) a cell whose source holds the marker first shows in the page.
_WATCH = """(marker) => {
  window.rewynSeen = window.rewynSeen || {};
  const check = () => {
    if (window.rewynSeen[marker]) return;
    for (const node of document.querySelectorAll('.jp-Cell .cm-content')) {
      if (node.textContent.includes(marker)) {
        window.rewynSeen[marker] = Date.now();
        return;
      }
    }
  };
  new MutationObserver(check).observe(document.body,
    {subtree: true, childList: true, characterData: true});
  check();
}"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live")


@pytest.fixture(scope="module")
def server(work: Path) -> Iterator[JupyterServer]:
    for module in ("jupyterlab", "jupyter_server_ydoc", "jupyter_nbmodel_client"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"{module} is not installed: pip install -e '.[dev]'")
    root = work / "notebooks"
    root.mkdir()
    kernels = work / "kernels-path"
    write_spec(kernels, KERNEL, [f"--SandboxKernel.run_log={work / 'kernel.jsonl'}"])
    write_spec(
        kernels,
        RISKY_KERNEL,
        ["--SandboxKernel.provider=subprocess", f"--SandboxKernel.run_log={work / 'kernel.jsonl'}"],
    )
    plain = kernels / "kernels" / PLAIN_KERNEL
    plain.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (plain / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "plain", "language": "python"})
    )
    with jupyter_server(root, kernels, work, collaboration=True) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as running:
        yield running


@pytest.fixture
def page(browser: Browser, server: JupyterServer) -> Iterator[Page]:
    with fresh_page(browser, server) as opened:
        yield opened


def agent(server: JupyterServer, work: Path, name: str, notebook: str, *extra: str) -> Agent:
    return Agent(name, server.url, server.token, notebook, work, *extra)


def on_disk(path: Path) -> dict[str, Any]:
    """The notebook as the server last saved it (no cells while a save is half written: the
    server writes the file in place)."""
    try:
        notebook: dict[str, Any] = json.loads(path.read_text())
    except ValueError:
        return {"cells": []}
    return notebook


def cells(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(_CELLS)
    return found


def agent_cells(page: Page, name: str | None = None) -> list[dict[str, Any]]:
    return [
        cell
        for cell in cells(page)
        if cell["agent"] is not None and (name is None or cell["agent"]["name"] == name)
    ]


def output_text(cell: dict[str, Any]) -> str:
    parts = []
    for output in cell["outputs"]:
        text = output.get("text")
        if text is None:
            text = (output.get("data") or {}).get("text/plain", "")
        parts.append("".join(text) if isinstance(text, list) else str(text))
    return "".join(parts)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def cell_node(page: Page, cell_id: str) -> Any:
    """The page's node of the cell whose id is ``cell_id``."""
    index = [cell["id"] for cell in cells(page)].index(cell_id)
    return current_notebook(page).locator(".jp-Cell").nth(index)


def banner(page: Page, cell_id: str) -> Any:
    return cell_node(page, cell_id).locator(".rewyn-AgentBanner")


def wait_for_pending(page: Page, code: str) -> dict[str, Any]:
    """The pending agent cell proposing ``code``, once the page shows its banner."""

    def pending() -> list[dict[str, Any]]:
        return [
            cell
            for cell in agent_cells(page)
            if cell["agent"]["state"] == "pending" and cell["source"] == code
        ]

    wait_until(lambda: len(pending()) == 1, 60, lambda: f"agent cells: {agent_cells(page)}")
    (cell,) = pending()
    banner(page, cell["id"]).wait_for(timeout=30_000)
    return cell


# -- live cells ---------------------------------------------------------------------------------


def test_agent_cells_appear_live_share_state_and_the_person_interrupts(
    page: Page, server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "live.ipynb", KERNEL, [("code", "shared = 'from the person'")])
    assert open_notebook(page, server, "lab", "live.ipynb") == "rewyn-kernel"
    run_cells(page, [0])
    wait_for_records(page, [1])
    page.evaluate(_WATCH, "marker-one")
    with agent(server, work, "agent-one", "live.ipynb") as one:
        call = one.call(
            "run_python",
            {
                "code": "# marker-one\nprint(shared)\nprint('started', flush=True)\n"
                "import time\ntime.sleep(300)"
            },
        )
        wait_until(
            lambda: any("started" in output_text(c) for c in agent_cells(page, "agent-one")),
            60,
            lambda: f"agent cells: {agent_cells(page)}\n{one.stderr()}",
        )
        assert not call.done(), "the call ended before the person interrupted it"
        (cell,) = agent_cells(page, "agent-one")
        assert cell["source"].startswith("# marker-one")
        shown = banner(page, cell["id"])  # (the extension marks the agent's cell in the page)
        shown.wait_for(timeout=30_000)
        assert shown.get_attribute("data-agent") == "agent-one"
        assert "agent-one" in shown.inner_text()
        assert output_text(cell) == "from the person\nstarted\n"
        assert cell["agent"]["state"] == "running"
        shown = page.evaluate("() => window.rewynSeen['marker-one']")
        print(f"\ncall to visible cell: {shown - call.started * 1000:.0f} ms")  # type: ignore[attr-defined]

        # The person interrupts from JupyterLab's toolbar.
        current_notebook(page).locator("[data-command='notebook:interrupt-kernel']").click()
        out = structured(call.result(60))
        assert out["ending"] == "interrupted"
        assert out["interrupted_by"] == "person"
        assert "interrupted by the person" in text_of(call.result())
        assert out["stdout"] == "from the person\nstarted\n"
        wait_until(
            lambda: agent_cells(page, "agent-one")[0]["agent"]["state"] == "interrupted",
            30,
            lambda: f"{agent_cells(page)}",
        )
        (cell,) = agent_cells(page, "agent-one")
        assert cell["record"]["ending"] == "interrupted"
        assert cell["agent"]["call"] == _last_call(one)["id"]

        # The agent sees the person's cells, and the state goes both ways.
        listed = structured(one.run("list_cells", {}))
        assert [c["author"] for c in listed["cells"]] == ["person", "agent agent-one"]
        assert listed["cells"][1]["ending"] == "interrupted"
        follow = structured(one.run("run_python", {"code": "agent_made = shared.upper()"}))
        assert follow["ok"] is True
    # The person's next cell sees what the agent made.
    page.evaluate(
        """() => {
      const panel = window.jupyterapp.shell.currentWidget;
      panel.content.model.sharedModel.insertCell(panel.content.model.cells.length,
        {cell_type: 'code', source: 'print(agent_made)'});
    }"""
    )
    run_cells(page, [3])
    wait_until(
        lambda: "FROM THE PERSON" in output_text(cells(page)[3]),
        30,
        lambda: f"{cells(page)}",
    )


def _last_call(one: Agent) -> dict[str, Any]:
    calls = [json.loads(line) for line in one.run_log.read_text().splitlines()]
    runs: list[dict[str, Any]] = [call for call in calls if call.get("tool") == "run_python"]
    return runs[-1]


# -- approval in the notebook -------------------------------------------------------------------


def test_approve_edit_and_reject_from_the_browser(
    page: Page, server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "approve.ipynb", RISKY_KERNEL, [("markdown", "# Approvals")])
    assert open_notebook(page, server, "lab", "approve.ipynb") == "rewyn-kernel"
    extra = ("--approve-above", "low", "--approval-timeout", "120")
    # (The SDK's client here offers no elicitation: approval happens in the notebook.)
    with agent(server, work, "careful", "approve.ipynb", *extra) as careful:
        # 1. Run as proposed, with the banner's Run button.
        call = careful.call("run_python", {"code": "print('as proposed')"})
        cell = wait_for_pending(page, "print('as proposed')")
        assert cell["agent"]["risk"] == "medium"
        assert "read this user's files" in cell["agent"]["reason"]
        assert output_text(cell) == ""
        assert not call.done()
        banner(page, cell["id"]).locator(".rewyn-AgentRun").click()
        out = structured(call.result(60))
        assert out["approval"] == "approved"
        assert out["stdout"] == "as proposed\n"
        assert out["code"] is None

        # 2. Edited, then run with Shift+Enter.
        call = careful.call("run_python", {"code": "print('proposed')"})
        cell = wait_for_pending(page, "print('proposed')")
        editor = cell_node(page, cell["id"]).locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+a")
        page.keyboard.type("print('edited by the person')")
        page.keyboard.press("Shift+Enter")
        out = structured(call.result(60))
        assert out["approval"] == "edited"
        assert out["code"] == "print('edited by the person')"
        assert out["stdout"] == "edited by the person\n"
        assert "--- the code as the person ran it ---" in text_of(call.result())

        # 3. Rejected, with a note.
        call = careful.call("run_python", {"code": "print('never')"})
        cell = wait_for_pending(page, "print('never')")
        banner(page, cell["id"]).locator(".rewyn-AgentReject").click()
        page.locator(".jp-Dialog input").fill("not this one: use the cached copy")
        page.locator(".jp-Dialog .jp-mod-accept").click()
        result = call.result(60)
        assert result.is_error
        assert "rejected" in text_of(result)
        assert "not this one: use the cached copy" in text_of(result)

        states = [c["agent"]["state"] for c in agent_cells(page, "careful")]
        wait_until(
            lambda: (
                [c["agent"]["state"] for c in agent_cells(page, "careful")]
                == ["approved", "edited", "rejected"]
            ),
            30,
            lambda: f"states: {states}",
        )
        rejected = agent_cells(page, "careful")[2]
        assert rejected["agent"]["note"] == "not this one: use the cached copy"
        assert rejected["outputs"] == []
        calls = [json.loads(line) for line in careful.run_log.read_text().splitlines()]
        assert [c["outcome"] for c in calls if c["tool"] == "run_python"] == ["ok", "ok", "denied"]
        assert [c["agent"]["call"] for c in agent_cells(page, "careful")] == [
            c["id"] for c in calls if c["tool"] == "run_python"
        ]
        # The run log names the execution whose record each cell that ran keeps.
        ran = [c for c in agent_cells(page, "careful") if c["record"] is not None]
        assert [c["record"]["id"] for c in ran] == [
            c["execution_id"] for c in calls if c["tool"] == "run_python" and c["outcome"] == "ok"
        ]

    # The server saved the shared notebook; its review says what the person did.
    saved = server.root / "approve.ipynb"

    copy = work / "approve-saved.ipynb"  # (as read whole: the server may save again meanwhile)

    def saved_states() -> list[str]:
        notebook = on_disk(saved)
        states = [
            cell["metadata"]["rewyn_kernel"]["agent"]["state"]
            for cell in notebook["cells"]
            if "agent" in cell["metadata"].get("rewyn_kernel", {})
        ]
        copy.write_text(json.dumps(notebook))
        return states

    wait_until(lambda: saved_states() == ["approved", "edited", "rejected"], 30, saved.read_text)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rewyn_kernel.cli",
            "review",
            str(copy),
            "-o",
            str(work / "r.ipynb"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "agent careful: 3 cells" in done.stdout
    review = json.loads((work / "r.ipynb").read_text())
    notes = [
        "".join(cell["source"])
        for cell in review["cells"]
        if cell["metadata"].get("rewyn_kernel", {}).get("live_review")
    ]
    assert "approved by the person, run as proposed" in notes[1]
    assert "+print('edited by the person')" in notes[2]
    assert "not this one" in notes[3]


def test_a_pending_cell_expires_into_a_refusal(server: JupyterServer, work: Path) -> None:
    write_notebook(server.root / "expire.ipynb", RISKY_KERNEL, [("markdown", "# Agent at work")])
    extra = ("--approve-above", "low", "--approval-timeout", "2")
    with agent(server, work, "waiting", "expire.ipynb", *extra) as waiting:
        result = waiting.run("run_python", {"code": "print('nobody looks')"})
        assert result.is_error
        assert "nobody approved this call within 2 s" in text_of(result)
        listed = structured(waiting.run("list_cells", {}))
        assert [(c["author"], c["state"]) for c in listed["cells"]] == [
            ("person", None),
            ("agent waiting", "expired"),
        ]
        assert listed["cells"][1]["execution_count"] is None


# -- many writers -------------------------------------------------------------------------------


def test_two_agents_and_a_person_keep_every_edit_in_order(
    page: Page, server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "two.ipynb", KERNEL, [("code", "# Notes:")])
    assert open_notebook(page, server, "lab", "two.ipynb") == "rewyn-kernel"
    with (
        agent(server, work, "alpha", "two.ipynb") as alpha,
        agent(server, work, "beta", "two.ipynb") as beta,
    ):

        def calls(who: Agent) -> list[Any]:
            results = []
            for index in range(4):
                code = f"print('{who.name}', {index})"
                results.append(who.run("run_python", {"code": code}))
            return results

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            both = [pool.submit(calls, who) for who in (alpha, beta)]
            # Meanwhile the person writes in the first cell.
            current_notebook(page).locator(".jp-Cell").first.locator(".cm-content").click()
            page.keyboard.press("Control+End")
            page.keyboard.type(" the person typed this while two agents worked.")
            results = [future.result(120) for future in both]
        for who, outcomes in zip(("alpha", "beta"), results, strict=True):
            assert [structured(r)["stdout"] for r in outcomes] == [
                f"{who} {index}\n" for index in range(4)
            ]
        wait_until(
            lambda: (
                len(agent_cells(page)) == 8
                and all(c["agent"]["state"] == "done" for c in agent_cells(page))
            ),
            30,
            lambda: f"agent cells in the page: {agent_cells(page)}",
        )
        for who in ("alpha", "beta"):
            mine = agent_cells(page, who)
            assert [c["source"] for c in mine] == [f"print('{who}', {i})" for i in range(4)]
            assert [output_text(c) for c in mine] == [f"{who} {i}\n" for i in range(4)]
            assert all(c["agent"]["state"] == "done" for c in mine)
        wait_until(
            lambda: cells(page)[0]["source"].endswith("while two agents worked."),
            30,
            lambda: f"{cells(page)[0]}",
        )
        listed = structured(alpha.run("list_cells", {}))
        assert listed["cells"][0]["preview"] == (
            "# Notes: the person typed this while two agents worked."
        )
        authors = [c["author"] for c in listed["cells"]]
        assert authors.count("agent beta") == 4
        assert authors.count("agent alpha") == 4
        counts = [c["execution_count"] for c in listed["cells"][1:]]
        assert sorted(counts) == list(range(1, 9))


# -- the boundary ---------------------------------------------------------------------------------


def test_the_agent_has_three_tools_and_no_way_to_name_another_notebook(
    server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "own.ipynb", KERNEL, [("markdown", "# Agent at work")])
    write_notebook(server.root / "other.ipynb", KERNEL, [("code", "secret = 1")])
    with agent(server, work, "bounded", "own.ipynb") as bounded:
        tools = bounded.submit(lambda client: client.list_tools()).result(60)
        assert {tool.name for tool in tools.tools} == {"run_python", "list_cells", "read_cell"}
        for tool in tools.tools:
            assert tool.input_schema.get("additionalProperties") is False
        refused = bounded.run("read_cell", {"index": 0, "path": "other.ipynb"})
        assert refused.is_error
        assert "path" in text_of(refused)
        listed = structured(bounded.run("list_cells", {}))
        assert listed["path"] == "own.ipynb"
        assert listed["total"] == 1


def test_a_kernel_that_is_not_sandboxed_is_refused(server: JupyterServer, work: Path) -> None:
    write_notebook(server.root / "plain.ipynb", PLAIN_KERNEL, [("code", "x = 1")])
    with agent(server, work, "refused", "plain.ipynb") as refused:
        result = refused.run("run_python", {"code": "import os; os.getuid()"})
        assert result.is_error
        assert "not the sandbox kernel" in text_of(result)
        listed = structured(refused.run("list_cells", {}))
        assert [c["author"] for c in listed["cells"]] == ["person"]  # (no cell was made)


def test_a_kernel_restart_mid_call_ends_the_call(server: JupyterServer, work: Path) -> None:
    write_notebook(server.root / "restart.ipynb", KERNEL, [("markdown", "# Agent at work")])
    with agent(server, work, "restarted", "restart.ipynb") as restarted:
        call = restarted.call("run_python", {"code": "import time\ntime.sleep(300)"})
        wait_until(
            lambda: any(s["path"] == "restart.ipynb" for s in server.api("sessions")),
            60,
            restarted.stderr,
        )
        (session,) = [s for s in server.api("sessions") if s["path"] == "restart.ipynb"]
        wait_until(
            lambda: server.api(f"kernels/{session['kernel']['id']}")["execution_state"] == "busy",
            60,
            lambda: "the kernel never got busy",
        )
        server.api(f"kernels/{session['kernel']['id']}/restart", method="POST")
        # The sandbox kernel answers the running cell as it shuts down for the restart (the
        # restart's interrupt, or the sandbox's closing, whichever ends it first), where the
        # server passes the reply on before it replaces the kernel; else the call learns of
        # the restart from the new kernel or from the kernel's state.
        result = call.result(60)
        if result.is_error:
            assert "restarted" in text_of(result)
        else:
            out = structured(result)
            assert out["ok"] is False
            assert (out["ending"], out["message"]) in (
                ("crashed", "SandboxCrashed: the sandbox was closed while the code ran"),
                ("interrupted", "interrupted by the person, in the notebook"),
            )
        listed = structured(restarted.run("list_cells", {}))
        assert listed["cells"][-1]["state"] in ("done", "interrupted")
        again = structured(restarted.run("run_python", {"code": "print('after')"}))
        assert again["stdout"] == "after\n"
        # A restart between two calls: the next call's reply comes from a new kernel process,
        # and whatever its output channel missed, the result says so.
        server.api(f"kernels/{session['kernel']['id']}/restart", method="POST")
        third = structured(restarted.run("run_python", {"code": "print('third')"}))
        assert third["stdout"] == "third\n" or "restarted just before" in (third["note"] or "")
        fourth = structured(restarted.run("run_python", {"code": "print('fourth')"}))
        assert fourth["stdout"] == "fourth\n"
        assert fourth["note"] is None


def test_a_call_the_agent_cancels_interrupts_its_cell_and_keeps_the_state(
    server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "cancel.ipynb", KERNEL, [("markdown", "# Agent at work")])
    code = "import time\nticks = 0\nwhile True:\n    ticks += 1\n    time.sleep(0.05)"

    async def cancelled(client: Client) -> None:
        running = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            running.set()

        async with anyio.create_task_group() as group:

            async def call() -> None:
                await client.call_tool("run_python", {"code": code}, progress_callback=on_progress)

            group.start_soon(call)
            await running.wait()  # (a progress notification: the code runs)
            group.cancel_scope.cancel()

    with agent(server, work, "canceller", "cancel.ipynb") as canceller:
        canceller.submit(cancelled).result(60)
        after = structured(canceller.run("run_python", {"code": "print(ticks > 0)"}))
        assert after["stdout"] == "True\n"  # (interrupted, its state kept)
        listed = structured(canceller.run("list_cells", {}))
        assert [c["state"] for c in listed["cells"][1:]] == ["interrupted", "done"]
        cell = structured(canceller.run("read_cell", {"index": 1}))
    calls = [json.loads(line) for line in canceller.run_log.read_text().splitlines()]
    (call,) = [c for c in calls if c["outcome"] == "cancelled"]
    assert call["tool"] == "run_python"
    path = server.root / "cancel.ipynb"
    wait_until(lambda: len(on_disk(path)["cells"]) == 3, 30, path.read_text)
    saved = on_disk(path)
    assert saved["cells"][1]["id"] == cell["id"]
    assert saved["cells"][1]["metadata"]["rewyn_kernel"]["agent"]["call"] == call["id"]


def test_a_call_queues_behind_a_busy_kernel_and_runs_after_it(
    server: JupyterServer, work: Path
) -> None:
    write_notebook(server.root / "busy.ipynb", KERNEL, [("markdown", "# Agent at work")])
    with (
        agent(server, work, "first", "busy.ipynb") as first,
        agent(server, work, "second", "busy.ipynb") as second,
    ):
        busy = first.call("run_python", {"code": "import time\nwhile True:\n    time.sleep(0.05)"})
        wait_until(
            lambda: len(structured(first.run("list_cells", {}))["cells"]) == 2,
            60,
            first.stderr,
        )
        # The second call checks the kernel (on its control channel) while the first runs, and
        # queues its cell behind it.
        queued = second.call("run_python", {"code": "print('second')"})
        wait_until(
            lambda: len(structured(first.run("list_cells", {}))["cells"]) == 3,
            60,
            second.stderr,
        )
        assert not busy.done()
        assert not queued.done()
        (session,) = [s for s in server.api("sessions") if s["path"] == "busy.ipynb"]
        server.api(f"kernels/{session['kernel']['id']}/interrupt", method="POST")
        assert structured(busy.result(60))["interrupted_by"] == "person"
        assert structured(queued.result(60))["stdout"] == "second\n"


def test_a_flood_of_output_is_bounded_in_the_notebook(server: JupyterServer, work: Path) -> None:
    write_notebook(server.root / "flood.ipynb", KERNEL, [("markdown", "# Agent at work")])
    with agent(server, work, "flooder", "flood.ipynb") as flooder:
        out = structured(
            flooder.run(
                "run_python",
                {"code": "for _ in range(3000):\n    print('x' * 1000, flush=True)"},
            )
        )
        assert len(out["stdout"]) < 40_000  # (the result's budget)
        cell = structured(flooder.run("read_cell", {"index": -1}))
        kept = len(cell["stdout"]) + sum(cell["truncated"].values())
        assert kept <= MAX_CELL_OUTPUT_CHARS + 200


# -- every cell approved, and an agent that goes away -------------------------------------------


def _run_button(page: Page, cell_id: str) -> Any:
    return banner(page, cell_id).locator(".rewyn-AgentRun")


def test_with_approve_all_every_cell_waits_for_the_persons_run(
    page: Page, server: JupyterServer, work: Path
) -> None:
    """The "Done when" path: an agent on a low-risk kernel, started with --approve-all, whose
    every cell waits for the person's Run in the page. Its cells go above the person's trailing
    blank cell, and one number names each call in the result, the cell and the review."""
    write_notebook(
        server.root / "all.ipynb", KERNEL, [("markdown", "# Every cell asks"), ("code", "")]
    )
    assert open_notebook(page, server, "lab", "all.ipynb") == "rewyn-kernel"
    extra = ("--approve-all", "--approval-timeout", "120")
    with agent(server, work, "asks-always", "all.ipynb", *extra) as asking:
        call = asking.call("run_python", {"code": "answer = 6 * 7"})
        first = wait_for_pending(page, "answer = 6 * 7")
        assert first["agent"]["risk"] == "low"
        assert "approval for every call" in first["agent"]["reason"]
        assert not call.done()
        _run_button(page, first["id"]).click()
        out = structured(call.result(60))
        assert (out["approval"], out["ok"], out["call"]) == ("approved", True, 1)

        listed = structured(asking.run("list_cells", {}))  # (call 2: not run_python)
        assert [c["author"] for c in listed["cells"]] == ["person", "agent asks-always", "person"]

        call = asking.call("run_python", {"code": "print(answer)"})
        second = wait_for_pending(page, "print(answer)")
        assert not call.done()
        _run_button(page, second["id"]).click()
        result = call.result(60)
        out = structured(result)
        assert (out["approval"], out["stdout"], out["call"]) == ("approved", "42\n", 3)
        assert text_of(result).startswith("[ok] call 3 · cell 2 · ")

        # The person's blank cell stays last, below the agent's.
        shown = cells(page)
        assert [(c["type"], c["source"]) for c in shown] == [
            ("markdown", "# Every cell asks"),
            ("code", "answer = 6 * 7"),
            ("code", "print(answer)"),
            ("code", ""),
        ]
        assert [c["agent"]["number"] for c in shown[1:3]] == [1, 3]
        wait_until(
            lambda: [c["agent"]["state"] for c in agent_cells(page)] == ["approved", "approved"],
            30,
            lambda: f"{agent_cells(page)}",
        )

    # The run log's review names the same calls with the same numbers.
    done = subprocess.run(
        [sys.executable, "-m", "rewyn_kernel.cli", "review", str(asking.run_log), "-o",
         str(work / "all-review.ipynb")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    review = json.loads((work / "all-review.ipynb").read_text())
    lines = [
        output_text(cell).split(" · ")[:2]
        for cell in review["cells"]
        if cell["cell_type"] == "code" and cell["outputs"]
    ]
    assert lines == [["call 1", "run_python"], ["call 2", "list_cells"], ["call 3", "run_python"]]


def _server_pid(notebook: str) -> int:
    """The pid of the ``rewyn-kernel mcp --notebook NOTEBOOK`` this test started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"--notebook" in words and notebook.encode() in words:
            found.append(int(entry.name))
    (pid,) = found
    return pid


def test_a_pending_cell_whose_agent_is_gone_offers_no_run(
    page: Page, server: JupyterServer, work: Path
) -> None:
    """An agent that stops while its cell waits: the cell says it is withdrawn (the server
    stopped cleanly) or that the agent is gone (killed: it left the document), and neither
    offers Run or Reject any more."""
    write_notebook(server.root / "gone.ipynb", RISKY_KERNEL, [("markdown", "# Left behind")])
    assert open_notebook(page, server, "lab", "gone.ipynb") == "rewyn-kernel"
    extra = ("--approve-above", "low", "--approval-timeout", "600")
    with agent(server, work, "leaves", "gone.ipynb", *extra) as leaving:
        call = leaving.call("run_python", {"code": "print('too late')"})
        first = wait_for_pending(page, "print('too late')")
        assert _run_button(page, first["id"]).is_enabled()
    # The agent closed its connection: the server withdrew the cell as it stopped.
    wait_until(
        lambda: agent_cells(page, "leaves")[0]["agent"]["state"] == "withdrawn",
        60,
        lambda: f"{agent_cells(page)}\n{leaving.stderr()}",
    )
    shown = banner(page, first["id"])
    assert "withdrawn" in shown.inner_text()
    assert shown.locator("button").count() == 0
    assert call.done()

    with agent(server, work, "killed", "gone.ipynb", *extra) as killed:
        killed.call("run_python", {"code": "print('never answered')"})
        second = wait_for_pending(page, "print('never answered')")
        run = _run_button(page, second["id"])
        wait_until(run.is_enabled, 30, lambda: banner(page, second["id"]).inner_text())
        os.kill(_server_pid("gone.ipynb"), signal.SIGKILL)  # (no chance to withdraw anything)
        wait_until(
            lambda: banner(page, second["id"]).get_attribute("data-gone") == "true",
            90,
            lambda: banner(page, second["id"]).inner_text(),
        )
        assert not run.is_enabled()
        assert not banner(page, second["id"]).locator(".rewyn-AgentReject").is_enabled()
        assert "the agent is gone" in banner(page, second["id"]).inner_text()
        assert agent_cells(page, "killed")[0]["agent"]["state"] == "pending"
