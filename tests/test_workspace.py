"""The workspace: the code's files land where it says, the person's edits reach it, nothing the
person had is lost, protected paths stay read-only, links never lead out, the quota covers it.

Real sandboxes of every provider, a real kernel started in a notebook's directory as Jupyter
starts it, and a host that is not root (``UnprivilegedHost``). The publication's walk is also
driven directly, with the code's moves made at the worst moment on purpose.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.kernel.record import reply_record
from rewyn_kernel.runtime import ContainerProvider, SandboxSpec, create
from rewyn_kernel.runtime.host import workspace as workspace_module
from rewyn_kernel.runtime.host.workspace import STORE, Budget, Workspace
from rewyn_kernel.runtime.sandbox import SandboxProvider
from rewyn_kernel.settings import KernelSettings

from .kernel_client import run_cell, running_kernel, write_spec
from .unprivileged import UID, UnprivilegedHost

PERSON = 1000
"""The uid that owns the person's files in the container tests (a folder of a person's, not
root's, as on a laptop)."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "births.csv").write_text("year,births\n1969,3600206\n")
    (root / "notes.txt").write_text("v1\n")
    (root / "analysis.ipynb").write_text("{}")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    return root


def person_files(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and STORE not in path.relative_to(root).parts
    }


def give(root: Path, owner: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, owner, owner)


# -- every provider ----------------------------------------------------------------------------


def test_the_code_works_in_the_workspace_as_on_ipykernel(
    provider: SandboxProvider, project: Path
) -> None:
    """At its own path, listing what ipykernel lists; its writes at that path once each
    execution ends; the person's edit in between read by the next one."""
    if isinstance(provider, ContainerProvider):
        give(project, PERSON)
    spec = SandboxSpec(workspace=project, workspace_name="analysis", timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        where = session.execute("import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))")
        assert where.stdout == (f"{project}\n['.git', 'analysis.ipynb', 'data', 'notes.txt']\n"), (
            where.stderr
        )
        if box.isolation.workspace == "read_only":  # (landlock: no view, so nothing written)
            refused = session.execute("open('summary_by_region.csv', 'w')")
            assert refused.error is not None
            assert refused.error.ename == "PermissionError", refused
            assert session.execute("print(open('notes.txt').read())").stdout == "v1\n\n"
            assert not (project / "summary_by_region.csv").exists()
            return
        wrote = session.execute(
            "open('summary_by_region.csv', 'w').write('region,total\\n')\n"
            "open('notes.txt', 'a').write('from the code\\n')\n"
            "os.makedirs('out/plots')\nopen('out/plots/a.txt', 'w').write('a')\n"
            "print(os.path.abspath('summary_by_region.csv'))"
        )
        assert wrote.ok, wrote.stderr
        assert wrote.stdout == f"{project}/summary_by_region.csv\n"
        assert (project / "summary_by_region.csv").read_text() == "region,total\n"
        assert (project / "out" / "plots" / "a.txt").read_text() == "a"
        assert (project / "notes.txt").read_text() == "v1\nfrom the code\n"
        versioned = box.isolation.workspace == "versioned"  # (gVisor: bound as it is)
        if versioned:
            assert wrote.files is not None
            assert set(wrote.files.created) == {
                "summary_by_region.csv",
                "out/",  # (folders too: they are charged to the quota as well)
                "out/plots/",
                "out/plots/a.txt",
            }
            assert wrote.files.changed == ("notes.txt",)
        (project / "notes.txt").write_text("host v2\n")  # the person edits between cells
        (project / "data" / "fresh.csv").write_text("new data\n")
        read = session.execute("print(open('notes.txt').read(), open('data/fresh.csv').read())")
        assert read.stdout == "host v2\n new data\n\n", read.stderr
        nothing = session.execute("x = 1")
        assert nothing.files is None or nothing.files.empty
        assert box.execute("open('one-shot.txt', 'w').write('once')").ok  # (one-shot, too)
    assert (project / "one-shot.txt").read_text() == "once"
    if not versioned:
        assert box.isolation.notes
        assert "no earlier version is kept" in " ".join(box.isolation.notes)
        return
    assert not list((project / STORE / "staging").iterdir())  # (nothing left behind)
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", f"{STORE}/versions"], cwd=project, check=False
    )
    assert (project / STORE / ".gitignore").read_text().splitlines()[-1] == "*"
    assert ignored.returncode in (0, 128)  # (ignored; 128: git is missing or not a repo)


