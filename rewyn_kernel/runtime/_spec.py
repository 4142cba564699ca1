"""SandboxSpec: what a sandbox may do, as data."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import pwd
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rewyn_kernel.runtime.egress.policy import NetworkPolicy

DEFAULT_INHERIT_ENV: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
"""Parent variables a sandbox inherits unless told otherwise: locale, time zone and PATH only.

Nothing here holds a secret. API keys, cloud credentials, proxies and ``HOME`` stay outside;
pass what the code needs with ``env=`` or name it in ``inherit_env``.
"""

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
DEFAULT_MEMORY_MB = 4096
"""The memory cap every sandbox gets unless told otherwise (``memory_limit_mb=None`` lifts it):
enough for a notebook's data frames, and what stops a runaway allocation before the host swaps."""
DEFAULT_PIDS = 1024
"""Tasks (threads included) a sandbox may run at once unless told otherwise (``pids_limit=None``
lifts it): a fork bomb stops there."""
DEFAULT_DISK_MB = 4096
"""The quota on a sandbox's own scratch directory unless told otherwise (``disk_limit_mb=None``
lifts it; it is not applied to a ``workdir`` you give): a loop that writes stops there."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


SYSTEM_TREES = frozenset(
    {
        *("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin"),
        *("sys", "usr"),
    }
)
"""Folders of the root that are never a workspace (the sandbox shows them read-only)."""


def not_a_workspace(folder: Path) -> str:
    """Why ``folder`` (resolved) cannot be a workspace, or '': the system's folders, and a
    home folder or one holding a home (the code would read and change all of it: ``~/.ssh``,
    the browser's profile, every document)."""
    if folder == Path("/") or folder.parts[1] in SYSTEM_TREES:
        return "is the system's, not a person's folder: give the project's folder"
    for shared in _shared_temporary():
        if shared == folder or folder in shared.parents:
            where = "a shared folder" if shared == folder else f"above the shared folder {shared}"
            return (
                f"is {where} of temporary files (every user's and program's, the sandbox's "
                "own scratch folders too): the code would read and change all of it; give the "
                "project's folder (a notebook's own, say)"
            )
    for home in _homes():
        if home == folder or folder in home.parents:
            return (
                f"is {'a home folder' if home == folder else f'above the home folder {home}'}: "
                "the code would read and change all of it (~/.ssh, the browser's profile, every "
                "document); give the project's folder (a notebook's own, say)"
            )
    return ""


def _shared_temporary() -> frozenset[Path]:
    """The folders of temporary files every user and program shares, where the sandboxes make
    their scratch folders (``tempfile.gettempdir()``)."""
    found = {Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}
    with contextlib.suppress(OSError, FileNotFoundError):
        found.add(Path(tempfile.gettempdir()))
    return frozenset(path.resolve() for path in found)


@functools.cache
def _homes() -> frozenset[Path]:
    """The home folders of this machine's accounts and of this process."""
    found = set()
    with contextlib.suppress(RuntimeError, KeyError):
        found.add(Path.home().resolve())
    for entry in pwd.getpwall():
        home = Path(entry.pw_dir or "/")
        if home != Path("/") and home.parts[1] not in SYSTEM_TREES and home.is_dir():
            found.add(home.resolve())
    return frozenset(found)


class SandboxSpec(BaseModel):
    """Limits and environment of a sandbox. Invalid values fail here, at construction."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    timeout: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] | None = Field(
        default=30.0,
        description="Seconds one execution may run before the sandbox is killed; none: no limit.",
    )
    network: Literal["none", "allow"] | NetworkPolicy = Field(
        default="none",
        description='"none" cuts the sandbox off every network, loopback included; a list of '
        "hosts ('pypi.org', '*.example.org:443', '!bad.example.org' to deny; on a command line "
        "comma-separated) lets the code reach those only, through a proxy on the host; "
        '"allow" removes the containment.',
    )
    memory_limit_mb: Annotated[int, Field(ge=32, le=1024 * 1024)] | None = Field(
        default=DEFAULT_MEMORY_MB,
        description="Memory cap in MiB (at least 32) for all of the sandbox's processes "
        "together, socket buffers included; none: no cap.",
    )
    pids_limit: Annotated[int, Field(ge=8, le=4_194_304)] | None = Field(
        default=DEFAULT_PIDS,
        description="Tasks (processes and threads) the sandbox may run at once (at least 8); "
        "none: no limit.",
    )
    disk_limit_mb: Annotated[int, Field(ge=8, le=1024 * 1024)] | None = Field(
        default=DEFAULT_DISK_MB,
        description="Quota in MiB on the scratch directory (at least 8; a filesystem of its "
        "own, which takes root to mount): writes past it fail with ENOSPC; none: no quota. "
        "Not applied by default to a workdir you give.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables set in the sandbox. Values never appear in an event or the "
        "sandbox's argv; a kernelspec (rewyn-kernel install --env) keeps them in its kernel.json, "
        "which others may read: pass a secret by name (inherit_env).",
    )
    inherit_env: tuple[str, ...] = Field(
        default=DEFAULT_INHERIT_ENV,
        description="Parent variables passed through: exact names, or a prefix ending in '*' "
        "such as 'LC_*'. An empty list passes nothing.",
    )
    workdir: Path | None = Field(
        default=None,
        description="Scratch directory, the code's working directory and HOME; it must exist. "
        "none: a fresh directory, removed when the sandbox closes.",
    )
    output_limit_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = Field(
        default=DEFAULT_OUTPUT_LIMIT,
        description="Bytes kept per stream per execution (half head, half tail); the rest is "
        "counted and dropped.",
    )
    startup_timeout: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=30.0, description="Seconds a sandbox may take to start before it counts as failed."
    )
    python: str | None = Field(
        default=None,
        description="Interpreter inside the sandbox; none: the provider's default "
        "(sys.executable for bubblewrap and subprocess, python3 in a container). For the "
        "local providers a bare name is found on PATH and a relative path starts in the "
        "current directory.",
    )
    workspace: Path | None = Field(
        default=None,
        description="A folder of the person's the code works in, at its own path (a notebook's: "
        "the kernel's default): what the code writes there is published into it when each "
        "execution ends, the earlier versions it replaces kept in <workspace>/.rewyn/versions; "
        "protected paths stay read-only; none: the code works in its scratch directory.",
    )
    workspace_name: Annotated[
        str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    ] = Field(
        default="default",
        description="Names this sandbox's writes in the workspace's kept versions and staging "
        "folders (a kernel names it after its notebook).",
    )
    protected: tuple[str, ...] = Field(
        default=(),
        description="More paths of the workspace the code may read but not change, added to "
        "the defaults (VCS folders, *.ipynb, editor and shell configuration): a name or a "
        "pattern ('*.csv') matches any part of a path; with a '/', a path from the workspace.",
    )
    read_dirs: tuple[Path, ...] = Field(
        default=(),
        description="More folders of the host shown to the code read-only, at their own paths "
        "(data beside the workspace: '../data', '~/datasets').",
    )
    ipython: bool = Field(
        default=False,
        description="Run a session's code through IPython (magics, !commands, rich display, "
        "inline plots) where the sandbox's Python has it, else as plain Python with a note. "
        "One-shot execute() always runs plain Python.",
    )

    @field_validator("network", mode="before")
    @classmethod
    def _check_network(cls, value: Any) -> Any:
        """A list of hosts, or their comma form, is an allow-list (see egress/policy.py)."""
        if isinstance(value, str) and value not in ("none", "allow"):
            if "," not in value and not any(mark in value for mark in ".:*/["):
                # (a misspelt "none" must not become an allow-list of one host)
                raise ValueError(
                    "network must be 'none' or 'allow', or hosts (a list, or their comma "
                    f"form 'pypi.org,files.pythonhosted.org'): {value!r} is neither"
                )
            return NetworkPolicy.model_validate(value)
        if isinstance(value, (list, tuple)):
            return NetworkPolicy.model_validate(value)
        return value

    @property
    def allow_list(self) -> NetworkPolicy | None:
        """The network's allow-list, where it is one."""
        return self.network if isinstance(self.network, NetworkPolicy) else None

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: Mapping[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"env name {name!r} is not allowed: use letters, digits and '_', "
                    "not starting with a digit"
                )
            if "\0" in item:
                raise ValueError(f"env value of {name!r} contains a NUL byte")
        return dict(value)

    @field_validator("inherit_env", mode="before")
    @classmethod
    def _check_inherit(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("inherit_env is a list of names, not a single string")  # noqa: TRY004
        return value

    @field_validator("inherit_env")
    @classmethod
    def _check_inherit_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_PATTERN.match(name):
                raise ValueError(
                    f"inherit_env entry {name!r} is not a variable name or a 'PREFIX*' pattern"
                )
        return value

    @field_validator("workdir", "workspace")
    @classmethod
    def _check_workdir(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        if not value.is_dir():
            raise ValueError(f"{info.field_name} {str(value)!r} is not an existing directory")
        folder = value.resolve()
        if info.field_name == "workspace" and (why := not_a_workspace(folder)):
            raise ValueError(f"workspace {str(folder)!r} {why}")
        return folder

    @field_validator("read_dirs")
    @classmethod
    def _check_read_dirs(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        folders = []
        for path in value:
            folder = path.expanduser()
            if not folder.is_dir():
                raise ValueError(f"read_dirs entry {str(path)!r} is not an existing folder")
            folders.append(folder.resolve())
        return tuple(folders)

    @field_validator("protected")
    @classmethod
    def _check_protected(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not pattern.strip("/") or ".." in pattern.split("/") or "\0" in pattern:
                raise ValueError(f"protected entry {pattern!r} is not a path or a pattern")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_quota(cls, data: Any) -> Any:
        """The default quota bounds a scratch directory of the sandbox's own: with a
        ``workdir`` given and no quota asked for, there is none."""
        given = isinstance(data, Mapping) and data.get("workdir") is not None
        if given and "disk_limit_mb" not in data:
            return {**data, "disk_limit_mb": None}
        return data

    @model_validator(mode="after")
    def _check_quota(self) -> SandboxSpec:
        if self.disk_limit_mb is not None and self.workdir is not None:
            raise ValueError(
                "disk_limit_mb bounds a scratch directory of the sandbox's own: it cannot "
                "cover a workdir you gave (its files would be hidden under the quota's)"
            )
        return self

    def build_env(self, parent: Mapping[str, str] | None = None) -> dict[str, str]:
        """Return the inherited part of the environment: allow-listed parent variables."""
        source = os.environ if parent is None else parent
        inherited: dict[str, str] = {}
        for pattern in self.inherit_env:
            if pattern.endswith("*"):
                inherited.update(
                    (k, v) for k, v in source.items() if fnmatch.fnmatchcase(k, pattern)
                )
            elif pattern in source:
                inherited[pattern] = source[pattern]
        return inherited

    def summary(self) -> dict[str, Any]:
        """Return a description safe to log: env names only, never values."""
        return {
            "timeout": self.timeout,
            "network": self.network
            if isinstance(self.network, str)
            else self.network.model_dump(mode="json"),
            "memory_limit_mb": self.memory_limit_mb,
            "pids_limit": self.pids_limit,
            "disk_limit_mb": self.disk_limit_mb,
            "env_names": sorted(self.env),
            "inherit_env": list(self.inherit_env),
            "workdir": str(self.workdir) if self.workdir else None,
            "output_limit_bytes": self.output_limit_bytes,
            "workspace": str(self.workspace) if self.workspace else None,
            "protected": list(self.protected),
            "read_dirs": [str(path) for path in self.read_dirs],
            "ipython": self.ipython,
        }
