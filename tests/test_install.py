"""A plain ``pip install`` of the wheel, with no extras, into a fresh venv: every command works.

(The project's own .venv has the dev extras, which hid that run and review needed nbformat.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap
from rewyn_kernel.runtime.providers.local.cgroup import cgroup_support

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]  # (one wheel, built once)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a new venv into which only the built wheel was pip-installed."""
    root = tmp_path_factory.mktemp("fresh")
    dist = root / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("rewyn_kernel-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    subprocess.run(
        [bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
        check=True,
        timeout=900,
    )
    return bin_dir


def command(
    bin_dir: Path, *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> str:
    done = subprocess.run(
        [bin_dir / "rewyn-kernel", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, f"rewyn-kernel {' '.join(map(str, args))}: {done.stderr}"
    return done.stdout


def test_help_names_every_command(fresh: Path) -> None:
    text = command(fresh, "--help")
    for name in ("demo", "doctor", "install", "run", "review"):
        assert name in text
    assert "``" not in text
    assert "(default: 600.0)" in command(fresh, "install", "--help")


def test_doctor_finds_the_provider_the_kernelspec_and_the_extension(fresh: Path) -> None:
    text = command(fresh, "doctor")
    assert "subprocess: usable" in text
    # (each usable provider proved by a real sandbox, with the venv's own interpreter)
    assert f"   [ok] python: {fresh}/python" in text
    assert text.count("   [ok] start: a sandbox ran Python 3.") >= 1 + probe_bubblewrap().works
    found = probe_bubblewrap()
    assert ("bubblewrap: usable" in text) is found.works, text
    default = "bubblewrap" if found.works else "subprocess"
    assert f"default provider (create() and the kernel's provider=auto): {default}\n" in text
    support = cgroup_support()
    assert f"[{'ok' if support.parent else '!!'}] {support.detail}" in text
    assert f"[ok] kernelspec: rewyn-sandbox ({fresh.parent}/share/jupyter/kernels" in text
    assert f"[ok] labextension: {fresh.parent}/share/jupyter/labextensions/rewyn-kernel" in text


def test_doctor_says_when_bubblewrap_is_missing_and_the_files_are_open(fresh: Path) -> None:
    """Without bwrap on PATH (as on a machine without the package), the default falls back to
    the subprocess provider, and doctor says so and why."""
    text = command(fresh, "doctor", env={**os.environ, "PATH": str(fresh)})
    assert "bubblewrap: NOT usable" in text
    assert "bwrap is not installed (the package bubblewrap)" in text
    assert "default provider (create() and the kernel's provider=auto): subprocess\n" in text
    assert "the host's files are open to the code: bwrap is not installed" in text
    assert (
        "rewyn-kernel mcp without --provider (and --image python:3.13-slim): subprocess, which "
        "leaves the host's files open to the code (bubblewrap cannot run here: bwrap is not "
        "installed (the package bubblewrap); no container engine answers with the image "
        "python:3.13-slim: docker: binary: docker is not on PATH;"
    ) in text


def test_install_run_and_review(fresh: Path, tmp_path: Path) -> None:
    command(fresh, "install", "--prefix", tmp_path / "prefix", "--name", "fresh", "--memory", "256")
    spec = json.loads((tmp_path / "prefix/share/jupyter/kernels/fresh/kernel.json").read_text())
    assert spec["argv"][-1] == "--SandboxKernel.memory_limit_mb=256"

    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "a",
                "metadata": {},
                "outputs": [],
                "source": "print(6 * 7)",
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook))
    command(fresh, "run", tmp_path / "nb.ipynb", "-o", tmp_path / "out.ipynb")
    cell = json.loads((tmp_path / "out.ipynb").read_text())["cells"][0]
    assert "".join(cell["outputs"][0]["text"]) == "42\n"
    assert cell["metadata"]["rewyn_kernel"]["record"]["ending"] == "completed"
    (event,) = [
        json.loads(line) for line in (tmp_path / "out.events.jsonl").read_text().splitlines()
    ]
    assert event["ok"] is True  # the whole event, in the run log beside the output

    log = tmp_path / "run.jsonl"
    make_log = (
        "from rewyn_kernel.runtime import JsonlRunLog, create\n"
        f"box = create(listeners=[JsonlRunLog({str(log)!r})])\n"
        "box.execute('print(1)'); box.execute('1/0'); box.close()\n"
    )
    subprocess.run([fresh / "python", "-c", make_log], check=True, timeout=120)
    command(fresh, "review", log, "-o", tmp_path / "review.ipynb")
    cells = json.loads((tmp_path / "review.ipynb").read_text())["cells"]
    assert len(cells) == 3  # the header and one cell per execution


def test_demo_runs(fresh: Path, tmp_path: Path) -> None:
    text = command(fresh, "demo", cwd=tmp_path)
    assert "exit_code=124 ending=timeout" in text