@pytest.mark.providers("subprocess", "bubblewrap", "docker", "podman")
def test_protected_paths_are_read_only_and_say_which_setting(
    provider: SandboxProvider, project: Path
) -> None:
    before = person_files(project)
    spec = SandboxSpec(workspace=project, protected=("data/*.csv",), timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        for path in (".git/config", "analysis.ipynb", "data/births.csv"):
            tried = session.execute(f"open({path!r}, 'a').write('planted')")
            assert tried.error is not None, tried.stderr
            assert tried.error.ename == "OSError"
            assert "Read-only file system" in tried.error.evalue
            assert "the setting 'protected' adds more" in tried.stderr
        made = session.execute("open('data/other.csv', 'w').write('x')")
        assert made.files is not None
        assert made.files.refused == ("data/other.csv: a protected path (setting protected)",)
        assert session.execute("open('data/other.txt', 'w').write('fine')").ok
    assert person_files(project) == {**before, "data/other.txt": "fine"}


@pytest.mark.providers("docker", "podman", "docker+runsc")
def test_a_container_changes_and_appends_to_the_persons_files(
    provider: SandboxProvider, project: Path
) -> None:
    """The person's files keep their owner, and the code (a uid of its own) may change them:
    append, create in their folders, open a database there."""
    give(project, PERSON)
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        code = (
            "import sqlite3\n"
            "open('notes.txt', 'a').write('appended\\n')\n"
            "open('data/new.csv', 'w').write('n\\n')\n"
            "db = sqlite3.connect('data/t.sqlite')\n"
            "db.execute('create table t (x)'); db.execute('insert into t values (7)')\n"
            "db.commit(); db.close()"
        )
        done = session.execute(code)
        assert done.ok, done.stderr
    assert (project / "notes.txt").read_text() == "v1\nappended\n"
    assert (project / "data" / "new.csv").read_text() == "n\n"
    with sqlite3.connect(project / "data" / "t.sqlite") as db:
        assert db.execute("select x from t").fetchall() == [(7,)]
    for path in ("notes.txt", "data/new.csv", "data/t.sqlite"):
        assert (project / path).stat().st_uid == PERSON, path


# -- versions ----------------------------------------------------------------------------------


@pytest.mark.providers("bubblewrap", "subprocess")
def test_every_change_to_a_file_keeps_its_version_and_restores(
    provider: SandboxProvider, project: Path
) -> None:
    for name in ("overwritten", "truncated", "renamed-over", "deleted"):
        (project / f"{name}.txt").write_text(f"the person's {name}\n")
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        done = session.execute(
            "import os\n"
            "open('overwritten.txt', 'w').write('code')\n"
            "open('truncated.txt', 'r+').truncate(0)\n"
            "open('new.txt', 'w').write('new')\nos.replace('new.txt', 'renamed-over.txt')\n"
            "os.remove('deleted.txt')\n"
            "import shutil\nshutil.rmtree('data')"
        )
        assert done.ok, done.stderr
        assert done.files is not None
        assert set(done.files.changed) == {"overwritten.txt", "truncated.txt", "renamed-over.txt"}
        assert set(done.files.deleted) == {"deleted.txt", "data"}
        assert len(done.files.versions) == 1
    assert not (project / "deleted.txt").exists()
    assert not (project / "data").exists()
    kept = Workspace(project).versions()
    assert {item["path"] for item in kept} == {
        "overwritten.txt",
        "truncated.txt",
        "renamed-over.txt",
        "deleted.txt",
        "data",
    }
    version = done.files.versions[0]
    assert Workspace(project).restore(version, "truncated.txt") == ["truncated.txt"]
    assert (project / "truncated.txt").read_text() == "the person's truncated\n"
    restored = Workspace(project).restore(version)
    assert set(restored) == {"overwritten.txt", "renamed-over.txt", "deleted.txt", "data"}
    assert (project / "data" / "births.csv").read_text().startswith("year,births")
    assert (project / "overwritten.txt").read_text() == "the person's overwritten\n"
    # What the restore replaced is a version of its own: nothing is lost either way.
    replaced = {item["path"] for item in Workspace(project).versions() if item["id"] != version}
    assert replaced == {"overwritten.txt", "renamed-over.txt", "truncated.txt"}


def test_the_files_command_lists_and_restores_versions(project: Path) -> None:
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec) as box:
        assert box.execute("open('notes.txt', 'w').write('code')").ok
    listed = files_command(str(project))
    assert listed.returncode == 0, listed.stderr
    assert "notes.txt" in listed.stdout
    assert "changed by the code" in listed.stdout
    version = Workspace(project).versions()[0]["id"]
    shown = files_command(str(project), "--json")
    assert [item["path"] for item in json.loads(shown.stdout)] == ["notes.txt"]
    restored = files_command(str(project), "--restore", version, "notes.txt")
    assert restored.returncode == 0, restored.stderr
    assert (project / "notes.txt").read_text() == "v1\n"
    missing = files_command(str(project), "--restore", "no-such-version")
    assert missing.returncode == 2
    assert "no kept version" in missing.stderr


