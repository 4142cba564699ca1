"""The sandbox's user and cgroup namespaces, entered and bounded by its supervisor (ctypes)."""

from __future__ import annotations

import os

from .system import libc

USER_COUNTERS = (
    ("max_user_namespaces", 0),
    ("max_inotify_instances", 16),
    ("max_inotify_watches", 8192),
    ("max_fanotify_groups", 0),
    ("max_fanotify_marks", 0),
    ("max_cgroup_namespaces", 0),
    ("max_ipc_namespaces", 0),
    ("max_mnt_namespaces", 0),
    ("max_net_namespaces", 0),
    ("max_pid_namespaces", 0),
    ("max_time_namespaces", 0),
    ("max_uts_namespaces", 0),
)
"""The per-user counters of ``/proc/sys/user`` a sandbox's user namespace lowers for its code.
Each is counted for the code's user in every namespace up to the host's, against the host
user's limits too: without these, code could take all 128 of the host user's inotify
instances while its sandbox is open (and the person's editors and JupyterLab lose file
watching). No namespace of any kind may be made inside."""


def in_host_user_namespace() -> bool:
    """Whether this is the host's first user namespace (where a limit would be the machine's)."""
    try:
        with open("/proc/self/uid_map") as handle:
            return handle.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True


def limit_user_counters() -> str:
    """Lower this user namespace's per-user counters (``USER_COUNTERS``), as its root; refused
    in the host's first user namespace. Return "" when all took effect, else what did not."""
    if in_host_user_namespace():
        return "this is the host's user namespace"
    failed = []
    for name, value in USER_COUNTERS:
        path = "/proc/sys/user/" + name
        if not os.path.exists(path):
            continue  # (an older kernel: it has no such counter, and nothing to exhaust)
        try:
            with open(path, "w") as handle:
                handle.write("%d\n" % value)
        except OSError as exc:
            failed.append("%s (%s)" % (name, exc.strerror or exc))
    return ", ".join(failed)


def become_namespace_root() -> bool:
    """Take uid and gid 0 of this user namespace, with no supplementary groups (a root host
    starts its sandboxes as the host's root mapped to uid 1, which keeps its group 0). The
    capabilities held here are kept. True when it worked."""
    try:
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    except (OSError, AttributeError):
        return False
    return os.getuid() == 0


def new_cgroup_namespace() -> str:
    """Start a cgroup namespace rooted at this process's cgroups, for it and every process it
    forks after: "" when done, else why not."""
    import ctypes

    c = libc()
    if c is None:
        return "no libc"
    if int(c.unshare(0x02000000)) != 0:  # CLONE_NEWCGROUP
        return "unshare: " + os.strerror(ctypes.get_errno())
    return ""


def enter_user_namespace(mapping: str) -> str:
    """Move this process into a new user namespace, child of this one, and a new mount
    namespace that one owns; ``mapping`` (``"0 0 1"``: this namespace's root only) becomes its
    uid and gid map. A helper forked first, which stays here with this namespace's
    capabilities, writes the maps (a process may map only itself without them). Nothing but
    what ``mapping`` names is then mapped for this process and everything it forks; it holds
    every capability of the new namespaces. Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the helper: it never returns
        status = b"?"
        try:
            os.close(go_w)
            os.close(done_r)
            if os.read(go_r, 1) == b"1":
                for name in ("uid_map", "gid_map"):
                    with open("/proc/%d/%s" % (parent, name), "w") as handle:
                        handle.write(mapping + "\n")
                status = b"1"
        except BaseException as exc:
            status = ("!" + str(exc)).encode("utf-8", "replace")[:200]
        finally:
            try:
                os.write(done_w, status)
            finally:
                os._exit(0)
    os.close(go_r)
    os.close(done_w)
    clone_newns, clone_newuser = 0x00020000, 0x10000000
    why = ""
    try:
        if int(c.unshare(clone_newuser | clone_newns)) != 0:
            why = "unshare: " + os.strerror(ctypes.get_errno())
        os.write(go_w, b"0" if why else b"1")
        answer = os.read(done_r, 256)
        if not why and answer != b"1":
            why = "the helper could not write the map: " + answer[1:].decode("utf-8", "replace")
    finally:
        os.close(go_w)
        os.close(done_r)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
    if why:
        return why
    try:
        os.setgroups([])
    except OSError:
        pass
    return ""
