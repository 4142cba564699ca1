"""A container sandbox's files as a volume of the engine: nothing of them on the host's disk.

``ContainerProvider(scratch="volume")`` keeps each sandbox's scratch in a named volume the
engine holds (``rewyn-<id>``), mounted at ``/scratch`` in every worker container. The host
never opens those files: it reads and writes them through the engine's CLI, as a tar stream
to or from a *keeper*, a container made (never started) with the volume mounted, which ``cp``
accepts even while stopped. So a path is resolved by the engine inside that container's own
root, where a link the code made leads at worst to the image's files, never the host's; and
what comes back is checked here like any output of the sandbox: one member, a regular file,
within the size asked for.

Every container mounts it with ``nocopy``: an engine fills an empty volume with what the image
has at the same path, and gives its root the image folder's owner, on the first start.

Emptying the volume for the next item of a pool runs the image's Python in a throwaway
container (no network, the code's user) with a fixed program that removes every entry
without following a link. The engine's local volumes have no size limit: ``disk_limit_mb`` is
not applied (the isolation notes say so).

This is the provider contract's test of a provider whose files are not a host folder (see
``providers/base.py``, ``SandboxFiles``); a Kubernetes pod provider would be the same with the
pod's ``emptyDir`` and ``kubectl cp``/``exec`` (see the README).
"""

from __future__ import annotations

import errno
import io
import posixpath
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.providers.base import ScratchEntry, ScratchError
from rewyn_kernel.runtime.providers.container.engine import daemonless, labels, run_cli

__all__ = ["SCRATCH", "Engine", "VolumeFiles"]

SCRATCH = "/scratch"
"""Where the volume is in every container of the sandbox (the keeper's too)."""
CLI_SECONDS = 60.0
"""How long one ``cp`` may take before it is given up (and killed)."""
MAX_MEMBERS = 200_000
"""The most tar members a listing looks at, whatever ``limit`` says: the code may have made
millions of files, and the engine streams them all."""
EMPTY_PROGRAM = (
    "import os,shutil\n"
    "for e in os.scandir('/scratch'):\n"
    "    p=e.path\n"
    "    if e.is_dir(follow_symlinks=False): shutil.rmtree(p, ignore_errors=True)\n"
    "    else:\n"
    "        try: os.unlink(p)\n"
    "        except OSError: pass\n"
)
"""What empties the volume (run by the image's ``python3 -I`` in a throwaway container):
``rmtree`` and ``unlink`` remove links, never what they point to."""


