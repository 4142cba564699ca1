"""The bubblewrap provider: the subprocess provider's worker, in a minimal view of the host.

It shells out to ``bwrap`` (the package ``bubblewrap``; Flatpak's sandbox), as the container
provider shells out to docker. The code sees, read-only, only what runs it: ``/usr`` (and the
``/bin``, ``/lib``... that point there), the prefixes of the worker's Python (its venv and the
installation under it), and a few files of ``/etc`` that programs read and hold no secret. It
gets a fresh ``/proc`` and ``/dev``, a bounded ``/tmp``, its scratch directory (read-write, at
the host's path) and, with ``workspace``, the workspace through a view renewed after each
execution (host/workspace.py), and the ``read_dirs`` read-only. The
host's ``/home``, ``/root``, ``/run``, ``/var`` and every daemon socket are simply not there.

Every namespace is new (user, PID, network, IPC, UTS, cgroup, mount). The supervisor is the
namespace's first process (``--as-pid-1``: the code cannot kill it) and dies with the host
(its channel ends); it starts as root of its own user namespace, so it can mount the
overlay and a bounded ``/dev/shm`` there, forbids further user namespaces, and drops every
capability (bounding set included) and sets no-new-privileges before any code runs. The warm
worker and the fork per one-shot execution are the subprocess provider's.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import EGRESS_FOLDER, EGRESS_NOTE
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.host.base import BaseSandbox
from rewyn_kernel.runtime.host.views import HostMount, WorkspaceView
from rewyn_kernel.runtime.providers.base import CheckItem, SandboxFiles, worker_argv
from rewyn_kernel.runtime.providers.local import (
    cgroup,
    common_notes,
    file_size_limit,
    local_config,
    local_python,
    python_prefixes,
    root_workdir,
    seccomp,
    user_text,
    workspace_cells,
    workspace_note,
)
from rewyn_kernel.runtime.providers.local.files import LocalFiles, host_folder
from rewyn_kernel.runtime.providers.local.identity import identity, setup_namespace
from rewyn_kernel.runtime.providers.popen import LaunchSettings, PopenWorker
from rewyn_kernel.runtime.providers.stops import Column
from rewyn_kernel.runtime.worker.config import Clean, Egress, WorkerConfig

MEMORY_EVENTS = "/dev/rewyn-memory-events"
"""Where the code's supervisor reads its memory cgroup's OOM-kill counter (bound read-only)."""
TMP_MB = 64
"""The size of the sandbox's own ``/tmp`` (a tmpfs: it counts against memory)."""
ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "armbian-release",
    "crypto-policies",
    "debian_version",
    "fonts",
    "gai.conf",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "lsb-release",
    "matplotlibrc",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "pki/ca-trust",
    "pki/tls/certs",
    "protocols",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "timezone",
)
"""What of ``/etc`` the code sees (read-only): what libraries and tools read, no secrets (of
``ssl`` and ``pki``, the certificates only: a host run as root would show its private keys).
``passwd`` and ``group`` are made up for the sandbox; ``resolv.conf`` comes with the network.
The distribution's name files are there because tools read them and take only "not there" for an
answer (pip's ``distro`` reads ``debian_version``: where Landlock alone denies it, pip failed)."""
ETC_FOLDERS = (
    "/etc",
    *(
        "/etc/" + "/".join(name.split("/")[:depth])
        for name in ETC
        for depth in range(1, name.count("/") + 1)
    ),
)
"""The folders of ``/etc`` that its shown entries sit in, outermost first."""
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
MADE = ("/usr", "/etc", "/tmp", "/dev", "/proc", *(f"/{name}" for name in SYSTEM_LINKS))
"""What bwrap makes before the binds (their folders need no making)."""
"""Top-level directories that are links into ``/usr`` on merged-/usr systems, else real ones."""
_FILESYSTEM = (
    "a read-only view of /usr, the worker's Python and a few files of /etc; the scratch "
    "directory (cwd, HOME) read-write; its own /tmp, /proc and /dev; nothing else of the host"
)


@dataclass(frozen=True)
class Bubblewrap:
    """What ``bwrap`` can do on this machine, found by trying it once."""

    path: str | None
    works: bool
    """A sandbox with every namespace starts."""
    caps: bool
    """Its first process may keep capabilities inside its own user namespace (not where
    bwrap is setuid): the supervisor needs them for the overlay and ``/dev/shm``."""
    detail: str


