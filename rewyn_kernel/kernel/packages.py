"""Packages that stay: what ``%pip install`` puts into a kernel's sandbox, kept for the notebook.

Each notebook has a layer on the host, ``<Jupyter data dir>/rewyn-kernel/packages/<notebook>-
<hash>`` (``settings.notebook_key``), outside the person's tracked files and out of every
sandbox's reach. A kernel of that notebook copies the layer into its sandbox's scratch directory
before any code runs, at the user's site-packages under the sandbox's HOME
(``~/.local/lib/pythonX.Y/...``), where the code's installs go (``PIP_TARGET``, set by the
worker: runtime/worker/child.py). After each cell that changed them the host copies them back.

Why a copy and not a bind mount of the host's folder: a copy lives in the scratch directory, so
its bytes count against the sandbox's disk quota (``disk_limit_mb``) as every other write does,
with the same ENOSPC the moment it is reached, and every provider has it (bubblewrap, landlock,
subprocess and container each give the code its scratch directory as HOME). A bind mount would
need a quota of its own per provider. The cost is a copy at each kernel's start.

The host reads what it copies back through file descriptors, a folder at a time, never following
a link (links are kept as links), and keeps only folders, regular files and links.

The layer's site-packages come after the sandbox's own on the code's import path (``site.
addsitedir`` appends), so a package there cannot replace a module the environment has; the
worker itself starts isolated (``python -I``) and never imports from it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rewyn_kernel.runtime.installs import ENV_NAME
from rewyn_kernel.runtime.sandbox import Sandbox
from rewyn_kernel.settings import host_data_dir, notebook_key

__all__ = [
    "ENV_NAME",
    "Layer",
    "Package",
    "attach",
    "describe",
    "layer_for",
    "layers",
    "packages_root",
    "remove_packages",
    "size_of",
]

logger = logging.getLogger(__name__)

PARTS = ("lib", "bin")
"""What is kept of the sandbox's ``~/.local``: the site-packages (per Python version) and the
console scripts of a ``pip install --user``."""
NOTEBOOK_FILE = "notebook.txt"
"""The notebook's path, kept beside the layer for ``rewyn-kernel packages list``."""
DISK_FULL = (
    "[rewyn: the sandbox's disk quota (disk_limit_mb) is full, so what was installed since "
    "the last cell is not kept for the notebook (an install stopped by it is left half done "
    "here): restart the kernel to start again from the notebook's packages as they were; a "
    "kernel installed with --disk MB has more room]\n"
)
"""What the kernel says when it does not keep an install because the quota stopped it."""
_NAME = re.compile(r"[-_.]+")


def packages_root() -> Path:
    """The host's folder of every notebook's layer."""
    return host_data_dir("packages")


def layer_for(notebook: str | None = None) -> Path:
    """The layer of ``notebook`` (a path or a layer's own name), or of the notebook this kernel
    runs for."""
    root = packages_root()
    if notebook is None:
        return root / notebook_key()
    if (root / notebook).is_dir() and "/" not in notebook:
        return root / notebook
    return root / notebook_key(notebook)


def layers() -> list[Path]:
    """Every notebook's layer on this host, by name."""
    try:
        found = packages_root().iterdir()
        return sorted(path for path in found if path.is_dir() and not path.name.startswith("."))
    except FileNotFoundError:
        return []


