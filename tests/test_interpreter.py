"""The sandbox's interpreter, however it was named: a host started as ``../venv/bin/python``
(a relative path, a folder the sandbox does not see), a venv (its ``bin/python`` a link that
must not be followed), a bare name, a link on the way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap
from rewyn_kernel.runtime.providers.local import local_python
from rewyn_kernel.runtime.sandbox import SandboxProvider

from .conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys
from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.sandbox import BubblewrapProvider, SubprocessProvider
kind = sys.argv[1]
provider = BubblewrapProvider() if kind == "bubblewrap" else SubprocessProvider()
with create(provider=provider, python=sys.argv[2] if len(sys.argv) > 2 else None) as box:
    result = box.execute("import sys; print(sys.prefix)")
print(json.dumps({"host": sys.executable, "exit_code": result.exit_code,
                  "stdout": result.stdout, "stderr": result.stderr}))
"""


def project_venv(folder: Path) -> Path:
    """A new venv at ``folder`` (its python a link, as venvs make it) that imports this
    checkout and its dependencies through a .pth file, as an editable install would."""
    venv.EnvBuilder(symlinks=True).create(folder)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    (site / "rewyn-checkout.pth").write_text(f"{sysconfig.get_path('purelib')}\n{ROOT}\n")
    assert (folder / "bin" / "python").is_symlink()
    return folder


def run_script(cwd: Path, python: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "eval.py", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_host_started_by_a_relative_path_runs_its_sandboxes_in_its_venv(
    provider: SandboxProvider, tmp_path: Path
) -> None:
    """``cd out && ../venv/bin/python eval.py``: the host's sys.executable is
    ``.../out/../venv/bin/python``, a path through a folder the sandbox does not see; the
    sandbox runs that venv's Python all the same, the venv kept (not its base interpreter)."""
    project_venv(tmp_path / "venv")
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval.py").write_text(SCRIPT)
    found = run_script(out, "../venv/bin/python", provider.name)
    assert found["host"] == f"{out}/../venv/bin/python"  # (what the runs had)
    assert found["exit_code"] == 0, found["stderr"]
    assert found["stdout"] == f"{tmp_path / 'venv'}\n"


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_relative_python_in_the_spec_is_the_one_its_folder_names(
    provider: SandboxProvider, tmp_path: Path
) -> None:
    """``python="link/../venv/bin/python"`` where ``link`` leads elsewhere: the kernel's
    meaning (the venv beside the link's target), not the text's (a venv beside ``link``)."""
    project_venv(tmp_path / "elsewhere" / "venv")
    (tmp_path / "elsewhere" / "deep").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(tmp_path / "elsewhere" / "deep")
    (work / "eval.py").write_text(SCRIPT)
    found = run_script(work, sys.executable, provider.name, "link/../venv/bin/python")
    assert found["exit_code"] == 0, found["stderr"]
    assert found["stdout"] == f"{tmp_path / 'elsewhere' / 'venv'}\n"


def test_local_python_keeps_the_venvs_link_and_resolves_the_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_venv(tmp_path / "venv")
    (tmp_path / "out").mkdir()
    (tmp_path / "shortcut").symlink_to(tmp_path / "venv" / "bin")
    monkeypatch.chdir(tmp_path / "out")
    expected = f"{tmp_path}/venv/bin/python"
    assert local_python("../venv/bin/python") == expected
    assert local_python(f"{tmp_path}/out/../venv/bin/python") == expected
    assert local_python("../shortcut/python") == expected  # (a linked folder: resolved)
    assert os.path.islink(local_python("../venv/bin/python"))  # (the venv's own link kept)
    assert local_python("python3") == shutil.which("python3")
    assert local_python("no-such-python-here") == "no-such-python-here"
    assert local_python() == local_python(sys.executable)


def test_doctor_starts_a_sandbox_with_the_interpreter_and_shows_why_it_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interpreter whose pieces all check out but that does not start: doctor says the
    local providers are NOT usable, with what the start wrote to stderr."""
    from rewyn_kernel.cli import main

    if not probe_bubblewrap().works:
        unavailable("bubblewrap is not usable here: apt-get install bubblewrap")
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'this python is broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    main(["doctor", "--python", str(broken)])
    text = capsys.readouterr().out
    found = sections(text)
    for name in ("bubblewrap", "subprocess"):
        assert found[name] == "NOT usable", text
        assert f"[ok] python: {broken}" in found[f"{name} items"]
        assert (
            "[!!] start: the sandbox did not start: it exited with code 3 before it was ready\n"
            "stderr| this python is broken"
        ) in found[f"{name} items"], text


def sections(text: str) -> dict[str, str]:
    """doctor's output by provider: ``NAME`` gives its verdict, ``NAME items`` its lines."""
    found: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if not line.startswith(" "):
            name, _, verdict = line.partition(": ")
            found[name], found[f"{name} items"] = verdict, ""
        elif name:
            found[f"{name} items"] += line.strip() + "\n"
    return found


def test_doctor_run_by_a_relative_path_starts_its_sandboxes(tmp_path: Path) -> None:
    """The issue's run: ``../venv/bin/python`` from another folder; doctor's trial sandboxes
    start with that interpreter, as the sandboxes of that run do."""
    if not probe_bubblewrap().works:
        unavailable("bubblewrap is not usable here: apt-get install bubblewrap")
    project_venv(tmp_path / "venv")
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        ["../venv/bin/python", "-m", "rewyn_kernel.cli", "doctor"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = sections(done.stdout)
    for name in ("bubblewrap", "subprocess"):
        assert found[name] == "usable", done.stdout
        assert f"[ok] python: {tmp_path}/venv/bin/python\n" in found[f"{name} items"]
        assert "[ok] start: a sandbox ran Python 3." in found[f"{name} items"]
