"""The sandbox kernel, started for real with jupyter_client; every message checked."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.events import JsonlRunLog
from rewyn_kernel.runtime.sandbox import SandboxProvider

from .conftest import processes_with, wait_until_gone
from .kernel_client import plain, run_cell, running_kernel, write_spec
from .test_limits import STUBBORN

Kernel = tuple[KernelManager, BlockingKernelClient]


@pytest.fixture(scope="module")
def kernel_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    write_spec(root, "rewyn-test")
    write_spec(root, "rewyn-test-message", interrupt_mode="message")
    write_spec(root, "rewyn-test-timeout", ["--SandboxKernel.timeout=1"])
    write_spec(root, "rewyn-test-evented", ["--SandboxKernel.event_output=True"])
    return root


@pytest.fixture(scope="module")
def kernel(kernel_root: Path) -> Iterator[Kernel]:
    with running_kernel(kernel_root, "rewyn-test") as started:
        yield started


def test_kernel_info_is_truthful(kernel: Kernel) -> None:
    import sys

    _, kc = kernel
    kc.kernel_info()
    reply = kc.get_shell_msg(timeout=10)["content"]
    assert reply["implementation"] == "rewyn-kernel"
    assert reply["language_info"]["name"] == "python"
    assert reply["language_info"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert reply["supported_features"] == []


def test_cells_share_state_stream_and_return_values(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "x = 41").status == "ok"
    cell = run_cell(kc, "print('x is', x)\nx + 1")
    assert cell.status == "ok"
    assert cell.stream() == "x is 41\n"
    (result,) = cell.of_type("execute_result")
    assert result["content"]["data"]["text/plain"] == "42"
    assert cell.messages.index(result) > cell.messages.index(cell.of_type("stream")[0])
    assert result["content"]["execution_count"] == cell.reply["content"]["execution_count"]


def test_an_exception_is_exactly_one_error_output(kernel: Kernel) -> None:
    _, kc = kernel
    cell = run_cell(kc, "def f():\n    return 1 / 0\nf()")
    assert cell.status == "error"
    (error,) = cell.of_type("error")
    assert error["content"]["ename"] == "ZeroDivisionError"
    assert any("return 1 / 0" in plain(line) for line in error["content"]["traceback"])
    assert cell.reply["content"]["ename"] == "ZeroDivisionError"
    assert cell.of_type("stream") == []  # the runtime's stderr ends with it; the cell does not


def test_hostile_rich_output_never_reaches_iopub_executable(kernel: Kernel) -> None:
    _, kc = kernel
    code = (
        "display({'text/html': '<b>bold</b><script>window.pwned=1</script>"
        '<img src=x onerror="window.pwned=2">\'}, raw=True)\n'
        "display({'application/javascript': 'window.pwned=3', 'text/plain': 'js'}, raw=True)\n"
        "svg = '<svg onload=\"window.pwned=4\"><script>x</script></svg>'\n"
        "display({'image/svg+xml': svg}, raw=True)"
    )
    cell = run_cell(kc, code)
    assert cell.status == "ok"
    shown = [m["content"] for m in cell.of_type("display_data", "execute_result")]
    text = repr(shown).lower()
    for bad in ("<script", "onerror", "onload", "application/javascript", "pwned=3"):
        assert bad not in text, bad
    assert "<b>bold</b>" in repr(shown)
    assert "application/javascript" in cell.stream("stderr")  # the visible note


def test_each_cell_carries_its_event(kernel: Kernel) -> None:
    _, kc = kernel
    cell = run_cell(kc, "print('evented')")
    event = cell.reply["metadata"][METADATA_KEY]["event"]
    assert event["type"] == "SANDBOX_EXECUTED"
    assert event["ending"] == "completed"
    assert event["stdout"] == "evented\n"
    assert cell.of_type("display_data") == []  # the event output is opt-in


def test_the_event_output_when_asked_for(kernel_root: Path) -> None:
    with running_kernel(kernel_root, "rewyn-test-evented") as (_, kc):
        cell = run_cell(kc, "print('evented')")
        event = cell.reply["metadata"][METADATA_KEY]["event"]
        persisted = [m for m in cell.of_type("display_data") if EVENT_MIME in m["content"]["data"]]
        (output,) = persisted
        assert output["content"]["data"][EVENT_MIME]["id"] == event["id"]
        assert output["content"]["data"]["text/plain"].startswith("sandbox: exit 0")


def test_whole_events_go_to_the_kernels_own_run_log_unless_turned_off(
    kernel_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As JupyterLab starts it (no run_log given): one log per notebook in Jupyter's data dir,
    named after the notebook; ``keep_run_log=False`` writes none."""
    data, notebooks = tmp_path / "data", tmp_path / "notebooks"
    notebooks.mkdir()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JPY_SESSION_NAME", str(notebooks / "Births analysis.ipynb"))
    write_spec(kernel_root, "rewyn-test-unlogged", ["--SandboxKernel.keep_run_log=False"])
    ids = []
    for _ in range(2):  # (a restarted kernel appends to the same log)
        with running_kernel(kernel_root, "rewyn-test", cwd=notebooks) as (_, kc):
            ids.append(run_cell(kc, "1").reply["metadata"][METADATA_KEY]["event"]["id"])
    (log,) = (data / "rewyn-kernel" / "runs").iterdir()
    assert log.name.startswith("Births-analysis-")
    assert log.name.endswith(".events.jsonl")
    assert [event.id for event in JsonlRunLog.read(log)] == ids
    with running_kernel(kernel_root, "rewyn-test-unlogged", cwd=notebooks) as (_, kc):
        assert run_cell(kc, "1").status == "ok"
    assert [event.id for event in JsonlRunLog.read(log)] == ids
    assert list((data / "rewyn-kernel" / "runs").iterdir()) == [log]