def files_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rewyn_kernel.cli", "files", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_store_keeps_its_bounds_dropping_only_the_codes_own_versions(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_module, "VERSIONS_LIMIT_BYTES", 10_000)
    (project / "big.bin").write_bytes(b"p" * 8_000)
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec) as box, box.session() as session:
        first = session.execute("open('big.bin', 'wb').write(b'c' * 9000)")
        second = session.execute("open('big.bin', 'wb').write(b'd' * 100)")
        third = session.execute("open('big.bin', 'wb').write(b'e')")
    assert first.files is not None
    assert second.files is not None
    assert third.files is not None
    kept = Workspace(project).versions()
    # The first kept the person's 8,000 bytes: never dropped for room. The second kept the
    # code's own 9,000 (over the bound, but just kept); the third drops it, the code's own.
    assert not any("was dropped" in note for note in second.files.notes)
    assert any("was dropped" in note for note in third.files.notes)
    assert [item["id"] for item in kept] == [*first.files.versions, *third.files.versions]
    assert [item["class"] for item in kept] == ["person", "code"]


# -- links, the quota, two sandboxes -----------------------------------------------------------


@pytest.mark.providers("bubblewrap", "subprocess")
def test_links_the_code_makes_never_lead_out(provider: SandboxProvider, project: Path) -> None:
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        done = session.execute(
            "import os\n"
            "os.symlink('/root/.ssh/id_rsa', 'results.csv')\n"
            "os.symlink('../../../etc/passwd', 'up.txt')\n"
            "os.makedirs('sub')\nos.symlink('../..', 'sub/escape')\n"
            "os.symlink('data/births.csv', 'births-link.csv')\n"
        )
        assert done.ok, done.stderr
        assert done.files is not None
        assert done.files.created == ("births-link.csv", "sub/")
        refused = {item.split(":")[0] for item in done.files.refused}
        assert refused == {"results.csv", "up.txt", "sub/escape"}
        assert any("leads out of the workspace" in note for note in done.files.notes)
    assert os.readlink(project / "births-link.csv") == "data/births.csv"
    for name in ("results.csv", "up.txt", "sub/escape"):
        assert not (project / name).is_symlink()


@pytest.mark.providers("bubblewrap", "subprocess")
def test_the_disk_quota_covers_the_workspace(provider: SandboxProvider, project: Path) -> None:
    """What fits is kept; a file past the quota is not; code that keeps writing is stopped,
    like the memory limit stops it, and what it wrote in files and inodes stays bounded."""
    spec = SandboxSpec(workspace=project, disk_limit_mb=16, timeout=120)
    with create(spec, provider=provider) as box, box.session() as session:
        over = session.execute(
            "open('small.bin', 'wb').write(b'x' * 1000000)\n"
            "open('big.bin', 'wb').write(b'y' * (64 << 20))"
        )
        assert over.files is not None
        assert over.files.created == ("small.bin",)
        assert over.files.refused == ("big.bin: over the disk quota (disk_limit_mb)",)
        assert "disk quota (disk_limit_mb) is used up" in over.stderr
        flood = session.execute(
            "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'z' * 100000); i += 1"
        )
        assert flood.ending == "crashed"
        assert flood.message is not None
        assert "disk quota (disk_limit_mb=16)" in flood.message
        empty = session.execute("i = 0\nwhile True:\n    open(f'e{i}', 'w').close(); i += 1")
        assert empty.ending == "crashed", empty.stderr  # (inodes count too)
    written = sum(
        max(path.stat().st_size, 4096)
        for path in project.iterdir()
        if path.name[0] in "fe" or path.name == "small.bin"
    )
    assert 8 << 20 < written <= 16 << 20


