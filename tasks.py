#!/usr/bin/env python3
"""Set up and run rewyn-kernel from a fresh checkout, with nothing but python3.

    python3 tasks.py demo     the main job: the quickstart notebook through the sandbox kernel,
                              in a venv of its own (.venv-demo) holding the package alone
    python3 tasks.py test     the whole test suite, with the format, lint and type checks
    python3 tasks.py bench    benchmarks that print figures
    python3 tasks.py prepare  create or update .venv, the extension's node_modules and the
                              lowest-versions venv, and stop: what `test` does first (.ci/run
                              overlaps it with the engines' set-up)
    python3 tasks.py docs     build the documentation site into docs/_build/html (warnings are
                              errors); --serve then serves it on http://127.0.0.1:8000/
    python3 tasks.py labextension
                              rebuild the JupyterLab extension from labextension/ into
                              rewyn_kernel/labextension (needs Node.js >= 18 and npm)
    python3 tasks.py screenshots
                              run the browser tests that take the documentation's screenshots,
                              writing them into docs/_static/screens (elsewhere those tests
                              compare the page with them)

Each command creates or updates its venv first (``.venv``, the developer's, with the dev extras;
``.venv-demo`` for the demo), reinstalling when what the install copies changes, so it works on a
machine that has never seen the project.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".rewyn-installed"
LABEXTENSION = ROOT / "labextension"
NODE_MODULES = LABEXTENSION / "node_modules"
NODE_STAMP = NODE_MODULES / ".rewyn-installed"
# What an install copies into .venv/share (wheel shared-data), so a change must reinstall.
PROVIDER_PACKAGE = ROOT / "tests" / "provider_package"
"""A provider in a package of its own, registered by entry point (the shared provider tests run
on it): installed into .venv as a third party's would be, not editable."""
INSTALLED_INPUTS = [
    ROOT / "pyproject.toml",
    ROOT / "kernelspec",
    ROOT / "rewyn_kernel" / "labextension",
    LABEXTENSION / "install.json",
    PROVIDER_PACKAGE,
]


def run(*argv: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], cwd=cwd, check=True, env=env)


def digest(paths: list[Path]) -> str:
    """sha256 over the names and bytes of ``paths`` (directories walked in sorted order; byte
    code caches left out)."""
    hasher = hashlib.sha256()
    for path in paths:
        if not path.exists():  # e.g. a build that failed half-way: reinstall once it is back
            hasher.update(str(path.relative_to(ROOT)).encode() + b"\0missing")
            continue
        files = (
            sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if path.is_dir()
            else [path]
        )
        for file in files:
            hasher.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return hasher.hexdigest()


