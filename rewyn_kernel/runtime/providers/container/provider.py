"""The container provider: each sandbox's worker runs in a locked-down container.

It shells out to the container CLI (docker, podman or nerdctl) instead of taking a client
library, so whichever is installed works. Every container gets: all capabilities dropped,
no-new-privileges, a read-only root, a small tmpfs ``/tmp``, a non-root user, a memory cap that
includes swap, a pids limit, low file-descriptor limits, no network unless the spec allows it,
and exactly one mount: the sandbox's scratch directory at ``/scratch``. ``oci_runtime`` swaps
the OCI runtime (``runsc`` for gVisor, a Kata runtime) and nothing else changes.

Code and env values never travel in argv: the code goes over the container's stdin, and env
values reach ``<cli> run -e NAME`` through the CLI's own environment.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from rewyn_kernel.errors import ProviderUnavailableError
from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import EGRESS_FOLDER, EGRESS_NOTE
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.host import views
from rewyn_kernel.runtime.host.base import BaseSandbox
from rewyn_kernel.runtime.host.cells import WorkspaceCells
from rewyn_kernel.runtime.host.views import HostMount
from rewyn_kernel.runtime.host.workspace import PROTECTED, STORE, existing_protected
from rewyn_kernel.runtime.providers.base import CheckItem, SandboxFiles, worker_argv
from rewyn_kernel.runtime.providers.container.checks import engine_checks
from rewyn_kernel.runtime.providers.container.engine import daemonless, labels
from rewyn_kernel.runtime.providers.container.sweep import EngineSweep
from rewyn_kernel.runtime.providers.container.volume import SCRATCH, Engine, VolumeFiles
from rewyn_kernel.runtime.providers.container.worker import ContainerWorker
from rewyn_kernel.runtime.providers.local import (
    cgroup,
    seccomp,
    seccomp_config,
    workspace_cells,
    workspace_note,
)
from rewyn_kernel.runtime.providers.local.files import LocalFiles, host_folder
from rewyn_kernel.runtime.providers.local.identity import identity, idmap_namespace
from rewyn_kernel.runtime.providers.popen import LaunchSettings
from rewyn_kernel.runtime.providers.stops import Column
from rewyn_kernel.runtime.worker.config import Clean, Egress, Users, WorkerConfig, WorkspaceSetting

__all__ = ["ContainerProvider", "ContainerSandbox", "DEFAULT_IMAGE"]

DEFAULT_IMAGE = "python:3.13-slim"
"""The image a container sandbox runs when none is given (pull it, or build one: see README)."""

NOBODY = "65534:65534"
SUPERVISOR_IDS = ((65533, 65533), (65532, 65532))
"""The supervisor's uid:gid inside a container: the first that is not the code's."""


class ContainerProvider:
    """Run each sandbox in a container, through the docker, podman or nerdctl CLI."""

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        runtime: str = "docker",
        *,
        oci_runtime: str | None = None,
        python: str = "python3",
        user: str | None = None,
        pids_limit: int | None = None,
        tmpfs_mb: int = 64,
        nofile: int = 1024,
        cpus: float | None = None,
        pull: Literal["missing", "never", "always"] = "missing",
        scratch: Literal["host", "volume"] = "host",
    ) -> None:
        """``image`` needs ``python3`` (3.8+) with its standard library and nothing else.
        ``runtime``: the CLI, by name or path. ``oci_runtime``: e.g. ``"runsc"`` (gVisor), as
        registered with the engine (for podman: a path). ``user``: the code's ``uid:gid``,
        default the host's when that is not root, else nobody (65534); the sandbox's supervisor
        runs as another (65533). ``pull``: whether ``run`` may pull the image (a pull counts
        against ``startup_timeout``). ``pids_limit``: tasks per container, overriding the
        sandbox spec's ``pids_limit`` (None: the spec's). ``scratch``: where each sandbox's
        files are kept: "host", a folder of this host mounted into its containers; "volume", a
        volume of the engine that the host reads and writes only through the engine (nothing
        on the host's disk; no ``disk_limit_mb``, no ``workdir``: see ``volume.py``)."""
        if scratch not in ("host", "volume"):
            raise ValueError(f"scratch must be 'host' or 'volume', not {scratch!r}")
        if (pids_limit is not None and pids_limit < 8) or tmpfs_mb < 1 or nofile < 64:
            raise ValueError("pids_limit >= 8, tmpfs_mb >= 1 and nofile >= 64 are required")
        if cpus is not None and cpus <= 0:
            raise ValueError("cpus must be positive (or None for no limit)")
        self.image = image
        self.runtime = runtime
        self.oci_runtime = oci_runtime
        self.python = python
        self.user = user or (NOBODY if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}")
        if not re.fullmatch(r"\d+:\d+", self.user):
            raise ValueError(f"user must be numeric UID:GID, not {self.user!r}")
        uid, gid = (int(part) for part in self.user.split(":"))
        self._code_ids = (uid, gid)
        self._user_given = user is not None
        self.pids_limit = pids_limit
        self.tmpfs_mb = tmpfs_mb
        self.nofile = nofile
        self.cpus = cpus
        self.pull = pull
        self.scratch = scratch

    @property
    def name(self) -> str:
        cli = Path(self.runtime).name
        return (
            f"container/{cli}+{Path(self.oci_runtime).name}"
            if self.oci_runtime
            else f"container/{cli}"
        )

    @property
    def stops(self) -> Column:
        """What it stops, and what not: its column of the declared table (providers/stops),
        gVisor's with ``oci_runtime="runsc"``, else runc's (podman's and nerdctl's too)."""
        return Column.GVISOR if self._gvisor() else Column.RUNC

    @property
    def available(self) -> bool:
        """True when the CLI is on PATH; it does not say that the daemon is up (see check())."""
        return shutil.which(self.runtime) is not None

    def _cli(self) -> list[str]:
        if self.oci_runtime and daemonless(self.runtime):
            return [self.runtime, "--runtime", self.oci_runtime]
        return [self.runtime]

    def isolation(self, spec: SandboxSpec) -> Isolation:
        notes = []
        if self.oci_runtime:
            notes.append(f"OCI runtime {self.oci_runtime}: the code does not reach the host kernel")
        pids = self._pids(spec)
        if self.oci_runtime and Path(self.oci_runtime).name == "runsc" and pids is not None:
            notes.append(
                f"gVisor counts its own threads against the pids limit ({pids}): "
                "reaching it ends the whole sandbox (exit code 2)"
            )
        else:
            notes.append("the code shares the host's kernel (use oci_runtime='runsc' for gVisor)")
        if spec.network == "allow":
            notes.append("network='allow': the container uses the engine's default network")
        elif spec.allow_list is not None:
            notes.append(EGRESS_NOTE)
            if self._gvisor():
                notes.append(
                    "gVisor reaches the proxy's socket only where runsc runs with "
                    "--host-uds=open (the engine's runtimeArgs for runsc)"
                )
        if spec.workspace is not None:
            if self._workspace_view(spec):
                notes.append(workspace_note(spec, in_sandbox=False))
            else:
                notes.append(self._direct_note(spec))
        if self.scratch == "volume":
            notes.append(
                "scratch: a volume of the engine, read and written through the engine "
                "(nothing of it on the host's disk)"
            )
        memory = None
        if spec.memory_limit_mb:
            memory = f"cgroup {spec.memory_limit_mb} MiB, swap included"
            if self._tcp_apart(spec):
                tcp = cgroup.tcp_share(spec.memory_limit_mb << 20) >> 20
                memory += f", {tcp} MiB of it for TCP buffers (cgroup v1 counts them apart)"
            elif cgroup.cgroup_support("memory").version == 1 and not self._gvisor():
                notes.append(
                    "TCP socket buffers are not counted in the memory cap (cgroup v1 counts "
                    "them only once the host, as root, writes a limit for them)"
                )
        return Isolation(
            provider=self.name,
            files="isolated",
            network="allowed"
            if spec.network == "allow"
            else "filtered"
            if spec.allow_list is not None
            else "isolated",
            pid_namespace=True,
            user_namespace=False,
            memory=memory,
            pids=f"{pids} tasks (the engine's --pids-limit)" if pids is not None else None,
            workspace=(
                None
                if spec.workspace is None
                else "versioned"
                if self._workspace_view(spec)
                else "direct"
            ),
            filesystem=f"read-only image root, tmpfs /tmp and the scratch dir at {SCRATCH} only",
            seccomp=(
                f"the engine's default profile, and on top of it {seccomp.build().detail}"
                if seccomp.build().program
                else None
            ),
            notes=tuple(notes),
        )

    def _pids(self, spec: SandboxSpec) -> int | None:
        return self.pids_limit if self.pids_limit is not None else spec.pids_limit

    def _gvisor(self) -> bool:
        return bool(self.oci_runtime) and Path(str(self.oci_runtime)).name == "runsc"

    def _tcp_apart(self, spec: SandboxSpec) -> bool:
        """Whether this sandbox's TCP buffers get a limit of their own within its memory cap
        (cgroup v1, written as root; gVisor's network stack is inside its memory already)."""
        return bool(spec.memory_limit_mb) and not self._gvisor() and cgroup.container_tcp_promised()

    def _code(self, spec: SandboxSpec) -> tuple[int, int]:
        """The code's uid and gid for ``spec``: the provider's, except where gVisor binds a
        person's workspace as it is (no view, no idmapped mount): there the code is the
        workspace's owner, so that it can change the person's files, as on the host (never
        root: a workspace of root's stays the provider's user's, who may only read it)."""
        if self._user_given or not self._gvisor() or spec.workspace is None:
            return self._code_ids
        with contextlib.suppress(OSError):
            info = spec.workspace.stat()
            if info.st_uid != 0:
                return info.st_uid, info.st_gid
        return self._code_ids

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        """Where a sandbox's files are kept (see ``scratch``): a temporary folder of this
        host's, or a volume of the engine."""
        if self.scratch == "volume":
            python = spec.python or self.python
            engine = Engine(tuple(self._cli()), self.runtime, self.image, python)
            return VolumeFiles.make(engine, self._code(spec), spec, sandbox_id)
        return LocalFiles.make(spec, sandbox_id)

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        # (the files are at SCRATCH in the container, wherever they are kept: see launch)
        code = self._code(spec)
        supervisor = next(ids for ids in SUPERVISOR_IDS if ids[0] != code[0])
        return WorkerConfig(
            cwd=str(spec.workspace) if spec.workspace is not None else SCRATCH,
            oom_counter=True,
            users=Users(supervisor=supervisor, code=code),
            # (each one-shot execution starts with these empty, as on every provider)
            clean=Clean(dirs=("/tmp", "/dev/shm", "/dev/mqueue"), ipc=True),
            # (gVisor: the host cannot read the sandbox's memory, but its /proc/meminfo is the
            # container's: what the cap allows and what is free. The supervisor reads it there.)
            memory_view="meminfo" if self._gvisor() and spec.memory_limit_mb else None,
            # (the local providers' allow-list, on top of the engine's profile: it refuses what
            # that profile lets through, vsock sockets among them; see local/seccomp.py)
            **seccomp_config(),
        )

    def _workspace_view(self, spec: SandboxSpec) -> bool:
        """Whether the workspace is shown through the host's view, renewed after each
        execution: as root, on docker or podman with runc (a view mounted after the start
        reaches the container through an rslave bind; gVisor's gofer does not take it)."""
        return (
            spec.workspace is not None
            and identity().dedicated
            and Path(self.runtime).name in ("docker", "podman")
            and not self._gvisor()
        )

    def _direct_note(self, spec: SandboxSpec) -> str:
        if self._gvisor():
            return (
                f"the workspace {spec.workspace} is bound as it is (gVisor takes no mount made "
                f"after its start, nor an idmapped one): the code runs as uid "
                f"{self._code(spec)[0]} (the workspace's owner unless that is root), changes "
                "files directly where that uid may, and no earlier version is kept (protected "
                "paths are read-only)"
            )
        return (
            f"the workspace {spec.workspace} is bound as it is (the host is not root: it cannot "
            "mount the code's view of it): the code changes the files directly, and no earlier "
            "version is kept (protected paths are read-only)"
        )

    def _workspace_mounts(
        self, spec: SandboxSpec
    ) -> tuple[list[str], WorkspaceCells | None, list[HostMount], LaunchSettings]:
        """The run options that show the workspace at its own path, its cells (the host's view,
        renewed after each execution) or the host's idmapped clone of it (bound as it is), and
        the worker's ``workspace`` setting."""
        if spec.workspace is None:
            return [], None, [], {}
        folder = str(spec.workspace)
        if any(char in folder for char in ",:"):
            raise ProviderUnavailableError(
                f"{folder}: the workspace's path cannot hold ',' or ':' (the engine's syntax)"
            )
        if self._workspace_view(spec):
            cells = workspace_cells(spec, self._code_ids, host_root=True)
            assert cells is not None
            try:
                setting = cells.first().replace(bind=None, bound=True)
                if cells.view is None:  # (no idmapped view here: bound as it is)
                    raise OSError(cells.note)
            except BaseException:
                cells.close()
                raise
            return (
                ["--volume", f"{cells.view.anchor}:{folder}:rslave"],
                cells,
                [],
                {"workspace": setting},
            )
        source, mounts = folder, []
        code, info = self._code(spec), spec.workspace.stat()
        if self._gvisor() and code[0] != info.st_uid and not info.st_mode & 0o001:
            raise ProviderUnavailableError(
                f"the workspace {folder} is uid {info.st_uid}'s and closed to others: under "
                f"gVisor the code (uid {code[0]}) sees it as it is and could not enter it; give "
                "the folder to its person's user (the code then runs as that user), or pass "
                "user='UID:GID' to the provider"
            )
        if identity().dedicated and not self._gvisor():  # (gVisor's gofer, root, cannot
            # create files through an idmapped mount that maps no root: EOVERFLOW)
            with contextlib.suppress(OSError):
                owner = (info.st_uid, info.st_gid)
                mounted = views.idmapped_bind(spec.workspace, idmap_namespace(code, owner))
                source, mounts = str(mounted.path), [mounted]
        argv = ["--volume", f"{source}:{folder}"]
        for relative in existing_protected(spec.workspace, (*PROTECTED, *spec.protected)):
            path = f"{folder}/{relative}"
            if "," not in path and ":" not in path and not os.path.islink(path):
                argv += ["--volume", f"{path}:{path}:ro"]
        argv += (
            ["--tmpfs", f"{folder}/{STORE}:ro,size=4k"] if (spec.workspace / STORE).is_dir() else []
        )
        return argv, None, mounts, {"workspace": WorkspaceSetting(path=folder, bound=True)}

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> ContainerWorker:
        """``egress``: the folder of the host proxy's socket for this worker (network=[...]),
        mounted read-only at EGRESS_FOLDER."""
        if isinstance(files, VolumeFiles):
            workdir, shown_scratch = Path("/"), f"{files.volume}:{SCRATCH}:rw,nocopy"
            local = False
        else:
            workdir = host_folder(files)
            shown_scratch = f"{workdir}:{SCRATCH}:rw"
            local = True
        owned = spec.workdir is None  # never re-own a directory the caller chose
        uid, gid = self._code(spec)
        if local and owned and os.getuid() == 0 and workdir.stat().st_uid != uid:
            try:
                os.chown(workdir, uid, gid)  # the code's user must write there
            except OSError as exc:
                raise ProviderUnavailableError(
                    f"cannot hand the scratch directory to the container's user ({uid}): {exc}; "
                    "run as real root, or pass user='UID:GID' owning the directory"
                ) from exc
        inherited = {k: v for k, v in spec.build_env().items() if k != "PATH"}
        inside = {**inherited, **spec.env}
        # The CLI needs its own environment (DOCKER_HOST, its config); values for the
        # container come from it by name, so they never appear in argv.
        cli_env = {**os.environ, **inside}
        argv = [*self._cli(), "run", "-i", "--rm", "--name", name]
        self._sweeper().sweep_once()
        argv += labels(name)
        if self.oci_runtime and not daemonless(self.runtime):
            argv += ["--runtime", self.oci_runtime]
        argv += ["--pull", self.pull]
        argv += [] if spec.network == "allow" else ["--network", "none"]
        argv += ["--read-only", "--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
        # The supervisor starts as root with these three only, takes a user of its own and
        # makes each code process the code's user, with none (see worker/sandbox_setup.py).
        argv += ["--cap-add", "KILL", "--cap-add", "SETGID", "--cap-add", "SETUID"]
        argv += ["--user", "0:0"]
        pids = self._pids(spec)
        if pids is not None:
            argv += ["--pids-limit", str(pids)]
        argv += ["--ulimit", f"nofile={self.nofile}:{self.nofile}"]
        # No engine log of the channel: json-file would write every byte printed to disk.
        argv += ["--log-driver", "none"]
        if daemonless(self.runtime):
            # podman's default nproc can exceed what the runtime may set, and the start fails.
            # RLIMIT_NPROC counts a uid across the whole host, so no lower value is right: the
            # pids limit bounds each container on its own. As high as the host allows, then.
            argv += ["--ulimit", f"nproc={_nproc_ceiling()}:{_nproc_ceiling()}"]
        argv += ["--tmpfs", f"/tmp:rw,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777"]
        shown, cells, mounts, settings = self._workspace_mounts(spec)
        argv += ["--volume", shown_scratch, *shown]
        if egress is not None:
            argv += ["--volume", f"{egress}:{EGRESS_FOLDER}:ro"]
            settings = {**settings, "egress": Egress(folder=EGRESS_FOLDER)}
        for folder in spec.read_dirs:  # (more of the host's folders, read-only by choice)
            argv += ["--volume", f"{folder}:{folder}:ro"]
        argv += ["--workdir", str(spec.workspace) if spec.workspace is not None else SCRATCH]
        tcp_limit = None
        if spec.memory_limit_mb:
            cap = spec.memory_limit_mb << 20
            if self._tcp_apart(spec):
                # cgroup v1: the TCP buffers' limit is an eighth of the cap, the rest the memory
                # limit (see providers/local/cgroup.py); written into its cgroup when it is up
                # (on_ready).
                cidfile = Path(tempfile.gettempdir(), f".{name}.cid")
                with contextlib.suppress(FileNotFoundError):
                    cidfile.unlink()  # (the engine refuses to overwrite one)
                argv += ["--cidfile", str(cidfile)]
                tcp_limit = (cidfile, cap)
                cap -= cgroup.tcp_share(cap)
            argv += ["--memory", f"{cap}b", "--memory-swap", f"{cap}b"]
        if self.cpus:
            argv += ["--cpus", str(self.cpus)]
        argv += [
            "--env",
            f"HOME={SCRATCH}",
            "--env",
            "TMPDIR=/tmp",
            "--env",
            f"REWYN_SANDBOX={name}",
        ]
        for variable in sorted(inside):
            argv += ["--env", variable]
        argv += [self.image, *worker_argv(spec.python or self.python)]
        try:
            return ContainerWorker(
                argv,
                cli_env,
                workdir,
                cli=self._cli(),
                name=name,
                memory_capped=spec.memory_limit_mb is not None,
                tcp_limit=tcp_limit,
                workspace=cells,
                mounts=mounts,
                settings=settings,
            )
        except BaseException:
            # (the worker released what it was given if it got that far; twice is harmless)
            if cells is not None:
                cells.close()
            for mount in mounts:
                mount.remove()
            raise

    def containers(self, *, host_pid: int | None = None, everyone: bool = False) -> list[str]:
        """Names of rewyn containers (running or not) started by this process (or by
        ``host_pid``, or by anyone)."""
        return self._sweeper().containers(host_pid=host_pid, everyone=everyone)

    def sweep(self) -> list[str]:
        """Remove rewyn containers whose host process is gone; return their names (see
        ``sweep.EngineSweep.sweep``)."""
        return self._sweeper().sweep()

    def _sweeper(self) -> EngineSweep:
        return EngineSweep(self._cli(), self.runtime)

    def check(self) -> Sequence[CheckItem]:
        """Say precisely what is missing: the CLI, the daemon, the image, the OCI runtime."""
        return engine_checks(self._cli(), self.runtime, self.image, self.oci_runtime)

    def create(
        self, spec: SandboxSpec | None = None, *, listeners: Sequence[EventListener] = ()
    ) -> ContainerSandbox:
        return ContainerSandbox(self, spec or SandboxSpec(), listeners)

    def __repr__(self) -> str:
        extra = f", oci_runtime={self.oci_runtime!r}" if self.oci_runtime else ""
        return f"ContainerProvider(image={self.image!r}, runtime={self.runtime!r}{extra})"


def _nproc_ceiling() -> int:
    """The most processes the host allows this user (and never more than pid_max)."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    return pid_max if hard == resource.RLIM_INFINITY else min(hard, pid_max)


class ContainerSandbox(BaseSandbox):
    """A sandbox whose workers are containers (see ContainerProvider)."""
