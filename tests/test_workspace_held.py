"""What the code still holds after a publication (a descriptor kept in a variable, by a thread
that writes after the cell, by a child process) never writes the person's file unseen, nor past
the disk quota (issue 38, finding 4): publication copies, and the code's late writes land in
its own inode, published again with the person's version kept first."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewyn_kernel.runtime import SandboxSpec, create
from rewyn_kernel.runtime.host.workspace import STORE, Workspace
from rewyn_kernel.runtime.sandbox import SandboxProvider

from .test_workspace import kept_somewhere, project

__all__ = ["project"]

PERSON = b"the person's edit, saved in place\n"


def edit_in_place(path: Path) -> None:
    """As jupyter_server saves: open the file as it is ('r+') and write over it."""
    with open(path, "r+b") as handle:
        handle.write(PERSON)
        handle.truncate()


def person_edit_kept(root: Path) -> bool:
    return kept_somewhere(root, PERSON)


HOLDERS = {
    "a variable": (
        "f = open('held.txt', 'w')\nf.write('the code, cell 1')\nf.flush()\n",
        "f.seek(0)\nf.write('LATE WRITE')\nf.flush()\n",
    ),
    "a thread": (
        "import threading\ngo, done = threading.Event(), threading.Event()\n"
        "f = open('held.txt', 'w')\nf.write('the code, cell 1')\nf.flush()\n"
        "def late():\n    go.wait()\n    f.seek(0)\n    f.write('LATE WRITE')\n    f.flush()\n"
        "    done.set()\n"
        "threading.Thread(target=late, daemon=True).start()\n",
        "go.set()\nassert done.wait(60)\n",
    ),
    "a child process": (
        "import subprocess, sys\n"
        "f = open('held.txt', 'w')\nf.write('the code, cell 1')\nf.flush()\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "f'import os, sys; sys.stdin.read(); os.pwrite({f.fileno()}, b\"LATE WRITE\", 0)'], "
        "pass_fds=[f.fileno()], stdin=subprocess.PIPE)\n"
        "f.close()\n",
        "child.communicate(b'go')\nassert child.returncode == 0\n",
    ),
}


@pytest.mark.providers("bubblewrap", "subprocess")
@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_a_descriptor_kept_across_cells_never_writes_the_persons_file_unseen(
    provider: SandboxProvider, project: Path, holder: str
) -> None:
    first, later = HOLDERS[holder]
    spec = SandboxSpec(workspace=project, timeout=60)
    with create(spec, provider=provider) as box, box.session() as session:
        made = session.execute(first)
        assert made.ok, made.stderr
        assert made.files is not None
        assert made.files.created == ("held.txt",)
        assert (project / "held.txt").read_bytes() == b"the code, cell 1"
        edit_in_place(project / "held.txt")
        wrote = session.execute(later)
        assert wrote.ok, wrote.stderr
        assert wrote.files is not None
        # The code's late write is published as a change, the person's edit kept first.
        assert wrote.files.changed == ("held.txt",), wrote.files
        assert wrote.files.versions, wrote.files
        assert person_edit_kept(project)
        assert (project / "held.txt").read_bytes().startswith(b"LATE WRITE")
        # Unchanged since, it is not published again: the person's next edit stays.
        edit_in_place(project / "held.txt")
        quiet = session.execute("x = 1")
        assert quiet.files is not None
        assert quiet.files.changed == (), quiet.files
        assert (project / "held.txt").read_bytes() == PERSON
    assert person_edit_kept(project)
    assert (project / "held.txt").read_bytes() == PERSON
    assert any(item["path"] == "held.txt" for item in Workspace(project).versions())


@pytest.mark.providers("bubblewrap", "subprocess")
@pytest.mark.parametrize("where", ["the next cell", "a thread"])
def test_a_kept_descriptor_never_writes_past_the_disk_quota(
    provider: SandboxProvider, project: Path, where: str
) -> None:
    """48 MiB through a descriptor kept from a published file, under a 16 MiB quota: the code
    is stopped (or its write fails), and what the folder holds stays within the quota."""
    spec = SandboxSpec(workspace=project, disk_limit_mb=16, timeout=120)
    flood = (
        "for _ in range(48):\n"
        "    f.write(b'z' * (1 << 20))\n    f.flush()\n    os.fsync(f.fileno())\n"
    )
    with create(spec, provider=provider) as box, box.session() as session:
        if where == "a thread":
            first = (
                "import os, threading\nf = open('big.bin', 'wb')\nf.write(b'x')\nf.flush()\n"
                "go = threading.Event()\ndef late():\n    go.wait()\n    try:\n"
                + "".join(f"        {line}\n" for line in flood.splitlines())
                + "    except OSError as exc:\n        print(exc)\n"
                "t = threading.Thread(target=late, daemon=True)\nt.start()\n"
            )
            later = "go.set()\nt.join()\n"
        else:
            first = "import os\nf = open('big.bin', 'wb')\nf.write(b'x')\nf.flush()\n"
            later = flood
        made = session.execute(first)
        assert made.ok, made.stderr
        assert (project / "big.bin").exists()
        session.execute(later)
    on_disk = sum(
        path.lstat().st_blocks * 512
        for path in project.rglob("*")
        if STORE not in path.relative_to(project).parts
    )
    assert on_disk <= 16 << 20, on_disk
    assert (project / "big.bin").stat().st_size <= 16 << 20
