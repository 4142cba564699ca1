"""A container like a JupyterHub single-user server, with the package installed inside it.

The engine's default seccomp profile (no ``--security-opt``: it refuses unshare(CLONE_NEWUSER)),
no added capability, ``--user 1000:1000``, no network but the container's own loopback. The
package is installed, not editable, in a venv of Debian's ``/usr/bin/python3`` (the image's
Python too: both Debian 12), built once per content of the checkout under ``/opt`` and mounted
read-only at the same path. The container's first process stands in for the Jupyter server: a
TCP listener on 127.0.0.1 that logs what it receives, and a ``sleep`` of the same user beside it.
uid 1000's home is a folder of the host's (the tests read what the container leaves there),
with an SSH key and a Jupyter kernel's connection file only that user may read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("REWYN_HUB_VENVS", "/opt/rewyn-hub-venv"))
"""Where the venvs are built, one folder per content hash (mounted at the same path)."""
BASE_PYTHON = "/usr/bin/python3"
HOME = "/home/jovyan"
UID = 1000
PORT = 8888
SECRETS = {
    ".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY----- HUB-SECRET",
    ".local/share/jupyter/runtime/kernel-1.json": '{"key": "HUB-SIGNING-KEY"}',
}
"""uid 1000's secrets, relative to its home, each readable by that user alone."""

SERVER = f"""
import json, os, socket, subprocess
# The person's Jupyter server, as the sandboxed code would find it: a listener on the
# container's loopback, and another process of the same user.
sleeper = subprocess.Popen(["sleep", "infinity"])
server = socket.create_server(("127.0.0.1", {PORT}))
with open("{HOME}/server.json.tmp", "w") as out:
    json.dump({{"sleep": sleeper.pid, "server": os.getpid()}}, out)
os.rename("{HOME}/server.json.tmp", "{HOME}/server.json")
while True:
    client, _ = server.accept()
    with client:
        client.settimeout(2)
        try:
            data = client.recv(200)
        except OSError:
            data = b""
    with open("{HOME}/received.log", "ab") as log:
        log.write(data.replace(b"\\n", b" ") + b"\\n")
"""


def requirements() -> list[str]:
    """What the venv holds: the checkout, not editable, with the ``mcp`` extra (which
    ``rewyn-kernel mcp`` needs whole, as the README's Install says)."""
    return [f"{ROOT}[mcp]"]


def content_hash() -> str:
    """A hash of what the install of the checkout reads, and of what is installed with it."""
    digest = hashlib.sha256()
    digest.update(json.dumps([requirements(), BASE_PYTHON]).encode())
    paths = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "labextension" / "install.json"]
    for folder in ("rewyn_kernel", "kernelspec"):
        paths += (ROOT / folder).rglob("*")
    for path in sorted(paths):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Venv:
    path: Path
    built_in: float | None
    """Seconds the build took, or None when it was there already."""


def hub_venv() -> Venv:
    """The venv for this checkout's content, built once (under a lock: another test process
    or worktree may want the same one)."""
    VENVS.mkdir(parents=True, exist_ok=True)
    VENVS.chmod(0o755)
    path = VENVS / content_hash()
    done = path / "built"
    with open(VENVS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            done.touch()
            return Venv(path, None)
        shutil.rmtree(path, ignore_errors=True)
        started = time.monotonic()
        subprocess.run([BASE_PYTHON, "-m", "venv", str(path)], check=True, timeout=120)
        pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        installed = subprocess.run(
            [*pip, *requirements()], capture_output=True, text=True, timeout=900, check=False
        )
        if installed.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            raise RuntimeError(f"pip install into {path} failed:\n{installed.stderr[-4000:]}")
        done.write_text(f"{sys.version}\n")
        took = time.monotonic() - started
        prune(keep=path)
        return Venv(path, took)


def prune(keep: Path, days: float = 2.0) -> None:
    """Remove the venvs of other contents not used for ``days`` (the caller holds the lock)."""
    for other in VENVS.iterdir():
        stamp = other / "built"
        if other == keep or not other.is_dir():
            continue
        if not stamp.exists() or time.time() - stamp.stat().st_mtime > days * 86400:
            shutil.rmtree(other, ignore_errors=True)


def docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}...: {done.stderr.strip()}")
    return done.stdout


@dataclass
class HubContainer:
    name: str
    venv: Path
    home: Path
    """uid 1000's home as the host sees it (``HOME`` inside)."""
    sleep_pid: int
    server_pid: int

    def exec_argv(self, *argv: str, stdin: bool = False) -> list[str]:
        """``docker exec`` of ``argv`` in the container as uid 1000, in its home."""
        options = ["-i"] if stdin else []
        return ["docker", "exec", *options, "-u", f"{UID}:{UID}", "-w", HOME, self.name, *argv]

    def python(self, script: str, *args: str, timeout: float = 120) -> Any:
        """Run ``script`` with the venv's Python in the container; what it prints last is
        JSON, returned."""
        argv = self.exec_argv(str(self.venv / "bin" / "python"), "-", *args, stdin=True)
        done = subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def received(self) -> list[bytes]:
        """What the loopback listener was sent, one line a connection, up to now: a connection
        of plain code sends a marker last, and the listener (one connection at a time, in
        order) has logged all before it once the marker is there."""
        marker = f"marker {uuid.uuid4().hex}"
        send = (
            "import socket\n"
            f"with socket.create_connection(('127.0.0.1', {PORT}), timeout=10) as sock:\n"
            f"    sock.sendall(b'{marker}')\n"
        )
        subprocess.run(self.exec_argv("python3", "-c", send), check=True, timeout=60)
        log = self.home / "received.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = log.read_bytes().splitlines() if log.exists() else []
            if marker.encode() in lines:
                return lines
            time.sleep(0.05)
        raise AssertionError(f"the listener did not log {marker!r}")

    def processes(self) -> list[str]:
        """The container's processes, as ``ps`` would list their command lines."""
        return docker("top", self.name, "-eo", "pid,user,args").splitlines()[1:]


def make_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="rewyn-hub-home-"))
    for name, text in SECRETS.items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)
    for path in [home, *home.rglob("*")]:
        os.chown(path, UID, UID)
        if path.is_dir():
            path.chmod(0o700)
    return home


@contextmanager
def hub_container(image: str, venv: Path) -> Iterator[HubContainer]:
    """The container (see the module's docstring), removed after."""
    home = make_home()
    name = f"rewyn-hub-{uuid.uuid4().hex[:10]}"
    try:
        docker(
            "run", "-d", "--rm", "--name", name,
            "--user", f"{UID}:{UID}",
            "--network", "none",
            "-v", f"{venv}:{venv}:ro",
            "-v", f"{home}:{HOME}",
            "-e", f"HOME={HOME}",
            "-e", f"PATH={venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "-w", HOME,
            image, "python3", "-c", SERVER,
        )  # fmt: skip
        started = home / "server.json"
        deadline = time.monotonic() + 30
        while not started.exists():
            if time.monotonic() > deadline:
                logs = docker("logs", name, check=False)
                raise RuntimeError(f"the container's listener did not start: {logs}")
            time.sleep(0.05)
        pids = json.loads(started.read_text())
        yield HubContainer(name, venv, home, pids["sleep"], pids["server"])
    finally:
        docker("rm", "-f", name, check=False)
        shutil.rmtree(home, ignore_errors=True)
