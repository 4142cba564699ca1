"""A provider whose files are not on the host: ContainerProvider(scratch="volume").

The contract's test of SandboxFiles kept elsewhere: the sandbox's scratch is a volume of the
engine, read and written only through it; nothing of it is a folder of the host's."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime import SandboxPool
from rewyn_kernel.runtime.container import LABEL, ContainerProvider
from rewyn_kernel.runtime.providers.base import ScratchError
from rewyn_kernel.runtime.providers.container.engine import (
    BOOT_LABEL,
    HOST_PID_LABEL,
    PIDNS_LABEL,
    boot_id,
    pid_ns,
)
from rewyn_kernel.runtime.providers.container.volume import VolumeFiles
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

pytestmark = [pytest.mark.providers("docker+volume", "docker+runsc+volume")]

WRITES = (
    "import os\n"
    "open('result.txt', 'w').write('42')\n"
    "os.makedirs('deep/er', exist_ok=True)\n"
    "open('deep/er/data.csv', 'w').write('a,b\\n1,2\\n')\n"
    "os.symlink('/etc/passwd', 'link')\n"
    "print(os.getcwd())\n"
)


def engine(provider: SandboxProvider, *argv: str) -> str:
    assert isinstance(provider, ContainerProvider)
    done = subprocess.run(
        [provider.runtime, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def host_folders(box: Sandbox) -> list[str]:
    """The folders of ``box`` in the host's temporary directory (where the default files are)."""
    prefix = f"rewyn-{box.id}-"
    return [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(prefix)]


def test_what_the_code_writes_is_read_back_through_the_engine_and_links_are_refused(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box()
    result = box.execute(WRITES)
    assert result.ok, result.stderr
    assert result.stdout == "/scratch\n"
    assert box.read_file("result.txt") == b"42"
    assert box.read_file("deep/er/data.csv") == b"a,b\n1,2\n"
    listed = {(entry.name, entry.kind) for entry in box.list_files()}
    assert {("result.txt", "file"), ("deep", "dir"), ("link", "link")} <= listed
    assert [entry.name for entry in box.list_files("deep/er")] == ["data.csv"]
    assert len(box.list_files(limit=2)) == 2
    facts = box.files.facts(limit=1000, depth=5, hidden_folders=False)
    assert facts["deep/er/data.csv"][0] == 8
    assert "link" not in facts
    with pytest.raises(ScratchError, match="a link"):
        box.read_file("link")
    with pytest.raises(ScratchError, match="not a regular file"):
        box.read_file("deep")
    with pytest.raises(ScratchError, match="over the limit"):
        box.read_file("result.txt", limit=1)
    with pytest.raises(ScratchError, match="outside"):
        box.read_file("../etc/passwd")
    with pytest.raises(FileNotFoundError):
        box.read_file("missing.txt")


def test_the_host_gives_files_the_code_owns_and_keeps_no_folder_of_its_own(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box()
    assert box.files.host_path is None
    with pytest.raises(ScratchError, match="not on this host"):
        _ = box.workdir
    box.write_file("given/input.json", b'{"n": 3}')
    session = box.session()
    result = session.execute(
        "import json, os\n"
        "print(json.load(open('given/input.json'))['n'], os.stat('given/input.json').st_uid "
        "== os.getuid(), os.stat('given').st_uid == os.getuid())\n"
        "open('given/out.txt', 'w').write('done')\n"
    )
    assert result.stdout == "3 True True\n", result.stderr
    assert box.read_file("given/out.txt") == b"done"
    assert host_folders(box) == []
    # The worker's container mounts the volume and nothing of the host's.
    names = engine(box.provider, "ps", "-q", "--filter", f"name=rewyn-{box.id}-").split()
    assert len(names) == 1  # (running: the session's worker; the keeper is never started)
    mounts = json.loads(engine(box.provider, "inspect", "--format", "{{json .Mounts}}", *names))
    assert [(mount["Type"], mount["Destination"]) for mount in mounts] == [("volume", "/scratch")]
    assert isinstance(box.files, VolumeFiles)
    assert mounts[0]["Name"] == box.files.volume
    session.close()


def test_closing_removes_the_volume_and_its_keeper(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    box.execute("open('x', 'w').write('x')")
    files = box.files
    assert isinstance(files, VolumeFiles)
    assert engine(box.provider, "volume", "ls", "-q", "--filter", f"name={files.volume}")
    box.close()
    assert engine(box.provider, "volume", "ls", "-q", "--filter", f"name={files.volume}") == ""
    assert engine(box.provider, "ps", "-aq", "--filter", f"name={files.keeper}") == ""


def test_a_pool_empties_the_volume_between_items(provider: SandboxProvider) -> None:
    code = (
        "import os\n"
        "print(sorted(n for n in os.listdir('.') if not n.startswith('.')))\n"
        "open('left-by-an-item', 'w').write('x')\n"
    )
    with SandboxPool(provider=provider, size=1) as pool:
        results = pool.map([code] * 3)
    assert [result.stdout for result in results] == ["[]\n"] * 3, results[0].stderr


def test_limits_it_cannot_apply_are_said_and_a_host_folder_is_refused(
    provider: SandboxProvider, tmp_path: Path, make_box: Callable[..., Sandbox]
) -> None:
    box = make_box(disk_limit_mb=64)
    assert box.isolation.disk == "no quota: a volume of the engine has no size limit"
    assert any("disk_limit_mb is not applied" in note for note in box.isolation.notes)
    assert any("nothing of it on the host's disk" in note for note in box.isolation.notes)
    with pytest.raises(ProviderUnavailableError, match="leave workdir unset"):
        make_box(workdir=tmp_path)


@pytest.mark.providers("docker+volume")  # (the engine's sweep: the OCI runtime plays no part)
def test_the_sweep_removes_a_dead_hosts_volume_and_keeper(provider: SandboxProvider) -> None:
    """A host killed outright leaves its volume and keeper; the next sweep removes them (a
    live host's stay). Another test's sweep on the same engine may get there first: what is
    checked is that they are gone after this one's."""
    assert isinstance(provider, ContainerProvider)
    dead = subprocess.Popen(["true"])
    dead.wait()
    volume = f"rewyn-sweep-test-{uuid.uuid4().hex[:8]}"
    labels = [
        f"--label={LABEL}={volume}",
        f"--label={HOST_PID_LABEL}={dead.pid}",
        f"--label={BOOT_LABEL}={boot_id()}",
        f"--label={PIDNS_LABEL}={pid_ns()}",
    ]
    engine(provider, "volume", "create", *labels, volume)
    keeper = f"{volume}-files"
    try:
        engine(
            provider,
            *("create", "--name", keeper, *labels, "-v", f"{volume}:/s", provider.image, "true"),
        )
        with provider.create() as live:
            live.execute("pass")
            provider.sweep()
            assert engine(provider, "ps", "-aq", "--filter", f"name={keeper}") == ""
            assert engine(provider, "volume", "ls", "-q", "--filter", f"name={volume}") == ""
            assert isinstance(live.files, VolumeFiles)
            assert engine(provider, "volume", "ls", "-q", "--filter", f"name={live.files.volume}")
    finally:  # (what a failing sweep left)
        subprocess.run([provider.runtime, "rm", "-f", keeper], capture_output=True, check=False)
        subprocess.run(
            [provider.runtime, "volume", "rm", "-f", volume], capture_output=True, check=False
        )


def test_the_mcp_file_tools_reach_a_volume_through_the_sandbox(
    make_box: Callable[..., Sandbox],
) -> None:
    """The MCP server's file tools and its list of files a call wrote take the session's files
    as the sandbox gives them, not as a host folder."""
    from rewyn_kernel.mcp import results
    from rewyn_kernel.mcp.files import SessionFiles

    session = make_box().session()
    tools = SessionFiles(session)
    tools.write("notes/todo.txt", b"check the volume")
    before = results.snapshot(session.files)
    ran = session.execute("print(open('notes/todo.txt').read()); open('made.txt', 'w').write('1')")
    assert ran.stdout == "check the volume\n", ran.stderr
    assert results.written(before, results.snapshot(session.files)) == ["made.txt"]
    assert tools.read("made.txt", 100) == b"1"
    assert [entry.name for entry in tools.list(".", 10)] == ["made.txt", "notes"]
    session.close()