def test_two_sandboxes_of_one_workspace_see_each_others_finished_writes(project: Path) -> None:
    spec = SandboxSpec(workspace=project, workspace_name="analysis", timeout=60)
    with create(spec) as a, a.session() as first, create(spec) as b, b.session() as second:
        assert first.execute("open('who.txt', 'w').write('first')").ok
        assert second.execute("print(open('who.txt').read())").stdout == "first\n"
        assert second.execute("open('who.txt', 'w').write('second')").ok
        assert first.execute("print(open('who.txt').read())").stdout == "second\n"
    assert (project / "who.txt").read_text() == "second"
    assert [item["why"] for item in Workspace(project).versions()] == ["changed by the code"]


def test_data_beside_the_workspace_is_hidden_with_a_note_and_shown_read_only(
    project: Path,
) -> None:
    data = project.parent / "data"
    data.mkdir()
    (data / "other.csv").write_text("a,b\n")
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec) as box:
        hidden = box.execute("open('../data/other.csv')")
        assert hidden.error is not None
        assert hidden.error.ename == "FileNotFoundError"
        assert "the sandbox does not show it" in hidden.stderr
        assert f"--read {data}" in hidden.stderr
        missing = box.execute("open('../data/nothing-here.csv')")
        assert "the sandbox does not show it" not in missing.stderr  # (only what exists)
    shown = SandboxSpec(workspace=project, read_dirs=(data,), timeout=60)
    with create(shown) as box:
        assert box.execute("print(open('../data/other.csv').read())").stdout == "a,b\n\n"
        tried = box.execute("open('../data/other.csv', 'a').write('x')")
        assert tried.error is not None
        # (read-only; as root the code is a uid of its own, refused before that is asked)
        assert tried.error.ename in ("OSError", "PermissionError"), tried.error
    assert (data / "other.csv").read_text() == "a,b\n"


def test_a_home_folder_is_never_a_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook in ~ (JupyterLab started there): its folder would show the code ~/.ssh and
    everything else. Given, it is refused, saying why; a kernel started there works in its
    scratch directory instead."""
    home = Path.home().resolve()
    with pytest.raises(ValueError, match="is a home folder"):
        SandboxSpec(workspace=home)
    if home.parent != Path("/"):
        with pytest.raises(ValueError, match="above the home folder"):
            SandboxSpec(workspace=home.parent)
    with pytest.raises(ValueError, match="is the system's"):
        SandboxSpec(workspace=Path("/usr"))
    monkeypatch.chdir(home)
    assert KernelSettings().spec().workspace is None


# -- an ordinary host ----------------------------------------------------------------------------


@pytest.fixture
def their_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project folder of the unprivileged host's uid (where it can write)."""
    base = Path("/var/tmp") / f"rewyn-ws-test-{os.getpid()}"
    base.mkdir(mode=0o755, exist_ok=True)
    root = base / f"project-{len(list(base.iterdir()))}"
    (root / "data").mkdir(parents=True)
    (root / "notes.txt").write_text("v1\n")
    (root / "analysis.ipynb").write_text("{}")
    if os.geteuid() == 0:
        give(root, UID)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.mark.parametrize("kind", ["bubblewrap", "subprocess"])
def test_an_ordinary_host_publishes_the_workspace_too(their_project: Path, kind: str) -> None:
    with UnprivilegedHost(kind, workspace=str(their_project), timeout=60) as host:
        assert host.isolation["workspace"] == "versioned"
        first = host.session_execute(
            "import os\nprint(sorted(os.listdir('.')))\n"
            "open('notes.txt', 'a').write('code\\n')\nopen('data/new.csv', 'w').write('n')"
        )
        assert first["stdout"] == "['analysis.ipynb', 'data', 'notes.txt']\n", first["stderr"]
        assert first["files"]["changed"] == ["notes.txt"]
        (their_project / "notes.txt").write_text("host v2\n")
        second = host.session_execute(
            "print(open('notes.txt').read())\nopen('analysis.ipynb', 'w')"
        )
        assert second["stdout"] == "host v2\n\n"
        assert "Read-only file system" in second["error"]["evalue"]
    assert (their_project / "data" / "new.csv").read_text() == "n"
    assert (their_project / "analysis.ipynb").read_text() == "{}"
    assert (their_project / "data" / "new.csv").stat().st_uid == (
        UID if os.geteuid() == 0 else os.getuid()
    )


# -- a kernel --------------------------------------------------------------------------------


