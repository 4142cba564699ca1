"""The landlock provider: a boundary that needs neither root, user namespaces nor cgroups.

Where bubblewrap cannot start (Ubuntu 24.04's AppArmor rule for user namespaces, a container's
default seccomp profile: JupyterHub, Binder, Codespaces, ``docker run`` of a notebook image,
``user.max_user_namespaces=0``), the subprocess provider's worker runs here under three
mechanisms an unprivileged process may apply to itself:

- **Landlock** (``worker/landlock.py``): the code opens nothing but the system's folders, the
  interpreter's, a few files of ``/etc``, ``/proc``, the device files programs use, its scratch
  folder (read-write) and the workspace and ``read_dirs`` (read-only). ``~/.ssh``, ``~/.aws``,
  Jupyter's runtime folder with every kernel's connection key, other users' files: refused, as
  is every TCP bind and connect (ABI 4). The supervisor restricts itself, and each code process
  once more, in a domain of its own: from ABI 6 it cannot signal or reach the abstract Unix
  sockets of any process outside (the supervisor, the host, the Jupyter server, the person's
  shell), and at every ABI it cannot ptrace them or read their memory or environment.
- **seccomp** (``local/seccomp.py``): the local providers' filter; with ``network="none"`` it
  refuses every new socket, so no network is reachable though the sandbox shares the host's.
- **rlimits and cgroups**: a memory cgroup and a pids cgroup where this process may make them
  (root); otherwise RLIMIT_AS per process and RLIMIT_NPROC over the user's tasks (see
  ``nproc_for``), which the isolation report names.

What it does not give, against bubblewrap: no network namespace (an allow-list still holds:
every ``connect()`` of the code is made by the supervisor's broker, to the proxy's relay; but
there is no loopback of its own), no PID namespace (``/proc`` lists the host's processes and
their command lines, though not their environment, memory or descriptors), no view of the
workspace (it is read-only to the code: without a mount namespace nothing could keep the
versions its writes would replace), and the host's ``/dev/shm``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import EGRESS_NOTE
from rewyn_kernel.runtime.host.views import HostMount
from rewyn_kernel.runtime.providers.base import CheckItem, SandboxFiles
from rewyn_kernel.runtime.providers.bubblewrap import ETC, SYSTEM_LINKS
from rewyn_kernel.runtime.providers.local import (
    LocalConfig,
    cgroup,
    common_notes,
    file_size_limit,
    local_python,
    python_prefixes,
    seccomp,
)
from rewyn_kernel.runtime.providers.local.cgroup import WorkerCgroup
from rewyn_kernel.runtime.providers.local.files import host_folder
from rewyn_kernel.runtime.providers.local.identity import identity
from rewyn_kernel.runtime.providers.stops import Column
from rewyn_kernel.runtime.providers.subprocess import (
    Namespaces,
    SubprocessProvider,
)
from rewyn_kernel.runtime.worker import landlock
from rewyn_kernel.runtime.worker.config import Landlock, WorkerConfig

SCOPED_ABI = 6
"""The ABI from which signals and abstract Unix sockets are kept to the sandbox's domain."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/ptmx")
"""The device files the code may read and write (a new pseudo-terminal through ``/dev/ptmx``,
for IPython's ``!command``; no existing terminal of the host's under ``/dev/pts``)."""
SHARED_WRITABLE = ("/dev/shm",)
"""The host's POSIX shared memory and semaphores (``multiprocessing`` needs them): read-write."""
READABLE = ("/proc", "/sys/devices/system/cpu", "/etc/passwd", "/etc/group")
"""Beside the system's folders: ``/proc`` (Landlock keeps other processes' sensitive entries
closed; the supervisor finds the code's processes there), the CPU list libraries size their
thread pools by, and the user tables (no secret: the hashes are in ``/etc/shadow``)."""


@dataclass(frozen=True)
class LandlockSupport:
    """What this host gives the provider, found once per process."""

    abi: int
    works: bool
    detail: str


