"""What the two local providers (bubblewrap and subprocess) apply alike, beyond their views.

- As root, the code runs as a uid of its own, in a user namespace that maps nothing else
  (``providers/local/identity.py``); otherwise as the host's user.
- ``/proc/sys`` is read-only to the code: the supervisor remounts it so, and a sandbox where it
  is still writable does not start.
- A seccomp filter (``providers/local/seccomp.py``) is in force before any code runs.
- Each one-shot execution starts with empty ``/tmp``, ``/dev/shm``, POSIX message queues and
  SysV IPC (the process that takes the code empties them first).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypedDict

import rewyn_kernel
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.host import views
from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.host.workspace import STORE, Budget, Workspace
from rewyn_kernel.runtime.providers.local import cgroup, seccomp
from rewyn_kernel.runtime.providers.local.identity import identity, idmap_namespace

NESTED_MAPPING = "0 0 1"
"""The map of the user namespace a root host's supervisor moves into: its own uid only."""


class LocalConfig(TypedDict, total=False):
    """Fields of the worker's config (``worker/config.py``) that local sandboxes share."""

    proc_sys: Literal["remount", "check"]
    seccomp: str
    nproc: int
    ns_root: bool
    nested_userns: str


def seccomp_config(sockets: bool = True, sysv_ipc: bool = True) -> LocalConfig:
    """The worker's ``seccomp`` setting: the filter's program, hex-encoded (JSON carries
    text), where there is one; the flags as ``seccomp.build``'s."""
    program = seccomp.build(sockets, sysv_ipc).program
    return {"seccomp": program.hex()} if program else {}


def file_size_limit(files: object) -> int | None:
    """RLIMIT_FSIZE for a new worker whose scratch folder a watcher bounds (``LocalFiles``: no
    filesystem of its own could be made), else None."""
    limit = getattr(files, "file_size_limit", None)
    return limit() if callable(limit) else None


def local_config(spec: SandboxSpec, caps: bool) -> LocalConfig:
    """The worker settings every local sandbox in user namespaces gets; ``caps``: its
    supervisor starts with capabilities in them (it can mount)."""
    config: LocalConfig = {"proc_sys": "remount" if caps else "check", **seccomp_config()}
    if spec.pids_limit is not None and not cgroup.pids_capped(spec.pids_limit):
        # RLIMIT_NPROC, which counts the code's uid in its own user namespace (not enforced
        # for the host's root, which the code never is): see cgroup.nproc_counts_per_namespace.
        config["nproc"] = spec.pids_limit
    if identity().dedicated:
        config["ns_root"] = True
        config["nested_userns"] = NESTED_MAPPING
    return config


def workspace_cells(
    spec: SandboxSpec,
    code_ids: tuple[int, int] | None,
    *,
    host_root: bool,
    python: str | None = None,
) -> WorkspaceCells | None:
    """The workspace of a sandbox's worker (host/cells.py): where the host is root
    (``host_root``), a view it mounts itself (an idmapped lower layer where the code runs as
    another uid, ``code_ids``), with what ``python`` (the sandbox's, a local one) runs from
    inside the workspace kept until then (``WorkspaceCells.keep``); elsewhere, one the
    sandbox's mounter mounts. None without a workspace."""
    if spec.workspace is None:
        return None
    root = spec.workspace
    info = root.stat()
    owner = (info.st_uid, info.st_gid) if code_ids is not None else None
    workspace = Workspace(root, extra_protected=spec.protected, owner=owner)
    staging = workspace.staging(spec.workspace_name, None)
    view = None
    note = ""
    if host_root:
        try:
            # (the owner's files appear as the code's: it changes the person's files as they
            # would; files of other owners keep their rights)
            userns = idmap_namespace(code_ids, owner) if code_ids and owner else None
            view = views.make(root, staging, userns, code_ids)
        except OSError as exc:
            note = (
                f"the workspace's files are read-only to the code, which runs as uid "
                f"{code_ids[0] if code_ids else '?'} (no idmapped view of them could be "
                f"mounted: {exc}); what it writes is published as on every provider"
            )
    if view is None and code_ids is not None:
        # (the sandbox's mounter mounts the view: the code's uid writes the upper folders)
        os.chown(staging, *code_ids)
    cells = WorkspaceCells(workspace, staging, Budget(None), view=view)
    cells.note = note
    if view is not None and python is not None:
        cells.keep = kept_in_workspace(root, python)
        view.mountpoints(cells.keep)
    return cells


