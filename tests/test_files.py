"""The files beside a notebook: seen by the code, never changed by it, its writes kept.

Real sandboxes of the subprocess provider (an overlay in their mount namespace) and of docker
(an overlay volume), and a real kernel started in a notebook's directory, as Jupyter starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewyn_kernel.runtime import ContainerProvider, SubprocessProvider, create
from rewyn_kernel.runtime.host.files import WRITES_DIR, plan_view, prepare
from rewyn_kernel.runtime.providers.subprocess import probe_namespaces
from rewyn_kernel.runtime.sandbox import SandboxProvider, SandboxSpec

from .kernel_client import run_cell, running_kernel, write_spec

needs_namespaces = pytest.mark.skipif(
    not probe_namespaces().prefix and not os.environ.get("CI"),
    reason="no user and mount namespaces here",
)


@pytest.fixture
def notebook_dir(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "births.csv").write_text("year,births\n1969,3600206\n")
    (root / "analysis.py").write_text("ANSWER = 42\n")
    return root


def person_files(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in root.rglob("*")
        if path.is_file() and WRITES_DIR not in path.parts
    }


@needs_namespaces
def test_the_code_sees_the_files_and_its_writes_go_beside_them(notebook_dir: Path) -> None:
    before = person_files(notebook_dir)
    spec = SandboxSpec(files_dir=notebook_dir, files_name="analysis", ipython=True)
    with create(spec, provider=SubprocessProvider()) as box, box.session() as session:
        read = session.execute("print(open('data/births.csv').read().splitlines()[1])")
        assert read.stdout == "1969,3600206\n"
        assert session.execute("from analysis import ANSWER; print(ANSWER)").stdout == "42\n"
        wrote = session.execute("%%writefile out.txt\nresults\n")
        assert wrote.ok, wrote.stderr
        assert session.execute("print(open('out.txt').read())").stdout == "results\n\n"
        overwrite = (
            "import os\nopen('analysis.py', 'w').write('gone')\nos.remove('data/births.csv')"
        )
        assert session.execute(overwrite).ok
        assert session.execute("print(os.path.exists('data/births.csv'))").stdout == "False\n"
        assert any("read-only through an overlay" in note for note in session.isolation.notes)
    assert person_files(notebook_dir) == before  # the person's files, as they were
    writes = notebook_dir / WRITES_DIR / "analysis"
    assert (writes / "out.txt").read_text() == "results\n"
    assert (writes / "analysis.py").read_text() == "gone"


@needs_namespaces
def test_what_the_code_wrote_is_there_for_the_next_sandbox(notebook_dir: Path) -> None:
    spec = SandboxSpec(files_dir=notebook_dir, files_name="nb")
    with create(spec) as box, box.session() as session:
        assert session.execute("open('model.txt', 'w').write('trained')").ok
    with create(spec) as box, box.session() as session:
        assert session.execute("print(open('model.txt').read())").stdout == "trained\n"


@needs_namespaces
def test_two_sandboxes_of_one_notebook_keep_writes_of_their_own(notebook_dir: Path) -> None:
    spec = SandboxSpec(files_dir=notebook_dir, files_name="nb")
    with create(spec) as a, a.session() as first, create(spec) as b, b.session() as second:
        assert first.execute("open('who.txt', 'w').write('first')").ok
        assert second.execute("open('who.txt', 'w').write('second')").ok
        assert first.ready is not None
        assert second.ready is not None
        assert {first.ready.files, second.ready.files} == {
            str(notebook_dir / WRITES_DIR / "nb"),
            str(notebook_dir / WRITES_DIR / "nb-2"),
        }
        places = {first.ready.files: "first", second.ready.files: "second"}
    for place, who in places.items():
        assert (Path(str(place)) / "who.txt").read_text() == who


def test_a_link_in_place_of_the_writes_directory_is_refused(
    notebook_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (notebook_dir / WRITES_DIR).mkdir()
    (notebook_dir / WRITES_DIR / "nb").symlink_to(elsewhere)
    with pytest.raises(OSError, match="not a directory"):
        prepare(plan_view(notebook_dir, "nb"))
    assert list(elsewhere.iterdir()) == []


@needs_namespaces
def test_a_kernel_works_in_its_notebooks_directory(notebook_dir: Path, tmp_path: Path) -> None:
    """As Jupyter starts it: in the notebook's directory, its path in JPY_SESSION_NAME. The
    writes survive a restart of the kernel, beside the notebook, named after it."""
    root = tmp_path / "jupyter"
    write_spec(root, "rewyn-files")
    os.environ["JPY_SESSION_NAME"] = str(notebook_dir / "Births analysis.ipynb")
    try:
        with running_kernel(root, "rewyn-files", cwd=notebook_dir) as (km, kc):
            cell = run_cell(kc, "print(open('data/births.csv').read().count(','))")
            assert cell.stream() == "2\n"
            assert run_cell(kc, "%%writefile summary.txt\nok\n").status == "ok"
            km.restart_kernel(now=False)
            kc.wait_for_ready(timeout=60)
            assert run_cell(kc, "print(open('summary.txt').read())").stream() == "ok\n\n"
    finally:
        os.environ.pop("JPY_SESSION_NAME")
    assert (notebook_dir / WRITES_DIR / "Births-analysis" / "summary.txt").read_text() == "ok\n"
    assert not (notebook_dir / "summary.txt").exists()


@pytest.mark.providers("docker", "docker+runsc", "podman")
def test_a_container_sandbox_sees_the_files_through_an_overlay_volume(
    notebook_dir: Path, provider: SandboxProvider
) -> None:
    """docker mounts an anonymous overlay volume; podman a named one, removed with it."""
    assert isinstance(provider, ContainerProvider)
    before = person_files(notebook_dir)
    spec = SandboxSpec(files_dir=notebook_dir, files_name="nb", timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        read = session.execute("import os\nprint(os.getcwd(), open('data/births.csv').read())")
        assert read.stdout.startswith("/files year,births\n"), read.stderr
        assert session.execute("open('out.txt', 'w').write('written')").ok
        assert session.execute("print(open('out.txt').read())").stdout == "written\n"
        assert not session.execute("open('analysis.py', 'w').write('gone')").ok
        if provider.runtime == "podman":
            assert volumes(provider, box.id)  # (so that the check below can fail)
    assert person_files(notebook_dir) == before
    assert (notebook_dir / WRITES_DIR / "nb" / "out.txt").read_text() == "written"
    if provider.runtime == "podman":
        assert volumes(provider, box.id) == []


def volumes(provider: ContainerProvider, sandbox_id: str) -> list[str]:
    """The engine's volumes named after ``sandbox_id``'s containers."""
    done = subprocess.run(
        [provider.runtime, "volume", "ls", "--format", "{{.Name}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [name for name in done.stdout.split() if sandbox_id in name]


@needs_namespaces
def test_a_sandbox_that_wrote_nothing_leaves_nothing_beside_the_notebook(
    notebook_dir: Path,
) -> None:
    spec = SandboxSpec(files_dir=notebook_dir, files_name="nb")
    with create(spec) as box, box.session() as session:
        assert session.execute("print(len(open('data/births.csv').read()))").ok
        assert (notebook_dir / WRITES_DIR / "nb").is_dir()  # (the overlay's, while it runs)
    assert not (notebook_dir / WRITES_DIR).exists()


@pytest.mark.providers("podman")
def test_podman_files_volumes_of_a_host_that_died_are_swept(provider: SandboxProvider) -> None:
    """A host killed before it removed its files volume leaves it labelled with its pid: the
    next sweep removes it, and keeps the volumes of hosts that live."""
    assert isinstance(provider, ContainerProvider)
    from rewyn_kernel.runtime.providers.container import BOOT_LABEL, HOST_PID_LABEL, LABEL

    gone = cli(sys.executable, "-c", "import os; print(os.getpid())").strip()  # (it exited)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    made = {"rewyn-sweep-test-dead-files": gone, "rewyn-sweep-test-live-files": str(os.getpid())}
    try:
        for name, pid in made.items():
            labels = [f"{LABEL}={name}", f"{HOST_PID_LABEL}={pid}", f"{BOOT_LABEL}={boot}"]
            cli(provider.runtime, "volume", "create", *(f"--label={x}" for x in labels), name)
        provider.sweep()
        assert volumes(provider, "rewyn-sweep-test-") == ["rewyn-sweep-test-live-files"]
    finally:
        cli(provider.runtime, "volume", "rm", "-f", *made)


def cli(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout
