"""The scratch quota (disk_limit_mb): real filesystems on real loop devices, every provider."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from rewyn_kernel.runtime.providers.local import quota
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxSpec

from .conftest import unavailable

FILL = """
import errno
written = 0
try:
    with open("big.bin", "wb") as handle:
        for _ in range(100):
            handle.write(b"x" * (1024 * 1024))
            handle.flush()
            written += 1
except OSError as exc:
    print("stopped", written, errno.errorcode[exc.errno])
"""


@pytest.fixture(autouse=True)
def _needs_quota() -> None:
    why = quota.unsupported()
    if why is not None:
        unavailable(f"no scratch quota here: {why}")


def _mounted(path: Path) -> bool:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return any(line.split()[4] == str(path) for line in lines)


def test_the_quota_holds_and_the_host_reads_what_was_written(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(disk_limit_mb=32, timeout=60)
    assert box.isolation.disk is not None
    assert "32 MiB filesystem of its own" in box.isolation.disk
    result = box.execute(FILL)
    assert result.ok, result.stderr
    stopped, megabytes, code = result.stdout.split()
    assert stopped == "stopped"
    assert code in (errno.errorcode[errno.ENOSPC], errno.errorcode[errno.EDQUOT])
    assert 24 <= int(megabytes) < 32
    assert result.disk_full
    assert "scratch quota of 32 MiB is used up" in result.message
    # Within the quota, the host reads back what the code wrote.
    written = (box.workdir / "big.bin").stat().st_size
    assert int(megabytes) * 2**20 <= written <= 32 * 2**20
    # Room again once the code deletes it.
    freed = box.execute("import os\nos.remove('big.bin')\nopen('small', 'w').write('ok')")
    assert freed.ok
    assert not freed.disk_full
    assert (box.workdir / "small").read_text() == "ok"


def test_closing_removes_the_quota_filesystem(make_box: Callable[..., Sandbox]) -> None:
    box = make_box(disk_limit_mb=16, timeout=30)
    assert box.execute("open('x', 'w').write('x')").ok
    workdir = box.workdir
    assert _mounted(workdir)  # (so that the checks below can fail)
    images = list(workdir.parent.glob(f".{workdir.name}.*{quota.SUFFIX}"))
    assert len(images) == 1
    assert images[0].stat().st_mode & 0o077 == 0  # (the code's files are in it)
    box.close()
    assert not _mounted(workdir)
    assert not images[0].exists()
    assert not workdir.exists()


@pytest.mark.providers("subprocess")
def test_a_quota_cannot_cover_a_directory_that_was_given(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="disk_limit_mb bounds a scratch directory"):
        SandboxSpec(workdir=tmp_path, disk_limit_mb=64)
    with pytest.raises(ValidationError, match="greater than or equal to 8"):
        SandboxSpec(disk_limit_mb=1)
