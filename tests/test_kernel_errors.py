"""Errors IPython shows without the cell raising, on the sandbox kernel and on ipykernel.

``%run`` of a failing script and an event callback that raises are shown by IPython's
``showtraceback`` while the cell goes on: ipykernel publishes each as an ``error`` output, in
order with the cell's other output, and the cell's reply says ``ok``. Both kernels run the same
cells here, and what a frontend receives is compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from rewyn_kernel.kernel.record import SHOWN_ERROR_MIME

from .kernel_client import Cell, plain, run_cell, running_kernel, write_ipykernel_spec, write_spec


@pytest.fixture(scope="module")
def kernel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    write_spec(root, "rewyn-errors")
    write_ipykernel_spec(root, "errors-ipykernel")
    return root


@pytest.fixture(scope="module")
def sandbox(kernel_root: Path) -> Iterator[BlockingKernelClient]:
    with running_kernel(kernel_root, "rewyn-errors") as (_, kc):
        yield kc


@pytest.fixture(scope="module")
def ipykernel(kernel_root: Path) -> Iterator[BlockingKernelClient]:
    with running_kernel(kernel_root, "errors-ipykernel") as (_, kc):
        yield kc


def shown(cell: Cell) -> list[tuple[Any, ...]]:
    """What a frontend shows, in order: streams (first line: callbacks' reprs hold addresses),
    results' types, and errors with the last line of their traceback."""
    found: list[tuple[Any, ...]] = []
    for message in cell.messages:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            found.append((kind, content["name"], content["text"].split(" at ")[0]))
        elif kind in ("execute_result", "display_data"):
            found.append((kind, sorted(content["data"])))
        elif kind == "error":
            last = plain(content["traceback"][-1]).strip() if content["traceback"] else ""
            found.append((kind, content["ename"], content["evalue"], last))
    return found


def both(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient, code: str
) -> tuple[Cell, Cell]:
    return run_cell(ipykernel, code), run_cell(sandbox, code)


def test_a_failing_run_shows_its_traceback_and_the_cell_goes_on(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    script = "print('before')\nraise ValueError('boom')\n"
    both(ipykernel, sandbox, f"open('failing_script.py', 'w').write({script!r})")
    control, cell = both(ipykernel, sandbox, "%run failing_script.py\nprint('after')")
    assert control.status == cell.status == "ok"  # (ipykernel's: %run does not raise)
    expected = [
        ("stream", "stdout", "before\n"),
        ("error", "ValueError", "boom", "ValueError: boom"),
        ("stream", "stdout", "after\n"),
    ]
    assert shown(control) == shown(cell) == expected
    (error,) = cell.of_type("error")
    assert any("raise ValueError('boom')" in plain(line) for line in error["content"]["traceback"])
    # The display it travelled in is not shown as one.
    assert not any(SHOWN_ERROR_MIME in m["content"].get("data", {}) for m in cell.messages)


@pytest.mark.parametrize("event", ["pre_run_cell", "post_run_cell", "post_execute"])
def test_an_event_callback_that_raises_shows_its_traceback(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient, event: str
) -> None:
    define = (
        "def failing_callback(*args):\n"
        "    raise RuntimeError('the callback failed')\n"
        f"get_ipython().events.register({event!r}, failing_callback)"
    )
    both(ipykernel, sandbox, define)
    try:
        control, cell = both(ipykernel, sandbox, "6 * 7")
    finally:
        both(ipykernel, sandbox, f"get_ipython().events.unregister({event!r}, failing_callback)")
    assert control.status == cell.status == "ok"
    assert shown(cell) == shown(control)
    callback = ("error", "RuntimeError", "the callback failed", "RuntimeError: the callback failed")
    assert callback in shown(cell)
    said = "Error in callback <function failing_callback"
    assert cell.stream().startswith(said)


def test_a_cell_run_from_a_cell_and_showtraceback_show_their_errors(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    code = (
        "get_ipython().run_cell('1 / 0')\n"
        "get_ipython().showtraceback((ValueError, ValueError('shown'), None))\n"
        "print('the cell goes on')"
    )
    control, cell = both(ipykernel, sandbox, code)
    assert control.status == cell.status == "ok"
    assert shown(cell) == shown(control)
    assert [m[1] for m in shown(cell) if m[0] == "error"] == ["ZeroDivisionError", "ValueError"]


def test_the_cells_own_error_is_still_its_reply(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    control, cell = both(ipykernel, sandbox, "print('first')\n1 / 0")
    assert control.status == cell.status == "error"
    assert cell.reply["content"]["ename"] == "ZeroDivisionError"
    assert shown(cell) == shown(control)


def test_the_worker_and_the_kernel_name_the_shown_error_alike() -> None:
    from rewyn_kernel.runtime.worker import ipython

    assert ipython.SHOWN_ERROR_MIME == SHOWN_ERROR_MIME
