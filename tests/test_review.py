"""rewyn-kernel review: run logs from real sandboxes into notebooks, re-run on real kernels."""

from __future__ import annotations

import base64
import json
import os
import sys
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import nbformat
import pytest

from rewyn_kernel import cli
from rewyn_kernel.errors import PolicyError
from rewyn_kernel.kernel.kernelspec import KERNEL_NAME
from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY, event_json, summary_line
from rewyn_kernel.notebooks._review_cells import write_source
from rewyn_kernel.notebooks._review_log import read_records, steps_of
from rewyn_kernel.notebooks.review import (
    DEFAULT_LIMITS,
    compare,
    install_command,
    kernel_name_for,
    limits_of,
    read_log,
)
from rewyn_kernel.runtime import JsonlRunLog, create
from rewyn_kernel.runtime._tool_call import logged_file
from rewyn_kernel.runtime.events import SandboxEvent, ToolCall, ToolResult
from rewyn_kernel.runtime.sandbox import (
    DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB,
    DEFAULT_PIDS,
    get_default_provider,
)
from rewyn_kernel.settings import KernelSettings
from rewyn_kernel.tools import PermissionDecision, Tool, ToolArgumentsError
from tests.kernel_client import write_spec

LONG_CODE = "# " + "x" * 300_000 + "\nprint('long')"
CODES = [
    "print('hello')",
    "1 / 0",
    "while True:\n    pass",
    "display({'text/plain': 'a chart', 'image/png': 'iVBORw0KGgo='}, raw=True)\n6 * 7",
    LONG_CODE,
]
LIMITS = {
    "provider": get_default_provider().name,  # (what create() uses: the run log's)
    "timeout": 1.0,
    "memory_limit_mb": DEFAULT_MEMORY_MB,
    "pids_limit": DEFAULT_PIDS,
    "disk_limit_mb": DEFAULT_DISK_MB,
    "network": "none",
    "ipython": False,
}


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run log written by real executions: ok, exception, timeout, display, long code."""
    path = tmp_path_factory.mktemp("log") / "run.jsonl"
    with create(timeout=1, listeners=[JsonlRunLog(path)]) as box, box.session() as session:
        for code in CODES:
            session.execute(code)
    return path


def events_of(path: Path) -> list[SandboxEvent]:
    return JsonlRunLog.read(path)


def review(*args: str | Path) -> int:
    return cli.main(["review", *map(str, args)])


def load(path: Path) -> dict[str, Any]:
    nb: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    nbformat.validate(nb)
    return nb


def text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def event_text(cell: dict[str, Any]) -> str:
    (output,) = [o for o in cell["outputs"] if EVENT_MIME in o.get("data", {})]
    return text(output["data"]["text/plain"])


def test_a_real_run_becomes_one_cell_per_execution(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log of events alone (a session's, no tool): one cell per execution, each opening with
    its call line; a failure ends in an error output; the summary names failed cells."""
    out = tmp_path / "review.ipynb"
    assert review(run_log, "-o", out) == 0
    assert capsys.readouterr().err == ""
    nb = load(out)
    events = events_of(run_log)
    header, *cells = nb["cells"]
    assert [c["id"] for c in cells] == [f"call-{n}" for n in range(1, 6)]
    for number, (cell, event) in enumerate(zip(cells, events, strict=True), 1):
        assert cell["metadata"][METADATA_KEY] == {
            "session": event.session_id,
            "events": [event_json(event)],
            "recorded": True,
        }
        assert cell["execution_count"] == event.execution_count
        line = text(cell["outputs"][0]["data"]["text/plain"])
        assert line.startswith(f"call {number} · code · session {event.session_id} · ")
        last = cell["outputs"][-1]
        assert last["data"][EVENT_MIME]["id"] == event.id
        assert text(last["data"]["text/plain"]) == summary_line(event)
    ok, exception, timeout, display, long = cells
    assert text(ok["source"]) == "print('hello')"
    assert [(o["output_type"], text(o.get("text", ""))) for o in ok["outputs"][1:-1]] == [
        ("stream", "hello\n")
    ]
    (error,) = exception["outputs"][1:-1]
    assert (error["output_type"], error["ename"]) == ("error", "ZeroDivisionError")
    assert "1 / 0" in "".join(error["traceback"])
    (error,) = timeout["outputs"][1:-1]
    assert error["ename"] == "TimeoutError"
    assert "timed out after 1 s" in error["evalue"]
    shown, result = display["outputs"][1:-1]
    assert shown["output_type"] == "display_data"
    assert shown["data"] == {"text/plain": ["a chart"]}  # only text/plain is in the event
    assert shown["metadata"][METADATA_KEY]["mime_types"] == ["image/png", "text/plain"]
    assert result["output_type"] == "execute_result"
    assert (result["data"], result["execution_count"]) == ({"text/plain": ["42"]}, 4)
    assert text(long["outputs"][1]["text"]) == "long\n"

    source = text(header["source"])
    name = kernel_name_for(LIMITS)
    command = install_command(name, LIMITS)
    provider = LIMITS["provider"]
    limits = f"--memory {DEFAULT_MEMORY_MB} --pids {DEFAULT_PIDS} --disk {DEFAULT_DISK_MB}"
    assert command.endswith(
        f"--provider {provider} --timeout 1 {limits} --network none --no-ipython"
    )
    for line in (
        f"# Review of an agent's run: `{run_log}`",
        "in the order it made them",
        "- **Calls:** 5 in 1 session(s)",
        "- **Failed:** 2 of 5 calls; call 2 (`code`: exception `ZeroDivisionError`); "
        "call 3 (`code`: timeout `TimeoutError`)",
        "- **Executions:** 5 in 1 sandbox(es)",
        "- **Endings:** completed 3 · exception 1 · timeout 1",
        f"- **Provider** `{provider}` (5 executions): network isolated",
        "- **Time:** ",
        f"    {command}",
        "only the\n`text/plain` of rich outputs",
        "`rewyn-kernel review --check review.ipynb`",
        f"It is not installed here, so the notebook names `{KERNEL_NAME}`",
    ):
        assert line in source, line
    assert "Lines not converted" not in source

    assert name.startswith("rewyn-review-")
    # Not installed here: the notebook names the sandbox kernel that is, which JupyterLab
    # starts without asking (a missing name brings up its Select Kernel dialog).
    assert nb["metadata"]["kernelspec"] == {
        "name": KERNEL_NAME,
        "display_name": "Python (sandboxed)",
        "language": "python",
    }
    assert nb["metadata"][METADATA_KEY]["review"] == {
        "source": str(run_log),
        "limits": LIMITS,
        "kernel": name,
        "install_command": command,
        "problems": [],
    }