def test_requests_aborted_after_an_error_carry_no_event(kernel: Kernel) -> None:
    """Run All after a failing cell: the queued cells ran nothing, so they have no event (the
    frontend extension would otherwise file the failed cell's event under each of them)."""
    _, kc = kernel
    failing = kc.execute("import time; time.sleep(1); raise ValueError('first')")
    queued = [kc.execute(f"print({n})") for n in range(2)]
    replies: dict[str, dict[str, Any]] = {}
    while len(replies) < 3:
        reply = kc.get_shell_msg(timeout=30)
        replies[reply["parent_header"]["msg_id"]] = reply
    assert replies[failing]["content"]["status"] == "error"
    assert replies[failing]["metadata"][METADATA_KEY]["event"]["ending"] == "exception"
    for msg_id in queued:
        assert replies[msg_id]["content"]["status"] == "aborted"
        assert METADATA_KEY not in replies[msg_id]["metadata"]
    after = run_cell(kc, "print('after')")
    assert after.reply["metadata"][METADATA_KEY]["event"]["stdout"] == "after\n"


def test_a_flood_is_truncated_coalesced_and_complete(kernel: Kernel) -> None:
    _, kc = kernel
    cell = run_cell(kc, "for i in range(400_000): print(i)")
    streams = cell.of_type("stream")
    text = cell.stream()
    assert len(streams) < 200, len(streams)
    assert text.startswith("0\n1\n2\n")
    assert text.endswith("399998\n399999\n")
    assert "bytes of stdout dropped" in text


@pytest.mark.parametrize("name", ["rewyn-test", "rewyn-test-message"])
def test_interrupt_reaches_the_code_and_keeps_state(kernel_root: Path, name: str) -> None:
    with running_kernel(kernel_root, name) as (km, kc):
        run_cell(kc, "kept = 'yes'")
        started = time.monotonic()
        cell = run_cell(kc, "import time\ntime.sleep(30)", after=(1.0, km.interrupt_kernel))
        assert time.monotonic() - started < 10
        assert cell.status == "error"
        assert cell.reply["content"]["ename"] == "KeyboardInterrupt"
        assert km.is_alive()
        assert run_cell(kc, "print(kept)").stream() == "yes\n"


