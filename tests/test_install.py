"""The README's Install section, command by command, as a user runs it from a clone: each install
in a fresh environment, then the result checked. The command answers ``--help`` and ``doctor``
(which proves a sandbox with that environment's interpreter and finds its kernelspec and
extension), each extra's module imports through the package and is absent without the extra, and
a tool's ``rewyn-kernel install --user`` gives a kernelspec whose kernel runs a cell.

The commands are read from README.md, so the two cannot drift: a line of the section this file
has no check for fails. Installs take their dependencies as a user's do (from the machine's
index and pip's cache; byte code left out), so each costs 15-25 s; the wheel is built once, and
its tests share one process (xdist_group), the other installs spread.

The wheel's environment, with no extras, also runs every command: the project's own .venv has
the dev extras, which hid that run and review needed nbformat.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rewyn_kernel.kernel.kernelspec import KERNEL_NAME
from rewyn_kernel.runtime.machine import cgroup_support, probe_bubblewrap
from rewyn_kernel.runtime.providers.landlock import probe_landlock
from tests.kernel_client import run_cell, running_kernel

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

VENV_LINE = "python3 -m venv venv && . venv/bin/activate"
"""The section's first line; every pip line below it runs in a venv made so, fresh for each."""
BUILD_LINE = "pip wheel --no-deps -w dist ."
USER_KERNEL_LINE = "rewyn-kernel install --user"
"""Run after each tool install (pipx, uv), whose environment Jupyter does not look in."""
EXTRA_CHECKS: dict[str, tuple[str, str]] = {
    "mcp": ("mcp", "from rewyn_kernel.mcp.server import build_server"),
    "papermill": (
        "papermill",
        "from papermill.engines import papermill_engines\n"
        "assert papermill_engines.get_engine('rewyn').__name__ == 'SandboxEngine'",
    ),
    "ray": ("ray", "from rewyn_kernel.runtime.cluster import RaySandboxPool"),
    # The site builds with this extra alone, as Read the Docs installs it (.readthedocs.yaml):
    # no Ray, no MCP SDK, warnings as errors.
    "docs": (
        "sphinx",
        "import subprocess, sys, tempfile\n"
        "out = tempfile.mkdtemp()\n"
        "argv = ['-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html']\n"
        f"subprocess.run([sys.executable, *argv, {str(ROOT / 'docs')!r}, out], check=True)",
    ),
}
"""Each extra: the top-level module it brings, and code that uses it through the package."""
COMMANDS = ("demo", "doctor", "install", "run", "review", "mcp", "files")


def install_section() -> str:
    text = (ROOT / "README.md").read_text()
    assert "\n## Install\n" in text, "README.md has no Install section"
    return text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]