def root_workdir(spec: SandboxSpec) -> views.HostMount | None:
    """For a root host given a ``workdir`` of the person's: an idmapped view of it, in which
    the code (the dedicated uid) writes as the person (host/views.py). None for a scratch
    directory of the sandbox's own (it is given to the code's uid) and on any other host."""
    if spec.workdir is None or not identity().dedicated:
        return None
    try:
        info = spec.workdir.stat()
        return views.idmapped_bind(spec.workdir, idmap_namespace(owner=(info.st_uid, info.st_gid)))
    except OSError as exc:
        from rewyn_kernel.errors import ProviderUnavailableError

        raise ProviderUnavailableError(
            f"the workdir {spec.workdir} cannot be shown to the code, which runs as uid "
            f"{identity().uid} (no idmapped view of it could be mounted: {exc}); let the "
            "sandbox make its own scratch directory (workdir=None)"
        ) from exc


def workspace_note(spec: SandboxSpec, *, in_sandbox: bool) -> str:
    """What a local sandbox's isolation says of its workspace."""
    return (
        f"the workspace {spec.workspace} is shown at its own path: what the code writes there "
        "is published into it when each execution ends, the versions it replaces kept in "
        f"{STORE}/versions (rewyn-kernel files); protected paths read-only"
        + (" (the view is renewed by a helper of the sandbox's)" if in_sandbox else "")
    )


def user_text() -> str:
    """Who the code runs as on the host, for ``Isolation.user``."""
    who = identity()
    if who.dedicated:
        return (
            f"uid {who.uid}, a uid of its own (the host runs as root), in a user namespace "
            "that maps no other id of the host's"
        )
    return f"uid {who.uid}, the host's user (root only of its own user namespace)"


def common_notes() -> list[str]:
    """What a local sandbox does not get here, in words."""
    found = seccomp.build()
    if found.program is None:
        return [
            f"no seccomp filter ({found.detail}): the code reaches every system call of the "
            "host's kernel, the host user's keyrings included"
        ]
    return []


def local_python(python: str | None = None) -> str:
    """The interpreter ``python`` names (None: this one, ``sys.executable``) as an absolute
    path that means the same inside a local sandbox, which shares neither the host's current
    directory nor the folders on the way to it.

    A bare name is looked up on the host's PATH, as a shell would; a relative path is taken
    from the current directory. The folders on the way are resolved as the kernel walks them
    (``out/../venv`` where ``out`` is a link leads where the link's target leads, not where
    the text says); the file's own name is kept: a venv's ``bin/python`` is a link to its base
    interpreter, and Python finds the venv (its ``pyvenv.cfg``) from the path it was started
    by, so following that last link would run the base interpreter without the venv.
    A bare name not on PATH is left as it is: the sandbox's start fails and says so.
    """
    given = python or sys.executable
    if os.sep not in given:
        found = shutil.which(given)
        if found is None:
            return given
        given = found
    path = os.path.join(os.getcwd(), given)  # (an absolute path stays as it is)
    folder, name = os.path.split(path)
    if name in ("", ".", ".."):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(folder), name)


@functools.cache
def python_prefixes(python: str) -> tuple[str, ...]:
    """The directories ``python`` runs from: its prefixes (a venv's and the installation's
    under it) and the directory of the file its path resolves to, outermost first."""
    return outermost(_python_paths(python))


def kept_in_workspace(workspace: Path, python: str) -> list[str]:
    """The directories ``python`` runs from that lie inside ``workspace`` (a project's
    ``.venv``), relative, outermost first: the sandbox binds them again over the workspace's
    anchor, which is empty until the host mounts the first view on it, once the sandbox is up
    (host/cells.py); the view then covers them with the same files."""
    base = os.path.realpath(workspace)
    inside = [path for path in _python_paths(python) if path.startswith(base + "/")]
    return [os.path.relpath(path, base) for path in outermost(inside)]


@functools.cache
def _python_paths(python: str) -> tuple[str, ...]:
    # The host's own interpreter by its path, not by the file it leads to: another venv's
    # python is a link to the same file, and its prefixes are that venv's, not this one's.
    if local_python(python) == local_python():
        found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        # This package, where it is not inside them (an editable install): code in the
        # sandbox may use the runtime too (the quickstart does).
        found.append(str(Path(rewyn_kernel.__file__).resolve().parent))
    else:
        code = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, "
        code += "sys.exec_prefix, sys.base_exec_prefix]))"
        try:  # (with site: it is site that makes a venv's sys.prefix the venv)
            done = subprocess.run(
                [python, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=True
            )
            found = [str(path) for path in json.loads(done.stdout)]
        except (OSError, ValueError, subprocess.SubprocessError):
            found = []  # (the worker will not start either, and say why)
    found += [str(Path(python).parent), os.path.dirname(os.path.realpath(python))]
    return tuple(sorted({os.path.realpath(p) for p in found if p}))


def outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` without those inside another of them, or inside /usr (bound already)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        inside = (path + "/").startswith
        if path not in ("/", "") and not inside("/usr/") and not any(inside(k + "/") for k in kept):
            kept.append(path)
    return tuple(kept)
