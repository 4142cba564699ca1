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

import atexit
import contextlib
import ctypes
import errno
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
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
        """Unmount the filesystem (lazily if something still holds it) and delete its image
        (its loop device detaches itself once unmounted)."""
        libc = ctypes.CDLL(None, use_errno=True)
        target = os.fsencode(self.mountpoint)
        for attempt in range(10):
            if libc.umount2(target, 0) == 0 or not _mounted(self.mountpoint):
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            libc.umount2(target, MNT_DETACH)
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
    info = mountpoint.stat()
    owner = (info.st_uid, info.st_gid)
    image = mountpoint.with_name(f".{mountpoint.name}.{os.getpid()}{SUFFIX}")
    try:
        if not _spares.take(limit_mb, owner, image):
            _make_image(image, limit_mb, owner)
        _spares.prepare(limit_mb, owner, mountpoint.parent)  # (for the next one, meanwhile)
        _mount(image, mountpoint)
    except BaseException:
        with contextlib.suppress(OSError):
            image.unlink()
        raise
    quota = Quota(mountpoint, image, limit_mb)
    try:
        with contextlib.suppress(OSError):
            (mountpoint / "lost+found").rmdir()
        os.chmod(mountpoint, info.st_mode & 0o7777)
    except BaseException:
        quota.remove()
        raise
    return quota


def _make_image(image: Path, limit_mb: int, owner: tuple[int, int]) -> None:
    """A sparse image of ``limit_mb`` MiB holding an empty ext4 filesystem whose root is
    ``owner``'s (raise OSError saying why not)."""
    # Only its owner may read it: the code's files will be in it (the scratch dir is 0700).
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
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
            f"lazy_itable_init=1,root_owner={owner[0]}:{owner[1]}",
            str(image),
        )
        if mkfs.returncode != 0:
            raise OSError(f"mkfs.ext4 failed: {_last_line(mkfs)}")
    except BaseException:
        with contextlib.suppress(OSError):
            image.unlink()
        raise


LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR = 4
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2


def _mount(image: Path, mountpoint: Path) -> None:
    """Mount ``image`` (ext4) on ``mountpoint``: a loop device set up with ``LOOP_CONFIGURE``
    (Linux 5.8+; it detaches itself once unmounted) and mount(2), with no program run; else
    with ``mount -o loop``."""
    try:
        device, loop = _attach(image)
    except OSError:
        mount = _run("mount", "-o", "loop,nosuid,nodev", str(image), str(mountpoint))
        if mount.returncode != 0:
            raise OSError(f"mount failed: {_last_line(mount)}") from None
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        flags = MS_NOSUID | MS_NODEV
        if libc.mount(device.encode(), os.fsencode(mountpoint), b"ext4", flags, None) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"mount {device} on {mountpoint}: {os.strerror(number)}")
    finally:
        # The mount holds the device now; unmounted, it detaches (autoclear). Before the
        # mount, closing the last descriptor would detach it at once.
        os.close(loop)


def _attach(image: Path) -> tuple[str, int]:
    """A free loop device backed by ``image`` and a descriptor holding it (close it once
    mounted: the device then detaches itself when unmounted)."""
    import fcntl
    import struct

    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(16):  # (another process may take the free one first)
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            name = os.fsencode(image)[:63]
            info = struct.pack(
                "=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0
            )
            config = struct.pack("=II", backing, 0) + info + bytes(64)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, config)
            except OSError as exc:
                os.close(loop)
                if exc.errno != errno.EBUSY:
                    raise
                continue
            return device, loop
        raise OSError(errno.EBUSY, "no free loop device could be had")
    finally:
        os.close(backing)
        os.close(control)


class _SpareImages:
    """One image made ahead of time per size and owner, in a background thread, so that the
    next sandbox's quota costs a rename and a mount, not a mkfs (about 8 ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[tuple[int, tuple[int, int]], Path] = {}
        self._making: set[tuple[int, tuple[int, int]]] = set()
        self._count = itertools.count(1)

    def take(self, limit_mb: int, owner: tuple[int, int], image: Path) -> bool:
        """Move a ready image of that size and owner to ``image``; False if none is ready."""
        with self._lock:
            spare = self._ready.pop((limit_mb, owner), None)
        if spare is None:
            return False
        try:
            os.rename(spare, image)
        except OSError:
            with contextlib.suppress(OSError):
                spare.unlink()
            return False
        return True

    def prepare(self, limit_mb: int, owner: tuple[int, int], folder: Path) -> None:
        """Start making an image of that size and owner in ``folder``, unless one is."""
        key = (limit_mb, owner)
        with self._lock:
            if key in self._ready or key in self._making:
                return
            self._making.add(key)
        name = f".rewyn-spare-{next(self._count)}.{os.getpid()}{SUFFIX}"
        thread = threading.Thread(
            target=self._make, args=(key, folder / name), name="rewyn-quota", daemon=True
        )
        thread.start()

    def _make(self, key: tuple[int, tuple[int, int]], image: Path) -> None:
        try:
            _make_image(image, *key)
        except OSError:
            return  # (the next sandbox makes its own)
        finally:
            with self._lock:
                self._making.discard(key)
        with self._lock:
            if key in self._ready:
                extra: Path | None = image
            else:
                self._ready[key] = image
                extra = None
        if extra is not None:
            with contextlib.suppress(OSError):
                extra.unlink()

    def discard(self) -> None:
        """Remove the images made ahead of time (at exit)."""
        with self._lock:
            images, self._ready = list(self._ready.values()), {}
        for image in images:
            with contextlib.suppress(OSError):
                image.unlink()


_spares = _SpareImages()
atexit.register(_spares.discard)


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
    # Images never mounted (made ahead of time, or left by a host killed while it made one).
    for image in Path(tempfile.gettempdir()).glob(f".rewyn-*{SUFFIX}"):
        pid = image.name.removesuffix(SUFFIX).rpartition(".")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                image.unlink()


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
