"""Undo for cells (kernel/undo.py), on real kernels: ``%undo`` brings back the state before the
last cell (``%undo N``: the last N cells, ``%undo --to N``: back to before cell [N]), as far
back as ``checkpoints`` cells, names the cells it took back, says what it did not bring back
(files), uses no execution count, and nothing the sandbox's code does can trigger it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.kernel.undo import UNDO_KEY, Request, UsageError, first_line, is_undo, request
from rewyn_kernel.settings import KernelSettings

from .kernel_client import Cell, plain, running_kernel, write_ipykernel_spec, write_spec
from .kernel_client import run_cell as run_at_once

Kernel = tuple[KernelManager, BlockingKernelClient]


@pytest.fixture(scope="module")
def kernel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    write_spec(root, "rewyn-undo")
    write_spec(root, "rewyn-undo-one", ["--SandboxKernel.checkpoints=1"])
    write_ipykernel_spec(root, "ipykernel-undo")
    write_spec(root, "rewyn-undo-two", ["--SandboxKernel.checkpoints=2"])
    write_spec(root, "rewyn-undo-off", ["--SandboxKernel.checkpoints=0"])
    write_spec(root, "rewyn-undo-capped", ["--SandboxKernel.memory_limit_mb=256"])
    write_spec(root, "rewyn-undo-512", ["--SandboxKernel.memory_limit_mb=512"])
    return root


@pytest.fixture(scope="module")
def kernel(kernel_root: Path) -> Iterator[Kernel]:
    with running_kernel(kernel_root, "rewyn-undo") as started:
        yield started


PACE = 0.25
"""A person's pause after a cell (five times the sandbox's 50 ms wait for a next cell before it
keeps the state a cell left: cells sent at once share one checkpoint)."""


def run_cell(kc: BlockingKernelClient, code: str, **kw: Any) -> Cell:
    """Run a cell as a person does: then pause, so that its state is kept."""
    cell = run_at_once(kc, code, **kw)
    time.sleep(PACE)
    return cell


def undo_state(cell: Cell) -> dict[str, Any] | None:
    state = cell.reply["metadata"].get(METADATA_KEY, {}).get(UNDO_KEY)
    return state if isinstance(state, dict) else None


def value(kc: BlockingKernelClient, expression: str) -> str:
    cell = run_cell(kc, f"print({expression})")
    assert cell.status == "ok", cell.reply
    return cell.stream()


def test_an_undo_cell_is_only_percent_undo_and_its_arguments() -> None:
    for code in ("%undo", "  %undo \n", "\n%undo", "%undo 2", "%undo --to 12 ", "%undo x"):
        assert is_undo(code)
    for code in ("x = 1\n%undo", "print('%undo')", "%undo\nx = 1", "%undo 2\n3", "%undoo"):
        assert not is_undo(code)


def test_the_grammar_of_an_undo() -> None:
    assert request("%undo") == Request(cells=1)
    assert request(" %undo 3 \n") == Request(cells=3)
    assert request("%undo --to 12") == Request(to=12)
    assert request("%undo --to=12") == Request(to=12)
    for bad in ("%undo 0", "%undo -1", "%undo x", "%undo --to", "%undo --to 0", "%undo 2 3"):
        with pytest.raises(UsageError, match="%undo N the last N cells"):
            request(bad)
    with pytest.raises(UsageError, match=r"'\\x1b\[2J'"):  # (printable: never the terminal's)
        request("%undo \x1b[2J")


def test_a_cells_first_line_is_bounded_and_printable() -> None:
    assert first_line("\n  x = 1  \ny = 2") == "x = 1"
    assert first_line("s = '\x1b]0;title\x07'") == "s = '\\x1b]0;title\\x07'"
    long = first_line("x = " + "1" * 200)
    assert len(long) == 60
    assert long.endswith("...")


def test_the_default_keeps_several_cells() -> None:
    assert KernelSettings().checkpoints >= 10


def test_undo_brings_back_the_variables_before_the_last_cell(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "import numpy as np\na = np.arange(5)\nx = 1").status == "ok"
    changed = run_cell(kc, "x = 2\na[:] = 0\ndel np")  # (the array rewritten in place)
    assert changed.status == "ok"
    count = changed.reply["content"]["execution_count"]
    state = undo_state(changed)
    assert state is not None
    assert state["cell"] == count
    assert state["reach"][-2:] == [count - 1, count]
    undone = run_cell(kc, "%undo")
    assert undone.status == "ok", undone.reply
    said = undone.stream()
    assert (
        f"Undid cell [{count}] `x = 2`: the variables are as they were before cell [{count}]"
        in said
    )
    assert "Files are not rolled back" in said
    assert f"%undo again goes back over cell [{count - 1}]." in said
    assert undo_state(undone) == {
        "available": state["available"] - 1,
        "cell": count - 1,
        "reach": state["reach"][:-1],
        "undone": [count],
    }
    assert value(kc, "x, a.tolist(), np.__name__") == "1 [0, 1, 2, 3, 4] numpy\n"


def test_undo_twice_with_one_checkpoint_says_there_is_nothing_more(kernel_root: Path) -> None:
    with running_kernel(kernel_root, "rewyn-undo-one") as (_, kc):
        assert run_cell(kc, "z = 0").status == "ok"
        assert run_cell(kc, "z = 1").status == "ok"
        first = run_cell(kc, "%undo")
        assert first.status == "ok"
        assert "There is nothing more to undo." in first.stream()
        again = run_cell(kc, "%undo")
        assert again.status == "error"
        assert again.reply["content"]["ename"] == "UsageError"
        assert "Nothing to undo" in again.stream("stderr")
        assert "SandboxKernel.checkpoints" in again.stream("stderr")
        assert undo_state(again) == {"available": 0, "cell": None, "reach": []}
        assert value(kc, "z") == "0\n"


def test_code_in_the_sandbox_cannot_trigger_an_undo(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "forged = 1").status == "ok"
    magic = run_cell(kc, "forged = 2\nget_ipython().run_line_magic('undo', '')")
    assert magic.status == "error"
    assert "%undo must be a cell of its own" in plain(repr(magic.messages) + repr(magic.reply))
    ran = run_cell(kc, "forged = 3\nget_ipython().run_cell('%undo')")
    assert "%undo must be a cell of its own" in plain(repr(ran.messages))
    printed = run_cell(kc, "print('%undo')\nforged = 4")
    assert printed.stream() == "%undo\n"
    for cell in (magic, ran, printed):
        assert "undone" not in (undo_state(cell) or {})
        assert "Undid" not in repr(cell.messages)
    assert value(kc, "forged") == "4\n"


def test_two_checkpoints_go_back_two_cells(kernel_root: Path) -> None:
    with running_kernel(kernel_root, "rewyn-undo-two") as (_, kc):
        for n in (1, 2, 3):
            assert run_cell(kc, f"x = {n}").status == "ok"
        first = run_cell(kc, "%undo")
        assert first.status == "ok"
        assert "%undo again goes back over cell" in first.stream()
        assert undo_state(first)["available"] == 1  # type: ignore[index]
        second = run_cell(kc, "%undo")
        assert second.status == "ok"
        assert "nothing more to undo" in second.stream()
        assert run_cell(kc, "%undo").status == "error"
        assert value(kc, "x") == "1\n"


def test_cells_sent_at_once_share_one_checkpoint_and_cells_apart_keep_their_own(
    kernel_root: Path,
) -> None:
    """ "Run All" sends every cell before the first ends: none of them pays a fork (the sandbox
    forks a cell's checkpoint only once no next cell came within 50 ms), and one undo goes
    back over all of them, saying so. A cell run after a pause has its own again."""
    with running_kernel(kernel_root, "rewyn-undo-two") as (_, kc):
        assert run_cell(kc, "x = 0\nlog = []").status == "ok"
        time.sleep(0.3)  # (a person's pause: the state after it is kept)
        cells = [f"x = {n}\nlog.append({n})" for n in range(1, 7)]
        ids = [kc.execute(code) for code in cells]
        replies: dict[str, dict[str, Any]] = {}
        while len(replies) < len(ids):
            reply = kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") in ids:
                replies[reply["parent_header"]["msg_id"]] = reply
        assert all(replies[i]["content"]["status"] == "ok" for i in ids)
        counts = [replies[i]["content"]["execution_count"] for i in ids]
        notes = [
            msg
            for msg in drain_iopub(kc)
            if msg["msg_type"] == "stream" and "[rewyn:" in msg["content"]["text"]
        ]
        assert notes == []  # (cells at once are no failure: nothing to say)
        undone = run_cell(kc, "%undo")
        assert undone.status == "ok", undone.reply
        said = undone.stream()
        named = ", ".join(f"cell [{c}] `x = {n}`" for n, c in enumerate(counts[:5], 1))
        assert f"Undid {named} and 1 more cell, to [{counts[-1]}]: " in said, said
        assert "6 cells were undone, where 1 was asked for" in said
        assert value(kc, "x, log") == "0 []\n"
        time.sleep(0.3)
        assert run_cell(kc, "x = 7").status == "ok"
        time.sleep(0.3)
        assert run_cell(kc, "x = 8").status == "ok"
        alone = run_cell(kc, "%undo")
        assert "Undid cell [" in alone.stream()
        assert value(kc, "x") == "7\n"


def drain_iopub(kc: BlockingKernelClient) -> list[dict[str, Any]]:
    """The iopub messages that came so far (up to a quiet half second)."""
    messages = []
    while True:
        try:
            messages.append(kc.get_iopub_msg(timeout=0.5))
        except Exception:  # queue.Empty
            return messages


def test_checkpoints_off(kernel_root: Path) -> None:
    with running_kernel(kernel_root, "rewyn-undo-off") as (_, kc):
        ran = run_cell(kc, "x = 1")
        assert UNDO_KEY not in ran.reply["metadata"].get(METADATA_KEY, {})
        undo = run_cell(kc, "%undo")
        assert undo.status == "error"
        assert "checkpoints are off" in undo.stream("stderr")
        assert value(kc, "x") == "1\n"


def test_a_full_memory_cap_skips_the_checkpoint_and_the_cell_runs(kernel_root: Path) -> None:
    """Where the cap has no room for a checkpoint, the one kept goes first (as the memory
    comes near the cap), then the next cell's own is skipped, each with a note: the cells run
    as they would have without them."""
    with running_kernel(kernel_root, "rewyn-undo-capped") as (_, kc):
        fill = "b = bytearray(190 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nx = 1"
        filled = run_cell(kc, fill)
        assert filled.status == "ok"
        count = filled.reply["content"]["execution_count"]
        # (dropped while the cell ran, as the memory came near the cap)
        dropped = filled.stream("stderr")
        assert f"the state kept to undo cell [{count}] is gone" in dropped
        assert "dropped when the sandbox's memory came within 32 MiB" in dropped
        cell = run_cell(kc, "x = 2")
        assert cell.status == "ok"
        note = cell.stream("stderr")
        assert f"cell [{count + 1}] cannot be undone: " in note
        assert "memory cap" in note
        assert undo_state(cell) == {"available": 0, "cell": None, "reach": []}
        nothing = run_cell(kc, "%undo")
        assert nothing.status == "error"
        assert f"the state before cell [{count + 1}] could not be kept" in nothing.stream("stderr")
        assert value(kc, "x") == "2\n"
        assert run_cell(kc, "del b\nx = 3").status == "ok"  # (its checkpoint: still no room)
        assert run_cell(kc, "x = 4").stream("stderr") == ""  # (room again)
        assert run_cell(kc, "%undo").status == "ok"
        assert value(kc, "x") == "3\n"


def test_a_cell_that_needs_the_checkpoints_memory_gets_it(kernel_root: Path) -> None:
    """A cell that fits under the cap without its checkpoint runs to its end: the OOM killer
    takes the checkpoint (the first to go), and the kernel says the undo is gone."""
    touch = "for i in range(0, len({0}), 4096): {0}[i] = {1}\n"
    with running_kernel(kernel_root, "rewyn-undo-512") as (_, kc):
        assert run_cell(kc, "b = bytearray(200 << 20)\n" + touch.format("b", 1)).status == "ok"
        grow = touch.format("b", 2) + "c = bytearray(150 << 20)\n" + touch.format("c", 1)
        cell = run_cell(kc, grow + "print('done')")
        count = cell.reply["content"]["execution_count"]
        assert cell.status == "ok"
        assert cell.stream() == "done\n"
        assert f"the state kept to undo cell [{count}] is gone" in cell.stream("stderr")
        assert undo_state(cell) == {"available": 0, "cell": None, "reach": []}
        nothing = run_cell(kc, "%undo")
        assert nothing.status == "error"
        assert f"the state kept to undo cell [{count}] was dropped" in nothing.stream("stderr")
        assert value(kc, "len(b) >> 20, len(c) >> 20") == "200 150\n"


def test_the_note_lists_the_files_the_cell_changed_and_how_to_restore_them(
    kernel_root: Path, tmp_path: Path
) -> None:
    notebook = tmp_path / "project"
    notebook.mkdir()
    (notebook / "data.txt").write_text("first\n")
    with running_kernel(kernel_root, "rewyn-undo", cwd=notebook) as (_, kc):
        code = (
            "open('data.txt', 'w').write('second\\n')\n"
            "open('new.txt', 'w').write('new\\n')\nwritten = True"
        )
        assert run_cell(kc, code).status == "ok"
        undone = run_cell(kc, "%undo")
        said = undone.stream()
        assert "created: new.txt" in said
        assert "changed: data.txt" in said
        (command,) = [line.strip() for line in said.splitlines() if "--restore" in line]
        assert value(kc, "'written' in globals()") == "False\n"
    assert (notebook / "data.txt").read_text() == "second\n"  # (files are not rolled back)
    argv = command.split()
    assert argv[:3] == ["rewyn-kernel", "files", str(notebook)]
    cli = [str(Path(sys.executable).with_name("rewyn-kernel")), *argv[1:]]
    subprocess.run(cli, check=True, capture_output=True)
    assert (notebook / "data.txt").read_text() == "first\n"


def test_a_restart_drops_the_checkpoints(kernel_root: Path) -> None:
    with running_kernel(kernel_root, "rewyn-undo") as (km, kc):
        assert run_cell(kc, "x = 1").status == "ok"
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=60)
        undo = run_cell(kc, "%undo")
        assert undo.status == "error"
        assert "no cell has run since the kernel started" in undo.stream("stderr")


def count_of(cell: Cell) -> int:
    return int(cell.reply["content"]["execution_count"])


def test_a_bad_cell_then_a_look_then_undo_two_with_the_default_setting(kernel: Kernel) -> None:
    """The natural sequence: a cell that damages the data, a cell to look at the damage, then
    an undo of both, on a kernel installed without any flag."""
    _, kc = kernel
    assert run_cell(kc, "df = {'a': 1, 'b': 2}").status == "ok"
    bad = run_cell(kc, "df.pop('b')  # the bad cell\ndf['a'] = 0")
    look = run_cell(kc, "print(sorted(df.items()))")
    assert look.stream() == "[('a', 0)]\n"
    undone = run_cell(kc, "%undo 2")
    assert undone.status == "ok", undone.messages
    said = undone.stream()
    bad_n, look_n = count_of(bad), count_of(look)
    assert said.startswith(
        f"Undid cell [{bad_n}] `df.pop('b')  # the bad cell` and cell [{look_n}] "
        f"`print(sorted(df.items()))`: the variables are as they were before cell [{bad_n}] ran."
    ), said
    assert undo_state(undone)["undone"] == [bad_n, look_n]  # type: ignore[index]
    assert value(kc, "sorted(df.items())") == "[('a', 1), ('b', 2)]\n"


def test_undo_to_a_chosen_cell(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "y = 1").status == "ok"
    bad = run_cell(kc, "y = 2")
    cells = [bad, run_cell(kc, "y += 10"), run_cell(kc, "print(y)")]
    counts = [count_of(cell) for cell in cells]
    assert undo_state(cells[-1])["reach"][-3:] == counts  # type: ignore[index]
    too_far = run_cell(kc, "%undo --to 100000")
    assert too_far.status == "error"
    assert "Nothing was undone: the state before cell [100000] is not kept" in too_far.stream(
        "stderr"
    )
    undone = run_cell(kc, f"%undo --to {counts[0]}")
    assert undone.status == "ok", undone.messages
    said = undone.stream()
    assert said.startswith(
        f"Undid cell [{counts[0]}] `y = 2`, cell [{counts[1]}] `y += 10` and cell [{counts[2]}] "
        f"`print(y)`: the variables are as they were before cell [{counts[0]}] ran."
    ), said
    state = undo_state(undone)
    assert state is not None
    assert state["undone"] == counts
    assert not set(counts) & set(state["reach"])
    assert value(kc, "y") == "1\n"
    gone = run_cell(kc, f"%undo --to {counts[1]}")  # (undone: its state is no longer kept)
    assert gone.status == "error"
    assert "is not kept" in gone.stream("stderr")
    assert value(kc, "y") == "1\n"


def test_an_undo_that_cannot_be_read_changes_nothing(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "w = 1").status == "ok"
    wrong = run_cell(kc, "%undo everything")
    assert wrong.status == "error"
    assert "%undo does not take 'everything'" in wrong.stream("stderr")
    assert "%undo --to N" in wrong.stream("stderr")
    too_many = run_cell(kc, "%undo 20")
    assert too_many.status == "error"
    assert "20 cells were asked for, and the state kept goes back" in too_many.stream("stderr")
    assert value(kc, "w") == "1\n"
    assert run_cell(kc, "%undo").stream().startswith("Undid cell [")  # (the print's)


def execute_counts(kc: BlockingKernelClient, code: str, *, store_history: bool) -> tuple[int, int]:
    """Run ``code``; the execution counts of its execute_input and its reply."""
    msg_id = kc.execute(code, store_history=store_history)
    reply = kc.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == msg_id
    shown = None
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_input":
            shown = msg["content"]["execution_count"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert shown is not None
    time.sleep(PACE)
    return int(shown), int(reply["content"]["execution_count"])


def test_an_undo_uses_no_execution_count(kernel_root: Path, kernel: Kernel) -> None:
    """An undo's counts are those of a cell ipykernel does not store in its history: the reply
    has the last cell's, and the next cell gets the count the undo would have taken."""
    seen = {}
    with running_kernel(kernel_root, "ipykernel-undo") as (_, control):
        _, before = execute_counts(control, "x = 1", store_history=True)
        shown, replied = execute_counts(control, "x = 2", store_history=False)
        _, after = execute_counts(control, "x = 3", store_history=True)
        seen["ipykernel"] = (shown - before, replied - before, after - before)
    _, kc = kernel
    _, before = execute_counts(kc, "x = 1", store_history=True)
    shown, replied = execute_counts(kc, "%undo", store_history=True)
    _, after = execute_counts(kc, "x = 3", store_history=True)
    seen["sandbox"] = (shown - before, replied - before, after - before)
    assert seen == {"ipykernel": (1, 0, 1), "sandbox": (1, 0, 1)}