def test_a_cell_past_its_timeout_is_interrupted_and_keeps_its_state(kernel_root: Path) -> None:
    """Past the limit the code is interrupted first: when it stops, its variables stay; only
    code that does not stop costs the sandbox, and the message says which happened."""
    with running_kernel(kernel_root, "rewyn-test-timeout") as (_, kc):
        run_cell(kc, "before = 1")
        cell = run_cell(kc, "while True: pass")
        assert cell.status == "error"
        (error,) = cell.of_type("error")
        assert error["content"]["ename"] == "TimeoutError"
        message = plain("\n".join(error["content"]["traceback"]))
        assert "limit of 1 s" in message
        assert "variables are kept" in message
        assert "rewyn-kernel install --timeout SECONDS" in message
        assert "rewyn-worker" not in message  # (the interrupt comes from the worker's handler)
        assert run_cell(kc, "print(before)").stream() == "1\n"

        cell = run_cell(kc, STUBBORN)
        message = plain("\n".join(cell.of_type("error")[0]["content"]["traceback"]))
        assert "state lost" in message
        after = run_cell(kc, "print(before)")
        assert after.reply["content"]["ename"] == "NameError"


def test_a_request_may_shorten_a_cells_timeout_never_lengthen_it(kernel_root: Path) -> None:
    """``review --check`` replays an agent's call under the timeout the call gave, in the
    execute_request's metadata; the kernel's own limit still bounds it."""
    shorter = {"rewyn_kernel": {"timeout": 1}}
    with running_kernel(kernel_root, "rewyn-test") as (_, kc):  # (the kernel's 600 s)
        started = time.monotonic()
        cell = run_cell(kc, "import time\ntime.sleep(30)", metadata=shorter)
        assert time.monotonic() - started < 10
        (error,) = cell.of_type("error")
        assert error["content"]["ename"] == "TimeoutError"
        assert "limit of 1 s" in plain("\n".join(error["content"]["traceback"]))
        for ignored in ({"rewyn_kernel": {"timeout": "1"}}, {"rewyn_kernel": {"timeout": -1}}):
            assert run_cell(kc, "print('ok')", metadata=ignored).stream() == "ok\n"
    with running_kernel(kernel_root, "rewyn-test-timeout") as (_, kc):  # (the kernel's 1 s)
        started = time.monotonic()
        cell = run_cell(kc, "while True: pass", metadata={"rewyn_kernel": {"timeout": 60}})
        assert cell.reply["content"]["ename"] == "TimeoutError"
        assert time.monotonic() - started < 10


def test_input_goes_through_the_frontend_when_allowed(kernel: Kernel) -> None:
    _, kc = kernel
    prompts: list[str] = []

    def answer(request: dict[str, Any]) -> str:
        prompts.append(request["content"]["prompt"])
        return "Ada"

    cell = run_cell(kc, "print('hi', input('Name? '))", allow_stdin=True, answer=answer)
    assert prompts == ["Name? "]
    assert cell.stream() == "hi Ada\n"
    refused = run_cell(kc, "input('x')")
    assert refused.reply["content"]["ename"] == "StdinNotImplementedError"  # as on ipykernel