@functools.cache
def probe_landlock() -> LandlockSupport:
    """Whether a landlock sandbox can start here: Linux, Landlock (ABI 1 or later; as root, 6,
    since the code then runs as uid 0 and only the scope keeps its signals in), and the seccomp
    filter that keeps ``network="none"``."""
    if not sys.platform.startswith("linux"):
        return LandlockSupport(0, False, f"Landlock is Linux-only (this is {sys.platform})")
    version = landlock.abi()
    if version < 1:
        return LandlockSupport(
            0,
            False,
            "this kernel has no Landlock (Linux 5.13 or later, with landlock in the lsm= boot "
            "list), or a seccomp filter refuses it",
        )
    if os.geteuid() == 0 and version < SCOPED_ABI:
        return LandlockSupport(
            version,
            False,
            f"Landlock ABI {version}: as root, the code would run as uid 0 and could signal the "
            f"host's root processes; ABI {SCOPED_ABI} (Linux 6.12) keeps its signals in",
        )
    found = seccomp.build(sockets=False, sysv_ipc=False)
    if found.program is None:
        return LandlockSupport(version, False, f"no seccomp filter: {found.detail}")
    return LandlockSupport(version, True, f"Landlock ABI {version}")


def abi_notes(version: int) -> list[str]:
    """What this kernel's Landlock ABI leaves out, in words."""
    notes = []
    if version < SCOPED_ABI:
        notes.append(
            f"Landlock ABI {version} (before 6, Linux 6.12): the code can signal the host's "
            "processes of the same user (the supervisor included) and connect to their abstract "
            "Unix sockets where network='allow'; it still cannot trace them or read their memory"
        )
    if version < 4:
        notes.append(f"Landlock ABI {version}: TCP is refused by the seccomp filter alone")
    if version < 3:
        notes.append(f"Landlock ABI {version}: truncating a readable file is not refused")
    return notes


def nproc_for(uid: int, pids: int, python: str | None = None) -> int:
    """RLIMIT_NPROC for the code where no pids cgroup bounds it: the tasks the user ``uid``
    runs now, plus ``pids``. The limit counts every task of the user on the host (threads
    included), not the sandbox's: the sandbox gets ``pids`` more than there are now, fewer if
    the user's other programs start more meanwhile.

    The tasks are those ``/proc`` lists, or, with ``python`` (an interpreter to run as this
    user), as many as the kernel counts if it counts more: in a container's PID namespace
    (JupyterHub's single-user pods all run as uid 1000 on one node), or under ``hidepid``,
    ``/proc`` shows only some of the tasks the limit counts, and a limit sized by it left the
    code no thread to start."""
    running = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            running += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    if python is not None and uid == os.getuid():
        running = max(running, counted_tasks(python))
    return running + pids


COUNT_TASKS = """
import os, resource
hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
def fits(limit):
    pid = os.fork()
    if pid == 0:
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, hard))
            if os.fork() == 0:
                os._exit(0)
            os.wait()
        except OSError:
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1] == 0
top = 1 << 24 if hard == resource.RLIM_INFINITY else hard
high = 64
while not fits(high):
    if high >= top:
        raise SystemExit("no fork fits under the hard limit")
    high = min(high * 4, top)
low = 1
while low < high:
    middle = (low + high) // 2
    if fits(middle):
        high = middle
    else:
        low = middle + 1
print(high - 3)
"""
"""Print how many tasks the kernel counts against this user's RLIMIT_NPROC, without this
probe's: the smallest limit under which one more fork succeeds, less that fork and the probe's
two processes (a binary search; a fork of a fork each step)."""


def counted_tasks(python: str) -> int:
    """The tasks of this process's user as the kernel counts them for RLIMIT_NPROC (``-1``
    if the probe fails; 0 or less where the limit binds nothing, as for root)."""
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", COUNT_TASKS],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return int(done.stdout) if done.returncode == 0 else -1
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return -1


