"""%%sandbox in a real IPython shell and in a real ipykernel started with jupyter_client."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from rewyn_kernel.runtime.sandbox import SandboxResult, get_default_provider

from .kernel_client import run_cell, running_kernel


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.chdir(tmp_path)  # (the notebook's folder: the cells' workspace)
    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "rewyn_kernel")
    yield ipython
    ipython.run_line_magic("unload_ext", "rewyn_kernel")
    InteractiveShell.clear_instance()


def test_a_cell_runs_in_the_sandbox_and_binds_its_result(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    shell.run_cell_magic(
        "sandbox", "--timeout 5", "import os\nprint(os.getpid(), os.environ.get('SECRET_TOKEN'))"
    )
    pid, secret = capsys.readouterr().out.split()
    assert int(pid) < 100  # a process of its own PID namespace
    assert secret == "None"
    result = shell.user_ns["_sandbox"]
    assert isinstance(result, SandboxResult)
    assert result.ok
    assert result.isolation is not None
    assert result.isolation.network == "isolated"


def test_cells_work_in_the_notebooks_folder_or_the_workspace_given(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic(
        "sandbox", "", "import os\nprint(os.getcwd())\n_ = open('a.txt', 'w').write('a')"
    )
    assert capsys.readouterr().out == f"{tmp_path}\n"
    assert (tmp_path / "a.txt").read_text() == "a"
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.csv").write_text("x")
    shell.run_cell_magic("sandbox", f"--workspace {other} --protect *.csv", "open('keep.csv', 'a')")
    result = shell.user_ns["_sandbox"]
    assert result.error is not None
    assert "Read-only file system" in result.error.evalue
    assert (other / "keep.csv").read_text() == "x"


def test_named_sessions_keep_state_and_can_be_stopped(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("sandbox", "--session work", "counter = 40")
    shell.run_cell_magic("sandbox", "--session work --out r", "counter += 2\nprint(counter)")
    assert capsys.readouterr().out == "42\n"
    assert shell.user_ns["r"].stdout == "42\n"
    shell.run_cell_magic("sandbox", "", "print('counter' in globals())")  # not the session
    assert capsys.readouterr().out == "False\n"
    shell.run_line_magic("sandbox", "list")
    assert f"work: {get_default_provider().name}, 2 executions" in capsys.readouterr().out
    shell.run_line_magic("sandbox", "stop work")
    shell.run_line_magic("sandbox", "list")
    assert "no sandbox sessions" in capsys.readouterr().out


def test_errors_and_timeouts_are_shown_and_recorded(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("sandbox", "", "def f():\n    return 1 / 0\nf()")
    err = capsys.readouterr().err
    assert "ZeroDivisionError: division by zero" in err
    assert "return 1 / 0" in err
    assert "rewyn-worker" not in err
    started = time.monotonic()
    shell.run_cell_magic("sandbox", "--timeout 1", "while True: pass")
    assert time.monotonic() - started < 4
    assert "timed out after 1 s" in capsys.readouterr().err
    assert shell.user_ns["_sandbox"].timed_out


def test_defaults_come_from_config_and_line_options_win(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("sandbox", "config --timeout 1 --memory 128 --env MODE=configured")
    shell.run_cell_magic("sandbox", "", "import os\nprint(os.environ.get('MODE'))")
    # --env is per cell, not a default: only limits are kept by config
    assert capsys.readouterr().out == "None\n"
    shell.run_cell_magic("sandbox", "", "blob = ' ' * (512 * 1024 * 1024)")
    assert shell.user_ns["_sandbox"].memory_exceeded, shell.user_ns["_sandbox"].message
    shell.run_cell_magic(
        "sandbox", "--memory 1024 --env MODE=line", "import os\nprint(os.environ['MODE'])"
    )
    assert capsys.readouterr().out == "line\n"
    assert shell.user_ns["_sandbox"].ok


def test_bad_options_fail_clearly(shell: InteractiveShell) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        shell.run_cell_magic("sandbox", "--network maybe", "pass")
    with pytest.raises(UsageError, match="--env takes NAME=VALUE"):
        shell.run_cell_magic("sandbox", "--env NOVALUE", "pass")
    with pytest.raises(ValueError, match="--memory: Input should be greater than or equal to 32"):
        shell.run_cell_magic("sandbox", "--memory 8", "pass")
    with pytest.raises(ValueError, match="unknown %sandbox command"):
        shell.run_line_magic("sandbox", "explode")


def test_the_magic_in_a_real_ipykernel_streams_and_filters(tmp_path: Path) -> None:
    # The plain python3 kernel of this environment, with the extension loaded in it.
    with running_kernel(Path(sys.prefix) / "share" / "jupyter", "python3") as (_, kc):
        assert run_cell(kc, "%load_ext rewyn_kernel").status == "ok"
        cell = run_cell(
            kc,
            "%%sandbox --session s\n"
            "import time\n"
            "print('first', flush=True)\n"
            "display({'text/html': '<b>ok</b><script>window.x=1</script>',"
            " 'application/javascript': 'window.x=2', 'text/plain': 'ok'}, raw=True)\n"
            "print('second')",
        )
        assert cell.status == "ok"
        assert cell.stream() == "first\nsecond\n"
        (display,) = cell.of_type("display_data")
        assert display["content"]["data"]["text/html"] == "<b>ok</b>"
        assert "application/javascript" not in display["content"]["data"]
        assert "application/javascript" in cell.stream("stderr")
        again = run_cell(kc, "%%sandbox --session s\nprint(time.time() > 0)")
        assert again.stream() == "True\n"
