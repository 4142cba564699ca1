"""The subprocess provider: a local worker process, for accidents rather than attacks.

On Linux the worker runs under ``unshare`` in new user, PID, mount and (with network="none")
network namespaces, so the network cut is enforced, ``/proc`` shows only the sandbox's own
processes, and killing the namespace's first process takes every descendant with it, including
one that called ``setsid()``. Where namespaces are unavailable it falls back to a plain process
group and says so in ``Isolation.notes``; it never claims a protection it did not apply.

``network="none"`` holds on either path: without a network namespace the seccomp filter refuses
every new socket (``seccomp.build(sockets=False)``), and where no filter can be loaded either,
the sandbox does not start unless ``allow_unenforced_network=True`` says that may be given up.
An allow-list needs the network namespace its proxy's relay lives in: without one it is refused.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import EGRESS_NOTE
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.host.base import BaseSandbox
from rewyn_kernel.runtime.host.scratch import ensure_dir, remove_at
from rewyn_kernel.runtime.host.views import HostMount
from rewyn_kernel.runtime.providers.base import CheckItem, SandboxFiles, worker_argv
from rewyn_kernel.runtime.providers.local import (
    cgroup,
    common_notes,
    file_size_limit,
    local_config,
    local_python,
    outermost,
    python_prefixes,
    root_workdir,
    seccomp,
    seccomp_config,
    user_text,
    workspace_cells,
    workspace_note,
)
from rewyn_kernel.runtime.providers.local.files import LocalFiles, host_folder
from rewyn_kernel.runtime.providers.local.identity import give, identity, setup_namespace
from rewyn_kernel.runtime.providers.popen import LaunchSettings, PopenWorker
from rewyn_kernel.runtime.providers.stops import Column
from rewyn_kernel.runtime.worker.config import Clean, Cover, Egress, Hidden, WorkerConfig
from rewyn_kernel.runtime.worker.mounts import unreachable_ancestor

TMP_BYTES = 64 * 1024 * 1024
"""The size of the sandbox's own /tmp (a tmpfs: it counts against memory)."""
MQUEUE_IN_TMP = "/tmp/.rewyn-mqueue"
FAREWELL_SECONDS = 1.0
"""Without namespaces: how long the supervisor gets to kill what the code started, once its
channel is closed, before the sandbox's process group is killed."""
_FILESYSTEM = (
    "the host's, with the rights of the user running the host; cwd, HOME and TMPDIR in the "
    "scratch dir"
)


NO_ALLOW_LIST = (
    "network=[...] is refused: with no network namespace, nothing keeps the code to the proxy"
)
DAEMON_DIRS = ("/run", "/var/run", "/sys/fs/cgroup")
"""Where daemons keep their sockets (docker, containerd, podman, D-Bus, systemd, a user's
``/run/user/UID``), and the cgroup files (the code could lift its own memory cap there): covered
in the sandbox's mount namespace."""
DAEMON_SOCKETS = (
    "/var/lib/docker.sock",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/dbus/system_bus_socket",
)
SOCKET_VARIABLES = (
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "CONTAINERD_ADDRESS",
    "DBUS_SESSION_BUS_ADDRESS",
)
"""Environment variables that may name a daemon's Unix socket elsewhere (``unix:///path``)."""


def hidden_paths(needed: Sequence[Path | str]) -> Hidden:
    """What the sandbox's supervisor covers so the code cannot reach the host's daemons: the
    directories of DAEMON_DIRS that hold none of ``needed`` (the scratch directory, the
    notebook's, the interpreter), and every known daemon socket outside them."""
    inside = [os.path.realpath(path) + "/" for path in needed]
    dirs: list[str] = []
    for path in DAEMON_DIRS:
        real = os.path.realpath(path)
        holds = any(p.startswith(real + "/") for p in inside)
        if os.path.isdir(real) and real not in dirs and not holds:
            dirs.append(real)
    sockets = list(DAEMON_SOCKETS)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        sockets += [f"{runtime}/docker.sock", f"{runtime}/podman/podman.sock", f"{runtime}/bus"]
    for name in SOCKET_VARIABLES:
        for part in os.environ.get(name, "").split(";"):
            address = part.split(",")[0]
            if address.startswith(("unix://", "unix:path=")):
                sockets.append(address.split("//", 1)[-1].split("=", 1)[-1])
    files: list[str] = []
    for path in sockets:
        real = os.path.realpath(path)
        covered = any(real.startswith(d + "/") for d in dirs)
        if not covered and real not in files and _is_socket(real):
            files.append(real)
    return Hidden(dirs=tuple(dirs), files=tuple(files))


