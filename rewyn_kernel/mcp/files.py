"""The folder the MCP file tools work in: a session's workspace (``--workspace``), else its
scratch directory; the whole outputs the server saves are always in scratch.

In a workspace, ``write_file`` is published as the code's writes are (host/workspace.py): the
version it replaces is kept, a protected path is refused, a link is never followed. Listings
leave out the sandbox's own folders (the workspace's ``.rewyn``; in scratch, the caches and
settings the sandbox's tools make in HOME).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path, PurePosixPath

from rewyn_kernel.mcp.results import OUTPUTS_DIR
from rewyn_kernel.runtime.sandbox import Session
from rewyn_kernel.runtime.scratch import (
    ScratchEntry,
    ScratchError,
    list_dir,
    read_file,
    remove_tree,
    write_file,
)
from rewyn_kernel.runtime.workspace import STORE, FileChanges, Workspace

SCRATCH_ONLY = OUTPUTS_DIR.split("/")[0]
"""The server's own folder in scratch (saved outputs): read there whatever the workspace."""
SANDBOX_FOLDERS = frozenset((".cache", ".config", ".ipython", ".local", ".jupyter", SCRATCH_ONLY))
"""What a listing of scratch leaves out: HOME is the scratch directory, where IPython, pip and
matplotlib keep their caches and settings."""


class SessionFiles:
    """The file tools' view of one session's folder."""

    def __init__(self, session: Session) -> None:
        self.workspace = session.spec.workspace
        self.protected = session.spec.protected
        self.scratch = session.files
        """The scratch directory, wherever the provider keeps it (not always on this host)."""

    def _where(self, path: str) -> Path | None:
        """The workspace a path the agent gave is in, or None: in scratch."""
        parts = PurePosixPath(path).parts
        if (parts and parts[0] == SCRATCH_ONLY) or self.workspace is None:
            return None
        if parts and parts[0] == STORE:
            raise ScratchError(2, "the sandbox's own folder: not shown", path)
        return self.workspace

    def read(self, path: str, limit: int) -> bytes:
        root = self._where(path)
        return self.scratch.read(path, limit) if root is None else read_file(root, path, limit)

    def write(self, path: str, data: bytes) -> FileChanges | None:
        """Write ``data`` at ``path``: in a workspace, published (None: in scratch). Raise
        ScratchError when it is refused (a protected path, say)."""
        root = self._where(path)
        if root is None:
            self.scratch.write(path, data)
            return None
        info = root.stat()
        owner = (info.st_uid, info.st_gid) if os.geteuid() == 0 else None
        workspace = Workspace(root, extra_protected=self.protected, owner=owner)
        staging = workspace.prepare(None) / f"write_file-{uuid.uuid4().hex[:8]}"
        try:
            (staging / "upper").mkdir(parents=True)
            write_file(staging / "upper", path, data)
            changes = workspace.publish(staging / "upper", label="write_file")
        finally:
            remove_tree(staging)
        if changes.refused:
            raise ScratchError(13, changes.refused[0].split(": ", 1)[-1], path)
        return changes

    def list(self, path: str, limit: int) -> list[ScratchEntry]:
        root = self._where(path)
        hidden = {STORE} if root is not None else SANDBOX_FOLDERS
        top = PurePosixPath(path).parts in ((), (".",))
        found = (
            self.scratch.list(path, limit + len(hidden))
            if root is None
            else list_dir(root, path, limit + len(hidden))
        )
        return [entry for entry in found if not (top and entry.name in hidden)][:limit]