def test_code_cut_short_in_the_log_is_marked_and_kept(run_log: Path, tmp_path: Path) -> None:
    assert review(run_log, "-o", tmp_path / "r.ipynb") == 0
    cell = load(tmp_path / "r.ipynb")["cells"][5]
    event = events_of(run_log)[4]
    assert event.code_truncated
    comment, kept = text(cell["source"]).split("\n", 1)
    assert comment.startswith("# rewyn-kernel review: the run log kept only the start and end")
    assert f"{event.code_bytes:,} bytes in all" in comment
    assert kept == event.code
    assert "characters omitted" in kept


def test_kernel_names_and_limits(run_log: Path) -> None:
    event = events_of(run_log)[0]
    assert limits_of(event) == LIMITS
    default = event.model_copy(update={"spec": {**event.spec, "timeout": 600.0, "ipython": True}})
    assert limits_of(default) == {**DEFAULT_LIMITS, "provider": LIMITS["provider"]}
    assert kernel_name_for(limits_of(default) or {}) == "rewyn-sandbox"  # (auto: the same here)
    assert kernel_name_for(DEFAULT_LIMITS) == KERNEL_NAME
    assert kernel_name_for(LIMITS) == kernel_name_for(dict(reversed(LIMITS.items())))
    assert kernel_name_for(LIMITS) != kernel_name_for({**LIMITS, "network": "allow"})

    gvisor = event.model_copy(update={"provider": "container/docker+runsc"})
    limits = limits_of(gvisor)
    assert limits == {
        **LIMITS,
        "provider": "container",
        "container_runtime": "docker",
        "oci_runtime": "runsc",
    }
    assert install_command("rv", limits).endswith(
        "--name rv --provider container --runtime docker --oci-runtime runsc --timeout 1 "
        f"--memory {DEFAULT_MEMORY_MB} --pids {DEFAULT_PIDS} --disk {DEFAULT_DISK_MB} "
        "--network none --no-ipython"
    )
    capped = event.model_copy(update={"spec": {**event.spec, "memory_limit_mb": 256}})
    assert "--memory 256" in install_command("rv", limits_of(capped) or {})
    assert limits_of(event.model_copy(update={"provider": "microvm"})) is None


def test_most_executions_choose_the_kernel_and_the_others_are_named(
    run_log: Path, tmp_path: Path
) -> None:
    first, *rest = run_log.read_text().splitlines(keepends=True)
    data = json.loads(first)
    data["spec"]["network"] = "allow"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(data) + "\n" + "".join(rest))
    assert review(mixed, "-o", tmp_path / "m.ipynb") == 0
    nb = load(tmp_path / "m.ipynb")
    assert nb["metadata"][METADATA_KEY]["review"]["kernel"] == kernel_name_for(LIMITS)
    assert "Call 1 ran under other limits" in text(nb["cells"][0]["source"])


