"""A root host's view of a notebook's directory for code that runs as a uid of its own.

As root, the code of a local sandbox runs as the dedicated uid (``host/identity.py``), so the
person's files (root's) would be read-only to it, and so would every folder beside the
notebook: ``df.to_csv('data/out.csv')``, which works on ipykernel, would fail. So for a root
host, the host itself mounts the code's view of the directory, where the supervisor cannot:

- an *idmapped* clone of the directory (``open_tree`` + ``mount_setattr(MOUNT_ATTR_IDMAP)``,
  Linux 5.12+), in which the files the host's root owns appear to be the dedicated uid's, so
  the code may change them (and nothing else: other owners' files keep their rights);
- an overlay on top, the clone read-only below and the code's writes above, in
  ``sandbox-files/<name>`` (owned by the dedicated uid on disk), as every provider keeps them.

The sandbox binds that overlay where the directory is. The person's files never change.
Mounting both takes the host's root, which only a root host has; elsewhere the supervisor
mounts the overlay itself, as the host's user it runs as.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rewyn_kernel.runtime.host.files import FilesView, hold_view, prepare

OPEN_TREE, MOVE_MOUNT, MOUNT_SETATTR = 428, 429, 442
"""System call numbers (the same on every architecture: they were added after the tables were
unified)."""
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
MNT_DETACH = 2
RUN_DIR = Path("/run/rewyn-kernel")
"""Where the views are mounted on the host: root's only (0700), swept of dead hosts' views."""


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


@dataclass
class HostView:
    """One sandbox's view of a directory, mounted on the host (see the module's docstring)."""

    view: FilesView
    """The writes and work directories it took (a ``-N`` one when others are held)."""
    merged: Path
    """What the sandbox binds where the directory is."""
    base: Path
    lock: int
    """Holds the writes directory while this view lives (see files.hold_view)."""

    def remove(self) -> None:
        """Unmount the view on the host (the sandbox's own copies of it end with the sandbox)
        and let go of its writes directory. Idempotent."""
        _remove_base(self.base)
        if self.lock >= 0:
            with contextlib.suppress(OSError):
                os.close(self.lock)
            self.lock = -1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def idmapped_clone(source: Path, target: Path, userns: int) -> None:
    """Attach at ``target`` a clone of the mount tree at ``source`` whose owners are mapped
    through the user namespace ``userns`` (an owner ``k`` on disk is shown as what ``k``
    maps to there)."""
    libc = _libc()
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    tree = _check(libc.syscall(OPEN_TREE, AT_FDCWD, os.fsencode(source), flags), "open_tree")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns)
        size = ctypes.sizeof(attr)
        where = AT_EMPTY_PATH | AT_RECURSIVE
        _check(
            libc.syscall(MOUNT_SETATTR, tree, b"", where, ctypes.byref(attr), size),
            "mount_setattr(MOUNT_ATTR_IDMAP)",
        )
        _check(
            libc.syscall(
                MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(target), MOVE_MOUNT_F_EMPTY_PATH
            ),
            "move_mount",
        )
    finally:
        os.close(tree)


def make(view: FilesView, owner: tuple[int, int], userns: int) -> HostView:
    """Mount the code's view of ``view.source`` on the host, for code running as ``owner``
    (``userns`` maps the host's root to it). Raise OSError saying why it cannot be."""
    sweep()
    taken, lock = hold_view(view)
    try:
        prepare(taken, owner)
        RUN_DIR.mkdir(mode=0o700, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=RUN_DIR))
    except BaseException:
        os.close(lock)
        raise
    host = HostView(taken, base / "merged", base, lock)
    try:
        (base / "lower").mkdir()
        host.merged.mkdir()
        idmapped_clone(view.source, base / "lower", userns)
        options = f"lowerdir={base / 'lower'},upperdir={taken.upper},workdir={taken.work}"
        if any(char in str(path) for path in (base, taken.upper) for char in ",:\\"):
            raise OSError(f"{view.source}: overlayfs cannot take a path with ',', ':' or '\\'")
        libc = _libc()
        done = libc.mount(b"overlay", os.fsencode(host.merged), b"overlay", 0, options.encode())
        _check(done, "mount overlay")
    except BaseException:
        host.remove()
        raise
    return host


@dataclass
class HostMount:
    """A directory of the person's shown to the code through an idmapped clone of it, mounted
    on the host (a ``workdir`` a root host was given: the code writes there as the person)."""

    path: Path
    """What the sandbox binds where the directory is."""
    base: Path

    def remove(self) -> None:
        """Unmount it on the host (the sandbox's copies end with the sandbox). Idempotent."""
        _remove_base(self.base)


def idmapped_bind(source: Path, userns: int) -> HostMount:
    """Mount on the host an idmapped clone of ``source`` (``userns`` maps the host's root to the
    code's uid), for the sandbox to bind. Raise OSError saying why it cannot be."""
    sweep()
    RUN_DIR.mkdir(mode=0o700, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=RUN_DIR))
    mount = HostMount(base / "lower", base)
    try:
        mount.path.mkdir()
        idmapped_clone(source, mount.path, userns)
    except BaseException:
        mount.remove()
        raise
    return mount


def _umount(path: Path) -> None:
    with contextlib.suppress(OSError):
        _libc().umount2(os.fsencode(path), MNT_DETACH)


_swept = False


def sweep() -> None:
    """Unmount and remove the views of host processes that are gone (once per process)."""
    global _swept
    if _swept:
        return
    _swept = True
    with contextlib.suppress(OSError):
        for entry in RUN_DIR.iterdir():
            pid = entry.name.partition("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _remove_base(entry)


def _remove_base(base: Path) -> None:
    """Unmount a view's two mounts and remove its empty folders: only ``rmdir``, never a
    recursive removal (were a mount still there, that would reach the person's files)."""
    for name in ("merged", "lower"):
        _umount(base / name)
        with contextlib.suppress(OSError):
            (base / name).rmdir()
    with contextlib.suppress(OSError):
        base.rmdir()
