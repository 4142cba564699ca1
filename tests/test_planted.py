"""Nothing the code writes is ever imported or run by a sandbox's supervisor, a later worker, the
kernel process or any other host program.

A module the code plants (in its scratch directory, beside a notebook, as a ``.pth`` or
``usercustomize`` under HOME) records who imported it: a file named after the importing process's
pid in HOME. The supervisor is each sandbox's first process, pid 1 in its PID namespace; the code's
own processes may import what the code wrote (ipykernel puts the working directory first on the
path too), so only a record of pid 1, or of a host process, is a failure. Planted modules also try
to forge the next result, so the check that a result is what the code did can fail too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from rewyn_kernel.runtime import SandboxSpec, create
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .kernel_client import run_cell, running_kernel, write_spec

NAMES = (
    "struct",
    "json",
    "getpass",
    "resource",
    "selectors",
    "traceback",
    "fcntl",
    "ctypes",
    "mmap",
    "queue",
    "threading",
    "tempfile",
    "sitecustomize",
    "usercustomize",
    "rewyn_worker",
)
"""Modules the worker (or Python's start-up) imports, planted under their own names."""
PLANTED = textwrap.dedent(
    """
    import os, sys
    where = os.environ.get("PLANTED_LOG") or os.environ.get("HOME") or "/tmp"
    try:
        with open(os.path.join(where, "imported-%s-by-%d" % (__name__, os.getpid())), "w"):
            pass
    except OSError:
        pass
    # Forge: whoever imports this reports success for whatever runs next.
    sys.exit = lambda *args: None
    """
)
ATTACK = (
    "import os, site, sys\n"
    "names = {names!r}\n"
    "body = {body!r}\n"
    "for name in names:\n"
    "    open(name + '.py', 'w').write(body)\n"
    "os.makedirs('struct_pkg', exist_ok=True)\n"
    "user_site = site.getusersitepackages()\n"
    "os.makedirs(user_site, exist_ok=True)\n"
    "open(os.path.join(user_site, 'usercustomize.py'), 'w').write(body)\n"
    "open(os.path.join(user_site, 'evil.pth'), 'w').write('import sitecustomize\\n')\n"
    "print('planted', len(names))\n"
)


def plant_code() -> str:
    return ATTACK.format(names=NAMES, body=PLANTED)


def imported_by_supervisor(folder: Path) -> list[str]:
    """The planted modules a sandbox's first process (pid 1) imported, from the records."""
    return sorted(path.name for path in folder.glob("imported-*-by-1"))


def test_a_restarted_worker_imports_nothing_the_code_wrote(
    make_box: Callable[..., Sandbox],
) -> None:
    """Plant in scratch (the code's working directory and HOME), then make the sandbox start
    fresh workers: one-shot executions, a session restarted, a sandbox made anew on the same
    directory. None of their supervisors imports a planted module, and no result is forged."""
    box = make_box()
    planted = box.execute(plant_code())
    assert planted.ok, planted.stderr
    with box.session() as session:
        assert session.execute("print(1)").stdout == "1\n"
        session.restart()
        assert session.execute("raise SystemExit(3)").exit_code == 3
    forged = box.execute("raise SystemExit(3)")
    assert (forged.ending, forged.exit_code) == ("exit", 3), forged
    records = [entry.name for entry in box.list_files() if entry.name.startswith("imported-")]
    assert not [name for name in records if name.endswith("-by-1")], records


@pytest.mark.providers("subprocess", "bubblewrap")
def test_a_sandbox_made_on_a_planted_directory_imports_none_of_it(
    provider: SandboxProvider, tmp_path: Path
) -> None:
    """The same on a workdir that already holds the planted modules (a later sandbox)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with create(provider=provider, workdir=scratch) as box:
        assert box.execute(plant_code()).ok
    with create(provider=provider, workdir=scratch) as box, box.session() as session:
        assert session.execute("raise SystemExit(3)").exit_code == 3
        assert box.execute("raise SystemExit(4)").exit_code == 4
    assert imported_by_supervisor(scratch) == []


def test_modules_beside_a_notebook_are_not_imported_by_its_sandboxes(
    provider: SandboxProvider, tmp_path: Path
) -> None:
    """A getpass.py (and the rest) written beside a notebook, where the supervisor changes
    directory to run the code there: none of the sandboxes of that notebook imports it."""
    notebook = tmp_path / "project"
    notebook.mkdir()
    for name in NAMES:
        (notebook / f"{name}.py").write_text(PLANTED)
    spec = SandboxSpec(workspace=notebook, ipython=True)
    with create(spec, provider=provider) as box, box.session() as session:
        assert session.execute("raise SystemExit(3)").exit_code == 3
        assert box.execute("raise SystemExit(4)").exit_code == 4
        records = [entry.name for entry in box.list_files() if entry.name.startswith("imported-")]
    assert not [name for name in records if name.endswith("-by-1")], records


def test_the_kernel_process_imports_nothing_from_the_notebooks_directory(
    tmp_path: Path,
) -> None:
    """Jupyter starts a kernel in its notebook's directory: modules there named after what the
    kernel process imports (its own package too) never run on the host."""
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    log = tmp_path / "host-log"
    log.mkdir()
    body = PLANTED.replace('os.environ.get("PLANTED_LOG")', repr(str(log)))
    host_names = (
        "pydantic",
        "traitlets",
        "zmq",
        "jupyter_client",
        "jupyter_core",
        "ipykernel",
        "runpy",
        "json",
        "typing_extensions",
        "tornado",
        "nest_asyncio",
    )
    for name in host_names:
        (notebook / f"{name}.py").write_text(body)
    (notebook / "rewyn_kernel").mkdir()
    (notebook / "rewyn_kernel" / "__init__.py").write_text(body)
    write_spec(tmp_path / "spec", "planted")
    with running_kernel(tmp_path / "spec", "planted", cwd=notebook) as (_, kc):
        cell = run_cell(kc, "import os; print(os.getcwd())")
        assert cell.status == "ok", cell.messages
        assert cell.stream().strip() == str(notebook)
    assert sorted(path.name for path in log.iterdir()) == []


def test_the_next_kernel_of_a_notebook_reports_what_its_code_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack of issue 22, end to end: a kernel's code writes a getpass.py (and the rest)
    beside its notebook, kept there as every write is; later ``rewyn-kernel run`` on the
    person's notebook starts a kernel of the same notebook. Its supervisor imports none of
    them (they would record it beside the notebook), and the ``1/0`` fails."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # (the kept packages')
    folder = tmp_path / "analysis"
    folder.mkdir()
    path = folder / "analysis.ipynb"
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.cells = [nbformat.v4.new_code_cell("1 / 0")]  # type: ignore[no-untyped-call]
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]
    beside = PLANTED.replace('os.environ.get("PLANTED_LOG")', "os.getcwd()")
    write_spec(tmp_path / "spec", "sandbox")
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))  # (the kernel of that notebook)
    with running_kernel(tmp_path / "spec", "sandbox", cwd=folder) as (_, kc):
        cell = run_cell(kc, ATTACK.format(names=NAMES, body=beside))
        assert cell.status == "ok", cell.messages
    planted = sorted(p.name for p in folder.rglob("getpass.py"))
    assert planted == ["getpass.py"]  # (kept beside the notebook, in its sandbox's writes)
    monkeypatch.delenv("JPY_SESSION_NAME")
    done = subprocess.run(
        [sys.executable, "-m", "rewyn_kernel.cli", "run", path, "-o", tmp_path / "o.ipynb"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = nbformat.read(tmp_path / "o.ipynb", as_version=4)  # type: ignore[no-untyped-call]
    # (the user-site files it planted are kept for the notebook, as installs are, so the next
    # kernel's code process reads them as it starts, and may write before the cell's error:
    # docs/how-to/packages.md)
    errors = [output for output in out.cells[0].outputs if output["output_type"] == "error"]
    assert [error["ename"] for error in errors] == ["ZeroDivisionError"]
    records = sorted(p.name for p in folder.rglob("imported-*-by-1"))
    assert records == [], records


def test_the_control_a_plain_python_in_the_folder_does_import_them(tmp_path: Path) -> None:
    """The control: ``python -c`` started in a folder with a planted module imports it (so the
    records above can show it when it happens)."""
    (tmp_path / "json.py").write_text(PLANTED.replace('os.environ.get("PLANTED_LOG")', "'.'"))
    subprocess.run([sys.executable, "-c", "import json"], cwd=tmp_path, check=True)
    assert [path.name for path in tmp_path.glob("imported-json-by-*")]