def test_magics_shell_commands_and_a_usage_error_as_on_ipykernel(kernel: Kernel) -> None:
    _, kc = kernel
    assert run_cell(kc, "%time y = 6 * 7").stream().startswith("CPU times")
    # (under a terminal, as IPython runs it on ipykernel: its line ends are a terminal's)
    assert run_cell(kc, "!echo from the shell").stream() == "from the shell\r\n"
    assert run_cell(kc, "%%bash\necho $((y))").stream() in ("\n", "0\n")  # (a shell's own y)
    unknown = run_cell(kc, "%no_such_magic")
    assert unknown.reply["content"]["ename"] == "UsageError"
    assert unknown.of_type("error") == []  # IPython printed it: no error output repeats it
    assert "UsageError: Line magic function `%no_such_magic` not found" in unknown.stream("stderr")
    plot = run_cell(kc, "%pip install nothing-at-all")
    assert "network='none'" in plot.stream("stderr")


def test_shell_commands_run_where_no_terminal_can_be_made(kernel_root: Path) -> None:
    """Landlock alone opens /dev/ptmx but not /dev/pts (the host's terminals are there), so no
    pseudo-terminal can be made: ``!cmd`` runs through a pipe instead, stdout and stderr in
    order, its exit code kept (it failed with "out of pty devices")."""
    from rewyn_kernel.runtime.providers.landlock import probe_landlock

    from .conftest import unavailable

    if not (support := probe_landlock()).works:
        unavailable(f"landlock is not usable here ({support.detail})")
    write_spec(kernel_root, "rewyn-test-landlock", ["--SandboxKernel.provider=landlock"])
    with running_kernel(kernel_root, "rewyn-test-landlock") as (_, kc):
        cell = run_cell(kc, "!echo out; echo err >&2; exit 3\nprint(_exit_code)")
        assert cell.reply["content"]["status"] == "ok", cell.stream("stderr")
        assert cell.stream() == "out\nerr\n3\n"
        assert run_cell(kc, "files = !ls /usr\nprint('bin' in files)").stream() == "True\n"


def test_rich_display_and_clear_output_as_on_ipykernel(kernel: Kernel) -> None:
    _, kc = kernel
    code = (
        "from IPython.display import display, HTML, Markdown, clear_output\n"
        "handle = display(HTML('<b>first</b>'), display_id=True)\n"
        "handle.update(Markdown('*second*'))\n"
        "clear_output(wait=True)\n"
        "display(HTML('<i>after</i>'))"
    )
    cell = run_cell(kc, code)
    kinds = [
        m["msg_type"] for m in cell.of_type("display_data", "update_display_data", "clear_output")
    ]
    assert kinds == ["display_data", "update_display_data", "clear_output", "display_data"]
    first, update = cell.of_type("display_data")[0], cell.of_type("update_display_data")[0]
    assert (
        first["content"]["transient"]["display_id"] == update["content"]["transient"]["display_id"]
    )
    assert update["content"]["data"]["text/markdown"] == "*second*"
    assert cell.of_type("clear_output")[0]["content"] == {"wait": True}


