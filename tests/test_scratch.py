"""Nothing the host does to a scratch directory follows a link the code made there."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from rewyn_kernel.runtime.host.scratch import ScratchError
from rewyn_kernel.runtime.sandbox import Sandbox

from .conftest import inside_workdir


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A host directory and file the code should never be able to touch through scratch."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "secret").write_text("host secret")
    (outside / "secret").chmod(0o644)
    return outside


def _modes(path: Path) -> tuple[int, int]:
    return stat.S_IMODE(path.stat().st_mode), stat.S_IMODE((path / "secret").stat().st_mode)


def test_closing_never_chmods_or_removes_through_a_link(
    make_box: Callable[..., Sandbox], tmp_path: Path, target: Path
) -> None:
    """The code makes .tmp (removed at close) and other names links to host paths."""
    workdir = tmp_path / "chosen"
    workdir.mkdir()
    workdir.chmod(0o777)
    box = make_box(workdir=workdir)
    inside = inside_workdir(box)
    code = (
        "import os\n"
        f"os.chdir({inside!r})\n"
        "import shutil\n"
        "shutil.rmtree('.tmp', ignore_errors=True)\n"
        "if os.path.lexists('.tmp'): os.unlink('.tmp')\n"
        f"os.symlink({str(target)!r}, '.tmp')\n"
        "os.mkdir('locked'); os.symlink('/', 'locked/root'); os.chmod('locked', 0)\n"
        "print('linked')\n"
    )
    assert box.execute(code).stdout == "linked\n"
    box.close()
    assert _modes(target) == (0o755, 0o644)
    assert (target / "secret").read_text() == "host secret"
    assert not (workdir / ".tmp").exists()
    assert (workdir / "locked").exists()  # the caller's directory keeps the code's files


def test_an_owned_scratch_dir_is_removed_whatever_the_code_did_to_it(
    make_box: Callable[..., Sandbox], target: Path
) -> None:
    box = make_box()
    inside = inside_workdir(box)
    code = (
        "import os\n"
        f"os.chdir({inside!r})\n"
        f"os.symlink({str(target)!r}, 'link')\n"
        "os.makedirs('a/b/c'); os.symlink('/', 'a/b/c/up')\n"
        "os.chmod('a/b/c', 0); os.chmod('a/b', 0o500); os.chmod('a', 0)\n"
        "open('ro', 'w').close(); os.chmod('ro', 0)\n"
        "print('done')\n"
    )
    assert box.execute(code).stdout == "done\n"
    workdir = box.workdir
    box.close()
    assert not workdir.exists()
    assert _modes(target) == (0o755, 0o644)
    assert (target / "secret").read_text() == "host secret"


def test_reading_results_back_refuses_links(make_box: Callable[..., Sandbox], target: Path) -> None:
    box = make_box()
    inside = inside_workdir(box)
    code = (
        "import os\n"
        f"os.chdir({inside!r})\n"
        "open('result.txt', 'w').write('42')\n"
        "os.makedirs('out'); open('out/table.csv', 'w').write('a,b')\n"
        f"os.symlink({str(target / 'secret')!r}, 'stolen.txt')\n"
        f"os.symlink({str(target)!r}, 'dirlink')\n"
        "os.mkfifo('pipe')\n"
    )
    assert box.execute(code).ok
    assert box.read_file("result.txt") == b"42"
    assert box.read_file("out/table.csv") == b"a,b"
    for refused in ("stolen.txt", "dirlink/secret", "../outside/secret", "/etc/passwd"):
        with pytest.raises(ScratchError):
            box.read_file(refused)
    # Not read, and no hang waiting for a writer (a FIFO made under gVisor stays inside it).
    with pytest.raises((ScratchError, FileNotFoundError)):
        box.read_file("pipe")
    with pytest.raises(ScratchError, match="over the limit"):
        box.read_file("result.txt", limit=1)
    kinds = {entry.name: entry.kind for entry in box.list_files()}
    assert kinds["stolen.txt"] == "link"
    assert kinds["dirlink"] == "link"
    assert kinds["out"] == "dir"
    box.write_file("in/data.txt", b"for the code")
    assert (
        box.execute(f"print(open({inside + '/in/data.txt'!r}).read())").stdout == "for the code\n"
    )
    with pytest.raises(ScratchError):
        box.write_file("stolen.txt", b"overwritten?")
    assert (target / "secret").read_text() == "host secret"


def test_a_sessions_files_go_in_and_out_and_the_code_owns_what_it_was_given(
    make_box: Callable[..., Sandbox],
) -> None:
    """Files written from the host belong to the code's user (in a container, not the host's
    root): the code can change them and write in the folders made for them."""
    box = make_box()
    inside = inside_workdir(box)
    with box.session() as session:
        session.write_file("data/input.csv", b"a,b\n1,2\n")
        code = (
            f"import os; os.chdir({inside!r})\n"
            "open('data/input.csv', 'a').write('3,4\\n')\n"
            "open('data/output.txt', 'w').write(str(len(open('data/input.csv').read())))\n"
            "os.makedirs('many')\n"
            "for i in range(50): open(f'many/{i:02}', 'w').close()\n"
        )
        result = session.execute(code)
        assert result.ok, result.stderr
        assert session.read_file("data/input.csv") == b"a,b\n1,2\n3,4\n"
        assert session.read_file("data/output.txt") == b"12"
        assert [entry.name for entry in session.list_files("data")] == ["input.csv", "output.txt"]
        assert len(session.list_files("many", limit=10)) == 10
        assert len(session.list_files("many")) == 50
        assert session.workdir == box.workdir
