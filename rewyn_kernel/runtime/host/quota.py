"""A quota on a sandbox's scratch directory (``disk_limit_mb``): a filesystem of its own.

The scratch directory becomes the mount point of an ext4 filesystem in a sparse image file
beside it, on a loop device, made when the sandbox is and removed when it closes. The code's
writes past it fail with ENOSPC, whatever the provider (a container binds the directory, so
the quota holds there too); the host reads what the code wrote as before, and an execution that
filled it says so (``SandboxResult.disk_full``).

Why this mechanism: a tmpfs would hold the files in memory (and count them against the memory
cap, so a full scratch directory would end in an OOM kill rather than ENOSPC); project quotas
need a filesystem mounted with them, which this one may not be; a loop filesystem needs only
root, takes about 20 ms to make, and costs disk only for what is written. Mounting is root's, so
elsewhere the quota is not applied, and the isolation report says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

FULL_BYTES = 1024 * 1024
"""Free space under which the scratch filesystem counts as full: a write of a buffer larger than
what is left fails, and leaves that much free (or 1% of the quota, if that is more)."""


@dataclass(frozen=True)
class Quota:
    """A scratch directory's own filesystem (``make`` it; ``remove`` it after its workers)."""

    mountpoint: Path
    image: Path
    limit_mb: int

    def full(self) -> bool:
        """Whether the code has used up the quota."""
        try:
            info = os.statvfs(self.mountpoint)
        except OSError:
            return False
        left = info.f_bavail * info.f_frsize
        return left < max(FULL_BYTES, self.limit_mb * 1024 * 1024 // 100)

    def remove(self) -> None:
        """Unmount the filesystem (lazily if something still holds it) and delete its image."""
        for attempt in range(10):
            done = _run("umount", str(self.mountpoint))
            if done.returncode == 0 or not _mounted(self.mountpoint):
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            _run("umount", "-l", str(self.mountpoint))
        with contextlib.suppress(OSError):
            self.image.unlink()


def unsupported() -> str | None:
    """Why a quota cannot be mounted here, or None when it can."""
    if os.uname().sysname != "Linux":
        return "a scratch quota is Linux-only"
    if os.geteuid() != 0:
        return "mounting the quota's filesystem takes root"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"{tool} is not installed (e2fsprogs, util-linux)"
    return None


def make(mountpoint: Path, limit_mb: int) -> Quota:
    """Mount a fresh ``limit_mb`` MiB filesystem on the empty directory ``mountpoint``, owned
    as the directory is. Raise OSError saying why it could not be."""
    why = unsupported()
    if why is not None:
        raise OSError(why)
    sweep()
    image = mountpoint.with_name(f".{mountpoint.name}.{os.getpid()}{SUFFIX}")
    owner = mountpoint.stat()
    try:
        # Only its owner may read it: the code's files are in it (the scratch dir is 0700).
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.truncate(limit_mb * 1024 * 1024)  # sparse: disk is used as it is written
        mkfs = _run(
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            # No journal (scratch does not outlive a crash) and no room kept to grow; an inode
            # per 16 KiB: about 96% of the quota is the code's (ext4's own metadata, the rest).
            "-O",
            "^has_journal,^resize_inode",
            "-i",
            "16384",
            "-E",
            f"lazy_itable_init=1,root_owner={owner.st_uid}:{owner.st_gid}",
            str(image),
        )
        if mkfs.returncode != 0:
            raise OSError(f"mkfs.ext4 failed: {_last_line(mkfs)}")
        mount = _run("mount", "-o", "loop,nosuid,nodev", str(image), str(mountpoint))
        if mount.returncode != 0:
            raise OSError(f"mount failed: {_last_line(mount)}")
    except BaseException:
        with contextlib.suppress(OSError):
            image.unlink()
        raise
    quota = Quota(mountpoint, image, limit_mb)
    try:
        with contextlib.suppress(OSError):
            (mountpoint / "lost+found").rmdir()
        os.chmod(mountpoint, owner.st_mode & 0o7777)
    except BaseException:
        quota.remove()
        raise
    return quota


SUFFIX = ".quota"
_swept = False


def sweep() -> None:
    """Unmount and delete the quota filesystems of host processes that are gone (a host that
    was killed cannot remove its own), once per process: found through the loop devices'
    backing files, named ``.<scratch dir>.<host pid>.quota``."""
    global _swept
    if _swept:
        return
    _swept = True
    mounts: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            source = fields[fields.index("-") + 2] if "-" in fields else ""
            mounts[source] = fields[4]
    for device in Path("/sys/block").glob("loop*"):
        try:
            backing = (device / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        name = Path(backing).name
        pid = name.removesuffix(SUFFIX).rpartition(".")[2]
        if not (name.startswith(".rewyn-") and name.endswith(SUFFIX) and pid.isdigit()):
            continue
        if Path(f"/proc/{pid}").exists():
            continue
        where = mounts.get(f"/dev/{device.name}")
        if where is not None:
            _run("umount", "-l", where)
        with contextlib.suppress(OSError):
            Path(backing).unlink()


def _mounted(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return any(
            line.split()[4] == str(path)
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        )
    return False


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=30, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
