"""What of the host the code can reach: files, daemon sockets, other sandboxes.

Real sandboxes of each provider against real files, a real listening Unix socket standing in for
a daemon's (the Docker API's, say: a network namespace does not cover a socket on the
filesystem), and two sandboxes open at once.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewyn_kernel.runtime import SubprocessProvider, create
from rewyn_kernel.runtime.sandbox import SandboxProvider

FILESYSTEM_BOUNDARY = ("bubblewrap", "docker", "docker+runsc", "podman")
"""The providers that claim the host's files are out of reach (Isolation.files)."""

PROBE = """
import json, os
def can(action):
    try:
        action()
        return True
    except Exception:
        return False
def write(path):
    with open(path, 'w') as handle:
        handle.write('x')
print(json.dumps({
    'shadow': can(lambda: open('/etc/shadow').read()),
    'root': sorted(os.listdir('/root')) if os.path.isdir('/root') else None,
    'homes': os.path.isdir('/home') and os.listdir('/home') != [],
    'host_tmp': os.path.exists(%(host_tmp)r),
    'write_var_tmp': can(lambda: write('/var/tmp/rewyn-probe-%(tag)s')),
    'write_etc': can(lambda: write('/etc/rewyn-probe-%(tag)s')),
    'run': sorted(os.listdir('/run')) if os.path.isdir('/run') else None,
    'ssl_private': os.path.exists('/etc/ssl/private') or os.path.exists('/etc/pki/tls/private'),
    'write_tmp': can(lambda: write('/tmp/rewyn-probe-%(tag)s')),
    'write_shm': can(lambda: write('/dev/shm/rewyn-probe-%(tag)s')),
    'home': os.environ['HOME'],
}))
"""


@pytest.fixture
def host_tmp_file() -> Iterator[Path]:
    """A file in the host's /tmp, which no sandbox with a filesystem boundary may see."""
    path = Path("/tmp", f"rewyn-host-{uuid.uuid4().hex[:8]}")
    path.write_text("the host's\n")
    yield path
    path.unlink(missing_ok=True)