def remove_worker_tmp(workdir: Path, name: str) -> None:
    """Remove the worker ``name``'s TMPDIR (``.tmp/NAME`` in the scratch folder ``workdir``),
    never through a link the code put at ``.tmp``."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        root = os.open(workdir, flags)
        try:
            tmp = os.open(".tmp", flags | os.O_NOFOLLOW, dir_fd=root)
            try:
                remove_at(tmp, name)
            finally:
                os.close(tmp)
        finally:
            os.close(root)


def network_cut_here() -> bool:
    """Whether this process's network namespace has no interface but the loopback (so nothing
    outside it answers): as inside another sandbox. Read from /proc/net/dev."""
    try:
        with open("/proc/net/dev", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()[2:]
    except OSError:
        return False
    return [line.split(":")[0].strip() for line in lines if ":" in line] == ["lo"]


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Namespaces:
    """What ``unshare`` can do on this machine, found by trying it once."""

    prefix: tuple[str, ...]
    """The unshare argv with a network namespace of its own (empty: no namespaces)."""
    user: bool
    detail: str

    def argv(self, *, share_net: bool) -> list[str]:
        if share_net:  # (network="allow"; "none" and an allow-list have their own)
            return [arg for arg in self.prefix if arg != "--net"]
        return list(self.prefix)


def dedicated_prefix() -> list[str]:
    """As root: ``nsenter`` into the user namespace made for sandboxes
    (providers/local/identity.py), then ``unshare`` the other namespaces there, owned by it.
    The supervisor starts as that namespace's root, the dedicated uid (nsenter takes uid 0
    there), with its capabilities."""
    nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    fd = setup_namespace()
    common = ["--mount", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
    # (slave: the workspace's view, which the host mounts after each execution, reaches it)
    common.append("--propagation=slave")
    return [nsenter, f"--user=/proc/self/fd/{fd}", "--", unshare, *common]


@functools.cache
def probe_namespaces() -> Namespaces:
    """Find the strongest ``unshare`` invocation that works here (tried once per process)."""
    if not sys.platform.startswith("linux"):
        return Namespaces((), False, f"namespaces are Linux-only (this is {sys.platform})")
    unshare = shutil.which("unshare") or (
        "/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None
    )
    if unshare is None:
        return Namespaces((), False, "the 'unshare' command (util-linux) is not installed")
    common = ["--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
    attempts = [([unshare, "--user", "--map-root-user", *common], True)]
    if identity().dedicated:
        # As root, only through a namespace whose root is the sandboxes' own uid.
        try:
            attempts = [(dedicated_prefix(), True)]
        except OSError as exc:
            return Namespaces((), False, f"as root, no user namespace of its own: {exc}")
    # (``true`` starts in a few ms where an interpreter takes 15: this runs before a kernel's
    # first sandbox can start.)
    true = shutil.which("true")
    program = [true] if true else [sys.executable, "-I", "-S", "-c", ""]
    errors = []
    fds = (setup_namespace(),) if identity().dedicated else ()
    for prefix, user in attempts:
        try:
            done = subprocess.run(
                [*prefix, *program],
                capture_output=True,
                timeout=10,
                check=False,
                pass_fds=fds,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(str(exc))
            continue
        if done.returncode == 0:
            return Namespaces(tuple(prefix), user, "user, PID, mount, IPC and network namespaces")
        errors.append(done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}")
    return Namespaces((), False, "unshare failed here: " + " | ".join(errors))


class SubprocessProvider:
    """Run each sandbox as a local process. The default provider: bounds accidents well,
    determined escapes poorly (it shares the host's filesystem and kernel)."""

    name = "subprocess"
    stops = Column.SUBPROCESS
    """What it stops, and what not: its column of the declared table (providers/stops)."""

    def __init__(
        self,
        python: str | None = None,
        *,
        namespaces: bool = True,
        instead_of_bubblewrap: str | None = None,
        allow_unenforced_network: bool = False,
    ) -> None:
        """``python``: interpreter for the worker (default ``sys.executable``; resolved by
        ``local_python``, as is a spec's ``python``).
        ``namespaces=False`` turns off Linux namespaces (the isolation report says so).
        ``instead_of_bubblewrap``: why this provider stands in for the bubblewrap one (the
        local default), said in every sandbox's isolation notes.
        ``allow_unenforced_network=True``: where neither a network namespace nor the seccomp
        filter can be had, run ``network="none"`` code anyway, with the host's network (the
        isolation says ``not_isolated``); by default such a sandbox does not start."""
        self.python = local_python(python)
        self.use_namespaces = namespaces
        self.instead_of_bubblewrap = instead_of_bubblewrap
        self.allow_unenforced_network = allow_unenforced_network

    @property
    def available(self) -> bool:
        return os.name == "posix" and os.access(self.python, os.X_OK)

    def _namespaces(self, spec: SandboxSpec) -> Namespaces:
        if not self.use_namespaces:
            return Namespaces((), False, "namespaces were turned off (namespaces=False)")
        return probe_namespaces()

    def _python(self, spec: SandboxSpec) -> str:
        return local_python(spec.python) if spec.python else self.python

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        """A temporary folder of this host's (or the spec's ``workdir``), given to the code's
        uid where it is not this process's."""
        return LocalFiles.make(spec, sandbox_id, self.code_owner(spec))

    def code_owner(self, spec: SandboxSpec) -> tuple[int, int] | None:
        """The dedicated uid a root host's sandboxes run as (see providers/local/identity.py)."""
        return identity().owner()

    def _needed(self, spec: SandboxSpec, workdir: Path) -> list[Path | str]:
        """What the code must still see where daemons' directories are covered."""
        python = self._python(spec)
        needed: list[Path | str] = [workdir, python, os.path.realpath(python), sys.prefix]
        needed += python_prefixes(python)
        needed += spec.read_dirs
        return [*needed, spec.workspace] if spec.workspace is not None else needed

    def _covers(self, spec: SandboxSpec, workdir: Path) -> tuple[Cover, ...]:
        """The folders the supervisor covers with a tmpfs of the sandbox's own, each keeping
        the paths of ``_needed`` under it: ``/tmp`` (the code's own, emptied before each
        one-shot execution), and as root the folders the code's uid may not pass through on
        the way to what it needs (``/root``, on the way to an interpreter installed there)."""
        needed = outermost(os.path.realpath(path) for path in self._needed(spec, workdir))
        covers = [Cover(dir="/tmp", keep=needed, mode="1777", limit=TMP_BYTES)]
        who = identity()
        if who.dedicated:
            blocked = {
                found
                for path in needed
                if not path.startswith("/tmp/")
                and (found := unreachable_ancestor(path, who.uid, who.gid)) is not None
            }
            for folder in sorted(blocked):
                if not any(folder.startswith(other + "/") for other in blocked):
                    covers.append(Cover(dir=folder, keep=needed, mode="755"))
        return tuple(covers)

    def isolation(self, spec: SandboxSpec) -> Isolation:
        ns = self._namespaces(spec)
        notes = common_notes()
        # Without namespaces of its own, the network may still be cut where this process runs
        # (inside another sandbox: code in a bubblewrap kernel using the runtime itself).
        cut_already = not ns.prefix and spec.network == "none" and network_cut_here()
        no_sockets = not ns.prefix and spec.network == "none" and not cut_already
        filtered = no_sockets and seccomp.build(sockets=False).program is not None
        if not ns.prefix:
            notes.append(f"no namespaces: {ns.detail}")
            if cut_already:
                notes.append(
                    "network='none' holds: this runs where the network is already cut (a "
                    "network namespace with nothing but a loopback: another sandbox's)"
                )
            elif filtered:
                notes.append(
                    "network='none' holds: with no network namespace, the seccomp filter "
                    "refuses every new socket (Unix ones included: only socketpair() works)"
                )
            elif spec.network == "none":
                notes.append(
                    "network='none' is NOT enforced (allow_unenforced_network=True): the code "
                    "can reach the network"
                )
            notes.append(
                "the code runs as the host's user in the host's process tree: it can signal the "
                "sandbox's supervisor and the host process, and if it kills the supervisor, what "
                "it started (setsid() included) can outlive the sandbox"
            )
        if self.instead_of_bubblewrap is not None:
            notes.append(
                "the default would keep the host's files out of reach, but bubblewrap cannot "
                f"run here ({self.instead_of_bubblewrap}): install bubblewrap"
            )
        notes.append(
            "the host's files are open: the code reads and writes them as you (use the "
            "bubblewrap provider, or ContainerProvider for untrusted code)"
        )
        if spec.workspace is not None:
            if ns.prefix:
                notes.append(workspace_note(spec, in_sandbox=not identity().dedicated))
            else:
                notes.append(
                    f"{spec.workspace} is read-write for the code (no mount namespace: no view "
                    "of it of its own, so no earlier version is kept)"
                )
        network: Literal["isolated", "filtered", "allowed", "not_isolated"] = "allowed"
        if spec.network == "none":
            network = "isolated" if ns.prefix or cut_already or filtered else "not_isolated"
        elif spec.allow_list is not None:
            # (without a namespace, launch refuses it: see network_refusal)
            network = "filtered" if ns.prefix else "not_isolated"
            notes.append(EGRESS_NOTE if ns.prefix else NO_ALLOW_LIST)
        return Isolation(
            provider=self.name,
            files="open",
            network=network,
            pid_namespace=bool(ns.prefix),
            user_namespace=ns.user,
            memory=cgroup.memory_text(spec.memory_limit_mb),
            pids=cgroup.pids_text(spec.pids_limit),
            filesystem=_FILESYSTEM,
            workspace=None if spec.workspace is None else "versioned" if ns.prefix else "direct",
            user=user_text() if ns.prefix else f"uid {os.getuid()}, the host's user",
            seccomp=(
                seccomp.build(not no_sockets).detail
                if seccomp.build(not no_sockets).program
                else None
            ),
            notes=tuple(notes),
        )

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        workdir = host_folder(files)
        limit = spec.memory_limit_mb
        namespaced = bool(self._namespaces(spec).prefix)
        capped = cgroup.capped(limit)
        return WorkerConfig(
            memory_limit_bytes=limit * 1024 * 1024 if limit else None,
            cwd=str(spec.workspace) if spec.workspace and not namespaced else str(workdir),
            file_size_limit=file_size_limit(files),
            own_ipc=namespaced,
            own_userns=namespaced,
            **(
                local_config(spec, caps=True)
                if namespaced
                else seccomp_config(sockets=spec.network != "none" or network_cut_here())
            ),
            cover=self._covers(spec, workdir) if namespaced else (),
            mqueue=self._mqueue() if namespaced else None,
            # (the supervisor's cgroup path is the host's: it finds its counter itself)
            oom_counter="self" if capped else False,
            memory_cgroup=capped,
            hide=hidden_paths(self._needed(spec, workdir)) if namespaced else None,
            # This very interpreter: the worker's modules can go compiled.
            same_python=self._python(spec) == local_python(),
            # (the host's files are open to it: these are made read-only in its mount namespace)
            read_only=tuple(str(folder) for folder in spec.read_dirs) if namespaced else (),
        )

    @staticmethod
    def _mqueue() -> str:
        """Where the sandbox's POSIX message queues are mounted (for the one-shot clean-up):
        the host's /dev/mqueue folder where there is one, else in the sandbox's own /tmp."""
        return "/dev/mqueue" if os.path.isdir("/dev/mqueue") else MQUEUE_IN_TMP

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> PopenWorker:
        """``egress``: the folder of the host proxy's socket for this worker (network=[...]);
        the sandbox sees the host's paths, so it is reached where it is."""
        workdir = host_folder(files)
        ns = self._namespaces(spec)
        refused = None if ns.prefix else self.network_refusal(spec)
        if refused is not None:
            from rewyn_kernel.errors import ProviderUnavailableError

            raise ProviderUnavailableError(refused)
        self.refuse_root(ns)
        tmp = self.worker_tmp(workdir, name)  # real directories, whatever the code put there
        if spec.workdir is None and self.code_owner(spec) is not None:
            # (one given is shown to the code through an idmapped view)
            give(tmp.parent, identity())
            give(tmp, identity())
        env = spec.build_env()
        env.update(HOME=str(workdir), TMPDIR=str(tmp), REWYN_SANDBOX=name)
        env.update(spec.env)
        prefix = ns.argv(share_net=spec.network == "allow")
        argv = [*prefix, *worker_argv(self._python(spec))]
        # With namespaces, PopenWorker.kill signals unshare's process group; unshare's death
        # kills the namespace's first process (the supervisor, which runs no code and so cannot
        # be talked out of that), and its death the rest of the PID namespace. Without, the
        # supervisor is asked to end what it started first (it can find it: it is a subreaper).
        group = self.worker_cgroup(name, spec)
        farewell = 0.0 if prefix else FAREWELL_SECONDS
        fds = (setup_namespace(),) if identity().dedicated else ()
        mounts: list[HostMount] = []
        settings: LaunchSettings = {"egress": Egress(folder=str(egress))} if egress else {}
        # What each one-shot execution's process empties first: the worker's TMPDIR, and with
        # namespaces its own /tmp, /dev/shm, message queues and SysV IPC.
        shared = ("/tmp", "/dev/shm", self._mqueue()) if prefix else ()
        settings["clean"] = Clean(dirs=(*shared, str(tmp)), ipc=bool(prefix))
        cells = None
        try:
            if prefix:
                cells = workspace_cells(
                    spec,
                    identity().owner(),
                    host_root=identity().dedicated,
                    python=self._python(spec),
                )
            if cells is not None:
                settings["workspace"] = cells.first()
            given = self.workdir_view(spec)
            if given is not None:
                mounts.append(given)
                settings["binds"] = ((str(given.path), str(workdir)),)
        except BaseException:
            if cells is not None:
                cells.close()
            for mount in mounts:
                mount.remove()
            if group is not None:
                group.remove(0)
            raise
        # The worker owns the cgroups, the workspace and the host's mounts from here on (it
        # releases them even if it fails to start).
        return PopenWorker(
            argv,
            env,
            workdir,
            farewell=farewell,
            pass_fds=fds,
            cgroup=group,
            settings=settings,
            workspace=cells,
            # (the worker's TMPDIR goes with it: a long sandbox does not gather one per worker)
            on_close=[
                *(mount.remove for mount in mounts),
                lambda: remove_worker_tmp(workdir, name),
            ],
        )

    def refuse_root(self, ns: Namespaces) -> None:
        """As root, code runs only as a uid of its own, in a user namespace (``ns``): refuse
        where none can be had."""
        if identity().dedicated and not ns.prefix:
            from rewyn_kernel.errors import ProviderUnavailableError

            raise ProviderUnavailableError(
                "as root, the subprocess provider runs code only as a uid of its own, in a user "
                f"namespace: none can be had here ({ns.detail}); the code would be the "
                "host's root"
            )

    def workdir_view(self, spec: SandboxSpec) -> HostMount | None:
        """A root host's idmapped view of the ``workdir`` it was given (``root_workdir``),
        bound where the code sees it in the sandbox's mount namespace."""
        return root_workdir(spec)

    @staticmethod
    def worker_tmp(workdir: Path, name: str) -> Path:
        """The worker ``name``'s TMPDIR, ``.tmp/NAME`` in the scratch folder: a worker does
        not start with what another left there (a session's, what a one-shot's did after its
        spare was forked), nor shares its temporary files; each is emptied before every one-shot
        execution (``Clean``), and all go with the scratch folder."""
        return ensure_dir(ensure_dir(workdir, ".tmp"), name)

    def worker_cgroup(self, name: str, spec: SandboxSpec) -> cgroup.WorkerCgroup | None:
        """The worker's cgroups, where they can be had (``cgroup.for_worker``)."""
        return cgroup.for_worker(name, spec.memory_limit_mb, spec.pids_limit)

    def network_refusal(self, spec: SandboxSpec) -> str | None:
        """Why a sandbox of ``spec`` may not start without a network namespace (None: it may):
        an allow-list has no relay to go through; ``network="none"`` needs the seccomp filter
        that refuses sockets, unless the network is cut here already or the person gave that
        up (``allow_unenforced_network``)."""
        if spec.allow_list is not None:
            return (
                f"{self.name}: network=[...] cannot be enforced here (no network namespace for "
                "its proxy's relay): use network='none', or a host where bubblewrap or user "
                "namespaces work, or ContainerProvider"
            )
        if spec.network != "none" or network_cut_here() or self.allow_unenforced_network:
            return None
        found = seccomp.build(sockets=False)
        if found.program is not None:
            return None
        return (
            f"{self.name}: network='none' cannot be enforced here: no network namespace "
            f"({probe_namespaces().detail}) and no seccomp filter ({found.detail}); the sandbox "
            "does not start. SubprocessProvider(allow_unenforced_network=True) runs the code "
            "anyway, with the host's network"
        )

    def check(self) -> Sequence[CheckItem]:
        ns = probe_namespaces() if self.use_namespaces else None
        return [
            CheckItem("python", self.available, self.python),
            CheckItem(
                "namespaces",
                bool(ns and ns.prefix),
                ns.detail if ns else "turned off (namespaces=False)",
            ),
        ]

    def create(
        self, spec: SandboxSpec | None = None, *, listeners: Sequence[EventListener] = ()
    ) -> SubprocessSandbox:
        return SubprocessSandbox(self, spec or SandboxSpec(), listeners)

    def __repr__(self) -> str:
        return f"SubprocessProvider(python={self.python!r})"


class SubprocessSandbox(BaseSandbox):
    """A sandbox whose workers are local processes (see SubprocessProvider)."""
