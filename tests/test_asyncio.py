"""asyncio in cells, on the sandbox kernel as on ipykernel: cells run in a running loop, and
the loop runs between cells, so a task started in one cell makes progress before the next.

Both kernels run the same cells; what the sandbox must also keep (an interrupt, an undo's
checkpoint) is checked on it alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from .kernel_client import Cell, run_cell, running_kernel, write_ipykernel_spec, write_spec

Kernel = tuple[KernelManager, BlockingKernelClient]

TICKING = """
import asyncio
ticks = []
async def tick(n):
    for i in range(n):
        await asyncio.sleep(0.05)
        ticks.append(i)
        print('tick', i)
"""


@pytest.fixture(scope="module")
def kernel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    write_spec(root, "rewyn-asyncio")
    write_ipykernel_spec(root, "asyncio-ipykernel")
    return root


@pytest.fixture(scope="module")
def sandbox(kernel_root: Path) -> Iterator[Kernel]:
    with running_kernel(kernel_root, "rewyn-asyncio") as started:
        yield started


@pytest.fixture(scope="module")
def ipykernel(kernel_root: Path) -> Iterator[Kernel]:
    with running_kernel(kernel_root, "asyncio-ipykernel") as started:
        yield started


def between_cells(kc: BlockingKernelClient, until: str, timeout: float = 10) -> str:
    """The text streamed on iopub while no cell runs, up to ``until`` (or ``timeout``)."""
    text = ""
    deadline = time.monotonic() + timeout
    while until not in text and time.monotonic() < deadline:
        try:
            message = kc.get_iopub_msg(timeout=0.1)
        except Exception:  # queue.Empty
            continue
        if message["msg_type"] == "stream":
            text += message["content"]["text"]
    return text


def streams(cell: Cell) -> list[tuple[str, str]]:
    return [(m["content"]["name"], m["content"]["text"]) for m in cell.of_type("stream")]


def results(cell: Cell) -> list[str]:
    return [m["content"]["data"]["text/plain"] for m in cell.of_type("execute_result")]


@pytest.mark.parametrize("which", ["ipykernel", "sandbox"])
def test_a_task_started_in_a_cell_runs_between_cells(
    which: str, request: pytest.FixtureRequest
) -> None:
    _, kc = request.getfixturevalue(which)
    started = run_cell(kc, TICKING + "task = asyncio.ensure_future(tick(3))\nlen(ticks)")
    assert started.status == "ok"
    assert results(started) == ["0"]  # (its first step comes after the cell)
    assert "tick 2\n" in between_cells(kc, "tick 2\n")
    after = run_cell(kc, "ticks, task.done()")
    assert results(after) == ["([0, 1, 2], True)"]


@pytest.mark.parametrize("which", ["ipykernel", "sandbox"])
def test_cells_run_in_a_running_loop(which: str, request: pytest.FixtureRequest) -> None:
    _, kc = request.getfixturevalue(which)
    code = (
        "import asyncio\n"
        "made = asyncio.create_task(asyncio.sleep(0, 'made'))\n"
        "pending = asyncio.sleep(0)\n"
        "try:\n"
        "    asyncio.run(pending)\n"
        "except RuntimeError as error:\n"
        "    pending.close()\n"
        "    print(error)\n"
        "asyncio.get_running_loop() is asyncio.get_event_loop()"
    )
    cell = run_cell(kc, code)
    assert cell.status == "ok"
    assert streams(cell) == [
        ("stdout", "asyncio.run() cannot be called from a running event loop\n")
    ]
    assert results(cell) == ["True"]
    awaited = run_cell(kc, "await made")
    assert results(awaited) == ["'made'"]
    gui = run_cell(kc, "%gui asyncio")
    assert gui.status == "ok"
    assert gui.of_type("stream", "error", "display_data") == []


@pytest.mark.parametrize("which", ["ipykernel", "sandbox"])
def test_a_task_that_fails_between_cells_is_logged_to_stderr(
    which: str, request: pytest.FixtureRequest
) -> None:
    _, kc = request.getfixturevalue(which)
    code = (
        "import asyncio\n"
        "async def failing():\n"
        "    await asyncio.sleep(0.05)\n"
        "    raise ValueError('the task failed')\n"
        "asyncio.ensure_future(failing());"
    )
    assert run_cell(kc, code).status == "ok"
    logged = between_cells(kc, "ValueError: the task failed")
    assert "Task exception was never retrieved" in logged
    assert "ValueError: the task failed" in logged


def test_an_interrupt_stops_an_awaiting_cell_and_the_loop_goes_on(sandbox: Kernel) -> None:
    km, kc = sandbox
    assert run_cell(kc, TICKING + "kept = 'kept'").status == "ok"
    began = time.monotonic()
    cell = run_cell(kc, "await asyncio.sleep(60)", after=(1.0, km.interrupt_kernel))
    assert time.monotonic() - began < 20
    assert cell.status == "error"
    assert cell.reply["content"]["ename"] == "KeyboardInterrupt"
    # (ipykernel lets the sleep end, then says CancelledError: here the cell stops at once)
    assert results(run_cell(kc, "kept")) == ["'kept'"]
    run_cell(kc, "task = asyncio.ensure_future(tick(2))")
    assert "tick 1\n" in between_cells(kc, "tick 1\n")


def test_after_an_undo_the_restored_tasks_run_again(sandbox: Kernel) -> None:
    _, kc = sandbox
    code = (
        "import asyncio\n"
        "beats = []\n"
        "async def beat():\n"
        "    while True:\n"
        "        await asyncio.sleep(0.02)\n"
        "        beats.append(1)\n"
        "heart = asyncio.ensure_future(beat())"
    )
    assert run_cell(kc, code).status == "ok"
    time.sleep(0.25)  # (a person's pace: the state it left is kept, see test_undo.PACE)
    assert run_cell(kc, "changed = True").status == "ok"
    undone = run_cell(kc, "%undo")
    assert undone.status == "ok", undone.messages
    assert run_cell(kc, "before = len(beats)\n'changed' in dir()").status == "ok"
    later = run_cell(kc, "await asyncio.sleep(0.3)\nlen(beats) > before, heart.done()")
    assert results(later) == ["(True, False)"]
    assert results(run_cell(kc, "heart.cancel()")) == ["True"]