def test_an_inline_plot_is_a_png_as_on_ipykernel(kernel: Kernel) -> None:
    _, kc = kernel
    cell = run_cell(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert cell.status == "ok", cell.reply
    (image,) = cell.of_type("display_data")
    assert image["content"]["data"]["image/png"].startswith("iVBOR")
    figure = run_cell(kc, "fig, ax = plt.subplots()\nax.plot([1, 2])\nfig")
    (result,) = figure.of_type("execute_result")
    assert "image/png" in result["content"]["data"]


PLOTLY = "application/vnd.plotly.v1+json"


def test_a_plotly_figure_is_its_plotly_bundle_as_on_ipykernel(kernel: Kernel) -> None:
    """``fig.show()`` and a bare ``fig``: plotly's JupyterLab bundle, data and layout intact
    (before the filter, plotly.js's bundle was dropped whole)."""
    _, kc = kernel
    code = (
        "import plotly.express as px\n"
        "fig = px.bar(x=['a', 'b', 'c'], y=[1, 3, 2], title='three bars')\n"
        "fig.show()"
    )
    cell = run_cell(kc, code, timeout=120)
    assert cell.status == "ok", cell.reply
    assert cell.stream("stderr") == ""  # (no note of anything dropped)
    (shown,) = cell.of_type("display_data")
    figure = shown["content"]["data"][PLOTLY]
    assert figure["data"][0]["type"] == "bar"
    assert figure["data"][0]["x"] == ["a", "b", "c"]
    assert figure["layout"]["title"]["text"] == "three bars"
    assert figure["config"]["typesetMath"] is False
    bare = run_cell(kc, "fig")  # (shown by its _ipython_display_, as on ipykernel)
    (result,) = bare.of_type("display_data")
    assert result["content"]["data"][PLOTLY]["data"] == figure["data"]
    assert bare.stream("stderr") == ""


def test_a_plotly_map_is_refused_with_a_note_that_says_why(kernel: Kernel) -> None:
    _, kc = kernel
    code = "import plotly.express as px\npx.scatter_geo(lat=[48.85], lon=[2.35])"
    cell = run_cell(kc, code, timeout=120)
    (result,) = cell.of_type("display_data")
    assert PLOTLY not in result["content"]["data"]
    assert "base map or tiles plotly.js would fetch" in cell.stream("stderr")


def test_an_altair_chart_is_its_vega_lite_bundle(kernel: Kernel) -> None:
    """Altair's JupyterLab renderer ("mimetype", which the sandbox enables as Altair is
    imported: its default HTML loads Vega from a CDN): the Vega-Lite 5 spec, its data inline."""
    _, kc = kernel
    code = (
        "import altair as alt, pandas as pd\n"
        "frame = pd.DataFrame({'a': ['x', 'y'], 'b': [1, 2]})\n"
        "alt.Chart(frame).mark_bar().encode(x='a', y='b')"
    )
    cell = run_cell(kc, code, timeout=120)
    assert cell.status == "ok", cell.reply
    assert cell.stream("stderr") == ""
    (result,) = cell.of_type("execute_result")
    spec = result["content"]["data"]["application/vnd.vegalite.v5+json"]
    assert spec["mark"] == {"type": "bar"}
    assert list(spec["datasets"].values()) == [[{"a": "x", "b": 1}, {"a": "y", "b": 2}]]


def test_completion_inspection_and_is_complete(kernel: Kernel) -> None:
    _, kc = kernel
    run_cell(kc, "def sandbox_helper(a: int) -> int:\n    'Add one.'\n    return a + 1")
    kc.complete("sandbox_hel", 11)
    reply = kc.get_shell_msg(timeout=10)["content"]
    assert "sandbox_helper" in reply["matches"]  # (IPython's completer, as on ipykernel)
    kc.inspect("sandbox_helper", 3)
    info = kc.get_shell_msg(timeout=10)["content"]
    assert info["found"]
    assert "Add one." in info["data"]["text/plain"]
    for code, status in [
        ("x = 1", "complete"),
        ("for i in x:", "incomplete"),
        ("1 +* 2", "invalid"),
    ]:
        kc.is_complete(code)
        assert kc.get_shell_msg(timeout=10)["content"]["status"] == status


FORGED_INTROSPECTION = """
import sys
worker = sys.modules["rewyn_worker.child"]
def inspect(namespace, header):
    data = {
        "text/plain": "forged",
        "text/html": '<b>forged</b><img src="https://attacker.example/?leak=1">',
        "application/javascript": "window.pwned = 1",
    }
    return {"t": "inspect_reply", "id": header.id, "found": True, "data": data}
def complete(namespace, header):
    matches = ["ok_match", "bad\\x1b[2Jmatch", "ok_match"]
    return {"t": "complete_reply", "id": header.id, "matches": matches,
            "cursor_start": -5, "cursor_end": 10**9}
worker.inspect, worker.complete = inspect, complete
shell = sys.modules["rewyn_worker.ipython"].IPythonRunner  # (the kernel runs cells in IPython)
shell.inspect = lambda self, header: inspect(None, header)
shell.complete = lambda self, header: complete(None, header)
"""


def test_inspection_and_completion_replies_pass_the_filter(kernel: Kernel) -> None:
    """A session's code can answer for the inspector and the completer: what it says is
    filtered and bounded like any output."""
    _, kc = kernel
    assert run_cell(kc, FORGED_INTROSPECTION).status == "ok"
    kc.inspect("anything", 3)
    info = kc.get_shell_msg(timeout=10)["content"]
    assert info["found"]
    assert "application/javascript" not in info["data"]
    assert "<b>forged</b>" in info["data"]["text/html"]
    assert "attacker.example" not in info["data"]["text/html"]
    kc.complete("abc", 3)
    reply = kc.get_shell_msg(timeout=10)["content"]
    assert reply["matches"] == []  # a cursor outside the code: nothing is taken from it
    assert (reply["cursor_start"], reply["cursor_end"]) == (3, 3)
    run_cell(kc, FORGED_INTROSPECTION.replace("-5", "0"))
    kc.complete("abc", 3)
    reply = kc.get_shell_msg(timeout=10)["content"]
    assert reply["matches"] == ["ok_match"]  # no control characters, no duplicates


def test_shutdown_and_restart_leave_no_sandbox_behind(kernel_root: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "scratch"
    workdir.mkdir()
    write_spec(kernel_root, "rewyn-test-scratch", [f"--SandboxKernel.workdir={workdir}"])
    with running_kernel(kernel_root, "rewyn-test-scratch") as (km, kc):
        run_cell(kc, "import subprocess\nchild = subprocess.Popen(['sleep', '1000'])\nx = 1")
        assert processes_with(str(workdir))
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=60)
        assert run_cell(kc, "print('x' in globals())").stream() == "False\n"
        started = time.monotonic()
        km.shutdown_kernel(now=False)
        shutdown_seconds = time.monotonic() - started
    assert wait_until_gone(str(workdir)) == []
    assert shutdown_seconds < 2.0, shutdown_seconds


def test_nbclient_runs_a_notebook_on_the_kernel(kernel_root: Path) -> None:

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.cells = [
        nbformat.v4.new_code_cell("x = 2"),  # type: ignore[no-untyped-call]
        nbformat.v4.new_code_cell("print(x * 21)"),  # type: ignore[no-untyped-call]
    ]
    os.environ["JUPYTER_PATH"] = str(kernel_root)
    folder = Path(tempfile.mkdtemp(prefix="notebook-", dir=kernel_root.parent))  # (never here)
    try:
        resources = {"metadata": {"path": str(folder)}}
        NotebookClient(nb, kernel_name="rewyn-test", timeout=60, resources=resources).execute()
    finally:
        os.environ.pop("JUPYTER_PATH")
    outputs = nb.cells[1].outputs
    assert [output["text"] for output in outputs] == ["42\n"]


@pytest.mark.providers("docker", "docker+runsc", "podman")
def test_a_container_kernel_runs_cells_in_the_container(
    kernel_root: Path, provider: SandboxProvider
) -> None:
    assert isinstance(provider, ContainerProvider)
    flags = [
        "--SandboxKernel.provider=container",
        f"--SandboxKernel.image={provider.image}",
        f"--SandboxKernel.container_runtime={provider.runtime}",
    ]
    if provider.oci_runtime:
        flags.append(f"--SandboxKernel.oci_runtime={provider.oci_runtime}")
    name = "rewyn-test-" + provider.name.replace("/", "-").replace("+", "-")
    write_spec(kernel_root, name, flags)
    folder = Path(tempfile.mkdtemp(prefix="notebook-", dir=kernel_root.parent))
    (folder / "notes.txt").write_text("the person's\n")
    for path in (folder, folder / "notes.txt"):  # (a person's: gVisor runs the code as its owner)
        os.chown(path, 1000, 1000)
    with running_kernel(kernel_root, name, cwd=folder) as (km, kc):
        kernel_pid = km.provisioner.process.pid  # type: ignore[union-attr]
        first = run_cell(kc, "import os\nuid = os.getuid()")
        assert first.status == "ok", [m["content"] for m in first.of_type("error", "stream")]
        cell = run_cell(kc, "print(uid != 0, os.getcwd())")
        # The notebook's folder, at its own path: the workspace.
        assert cell.stream() == f"True {folder}\n", [m["content"] for m in cell.messages]
        appended = run_cell(kc, "_ = open('notes.txt', 'a').write('the code\\n')")
        assert appended.status == "ok", [m["content"] for m in appended.messages]
        assert (folder / "notes.txt").read_text() == "the person's\nthe code\n"
        assert (folder / "notes.txt").stat().st_uid == 1000
        event = cell.reply["metadata"][METADATA_KEY]["event"]
        assert event["provider"] == provider.name
        assert provider.containers(host_pid=kernel_pid)  # the check below can fail
    assert provider.containers(host_pid=kernel_pid) == []  # shutdown removed it


def test_without_ipython_in_the_sandbox_the_kernel_says_what_runs(kernel_root: Path) -> None:
    """The sandbox's Python has no IPython (a plain image, here the system's python3): cells
    run as plain Python, and the banner, the isolation notes and IPython syntax say so."""
    bare = "/usr/bin/python3"
    if not Path(bare).exists():
        pytest.skip(f"{bare} is not here")
    write_spec(kernel_root, "rewyn-test-bare", [f"--SandboxKernel.python={bare}"])
    with running_kernel(kernel_root, "rewyn-test-bare") as (_, kc):
        kc.kernel_info()
        banner = kc.get_shell_msg(timeout=30)["content"]["banner"]
        assert "plain Python (no IPython there)" in banner
        assert run_cell(kc, "print(6 * 7)").stream() == "42\n"
        cell = run_cell(kc, "%time x = 1")
        (error,) = cell.of_type("error")
        assert error["content"]["ename"] == "SyntaxError"
        assert "IPython is not installed" in "\n".join(error["content"]["traceback"])


FORGED_PAYLOADS = """
pm = get_ipython().payload_manager
pm.write_payload({"source": "page", "start": 3,
                  "data": {"text/plain": "plain help", "text/html": "<script>window.x=1</script>"}})
pm.write_payload({"source": "set_next_input", "text": "import shutil; shutil.rmtree('/')",
                  "replace": True})
pm.write_payload({"source": "set_next_input", "text": "a second one", "replace": True})
pm.write_payload({"source": "ask_exit", "keepkernel": False})
pm.write_payload({"source": "edit_magic", "filename": "/etc/passwd", "line_number": 1})
"""


def test_payloads_from_the_sandbox_are_relayed_by_the_kernels_rules(kernel: Kernel) -> None:
    """The pager as plain text only; one next cell, never replacing the person's, with a note;
    no exit() and no editor opened on a host file; the kernel stays up."""
    _, kc = kernel
    cell = run_cell(kc, FORGED_PAYLOADS)
    assert cell.status == "ok"
    payload = cell.reply["content"]["payload"]
    assert payload == [
        {"source": "page", "data": {"text/plain": "plain help"}, "start": 3},
        # (IPython keeps the last payload of a kind, as on ipykernel)
        {"source": "set_next_input", "text": "a second one", "replace": False},
    ]
    notes = cell.stream("stderr")
    assert "put the text of a new cell below this one" in notes
    assert "exit() does not stop a sandbox kernel" in notes
    assert run_cell(kc, "print('still here')").stream() == "still here\n"
    paged = run_cell(kc, "zip?").reply["content"]["payload"]
    assert [p["source"] for p in paged] == ["page"]
    assert "Init signature" in plain(paged[0]["data"]["text/plain"])
