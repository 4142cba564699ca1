"""The table of what each provider stops (``runtime/providers/stops.py``) against reality.

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
    main,
    markdown,
    settle,
    stops_for,
)
from rewyn_kernel.runtime.sandbox import SandboxProvider, SubprocessProvider

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
    """What the host planted for the code to attack, and each provider's findings (one
    sandbox per provider for every row)."""

    planted: dict[str, Any]
    secret: str
    marker: str
    found: dict[str, dict[str, Any]] = field(default_factory=dict)

    def probe(self, provider: SandboxProvider) -> dict[str, Any]:
        if provider.name not in self.found:
            name = f"rewyn-stops-left-{uuid.uuid4().hex[:8]}"
            with create(provider=provider) as box:
                assert box.isolation.network == "isolated", box.isolation
                done = box.execute(PROBE % {"planted": json.dumps(self.planted)})
                assert done.ok, done
                out: dict[str, Any] = json.loads(done.stdout)
                assert box.execute(LEAVE % {"name": name}).ok
                found = box.execute(FIND % {"name": name})
                assert found.ok, found
                out["left"] = json.loads(found.stdout)
            Path("/dev/shm", name).unlink(missing_ok=True)  # (the host's, where it is shared)
            self.found[provider.name] = out
        return self.found[provider.name]


def unix_listener(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen()
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


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    """The person's files (in a folder under HOME; as root, whose home no other uid may pass,
    under /var/tmp), a secret in the environment, a loopback service, two Unix sockets, a
    process, and files in the host's /tmp and /dev/shm."""
    tag = uuid.uuid4().hex[:8]
    base = Path("/var/tmp") if os.geteuid() == 0 else Path.home()
    folder = base / f".rewyn-stops-{tag}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "open.txt").write_text("anyone may read this")
    (folder / "open.txt").chmod(0o644)
    (folder / "private.txt").write_text("the person's secret")
    (folder / "private.txt").chmod(0o600)
    tmp = Path(f"/tmp/rewyn-stops-{tag}")
    tmp.mkdir(mode=0o755)
    tmp.chmod(0o755)
    (tmp / "file").write_text("the host's /tmp")
    (tmp / "file").chmod(0o644)
    shm = Path(f"/dev/shm/rewyn-stops-{tag}")
    shm.write_text("the host's /dev/shm")
    shm.chmod(0o644)
    daemons = daemon_folder(tag)
    servers = [unix_listener(folder / "socket")]
    if daemons is not None:
        servers.append(unix_listener(daemons / "socket"))
    service = socket.create_server(("127.0.0.1", 0))
    servers.append(service)
    # (each server only listens: a connect completes in the kernel's backlog)
    marker = f"600.{int(tag, 16) % 10**6}"
    sleeper = subprocess.Popen(["sleep", marker])
    secret = f"secret-{tag}"
    planted = {
        "open_file": str(folder / "open.txt"),
        "private_file": str(folder / "private.txt"),
        "variable": SECRET_VARIABLE,
        "port": service.getsockname()[1],
        "socket_elsewhere": str(folder / "socket"),
        "daemon_socket": str(daemons / "socket") if daemons is not None else None,
        "pid": sleeper.pid,
        "host_tmp": str(tmp / "file"),
        "host_shm": str(shm),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET_VARIABLE, secret)
        try:
            yield Host(planted, secret, marker)
        finally:
            sleeper.kill()
            sleeper.wait()
            for server in servers:
                server.close()
            for made in (folder, tmp, daemons):
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)
            shm.unlink(missing_ok=True)


def declared_here(cell: Cell) -> tuple[Verdict, str]:
    return cell.settle(cell.when.holds() if cell.when is not None else True)


@pytest.mark.providers("bubblewrap", "landlock", "subprocess", "docker", "docker+runsc", "podman")
@pytest.mark.parametrize("key", list(JUDGES))
def test_what_the_code_reaches_is_what_the_table_says(
    provider: SandboxProvider, key: str, host: Host
) -> None:
    column = stops_for(provider)
    assert column is not None, f"{provider.name} declares no column of the table"
    cell = BY_KEY[key].cell(column)
    verdict, says = declared_here(cell)
    out = host.probe(provider)
    found = JUDGES[key](out, host)
    assert found is verdict, (
        f"{provider.name}, {BY_KEY[key].concern!r}: the table says {verdict.value} ({says}), "
        f"the code in a sandbox found {found.value}: {json.dumps(out)}. Change the provider "
        "back, or the cell in rewyn_kernel/runtime/providers/stops.py (then regenerate the "
        f"README's table: {REGENERATE})"
    )


def test_the_readme_holds_the_table_as_the_source_renders_it() -> None:
    text = (ROOT / "README.md").read_text()
    begin, end = "<!-- stops:begin -->\n", "<!-- stops:end -->"
    assert (text.count(begin), text.count(end)) == (1, 1), "README.md lost its stops markers"
    held = text.split(begin, 1)[1].split(end, 1)[0]
    assert held == markdown(), (
        "README.md's table of what each provider stops differs from its source "
        "(rewyn_kernel/runtime/providers/stops.py): paste between the stops markers what "
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
