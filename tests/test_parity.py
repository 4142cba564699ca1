"""The sandbox kernel against plain ipykernel, cell by cell, in the same run.

Each test runs the same cells on ipykernel (this interpreter's, the control) and on a sandbox
kernel: the default one (bubblewrap) and a docker one on the data-science image (Debian's
IPython, pandas and matplotlib). It compares what a frontend receives, in order: streams (runs of
one stream merged), display and result MIME types, clears and errors. Where a sandbox must
differ (an interactive matplotlib backend), the test says what it gives instead.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .conftest import DATASCIENCE_IMAGE, engine_problem, unavailable
from .kernel_client import Cell, plain, run_cell, running_kernel, write_spec

EVENT_MIME = "application/vnd.rewyn.sandbox-event+json"
NOTE = re.compile(r"^\[rewyn: .*\]$")
SANDBOXES = ("bubblewrap", "docker")


@pytest.fixture(scope="module")
def kernel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parity")
    spec = root / "kernels" / "parity-ipykernel"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "ipykernel", "language": "python"})
    )
    write_spec(root, "parity-bubblewrap")
    flags = ["--SandboxKernel.provider=container", f"--SandboxKernel.image={DATASCIENCE_IMAGE}"]
    write_spec(root, "parity-docker", flags)
    small = ["--SandboxKernel.memory_limit_mb=256"]
    write_spec(root, "parity-small-bubblewrap", small)
    write_spec(root, "parity-small-docker", [*flags, *small])
    return root


def _start(root: Path, name: str) -> Iterator[BlockingKernelClient]:
    folder = Path(tempfile.mkdtemp(prefix="parity-notebook-", dir=root))
    os.chown(folder, 1000, 1000)  # (a person's notebook folder)
    with running_kernel(root, name, cwd=folder) as (_, kc):
        yield kc


@pytest.fixture(scope="module")
def ipykernel(kernel_root: Path) -> Iterator[BlockingKernelClient]:
    yield from _start(kernel_root, "parity-ipykernel")


@pytest.fixture(scope="module", params=SANDBOXES)
def sandbox(request: pytest.FixtureRequest, kernel_root: Path) -> Iterator[BlockingKernelClient]:
    if request.param == "docker":
        problem = engine_problem("docker")
        if problem:
            unavailable(problem)
    yield from _start(kernel_root, f"parity-{request.param}")


def shape(cell: Cell) -> list[tuple[Any, ...]]:
    """What a frontend shows of a cell, in order, without the sandbox's notes and record."""
    shown: list[tuple[Any, ...]] = []
    for message in cell.messages:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            text = "".join(
                line for line in content["text"].splitlines(True) if not NOTE.match(line.rstrip())
            )
            if not text:
                continue
            if shown and shown[-1][:2] == ("stream", content["name"]):
                shown[-1] = ("stream", content["name"], shown[-1][2] + text)
            else:
                shown.append(("stream", content["name"], text))
        elif kind in ("display_data", "execute_result", "update_display_data"):
            mimes = tuple(sorted(mime for mime in content["data"] if mime != EVENT_MIME))
            if mimes:
                shown.append((kind, mimes))
        elif kind == "clear_output":
            shown.append((kind, content["wait"]))
        elif kind == "error":
            shown.append((kind, content["ename"]))
    return shown


def notes(cell: Cell) -> list[str]:
    """The sandbox's ``[rewyn: ...]`` lines in the cell's streams."""
    return [
        line
        for message in cell.of_type("stream")
        for line in message["content"]["text"].splitlines()
        if NOTE.match(line)
    ]


def both(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient, code: str
) -> tuple[Cell, Cell]:
    return run_cell(ipykernel, code), run_cell(sandbox, code)