class Layer:
    """One kernel's copy of its notebook's layer: ``load`` it into the sandbox's scratch
    directory before any code runs, ``save`` it after each cell (the kernel calls both)."""

    def __init__(self, folder: Path, scratch: Path) -> None:
        self.folder = folder
        self.scratch = scratch
        self._seen: tuple[tuple[str, int, int], ...] = ()
        self.unloaded = ""
        """Why the layer could not be loaded, if it could not: this kernel then keeps nothing
        (its partial copy would replace the layer), and says so once."""
        self._told = False
        self.startup_files = False
        """Whether what was loaded has ``.pth`` files, which Python reads only as a process
        starts: the worker then needs starting again (the kernel does it)."""

    def load(self) -> str:
        """Copy the layer in, owned by the code's user; '' or what went wrong (a layer larger
        than the sandbox's disk quota does not fit)."""
        local = self.scratch / ".local"
        owner = os.stat(self.scratch)
        try:
            for part in PARTS:
                if (self.folder / part).is_dir():
                    local.mkdir(exist_ok=True)
                    self.startup_files |= any((self.folder / part).glob("*/site-packages/*.pth"))
                    shutil.copytree(
                        self.folder / part, local / part, symlinks=True, dirs_exist_ok=True
                    )
            for top, dirs, files in os.walk(local):
                for name in (top, *(os.path.join(top, entry) for entry in dirs + files)):
                    os.lchown(name, owner.st_uid, owner.st_gid)
        except OSError as exc:
            self.unloaded = (
                f"[rewyn: the notebook's kept packages ({self.folder}) could not be loaded, and "
                f"this kernel keeps no installs: {exc}]\n"
            )
            return self.unloaded
        finally:
            self._seen = self._signature()
        return ""

    def save(self) -> str:
        """Copy the sandbox's packages back to the layer if they changed since the last look
        (an install, an upgrade, an uninstall); '' or a note for the person: what filled the
        sandbox's disk quota is not kept (pip leaves half an install behind)."""
        if self.unloaded:
            said, self._told = ("" if self._told else self.unloaded), True
            return said
        seen = self._signature()
        if seen == self._seen:
            return ""
        self._seen = seen
        if _full(self.scratch):
            return DISK_FULL
        # (names of this kernel's own: two kernels of one notebook may save at once, and the
        # last one's packages are kept)
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=f".{self.folder.name}.new-", dir=self.folder.parent))
        old = fresh.with_name(fresh.name.replace(".new-", ".old-"))
        try:
            fresh.chmod(0o755)
            (fresh / NOTEBOOK_FILE).write_text(os.path.abspath(_notebook()) + "\n")
            self._copy_back(fresh)
            if not self.folder.exists() and not _holds_files(fresh):
                shutil.rmtree(fresh)  # (the worker made an empty site-packages: nothing to keep)
                return ""
        except OSError as exc:
            shutil.rmtree(fresh, ignore_errors=True)
            return f"[rewyn: the notebook's packages could not be kept: {exc}]\n"
        try:
            with contextlib.suppress(FileNotFoundError):
                self.folder.rename(old)
            fresh.rename(self.folder)
        except OSError as exc:  # (another kernel of the notebook saved in between: its stay)
            shutil.rmtree(fresh, ignore_errors=True)
            return f"[rewyn: the notebook's packages could not be kept: {exc}]\n"
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return ""

    def _copy_back(self, fresh: Path) -> None:
        """Copy the sandbox's ``~/.local/{lib,bin}`` into ``fresh``, never through a link."""
        local = _open_dir(os.open(self.scratch, os.O_RDONLY | os.O_DIRECTORY), ".local")
        if local is None:
            return
        try:
            for part in PARTS:
                inner = _open_dir(local, part, close=False)
                if inner is not None:
                    _copy_out(inner, fresh / part)
        finally:
            os.close(local)

    def _signature(self) -> tuple[tuple[str, int, int], ...]:
        """The folders an install, upgrade or uninstall changes (their mtime and inode)."""
        local = self.scratch / ".local"
        paths = [local / part for part in PARTS]
        paths += [path for path in (local / "lib").glob("*") if not path.is_symlink()]
        paths += [path / "site-packages" for path in list(paths[2:])]
        found = []
        for path in paths:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found.append((str(path), info.st_mtime_ns, info.st_ino))
        return tuple(sorted(found))