def test_a_kernel_works_in_its_notebooks_folder(project: Path, tmp_path: Path) -> None:
    """As Jupyter starts it: in the notebook's folder, its path in JPY_SESSION_NAME. A file a
    cell writes is there when the cell ends; the record lists it; a restart keeps it."""
    root = tmp_path / "jupyter"
    write_spec(root, "rewyn-workspace")
    os.environ["JPY_SESSION_NAME"] = str(project / "Births analysis.ipynb")
    try:
        with running_kernel(root, "rewyn-workspace", cwd=project) as (km, kc):
            cell = run_cell(kc, "print(open('data/births.csv').read().count(','))")
            assert cell.stream() == "2\n"
            wrote = run_cell(kc, "%%writefile summary.txt\nok\n")
            assert wrote.status == "ok"
            assert (project / "summary.txt").read_text() == "ok\n"
            record = reply_record(wrote.reply)
            assert record is not None
            assert record["files"]["created"] == ["summary.txt"]
            (project / "summary.txt").write_text("edited\n")
            assert run_cell(kc, "print(open('summary.txt').read())").stream() == "edited\n\n"
            km.restart_kernel(now=False)
            kc.wait_for_ready(timeout=60)
            assert run_cell(kc, "import os; print(os.listdir('.').count('.rewyn'))").stream() == (
                "0\n"
            )
    finally:
        os.environ.pop("JPY_SESSION_NAME")
    assert not (project / "sandbox-files").exists()


def test_two_kernels_of_one_notebook_see_each_others_finished_writes(
    project: Path, tmp_path: Path
) -> None:
    """JupyterLab's kernel and `rewyn-kernel run`'s, of the same notebook at once: one
    workspace, no folder of their own; each reads what the other's finished cell wrote."""
    root = tmp_path / "jupyter"
    write_spec(root, "rewyn-workspace")
    os.environ["JPY_SESSION_NAME"] = str(project / "analysis.ipynb")
    try:
        with (
            running_kernel(root, "rewyn-workspace", cwd=project) as (_, lab),
            running_kernel(root, "rewyn-workspace", cwd=project) as (_, run),
        ):
            assert run_cell(lab, "_ = open('from-lab.txt', 'w').write('lab')").status == "ok"
            assert run_cell(run, "print(open('from-lab.txt').read())").stream() == "lab\n"
            assert run_cell(run, "_ = open('from-lab.txt', 'a').write('+run')").status == "ok"
            assert run_cell(lab, "print(open('from-lab.txt').read())").stream() == "lab+run\n"
    finally:
        os.environ.pop("JPY_SESSION_NAME")
    assert (project / "from-lab.txt").read_text() == "lab+run"
    assert sorted(os.listdir(project / STORE / "staging")) == []


# -- the publication's walk, with the code's moves at the worst moment -------------------------


def test_a_folder_swapped_for_a_link_mid_walk_leads_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process of the code that still writes in an old view swaps a folder of its upper for a
    link to the host's files just after the walk looked at it: nothing of the host moves."""
    root, upper, secret = stage(tmp_path)
    (upper / "sub").mkdir()
    (upper / "sub" / "a.txt").write_text("a")
    swap_once(monkeypatch, "_lstat", "sub", lambda: swap_for_link(upper / "sub", secret))
    changes = Workspace(root).publish(upper, label="t")
    assert (secret / "id_rsa").read_text() == "key"
    assert not (root / "sub" / "id_rsa").exists()
    assert any(item.startswith("sub:") for item in changes.refused), changes


def test_a_file_swapped_for_a_link_after_its_check_is_not_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk checked a regular file (and holds it open); the code puts a link to the host's
    files in its place just before the copy: what is opened is not what was checked, and
    nothing is published."""
    root, upper, secret = stage(tmp_path)
    (upper / "out.csv").write_text("fine")
    swap_once(
        monkeypatch,
        "_copy_in",
        "out.csv",
        lambda: swap_for_link(upper / "out.csv", secret / "id_rsa"),
    )
    changes = Workspace(root).publish(upper, label="t")
    monkeypatch.undo()
    assert not (root / "out.csv").is_symlink()
    assert [name for name in os.listdir(root) if name.startswith(".rewyn-publish")] == []
    assert changes.refused == ["out.csv: it changed while it was published"]
    assert (upper / "out.csv").is_symlink()  # (back where it was: refused at the next look)
    again = Workspace(root).publish(upper, label="t")
    assert again.refused == ["out.csv: a link that leads out of the workspace"]


def test_a_file_the_person_made_meanwhile_is_kept_as_a_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the walk's look and the rename, the person saves a file of that name: it is
    kept as a version, not overwritten."""
    root, upper, _ = stage(tmp_path)
    (upper / "report.txt").write_text("the code's")
    swap_once(monkeypatch, "_lstat", "report.txt", lambda: (root / "report.txt").write_text("mine"))
    changes = Workspace(root).publish(upper, label="t")
    assert (root / "report.txt").read_text() == "the code's"
    assert changes.changed == ["report.txt"]
    (kept,) = Workspace(root).versions()
    assert (root / STORE / "versions" / kept["id"] / "report.txt").read_text() == "mine"