def test_libraries_asking_whether_they_run_in_a_notebook_get_ipykernels_answer(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    code = (
        "import os, sys, pandas\n"
        "ip = get_ipython()\n"
        "print(type(ip).__name__, 'zmq' in str(type(ip)).lower(), 'IPKernelApp' in ip.config,\n"
        "      hasattr(ip, 'kernel'), sys.stdout.isatty(), 'JPY_PARENT_PID' in os.environ,\n"
        "      'ipykernel' in sys.modules, pandas.get_option('display.max_columns'))"
    )
    plain_cell, sandboxed = both(ipykernel, sandbox, code)
    assert plain_cell.stream() == "ZMQInteractiveShell True True True False True True 20\n"
    assert sandboxed.stream() == plain_cell.stream()
    # A wide frame is cut as on ipykernel (pandas took the sandbox for a terminal: 0 columns).
    wide = "pandas.DataFrame([[0] * 40] * 3)"
    plain_cell, sandboxed = both(ipykernel, sandbox, wide)
    text = [m["content"]["data"]["text/plain"] for m in plain_cell.of_type("execute_result")]
    assert [m["content"]["data"]["text/plain"] for m in sandboxed.of_type("execute_result")] == text


def test_bytes_from_formatters_are_base64_as_on_ipykernel(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    jpeg = b"\xff\xd8\xff\xe0" + bytes(range(100))
    code = (
        f"class Picture:\n"
        f"    def _repr_png_(self): return {png!r}\n"
        f"    def _repr_jpeg_(self): return {jpeg!r}\n"
        "from IPython.display import Image, display\n"
        f"display(Image(data={png!r}))\n"
        "Picture()"
    )
    plain_cell, sandboxed = both(ipykernel, sandbox, code)
    assert shape(sandboxed) == shape(plain_cell)
    assert notes(sandboxed) == []
    for cell in (plain_cell, sandboxed):
        shown = cell.of_type("display_data")[0]["content"]["data"]
        result = cell.of_type("execute_result")[0]["content"]["data"]
        assert base64.b64decode(shown["image/png"]) == png
        assert base64.b64decode(result["image/png"]) == png
        assert base64.b64decode(result["image/jpeg"]) == jpeg


def test_shell_commands_run_under_a_terminal_with_the_sandboxs_python(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    code = "!echo out; echo err >&2; echo more"
    plain_cell, sandboxed = both(ipykernel, sandbox, code)
    assert shape(plain_cell) == [("stream", "stdout", "out\r\nerr\r\nmore\r\n")]
    assert shape(sandboxed) == shape(plain_cell)
    # (what IPython runs under a terminal; ``x = !cmd`` reads a pipe, on ipykernel too)
    where = "import sys; print(sys.stdout.isatty(), sys.prefix, sys.version_info[:3])"
    interpreter = run_cell(sandbox, where).stream().strip().replace("False", "True")
    for name in ("python", "python3"):
        cell = run_cell(sandbox, f'!{name} -c "{where}"')
        assert shape(cell) == [("stream", "stdout", f"{interpreter}\r\n")], shape(cell)
    cell = run_cell(sandbox, "!pip --version")
    assert cell.stream().startswith("pip "), shape(cell)


def test_output_keeps_ipykernels_order_around_clears_and_displays(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    cells = (
        "from IPython.display import clear_output, display\n"
        "print('gone'); clear_output(); print('kept')",
        "print('a'); display('x'); print('b'); clear_output(wait=True); print('c')",
        "import sys\nfor n in range(5):\n    print(n); sys.stderr.write('e'); display(n)",
    )
    for code in cells:
        for _ in range(3):  # (the order must hold every time, not by luck)
            plain_cell, sandboxed = both(ipykernel, sandbox, code)
            assert shape(sandboxed) == shape(plain_cell), code


def test_no_frame_of_the_worker_in_an_interrupts_traceback(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    code = "import os, signal\ndef stop():\n    os.kill(os.getpid(), signal.SIGINT)\nstop()"
    plain_cell, sandboxed = both(ipykernel, sandbox, code)
    assert shape(sandboxed) == shape(plain_cell) == [("error", "KeyboardInterrupt")]
    frames = [plain(entry) for entry in sandboxed.of_type("error")[0]["content"]["traceback"]]
    assert not [frame for frame in frames if "rewyn" in frame], frames
    expected = [plain(e) for e in plain_cell.of_type("error")[0]["content"]["traceback"]]
    assert len(frames) == len(expected), (frames, expected)


THREAD_AFTER_ITS_CELL = (
    "import threading, ipywidgets\n"
    "bar = ipywidgets.IntProgress(max=3)\n"
    "display(bar)\n"
    "def work():\n"
    "    for step in (1, 2, 3):\n"
    "        bar.value = step\n"
    "    print('done in a thread')\n"
    "threading.Timer(0.5, work).start()"
)


def after_idle(kc: BlockingKernelClient, parent: str, last: str) -> list[tuple[str, Any]]:
    """What comes on iopub after a cell's idle status, with that cell as its parent, up to a
    stream holding ``last``: (kind, what) pairs."""
    seen: list[tuple[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except Exception:  # queue.Empty
            continue
        if msg["parent_header"].get("msg_id") != parent:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "comm_msg":
            seen.append((kind, content["data"].get("state")))
        elif kind == "stream":
            seen.append((kind, content["text"]))
            if last in content["text"]:
                return seen
        else:
            seen.append((kind, None))
    raise AssertionError(f"no {last!r} after the cell's end: {seen}")


def test_what_a_thread_sends_after_its_cell_reaches_the_frontend_as_on_ipykernel(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    shown = []
    for kc in (ipykernel, sandbox):
        cell = run_cell(kc, THREAD_AFTER_ITS_CELL)  # (returns at the cell's idle)
        assert cell.reply["content"]["status"] == "ok"
        parent = cell.reply["parent_header"]["msg_id"]
        later = after_idle(kc, parent, "done in a thread")
        bar = [what for kind, what in later if kind == "comm_msg"]
        assert bar == [{"value": 1}, {"value": 2}, {"value": 3}], later
        shown.append("".join(what for kind, what in later if kind == "stream"))
    assert shown[1] == shown[0] == "done in a thread\n"


RESTART_NOTE = "Note: you may need to restart the kernel to use updated packages."
"""What IPython's %pip prints after it runs pip (ipykernel shows it under every install)."""


def test_an_install_runs_offline_and_one_that_needs_the_network_says_why(
    sandbox: BlockingKernelClient,
) -> None:
    # (never run on ipykernel: pip there would reach the package index)
    # Everything asked for is installed: pip succeeds offline, as on ipykernel, with no note.
    # (--break-system-packages: the data-science image's pip is Debian's, PEP 668)
    done = run_cell(sandbox, "%pip install -q --break-system-packages ipywidgets")
    assert shape(done) == [("stream", "stdout", RESTART_NOTE + "\n")], shape(done)
    assert notes(done) == []
    satisfied = run_cell(sandbox, "!pip install --break-system-packages ipywidgets")
    assert "Requirement already satisfied: ipywidgets" in satisfied.stream(), shape(satisfied)
    assert notes(satisfied) == []
    # A download: pip's own error, then one note that says why, and no "restart" line.
    for code in ("%pip install nothing-here", "!pip install nothing-here", "%uv pip install x"):
        cell = run_cell(sandbox, code)
        if code.startswith("%uv") and (
            "No module named uv" in cell.stream() or "`%uv` not found" in cell.stream("stderr")
        ):
            continue  # (no uv, or an IPython without %uv: nothing ran, nothing to explain)
        assert RESTART_NOTE not in cell.stream(), code
        assert len(notes(cell)) == 1, (code, notes(cell))
        assert "network='none'" in notes(cell)[0]
        assert "pip install failed" in notes(cell)[0]
        assert run_cell(sandbox, "print(_exit_code)").stream() != "0\n", code
    # conda has no offline install worth running: refused at once, saying why, and only that.
    conda = run_cell(sandbox, "%conda install numpy")
    assert shape(conda) == [], shape(conda)
    assert len(notes(conda)) == 1
    assert "conda install needs the network" in notes(conda)[0]


def test_ipykernels_own_magics_work_in_the_sandbox(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    for code in ("%autosave 60", "%autosave 0", "%clear", "%less", "%more"):
        plain_cell, sandboxed = both(ipykernel, sandbox, code)
        assert [entry for entry in shape(sandboxed) if entry[0] == "stream"] == [
            entry for entry in shape(plain_cell) if entry[0] == "stream"
        ], code
        assert sandboxed.reply["content"]["status"] == plain_cell.reply["content"]["status"]
    # %less and %more page a file, as ipykernel's pager does (a payload of the reply).
    both(ipykernel, sandbox, "open('paged.txt', 'w').write('first\\nsecond\\n')")
    for code in ("%less paged.txt", "%more paged.txt"):
        plain_cell, sandboxed = both(ipykernel, sandbox, code)
        pages = [c.reply["content"]["payload"] for c in (plain_cell, sandboxed)]
        assert pages[1] == pages[0]
        assert pages[0][0]["data"]["text/plain"] == "first\nsecond\n"
    # The connection stays on the host: how to connect, never the key.
    plain_cell, sandboxed = both(ipykernel, sandbox, "%connect_info")
    assert '"key"' in plain_cell.stream()
    assert shape(sandboxed)[0][:2] == ("stream", "stdout")
    assert len(shape(sandboxed)) == 1
    assert "--existing" in sandboxed.stream()
    assert 'key"' not in sandboxed.stream()
    # A program on the host is not the code's to start (not run on ipykernel: it would).
    qtconsole = run_cell(sandbox, "%qtconsole")
    assert shape(qtconsole) == []
    assert "jupyter qtconsole --existing" in notes(qtconsole)[0]


def test_the_widget_backend_without_ipympl_fails_as_on_ipykernel(
    ipykernel: BlockingKernelClient, sandbox: BlockingKernelClient
) -> None:
    # (ipympl hidden, as where it is not installed: there is nothing to fall back from)
    code = "import sys\nsys.modules['ipympl'] = None\n%matplotlib widget"
    plain_cell, sandboxed = both(ipykernel, sandbox, code)
    # (matplotlib 3.9 and later: RuntimeError, not a backend it knows; before, as on the
    # data-science image: the import's)
    failures = {("error", "RuntimeError"), ("error", "ModuleNotFoundError")}
    assert shape(plain_cell) in ([f] for f in failures), shape(plain_cell)
    assert shape(sandboxed) in ([f] for f in failures), shape(sandboxed)
    assert notes(sandboxed) == []
    both(ipykernel, sandbox, "del sys.modules['ipympl']")


@pytest.mark.parametrize(
    "choose",
    [
        "%matplotlib qt",
        "import matplotlib; matplotlib.use('webagg')",
        "import matplotlib; matplotlib.use('QtAgg')\nimport matplotlib.pyplot as plt; plt.ion()",
    ],
)
def test_an_interactive_matplotlib_backend_draws_inline_with_one_note(
    kernel_root: Path, choose: str
) -> None:
    """ipykernel draws these in a window or through a web server of matplotlib's own, which a
    sandbox does not have: the figure is drawn inline instead, said once, and the cells after
    it work."""
    with running_kernel(kernel_root, "parity-bubblewrap") as (_, kc):
        first = run_cell(kc, choose)
        assert first.status == "ok", [m["content"] for m in first.messages]
        plot = run_cell(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()")
        assert shape(plot) == [("display_data", ("image/png", "text/plain"))], shape(plot)
        again = run_cell(kc, "plt.plot([2, 1]); plt.show()")
        assert shape(again) == [("display_data", ("image/png", "text/plain"))], shape(again)
        said = notes(first) + notes(plot) + notes(again)
        assert len(said) == 1, said
        assert "shown inline" in said[0]


@pytest.mark.parametrize(
    ("choose", "noted"),
    [
        ("%matplotlib notebook", True),
        ("%matplotlib widget", False),
        ("import matplotlib; matplotlib.use('nbagg')\nimport matplotlib.pyplot as plt", True),
        (
            "import matplotlib as m; m.use('nbagg')\nimport matplotlib.pyplot as plt; plt.ion()",
            True,
        ),
    ],
)
def test_the_browsers_backends_draw_interactive_figures_through_ipympl(
    kernel_root: Path, choose: str, noted: bool
) -> None:
    """ipympl's figures are widgets, relayed as ipykernel relays them (the same MIME types);
    nbagg, whose JavaScript output a sandbox cannot relay, is ipympl's here, said once."""
    with running_kernel(kernel_root, "parity-bubblewrap") as (_, kc):
        first = run_cell(kc, choose)
        assert first.status == "ok", [m["content"] for m in first.messages]
        # (shown by plt.show(), and after the cell where interactive: ion(), %matplotlib)
        show = "" if "%" in choose or "ion()" in choose else "; plt.show()"
        plot = run_cell(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 3])" + show)
        views = [tuple(sorted(m["content"]["data"])) for m in plot.of_type("display_data")]
        assert len(views) == 1, shape(plot)
        assert "application/vnd.jupyter.widget-view+json" in views[0], views
        said = notes(first) + notes(plot)
        assert len(said) == int(noted), said
        if noted:
            assert "ipympl" in said[0], said


@pytest.mark.parametrize("where", SANDBOXES)
def test_what_the_sandbox_causes_is_said_in_words(kernel_root: Path, where: str) -> None:
    """Memory at the cap, a program killed for memory, a network call without a network: each
    says which setting did it (the person would otherwise read a bare MemoryError, -9 or
    'Temporary failure in name resolution')."""
    if where == "docker" and engine_problem("docker"):
        unavailable(str(engine_problem("docker")))
    folder = Path(tempfile.mkdtemp(prefix="parity-notebook-", dir=kernel_root))
    os.chown(folder, 1000, 1000)
    with running_kernel(kernel_root, f"parity-small-{where}", cwd=folder) as (_, kc):
        kc.kernel_info()
        banner = kc.get_shell_msg(timeout=30)["content"]["banner"]
        assert "memory 256 MiB" in banner, banner
        assert "network none" in banner, banner
        cells = {
            "memory": "big = bytearray(1 << 30)",
            "network": "import urllib.request\nurllib.request.urlopen('http://pypi.org/simple/')",
        }
        for setting, code in cells.items():
            cell = run_cell(kc, code)
            traceback = [plain(e) for e in cell.of_type("error")[0]["content"]["traceback"]]
            # (a MemoryError gets a hint; where the cap killed the code first, it says so)
            said = {"memory": "memory limit", "network": "network='none'"}[setting]
            assert said in traceback[-1], traceback
        # A program the code started is killed by the memory cap; the code goes on.
        code = (
            "import subprocess, sys\n"
            # (first in line for the OOM killer, so the cap kills a program, not the code)
            'hog = \'open("/proc/self/oom_score_adj", "w").write("1000"); '
            'x = b"x" * (100 << 20); import time; time.sleep(2)\'\n'
            "runs = [subprocess.Popen([sys.executable, '-c', hog]) for _ in range(3)]\n"
            "print(sorted(run.wait() for run in runs)[0])"
        )
        cell = run_cell(kc, code)
        assert cell.stream() == "-9\n", shape(cell)
        assert any("killed for exceeding the memory limit of 256 MiB" in n for n in notes(cell))


def test_a_restart_asked_from_a_cell_is_the_frontends_to_make(
    sandbox: BlockingKernelClient,
) -> None:
    """Notebooks restart their kernel with ``get_ipython().kernel.do_shutdown(True)``: on a
    sandbox kernel, as ``exit()``, a note says the Kernel menu does it; the state stays."""
    run_cell(sandbox, "kept = 1")
    cell = run_cell(sandbox, "get_ipython().kernel.do_shutdown(True)")
    assert cell.status == "ok", shape(cell)
    assert any("Kernel menu" in note for note in notes(cell)), notes(cell)
    assert run_cell(sandbox, "print(kept)").stream() == "1\n"


def test_an_error_past_ipythons_own_handling_ends_the_cell_not_the_sandbox(
    sandbox: BlockingKernelClient,
) -> None:
    """IPython 8 (the image's) lets automatic pdb's StdinNotImplementedError out of
    ``run_cell`` when the frontend gives no input: the sandbox's code process died of it
    (SandboxCrashed, state lost). It is the cell's error; the state stays."""
    run_cell(sandbox, "state = 1")
    cell = run_cell(sandbox, "%pdb on\n1 / 0")
    assert cell.status == "error"
    run_cell(sandbox, "%pdb off")
    assert run_cell(sandbox, "print(state)").stream() == "1\n"
