"""Agent tokens: minted by ``rewyn-kernel agent-token``, read by the Jupyter server on requests.

A grant is bound to one notebook (its path relative to the server's root) and has two secrets:

- the agent token, for the agent's configuration: it reads the notebook and its kernel's
  identity, and runs, restarts and interrupts nothing;
- the runner token, for ``rewyn-kernel mcp --notebook`` alone: it may also send the kernel an
  execute_request and interrupt it, which the MCP server does only as the person's policy and
  approval say. It is never printed: it is written to ``runners/<the agent token's sha256>``
  beside the grants' file (mode 0600), where the MCP server, given the agent token, finds it.

Only the sha256 of each secret is stored in the grants, with the path, a name, an expiry and the
kernelspecs the agent may start, in one JSON file (mode 0600, in a 0700 directory under Jupyter's
runtime dir), rewritten whole through a temporary file and ``os.replace`` so the server never
reads half of it. The server re-reads the file when its stat changes, so a mint or a revocation
counts from the next request.

The file is only as safe as its directory: the server ignores it (no agent tokens at all) when
another user owns it or can write it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir

FILE_NAME = "agent-tokens.json"
RUNNERS = "runners"
"""The folder, beside the grants' file, of the runner tokens (one file each, named for the
agent token's sha256)."""
VERSION = 1
TOKENS_FILE_ENV = "REWYN_AGENT_TOKENS_FILE"
"""Where ``rewyn-kernel mcp --notebook`` looks for the grants' file (so its runner tokens) when
it is not the default one."""


def default_tokens_file(runtime_dir: str | None = None) -> Path:
    """Where the tokens live: ``<runtime dir>/rewyn-kernel/agent-tokens.json``."""
    return Path(runtime_dir or jupyter_runtime_dir()) / "rewyn-kernel" / FILE_NAME


def notebook_path(path: str) -> str:
    """Return ``path`` as the server names it (relative to its root, no leading '/').

    No '.', '..' or empty segments: a grant compares paths as strings, so a path that only
    resolves to the notebook (``x/../a.ipynb``, which a symlink ``x`` can send elsewhere) is
    refused, not normalized. Raises ValueError.
    """
    stripped = path.strip("/")
    parts = stripped.split("/")
    if not stripped or any(part in ("", ".", "..") for part in parts) or "\\" in stripped:
        raise ValueError(
            f"{path!r}: give the notebook's path relative to the Jupyter server's root, as in "
            "the JupyterLab URL /lab/tree/PATH (no '.', '..' or empty segments)"
        )
    return stripped


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Grant:
    """What one agent token allows: the notebook ``path`` and, when the agent starts that
    notebook's kernel, the kernelspecs in ``kernels`` (None: any)."""

    id: str
    sha256: str
    name: str
    path: str
    expires: float
    """Unix time after which the token no longer authenticates."""
    kernels: tuple[str, ...] | None
    created: float
    runner_sha256: str | None = None
    """The sha256 of the grant's runner token (None: a grant minted before there were runner
    tokens, whose token runs nothing)."""

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires

    def to_json(self) -> dict[str, object]:
        entry = asdict(self)
        entry["kernels"] = None if self.kernels is None else list(self.kernels)
        return entry

    @classmethod
    def from_json(cls, entry: dict[str, object]) -> Grant:
        kernels = entry["kernels"]
        if kernels is not None and not (
            isinstance(kernels, list) and all(isinstance(k, str) for k in kernels)
        ):
            raise TypeError(f"bad kernels in {entry!r}")
        for key in ("id", "sha256", "name", "path"):
            if not isinstance(entry[key], str):
                raise TypeError(f"bad {key} in {entry!r}")
        runner = entry.get("runner_sha256")
        if runner is not None and not isinstance(runner, str):
            raise TypeError(f"bad runner_sha256 in {entry!r}")
        expires, created = entry["expires"], entry["created"]
        if not isinstance(expires, (int, float)) or not isinstance(created, (int, float)):
            raise TypeError(f"bad times in {entry!r}")
        return cls(
            id=str(entry["id"]),
            sha256=str(entry["sha256"]),
            name=str(entry["name"]),
            path=notebook_path(str(entry["path"])),
            expires=float(expires),
            kernels=None if kernels is None else tuple(kernels),
            created=float(created),
            runner_sha256=runner,
        )


