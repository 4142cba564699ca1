"""The code's view of the workspace, mounted by a root host (host/workspace.py says what it is).

As root, the host mounts the view itself, where the sandbox's supervisor cannot:

- ``lower``: an *idmapped* clone of the workspace (``open_tree`` + ``mount_setattr`` with
  ``MOUNT_ATTR_IDMAP``, Linux 5.12+), in which the files of the host's root appear to be the
  code's uid's (the dedicated one, or a container's), so the code may change them; other
  owners' files keep their rights;
- ``anchor``: a folder bound on itself and made *shared*. The sandbox binds it where the
  workspace is (bubblewrap's binds are slaves of the host's mounts; unshare runs with
  ``--propagation slave``; docker and podman take ``:rslave``), so what the host mounts on the
  anchor afterwards appears in the sandbox too;
- on the anchor, one overlay per execution: ``lower`` below, the execution's upper folder (on
  the workspace's filesystem, under ``.rewyn/staging``; a whiteout in it hides ``.rewyn``)
  above; over it, a read-only clone of each protected path. At the end of an
  execution the host lazily unmounts it, mounts the next execution's, and publishes the first
  one's upper folder (the code's processes that still hold a file of it keep it).

Elsewhere (an ordinary host) the sandbox's supervisor mounts the same view inside the sandbox,
through a helper that keeps its capabilities for it (worker/mounter.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rewyn_kernel.runtime.host.workspace import hide_store

OPEN_TREE, MOVE_MOUNT, MOUNT_SETATTR = 428, 429, 442
"""System call numbers (the same on every architecture: they were added after the tables were
unified)."""
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 0x00000001, 0x00100000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_SHARED = 32, 4096, 16384, 1 << 20
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


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def mount(
    source: str | bytes | None, target: Path, kind: bytes | None, flags: int, data: str = ""
) -> None:
    """mount(2), raising OSError with what failed."""
    raw = os.fsencode(source) if isinstance(source, str) else source
    options = data.encode() if data else None
    _check(_libc().mount(raw, os.fsencode(target), kind, flags, options), f"mount {target}")


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


def overlay_options(lower: str, upper: str, work: str) -> str:
    """overlayfs's options for one execution's view (no path may hold a comma, a colon or a
    backslash: they are the options' own syntax)."""
    for path in (lower, upper, work):
        if any(char in path for char in ",:\\"):
            raise OSError(f"overlayfs cannot take the path {path!r} (a ',', ':' or '\\\\')")
    return f"lowerdir={lower},upperdir={upper},workdir={work}"


def cover_view(top: Path, protected: list[str]) -> None:
    """Over an execution's view at ``top``: make each protected path read-only (a read-only
    clone of itself). (The store is hidden by a whiteout in the upper folder: hide_store.)"""
    for relative in protected:
        path = top / relative
        if not (path.exists() or path.is_symlink()) or path.is_symlink():
            continue
        read_only_clone(path)


def read_only_clone(path: Path) -> None:
    """Put a read-only clone of ``path`` over it, made read-only *before* it is attached: the
    mounts the sandbox has of the view copy it as it arrives (a remount afterwards would not
    reach them: mount flags do not propagate)."""
    libc = _libc()
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    tree = _check(libc.syscall(OPEN_TREE, AT_FDCWD, os.fsencode(path), flags), "open_tree")
    try:
        attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
        where = AT_EMPTY_PATH | AT_RECURSIVE
        _check(
            libc.syscall(MOUNT_SETATTR, tree, b"", where, ctypes.byref(attr), ctypes.sizeof(attr)),
            "mount_setattr(MOUNT_ATTR_RDONLY)",
        )
        _check(
            libc.syscall(
                MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(path), MOVE_MOUNT_F_EMPTY_PATH
            ),
            "move_mount",
        )
    finally:
        os.close(tree)


@dataclass
class WorkspaceView:
    """One sandbox's view of a workspace, mounted on the host (see the module's docstring)."""

    source: Path
    base: Path
    staging: Path
    code_ids: tuple[int, int] | None = None
    """The code's uid and gid where not the host's own: the upper folder's root is theirs (it
    gives the view's root its owner), and its mode the workspace's."""
    mounted: bool = False

    @property
    def anchor(self) -> Path:
        """What the sandbox binds where the workspace is."""
        return self.base / "ws"

    @property
    def lower(self) -> Path:
        return self.base / "lower"

    def next_cell(self, number: int, protected: list[str]) -> Path:
        """Mount a fresh view for execution ``number`` (the previous one lazily unmounted: the
        code's processes that hold a file of it keep it), ``protected`` read-only in it;
        return its upper folder."""
        cell = self.staging / f"cell-{number}"
        upper, work = cell / "upper", cell / "work"
        upper.mkdir(parents=True)
        work.mkdir()
        with contextlib.suppress(OSError):
            os.chmod(upper, stat.S_IMODE(os.stat(self.source).st_mode))
        hide_store(upper)
        if self.code_ids is not None:
            os.chown(upper, *self.code_ids)
        if self.mounted:
            _umount(self.anchor)  # (the view's covers go with it)
            self.mounted = False
        options = overlay_options(str(self.lower), str(upper), str(work))
        mount(b"overlay", self.anchor, b"overlay", MS_NOSUID | MS_NODEV, options)
        self.mounted = True
        cover_view(self.anchor, protected)
        return upper

    def mountpoints(self, relative: list[str]) -> None:
        """Make folders in the (still empty) anchor where the sandbox binds what it runs from
        until the first view is up (host/cells.py: ``keep``)."""
        for path in relative:
            os.makedirs(self.anchor / path, mode=0o755, exist_ok=True)

    def remove(self) -> None:
        """Unmount the view on the host (the sandbox's copies end with the sandbox). The staging
        folder's leftovers are the caller's to publish and remove. Idempotent."""
        _remove_base(self.base)


def make(
    source: Path, staging: Path, userns: int | None, code_ids: tuple[int, int] | None
) -> WorkspaceView:
    """Prepare a root host's view of the workspace ``source`` (nothing mounted on the anchor
    yet: ``next_cell`` does); ``userns`` maps the host's root to the code's uid for the
    idmapped lower layer (None: the workspace as it is). Raise OSError saying why not."""
    sweep()
    RUN_DIR.mkdir(mode=0o700, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=RUN_DIR))
    view = WorkspaceView(source, base, staging, code_ids)
    try:
        view.lower.mkdir()
        view.anchor.mkdir()
        if userns is None:
            mount(str(source), view.lower, None, MS_BIND | MS_REC)
        else:
            idmapped_clone(source, view.lower, userns)
        mount(str(view.anchor), view.anchor, None, MS_BIND)
        mount(None, view.anchor, None, MS_SHARED)
    except BaseException:
        view.remove()
        raise
    return view


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
    mounted = HostMount(base / "lower", base)
    try:
        mounted.path.mkdir()
        idmapped_clone(source, mounted.path, userns)
    except BaseException:
        mounted.remove()
        raise
    return mounted


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
    # (The mount table read once for them all: a kernel's start pays for this sweep, and a
    # host may keep many leftovers.)
    mounted = _mount_points()
    with contextlib.suppress(OSError):
        for entry in RUN_DIR.iterdir():
            pid = entry.name.partition("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _remove_base(entry, mounted)


def _remove_base(base: Path, mounted: set[str] | None = None) -> None:
    """Unmount a view's mounts and remove its empty folders: only ``rmdir``, never a recursive
    removal (were a mount still there, that would reach the person's files). ``mounted``: the
    mount table's mount points as read just before (else it is read here)."""
    if mounted is None:
        mounted = _mount_points()
    for name in ("ws", "lower"):
        for _ in range(8):  # (the anchor: an overlay on a bind of itself; a lazy umount each)
            if os.fsdecode(os.fsencode(base / name)) not in mounted:
                break
            _umount(base / name)
            mounted = _mount_points()
        _remove_empty(base / name, mounted, depth=8)
    with contextlib.suppress(OSError):
        base.rmdir()


def _remove_empty(folder: Path, mounted: set[str], depth: int) -> None:
    """Remove ``folder`` and the empty folders in it, deepest first (the anchor's mountpoint
    folders, made for what the sandbox binds there), with ``rmdir`` alone: never into a mount
    point (a view still mounted shows the person's files) nor through a link."""
    if depth <= 0 or os.fsdecode(os.fsencode(folder)) in mounted:
        return
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_empty(Path(entry.path), mounted, depth - 1)
    with contextlib.suppress(OSError):
        folder.rmdir()


def _mount_points() -> set[str]:
    """The mount points in this process's mount table (as /proc/self/mountinfo spells them)."""
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        return {line.split()[4] for line in lines}
    return set()