def readme_lines() -> list[str]:
    """The lines of the Install section's code blocks, as written (comments and all)."""
    blocks = re.findall(r"^```\n(.*?)^```$", install_section(), re.MULTILINE | re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def bare(line: str) -> str:
    """``line`` without its comment (and with single spaces)."""
    return " ".join(words(line))


def installer(line: str) -> str | None:
    """Which tool ``line`` installs the package with (pip, pipx, uv), or None."""
    argv = words(line)
    if argv[:2] == ["pip", "install"]:
        return "pip"
    if argv[:2] == ["pipx", "install"]:
        return "pipx"
    if argv[:3] == ["uv", "tool", "install"]:
        return "uv"
    return None


def extras_of(line: str) -> frozenset[str]:
    found = re.search(r"\[([\w,-]+)\]$", words(line)[-1])
    return frozenset(found.group(1).split(",")) if found else frozenset()


INSTALL_LINES = [line for line in readme_lines() if installer(line)]


def from_wheel(line: str) -> bool:
    return "dist/" in line


@dataclass(frozen=True)
class Installed:
    """What one README install command left: an environment and its rewyn-kernel command."""

    line: str
    prefix: Path  # the environment (sys.prefix of its interpreter)
    command: Path  # rewyn-kernel, where the user's PATH finds it

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    @property
    def extras(self) -> frozenset[str]:
        return extras_of(self.line)


def user_env(bin_dirs: tuple[Path, ...] | list[Path], **extra: str) -> dict[str, str]:
    """The environment a user's shell gives a command: ``bin_dirs`` first on PATH (as an
    activated venv has it), nothing of the test's own venv or checkout."""
    own = Path(sys.prefix)
    kept = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    kept = [p for p in kept if not Path(p).resolve().is_relative_to(own.resolve())]
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PATH"] = os.pathsep.join([*map(str, bin_dirs), *kept])
    return env | extra


def shell(line: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    """Run ``line`` as a user's shell would; fail with its output unless it succeeds."""
    done = subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def fresh_venv(path: Path) -> Path:
    """What VENV_LINE makes (``python3 -m venv``, pip included); return its bin/."""
    venv.EnvBuilder(with_pip=True).create(path)
    return path / "bin"


def copy_checkout(target: Path) -> None:
    """The checkout's files as a clone of it has them: tracked, or new and not ignored."""
    if not (ROOT / ".git").exists():  # (an unpacked sdist)
        ignore = shutil.ignore_patterns(".venv*", "node_modules", "runs", "dist", "__pycache__")
        shutil.copytree(ROOT, target, ignore=ignore)
        return
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # (not one deleted but not yet committed)
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout, where the README's commands run (``.`` is the clone)."""
    target = tmp_path_factory.mktemp("clone")
    copy_checkout(target)
    return target


@pytest.fixture(scope="module")
def tool_bin(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tool_bin(name)``: the bin/ of a venv holding only ``pip install name`` (pipx or uv), as
    the README says to get them; one each."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            bin_dir = fresh_venv(tmp_path_factory.mktemp(f"tool-{name}") / "venv")
            shell(f"pip install -q {name}", bin_dir, user_env([bin_dir]))
            made[name] = bin_dir
        return made[name]

    return get


@pytest.fixture(scope="module")
def install(
    clone: Path, tool_bin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Installed]:
    """``install(line)``: run the README's install ``line`` as a user would, in a fresh
    environment (one per line and test process). A wheel's line first builds the wheel with
    BUILD_LINE in the same venv, as the README has it."""
    done: dict[str, Installed] = {}

    def get(line: str) -> Installed:
        if line in done:
            return done[line]
        where = tmp_path_factory.mktemp("install")
        kind = installer(line)
        # No byte code (start-up time only; ~6 s of CPU an install). (Not PIP_NO_COMPILE=1: pip
        # reads it as --no-compile's value, so it turns compiling on.)
        no_compile = {"PIP_COMPILE": "0"}
        if kind == "pip":
            bin_dir = fresh_venv(where / "venv")
            env = user_env([bin_dir], **no_compile)
            if from_wheel(line):
                if not list(clone.glob("dist/*.whl")):
                    shell(BUILD_LINE, clone, env)
                (wheel,) = clone.glob("dist/*.whl")
                assert wheel.name in line, f"the build makes {wheel.name}"
            shell(line, clone, env)
            found = Installed(line, bin_dir.parent, bin_dir / "rewyn-kernel")
        elif kind == "pipx":
            home, bin_dir = where / "pipx", where / "bin"
            paths = {"PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bin_dir)}
            paths["PIPX_MAN_DIR"] = str(where / "man")
            shell(line, clone, user_env([tool_bin("pipx"), bin_dir], **paths, **no_compile))
            prefix = home / "venvs" / "rewyn-kernel"
            found = Installed(line, prefix, bin_dir / "rewyn-kernel")
        else:
            assert kind == "uv", line
            tools, bin_dir = where / "uv", where / "bin"
            paths = {"UV_TOOL_DIR": str(tools), "UV_TOOL_BIN_DIR": str(bin_dir)}
            paths["UV_PYTHON_DOWNLOADS"] = "never"  # (this machine's Python, or fail)
            shell(line, clone, user_env([tool_bin("uv"), bin_dir], **paths))
            found = Installed(line, tools / "rewyn-kernel", bin_dir / "rewyn-kernel")
        done[line] = found
        return found

    return get


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
        env=user_env([bin_dir]) if env is None else env,
    )
    assert done.returncode == 0, f"rewyn-kernel {' '.join(map(str, args))}: {done.stderr}"
    return done.stdout


def test_the_install_section_has_no_line_without_a_check() -> None:
    lines = [bare(line) for line in readme_lines()]
    assert lines[0] == VENV_LINE
    unknown = [line for line in lines[1:] if not installer(line)]
    assert sorted(unknown) == sorted([BUILD_LINE, USER_KERNEL_LINE])
    assert {installer(line) for line in INSTALL_LINES} == {"pip", "pipx", "uv"}


def test_each_extra_has_a_line_that_says_what_it_adds() -> None:
    text = (ROOT / "pyproject.toml").read_text()  # (no tomllib on Python 3.10)
    block = text.split("\n[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+) = \[", block, re.MULTILINE)) - {"dev"}
    assert set(EXTRA_CHECKS) == extras
    for extra in extras:
        (line,) = [
            line for line in INSTALL_LINES if words(line) == ["pip", "install", f".[{extra}]"]
        ]
        assert re.search(r"\s#\s*\S", line), f"{line}: say what the extra adds"


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(
            line,
            marks=[pytest.mark.xdist_group("wheel")] if from_wheel(line) else [],
            id=bare(line),
        )
        for line in INSTALL_LINES
    ],
)
def test_readme_install_command(
    line: str, install: Callable[[str], Installed], tmp_path: Path
) -> None:
    found = install(line)
    bin_dir = found.command.parent
    text = command(bin_dir, "--help")
    assert all(name in text for name in COMMANDS), text

    text = command(bin_dir, "doctor")
    assert f"   [ok] python: {found.python}\n" in text
    share = found.prefix / "share" / "jupyter"  # (the wheel's shared data)
    assert f"[ok] kernelspec: {KERNEL_NAME} ({share}/kernels/{KERNEL_NAME})" in text
    assert f"[ok] labextension: {share}/labextensions/rewyn-kernel" in text

    for extra, (module, use) in EXTRA_CHECKS.items():
        if extra in found.extras:
            shell(f"{found.python} -c {shlex.quote(use)}", tmp_path, user_env([]))
        else:  # the extra is what brings it
            absent = f"import importlib.util as u, sys; sys.exit(bool(u.find_spec({module!r})))"
            shell(f"{found.python} -c {shlex.quote(absent)}", tmp_path, user_env([]))

    if installer(line) in {"pipx", "uv"}:
        data = tmp_path / "data"  # (the user's Jupyter data directory)
        shell(USER_KERNEL_LINE, tmp_path, user_env([bin_dir], JUPYTER_DATA_DIR=str(data)))
        spec = json.loads((data / "kernels" / KERNEL_NAME / "kernel.json").read_text())
        assert spec["argv"][0] == str(found.python)
        with running_kernel(data, KERNEL_NAME) as (_, kc):
            cell = run_cell(kc, "print(6 * 7)")
        assert cell.status == "ok", cell.reply
        assert cell.stream() == "42\n"