def system_view() -> list[str]:
    """The bwrap arguments of the read-only system directories and ``/etc`` files."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    # bwrap makes the folders a bind needs with mode 0700, owned by the uid that sets the
    # sandbox up: where the code runs as a uid of its own (a root host), it could not even
    # look up /etc/hosts. So /etc and the folders of its nested entries are made first, open.
    for folder in dict.fromkeys(ETC_FOLDERS):
        argv += ["--perms", "0755", "--dir", folder]
    for name in ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return argv


@functools.cache
def probe_bubblewrap(path: str | None = None) -> Bubblewrap:
    """Whether ``bwrap`` (``path``, else the one on PATH) starts a sandbox here with every
    namespace, and whether its first process may keep capabilities (tried once per process)."""
    if not sys.platform.startswith("linux"):
        return Bubblewrap(None, False, False, f"bubblewrap is Linux-only (this is {sys.platform})")
    bwrap = path or shutil.which("bwrap")
    if bwrap is None:
        return Bubblewrap(None, False, False, "bwrap is not installed (the package bubblewrap)")
    true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
    fds: tuple[int, ...] = ()
    if identity().dedicated:
        try:
            fds = (setup_namespace(),)
        except OSError as exc:
            return Bubblewrap(bwrap, False, False, f"as root, no user namespace of its own: {exc}")
    base = [bwrap, *namespace_options(fds[0] if fds else None, share_net=False)]
    base += [*system_view(), "--proc", "/proc"]
    errors = []
    for extra, caps in ((["--uid", "0", "--gid", "0", "--cap-add", "ALL"], True), ([], False)):
        try:
            done = subprocess.run(
                [*base, *extra, true], capture_output=True, timeout=10, check=False, pass_fds=fds
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(str(exc))
            continue
        if done.returncode == 0:
            detail = "every namespace" + ("" if caps else "; no capabilities inside (setuid)")
            return Bubblewrap(bwrap, True, caps, detail)
        errors.append(done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}")
    return Bubblewrap(bwrap, False, False, "bwrap failed here: " + " | ".join(errors))


def namespace_options(userns: int | None, share_net: bool) -> list[str]:
    """bwrap's namespace options: every namespace new (the network's too unless
    ``share_net``); the user namespace ``userns`` (a descriptor: a root host's, see
    providers/local/identity.py) instead of one bwrap makes."""
    if userns is None:
        argv = ["--unshare-all"]
        return [*argv, "--share-net"] if share_net else argv
    argv = ["--userns", str(userns), "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv.append("--unshare-cgroup-try")
    return argv if share_net else [*argv, "--unshare-net"]


def ancestors(paths: Iterable[str], made: Sequence[str]) -> list[str]:
    """The folders on the way to ``paths`` that bwrap would make (not ``/`` nor ``made``, nor
    inside another of ``paths``), outermost first: made 0755 so that a code whose user does
    not own them (a root host's) may still pass through them."""
    wanted = [p.rstrip("/") for p in paths]
    found: set[str] = set()
    for path in wanted:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            inside = any(parent == w or parent.startswith(w + "/") for w in wanted)
            if parent not in made and not inside:
                found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda path: (path.count("/"), path))