def read_grants(path: Path) -> list[Grant]:
    """The grants in ``path`` ([] if it does not exist). Raises ValueError on a bad file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"{path}: not a version {VERSION} agent-token file")
    try:
        return [Grant.from_json(entry) for entry in data["tokens"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: a bad token entry ({exc})") from exc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock next to ``path``: two mints at once keep both tokens."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, grants: list[Grant]) -> None:
    data = {"version": VERSION, "tokens": [grant.to_json() for grant in grants]}
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def mint(
    path: Path,
    notebook: str,
    *,
    name: str,
    ttl: float,
    kernels: tuple[str, ...] | None,
) -> tuple[str, Grant]:
    """Add a token for ``notebook`` to the file ``path``; return the token (shown once) and its
    grant. Expired grants are dropped on the way."""
    if ttl <= 0:
        raise ValueError("the token's lifetime must be positive")
    token, runner = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    now = time.time()
    grant = Grant(
        id=secrets.token_hex(4),
        sha256=token_hash(token),
        name=name,
        path=notebook_path(notebook),
        expires=now + ttl,
        kernels=kernels,
        created=now,
        runner_sha256=token_hash(runner),
    )
    with _locked(path):
        grants = read_grants(path)
        kept = [old for old in grants if not old.expired(now)]
        _write_runner(path, grant, runner)
        _write(path, [*kept, grant])
        _forget_runners(path, [old for old in grants if old not in kept])
    return token, grant


def runner_file(path: Path, grant: Grant) -> Path:
    """Where the runner token of ``grant`` (of the grants' file ``path``) is kept."""
    return path.parent / RUNNERS / grant.sha256


def _write_runner(path: Path, grant: Grant, runner: str) -> None:
    folder = path.parent / RUNNERS
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(runner_file(path, grant), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(runner)


def _forget_runners(path: Path, grants: list[Grant]) -> None:
    for grant in grants:
        runner_file(path, grant).unlink(missing_ok=True)


def runner_token(path: Path, token: str) -> str | None:
    """The runner token of the agent token ``token`` in the grants' file ``path``: None where
    there is none, or where its file is another user's or others may read or write it."""
    where = path.parent / RUNNERS / token_hash(token)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as held:
        info = os.fstat(held.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not stat.S_ISREG(info.st_mode):
            return None
        runner = held.read(200).strip()
    return runner or None


def revoke(path: Path, which: str) -> list[Grant]:
    """Remove the grants whose id or name is ``which``; return them."""
    with _locked(path):
        grants = read_grants(path)
        removed = [grant for grant in grants if which in (grant.id, grant.name)]
        if removed:
            _write(path, [grant for grant in grants if grant not in removed])
            _forget_runners(path, removed)
    return removed


@dataclass(frozen=True)
class Holder:
    """Who holds a token: the grant, and whether the token is its runner token."""

    grant: Grant
    runner: bool


class GrantFile:
    """The server's view of the tokens file, re-read when its stat changes (one ``os.stat`` per
    request otherwise). A file another user owns or can write gives no grants."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, int, int, int] | None = None
        self._by_hash: dict[str, Holder] = {}
        self.problem: str | None = None
        """Why the file was ignored at the last read (None: it was read, or is absent)."""

    def lookup(self, token: str) -> Holder | None:
        """The live (unexpired) grant of ``token`` (an agent or a runner token), or None."""
        self._refresh()
        holder = self._by_hash.get(token_hash(token))
        if holder is None or holder.grant.expired():
            return None
        return holder

    def live(self, grant: Grant) -> bool:
        """Whether ``grant`` is still in the file and unexpired (not revoked meanwhile)."""
        self._refresh()
        current = self._by_hash.get(grant.sha256)
        return current is not None and current.grant == grant and not grant.expired()

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            self._key, self._by_hash, self.problem = None, {}, None
            return
        key = (info.st_ino, info.st_mtime_ns, info.st_size, info.st_mode)
        if key == self._key:
            return
        self._key = key
        self._by_hash = {}
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self.problem = f"{self.path}: owned by another user or writable by others; ignored"
            return
        try:
            grants = read_grants(self.path)
        except (OSError, ValueError) as exc:
            self.problem = f"{self.path}: {exc}; no agent token is accepted"
            return
        self.problem = None
        self._by_hash = {grant.sha256: Holder(grant, runner=False) for grant in grants}
        for grant in grants:
            if grant.runner_sha256 is not None and grant.runner_sha256 not in self._by_hash:
                self._by_hash[grant.runner_sha256] = Holder(grant, runner=True)
