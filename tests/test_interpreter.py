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

from rewyn_kernel.runtime.providers.local import local_python
from rewyn_kernel.runtime.sandbox import SandboxProvider

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