class BubblewrapProvider:
    """Run each sandbox as a local process inside ``bwrap``: the host's files, sockets and
    processes out of reach. The default where bubblewrap works (see ``default_provider``)."""

    name = "bubblewrap"
    stops = Column.BUBBLEWRAP
    """What it stops, and what not: its column of the declared table (providers/stops)."""

    def __init__(self, python: str | None = None, *, bwrap: str | None = None) -> None:
        """``python``: interpreter for the worker (default ``sys.executable``; resolved by
        ``local_python``, as is a spec's ``python``); ``bwrap``: the bubblewrap binary
        (default: ``bwrap`` on PATH)."""
        self.python = local_python(python)
        self.bwrap = bwrap

    def probe(self) -> Bubblewrap:
        return probe_bubblewrap(self.bwrap)

    @property
    def available(self) -> bool:
        return self.probe().works and os.access(self.python, os.X_OK)

    def _python(self, spec: SandboxSpec) -> str:
        return local_python(spec.python) if spec.python else self.python

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        """A temporary folder of this host's (or the spec's ``workdir``), given to the code's
        uid where it is not this process's."""
        return LocalFiles.make(spec, sandbox_id, self.code_owner(spec))

    def code_owner(self, spec: SandboxSpec) -> tuple[int, int] | None:
        """The dedicated uid a root host's sandboxes run as (see providers/local/identity.py)."""
        return identity().owner()

    def isolation(self, spec: SandboxSpec) -> Isolation:
        found = self.probe()
        notes = list(common_notes())
        if not found.caps:
            notes.append(
                "bwrap is setuid here: no private /dev/shm, no overlay of the notebook's "
                "directory, and the code may create user namespaces of its own"
            )
        if spec.workspace is not None:
            notes.append(workspace_note(spec, in_sandbox=not identity().dedicated))
            if not found.caps:
                notes.append(
                    f"{spec.workspace} is read-write for the code (setuid bwrap: no view of it "
                    "of its own, so no earlier version is kept)"
                )
        network: Literal["isolated", "filtered", "allowed"] = "isolated"
        if spec.allow_list is not None:
            network = "filtered"
            notes.append(EGRESS_NOTE)
        elif spec.network == "allow":
            network = "allowed"
            notes.append(
                "network='allow' shares the host's network namespace, and with it the host's "
                "abstract Unix sockets (a D-Bus or X11 server listening on one answers)"
            )
        return Isolation(
            provider=self.name,
            files="isolated",
            network=network,
            pid_namespace=True,
            user_namespace=True,
            memory=cgroup.memory_text(spec.memory_limit_mb),
            pids=cgroup.pids_text(spec.pids_limit),
            filesystem=_FILESYSTEM,
            workspace=(None if spec.workspace is None else "versioned" if found.caps else "direct"),
            user=user_text(),
            seccomp=(seccomp.build().program and seccomp.build().detail) or None,
            notes=tuple(notes),
        )

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        workdir = host_folder(files)
        limit = spec.memory_limit_mb
        caps = self.probe().caps
        capped = cgroup.capped(limit)
        # (with caps, a workspace's path comes from the launch's ``workspace`` setting)
        direct = spec.workspace is not None and not caps
        return WorkerConfig(
            memory_limit_bytes=limit * 1024 * 1024 if limit else None,
            cwd=str(spec.workspace) if direct else str(workdir),
            file_size_limit=file_size_limit(files),
            own_ipc=caps,
            own_userns=caps,
            own_cgroupns=caps,
            **local_config(spec, caps),
            clean=Clean(dirs=("/tmp", "/dev/shm", "/dev/mqueue"), ipc=True),
            oom_counter=MEMORY_EVENTS if capped else False,
            memory_cgroup=capped,
            same_python=self._python(spec) == local_python(),
        )

    def bwrap_argv(
        self,
        spec: SandboxSpec,
        workdir: Path,
        name: str,
        view: WorkspaceView | None = None,
        given: HostMount | None = None,
        *,
        keep: Sequence[str] = (),
    ) -> list[str]:
        """The ``bwrap`` command line of one worker (the program comes on its stdin);
        ``view`` and ``given``: a root host's own views of ``spec.workspace`` and of the
        ``workdir`` it was given (host/views.py); ``keep``: what to bind again over the view's
        anchor (host/cells.py)."""
        found = self.probe()
        if not found.works or found.path is None:
            from rewyn_kernel.errors import ProviderUnavailableError

            raise ProviderUnavailableError(f"bubblewrap cannot run here: {found.detail}")
        python = self._python(spec)
        # No --die-with-parent: it is a parent-death signal, sent when the *thread* that
        # started bwrap ends (a session starts its spare worker from a short-lived thread).
        # The supervisor is what dies with the host: its channel ends, it exits, and as the
        # PID namespace's first process it takes every other process with it.
        # Nor --new-session: the sandbox stays in the process group Popen made for it (no
        # terminal is shared: its standard streams are pipes), so killing that group reaches
        # the supervisor, and the namespace goes with it.
        userns = setup_namespace() if identity().dedicated else None
        share_net = spec.network == "allow"
        argv = [found.path, *namespace_options(userns, share_net), "--as-pid-1"]
        if found.caps:  # (the supervisor drops them all before any code runs)
            argv += ["--uid", "0", "--gid", "0", "--cap-add", "ALL"]
        argv += ["--hostname", "sandbox", *system_view()]
        # /proc, /dev and /tmp first: what is bound below may live under /tmp (a venv, say).
        argv += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
        argv += ["--perms", "1777", "--size", str(TMP_MB * 1024 * 1024), "--tmpfs", "/tmp"]
        destinations = [*python_prefixes(python), str(workdir), *map(str, spec.read_dirs)]
        if spec.workspace is not None:
            destinations.append(str(spec.workspace))
        if spec.allow_list is not None:  # (the code may use the proxy's sockets itself)
            destinations.append(EGRESS_FOLDER)
        for folder in ancestors(destinations, MADE):
            argv += ["--perms", "0755", "--dir", folder]
        for prefix in python_prefixes(python):
            argv += ["--ro-bind", prefix, prefix]
        if share_net and os.path.exists("/etc/resolv.conf"):
            # (often a link into /run, which the code does not see: the file it names)
            argv += ["--ro-bind", os.path.realpath("/etc/resolv.conf"), "/etc/resolv.conf"]
        for shown in spec.read_dirs:  # (more of the host's folders, read-only by choice)
            argv += ["--ro-bind", str(shown), str(shown)]
        argv += ["--bind", str(given.path if given else workdir), str(workdir)]
        if spec.workspace is not None:
            folder = str(spec.workspace)
            # A root host's view is bound from its anchor (each execution's view then reaches
            # the sandbox: bwrap's binds are the host's mounts' slaves); elsewhere the folder
            # itself, under the view the supervisor's mounter mounts before any code runs.
            argv += ["--bind", str(view.anchor) if view is not None else folder, folder]
            for relative in keep:  # (until the first view covers the anchor: see cells.keep)
                inner = os.path.join(folder, relative)
                argv += ["--ro-bind", inner, inner]
        return argv

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> PopenWorker:
        """``egress``: the folder of the host proxy's socket for this worker (network=[...]),
        shown to the sandbox at EGRESS_FOLDER."""
        workdir = host_folder(files)
        env = spec.build_env()
        env.update(HOME=str(workdir), TMPDIR="/tmp", REWYN_SANDBOX=name)
        env.update(spec.env)
        settings: LaunchSettings = {}
        if egress is not None:
            settings["egress"] = Egress(folder=EGRESS_FOLDER)
        cells = None
        mounts: list[HostMount] = []
        group = None
        try:
            caps = self.probe().caps
            if caps:
                cells = workspace_cells(
                    spec,
                    identity().owner(),
                    host_root=identity().dedicated,
                    python=self._python(spec),
                )
            if cells is not None:
                first = cells.first()
                if cells.view is not None:
                    first = first.replace(bind=None, bound=True)  # (bwrap binds it)
                settings["workspace"] = first
            given = root_workdir(spec)
            mounts += [given] if given is not None else []
            view = cells.view if cells is not None else None
            keep = cells.keep if cells is not None else []
            argv = self.bwrap_argv(spec, workdir, name, view, given, keep=keep)
            group = cgroup.for_worker(name, spec.memory_limit_mb, spec.pids_limit)
            if group is not None and group.events is not None:
                argv += ["--ro-bind", str(group.events), MEMORY_EVENTS]  # (for the supervisor)
            users = _etc_users(str(workdir))
        except BaseException:
            if cells is not None:
                cells.close()
            for mount in mounts:
                mount.remove()
            if group is not None:
                group.remove(0)
            raise
        if egress is not None:  # (read-only: connecting to a socket is no write to its mount)
            argv += ["--ro-bind", str(egress), EGRESS_FOLDER]
        argv += ["--ro-bind-data", str(users[0]), "/etc/passwd"]
        argv += ["--ro-bind-data", str(users[1]), "/etc/group"]
        # The sandbox's root (a tmpfs bwrap made to hold the mount points) read-only last: the
        # code writes only where it was given room (scratch, /tmp, /dev/shm, the overlay).
        argv += ["--remount-ro", "/"]
        argv += worker_argv(self._python(spec))
        userns = (setup_namespace(),) if identity().dedicated else ()
        try:
            # Killing the process group (PopenWorker.kill) kills bwrap and the supervisor, the
            # PID namespace's first process: the kernel then kills the rest of it. The worker
            # owns the cgroups and the host's mounts from here on (it releases them even if it
            # fails to start).
            return PopenWorker(
                argv,
                env,
                workdir,
                pass_fds=(*users, *userns),
                cgroup=group,
                settings=settings,
                workspace=cells,
                on_close=[mount.remove for mount in mounts],
            )
        finally:
            for fd in users:
                os.close(fd)

    def check(self) -> Sequence[CheckItem]:
        found = self.probe()
        return [
            CheckItem("python", os.access(self.python, os.X_OK), self.python),
            CheckItem("bwrap", found.path is not None, found.path or found.detail),
            CheckItem("namespaces", found.works, found.detail),
            CheckItem(
                "capabilities inside",
                found.caps,
                "the supervisor mounts the overlay and /dev/shm"
                if found.caps
                else "none (setuid bwrap): no overlay, no private /dev/shm",
            ),
        ]

    def create(
        self, spec: SandboxSpec | None = None, *, listeners: Sequence[EventListener] = ()
    ) -> BubblewrapSandbox:
        return BubblewrapSandbox(self, spec or SandboxSpec(), listeners)

    def __repr__(self) -> str:
        return f"BubblewrapProvider(python={self.python!r})"


def _etc_users(home: str) -> tuple[int, int]:
    """Read ends of two pipes holding the sandbox's ``/etc/passwd`` and ``/etc/group`` (bwrap
    copies them in): its root, which the code runs as, and nobody; no user of the host's."""
    passwd = f"root:x:0:0:sandbox:{home}:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    group = "root:x:0:\nnogroup:x:65534:\n"
    fds = []
    for text in (passwd, group):
        read, write = os.pipe()
        with os.fdopen(write, "w") as pipe:  # (a few bytes: the pipe's buffer holds them)
            pipe.write(text)
        fds.append(read)
    return fds[0], fds[1]


class BubblewrapSandbox(BaseSandbox):
    """A sandbox whose workers run inside bwrap (see BubblewrapProvider)."""
