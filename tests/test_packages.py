"""Packages that stay: what ``%pip install`` puts into a notebook's sandbox, its next kernels have.

Real kernels (jupyter_client) on the default provider, bubblewrap, install from a package index
served here on 127.0.0.1 (PEP 503, wheels built by the test), reached through the egress proxy's
test-only name map, as the other egress tests do; nothing leaves this machine.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import io
import json
import os
import re
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewyn_kernel.cli import main as cli
from rewyn_kernel.runtime.egress import proxy
from rewyn_kernel.settings import KernelSettings, notebook_key
from tests.conftest import DATASCIENCE_IMAGE, engine_problem, unavailable
from tests.kernel_client import run_cell, running_kernel, write_spec
from tests.test_planted import NAMES, PLANTED

BIG_MB = 12
"""The large package's payload, over the 8 MiB disk quota of the kernel that tries it."""


def build_wheel(name: str, payload: bytes = b"", version: str = "1.0") -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel of ``name`` (with ``payload`` as a data file
    in its package, stored uncompressed) whose module says hello."""
    dist = f"{name}-{version}.dist-info"
    greeting = f"hello from {name}" + ("" if version == "1.0" else f" {version}")
    files = {
        f"{name}/__init__.py": f"GREETING = {greeting!r}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    if payload:
        files[f"{name}/payload.bin"] = payload
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


WHEELS = {
    "tinypkg": [build_wheel("tinypkg"), build_wheel("tinypkg", version="2.0")],
    "bigpkg": [build_wheel("bigpkg", os.urandom(BIG_MB << 20))],
}
"""The index's wheels by project."""


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of WHEELS: /simple/<name>/ links its wheel at /files/<wheel>."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        parts = [part for part in self.path.split("?")[0].split("/") if part]
        body, kind = b"", "text/html"
        if len(parts) == 2 and parts[0] == "simple" and parts[1] in WHEELS:
            links = [f'<a href="/files/{wheel}">{wheel}</a>\n' for wheel, _ in WHEELS[parts[1]]]
            body = "".join(links).encode()
        elif len(parts) == 2 and parts[0] == "files":
            every = [wheel for wheels in WHEELS.values() for wheel in wheels]
            found = [data for wheel, data in every if wheel == parts[1]]
            body, kind = (found[0], "application/octet-stream") if found else (b"", kind)
        if not body:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def local_index() -> Iterator[int]:
    """A package index of WHEELS served on 127.0.0.1, while in the block: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def index_port() -> Iterator[int]:
    with local_index() as port:
        yield port


@pytest.fixture
def notebooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index_port: int
) -> tuple[Path, Path, str]:
    """(the Jupyter path with the kernels, the notebooks' folder, the pip command line): the
    kernel's allow-list names the index by a name mapped to loopback, and its address."""
    monkeypatch.setenv(proxy.TEST_HOSTS, "index.test=127.0.0.1")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    root, folder = tmp_path / "jupyter", tmp_path / "notebooks"
    folder.mkdir()
    network = f"--SandboxKernel.network=index.test:{index_port},127.0.0.1:{index_port}"
    base = ["--SandboxKernel.provider=bubblewrap", network]
    write_spec(root, "rewyn-pkg", base)
    write_spec(root, "rewyn-pkg-small", [*base, "--SandboxKernel.disk_limit_mb=8"])
    write_spec(root, "rewyn-pkg-unkept", [*base, "--SandboxKernel.keep_packages=False"])
    pip = (
        f"%pip install --no-cache-dir --index-url http://index.test:{index_port}/simple "
        "--trusted-host index.test"
    )
    return root, folder, pip


def open_notebook(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Start the next kernels as JupyterLab does for the notebook at ``path``."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))


IMPORT = "import tinypkg; print(tinypkg.GREETING)"


def test_an_install_stays_for_the_notebooks_next_kernels_and_no_other_notebook(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """%pip install in one kernel; a new kernel of the same notebook imports it, one of another
    notebook does not; the note is plain output; ``rewyn-kernel packages`` lists and removes."""
    root, folder, pip = notebooks
    first = folder / "analysis.ipynb"
    open_notebook(monkeypatch, first)
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        installed = run_cell(kc, f"{pip} tinypkg==1.0", timeout=120)
        assert installed.status == "ok", installed.stream("stderr")
        assert "Successfully installed tinypkg-1.0" in installed.stream()
        assert "the notebook's own packages" in installed.stream()  # (the note: plain output)
        assert installed.stream("stderr") == ""
        assert run_cell(kc, IMPORT).stream() == "hello from tinypkg\n"
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):  # (a restart)
        again = run_cell(kc, IMPORT)
        assert again.stream() == "hello from tinypkg\n", again.stream("stderr")
    open_notebook(monkeypatch, folder / "other.ipynb")
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        other = run_cell(kc, IMPORT)
        assert other.status == "error"
        assert "ModuleNotFoundError" in other.reply["content"]["ename"]
    layer = tmp_path / "data" / "rewyn-kernel" / "packages" / notebook_key(str(first))
    assert (layer / "lib").is_dir()
    assert not (folder / ".local").exists()  # (not among the person's files)

    listed = run_cli(["packages", "list", str(first), "--json"])
    (row,) = json.loads(listed)
    assert row["notebook"] == str(first)
    assert [(p["name"], p["version"]) for p in row["packages"]] == [("tinypkg", "1.0")]
    assert "tinypkg 1.0" in run_cli(["packages", "list"])
    assert run_cli(["packages", "remove", str(first), "tinypkg"]) == "Removed tinypkg.\n"
    assert json.loads(run_cli(["packages", "list", str(first), "--json"]))[0]["packages"] == []
    open_notebook(monkeypatch, first)
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, IMPORT).status == "error"  # (removed: gone for the next kernel)
    assert run_cli(["packages", "remove", str(first), "--all"]).startswith("Removed every")
    assert not layer.exists()


def test_keep_packages_off_keeps_nothing(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root, folder, pip = notebooks
    unkept = KernelSettings(keep_packages=False)
    assert unkept.flags() == ["--SandboxKernel.keep_packages=False"]
    assert unkept.for_kernel().env == {}  # (the worker is not told to keep anything)
    open_notebook(monkeypatch, folder / "scratch.ipynb")
    for _ in range(2):
        with running_kernel(root, "rewyn-pkg-unkept", cwd=folder) as (_, kc):
            assert run_cell(kc, IMPORT).status == "error"
            installed = run_cell(kc, f"{pip} tinypkg==1.0", timeout=120)
            assert installed.status == "ok", installed.stream("stderr")
            assert run_cell(kc, IMPORT).status == "ok"
    assert not (tmp_path / "data" / "rewyn-kernel" / "packages").exists()


def test_an_install_over_the_disk_quota_stops_and_the_kernel_stays_up(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A package larger than the sandbox's disk quota (8 MiB): pip fails (its write meets
    ENOSPC), the kernel says it keeps nothing of it and answers the next cell; the notebook's
    next kernel has the packages kept before, and not the one that did not fit."""
    root, folder, pip = notebooks
    notebook = folder / "big.ipynb"
    open_notebook(monkeypatch, notebook)
    with running_kernel(root, "rewyn-pkg-small", cwd=folder) as (_, kc):
        assert run_cell(kc, f"{pip} tinypkg==1.0", timeout=120).status == "ok"
        big = run_cell(kc, f"{pip} bigpkg", timeout=180)
        assert "No space left on device" in big.stream()
        assert "disk quota" in big.stream("stderr")
        assert "is not kept for the notebook" in big.stream("stderr")
        assert run_cell(kc, "print(6 * 7)").stream() == "42\n"
    with running_kernel(root, "rewyn-pkg-small", cwd=folder) as (_, kc):
        assert run_cell(kc, IMPORT).stream() == "hello from tinypkg\n"
        assert run_cell(kc, "import bigpkg").status == "error"
    (row,) = json.loads(run_cli(["packages", "list", str(notebook), "--json"]))
    assert [package["name"] for package in row["packages"]] == ["tinypkg"]


def run_cli(argv: list[str]) -> str:
    """``rewyn-kernel ARGV``'s standard output (it must succeed)."""
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(argv) == 0
    return out.getvalue()


def test_pip_upgrades_lists_and_uninstalls_what_is_kept(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In the kernel's own virtual environment (which pip does not let remove files outside
    it): an install again is "already satisfied", ``%pip list`` shows it, an upgrade leaves
    one version, kept as such, and ``%pip uninstall`` removes it for the next kernels too."""
    root, folder, pip = notebooks
    notebook = folder / "upgrades.ipynb"
    open_notebook(monkeypatch, notebook)
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, f"{pip} tinypkg==1.0", timeout=120).status == "ok"
        again = run_cell(kc, f"{pip} tinypkg==1.0", timeout=120)
        assert "Requirement already satisfied: tinypkg" in again.stream()
        assert "ipykernel" not in again.stream()  # (nothing of the environment's reinstalled)
        listed = run_cell(kc, "%pip list", timeout=120).stream()
        assert re.search(r"^tinypkg +1\.0", listed, re.MULTILINE), listed
        upgraded = run_cell(kc, f"{pip} -U tinypkg", timeout=120)
        assert "kept tinypkg 2.0 (tinypkg 1.0), and removed the older" in upgraded.stream()
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, IMPORT).stream() == "hello from tinypkg 2.0\n"
        (row,) = json.loads(run_cli(["packages", "list", str(notebook), "--json"]))
        assert [(p["name"], p["version"]) for p in row["packages"]] == [("tinypkg", "2.0")]
        gone = run_cell(kc, "%pip uninstall -y tinypkg", timeout=120)
        assert gone.stream() == "Successfully uninstalled tinypkg-2.0\n"
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, IMPORT).status == "error"
    (row,) = json.loads(run_cli(["packages", "list", str(notebook), "--json"]))
    assert row["packages"] == []


def test_the_note_after_an_install_without_the_index_offers_the_grant_not_the_open_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the default kernel (no network), a failed install's note points at the page's grant
    and at the allow-list, and never at --network allow."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    write_spec(tmp_path / "jupyter", "rewyn-pkg-offline", ["--SandboxKernel.provider=bubblewrap"])
    with running_kernel(tmp_path / "jupyter", "rewyn-pkg-offline") as (_, kc):
        failed = run_cell(kc, "%pip install nothing-here-at-all", timeout=120)
    note = failed.stream("stderr")
    assert "Allow the Python package index for this notebook" in note
    assert "--allow-host pypi.org --allow-host files.pythonhosted.org" in note
    assert "--network allow" not in note


@pytest.mark.parametrize("kind", ["landlock", "subprocess", "docker"])
def test_every_provider_keeps_an_install(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index_port: int
) -> None:
    """The other providers keep an install for the notebook too: landlock and subprocess run
    the kernel's virtual environment, a container the data-science image's own ``python3``
    (not a virtual environment: pip's ``--user``). Under landlock the code writes the package
    where pip would: pip does not run there on this machine (``!pip``: "out of pty devices";
    pip from Python: /etc/debian_version is not readable), before this change too."""
    flags = [f"--SandboxKernel.provider={'container' if kind == 'docker' else kind}"]
    extra = ""
    if kind == "docker":
        problem = engine_problem("docker")
        if problem:
            unavailable(problem)
        flags.append(f"--SandboxKernel.image={DATASCIENCE_IMAGE}")
        extra = " --break-system-packages"  # (Debian's pip: PEP 668)
    monkeypatch.setenv(proxy.TEST_HOSTS, "index.test=127.0.0.1")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    network = f"--SandboxKernel.network=index.test:{index_port},127.0.0.1:{index_port}"
    write_spec(tmp_path / "jupyter", "rewyn-pkg-other", [*flags, network])
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "elsewhere.ipynb"))
    pip = (
        f"%pip install --no-cache-dir --index-url http://index.test:{index_port}/simple "
        f"--trusted-host index.test{extra} tinypkg==1.0"
    )
    if kind == "landlock":  # (what pip would write, written by the code)
        pip = (
            "import os, site\nhere = site.getusersitepackages()\n"
            "os.makedirs(os.path.join(here, 'tinypkg'))\n"
            "open(os.path.join(here, 'tinypkg', '__init__.py'), 'w')"
            ".write('GREETING = \"hello from tinypkg\"')\n"
            "print('Successfully installed tinypkg-1.0')"
        )
    with running_kernel(tmp_path / "jupyter", "rewyn-pkg-other") as (_, kc):
        installed = run_cell(kc, pip, timeout=180)
        assert "Successfully installed tinypkg-1.0" in installed.stream(), installed.stream()
    with running_kernel(tmp_path / "jupyter", "rewyn-pkg-other") as (_, kc):
        again = run_cell(kc, IMPORT)
        assert again.stream() == "hello from tinypkg\n", again.stream("stderr")


def test_what_the_code_plants_among_the_kept_packages_runs_in_no_supervisor_nor_host(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The kept packages are the code's: a kernel's code plants modules named as those the
    worker and Python's start-up import, a ``usercustomize`` and a ``.pth`` among them. The
    notebook's next kernel starts, its supervisor (pid 1) imports none of them, the kernel
    process on the host none, and a failing cell still fails (no result is forged)."""
    root, folder, _pip = notebooks
    host_log = tmp_path / "host-log"
    host_log.mkdir()
    monkeypatch.setenv("PLANTED_LOG", str(host_log))  # (where the host's processes would record)
    open_notebook(monkeypatch, folder / "planted.ipynb")
    body = PLANTED.replace('os.environ.get("PLANTED_LOG") or ', "")
    plant = (
        "import os, site\nhere = site.getusersitepackages()\n"
        f"for name in {NAMES!r}:\n"
        f"    open(os.path.join(here, name + '.py'), 'w').write({body!r})\n"
        "open(os.path.join(here, 'evil.pth'), 'w').write('import usercustomize\\n')\n"
        "print('planted')"
    )
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, plant).stream() == "planted\n"
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, "print(6 * 7)").stream() == "42\n"
        failing = run_cell(kc, "1 / 0")
        assert failing.reply["content"]["ename"] == "ZeroDivisionError"
        records = run_cell(
            kc,
            "import os\nprint([n for n in os.listdir(os.environ['HOME']) if 'imported-' in n])",
        ).stream()
    assert "imported-usercustomize-by-" in records, records  # (the code's own process: kept)
    assert "-by-1'" not in records, records
    assert list(host_log.iterdir()) == []


def test_a_kept_pth_file_is_read_by_the_next_kernel(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept ``.pth`` file (an editable install's, a namespace package's) is read as the
    code's process starts: the next kernel's process starts again once they are copied in
    (it may have started before)."""
    root, folder, _pip = notebooks
    open_notebook(monkeypatch, folder / "pth.ipynb")
    plant = (
        "import os, site\nhere = site.getusersitepackages()\n"
        "os.makedirs(os.path.join(here, 'elsewhere'))\n"
        "open(os.path.join(here, 'elsewhere', 'farmod.py'), 'w').write('WHERE = 1')\n"
        "open(os.path.join(here, 'far.pth'), 'w').write('elsewhere\\n')"
    )
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        assert run_cell(kc, plant).status == "ok"
    with running_kernel(root, "rewyn-pkg", cwd=folder) as (_, kc):
        found = run_cell(kc, "import farmod; print(farmod.WHERE)")
        assert found.stream() == "1\n", found.stream("stderr")


def test_kept_packages_over_the_quota_are_left_as_they_are(
    notebooks: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Kept packages larger than the next kernel's disk quota: that kernel says they could not
    be loaded, works on without them, and keeps nothing, so the notebook's packages stay whole
    for a kernel with more room."""
    root, folder, pip = notebooks
    notebook = folder / "heavy.ipynb"
    open_notebook(monkeypatch, notebook)
    layer = tmp_path / "data" / "rewyn-kernel" / "packages" / notebook_key(str(notebook))
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site_dir = layer / "lib" / version / "site-packages" / "heavy"
    site_dir.mkdir(parents=True)
    (site_dir / "blob.bin").write_bytes(os.urandom(BIG_MB << 20))
    with running_kernel(root, "rewyn-pkg-small", cwd=folder) as (_, kc):
        first = run_cell(kc, f"{pip} tinypkg==1.0", timeout=120)
        assert "could not be loaded, and this kernel keeps no installs" in first.stream("stderr")
        assert run_cell(kc, "print(6 * 7)").stream() == "42\n"
    assert (site_dir / "blob.bin").stat().st_size == BIG_MB << 20
    assert not list(layer.glob("lib/*/site-packages/tinypkg*"))