def _parts(path: str) -> list[str]:
    """``path``'s components; ScratchError for an absolute one or one with ``..``."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ScratchError(errno.EINVAL, "outside the scratch folder", path)
    return [part for part in pure.parts if part not in ("", ".")]


@dataclass(frozen=True)
class Engine:
    """The engine a volume is kept by: its CLI (with global options), the CLI's name or path,
    and the image (with its Python) of the keeper and of the container that empties it."""

    cli: tuple[str, ...]
    runtime: str
    image: str
    python: str


class VolumeFiles:
    """One sandbox's files in a volume of the engine (see the module's docstring)."""

    def __init__(
        self,
        engine: Engine,
        code: tuple[int, int],
        sandbox_id: str,
        *,
        disk_limit_mb: int | None = None,
    ) -> None:
        self._cli = list(engine.cli)
        self._runtime = engine.runtime
        self._image = engine.image
        self._python = engine.python
        self._code = code
        self.volume = f"rewyn-{sandbox_id}"
        """The engine's name of the volume (labelled as this process's, so a sweep after a
        crash finds it)."""
        self.keeper = f"rewyn-{sandbox_id}-files"
        self._disk_limit_mb = disk_limit_mb
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def make(
        cls, engine: Engine, code: tuple[int, int], spec: SandboxSpec, sandbox_id: str
    ) -> VolumeFiles:
        """Make the volume and its keeper, and give the volume's root to the code's user."""
        if spec.workdir is not None:
            raise ProviderUnavailableError(
                f"workdir {spec.workdir} is a folder of this host, and scratch='volume' keeps "
                "the files in the engine: leave workdir unset (or use scratch='host')"
            )
        files = cls(engine, code, sandbox_id, disk_limit_mb=spec.disk_limit_mb)
        runtime = engine.runtime
        try:
            files._engine("volume", "create", *labels(files.volume), files.volume)
            files._engine(
                "create",
                "--name",
                files.keeper,
                *labels(files.keeper),
                "--network",
                "none",
                # (podman's cp gives what it copies to the container's user; docker's cp -a
                # keeps the tar's owners, and would look a --user up in the image's passwd)
                *(["--user", f"{code[0]}:{code[1]}"] if daemonless(runtime) else []),
                "--volume",
                f"{files.volume}:{SCRATCH}:nocopy",
                "--pull",
                "never",
                engine.image,
                engine.python,
            )
            root = tarfile.TarInfo(SCRATCH.strip("/"))
            root.type, root.mode = tarfile.DIRTYPE, 0o755
            files._put("/", [(root, None)])
        except BaseException:
            files.close()
            raise
        return files

    # -- the contract (providers/base.py: SandboxFiles) -----------------------------------

    @property
    def host_path(self) -> None:
        return None

    @property
    def disk(self) -> str | None:
        if self._disk_limit_mb is None:
            return None
        return "no quota: a volume of the engine has no size limit"

    @property
    def notes(self) -> tuple[str, ...]:
        if self._disk_limit_mb is None:
            return ()
        return ("disk_limit_mb is not applied to a volume of the engine (scratch='volume')",)

    def read(self, path: str, limit: int) -> bytes:
        parts = _parts(path)
        if not parts:
            raise ScratchError(errno.EINVAL, "not a regular file", path)
        with self._get("/".join(parts)) as stream:
            member = stream.next()
            if member is None:
                raise FileNotFoundError(errno.ENOENT, "not found", path)
            if member.issym() or member.islnk():
                raise ScratchError(errno.ELOOP, "a link: not read", path)
            if not member.isreg():
                raise ScratchError(errno.EINVAL, "not a regular file", path)
            if member.size > limit:
                raise ScratchError(
                    errno.EFBIG, f"{member.size} bytes, over the limit of {limit}", path
                )
            data = stream.extractfile(member)
            assert data is not None  # (a regular file's)
            return data.read(member.size)  # (at most ``limit``: checked above)

    def write(self, path: str, data: bytes) -> None:
        parts = _parts(path)
        if not parts:
            raise ScratchError(errno.EINVAL, "give a file name", path)
        members: list[tuple[tarfile.TarInfo, bytes | None]] = []
        for depth in range(1, len(parts)):
            folder = tarfile.TarInfo("/".join(parts[:depth]))
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            members.append((folder, None))
        entry = tarfile.TarInfo("/".join(parts))
        entry.size, entry.mode, entry.mtime = len(data), 0o644, int(time.time())
        members.append((entry, data))
        self._put(SCRATCH + "/", members)

    def list(self, path: str = ".", limit: int | None = None) -> list[ScratchEntry]:
        parts = _parts(path)
        entries: dict[str, ScratchEntry] = {}
        with self._get("/".join(parts) + "/." if parts else ".") as stream:
            for member in self._members(stream):
                name = posixpath.normpath(member.name)
                if name == "." or "/" in name:
                    if name == "." and not member.isdir():
                        raise ScratchError(errno.ENOTDIR, "not a folder", path)
                    continue
                if limit is not None and len(entries) >= limit:
                    break
                entries[name] = ScratchEntry(name, _kind(member), member.size)
        return sorted(entries.values(), key=lambda entry: entry.name)

    def facts(self, *, limit: int, depth: int, hidden_folders: bool) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        seen = 0
        with self._get(".") as stream:
            for member in self._members(stream):
                seen += 1
                if seen > limit:
                    break
                name = posixpath.normpath(member.name)
                parts = name.split("/")
                if name == "." or len(parts) > depth:
                    continue
                if not hidden_folders and len(parts) > 1 and parts[0].startswith("."):
                    continue
                if member.isreg():
                    found[name] = (member.size, int(member.mtime * 1_000_000_000))
        return found

    def full(self) -> bool:
        return False

    def empty(self) -> None:
        self._engine(
            "run",
            "--rm",
            "--name",
            f"{self.volume}-empty-{uuid.uuid4().hex[:6]}",
            *labels(self.volume),
            "--network",
            "none",
            "--user",
            f"{self._code[0]}:{self._code[1]}",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--volume",
            f"{self.volume}:{SCRATCH}:nocopy",
            "--pull",
            "never",
            self._image,
            self._python,
            "-I",
            "-c",
            EMPTY_PROGRAM,
        )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        grace = ["-t", "0"] if daemonless(self._runtime) else []
        run_cli([*self._cli, "rm", "-f", "-v", *grace, self.keeper], timeout=CLI_SECONDS)
        run_cli([*self._cli, "volume", "rm", "-f", self.volume], timeout=CLI_SECONDS)

    def __repr__(self) -> str:
        return f"VolumeFiles({self.volume!r})"

    # -- through the engine ------------------------------------------------------------------

    def _engine(self, *argv: str) -> str:
        done = run_cli([*self._cli, *argv], timeout=CLI_SECONDS)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise ProviderUnavailableError(f"{self._runtime} {argv[0]} failed: {why}")
        return done.stdout

    def _put(self, folder: str, members: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> None:
        """Copy ``members`` (owned by the code's user) into the keeper's ``folder``."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for info, data in members:
                info.uid, info.gid = self._code
                archive.addfile(info, io.BytesIO(data) if data is not None else None)
        # (docker keeps the tar's owners with -a; podman gives the files to the keeper's user)
        keep = [] if daemonless(self._runtime) else ["-a"]
        try:
            done = subprocess.run(
                [*self._cli, "cp", *keep, "-", f"{self.keeper}:{folder}"],
                input=buffer.getvalue(),
                capture_output=True,
                timeout=CLI_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OSError(errno.EIO, f"{self._runtime} cp failed: {exc}") from exc
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines() or ["no reason"]
            raise ScratchError(errno.EIO, f"{self._runtime} cp: {why[-1][:500]}", folder)

    @contextmanager
    def _get(self, path: str) -> Iterator[tarfile.TarFile]:
        """The tar stream ``cp`` makes of ``path`` (relative to the volume), read as it
        comes; the CLI is ended when the caller has read what it needs."""
        source = f"{self.keeper}:{SCRATCH}/{path}"
        process = subprocess.Popen(
            [*self._cli, "cp", source, "-"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        timer = threading.Timer(CLI_SECONDS, process.kill)
        timer.start()
        try:
            try:
                stream = tarfile.open(fileobj=process.stdout, mode="r|")  # noqa: SIM115 (closed below)
            except tarfile.ReadError:
                process.wait()
                raise _missing(process.stderr, path) from None
            with stream:
                yield stream
        except tarfile.TarError as exc:
            raise ScratchError(errno.EIO, f"the engine's copy is unreadable: {exc}", path) from exc
        finally:
            timer.cancel()
            process.kill()
            process.wait()
            process.stdout.close()
            process.stderr.close()

    @staticmethod
    def _members(stream: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
        for count, member in enumerate(stream):
            if count >= MAX_MEMBERS:
                return
            yield member


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return "link"
    if member.isdir():
        return "dir"
    return "file" if member.isreg() else "other"


def _missing(stderr: IO[bytes], path: str) -> OSError:
    """What a ``cp`` that wrote no archive said, as the error a local read would raise."""
    said = stderr.read(4096).decode(errors="replace").strip()
    if "no such" in said.lower() or "could not find" in said.lower():
        return FileNotFoundError(errno.ENOENT, "not found", path)
    return ScratchError(errno.EIO, f"the engine's copy failed: {said[-500:] or 'no reason'}", path)