def test_a_budget_counts_what_was_published_once(tmp_path: Path) -> None:
    root, upper, _ = stage(tmp_path)
    budget = Budget(3 * 4096)
    (upper / "a").write_bytes(b"1" * 4096)
    assert Workspace(root).publish(upper, label="t", budget=budget).created == ["a"]
    (upper / "a").write_bytes(b"2" * 4096)  # (rewriting one file counts once)
    (upper / "b").write_bytes(b"3" * 4096)
    assert Workspace(root).publish(upper, label="t", budget=budget).refused == []
    (upper / "c").write_bytes(b"4" * 8192)
    refused = Workspace(root).publish(upper, label="t", budget=budget).refused
    assert refused == ["c: over the disk quota (disk_limit_mb)"]


def stage(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, upper, secret = tmp_path / "ws", tmp_path / "upper", tmp_path / "secret"
    for folder in (root, upper, secret):
        folder.mkdir()
    (secret / "id_rsa").write_text("key")
    Workspace(root).prepare(None)
    return root, upper, secret


def swap_for_link(path: Path, target: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=True)
    path.symlink_to(target)


def swap_once(monkeypatch: pytest.MonkeyPatch, name: str, when: str, action: Any) -> None:
    real = getattr(workspace_module, name)
    done: list[bool] = []

    def hooked(*args: Any) -> Any:
        if when in args and not done:
            done.append(True)
            action()
        return real(*args)

    monkeypatch.setattr(workspace_module, name, hooked)


@pytest.mark.skipif(os.geteuid() != 0, reason="the host's views are a root host's (mounts)")
def test_the_sweep_unmounts_and_removes_only_the_views_of_hosts_that_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead host's view goes, its stacked mounts (an anchor bound on itself, twice) first; a
    living host's stays mounted; the sweep never removes more than empty folders."""
    from rewyn_kernel.runtime.host import views

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # (a pid whose process has exited)
    run_dir = tmp_path / "run"
    dead, living = run_dir / f"{gone}-view", run_dir / f"{os.getpid()}-view"
    for base in (dead, living):
        (base / "ws").mkdir(parents=True)
        (base / "lower").mkdir()
        # (folders made for what a sandbox binds in the anchor: .venv, a package)
        (base / "ws" / ".venv" / "lib").mkdir(parents=True)
        for _ in range(2):
            views.mount(str(base / "ws"), base / "ws", None, views.MS_BIND)
    leftover = run_dir / f"{gone}-with-files"  # (never a recursive removal)
    (leftover / "ws" / "pkg").mkdir(parents=True)
    (leftover / "ws" / "kept.txt").write_text("x")
    (leftover / "ws" / "pkg" / "kept.py").write_text("x")
    monkeypatch.setattr(views, "RUN_DIR", run_dir)
    monkeypatch.setattr(views, "_swept", False)
    try:
        views.sweep()
        assert not dead.exists()
        assert (leftover / "ws" / "kept.txt").read_text() == "x"
        assert (leftover / "ws" / "pkg" / "kept.py").read_text() == "x"
        assert (living / "ws" / ".venv" / "lib").is_dir()
        assert str(living / "ws") in views._mount_points()
    finally:
        views._remove_base(living)
    assert not living.exists()


# -- fail closed: a limit the code reaches stops the code, never the person's protection ----------


def kept_somewhere(root: Path, content: bytes) -> bool:
    """Whether a file of ``root`` (its kept versions included) holds ``content``."""
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if (
                not path.is_symlink()
                and path.stat().st_size == len(content)
                and path.read_bytes() == content
            ):
                return True
    return False


def links_lead_out(root: Path) -> list[str]:
    """The links of ``root`` (its store aside) that resolve outside it."""
    base = os.path.realpath(root)
    out = []
    for folder, folders, names in os.walk(root):
        folders[:] = [name for name in folders if name != STORE]
        for name in [*names, *folders]:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if real != base and not real.startswith(base + os.sep):
                    out.append(os.path.relpath(path, root))
    return out


@pytest.mark.providers("bubblewrap", "subprocess")
def test_the_codes_churn_never_pushes_the_persons_versions_out(
    provider: SandboxProvider, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse file is its blocks, not its length; the code replacing its own files evicts
    only its own versions; a change whose version the store cannot hold without evicting one of
    the person's is refused."""
    monkeypatch.setattr(workspace_module, "VERSIONS_LIMIT_BYTES", 1 << 20)
    person = b"the person's notes\n" * 10
    (project / "notes.txt").write_bytes(person)
    large = os.urandom(1200 << 10)
    (project / "large.bin").write_bytes(large)
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        assert session.execute("open('notes.txt', 'w').write('the code')").ok
        sparse = session.execute("open('sparse.bin', 'wb').truncate(1 << 40)")
        assert sparse.ok, sparse.stderr
        again = session.execute("open('sparse.bin', 'wb').write(b'x')")  # (1 TiB kept: 0 blocks)
        assert again.files is not None
        assert again.files.changed == ("sparse.bin",)
        for turn in range(4):  # (the code's own churn: 4 x 600 KiB through a 1 MiB store)
            churn = session.execute(f"open('out.bin', 'wb').write(bytes([{turn}]) * (600 << 10))")
            assert churn.ok, churn.stderr
        deleted = session.execute("import os\nos.remove('large.bin')")
        assert deleted.files is not None
        assert deleted.files.deleted == ()
        assert any("large.bin" in item for item in deleted.files.refused), deleted.files
    assert kept_somewhere(project, person)
    assert (project / "large.bin").read_bytes() == large
    kept = {item["path"] for item in Workspace(project).versions()}
    assert "notes.txt" in kept


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_scan_that_reaches_its_limit_protects_more(
    provider: SandboxProvider, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the scan's limit (the code makes the folders) a notebook is still never removed:
    neither with its folder nor by replacing the folder."""
    monkeypatch.setattr(workspace_module.Protection, "MAX_FOLDERS", 1)
    (project / "zz" / "in").mkdir(parents=True)
    (project / "zz" / "in" / "work.ipynb").write_text('{"cells": []}')
    (project / "yy").mkdir()
    (project / "yy" / "other.ipynb").write_text('{"other": 1}')
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        session.execute("import os, shutil\nfor i in range(50): os.makedirs(f'a/{i}')")
        gone = session.execute("shutil.rmtree('zz', ignore_errors=True)")
        assert gone.files is not None
        replaced = session.execute(
            "shutil.rmtree('yy', ignore_errors=True)\n"
            "os.makedirs('yy', exist_ok=True)\nopen('yy/x.txt', 'w').write('x')"
        )
        assert replaced.files is not None
    assert (project / "zz" / "in" / "work.ipynb").read_text() == '{"cells": []}'
    assert (project / "yy" / "other.ipynb").read_text() == '{"other": 1}'


def test_removing_a_folder_that_holds_a_protected_path_is_never_published(tmp_path: Path) -> None:
    """Whatever the view showed: the walk refuses the removal (a whiteout) and the replacement
    (an opaque folder, a file) of a folder holding a protected path."""
    root, upper, _ = stage(tmp_path)
    for name in ("gone", "opaque", "filed"):
        (root / name / "deep").mkdir(parents=True)
        (root / name / "deep" / "nb.ipynb").write_text(name)
    os.mknod(upper / "gone", 0o600 | 0o020000, os.makedev(0, 0))
    (upper / "opaque").mkdir()
    os.setxattr(upper / "opaque", "trusted.overlay.opaque", b"y")
    (upper / "opaque" / "new.txt").write_text("new")
    (upper / "filed").write_text("a file in its place")
    changes = Workspace(root).publish(upper, label="t")
    for name in ("gone", "opaque", "filed"):
        assert (root / name / "deep" / "nb.ipynb").read_text() == name, changes
    assert changes.deleted == []
    assert (root / "opaque" / "new.txt").read_text() == "new"


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_chain_of_links_never_leads_out(provider: SandboxProvider, project: Path) -> None:
    """Each link looks inside on its own (lexically, and against the folder mid-walk); together
    they lead to the workspace's parent. In one execution or across two."""
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        one = session.execute("import os\nos.symlink('c/..', 'a')\nos.symlink('.', 'c')")
        assert one.ok, one.stderr
        two = session.execute("os.mkdir('k')\nos.symlink('k/../..', 'b')\nos.symlink('k/..', 'm')")
        assert two.ok, two.stderr
        three = session.execute("import shutil\nshutil.rmtree('k')\nos.symlink('.', 'k')")
        assert three.ok, three.stderr
        (project / "sub").mkdir()  # (the person's folder; the code links through it)
        four = session.execute("os.symlink('sub/../..', 'up')\nos.symlink('data/../..', 'up2')")
        assert four.ok, four.stderr
    assert links_lead_out(project) == []


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_deep_tree_never_raises_out_of_the_host(provider: SandboxProvider, project: Path) -> None:
    """1,100 folders deep: execute() and close() return, later executions run, what lies past
    the depth limit is refused, and the quota still stops the code that writes past it."""
    spec = SandboxSpec(workspace=project, disk_limit_mb=16, timeout=120)
    deep = (
        "import os\nhere = os.getcwd()\n"
        "for _ in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\n"
        "open('x.txt', 'w').write('deep')\nos.chdir(here)\n"
    )
    with create(spec, provider=provider) as box, box.session() as session:
        made = session.execute(deep)
        assert made.ok, made.stderr
        assert made.files is not None
        assert any("deep" in item for item in made.files.refused), made.files
        assert session.execute("print(1)").stdout == "1\n"
        flood = session.execute(
            deep.replace("d'", "e'")
            + "import time\nfor i in range(100):\n"
            + "    open(f'f{i}', 'wb').write(b'z' * (1 << 20)); time.sleep(0.01)"
        )
        assert flood.ending == "crashed", (flood.ending, flood.stderr[-500:])
        assert flood.message is not None
        assert "disk quota" in flood.message
    written = sum(path.stat().st_size for path in project.glob("f*"))
    assert written <= 16 << 20


@pytest.mark.providers("bubblewrap", "subprocess")
def test_a_nested_store_is_out_of_the_codes_reach(provider: SandboxProvider, project: Path) -> None:
    """A notebook in a subfolder has a store of its own there: the parent's code can neither
    rewrite its versions nor remove them."""
    nested = project / "sub"
    nested.mkdir()
    (nested / "kept.txt").write_text("the person's\n")
    with create(SandboxSpec(workspace=nested, timeout=60), provider=provider) as box:
        assert box.execute("open('kept.txt', 'w').write('changed')").ok
    (version,) = Workspace(nested).versions()
    store = nested / STORE
    before = {
        str(path.relative_to(store)): path.read_bytes()
        for path in store.rglob("*")
        if path.is_file() and "staging" not in path.parts and path.name != "lock"
    }
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        session.execute(
            "import os, shutil\n"
            "open('sub/.rewyn/versions/index.jsonl', 'w').write('')\n"
            f"open('sub/.rewyn/versions/{version['id']}/kept.txt', 'w').write('planted')\n"
        )
        session.execute("shutil.rmtree('sub/.rewyn/versions', ignore_errors=True)")
        session.execute("open('sub/.rewyn/new.txt', 'w').write('planted')")
    after = {
        str(path.relative_to(store)): path.read_bytes()
        for path in store.rglob("*")
        if path.is_file() and "staging" not in path.parts and path.name != "lock"
    }
    assert after == before


@pytest.mark.providers("bubblewrap", "subprocess")
def test_folders_are_charged_to_the_quota_and_listed(
    provider: SandboxProvider, project: Path
) -> None:
    spec = SandboxSpec(workspace=project, disk_limit_mb=8, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        made = session.execute("import os\nfor i in range(20): os.mkdir(f'd{i}')")
        assert made.files is not None
        assert set(made.files.created) == {f"d{i}/" for i in range(20)}
        session.execute("for i in range(3000): os.makedirs(f'e/{i}')")
    folders = [path for path in project.rglob("*") if path.is_dir() and path.name[0] in "de"]
    assert len(folders) <= (8 << 20) // 4096


def test_tmp_and_the_folders_holding_the_scratch_folders_are_never_a_workspace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cd /tmp; ipython; %%sandbox``: /tmp is every user's, and holds the sandboxes' own
    scratch folders. Refused as a home is, saying why; a kernel started there works in its
    scratch directory instead."""
    import tempfile

    for folder in {Path("/tmp"), Path("/var/tmp"), Path(tempfile.gettempdir()).resolve()}:
        with pytest.raises(ValueError, match="is a shared folder of temporary files"):
            SandboxSpec(workspace=folder)
    with pytest.raises(ValueError, match="above the shared folder /var/tmp"):
        SandboxSpec(workspace=Path("/var"))
    monkeypatch.chdir("/tmp")
    assert KernelSettings().spec().workspace is None