def _full(scratch: Path) -> bool:
    """Whether the scratch directory's filesystem is full (its own, under a disk quota: see
    providers/local/quota.py, whose rule this is)."""
    try:
        info = os.statvfs(scratch)
    except OSError:
        return False
    left = info.f_bavail * info.f_frsize
    return left < max(1 << 20, info.f_blocks * info.f_frsize // 100)


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` holds anything but folders and the notebook's name."""
    return any(
        files != [NOTEBOOK_FILE] if top == str(folder) else bool(files)
        for top, _dirs, files in os.walk(folder)
    )


def _notebook() -> str:
    return os.environ.get("JPY_SESSION_NAME") or os.getcwd()


def _open_dir(parent: int, name: str, *, close: bool = True) -> int | None:
    """A folder's fd under ``parent`` (never through a link); None if it is not a folder."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return None
    finally:
        if close:
            os.close(parent)


def _copy_out(folder: int, dest: Path) -> None:
    """Copy the folder at fd ``folder`` (closed here) to ``dest``: folders, regular files and
    links as links; nothing else, and never through a link."""
    try:
        dest.mkdir(mode=0o755)
        for name in os.listdir(folder):
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(name, dir_fd=folder), dest / name)
            elif stat.S_ISDIR(info.st_mode):
                inner = _open_dir(folder, name, close=False)
                if inner is not None:
                    _copy_out(inner, dest / name)
            elif stat.S_ISREG(info.st_mode):
                _copy_file(folder, name, dest / name)
    finally:
        os.close(folder)


def _copy_file(folder: int, name: str, dest: Path) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        source = os.open(name, flags, dir_fd=folder)
    except OSError:
        return
    with os.fdopen(source, "rb") as reader:
        mode = os.fstat(reader.fileno()).st_mode
        if not stat.S_ISREG(mode):
            return
        with open(dest, "xb") as writer:
            shutil.copyfileobj(reader, writer)
        dest.chmod(0o755 if mode & 0o111 else 0o644)


# -- what a layer holds, for rewyn-kernel packages ------------------------------------------


@dataclass(frozen=True)
class Package:
    """One distribution in a layer."""

    name: str
    version: str
    size: int
    """Bytes of the files its RECORD lists."""
    record: Path


def describe(layer: Path) -> list[Package]:
    """The distributions ``layer`` holds (read from their metadata), by name."""
    found = []
    for record in sorted(layer.glob("lib/*/site-packages/*.dist-info/RECORD")):
        fields = _metadata(record.parent / "METADATA")
        size = sum(path.stat().st_size for path in _recorded(record) if path.is_file())
        found.append(Package(fields.get("Name", "?"), fields.get("Version", "?"), size, record))
    return sorted(found, key=lambda package: _normal(package.name))


def remove_packages(layer: Path, names: list[str]) -> list[str]:
    """Remove the distributions ``names`` from ``layer``; the names not found there."""
    wanted = {_normal(name): name for name in names}
    for package in describe(layer):
        if wanted.pop(_normal(package.name), None) is None:
            continue
        folders = {package.record.parent}
        for path in _recorded(package.record):
            if path.is_file() or path.is_symlink():
                path.unlink()
                folders.add(path.parent)
        shutil.rmtree(package.record.parent, ignore_errors=True)
        site = package.record.parent.parent
        for emptied in sorted(folders, key=lambda path: -len(path.parts)):
            _prune(emptied, site)
    return list(wanted.values())


def _prune(folder: Path, site: Path) -> None:
    """Remove ``folder`` and its parents up to ``site`` while they are empty."""
    while folder != site and site in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _recorded(record: Path) -> list[Path]:
    """The files a RECORD lists, those inside its layer only."""
    site = record.parent.parent
    layer = site.parent.parent.parent
    paths = []
    for line in record.read_text(errors="replace").splitlines():
        relative = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
        path = Path(os.path.normpath(site / relative))
        if relative and layer in path.parents:
            paths.append(path)
    return paths


def _metadata(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _normal(name: str) -> str:
    return _NAME.sub("-", name).lower()


def size_of(layer: Path) -> int:
    """Bytes of the files in ``layer`` (links not followed)."""
    total = 0
    for top, _dirs, files in os.walk(layer):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def attach(sandbox: Sandbox) -> Layer | None:
    """The kernel's layer, loaded into ``sandbox`` (before any code ran there); None where the
    provider keeps its scratch directory out of the host's reach."""
    try:
        scratch = sandbox.workdir
    except OSError:
        logger.warning("this sandbox's scratch directory is not on the host: nothing is kept")
        return None
    layer = Layer(layer_for(), scratch)
    problem = layer.load()
    if problem:
        logger.warning("%s", problem)
    return layer