def ensure_venv() -> None:
    """Create .venv and install the project with its dev extras, unless already current."""
    wanted = digest(INSTALLED_INPUTS)
    if STAMP.exists() and STAMP.read_text() == wanted and (BIN / "python").exists():
        return
    if not (BIN / "python").exists():
        print(f"+ creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip: list[str | Path] = [BIN / "python", "-m", "pip", "--disable-pip-version-check", "-q"]
    run(*pip, "install", "--upgrade", "pip")
    run(*pip, "install", "-e", ".[dev]")
    run(*pip, "install", "--no-deps", "--force-reinstall", PROVIDER_PACKAGE)
    shutil.rmtree(PROVIDER_PACKAGE / "build", ignore_errors=True)  # (what the build left)
    STAMP.write_text(wanted)


DEMO_VENV = ROOT / ".venv-demo"
DEMO_INPUTS = [
    ROOT / "pyproject.toml",
    ROOT / "kernelspec",
    ROOT / "rewyn_kernel",  # (the built extension too)
    LABEXTENSION / "install.json",
]
"""What ``pip install .`` puts into .venv-demo: a change to any of them reinstalls."""
DEMO_NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
DEMO_OUTPUT = ROOT / "runs" / "quickstart.ipynb"
DEMO_RUN_LOG = ROOT / "runs" / "quickstart.events.jsonl"
"""Where ``rewyn-kernel run`` keeps the run's SANDBOX_EXECUTED events (its default, beside the
output notebook)."""


def ensure_demo_venv() -> Path:
    """Create or update .venv-demo; return its bin/.

    It holds what the demo uses and nothing else: the package as a user's ``pip install .``
    leaves it (not editable), with its dependencies, which bring the kernel, a kernel client
    (jupyter_client) and nbclient to run the notebook; the quickstart imports nothing more. Not
    editable, so the demo runs what a user installs (the package inside the venv, where the
    sandbox's interpreter finds it; the kernelspec and the extension in its share/), at the
    cost of a reinstall (a few seconds) after a change to the sources.
    """
    bin_dir = DEMO_VENV / "bin"
    stamp = DEMO_VENV / ".rewyn-installed"
    wanted = digest(DEMO_INPUTS)
    if stamp.exists() and stamp.read_text() == wanted and (bin_dir / "python").exists():
        return bin_dir
    if not (bin_dir / "python").exists():
        print(f"+ creating {DEMO_VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(DEMO_VENV)
    run(bin_dir / "python", "-m", "pip", "--disable-pip-version-check", "-q", "install", ".")
    stamp.write_text(wanted)
    return bin_dir


def shown(path: Path) -> str:
    """``path`` as a person types it from here: relative when under the current directory."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def demo() -> None:
    """Run the quickstart notebook on the sandbox kernel from .venv-demo, with a fresh run log;
    end on what to do next with what it wrote."""
    bin_dir = ensure_demo_venv()
    DEMO_RUN_LOG.unlink(missing_ok=True)  # the log appends: keep this run's events only
    run(bin_dir / "rewyn-kernel", "run", DEMO_NOTEBOOK, "-o", DEMO_OUTPUT)
    print(
        f"Wrote {shown(DEMO_OUTPUT)} (each cell's record in its metadata) and its run log "
        f"{shown(DEMO_RUN_LOG)} (each execution's whole event)."
    )
    venv_bin = shown(bin_dir)
    print(
        f"Next: open {shown(DEMO_OUTPUT)} in JupyterLab ({venv_bin}/pip install "
        f"'jupyterlab>=4,<5', then {venv_bin}/jupyter lab {shown(DEMO_OUTPUT)}), and review its "
        f"run log: {venv_bin}/rewyn-kernel review {shown(DEMO_RUN_LOG)} -o "
        f"{shown(DEMO_RUN_LOG.with_name('quickstart.review.ipynb'))}"
    )


WORKER_MYPY = "mypy==1.14.1"
"""The last mypy that checks code for Python 3.8, which the in-sandbox worker must run on (the
project's own mypy checks 3.10 and newer). Installed on its own, beside .venv."""
WORKER_MYPY_DIR = VENV / "worker-mypy"


def check_worker() -> None:
    """Type-check the worker as the package it becomes in a sandbox, for Python 3.8."""
    stamp = WORKER_MYPY_DIR / ".rewyn-installed"
    if not stamp.exists() or stamp.read_text() != WORKER_MYPY:
        shutil.rmtree(WORKER_MYPY_DIR, ignore_errors=True)
        run(
            BIN / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--target",
            WORKER_MYPY_DIR,
            WORKER_MYPY,
        )
        stamp.write_text(WORKER_MYPY)
    with tempfile.TemporaryDirectory(prefix="rewyn-worker-mypy-") as folder:
        package = Path(folder) / "rewyn_worker"
        shutil.copytree(
            ROOT / "rewyn_kernel" / "runtime" / "worker",
            package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        config = Path(folder) / "mypy.ini"
        # IPython, traitlets, comm and matplotlib's inline backend are the sandbox's, where it
        # has them: not checked here.
        config.write_text(
            "[mypy]\nstrict = True\nwarn_unreachable = True\npython_version = 3.8\n"
            "[mypy-IPython.*,traitlets.*,comm.*,matplotlib_inline.*]\nfollow_imports = skip\n"
            "ignore_missing_imports = True\n"
        )
        env = {**os.environ, "PYTHONPATH": str(WORKER_MYPY_DIR)}
        run(
            BIN / "python",
            "-m",
            "mypy",
            "--no-incremental",
            "--config-file",
            config,
            "-p",
            "rewyn_worker",
            cwd=Path(folder),
            env=env,
        )


PARALLEL = ["-n", "2", "--dist", "loadgroup"]
"""The main suite on two processes (pytest-xdist): the tests of one ``xdist_group`` (the
browser's, Ray's, the wheel's) stay in one."""
SLOWEST = ["--durations=20"]
"""The main suite ends on its 20 slowest tests (setup, call and teardown apart): where CI's
time goes."""
LOWEST_VENV = VENV / "lowest"
LOWEST_TESTS = [
    "tests/test_kernel.py",
    "tests/test_kernel_conformance.py",
    "tests/test_kernelspec.py",
    "tests/test_magic.py",
    "tests/test_settings.py",
    "tests/test_notebook_run.py",
    "tests/test_review.py",
    "tests/test_safety.py",
]
"""The kernel's tests, run once more on the lowest version of every dependency pyproject.toml
declares (the floors it promises)."""


LOWEST_TOOLS = [
    *("pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "jupyter_kernel_test>=0.7"),
    *("matplotlib>=3.8", "pandas>=2.1", "jinja2>=3.1", "plotly>=5.18", "altair>=5.4,<6"),
]
"""What the lowest-versions run needs beside the pins: the test tools (it runs on two
processes too, as these tests do in the main suite), matplotlib (the kernel's tests draw an
inline plot in the sandbox), pandas and jinja2 (the output filter's tests check a real Styler's
HTML), plotly and altair (the output filter's and the kernel's chart tests)."""


def lowest_pins() -> list[str]:
    """``name==floor`` for each ``name>=floor`` in pyproject.toml's dependencies."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    pins = re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][^,"]*)', block)
    return [f"{name}=={floor}" for name, floor in pins]


def prepare_lowest() -> Path:
    """Create (or keep, if current) the venv holding the lowest declared versions; return its
    interpreter. Network-bound: ``test`` runs it beside the main suite."""
    python = LOWEST_VENV / "bin" / "python"
    wanted = digest([ROOT / "pyproject.toml"]) + " " + " ".join(LOWEST_TOOLS)
    stamp = LOWEST_VENV / ".rewyn-installed"
    if not (stamp.exists() and stamp.read_text() == wanted and python.exists()):
        shutil.rmtree(LOWEST_VENV, ignore_errors=True)
        print(f"+ creating {LOWEST_VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(LOWEST_VENV)
        pip: list[str | Path] = [python, "-m", "pip", "--disable-pip-version-check", "-q"]
        run(*pip, "install", "-e", ".", *LOWEST_TOOLS, *lowest_pins())
        stamp.write_text(wanted)
    return python


def test_lowest(python: Path) -> None:
    """Run LOWEST_TESTS on ``python`` (``prepare_lowest``'s)."""
    # jupyter_core 5.1 warns that its paths will change unless this is set; warnings fail tests.
    env = {**os.environ, "JUPYTER_PLATFORM_DIRS": "1"}
    pytest: list[str | Path] = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", *PARALLEL]
    run(*pytest, *LOWEST_TESTS, env=env)


def ensure_node_modules() -> bool:
    """``npm ci`` in labextension/ unless current with its lock file; False without npm."""
    npm = shutil.which("npm")
    if npm is None:
        return False
    wanted = digest([LABEXTENSION / "package.json", LABEXTENSION / "package-lock.json"])
    if NODE_STAMP.exists() and NODE_STAMP.read_text() == wanted:
        return True
    run(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", cwd=LABEXTENSION)
    NODE_STAMP.write_text(wanted)
    return True


def build_labextension() -> None:
    """Compile the TypeScript and bundle it where the wheel takes it from."""
    if not ensure_node_modules():
        raise SystemExit("tasks.py labextension: needs Node.js and npm (apt-get install npm)")
    output = ROOT / "rewyn_kernel" / "labextension"
    previous = LABEXTENSION / ".previous-build"
    if previous.exists() and not output.exists():
        previous.rename(output)  # a build interrupted before it could put the old one back
    shutil.rmtree(previous, ignore_errors=True)
    if output.exists():
        output.rename(previous)  # a fresh output (no stale chunks), and the old one if it fails
    shutil.rmtree(LABEXTENSION / "lib", ignore_errors=True)
    (LABEXTENSION / "tsconfig.tsbuildinfo").unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        run("npm", "run", "build", cwd=LABEXTENSION, env=env)
    except BaseException:
        shutil.rmtree(output, ignore_errors=True)
        if previous.exists():
            previous.rename(output)
        raise
    shutil.rmtree(previous, ignore_errors=True)


DOCS = ROOT / "docs"
DOCS_HTML = DOCS / "_build" / "html"


def build_docs() -> None:
    """The site, as Read the Docs builds it: every warning an error, every one shown."""
    run(BIN / "sphinx-build", "-W", "--keep-going", "-q", "-b", "html", DOCS, DOCS_HTML)


SCREENS = DOCS / "_static" / "screens"
SCREENSHOT_TESTS = [
    "tests/test_browser.py::test_each_cell_that_ran_has_one_status_line[lab]",
    "tests/test_browser.py::test_a_review_opens_on_its_kernel_without_asking",
    "tests/test_browser.py::test_an_undo_names_the_kept_version_of_the_file_a_cell_replaced",
    "tests/test_agent_banner.py::test_agent_cells_show_who_wrote_them_and_what_became_of_them[lab]",
]
"""The browser tests that take the screenshots (tests/jupyter_browser.py's ``shoot``; the fast
test tests/test_screenshots.py checks this list against the tests)."""


def screenshots() -> None:
    """Take the documentation's screenshots again (``REWYN_SCREENSHOTS=write``); list them."""
    env = {**os.environ, "REWYN_SCREENSHOTS": "write"}
    run(BIN / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *SCREENSHOT_TESTS, env=env)
    for png in sorted(SCREENS.glob("*.png")):
        print(f"tasks.py: {png.relative_to(ROOT)}: {png.stat().st_size:,} bytes")


def serve_docs(port: int = 8000) -> None:
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(DOCS_HTML))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"tasks.py: serving {DOCS_HTML} on http://127.0.0.1:{port}/ (Ctrl-C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command not in {"demo", "prepare", "test", "bench", "docs", "labextension", "screenshots"}:
        print(__doc__)
        return 2
    try:
        if command == "demo":
            demo()
            return 0
        ensure_venv()
        # (.venv's install is editable: no byte code caches in the checkout)
        os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        if command == "prepare":  # (then `test` finds each current and goes straight on)
            try:
                ensure_node_modules()
            except subprocess.CalledProcessError as exc:
                print(f"tasks.py: npm ci failed ({exc}); `test` tries again")
            prepare_lowest()
        elif command == "bench":
            run(BIN / "python", "-m", "benchmarks.bench_runtime", *argv[1:])
        elif command == "docs":
            build_docs()
            print(f"tasks.py: the site is in {DOCS_HTML}/index.html")
            if "--serve" in argv[1:]:
                serve_docs()
        elif command == "screenshots":
            screenshots()
        elif command == "labextension":
            build_labextension()
            ensure_venv()  # put the new build where Jupyter finds it
        else:
            try:  # for the tests that rebuild the extension (they skip without, or fail in CI)
                ensure_node_modules()
            except subprocess.CalledProcessError as exc:
                print(f"tasks.py: npm ci failed ({exc}); the extension rebuild tests will not run")
            with ThreadPoolExecutor(1) as pool:
                # (the lowest-versions venv is installed meanwhile: it waits on the network)
                lowest = None if argv[1:] else pool.submit(prepare_lowest)
                run(BIN / "ruff", "format", "--check", ".")
                run(BIN / "ruff", "check", ".")
                run(BIN / "mypy")
                check_worker()
                run(BIN / "python", "-m", "pytest", *PARALLEL, *SLOWEST, *argv[1:])
                if lowest is None:
                    print("tasks.py: a selection of tests: the lowest-versions run is left out")
                else:
                    test_lowest(lowest.result())
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
