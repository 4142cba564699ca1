"""What a corporate network's host configuration gives a sandbox: its upstream proxy
(upstream.py), said in ``isolation``, and its CA configuration, for TLS behind an inspecting
proxy.

The CA configuration is what the host's environment names in ``CA_VARIABLES``
(``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``, ``PIP_CERT``, ``CURL_CA_BUNDLE``).
With an allow-list or ``network='allow'`` (never with ``network='none'``: nothing to verify),
the files these name are copied, as the sandbox is made, into a folder of their own, and that
folder alone is shown to the code read-only (``read_dirs``: every provider shows those, as a
read-only bind mount, a Landlock read rule, or the host's own path), with the same variables
set to the copies' paths in the code's environment (unless ``env`` sets them). A copy rather
than the host's path: only those files are shown, never the folder around them, and a file
that holds a private key (``PRIVATE KEY``) is left out, with a note. A directory
(``SSL_CERT_DIR``, OpenSSL's hashed names) is copied file by file, links followed. The copies
are a snapshot: a CA changed on the host later reaches sandboxes made after it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress.upstream import choose

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")
"""The host's variables that name its CA configuration (OpenSSL's, requests', pip's, curl's)."""
MAX_CA_BYTES = 16 * 1024 * 1024
"""The largest CA file copied (a bundle of every CA is well under 1 MB)."""
MAX_DIR_FILES = 4096
"""The most files copied from one CA directory."""
PRIVATE_KEY = b"PRIVATE KEY"
"""What a PEM private key's armour holds (RSA, EC, encrypted, PKCS #8 alike)."""


def egress_isolation(
    isolation: Isolation, spec: SandboxSpec, ca: HostCa | None = None
) -> Isolation:
    """``isolation`` with what the host's configuration adds to the sandbox's way out: the
    upstream proxy an allow-list's connections go through (never its credentials), and the
    CA files ``ca`` gives the code."""
    update: dict[str, object] = {}
    notes = list(isolation.notes)
    policy = spec.allow_list
    if policy is not None:
        routes = choose(policy.upstream_proxy)
        update["upstream_proxy"] = routes.describe()
        if routes.problem:
            notes.append(routes.problem)
    if ca is not None:
        update["ca_files"] = ca.shown
        notes += ca.notes
    if notes != list(isolation.notes):
        update["notes"] = tuple(notes)
    return isolation.model_copy(update=update) if update else isolation


@dataclass
class HostCa:
    """The host's CA files as copied for one sandbox: the folder shown, the code's variables,
    and what to say of them."""

    folder: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    shown: tuple[str, ...] = ()
    """``NAME=path inside (the host's path)`` for each variable given."""
    notes: tuple[str, ...] = ()
    """What was left out, and why."""

    def close(self) -> None:
        """Remove the copies (idempotent)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def apply(self, spec: SandboxSpec) -> SandboxSpec:
        """``spec`` with the copies' folder shown read-only and the variables set (those the
        spec's ``env`` sets itself stay as they are)."""
        if self.folder is None or not self.env:
            return spec
        env = {**self.env, **spec.env}
        read_dirs = (*spec.read_dirs, self.folder)
        return spec.model_copy(update={"env": env, "read_dirs": read_dirs})


def host_ca(spec: SandboxSpec, environ: Mapping[str, str] | None = None) -> HostCa | None:
    """Copy the CA configuration the host's environment names (``os.environ`` if None) for a
    sandbox of ``spec``; None when it takes none (no network, or nothing named)."""
    if spec.network == "none":
        return None
    env = os.environ if environ is None else environ
    named = [(name, env[name]) for name in CA_VARIABLES if env.get(name)]
    if not named:
        return None
    folder = Path(tempfile.mkdtemp(prefix="rewyn-ca-"))
    folder.chmod(0o755)  # (the code may run as another uid)
    ca = HostCa(folder)
    notes: list[str] = []
    shown: list[str] = []
    copies: dict[Path, Path | None] = {}  # (one copy of a file several variables name)
    for name, value in named:
        places = value.split(os.pathsep) if name == "SSL_CERT_DIR" else [value]
        inside: list[str] = []
        for index, place in enumerate(places):
            source = Path(place).expanduser()
            target = folder / (name if index == 0 else f"{name}-{index}")
            known = source.resolve()
            if known not in copies:
                if source.is_dir():
                    copies[known] = _copy_dir(source, target, notes)
                else:
                    copies[known] = _copy_file(source, target, notes, name)
            copied = copies[known]
            if copied is not None:
                inside.append(str(copied))
        if inside:
            ca.env[name] = os.pathsep.join(inside)
            shown.append(f"{name}={ca.env[name]} (the host's {value})")
    ca.shown, ca.notes = tuple(shown), tuple(notes)
    if not ca.env:
        ca.close()
        return HostCa(notes=tuple(notes)) if notes else None
    return ca


def _readable_ca(source: Path, notes: list[str], name: str) -> bytes | None:
    """The bytes of ``source`` if it is a CA file that may be shown; else None, and a note."""
    try:
        if not source.is_file():
            notes.append(f"{name}: {source} is not a file: not given to the sandbox")
            return None
        if source.stat().st_size > MAX_CA_BYTES:
            notes.append(f"{name}: {source} is over {MAX_CA_BYTES:,} bytes: not given")
            return None
        data = source.read_bytes()
    except OSError as exc:
        notes.append(f"{name}: {source} cannot be read ({exc.strerror}): not given")
        return None
    if PRIVATE_KEY in data:
        notes.append(
            f"{name}: {source} holds a private key: not given to the sandbox (a CA file "
            "holds certificates only)"
        )
        return None
    return data


def _copy_file(source: Path, target: Path, notes: list[str], name: str) -> Path | None:
    """Copy one CA file into ``target`` (a new folder), under its own name; its path there."""
    data = _readable_ca(source, notes, name)
    if data is None:
        return None
    target.mkdir(mode=0o755)
    copy = target / (source.name or "ca.pem")
    copy.write_bytes(data)
    copy.chmod(0o644)
    return copy


def _copy_dir(source: Path, target: Path, notes: list[str]) -> Path | None:
    """Copy the files of a CA directory (links followed, names kept) into ``target``."""
    target.mkdir(mode=0o755)
    try:
        entries = sorted(source.iterdir())
    except OSError as exc:
        notes.append(f"SSL_CERT_DIR: {source} cannot be read ({exc.strerror}): not given")
        return None
    if len(entries) > MAX_DIR_FILES:
        notes.append(f"SSL_CERT_DIR: {source} holds over {MAX_DIR_FILES} files: the first given")
    for entry in entries[:MAX_DIR_FILES]:
        if entry.is_dir():
            continue
        data = _readable_ca(entry, notes, "SSL_CERT_DIR")
        if data is not None:
            copy = target / entry.name
            copy.write_bytes(data)
            copy.chmod(0o644)
    return target


def cleanup_with(cleanup: Callable[[], None], ca: HostCa | None) -> Callable[[], None]:
    """``cleanup``, then the CA copies' removal (for a sandbox's finalizer)."""
    if ca is None or ca.folder is None:
        return cleanup

    def both() -> None:
        try:
            cleanup()
        finally:
            ca.close()

    return both