@pytest.mark.providers("bubblewrap")
def test_bubblewrap_shows_the_code_none_of_the_hosts_files(host_tmp_file: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    with create(provider=_bubblewrap()) as box:
        assert box.isolation.files == "isolated"
        result = box.execute(PROBE % {"host_tmp": str(host_tmp_file), "tag": tag})
        assert result.ok, result.stderr
        seen = json.loads(result.stdout)
    assert seen["shadow"] is False
    assert seen["homes"] is False
    assert seen["home"] == str(box.workdir)  # ~ is the scratch directory
    assert seen["host_tmp"] is False
    assert seen["run"] is None  # no /run at all: no daemon socket
    assert seen["ssl_private"] is False  # (certificates only: a root host's keys stay out)
    assert seen["write_var_tmp"] is False
    assert seen["write_etc"] is False
    # /root holds at most the way to the interpreter (pyenv's lives there on these machines).
    assert seen["root"] in (None, [], [".pyenv"])
    # Its /tmp and /dev/shm are its own: what it wrote there is not on the host.
    assert seen["write_tmp"] is True
    assert seen["write_shm"] is True
    for where in ("/var/tmp", "/tmp", "/dev/shm"):
        assert not Path(where, f"rewyn-probe-{tag}").exists(), where


@pytest.mark.providers("subprocess", "bubblewrap")
def test_a_daemon_socket_is_out_of_reach(provider: SandboxProvider, open_dir: Path) -> None:
    """A listening socket in /run (where docker's, containerd's and podman's live) and one that
    DOCKER_HOST names elsewhere: neither answers the code, though network="none" alone would
    let it connect to both."""
    in_run = Path("/run", f"rewyn-test-{uuid.uuid4().hex[:8]}.sock")
    elsewhere = open_dir / "docker.sock"
    with _listening(in_run), _listening(elsewhere), _environ(DOCKER_HOST=f"unix://{elsewhere}"):
        code = (
            "import socket\n"
            f"for path in {[str(in_run), str(elsewhere)]!r}:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.connect(path); print('reached', path, s.recv(16))\n"
            "    except OSError as exc:\n"
            "        print('refused', type(exc).__name__)\n"
        )
        with create(provider=provider, timeout=30) as box:
            result = box.execute(code)
    assert result.ok, result.stderr
    assert "reached" not in result.stdout, result.stdout
    assert result.stdout.count("refused") == 2


@pytest.mark.providers("subprocess")
def test_the_control_a_socket_the_host_does_not_hide_is_reached(open_dir: Path) -> None:
    """The control of the test above: the same kind of socket, named by no variable and
    outside /run, answers the code of the subprocess provider (its files are open)."""
    path = open_dir / "plain.sock"
    with _listening(path), create(provider=SubprocessProvider(), timeout=30) as box:
        code = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(%r)\nprint(s.recv(16))"
        result = box.execute(code % str(path))
    assert result.stdout == "b'hello'\n", result.stderr


@pytest.mark.providers(*FILESYSTEM_BOUNDARY)
def test_two_sandboxes_cannot_reach_each_other(provider: SandboxProvider) -> None:
    """Two sandboxes open at once: neither can read the other's scratch directory, see its
    processes, or signal them (the second kills every process it can, kill(-1, SIGKILL))."""
    marker = f"rewyn-marker-{uuid.uuid4().hex[:8]}"
    one, two = create(provider=provider, timeout=30), create(provider=provider, timeout=30)
    with one, two, one.session() as first, two.session() as second:
        started = first.execute(
            "import subprocess, sys\n"
            "open('secret.txt', 'w').write('one')\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)',"
            f" {marker!r}])\n"
        )
        assert started.ok, started.stderr
        code = (
            "import os, signal, json\n"
            "def can(action):\n"
            "    try:\n"
            "        action(); return True\n"
            "    except Exception:\n"
            "        return False\n"
            "def cmdline(pid):\n"
            "    try:\n"
            "        return open('/proc/%s/cmdline' % pid, 'rb').read()\n"
            "    except OSError:\n"
            "        return b''\n"
            "seen = [p for p in os.listdir('/proc') if p.isdigit() and {!r} in cmdline(p)]\n"
            "print(json.dumps({{\n"
            "  'read': can(lambda: open({!r}).read()),\n"
            "  'host_path': can(lambda: open({!r}).read()),\n"
            "  'processes': seen,\n"
            "}}))\n"
            "can(lambda: os.kill(-1, signal.SIGKILL))\n"
        ).format(marker.encode(), inside_path(one, "secret.txt"), f"{one.workdir}/secret.txt")
        probe = second.execute(code)
        assert probe.ok, probe.stderr
        seen = json.loads(probe.stdout)
        assert seen == {"read": False, "host_path": False, "processes": []}
        alive = first.execute("print(child.poll(), open('secret.txt').read())\nchild.kill()")
        assert alive.stdout == "None one\n", alive.stderr


def inside_path(box: object, name: str) -> str:
    from rewyn_kernel.runtime.sandbox import Sandbox

    assert isinstance(box, Sandbox)
    cwd = box.provider.worker_config(box.spec, box.files).cwd
    return f"{cwd}/{name}"


def _bubblewrap() -> SandboxProvider:
    from rewyn_kernel.runtime.sandbox import BubblewrapProvider

    return BubblewrapProvider()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder anyone may enter, outside /tmp (which each sandbox has of its own): where the
    host's files are open to the code, whoever it runs as, it reaches what is there."""
    path = Path(tempfile.mkdtemp(prefix="rewyn-open-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _listening:
    """A Unix socket listening at ``path`` that says hello to whoever connects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX)

    def __enter__(self) -> _listening:
        self.server.bind(str(self.path))
        # (the code may run as a uid of its own: see providers/local/identity.py)
        self.path.chmod(0o777)
        self.server.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                peer, _ = self.server.accept()
            except OSError:
                return
            with peer:
                peer.sendall(b"hello")

    def __exit__(self, *exc: object) -> None:
        self.server.close()
        self.path.unlink(missing_ok=True)


class _environ:
    def __init__(self, **values: str) -> None:
        self.values = values
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for name, value in self.values.items():
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.mark.providers("bubblewrap")
def test_a_sandbox_made_inside_bubblewrap_knows_the_network_is_cut() -> None:
    """Code in a bubblewrap sandbox using the runtime itself (the quickstart does) gets
    subprocess sandboxes without namespaces (user namespaces are forbidden inside): their
    network is still cut, by the sandbox they run in, and they say so rather than claim it is
    not isolated. The host, which has interfaces, says nothing of the kind."""
    from rewyn_kernel.runtime.providers.subprocess import network_cut_here

    assert network_cut_here() is False  # (the host: so that the check inside can fail)
    code = (
        "from rewyn_kernel.runtime import SubprocessProvider, create\n"
        "with create(provider=SubprocessProvider(), timeout=30) as box:\n"
        "    print(box.isolation.network, box.isolation.pid_namespace)\n"
        "    print(any('already cut' in note for note in box.isolation.notes))\n"
        "    print(box.execute('print(1)').stdout.strip())\n"
    )
    with create(provider=_bubblewrap(), timeout=60) as box:
        result = box.execute(code)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["isolated False", "True", "1"]


@pytest.mark.providers("bubblewrap")
def test_the_system_files_bubblewrap_shows_can_be_read_by_the_code() -> None:
    """Every entry of /etc the view shows reads as on the host: the folders bwrap makes for
    its binds are its own uid's, mode 0700, and where the code runs as another uid (a root
    host) it could not look up /etc/hosts, the certificates, the time zone or the fonts."""
    from rewyn_kernel.runtime.providers.bubblewrap import ETC

    shown: dict[str, object] = {}
    for name in ETC:
        path = Path("/etc", name)
        if path.is_file():
            shown[str(path)] = path.read_bytes().hex()
        elif path.is_dir():
            shown[str(path)] = sorted(os.listdir(path))
    assert "/etc/hosts" in shown  # (the machines these tests run on have it)
    code = (
        "import json, os, pwd\n"
        f"shown = {sorted(shown)!r}\n"
        "seen = {}\n"
        "for path in shown:\n"
        "    try:\n"
        "        if os.path.isdir(path):\n"
        "            seen[path] = sorted(os.listdir(path))\n"
        "        else:\n"
        "            seen[path] = open(path, 'rb').read().hex()\n"
        "    except OSError as exc:\n"
        "        seen[path] = repr(exc)\n"
        "seen['user'] = pwd.getpwuid(os.getuid()).pw_name\n"
        "print(json.dumps(seen))\n"
    )
    with create(provider=_bubblewrap()) as box:
        result = box.execute(code)
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    assert seen.pop("user")
    assert seen == shown
