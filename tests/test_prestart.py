"""The sandbox a kernel starts while it imports Jupyter's stack: taken only if it is the one the
kernel's settings (argv and config files) describe, else closed, leaving nothing behind."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewyn_kernel.kernel import prestart
from rewyn_kernel.kernel._settings import settings_from_argv
from rewyn_kernel.kernel.kernelspec import BOOT
from rewyn_kernel.runtime.events import JsonlRunLog, SandboxEvent

from .conftest import processes_with, wait_until_gone
from .kernel_client import run_cell, running_kernel, write_spec


@pytest.fixture
def notebook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "notebook"
    folder.mkdir()
    monkeypatch.chdir(folder)  # (the notebook's directory is the kernel process's cwd)
    yield folder
    prestart.discard()


def test_the_kernel_takes_the_session_started_for_its_settings(
    notebook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    argv = ["-f", "kernel.json", f"--SandboxKernel.workdir={tmp_path}", "--SandboxKernel.timeout=9"]
    argv.append("--SandboxKernel.inherit_env=PYDANTIC_DISABLE_PLUGINS")  # (see below)
    prestart.prestart(argv)
    events: list[SandboxEvent] = []
    taken = prestart.take(settings_from_argv(argv).for_kernel(), events.append)
    assert taken is not None
    sandbox, session = taken
    try:
        assert session.wait_ready(10)
        result = session.execute(
            "import os; print(os.getcwd(), os.getenv('PYDANTIC_DISABLE_PLUGINS'))"
        )
        assert result.ok, result
        # (The early start turns pydantic's plugins off while it builds its models, never for
        # the sandbox, nor for the process afterwards.)
        assert result.stdout.split() == [str(notebook_dir), "None"]
        assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
        assert sandbox.spec.timeout == 9
        assert [event.id for event in events] == [result.execution_id]
        (log,) = (tmp_path / "data" / "rewyn-kernel" / "runs").iterdir()  # the kernel's own
        assert log.name.startswith("kernel-")
        assert log.name.endswith(".events.jsonl")
        assert [event.id for event in JsonlRunLog.read(log)] == [result.execution_id]
    finally:
        session.close()
        sandbox.close()
    assert prestart.take(settings_from_argv(argv).for_kernel(), events.append) is None  # once


def test_other_settings_close_the_early_session_and_leave_nothing(
    notebook_dir: Path, tmp_path: Path, marker: str
) -> None:
    scratch = tmp_path / f"scratch-{marker}"
    scratch.mkdir()
    argv = [f"--SandboxKernel.workdir={scratch}"]
    prestart.prestart(argv)
    assert processes_with(str(scratch))  # the early worker is up, or on its way
    other = settings_from_argv([*argv, "--SandboxKernel.timeout=5"]).for_kernel()  # (config)
    assert prestart.take(other, lambda event: None) is None
    assert processes_with(str(scratch)) == []  # closed before take returned
    assert not (scratch / ".tmp").exists()


def test_a_bad_command_line_starts_nothing_early(notebook_dir: Path) -> None:
    prestart.prestart(["--SandboxKernel.timeout=-1"])
    assert prestart.take(settings_from_argv([]), lambda event: None) is None


def test_a_config_file_is_never_ignored_for_speed(tmp_path: Path) -> None:
    """The early session is made from argv alone: a kernel whose config file adds to it runs
    in a sandbox with the config file's settings, and the early one is gone."""
    root, ipython_dir, scratch = tmp_path / "jupyter", tmp_path / "ipython", tmp_path / "scratch"
    scratch.mkdir()
    write_spec(root, "rewyn-test-configured", [f"--SandboxKernel.workdir={scratch}"])
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.SandboxKernel.env = {'FROM_CONFIG': 'yes'}\n"
    )
    old = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(ipython_dir)
    try:
        with running_kernel(root, "rewyn-test-configured") as (_, kc):
            cell = run_cell(kc, "import os; print(os.environ.get('FROM_CONFIG'))")
            assert cell.stream() == "yes\n"
            assert len(supervisors(scratch)) == 1, supervisors(scratch)
    finally:
        if old is None:
            os.environ.pop("IPYTHONDIR", None)
        else:
            os.environ["IPYTHONDIR"] = old
    assert wait_until_gone(str(scratch)) == []


COUNTED_BOOT = """
import traceback, pydantic.plugin._loader as loader
found = loader.entry_points
def counted(**kw):
    with open({scans!r}, 'a') as log:
        log.write(''.join(traceback.format_stack()))  # (where it was asked for)
    return found(**kw)
loader.entry_points = counted
{boot}
"""
"""The kernel's own start (``BOOT``), with each scan for pydantic plugins written down (and
what asked for it)."""


def test_a_kernel_starts_without_scanning_for_pydantic_plugins(tmp_path: Path) -> None:
    """The scan reads every installed distribution's metadata, a kernel's start's time for
    plugins it never uses; its models are built with the scan off (kernel/_plugins.py), on
    import as in the early start, and the sandbox's code still finds the switch unset."""
    scans = tmp_path / "scans.log"
    spec_dir = tmp_path / "kernels" / "rewyn-test-counted"
    spec_dir.mkdir(parents=True)
    program = COUNTED_BOOT.format(scans=str(scans), boot=BOOT.replace(";", "\n"))
    argv = [sys.executable, "-c", program, "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "counted", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    with running_kernel(tmp_path, "rewyn-test-counted") as (_, kc):
        cell = run_cell(kc, "import os; print(os.getenv('PYDANTIC_DISABLE_PLUGINS'))")
        assert cell.stream() == "None\n"
    assert not scans.exists(), scans.read_text()


def supervisors(scratch: Path) -> list[int]:
    """The sandbox workers (outermost processes) whose command line names ``scratch``."""
    found = set(processes_with(str(scratch)))
    parents = {}
    for pid in found:
        try:
            parents[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return sorted(pid for pid, parent in parents.items() if parent not in found)
