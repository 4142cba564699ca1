"""Linux process controls the standard library lacks (prctl, capset, mallopt), through ctypes.

Each returns whether it took effect, so the worker can say what it could not apply instead of
claiming it. Without ctypes (a stripped image) or off Linux, nothing here takes effect.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, List, Optional, Tuple

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
M_ARENA_MAX = -8

_libc: Optional[Any] = None


def libc() -> Optional[Any]:
    """The C library, or None where ctypes or Linux is missing."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        except Exception:
            _libc = False
    return _libc or None


def prctl(option: int, arg: int = 0) -> bool:
    c = libc()
    if c is None:
        return False
    try:
        return int(c.prctl(option, arg, 0, 0, 0)) == 0
    except Exception:
        return False


def set_dumpable(on: bool) -> bool:
    """Non-dumpable: processes without CAP_SYS_PTRACE cannot ptrace this one, read its memory or
    open its descriptors through /proc, even with the same uid."""
    return prctl(PR_SET_DUMPABLE, 1 if on else 0)


def dumpable() -> bool:
    c = libc()
    if c is None:
        return True
    try:
        return int(c.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 1
    except Exception:
        return True


def set_oom_score_adj(value: bytes) -> Optional[bytes]:
    """Set this process's ``oom_score_adj`` (raising it needs no privilege; lowering it back
    to where it was neither); return what it was, or None when it cannot be. A process that
    changed its user is not dumpable, so its /proc files are root's: it is made dumpable for
    the write (never the supervisor: only a code process calls this)."""
    was = dumpable()
    if not was:
        set_dumpable(True)
    try:
        with open("/proc/self/oom_score_adj", "rb") as handle:
            before = handle.read().strip()
        with open("/proc/self/oom_score_adj", "wb") as handle:
            handle.write(value)
        return before
    except OSError:
        return None
    finally:
        if not was:
            set_dumpable(False)


def set_subreaper() -> bool:
    """Orphaned descendants become this process's children, so they can be found and killed."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_death_signal(signum: int) -> bool:
    return prctl(PR_SET_PDEATHSIG, signum)


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


def read_only_proc_sys() -> str:
    """Make ``/proc/sys`` read-only in this mount namespace (as its root). The code runs as the
    root of the namespaces it was given (IPC, network: the sysctls of those check the writer's
    uid against their owner's root, not capabilities), so only the mount stops it. Return ""
    on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec = (
        1,
        2,
        4,
        8,
        32,
        4096,
        16384,
    )
    path = b"/proc/sys"
    if int(c.mount(path, path, None, ms_bind | ms_rec, None)) != 0:
        return "bind /proc/sys: " + os.strerror(ctypes.get_errno())
    flags = ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev | ms_noexec
    if int(c.mount(None, path, None, flags, None)) != 0:
        return "remount /proc/sys read-only: " + os.strerror(ctypes.get_errno())
    return ""


def proc_sys_writable() -> bool:
    """Whether anything under /proc/sys may still be written here (its mount is not read-only)."""
    try:
        return not os.statvfs("/proc/sys").f_flag & 1  # ST_RDONLY
    except OSError:
        return True


def set_no_new_privs() -> bool:
    return prctl(PR_SET_NO_NEW_PRIVS, 1)


def become(uid: int, gid: int, keep: Tuple[int, ...] = ()) -> bool:
    """Switch every uid and gid of this process to ``uid``:``gid`` (no supplementary groups),
    keeping the capabilities numbered in ``keep`` and nothing else. True when it worked."""
    try:
        if keep:
            prctl(PR_SET_KEEPCAPS, 1)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except (OSError, AttributeError):
        return False
    finally:
        prctl(PR_SET_KEEPCAPS, 0)
    return set_capabilities(keep) if keep else drop_capabilities()


def set_capabilities(caps: Tuple[int, ...]) -> bool:
    """Make ``caps`` this process's effective and permitted capabilities (no others)."""
    c = libc()
    if c is None:
        return False
    import ctypes

    mask = [0, 0]
    for cap in caps:
        mask[cap // 32] |= 1 << (cap % 32)
    header, data = _cap_structs()
    for index in (0, 1):
        data[index].effective = data[index].permitted = mask[index]
    try:
        return int(c.capset(ctypes.byref(header), data)) == 0
    except Exception:
        return False


def _cap_structs() -> Tuple[Any, Any]:
    """A capset header for this process and two zeroed data words (capabilities 0-63)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    return Header(LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()


def drop_capabilities() -> bool:
    """Drop every capability, now and for every program this process executes.

    The bounding set goes first (while CAP_SETPCAP is still held), so that even a uid 0 inside a
    user namespace regains nothing on execve; then the ambient, effective, permitted and
    inheritable sets. True when this process ends up holding no capability.
    """
    c = libc()
    if c is None:
        return _holds_no_capability()
    import ctypes

    for cap in range(64):
        if c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows
    c.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _cap_structs()
    try:
        c.capset(ctypes.byref(header), data)
    except Exception:
        pass
    return _holds_no_capability()


def holds_capabilities() -> bool:
    """Whether this process holds (or may hold) any capability: True when it cannot tell."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("CapEff:", "CapPrm:")) and int(line.split()[1], 16) != 0:
                    return True
        return False
    except (OSError, ValueError):
        return True


def _holds_no_capability() -> bool:
    """No capability held now or regained by executing a program (the bounding set may keep
    some where no-new-privileges makes it moot: it only limits what execve could grant)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                held = line.startswith(("CapEff:", "CapPrm:", "CapInh:", "CapAmb:"))
                if held and int(line.split()[1], 16) != 0:
                    return False
        return True
    except (OSError, ValueError):
        return False


def limit_sysv_ipc(limit_bytes: Optional[int]) -> bool:
    """In a fresh IPC namespace (as its root): bound SysV shared memory to ``limit_bytes`` in
    all, and message queues to a few. The segments die with the namespace."""
    values = {"msgmni": 16}
    if limit_bytes:
        values.update(shmmax=limit_bytes, shmall=max(1, limit_bytes // 4096), shmmni=64)
    ok = True
    for name, value in values.items():
        try:
            with open("/proc/sys/kernel/" + name, "w") as handle:
                handle.write(str(value))
        except OSError:
            ok = False
    return ok


def remove_sysv_shm() -> int:
    """Remove every SysV shared memory segment this process may remove; return how many."""
    c = libc()
    if c is None:
        return 0
    removed = 0
    try:
        with open("/proc/sysvipc/shm") as table:
            next(table, None)
            ids = [int(line.split()[1]) for line in table if line.strip()]
    except (OSError, ValueError, IndexError):
        return 0
    ipc_rmid = 0
    for shmid in ids:
        try:
            if int(c.shmctl(shmid, ipc_rmid, None)) == 0:
                removed += 1
        except Exception:
            pass
    return removed


def private_tmpfs(path: str, limit_bytes: Optional[int]) -> bool:
    """Mount a fresh tmpfs at ``path`` in this mount namespace (as its root): POSIX shared
    memory then lives, bounded, in the sandbox and goes with it."""
    c = libc()
    if c is None:
        return False
    size = ",size=%d" % limit_bytes if limit_bytes else ""
    options = ("mode=1777" + size).encode()
    ms_nosuid, ms_nodev = 2, 4
    try:
        return int(c.mount(b"tmpfs", path.encode(), b"tmpfs", ms_nosuid | ms_nodev, options)) == 0
    except Exception:
        return False


def hide(dirs: List[str], files: List[str]) -> List[str]:
    """Cover ``dirs`` with an empty, bounded tmpfs and ``files`` with /dev/null in this mount
    namespace (as its root): the daemon sockets there (docker, containerd, podman, D-Bus) are
    then out of the code's reach, which a network namespace does not give. A file the host's
    /etc/resolv.conf names under a hidden directory is put back, read-only (DNS, where the
    network is allowed). Return what could not be hidden, in words."""
    c = libc()
    if c is None:
        return ["no ctypes here"]
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind = 1, 2, 4, 8, 32, 4096
    kept = []  # (descriptor, path) of what resolv.conf needs, opened before it is covered
    resolv = os.path.realpath("/etc/resolv.conf")
    for path in dirs:
        if resolv.startswith(path.rstrip("/") + "/") and os.path.isfile(resolv):
            try:
                kept.append((os.open(resolv, os.O_RDONLY | os.O_CLOEXEC), resolv))
            except OSError:
                pass
    failed = []
    covered = []
    flags = ms_nosuid | ms_nodev | ms_noexec
    for path in dirs:
        if int(c.mount(b"tmpfs", path.encode(), b"tmpfs", flags, b"size=1m,mode=755")) != 0:
            failed.append("%s (%s)" % (path, os.strerror(ctypes.get_errno())))
        else:
            covered.append(path.rstrip("/") + "/")
    for fd, path in kept:
        try:
            if not path.startswith(tuple(covered)):
                continue  # (its directory is the host's still: nothing to put back)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # A mount point in the fresh tmpfs; O_EXCL: never truncate a file that is there.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            source = ("/proc/self/fd/%d" % fd).encode()
            if int(c.mount(source, path.encode(), None, ms_bind, None)) == 0:
                c.mount(None, path.encode(), None, ms_remount | ms_bind | ms_rdonly, None)
        except OSError:
            pass
        finally:
            os.close(fd)
    for path in files:
        if int(c.mount(b"/dev/null", path.encode(), None, ms_bind, None)) != 0:
            failed.append("%s (%s)" % (path, os.strerror(ctypes.get_errno())))
    return failed


def overlay(source: str, upper: str, work: str) -> str:
    """Mount an overlay over ``source`` (as root of this mount namespace): its files read-only
    below, writes going to ``upper``. Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    for extra in (",userxattr", ""):  # (userxattr: in a user namespace; unknown before 5.11)
        options = "lowerdir=%s,upperdir=%s,workdir=%s%s" % (source, upper, work, extra)
        try:
            done = int(c.mount(b"overlay", source.encode(), b"overlay", 0, options.encode()))
        except Exception as exc:
            return str(exc)
        if done == 0:
            return ""
        number = ctypes.get_errno()
        if number == errno.EBUSY:
            return "busy"
    return os.strerror(number)


def one_malloc_arena() -> None:
    """Under an address-space cap, use one malloc arena: glibc reserves 64 MiB of address space
    for each thread that allocates, so three threads would use up most of a 256 MiB cap."""
    c = libc()
    if c is not None:
        try:
            c.mallopt(M_ARENA_MAX, 1)
        except Exception:
            pass


def cover(directory: str, keep: List[str], mode: int, limit_bytes: Optional[int]) -> str:
    """Mount a fresh tmpfs (``mode``, at most ``limit_bytes``) over ``directory`` in this mount
    namespace (as its root), then put each path of ``keep`` under it back where it was, bound
    from a descriptor opened first: a private ``/tmp`` that still holds the scratch directory,
    or a ``/root`` the code cannot enter, opened down to the interpreter. The folders made on
    the way are 0755. Return "" on success, else why not (nothing is covered then)."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_nosuid, ms_nodev, ms_bind, ms_rec = 2, 4, 4096, 16384
    inside = directory.rstrip("/") + "/"
    opened = []
    try:
        for path in sorted(set(keep)):
            if path.startswith(inside):
                opened.append((os.open(path, os.O_PATH | os.O_CLOEXEC), path))
    except OSError as exc:
        for fd, _ in opened:
            os.close(fd)
        return "%s: %s" % (exc.filename, exc.strerror)
    try:
        size = ",size=%d" % limit_bytes if limit_bytes else ""
        options = ("mode=%o%s" % (mode, size)).encode()
        flags = ms_nosuid | ms_nodev
        if int(c.mount(b"tmpfs", directory.encode(), b"tmpfs", flags, options)) != 0:
            return "mount a tmpfs on %s: %s" % (directory, os.strerror(ctypes.get_errno()))
        for fd, path in opened:
            parent = os.path.dirname(path)
            os.makedirs(parent, 0o755, exist_ok=True)
            if os.path.isdir("/proc/self/fd/%d" % fd):
                os.makedirs(path, 0o755, exist_ok=True)
            elif not os.path.exists(path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            source = ("/proc/self/fd/%d" % fd).encode()
            if int(c.mount(source, path.encode(), None, ms_bind | ms_rec, None)) != 0:
                return "bind %s back: %s" % (path, os.strerror(ctypes.get_errno()))
    except OSError as exc:
        return "%s: %s" % (exc.filename or directory, exc.strerror)
    finally:
        for fd, _ in opened:
            os.close(fd)
    return ""


def unreachable_ancestor(path: str, uid: int, gid: int) -> Optional[str]:
    """The outermost directory on the way to ``path`` that ``uid``:``gid`` (with no other
    group, and no capability) may not enter, or None when it may enter them all."""
    import stat as stat_module

    parts = [part for part in os.path.abspath(path).split("/") if part]
    current = ""
    for part in parts[:-1]:
        current += "/" + part
        try:
            info = os.stat(current)
        except OSError:
            return None  # (gone: nothing to open up)
        if not stat_module.S_ISDIR(info.st_mode):
            return None
        if info.st_uid == uid:
            bit = stat_module.S_IXUSR
        elif info.st_gid == gid:
            bit = stat_module.S_IXGRP
        else:
            bit = stat_module.S_IXOTH
        if not info.st_mode & bit:
            return current
    return None


def mount_mqueue(path: str) -> bool:
    """Mount this IPC namespace's POSIX message queue filesystem on ``path`` (an existing
    directory), so the queues left by one execution can be listed and removed."""
    c = libc()
    if c is None:
        return False
    if path.startswith("/tmp/"):  # (the sandbox's own /tmp: a folder may be made there)
        try:
            os.makedirs(path, 0o755, exist_ok=True)
        except OSError:
            return False
    if not os.path.isdir(path):
        return False
    ms_nosuid, ms_nodev, ms_noexec = 2, 4, 8
    flags = ms_nosuid | ms_nodev | ms_noexec
    try:
        return int(c.mount(b"mqueue", path.encode(), b"mqueue", flags, None)) == 0
    except Exception:
        return False


def load_seccomp(program: bytes) -> str:
    """Load ``program``, a compiled seccomp filter (an array of ``struct sock_filter``, as
    libseccomp exports it), into this process and every process it forks after. It needs
    no-new-privileges (set first). Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    if not program or len(program) % 8:
        return "the filter is not a whole number of BPF instructions"
    pr_set_seccomp, seccomp_mode_filter = 22, 2

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    set_no_new_privs()
    if int(c.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0)) != 0:
        return "prctl(PR_SET_SECCOMP): " + os.strerror(ctypes.get_errno())
    return ""


def seccomp_mode() -> int:
    """This process's seccomp mode (0 none, 1 strict, 2 filter), from /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def remove_sysv_ipc() -> int:
    """Remove every SysV shared memory segment, message queue and semaphore set this process
    may remove (this IPC namespace's, made by the same user); return how many."""
    c = libc()
    if c is None:
        return 0
    removed = 0
    ipc_rmid = 0
    for table, call, extra in (
        ("shm", "shmctl", ()),
        ("msg", "msgctl", ()),
        ("sem", "semctl", (0,)),
    ):
        try:
            with open("/proc/sysvipc/" + table) as handle:
                next(handle, None)
                ids = [int(line.split()[1]) for line in handle if line.strip()]
        except (OSError, ValueError, IndexError):
            continue
        function = getattr(c, call)
        for ident in ids:
            try:
                if int(function(ident, *extra, ipc_rmid, None)) == 0:
                    removed += 1
            except Exception:
                pass
    return removed


def empty_directory(path: str, keep: List[str]) -> List[str]:
    """Remove everything in the directory ``path`` (links are removed, never followed), but the
    paths of ``keep`` and the folders on the way to them. Return what could not be removed."""
    import stat as stat_module

    failed: List[str] = []
    keep_set = set(p.rstrip("/") for p in keep)
    ancestors = set()
    for kept in keep_set:
        parent = os.path.dirname(kept)
        while parent and parent != "/" and parent not in ancestors:
            ancestors.add(parent)
            parent = os.path.dirname(parent)

    def empty(dir_fd: int, where: str) -> None:
        try:
            names = os.listdir(dir_fd)
        except OSError:
            failed.append(where)
            return
        for name in names:
            full = where.rstrip("/") + "/" + name
            if full in keep_set:
                continue
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat_module.S_ISDIR(info.st_mode):
                    os.unlink(name, dir_fd=dir_fd)
                    continue
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    inner = os.open(name, flags, dir_fd=dir_fd)
                except PermissionError:
                    # (a folder the code made unreadable; nothing else runs now to swap it
                    # for a link, and it was not one a moment ago)
                    os.chmod(name, 0o700, dir_fd=dir_fd)
                    inner = os.open(name, flags, dir_fd=dir_fd)
                try:
                    if os.fstat(inner).st_dev != os.fstat(dir_fd).st_dev:
                        continue  # a mount point: not ours to empty
                    try:
                        os.fchmod(inner, 0o700)
                    except OSError:
                        pass
                    empty(inner, full)
                finally:
                    os.close(inner)
                if full not in ancestors:
                    os.rmdir(name, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            except OSError:
                failed.append(full)

    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        empty(top, path)
    finally:
        os.close(top)
    return failed


def bind(source: str, target: str) -> str:
    """Bind ``source`` (and the mounts under it) on ``target`` in this mount namespace (as its
    root). Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_bind, ms_rec = 4096, 16384
    if int(c.mount(source.encode(), target.encode(), None, ms_bind | ms_rec, None)) != 0:
        return "bind %s on %s: %s" % (source, target, os.strerror(ctypes.get_errno()))
    return ""


def overlay_at(target: str, lower: str, upper: str, work: str) -> str:
    """Mount an overlay on ``target`` (as root of this mount namespace): ``lower`` read-only
    below, writes going to ``upper``. Return "" on success, else why not."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_nosuid, ms_nodev = 2, 4
    number = 0
    for extra in (",userxattr", ""):  # (userxattr: in a user namespace; unknown before 5.11)
        options = "lowerdir=%s,upperdir=%s,workdir=%s%s" % (lower, upper, work, extra)
        done = int(
            c.mount(b"overlay", target.encode(), b"overlay", ms_nosuid | ms_nodev, options.encode())
        )
        if done == 0:
            return ""
        number = ctypes.get_errno()
    return "overlay on %s: %s" % (target, os.strerror(number))


def unmount(target: str) -> None:
    """Lazily unmount what is mounted on ``target`` (what still uses it keeps it)."""
    c = libc()
    if c is not None:
        c.umount2(target.encode(), 2)  # MNT_DETACH


def cover_view(top: str, protected: List[str]) -> str:
    """Over a workspace view at ``top``: make each protected path (relative) read-only (the
    store is hidden by a whiteout in the upper folder). Return "" or what failed."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_remount, ms_bind, ms_rec = 1, 32, 4096, 16384
    failed = []
    for relative in protected:
        path = os.path.join(top, relative)
        if os.path.islink(path) or not os.path.exists(path):
            continue
        raw = path.encode()
        if int(c.mount(raw, raw, None, ms_bind | ms_rec, None)) != 0:
            failed.append("%s (%s)" % (relative, os.strerror(ctypes.get_errno())))
            continue
        if int(c.mount(None, raw, None, ms_remount | ms_bind | ms_rdonly, None)) != 0:
            failed.append("%s (%s)" % (relative, os.strerror(ctypes.get_errno())))
    return "could not protect: " + ", ".join(failed) if failed else ""


def remount_bind_read_only(target: str) -> str:
    """Make the bind mount on ``target`` read-only (that mount only)."""
    c = libc()
    if c is None:
        return "no ctypes here"
    import ctypes

    ms_rdonly, ms_nosuid, ms_nodev, ms_remount, ms_bind = 1, 2, 4, 32, 4096
    flags = ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev
    if int(c.mount(None, target.encode(), None, flags, None)) != 0:
        return "remount %s read-only: %s" % (target, os.strerror(ctypes.get_errno()))
    return ""
