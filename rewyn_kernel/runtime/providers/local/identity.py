"""Who the code runs as on the host: never its root.

A user namespace maps the ids inside it to the host's. Run by an ordinary user, bubblewrap and
``unshare`` map the sandbox's uid 0 to that user, which is what the code should be. Run by root
(CI, a container holding the docker socket, a root JupyterHub) they map it to the host's uid 0:
code without a single capability, under no-new-privileges, is then still the host's root to
every check that compares ids instead of capabilities (``/proc/sys`` files, for one: writing
``kernel.core_pattern`` runs a program of the code's as root, outside every namespace).

So as root the local providers start each sandbox in a user namespace made here instead, whose
root is a dedicated unprivileged uid (``SANDBOX_UID``) and which maps the host's root to uid 1,
for the start only: bubblewrap (``--userns``) and ``unshare`` set the sandbox up as that uid 1,
able to reach what they bind (the interpreter under ``/root``, a notebook in a 0700 folder). The
supervisor then becomes the namespace's root (the dedicated uid) and, before any code runs,
moves itself into a namespace of its own that maps nothing else (``worker/namespaces.py``
``enter_user_namespace``): the code's user namespace holds no id of the host's root at all.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass

SANDBOX_UID = 65432
"""The host uid (and gid) a root host's sandboxes run as: in the range Debian reserves and no
distribution allocates (65000-65533), so no account of the machine owns it. ``$REWYN_SANDBOX_UID``
names another where this one is taken."""
HOST_ROOT_INSIDE = 1
"""The uid the host's root has in the set-up namespace (only until the supervisor leaves it)."""


@dataclass(frozen=True)
class Identity:
    """How the code of a local sandbox is mapped to the host."""

    uid: int
    """The host uid the code runs as."""
    gid: int
    dedicated: bool
    """The host runs as root: the code runs as the dedicated ``SANDBOX_UID``."""

    def owner(self) -> tuple[int, int] | None:
        """The uid and gid that must own what the code writes to (its scratch directory),
        where that is not the host's own user."""
        return (self.uid, self.gid) if self.dedicated else None


def sandbox_uid() -> int:
    """The dedicated uid: ``$REWYN_SANDBOX_UID`` if set, else ``SANDBOX_UID``; one that an
    account of this machine holds is refused (its files would be the code's)."""
    raw = os.environ.get("REWYN_SANDBOX_UID", "")
    uid = int(raw) if raw.isdigit() else SANDBOX_UID
    if uid in (0, 65534) or uid > 2**31 - 2:
        raise OSError(f"REWYN_SANDBOX_UID={uid} cannot be a sandbox's uid")
    with contextlib.suppress(KeyError):
        account = pwd.getpwuid(uid).pw_name
        raise OSError(
            f"uid {uid} belongs to the account {account!r}: sandboxes need a uid of their own "
            "(set REWYN_SANDBOX_UID to an unused one)"
        )
    return uid


def host_root() -> bool:
    """Whether this process is the host's root: uid 0 of the machine's first user namespace
    (the one that maps every id to itself), not merely uid 0 of a namespace of its own, as code
    inside a sandbox is."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as handle:
            return handle.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True  # (no /proc: assume the worst, and keep the code off uid 0)


def identity() -> Identity:
    """Who the code of a bubblewrap or subprocess sandbox started by this process runs as."""
    if not host_root():
        return Identity(os.getuid(), os.getgid(), dedicated=False)
    uid = sandbox_uid()
    return Identity(uid, uid, dedicated=True)


def setup_namespace() -> int:
    """A user namespace whose root is the dedicated uid and where the host's root is uid 1:
    a descriptor of it, for ``bwrap --userns`` and ``nsenter --user`` (made once per process;
    each sandbox's supervisor leaves it for one of its own). Raise OSError saying why not."""
    mapping = f"0 {sandbox_uid()} 1\n{HOST_ROOT_INSIDE} 0 1\n"
    return _namespace(mapping, mapping)


def idmap_namespace(code: tuple[int, int] | None = None, owner: tuple[int, int] = (0, 0)) -> int:
    """A user namespace that maps ``owner``'s uid and gid (the person's whose folder is shown;
    default root) to the code's (default: the dedicated uid) and nothing else: the mapping of
    an idmapped mount that shows the owner's files as the code's (host/views.py)."""
    uid, gid = code if code is not None else (sandbox_uid(), sandbox_uid())
    return _namespace(f"{owner[0]} {uid} 1\n", f"{owner[1]} {gid} 1\n")


@functools.cache
def _namespace(uid_map: str, gid_map: str) -> int:
    if not host_root():
        raise OSError("only a root host makes the sandboxes' user namespaces")
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    # A process that only waits: it creates the namespace, says so on stdout, and holds it
    # until its stdin closes; root may write any mapping into a child namespace.
    script = "echo ready && exec cat"
    try:
        holder = subprocess.Popen(
            [unshare, "--user", "/bin/sh", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
    except OSError as exc:
        raise OSError(f"cannot start unshare (util-linux) to make a user namespace: {exc}") from exc
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        if holder.stdout.readline() != b"ready\n":
            why = holder.stderr.read().decode("utf-8", "replace").strip() if holder.stderr else ""
            raise OSError(f"unshare --user failed: {why or 'no namespace'}")
        for name, mapping in (("uid_map", uid_map), ("gid_map", gid_map)):
            with open(f"/proc/{holder.pid}/{name}", "w") as handle:
                handle.write(mapping)
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.stdin.close()
        holder.wait(10)
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()


def give(path: os.PathLike[str] | str, who: Identity) -> None:
    """Hand ``path`` (a directory this process made for the sandbox) to the code's uid,
    never through a link."""
    owner = who.owner()
    if owner is None:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if (os.fstat(fd).st_uid, os.fstat(fd).st_gid) != owner:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