class LandlockProvider(SubprocessProvider):
    """Run each sandbox as a local process confined by Landlock, seccomp and rlimits: no
    namespace, no root, no cgroup needed (see the module's docstring). The default where
    bubblewrap cannot start and Landlock is there (``factory.local_provider``)."""

    name = "landlock"
    stops = Column.LANDLOCK
    """What it stops, and what not: its column of the declared table (providers/stops)."""

    def __init__(self, python: str | None = None) -> None:
        """``python``: interpreter for the worker (default ``sys.executable``; resolved by
        ``local_python``, as is a spec's ``python``)."""
        super().__init__(python, namespaces=False)

    def probe(self) -> LandlockSupport:
        return probe_landlock()

    @property
    def available(self) -> bool:
        return self.probe().works and super().available

    def _namespaces(self, spec: SandboxSpec) -> Namespaces:
        return Namespaces((), False, "none: Landlock and seccomp instead")

    def code_owner(self, spec: SandboxSpec) -> tuple[int, int] | None:
        """None: the code runs as this process's user (as root, uid 0 without capabilities,
        which Landlock confines as any other)."""
        return None

    def network_refusal(self, spec: SandboxSpec) -> str | None:
        found = self.probe()
        if not found.works:
            return f"landlock: cannot run here: {found.detail}"
        if spec.allow_list is not None and seccomp.build_broker().program is None:
            return (
                "landlock: network=[...] cannot be enforced here: its connect() broker's filter "
                f"cannot be built ({seccomp.build_broker().detail}); use network='none'"
            )
        return None

    def workdir_view(self, spec: SandboxSpec) -> HostMount | None:
        """None: the code runs as this process's uid, which owns what it was given (and there
        is no mount namespace to bind a view in)."""
        return None

    def refuse_root(self, ns: Namespaces) -> None:
        """(Root runs here as uid 0 without capabilities, under Landlock: nothing to refuse.)"""

    def worker_cgroup(self, name: str, spec: SandboxSpec) -> WorkerCgroup | None:
        """Cgroups where this process may make them (root): the pids one too, since
        RLIMIT_NPROC counts the host user's tasks here, not the sandbox's."""
        memory = spec.memory_limit_mb
        limit = memory * 1024 * 1024 if memory is not None and cgroup.capped(memory) else None
        pids = spec.pids_limit if self._pids_cgroup(spec) else None
        if limit is None and pids is None:
            return None
        return cgroup.make(name, limit, pids)

    @staticmethod
    def _pids_cgroup(spec: SandboxSpec) -> bool:
        return spec.pids_limit is not None and cgroup.cgroup_support("pids").parent is not None

    def _read(self, spec: SandboxSpec) -> tuple[str, ...]:
        python = self._python(spec)
        system = ["/usr", *(f"/{name}" for name in SYSTEM_LINKS if not os.path.islink(f"/{name}"))]
        etc = [f"/etc/{name}" for name in ETC]
        if spec.network == "allow":
            etc.append("/etc/resolv.conf")
        read = [*system, *etc, *READABLE, *python_prefixes(python)]
        read += [str(folder) for folder in spec.read_dirs]
        if spec.workspace is not None:
            read.append(str(spec.workspace))
        return tuple(dict.fromkeys(read))

    def isolation(self, spec: SandboxSpec) -> Isolation:
        found = self.probe()
        notes = [*common_notes(), *abi_notes(found.abi)]
        if not found.works:
            notes.append(f"landlock cannot run here: {found.detail}")
        network: Literal["isolated", "filtered", "allowed", "not_isolated"] = "isolated"
        if spec.allow_list is not None:
            network = "filtered"
            notes.append(EGRESS_NOTE)
            notes.append(
                "no network namespace: every connect() the code makes is made by its supervisor, "
                "to the proxy's relay on the host's loopback, whatever address it names (a "
                "client that ignores the proxy variables reaches the proxy all the same, which "
                "refuses and records it); no other socket, no listen(), no UDP (names are "
                "resolved by the proxy)"
            )
        elif spec.network == "allow":
            network = "allowed"
            notes.append(
                "network='allow' shares the host's network, and the Unix sockets of the host's "
                "daemons that your user may use (docker's, D-Bus's) answer the code"
            )
        else:
            notes.append(
                "no network namespace: the seccomp filter refuses every new socket (Unix ones "
                "included; socketpair() works) and Landlock every TCP connection, so the code "
                "has no loopback of its own either"
            )
        if spec.workspace is not None:
            notes.append(
                f"the workspace {spec.workspace} is read-only to the code (no mount namespace: "
                "no view could keep the versions its writes would replace); its files go in its "
                "scratch folder"
            )
        notes.append(
            "no PID namespace: /proc lists the host's processes and their command lines (not "
            "their environment, memory or descriptors)"
        )
        notes.append("/dev/shm is the host's: POSIX shared memory is shared with your programs")
        who = identity()
        if who.dedicated:
            notes.append(
                "as root, the code runs as uid 0 without capabilities: the root-only files of "
                "/proc it may read (kpageflags, kpagecount) stay readable; run the host as "
                "another user to close them"
            )
        user = (
            "uid 0 without capabilities (the host runs as root; no user namespace for a uid of "
            "its own), in a Landlock domain of its own"
            if who.dedicated
            else f"uid {os.getuid()}, the host's user, in a Landlock domain of its own"
        )
        pids_text = None
        if spec.pids_limit is not None:
            support = cgroup.cgroup_support("pids")
            pids_text = (
                f"{spec.pids_limit} tasks (threads included) for all of a worker's processes (a "
                f"cgroup v{support.version} pids cgroup)"
                if self._pids_cgroup(spec)
                else f"RLIMIT_NPROC: {spec.pids_limit} tasks more than the user runs when the "
                "sandbox starts (the limit counts all of the user's tasks, not the sandbox's)"
            )
        filtered = self._filter(spec)
        return Isolation(
            provider=self.name,
            files="isolated",
            network=network,
            pid_namespace=False,
            user_namespace=False,
            memory=cgroup.memory_text(spec.memory_limit_mb),
            pids=pids_text,
            filesystem=(
                "Landlock: /usr, the worker's Python and a few files of /etc read-only; /proc; "
                "the scratch directory (cwd, HOME, TMPDIR) read-write; the workspace and "
                "read_dirs read-only; nothing else of the host"
            ),
            workspace=None if spec.workspace is None else "read_only",
            user=user,
            seccomp=filtered.detail if filtered.program else None,
            notes=tuple(notes),
        )

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        workdir = host_folder(files)
        limit = spec.memory_limit_mb
        capped = cgroup.capped(limit)
        allow = spec.network == "allow"
        brokered = spec.allow_list is not None
        program = self._filter(spec).program
        extra: LocalConfig = {"seccomp": program.hex()} if program else {}
        if spec.pids_limit is not None and not self._pids_cgroup(spec):
            extra["nproc"] = nproc_for(os.getuid(), spec.pids_limit, self._python(spec))
        rules = Landlock(
            read=self._read(spec),
            write=(str(workdir), *SHARED_WRITABLE),
            devices=DEVICES,
            tcp=not allow,
        )
        code_filter = seccomp.build_broker().program if brokered else None
        return WorkerConfig(
            memory_limit_bytes=limit * 1024 * 1024 if limit else None,
            cwd=str(spec.workspace) if spec.workspace else str(workdir),
            file_size_limit=file_size_limit(files),
            **extra,
            landlock=rules,
            broker=code_filter.hex() if code_filter else None,
            oom_counter="self" if capped else False,
            memory_cgroup=capped,
            same_python=self._python(spec) == local_python(),
        )

    @staticmethod
    def _filter(spec: SandboxSpec) -> seccomp.Filter:
        """The supervisor's filter: sockets only with ``network="allow"`` or an allow-list (whose
        code processes add the broker's own filter), no System V IPC (no IPC namespace)."""
        brokered = spec.allow_list is not None
        return seccomp.build(sockets=spec.network == "allow" or brokered, sysv_ipc=False)

    def check(self) -> Sequence[CheckItem]:
        found = self.probe()
        return [
            CheckItem("python", os.access(self.python, os.X_OK), self.python),
            CheckItem("landlock", found.works, found.detail),
        ]

    def __repr__(self) -> str:
        return f"LandlockProvider(python={self.python!r})"


__all__ = ["LandlockProvider", "LandlockSupport", "nproc_for", "probe_landlock"]
