"""The host's default ``SandboxFiles``: a sandbox's scratch as a folder on this host.

A temporary folder of the host's own (removed with the sandbox), or the ``workdir`` the spec
names (kept; only its ``.tmp`` is emptied). With ``disk_limit_mb`` the folder is a filesystem
of its own (``providers/local/quota.py``). Every read, write and removal walks from a
descriptor of the folder without following a link the code made (``host/scratch.py``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.host.scratch import (
    file_facts,
    list_dir,
    read_file,
    remove_tree,
    write_file,
)
from rewyn_kernel.runtime.providers.base import SandboxFiles, ScratchEntry
from rewyn_kernel.runtime.providers.local import quota

__all__ = ["LocalFiles", "host_folder"]


class LocalFiles:
    """A sandbox's files in a folder on this host (see the module's docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        owned: bool,
        disk_quota: quota.Quota | None = None,
        disk: str | None = None,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.owned = owned
        """Made for this sandbox (removed with it), not a folder the caller gave."""
        self.quota = disk_quota
        """The folder's own filesystem (disk_limit_mb), removed with it."""
        self._disk = disk
        self._notes = notes
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def make(
        cls, spec: SandboxSpec, sandbox_id: str, owner: tuple[int, int] | None = None
    ) -> LocalFiles:
        """The files of a new sandbox: the spec's ``workdir``, else a temporary folder given to
        ``owner`` (the code's host uid and gid, where the code does not run as this process),
        with a filesystem of its own where ``disk_limit_mb`` asks for one."""
        if spec.workdir is not None:
            return cls(spec.workdir, owned=False)
        path = Path(tempfile.mkdtemp(prefix=f"rewyn-{sandbox_id}-"))
        if owner is not None:
            # The code runs as another uid than this process (a root host's): its folder is
            # given to it, and so is the quota's filesystem made on it below.
            os.chown(path, *owner)
        if spec.disk_limit_mb is None:
            return cls(path, owned=True)
        try:
            made = quota.make(path, spec.disk_limit_mb)
        except OSError as exc:
            return cls(
                path,
                owned=True,
                disk=f"no quota: {exc}",
                notes=(f"disk_limit_mb is not applied here ({exc})",),
            )
        disk = (
            f"a {spec.disk_limit_mb} MiB filesystem of its own (ext4 on a loop device): "
            "writes past it fail with ENOSPC"
        )
        return cls(path, owned=True, disk_quota=made, disk=disk)

    @property
    def host_path(self) -> Path:
        return self.path

    @property
    def disk(self) -> str | None:
        return self._disk

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    def read(self, path: str, limit: int) -> bytes:
        return read_file(self.path, path, limit)

    def write(self, path: str, data: bytes) -> None:
        write_file(self.path, path, data)

    def list(self, path: str = ".", limit: int | None = None) -> list[ScratchEntry]:
        return list_dir(self.path, path, limit)

    def facts(self, *, limit: int, depth: int, hidden_folders: bool) -> dict[str, tuple[int, int]]:
        return file_facts(self.path, limit=limit, depth=depth, hidden_folders=hidden_folders)

    def full(self) -> bool:
        return self.quota is not None and self.quota.full()

    def empty(self) -> None:
        with contextlib.suppress(OSError), os.scandir(self.path) as entries:
            for entry in entries:
                if entry.name == ".tmp" and entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError), os.scandir(entry.path) as inside:
                        for item in inside:
                            remove_tree(self.path / ".tmp" / item.name)
                    continue
                remove_tree(self.path / entry.name)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.quota is not None:  # (its workers are gone: nothing holds it)
            self.quota.remove()
        # (Without following any link the code made there: see scratch.py.)
        if self.owned:
            remove_tree(self.path)
        else:
            remove_tree(self.path / ".tmp")

    def __repr__(self) -> str:
        return f"LocalFiles({str(self.path)!r})"


def host_folder(files: SandboxFiles) -> Path:
    """The folder on this host that ``files`` are, for a provider that shows a host folder to
    its sandboxes; ProviderUnavailableError where they are kept elsewhere."""
    path = files.host_path
    if path is None:
        raise ProviderUnavailableError(
            f"this provider shows its sandboxes a folder of this host, and {files!r} is not one"
        )
    return path
