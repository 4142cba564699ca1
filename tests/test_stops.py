"""The table of what each provider stops (``runtime/providers/stops/``) against reality.

From inside a real sandbox of each provider, the code attacks what the host planted for it (a
file of the person's, a secret in the host's environment, a loopback service, Unix sockets, a
process, the kernel's keyrings and io_uring, the host's ``/tmp`` and ``/dev/shm``) and leaves
something for the next one-shot execution. What it reaches is turned into a verdict, row by
row, and must be the verdict the table gives that provider here (each condition looked at on
this host). So a provider that changes, or a claim that changes, fails here. Then the README's
copy of the table and the documentation's rendering are checked against the source.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel import doctor
from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.providers import registry
from rewyn_kernel.runtime.providers.stops import (
    COLUMNS,
    ROWS,
    Cell,
    Column,
    Condition,
    Verdict,
    markdown,
    settle,
    stops_for,
)
from rewyn_kernel.runtime.providers.stops.__main__ import main
from rewyn_kernel.runtime.sandbox import SandboxProvider, SubprocessProvider

from .unprivileged import UID, UnprivilegedHost

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "python -m rewyn_kernel.runtime.providers.stops --markdown"
BY_KEY = {each.key: each for each in ROWS}
SECRET_VARIABLE = "REWYN_STOPS_SECRET"
REFUSED = {errno.EPERM, errno.ENOSYS}
"""What the seccomp filters (ours and the engines') answer to a system call they refuse."""

PROBE = textwrap.dedent(
    """
    import ctypes, json, os, socket
    planted = json.loads(%(planted)r)
    out = {}

    def attempt(action):
        try:
            action()
            return "reached"
        except OSError as exc:
            return exc.errno

    def read(path):
        return attempt(lambda: open(path, "rb").read(1))

    def connect(family, address):
        def go():
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(address)
        return attempt(go)

    out["open_file"] = read(planted["open_file"])
    out["private_file"] = read(planted["private_file"])
    out["env"] = os.environ.get(planted["variable"])
    out["tcp"] = connect(socket.AF_INET, ("127.0.0.1", planted["port"]))
    out["socket_elsewhere"] = connect(socket.AF_UNIX, planted["socket_elsewhere"])
    out["daemon_socket"] = (
        connect(socket.AF_UNIX, planted["daemon_socket"]) if planted["daemon_socket"] else None
    )
    pid = planted["pid"]
    try:
        out["cmdline"] = open("/proc/%%d/cmdline" %% pid, "rb").read().decode("utf-8", "replace")
    except OSError as exc:
        out["cmdline"] = exc.errno
    out["signal"] = attempt(lambda: os.kill(pid, 0))
    libc = ctypes.CDLL(None, use_errno=True)
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0): the host user's keyring
    done = libc.syscall(250, 0, -4, 0)
    out["keyctl"] = "reached" if done >= 0 else ctypes.get_errno()
    done = libc.syscall(425, 1, ctypes.create_string_buffer(120))  # io_uring_setup
    out["io_uring"] = "reached" if done >= 0 else ctypes.get_errno()
    out["kernel"] = os.uname().release
    out["host_tmp"] = read(planted["host_tmp"])
    out["host_shm"] = read(planted["host_shm"])
    print(json.dumps(out))
    """
)
LEAVE = textwrap.dedent(
    """
    import os, tempfile
    for folder in (tempfile.gettempdir(), "/dev/shm"):
        with open(os.path.join(folder, %(name)r), "w") as handle:
            handle.write("left")
    """
)
FIND = textwrap.dedent(
    """
    import json, os, tempfile
    print(json.dumps([
        os.path.exists(os.path.join(folder, %(name)r))
        for folder in (tempfile.gettempdir(), "/dev/shm")
    ]))
    """
)


def counted(reached: list[bool]) -> Verdict:
    """All of what was planted reached: not stopped; some: partly; none: stopped."""
    if all(reached):
        return Verdict.NOT_STOPPED
    return Verdict.PARTLY if any(reached) else Verdict.STOPPED


def judged_host_files(out: dict[str, Any], host: Host) -> Verdict:
    # (a file every user may read, and one only the host's user may)
    return counted([out["open_file"] == "reached", out["private_file"] == "reached"])


def judged_environment(out: dict[str, Any], host: Host) -> Verdict:
    return Verdict.NOT_STOPPED if out["env"] == host.secret else Verdict.STOPPED


def judged_network(out: dict[str, Any], host: Host) -> Verdict:
    return Verdict.NOT_STOPPED if out["tcp"] == "reached" else Verdict.STOPPED


def judged_sockets(out: dict[str, Any], host: Host) -> Verdict:
    # (a daemon's place, /run, and a socket open to everyone in a folder of the host's)
    if out["daemon_socket"] is None:
        pytest.skip("no folder where daemons keep sockets is writable here (/run, XDG_RUNTIME_DIR)")
    return counted([out["daemon_socket"] == "reached", out["socket_elsewhere"] == "reached"])


def judged_processes(out: dict[str, Any], host: Host) -> Verdict:
    seen = isinstance(out["cmdline"], str) and host.marker in out["cmdline"]
    # (in a PID namespace the number may name a process of the sandbox's own: not the host's)
    signalled = out["signal"] == "reached" and (seen or not isinstance(out["cmdline"], str))
    if signalled:
        return Verdict.NOT_STOPPED
    return Verdict.PARTLY if seen else Verdict.STOPPED


def judged_kernel(out: dict[str, Any], host: Host) -> Verdict:
    if out["keyctl"] not in REFUSED or out["io_uring"] not in REFUSED:
        return Verdict.NOT_STOPPED
    return Verdict.PARTLY if out["kernel"] == os.uname().release else Verdict.STOPPED


def judged_tmp(out: dict[str, Any], host: Host) -> Verdict:
    return counted([out["host_tmp"] == "reached", out["host_shm"] == "reached"])


def judged_one_shot(out: dict[str, Any], host: Host) -> Verdict:
    return counted(out["left"])


JUDGES: dict[str, Callable[[dict[str, Any], Host], Verdict]] = {
    "host_files": judged_host_files,
    "environment": judged_environment,
    "network_none": judged_network,
    "unix_sockets": judged_sockets,
    "other_processes": judged_processes,
    "kernel": judged_kernel,
    "tmp": judged_tmp,
    "one_shot": judged_one_shot,
}
"""The rows probed here, and how what the code reached becomes a verdict."""


@dataclass
class Host:
    """What a host planted for the code to attack (``planted``: what the probe is told), and
    each provider's findings there (one sandbox per provider for all the rows)."""

    planted: dict[str, Any]
    secret: str | None
    """The value of SECRET_VARIABLE in the host's environment (None: not set there)."""
    marker: str
    """The host's process's command line holds it."""
    found: dict[str, dict[str, Any]] = field(default_factory=dict)

    def probe(self, name: str, execute: Callable[[str], tuple[bool, str]]) -> dict[str, Any]:
        """What the code reached in the sandbox ``name`` whose ``execute`` runs a one-shot
        execution (its success and stdout); found once per name."""
        if name not in self.found:
            left = f"rewyn-stops-left-{uuid.uuid4().hex[:8]}"
            ok, stdout = execute(PROBE % {"planted": json.dumps(self.planted)})
            assert ok, stdout
            out: dict[str, Any] = json.loads(stdout)
            try:
                assert execute(LEAVE % {"name": left})[0]
                ok, stdout = execute(FIND % {"name": left})
                assert ok, stdout
                out["left"] = json.loads(stdout)
            finally:
                Path("/dev/shm", left).unlink(missing_ok=True)  # (the host's, where shared)
            self.found[name] = out
        return self.found[name]


def unix_listener(path: Path, owner: int | None) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    if owner is not None:
        os.chown(path, owner, owner)
    server.listen()  # (a connect completes in the kernel's backlog: nothing need accept)
    return server


def daemon_folder(tag: str) -> Path | None:
    """A folder where daemons keep their sockets (/run as root, else the user's runtime
    folder), or None where none is writable."""
    for base in ("/run", os.environ.get("XDG_RUNTIME_DIR", "")):
        if base and os.access(base, os.W_OK):
            folder = Path(base, f"rewyn-stops-{tag}")
            folder.mkdir(mode=0o755)
            return folder
    return None


@contextmanager
def planted(owner: int | None) -> Iterator[Host]:
    """Plant what the code attacks, for a host run by this process's user (``owner`` None) or
    by the ordinary uid ``owner`` (root plants for it): the person's files, one that every
    user may read and one that only its owner may (under HOME; where the host is root, whose
    home no other uid may pass, under /var/tmp); a secret in this process's environment (a
    host of its own has none); a loopback service; a Unix socket where daemons keep theirs and
    one elsewhere; a process of the person's; files in the host's /tmp and /dev/shm."""
    tag = uuid.uuid4().hex[:8]
    base = Path("/var/tmp") if os.geteuid() == 0 else Path.home()
    folder = base / f".rewyn-stops-{tag}"
    tmp = Path(f"/tmp/rewyn-stops-{tag}")
    shm = Path(f"/dev/shm/rewyn-stops-{tag}")
    marker = f"600.{int(tag, 16) % 10**6}"
    as_owner = (
        []
        if owner is None
        else ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups"]
    )
    with ExitStack() as stack:
        for made in (folder, tmp):
            made.mkdir(mode=0o755)
            made.chmod(0o755)
            stack.callback(shutil.rmtree, made, ignore_errors=True)
        stack.callback(shm.unlink, missing_ok=True)
        for path, mode in ((folder / "open.txt", 0o644), (folder / "private.txt", 0o600)):
            path.write_text("the person's file")
            path.chmod(mode)
            if owner is not None:
                os.chown(path, owner, owner)
        if owner is not None:
            os.chown(folder, owner, owner)
        for path in (tmp / "file", shm):
            path.write_text("the host's")
            path.chmod(0o644)
        daemons = daemon_folder(tag)
        if daemons is not None:
            stack.callback(shutil.rmtree, daemons, ignore_errors=True)
        servers = [unix_listener(folder / "socket", owner), socket.create_server(("127.0.0.1", 0))]
        if daemons is not None:
            servers.append(unix_listener(daemons / "socket", owner))
        for server in servers:
            stack.callback(server.close)
        sleeper = subprocess.Popen([*as_owner, "sleep", marker])
        stack.callback(sleeper.wait)
        stack.callback(sleeper.kill)
        secret = f"secret-{tag}" if owner is None else None
        if secret is not None:
            patch = stack.enter_context(pytest.MonkeyPatch.context())
            patch.setenv(SECRET_VARIABLE, secret)
        values = {
            "open_file": str(folder / "open.txt"),
            "private_file": str(folder / "private.txt"),
            "variable": SECRET_VARIABLE,
            "port": servers[1].getsockname()[1],
            "socket_elsewhere": str(folder / "socket"),
            "daemon_socket": str(daemons / "socket") if daemons is not None else None,
            "pid": sleeper.pid,
            "host_tmp": str(tmp / "file"),
            "host_shm": str(shm),
        }
        yield Host(values, secret, marker)


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    """What this process, the host of the sandboxes the tests make, planted."""
    with planted(None) as made:
        yield made


@pytest.fixture(scope="module")
def person() -> Iterator[Host]:
    """What a host run by an ordinary uid (tests/unprivileged.py) is attacked with."""
    with planted(UID if os.geteuid() == 0 else None) as made:
        yield made


def check(
    name: str,
    column: Column,
    key: str,
    *,
    given: dict[Condition, bool],
    host: Host,
    out: dict[str, Any],
) -> None:
    """The verdict the code earned in row ``key`` is the one ``column`` gives on that host."""
    settled = {each.row.key: each for each in settle(column, given)}[key]
    found = JUDGES[key](out, host)
    assert found is settled.verdict, (
        f"{name}, {settled.row.concern!r}: the table says {settled.verdict.value} "
        f"({settled.says}), the code in a sandbox found {found.value}: {json.dumps(out)}. "
        "Change the provider back, or the cell in rewyn_kernel/runtime/providers/stops/table.py "
        f"(then regenerate the README's table: {REGENERATE})"
    )


@pytest.mark.providers("bubblewrap", "landlock", "subprocess", "docker", "docker+runsc", "podman")
@pytest.mark.parametrize("key", list(JUDGES))
def test_what_the_code_reaches_is_what_the_table_says(
    provider: SandboxProvider, key: str, host: Host
) -> None:
    column = stops_for(provider)
    assert column is not None, f"{provider.name} declares no column of the table"

    def execute(code: str) -> tuple[bool, str]:
        done = box.execute(code)
        return done.ok, done.stdout if done.ok else str(done)

    if provider.name not in host.found:
        with create(provider=provider) as box:
            assert box.isolation.network == "isolated", box.isolation
            host.probe(provider.name, execute)
    out = host.found[provider.name]
    check(provider.name, column, key, given={}, host=host, out=out)


ORDINARY = {
    "bubblewrap": ("bubblewrap", False, Column.BUBBLEWRAP),
    "subprocess": ("subprocess", False, Column.SUBPROCESS),
    "subprocess-no-namespaces": ("subprocess-no-namespaces", False, Column.SUBPROCESS),
    "landlock": ("default", True, Column.LANDLOCK),
}
"""Sandboxes of a host run by an ordinary uid: the provider it asks for, whether it runs where
no user namespace can be had (the default there is landlock), and the column that holds."""


@pytest.mark.parametrize("key", [key for key in JUDGES if key != "environment"])
@pytest.mark.parametrize("kind", list(ORDINARY))
def test_what_the_code_reaches_from_an_ordinary_users_host(
    kind: str, key: str, person: Host
) -> None:
    """The cells that hold where the host is not root, or runs without namespaces. (The secret
    is left out: such a host starts with an environment of its own, without it.)"""
    provider, no_userns, column = ORDINARY[kind]
    namespaces = kind in ("bubblewrap", "subprocess")
    given = {Condition.ROOT: False, Condition.USER_NAMESPACES: namespaces}

    def execute(code: str) -> tuple[bool, str]:
        done = box.execute(code)
        return done["exit_code"] == 0, done["stdout"] if done["exit_code"] == 0 else str(done)

    if kind not in person.found:
        with UnprivilegedHost(provider, no_userns=no_userns) as box:
            assert box.isolation["provider"] == column.value, box.isolation
            assert box.isolation["network"] == "isolated", box.isolation
            person.probe(kind, execute)
    name = f"{kind}, the host an ordinary user's"
    check(name, column, key, given=given, host=person, out=person.found[kind])


def test_the_readme_holds_the_table_as_the_source_renders_it() -> None:
    text = (ROOT / "README.md").read_text()
    begin, end = "<!-- stops:begin -->\n", "<!-- stops:end -->"
    assert (text.count(begin), text.count(end)) == (1, 1), "README.md lost its stops markers"
    held = text.split(begin, 1)[1].split(end, 1)[0]
    assert held == markdown(), (
        "README.md's table of what each provider stops differs from its source "
        "(rewyn_kernel/runtime/providers/stops/table.py): paste between the stops markers what "
        f"`{REGENERATE}` prints"
    )


def test_the_command_prints_the_table_and_a_settled_column(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
    assert main(["--here", "gvisor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(ROWS)
    assert lines[0].startswith(f"{ROWS[0].concern}: stopped: ")


def test_every_built_in_provider_names_its_column() -> None:
    made = {name: registry.make(name) for name in registry.BUILTIN}
    assert {name: stops_for(each) for name, each in made.items()} == {
        "bubblewrap": Column.BUBBLEWRAP,
        "landlock": Column.LANDLOCK,
        "subprocess": Column.SUBPROCESS,
        "container": Column.RUNC,
    }
    assert stops_for(ContainerProvider(oci_runtime="runsc")) is Column.GVISOR
    assert stops_for(ContainerProvider(runtime="podman", oci_runtime="/usr/sbin/runc")) is (
        Column.RUNC
    )
    assert stops_for(object()) is None  # (a package's provider that declares none)


def test_the_table_is_whole_and_each_row_is_said_once() -> None:
    assert len({each.key for each in ROWS}) == len(ROWS)
    assert len({each.concern for each in ROWS}) == len(ROWS)
    assert all(len(each.cells) == len(COLUMNS) for each in ROWS)
    assert set(JUDGES) <= set(BY_KEY)
    for each in ROWS:  # (every verdict is said in words)
        assert all(cell.says and not cell.says.endswith(".") for cell in each.cells), each.key


def test_a_cell_with_a_condition_says_what_holds_otherwise() -> None:
    with pytest.raises(ValueError, match="otherwise"):
        Cell(Verdict.STOPPED, "as root", Condition.ROOT)
    with pytest.raises(ValueError, match="one line"):
        Cell(Verdict.STOPPED, "a | b")
    cell = Cell(Verdict.STOPPED, "cgroup", Condition.MEMORY_CGROUP, Verdict.PARTLY, "rlimit")
    assert cell.settle(True) == (Verdict.STOPPED, "cgroup")
    assert cell.settle(False) == (Verdict.PARTLY, "rlimit")


def test_every_condition_can_be_looked_at_here() -> None:
    for condition in Condition:
        assert isinstance(condition.holds(), bool), condition
        assert condition.explained
    assert Condition.ROOT.holds() is (os.geteuid() == 0)


def test_doctor_prints_what_the_chosen_provider_stops_here(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doctor.print_stops(SubprocessProvider())
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "   what subprocess stops here (subprocess's column, conditions settled):"
    for line, each in zip(lines[1:], settle(Column.SUBPROCESS), strict=True):
        assert line.split()[0] in ("stopped", "partly", "not")
        assert line.endswith(f"{each.row.concern}: {each.says}")
    doctor.print_stops(_NoColumn())
    assert "declares nothing" in capsys.readouterr().out


class _NoColumn(SubprocessProvider):
    """A provider that declares no column (a package's own, say)."""

    stops = None  # type: ignore[assignment]


def test_the_documentation_renders_every_row() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        rewyn_stops = importlib.import_module("rewyn_stops")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    table = rewyn_stops.table()
    body = [node for node in table.findall() if node.tagname == "row"]
    assert len(body) == len(ROWS) + 1  # (and the heading's)
    text = table.astext()
    for each in ROWS:
        for cell in each.cells:
            assert cell.says.replace("`", "") in text
    page = (ROOT / "docs" / "reference" / "providers.md").read_text()
    assert "```{rewyn-stops}" in page