@pytest.fixture(scope="module")
def fresh(install: Callable[[str], Installed]) -> Path:
    """The bin/ of the README's install of the wheel with no extras."""
    (line,) = [line for line in INSTALL_LINES if from_wheel(line) and not extras_of(line)]
    return install(line).command.parent


wheel_group = pytest.mark.xdist_group("wheel")


@wheel_group
def test_xdist_keeps_a_group_in_one_process(request: pytest.FixtureRequest) -> None:
    """In a parallel run (tasks.py's --dist loadgroup), a grouped test's id ends with its group,
    which is how pytest-xdist keeps a group in one process; pytest 9.2 drops the suffix, and the
    groups spread with no error (pytest-dev/pytest-xdist#1386)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a parallel run with --dist loadgroup")
    assert request.node.nodeid.endswith("@wheel"), request.node.nodeid


@wheel_group
def test_help_names_every_command(fresh: Path) -> None:
    text = command(fresh, "--help")
    for name in ("demo", "doctor", "install", "run", "review"):
        assert name in text
    assert "``" not in text
    assert "(default: 600.0)" in command(fresh, "install", "--help")


@wheel_group
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


@wheel_group
def test_doctor_says_when_bubblewrap_is_missing_and_the_files_are_open(fresh: Path) -> None:
    """Without bwrap on PATH (as on a machine without the package), the default falls back to
    the landlock provider where this kernel has Landlock, else to the subprocess provider, and
    doctor says so and why."""
    text = command(fresh, "doctor", env={**user_env([]), "PATH": str(fresh)})
    assert "bubblewrap: NOT usable" in text
    assert "bwrap is not installed (the package bubblewrap)" in text
    local = "landlock" if probe_landlock().works else "subprocess"
    assert f"default provider (create() and the kernel's provider=auto): {local}\n" in text
    said = {
        "landlock": "landlock, Landlock and seccomp without namespaces",
        "subprocess": "subprocess, which leaves the host's files open to the code",
    }[local]
    assert (
        f"rewyn-kernel mcp without --provider (and --image python:3.13-slim): {said} (bubblewrap "
        "cannot run here: bwrap is not installed (the package bubblewrap); no container engine "
        "answers with the image python:3.13-slim: docker: binary: docker is not on PATH;"
    ) in text
    if local == "subprocess":
        assert "the host's files are open to the code: bwrap is not installed" in text


@wheel_group
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
    subprocess.run([fresh / "python", "-c", make_log], check=True, timeout=120, env=user_env([]))
    command(fresh, "review", log, "-o", tmp_path / "review.ipynb")
    cells = json.loads((tmp_path / "review.ipynb").read_text())["cells"]
    assert len(cells) == 3  # the header and one cell per execution


@wheel_group
def test_demo_runs(fresh: Path, tmp_path: Path) -> None:
    text = command(fresh, "demo", cwd=tmp_path)
    assert "exit_code=124 ending=timeout" in text