def test_a_damaged_log_names_each_bad_line_and_converts_the_rest(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = run_log.read_text().splitlines(keepends=True)
    missing = json.loads(good[0])
    del missing["exit_code"]
    log = tmp_path / "damaged.jsonl"
    log.write_bytes(
        "".join(
            [
                good[0],
                "this is not json\n",
                "[1, 2]\n",
                '{"type": "SOMETHING_ELSE"}\n',
                json.dumps(missing) + "\n",
                "\n",
                good[1],
            ]
        ).encode()
        + b"\xff\xfe\n"
        + good[2][: len(good[2]) // 2].encode()
    )
    out = tmp_path / "damaged.ipynb"
    assert review(log, "-o", out) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        f"rewyn-kernel review: {log}:2: not JSON (Expecting value at column 1)",
        f"rewyn-kernel review: {log}:3: a JSON list, not an event object",
        f"rewyn-kernel review: {log}:4: an event of 'SOMETHING_ELSE', not SANDBOX_EXECUTED",
        f"rewyn-kernel review: {log}:5: not a valid SANDBOX_EXECUTED event: exit_code: "
        "Field required",
        f"rewyn-kernel review: {log}:8: not UTF-8 text (byte 1 of the line)",
        f"rewyn-kernel review: {log}:9: the last line is cut off: no newline at its end and "
        "incomplete JSON (the log was copied while being written, or its writer was killed)",
    ]
    nb = load(out)
    assert [c["id"] for c in nb["cells"][1:]] == ["call-1", "call-2"]
    header = text(nb["cells"][0]["source"])
    assert "- **Lines not converted:** 6" in header
    assert f"  - `{log}:3: a JSON list, not an event object`" in header
    assert len(nb["metadata"][METADATA_KEY]["review"]["problems"]) == 6


def test_a_complete_last_line_without_newline_is_accepted(run_log: Path, tmp_path: Path) -> None:
    log = tmp_path / "no-newline.jsonl"
    log.write_text(run_log.read_text().rstrip("\n"))
    lines, problems = read_log(log)
    assert (len(lines), problems) == (5, [])


def test_a_line_cut_mid_log_says_where_the_json_stops(tmp_path: Path) -> None:
    log = tmp_path / "cut.jsonl"
    log.write_text('{"type": "SANDBOX_EXECUTED", "id": "ab\n{}\n')
    _, problems = read_log(log)
    assert problems[0].startswith(f"{log}:1: not JSON (Unterminated string starting at column")
    assert problems[0].endswith("; the line ends before the JSON does)")
    assert problems[1] == f"{log}:2: an event of no type, not SANDBOX_EXECUTED"


def test_lone_surrogates_in_a_log_do_not_stop_the_notebook(run_log: Path, tmp_path: Path) -> None:
    event = events_of(run_log)[0]
    log = tmp_path / "surrogates.jsonl"
    JsonlRunLog(log)(event.model_copy(update={"stdout": "a\udc80b\n", "message": "\ud800"}))
    assert review(log, "-o", tmp_path / "s.ipynb") == 0
    cell = load(tmp_path / "s.ipynb")["cells"][1]
    assert text(cell["outputs"][1]["text"]) == "a\ufffdb\n"
    assert cell["metadata"][METADATA_KEY]["events"][0]["message"] == "\ufffd"


def test_the_header_shows_text_from_the_log_as_text(run_log: Path, tmp_path: Path) -> None:
    event = events_of(run_log)[0]
    assert event.isolation is not None
    isolation = event.isolation.model_copy(update={"notes": ("<script>alert(1)</script>",)})
    hostile = event.model_copy(
        update={"sandbox_id": "`<img src=x onerror=alert(1)>`\n# title", "isolation": isolation}
    )
    log = tmp_path / "hostile.jsonl"
    JsonlRunLog(log)(hostile)
    assert review(log, "-o", tmp_path / "h.ipynb") == 0
    header = text(load(tmp_path / "h.ipynb")["cells"][0]["source"])
    assert "`'<img src=x onerror=alert(1)>' # title`" in header  # one code span, one line
    assert "note: &lt;script&gt;alert(1)&lt;/script&gt;" in header
    assert "<script>" not in header


def test_an_empty_log_gives_a_notebook_with_only_the_header(tmp_path: Path) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    assert review(log) == 0  # default output: next to the log
    nb = load(tmp_path / "empty.review.ipynb")
    assert len(nb["cells"]) == 1
    assert "- **Calls:** 0" in text(nb["cells"][0]["source"])
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL_NAME


def test_compare_names_each_difference(run_log: Path) -> None:
    ok, exception, timeout, display, _ = events_of(run_log)
    assert compare(ok, ok) == []
    assert compare(ok, exception) == [
        "exit 1 (was 0)",
        "ending exception (was completed)",
        "stdout differs (0 bytes, was 6)",
        "error ZeroDivisionError (was none)",  # (its traceback, in stderr, is not compared)
    ]
    assert compare(exception, timeout) == [
        "exit 124 (was 1)",
        "ending timeout (was exception)",
        "error TimeoutError (was ZeroDivisionError)",
    ]
    # The traceback's details (the cell's number in it, say) are not an outcome.
    assert exception.error is not None
    error = exception.error.model_copy(
        update={
            "traceback": tuple(t.replace("line 1", "line 2") for t in exception.error.traceback)
        }
    )
    renumbered = exception.model_copy(
        update={"stderr": exception.stderr.replace("line 1", "line 2"), "error": error}
    )
    assert renumbered.stderr != exception.stderr
    assert compare(exception, renumbered) == []
    assert compare(ok, ok.model_copy(update={"stdout": "hellO\n"})) == ["stdout differs"]
    assert compare(ok, ok.model_copy(update={"stderr": "warn\n", "stderr_bytes": 5})) == [
        "stderr differs (5 bytes, was 0)"
    ]
    assert compare(display, display.model_copy(update={"outputs": display.outputs[:1]})) == [
        "rich outputs differ"
    ]
    # Not outcomes: ids, timing, the code itself (--check says "code changed" separately).
    other = timeout.model_copy(update={"id": "x", "duration_ms": 5.0, "code": "pass"})
    assert compare(timeout, other) == []


def test_check_reruns_and_marks_what_differs(
    run_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "review.ipynb"
    assert review(run_log, "-o", path) == 0
    nb = load(path)
    nb["cells"][1]["source"] = "print('changed')"  # the reviewer edits the first step
    path.write_text(json.dumps(nb))
    write_spec(
        tmp_path / "jupyter",
        "rv-check",
        ["--SandboxKernel.timeout=1.0", "--SandboxKernel.ipython=False"],
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    capsys.readouterr()

    checked = tmp_path / "checked.ipynb"
    assert review("--check", path, "--kernel-name", "rv-check", "-o", checked) == 1
    out, err = capsys.readouterr()
    assert "does not apply the recorded limits" not in err
    assert out.splitlines()[0] == (
        "cell call-1: code changed since the recording; differs from the recorded run: "
        "stdout differs (8 bytes, was 6)"
    )
    assert "cell call-2: same as the recorded run" in out
    result = load(checked)
    cells = result["cells"][1:]
    first = cells[0]
    assert event_text(first).endswith(
        " — code changed since the recording; differs from the recorded run: "
        "stdout differs (8 bytes, was 6)"
    )
    record = first["metadata"][METADATA_KEY]
    assert record["recorded"] is True
    assert [e["code"] for e in record["events"]] == ["print('hello')", "print('changed')"]
    assert record["check"] == {
        "differences": ["stdout differs (8 bytes, was 6)"],
        "code_changed": True,
    }
    assert text(first["outputs"][0]["data"]["text/plain"]).startswith("call 1 · code · ")
    assert text(first["outputs"][1]["text"]) == "changed\n"
    for cell in cells[1:4]:
        assert event_text(cell).endswith(" — same as the recorded run"), event_text(cell)
        assert len(cell["metadata"][METADATA_KEY]["events"]) == 2
    # The long code ran as cut short in the log: not what the agent ran, and it says so.
    assert "code changed since the recording; differs" in event_text(cells[4])
    last_check = result["metadata"][METADATA_KEY]["review"]["last_check"]
    assert last_check["kernel"] == "rv-check"
    assert last_check["differing"] == ["call-1", "call-5"]
    assert (last_check["checked"], last_check["kernel_mismatches"], last_check["error"]) == (
        5,
        [],
        "",
    )
    assert load(path)["cells"][1]["outputs"][1]["text"] == ["hello\n"]  # -o: input untouched


def test_check_of_an_unchanged_step_is_the_same_and_warns_of_other_limits(
    run_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hello = tmp_path / "hello.jsonl"
    hello.write_text(run_log.read_text().splitlines(keepends=True)[0])
    path = tmp_path / "hello.ipynb"
    assert review(hello, "-o", path) == 0
    write_spec(tmp_path / "jupyter", "rv-default")  # no flags: the kernel's 600 s, IPython
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    capsys.readouterr()
    assert review("--check", path, "--kernel-name", "rv-default") == 0
    out, err = capsys.readouterr()
    assert (
        err == "warning: kernel rv-default does not apply the recorded limits: ipython True "
        "(recorded False)\nwarning: kernel rv-default does not apply the recorded limits: "
        "timeout 600.0 (recorded 1.0)\n"
    )
    assert "cell call-1: same as the recorded run" in out
    nb = load(path.with_name("hello.checked.ipynb"))  # no -o: the record stays as it was
    assert event_text(nb["cells"][1]).endswith(" — same as the recorded run")
    assert not event_text(load(path)["cells"][1]).endswith(" — same as the recorded run")
    assert nb["metadata"][METADATA_KEY]["review"]["last_check"]["kernel_mismatches"] == [
        "ipython True (recorded False)",
        "timeout 600.0 (recorded 1.0)",
    ]


def test_install_kernel_then_check_on_the_notebooks_own_kernel(
    run_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    hello = tmp_path / "hello.jsonl"
    hello.write_text(run_log.read_text().splitlines(keepends=True)[0])
    path = tmp_path / "hello.ipynb"
    assert review(hello, "-o", path, "--install-kernel") == 0
    name = kernel_name_for(LIMITS)
    spec = json.loads((tmp_path / "data" / "kernels" / name / "kernel.json").read_text())
    assert spec["argv"][-7:] == [
        f"--SandboxKernel.provider={LIMITS['provider']}",
        "--SandboxKernel.timeout=1.0",
        "--SandboxKernel.network=none",
        f"--SandboxKernel.memory_limit_mb={DEFAULT_MEMORY_MB}",
        f"--SandboxKernel.pids_limit={DEFAULT_PIDS}",
        f"--SandboxKernel.disk_limit_mb={DEFAULT_DISK_MB}",
        "--SandboxKernel.ipython=False",
    ]
    capsys.readouterr()
    assert review("--check", path) == 0
    out, err = capsys.readouterr()
    assert "warning" not in err
    assert "1 of 1 cells as recorded" in out


def test_check_never_runs_the_code_outside_the_sandbox_kernel(
    run_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "r.ipynb"
    assert review(run_log, "-o", path) == 0
    before = path.read_text()
    plain = tmp_path / "jupyter" / "kernels" / "plain"
    plain.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (plain / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "plain"}))
    write_spec(tmp_path / "jupyter", kernel_name_for(LIMITS))  # the notebook's, limits unset
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    capsys.readouterr()

    assert review("--check", path, "--kernel-name", "plain") == 1
    assert "kernel plain is not the rewyn-kernel sandbox kernel" in capsys.readouterr().err
    assert review("--check", path) == 1  # its own kernel, installed with other limits
    assert (
        f"kernel {kernel_name_for(LIMITS)} does not apply the recorded limits (ipython True "
        f"(recorded False); timeout 600.0 (recorded 1.0)): install it again with "
        f"{install_command(kernel_name_for(LIMITS), LIMITS)}"
        ", or choose one with --kernel-name"
    ) in capsys.readouterr().err
    assert path.read_text() == before  # nothing ran, nothing was written


def test_check_without_the_kernel_says_how_to_create_it(
    run_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "nothing"))
    path = tmp_path / "r.ipynb"
    assert review(run_log, "-o", path) == 0
    before = load(path)
    capsys.readouterr()
    assert review("--check", path) == 1
    said = capsys.readouterr()
    name = kernel_name_for(LIMITS)
    assert f"kernel {name} is not installed: create it with rewyn-kernel install" in said.err
    assert "0 of 0 cells" not in said.out
    assert load(path) == before
    assert not path.with_name("r.checked.ipynb").exists()  # nothing written


def test_bad_options_fail_clearly(
    run_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (
        [tmp_path / "missing.jsonl"],
        [run_log, "--kernel-name", "not a name"],
        ["--check", run_log, "--install-kernel"],
    ):
        with pytest.raises(SystemExit) as exc:
            review(*args)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "missing.jsonl: no such file" in err
    assert "--kernel-name: kernel name 'not a name' is not valid" in err
    assert "--install-kernel: only when converting a run log" in err


def test_a_run_under_a_quota_names_a_kernel_that_install_can_make(
    run_log: Path, tmp_path: Path
) -> None:
    """A run recorded with disk_limit_mb: its kernel's install command takes --disk, and the
    kernel it makes applies the quota."""
    event = events_of(run_log)[0]
    quota = event.model_copy(update={"spec": {**event.spec, "disk_limit_mb": 64}})
    limits = limits_of(quota)
    assert limits is not None
    assert limits["disk_limit_mb"] == 64
    command = install_command("rv-quota", limits)
    assert "--disk 64" in command
    words = command.split()[2:]  # (after "rewyn-kernel install")
    words[words.index("--user")] = "--prefix"
    words.insert(words.index("--prefix") + 1, str(tmp_path / "prefix"))
    assert cli.main(["install", *words]) == 0
    spec = json.loads((tmp_path / "prefix/share/jupyter/kernels/rv-quota/kernel.json").read_text())
    assert "--SandboxKernel.disk_limit_mb=64" in spec["argv"]


ROUND_TRIPS: dict[str, dict[str, Any]] = {
    "an allow-list": {"network": "127.0.0.1:8901,pypi.org,*.pythonhosted.org,!bad.pypi.org"},
    "an allow-list by address": {"network": ["[::1]:8901", "10.0.0.0/8"]},
    "no network": {"network": "none"},
    "the network": {"network": "allow"},
    "no limits": {"timeout": None, "memory_limit_mb": None, "pids_limit": None},
    "fractions": {"timeout": 0.25, "disk_limit_mb": 64},
    "odd seconds": {"timeout": 123457.125},
    "plain Python": {"ipython": False},
    "IPython": {"ipython": True},
    "a container": {"provider": "container", "container_runtime": "podman"},
    "gVisor": {"provider": "container", "container_runtime": "docker", "oci_runtime": "runsc"},
}
"""A value of every type of setting a review's kernel pins."""


@pytest.mark.parametrize("given", ROUND_TRIPS.values(), ids=list(ROUND_TRIPS))
def test_the_install_command_gives_back_the_settings_it_was_made_from(
    given: dict[str, Any],
) -> None:
    """The printed command, parsed by install's own parser, gives the same settings."""
    import argparse
    import shlex

    from rewyn_kernel.notebooks._review_notebook import settings_for

    limits = KernelSettings.model_validate({**LIMITS, **given}).model_dump(
        mode="json", include={*LIMITS, *given}
    )  # (the JSON a review reads limits as, as limits_of gives them)
    command = shlex.split(install_command("rv", limits))
    assert command[:2] == ["rewyn-kernel", "install"]
    parser = cli._add_install_parser(argparse.ArgumentParser().add_subparsers())
    parsed = cli._settings(parser.parse_args(command[2:]), parser)
    expected = settings_for(limits)
    assert parsed.model_dump() == expected.model_dump()
    assert parsed.model_fields_set <= expected.model_fields_set  # (ipython: on by default)


def test_an_allow_list_run_names_a_kernel_that_install_can_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run under an allow-list: the review's "Create its kernel with" line, run as printed
    (into a prefix), installs a kernel that pins the same allow-list."""
    import shlex

    log = tmp_path / "run.jsonl"
    network = "127.0.0.1:8901,pypi.org,!bad.pypi.org"
    with create(network=network, listeners=[JsonlRunLog(log)]) as box:
        assert box.execute("print('ran')").stdout == "ran\n"
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "nothing"))
    capsys.readouterr()
    assert review(log, "-o", tmp_path / "r.ipynb") == 0
    (line,) = [
        line for line in capsys.readouterr().out.splitlines() if "Create its kernel with" in line
    ]
    words = shlex.split(line.partition(": ")[2])
    assert words[:3] == ["rewyn-kernel", "install", "--user"]
    words[2:3] = ["--prefix", str(tmp_path / "prefix")]
    assert cli.main(words[1:]) == 0
    (spec,) = (tmp_path / "prefix/share/jupyter/kernels").glob("*/kernel.json")
    argv = json.loads(spec.read_text())["argv"]
    assert f"--SandboxKernel.network={network}" in argv


def test_a_sandbox_tool_run_shows_the_payload_the_model_was_given(tmp_path: Path) -> None:
    """The event keeps about 8 KiB of each stream; the tool gave the model its own head and
    tail. The review shows the latter (the log's TOOL_CALL record), not a rebuilt excerpt."""
    from rewyn_kernel.runtime import sandbox_tool

    log = tmp_path / "run.jsonl"
    with create(listeners=[JsonlRunLog(log)]) as box:
        tool = sandbox_tool(box, max_result_chars=2_000)
        payload = tool.run({"code": "for i in range(5000): print(f'row {i}')\n1 / 0"})
    assert payload["truncated"]
    (event,) = JsonlRunLog.read(log)  # (the tool result line is not an event)
    path = tmp_path / "r.ipynb"
    assert review(log, "-o", path) == 0
    (cell,) = [cell for cell in load(path)["cells"] if cell["cell_type"] == "code"]
    streams = {o["name"]: o["text"] for o in cell["outputs"] if o["output_type"] == "stream"}
    assert text(streams["stdout"]) == payload["stdout"]
    assert text(streams["stdout"]) != event.stdout  # (the model saw another excerpt)
    (error,) = [o for o in cell["outputs"] if o["output_type"] == "error"]
    assert error["ename"] == "ZeroDivisionError"
    assert cell["metadata"][METADATA_KEY]["call"]["tool"] == "run_code"
    assert cell["outputs"][-1]["data"][EVENT_MIME]["id"] == event.id  # the summary stays last


def test_each_cell_shows_what_it_changed_in_the_workspace(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("the person's\n")
    log = tmp_path / "run.jsonl"
    with create(workspace=project, listeners=[JsonlRunLog(log)]) as box, box.session() as s:
        assert s.execute("open('out.csv', 'w').write('a')\nopen('notes.txt', 'w').write('x')").ok
        assert s.execute("print('nothing written')").ok
    out = tmp_path / "review.ipynb"
    assert review(log, "-o", out) == 0
    header, first, second = load(out)["cells"]
    (files,) = [
        o for o in first["outputs"] if o.get("metadata", {}).get(METADATA_KEY, {}).get("files")
    ]
    shown = text(files["data"]["text/plain"])
    assert "created (1): out.csv" in shown
    assert "changed (1): notes.txt" in shown
    assert "earlier versions kept: " in shown
    assert not [
        o
        for o in second["outputs"]
        if "Files changed" in text(o.get("data", {}).get("text/plain", ""))
    ]
    assert "- **Workspace files:** 1 execution(s) changed files: 1 changed, 1 created" in text(
        header["source"]
    )


# -- tool calls ---------------------------------------------------------------------------------


def tool_call(**fields: Any) -> ToolCall:
    """A TOOL_CALL record as a tool writes it (started now, unless given)."""
    now = datetime.now(timezone.utc)
    values: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "tool": "write_file",
        "session": "default",
        "session_id": "s1",
        "sandbox_id": "b1",
        "started_at": now,
        "finished_at": now,
        "arguments": {},
        "outcome": "ok",
        "text": "",
    }
    return ToolCall.model_validate({**values, **fields})


def test_a_log_from_before_tool_calls_still_converts(run_log: Path, tmp_path: Path) -> None:
    """Logs written before TOOL_CALL hold a TOOL_RESULT line after each event: still read."""
    event = events_of(run_log)[0]
    log = tmp_path / "old.jsonl"
    old = JsonlRunLog(log)
    old(event)
    old.record(
        ToolResult(execution_id=event.id, tool="run_code", session="s", text="saw", truncated=False)
    )
    assert review(log, "-o", tmp_path / "old.ipynb") == 0
    (cell,) = load(tmp_path / "old.ipynb")["cells"][1:]
    assert text(cell["outputs"][0]["data"]["text/plain"]).startswith(
        "call 1 · run_code · session 's'"
    )
    assert text(cell["outputs"][1]["data"]["text/plain"]) == "saw"
    assert cell["metadata"][METADATA_KEY]["given"]["text"] == "saw"


def test_tool_call_records_are_checked_when_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run log is untrusted: a record of another version, content that does not match its
    hash, an image of a type a review does not show, each is named by line; the rest converts."""
    good = tool_call(files=[logged_file("data/in.csv", b"a,b\n1,2\n", "in")])
    forged = json.loads(good.model_dump_json())
    forged["files"][0]["content"] = base64.b64encode(b"a,b\n6,6\n").decode()
    svg = json.loads(tool_call(tool="read_file").model_dump_json())
    svg["images"] = [{"mime_type": "image/svg+xml", "size": 1, "sha256": "0" * 64, "data": "eA=="}]
    later = json.loads(tool_call().model_dump_json()) | {"version": 2}
    log = tmp_path / "calls.jsonl"
    log.write_text(
        "".join(
            json.dumps(item) + "\n"
            for item in (json.loads(good.model_dump_json()), forged, svg, later)
        )
    )
    assert review(log, "-o", tmp_path / "c.ipynb") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"rewyn-kernel review: {log}:2: not a valid TOOL_CALL record: files.0: Value error, "
        "content does not match its sha256"
    )
    assert err[1].startswith(
        f"rewyn-kernel review: {log}:3: not a valid TOOL_CALL record: images.0.mime_type"
    )
    assert err[2] == (
        f"rewyn-kernel review: {log}:4: a TOOL_CALL record of version 2: this rewyn-kernel reads "
        "version 1 (a newer one may read this log)"
    )
    (cell,) = load(tmp_path / "c.ipynb")["cells"][1:]
    assert "with open('data/in.csv', 'wb') as _file:" in text(cell["source"])


def test_calls_read_in_the_order_they_started(tmp_path: Path) -> None:
    """Calls to two sessions at once end, and are written, in another order than they came:
    the review keeps the order they came in. A call whose event is missing says so."""
    now = datetime.now(timezone.utc)
    first = tool_call(
        tool="run_python",
        session="a",
        started_at=now,
        finished_at=now + timedelta(seconds=5),
        execution_id="gone",
    )
    second = tool_call(
        tool="list_files",
        session="b",
        session_id="s2",
        started_at=now + timedelta(seconds=1),
        finished_at=now + timedelta(seconds=2),
    )
    log = tmp_path / "order.jsonl"
    writer = JsonlRunLog(log)
    writer.record(second)  # (it ended first)
    writer.record(first)
    records, problems = read_records(log)
    assert problems == []
    assert [step.call for step in steps_of(records)] == [first, second]
    assert review(log, "-o", tmp_path / "o.ipynb") == 0
    cells = load(tmp_path / "o.ipynb")["cells"][1:]
    lines = [text(cell["outputs"][0]["data"]["text/plain"]) for cell in cells]
    assert lines[0].startswith("call 1 · run_python · session 'a' · ok · 5.0 s")
    assert lines[0].endswith("its execution's event is not in the log")
    assert lines[1].startswith("call 2 · list_files · session 'b' · ok")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"day,temp\n1,3.5\r\n",
        "h\u00e9llo \u202e\u2028\x00 '''\"\"\"\\\n".encode(),
        bytes(range(256)) * 3,
    ],
)
def test_a_write_file_cell_writes_the_same_bytes(data: bytes, tmp_path: Path) -> None:
    """The cell of a file the agent gave the sandbox is code that writes it again, exactly,
    and nothing in the file's name or content gets out of its literals."""
    call = tool_call(
        arguments={"path": "in/x'\n.bin"}, files=[logged_file("in/x'\n.bin", data, "in")]
    )
    source = write_source(call, call.files[0])
    namespace: dict[str, Any] = {}
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        exec(compile(source, "cell", "exec"), namespace)
    finally:
        os.chdir(cwd)
    assert (tmp_path / "in" / "x'\n.bin").read_bytes() == data
    assert set(namespace) == {"__builtins__"}  # (no name of its own left behind)
    outside = tool_call(files=[logged_file("../escape.txt", b"x", "in")])
    assert "cannot write the file again: its path is not within" in write_source(
        outside, outside.files[0]
    )


def test_a_sandbox_tool_run_is_reviewed_call_by_call_and_replays_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every call of a sandbox_tool is in the log and the review, refused ones too, failures as
    errors; --check replays each call as the tool ran it: a fresh interpreter each time (files
    kept), under the timeout the call gave."""
    from rewyn_kernel.runtime import sandbox_tool

    class Refuse:
        def check(self, tool: Tool, arguments: Mapping[str, Any]) -> PermissionDecision:
            return PermissionDecision(allowed=False, reason="not this one")

    log = tmp_path / "run.jsonl"
    with create(timeout=10, listeners=[JsonlRunLog(log)]) as box:
        tool = sandbox_tool(box)
        assert tool.run({"code": "x = 1\n_ = open('n.txt', 'w').write('5')"})["ok"]
        with pytest.raises(ToolArgumentsError):
            tool.run('{"code": "1", "colour": "red"}')
        with pytest.raises(PolicyError):
            tool.run({"code": "print('never')"}, policy=Refuse())
        fresh = tool.run({"code": "print('x' in globals(), open('n.txt').read())"})
        assert fresh["stdout"] == "False 5\n"
        assert tool.run({"code": "while True:\n    pass", "timeout": 1})["timed_out"]
        assert tool.run({"code": "1 / 0"})["error"]["ename"] == "ZeroDivisionError"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [call for call in calls if call["type"] == "TOOL_CALL"]
    assert [c["outcome"] for c in calls] == ["ok", "invalid_arguments", "denied", "ok", "ok", "ok"]
    assert calls[1]["arguments"] == {"code": "1", "colour": "red"}
    assert calls[4]["timeout"] == 1
    assert {c["keeps_state"] for c in calls} == {False}

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "review.ipynb"
    assert review(log, "-o", path, "--install-kernel") == 0
    nb = load(path)
    cells = nb["cells"][1:]
    lines = [text(cell["outputs"][0]["data"]["text/plain"]) for cell in cells]
    assert [line.split(" · ")[:2] for line in lines] == [
        [f"call {n}", "run_code"] for n in range(1, 7)
    ]
    assert "a fresh interpreter (files stay)" in lines[0]
    assert "timeout 1 s" in lines[4]
    errors = [
        [o["ename"] for o in cell["outputs"] if o["output_type"] == "error"] for cell in cells
    ]
    assert errors == [
        [],
        ["ToolArgumentsError"],
        ["PolicyError"],
        [],
        ["TimeoutError"],
        ["ZeroDivisionError"],
    ]
    assert "# The code it was sent (denied):\n#     print('never')" in text(cells[2]["source"])
    header = text(nb["cells"][0]["source"])
    assert (
        "- **Failed:** 4 of 6 calls; call 2 (`run_code`: bad arguments); call 3 (`run_code`: "
        "denied); call 5 (`run_code`: timeout `TimeoutError`); call 6 (`run_code`: exception "
        "`ZeroDivisionError`)"
    ) in header
    name = nb["metadata"][METADATA_KEY]["review"]["kernel"]
    assert nb["metadata"]["kernelspec"]["name"] == name  # (installed: JupyterLab starts it)

    capsys.readouterr()
    assert review("--check", path) == 0
    out = capsys.readouterr().out
    assert out.count("same as the recorded run") == 4, out
    assert "4 of 4 cells as recorded (2 not replayed: they ran nothing)" in out
