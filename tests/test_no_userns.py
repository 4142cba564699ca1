"""The boundary where the host gives no user namespaces: an ordinary user's host process under a
seccomp filter that refuses them, as a container engine's default profile does (a JupyterHub
pod, Binder, Codespaces) and Ubuntu 24.04's AppArmor rule does in effect.

Before the landlock provider, ``create()`` ran the code there on the subprocess provider with no
boundary: it read the user's files, connected to the host's loopback services with
``network="none"`` and could signal the person's processes. Each test here attacks one of those
from inside a sandbox made by such a host with the default provider.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewyn_kernel.runtime.providers.landlock import probe_landlock

from .unprivileged import UID, UnprivilegedHost


@pytest.fixture(autouse=True)
def _landlock_here() -> None:
    if not (support := probe_landlock()).works:
        if os.environ.get("CI"):
            pytest.fail(f"this host has no usable Landlock: {support.detail}")
        pytest.skip(f"this host has no usable Landlock: {support.detail}")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The host user's home: an SSH key, cloud credentials and a Jupyter kernel's connection
    file, each readable by that user alone."""
    base = Path(f"/tmp/rewyn-home-{uuid.uuid4().hex[:8]}")
    files = {
        ".ssh/id_ed25519": "PRIVATE KEY",
        ".aws/credentials": "aws_secret_access_key = SECRET",
        ".local/share/jupyter/runtime/kernel-1.json": '{"key": "SIGNING-KEY"}',
    }
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)
    for path in [base, *base.rglob("*")]:
        os.chown(path, UID, UID)
    base.chmod(0o700)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def loopback_service() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP service on the host's loopback (as a Jupyter server in a pod listens): its port,
    and what anyone sent it."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.settimeout(2)
                try:
                    received.append(client.recv(100) or b"(connected)")
                except OSError:
                    received.append(b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    server.close()
    thread.join(5)


def test_the_default_provider_there_is_landlock_and_says_what_holds() -> None:
    with UnprivilegedHost("default", no_userns=True) as box:
        isolation = box.isolation
        assert isolation["provider"] == "landlock", isolation
        assert isolation["network"] == "isolated"
        assert isolation["files"] == "isolated"
        assert isolation["seccomp"]
        assert "Landlock" in isolation["user"]
        result = box.execute("print('runs')")
        assert result["stdout"] == "runs\n", result
        assert result["provider"] == "landlock"


HOSTILE = """
import ctypes, json, os, socket
out = {}
for name in %(paths)r:
    try:
        open(name, "rb").read(1)
        out[name] = "read"
    except OSError as exc:
        out[name] = exc.errno
def connect(family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(address)
            sock.sendall(b"from the sandbox")
        return "connected"
    except OSError as exc:
        return exc.errno
out["tcp"] = connect(socket.AF_INET, ("127.0.0.1", %(port)d))
out["tcp6"] = connect(socket.AF_INET6, ("::1", %(port)d))
out["unix"] = connect(socket.AF_UNIX, %(unix)r)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", %(port)d))
    out["udp"] = "sent"
except OSError as exc:
    out["udp"] = exc.errno
libc = ctypes.CDLL(None, use_errno=True)
for label, pid in (("host", %(host)d), ("jupyter", %(jupyter)d)):
    try:
        os.kill(pid, 0)
        out[label + ":signal"] = "sent"
    except OSError as exc:
        out[label + ":signal"] = exc.errno
    out[label + ":ptrace"] = "attached" if libc.ptrace(16, pid, 0, 0) == 0 else ctypes.get_errno()
    for part in ("environ", "mem"):
        try:
            open("/proc/%%d/%%s" %% (pid, part), "rb").read(1)
            out[label + ":" + part] = "read"
        except OSError as exc:
            out[label + ":" + part] = exc.errno
print(json.dumps(out))
"""


def test_the_code_reaches_none_of_the_users_files_services_or_processes(
    home: Path, loopback_service: tuple[int, list[bytes]], tmp_path: Path
) -> None:
    port, received = loopback_service
    daemon = tmp_path / "daemon.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(daemon))
    listener.listen()
    daemon.chmod(0o777)
    tmp_path.chmod(0o755)
    # The person's Jupyter server: another process of the same user.
    jupyter = subprocess.Popen(["setpriv", f"--reuid={UID}", f"--regid={UID}", "sleep", "60"])
    paths = [str(path) for path in home.rglob("*") if path.is_file()]
    paths += ["/etc/shadow", str(home)]
    try:
        with UnprivilegedHost("default", no_userns=True) as box:
            code = HOSTILE % {
                "paths": paths,
                "port": port,
                "unix": str(daemon),
                "host": box.pid(),
                "jupyter": jupyter.pid,
            }
            result = box.execute(code)
            assert result["ending"] == "completed", result
            seen = json.loads(result["stdout"])
    finally:
        jupyter.kill()
        jupyter.wait()
        listener.close()
    for path in paths:
        assert seen[path] == 13, (path, seen)  # EACCES: Landlock
    for kind in ("tcp", "tcp6", "unix", "udp"):
        assert seen[kind] == 1, (kind, seen)  # EPERM: the seccomp filter refuses the socket
    assert received == []
    for label in ("host", "jupyter"):
        assert seen[label + ":signal"] == 1, seen  # EPERM: Landlock's signal scope
        assert seen[label + ":ptrace"] == 1, seen
        assert seen[label + ":environ"] == 13, seen
        assert seen[label + ":mem"] == 13, seen


ALONE = UID + 1
"""The uid of the test that counts the user's processes: no other test runs as it."""


def processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_bombs_are_bounded_and_nothing_outlives_close() -> None:
    assert processes_of(ALONE) == []  # (the control: nothing of the user's runs before)
    fork_bomb = (
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    for _ in range(400):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(600)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', made, exc.errno)\n"
    )
    with UnprivilegedHost(
        "default", no_userns=True, uid=ALONE, pids_limit=32, memory_limit_mb=256, timeout=20
    ) as box:
        assert box.isolation["provider"] == "landlock"
        assert "RLIMIT_NPROC" in box.isolation["pids"], box.isolation
        with_forks = box.session_execute(fork_bomb)
        words = with_forks["stdout"].split()
        assert words[:2] == ["refused", "after"], with_forks
        assert int(words[2]) <= 32, with_forks
        memory = box.execute("b = bytearray(1024 * 1024 * 1024)\nprint('allocated')")
        assert memory["stdout"] == "", memory
        assert memory["ending"] in ("exception", "killed"), memory
        assert box.execute("print('after')")["stdout"] == "after\n"
        # (the control: the forks are there until close)
        assert len(processes_of(ALONE)) > int(words[2]), processes_of(ALONE)
    deadline = time.monotonic() + 10
    while processes_of(ALONE) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of(ALONE) == []


BROKERED = """
import json, os, socket, urllib.request
out = {"proxy": os.environ["HTTPS_PROXY"]}
try:
    answer = urllib.request.urlopen("http://127.0.0.1:%(listed)d/p", timeout=10)
    out["listed"] = answer.read().decode()
except OSError as exc:
    out["listed"] = repr(exc)
def direct(family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(address)
            sock.sendall(b"from a direct connect\\r\\n\\r\\n")
            return sock.recv(200).split(b"\\r\\n")[0].decode() or "closed"
    except OSError as exc:
        return exc.errno
out["direct"] = direct(socket.AF_INET, ("127.0.0.1", %(unlisted)d))
out["direct6"] = direct(socket.AF_INET6, ("::1", %(unlisted)d))
out["elsewhere"] = direct(socket.AF_INET, ("192.0.2.1", 80))  # (TEST-NET: reaches the relay)
for name, family, kind in (("udp", socket.AF_INET, socket.SOCK_DGRAM),
                           ("unix", socket.AF_UNIX, socket.SOCK_STREAM)):
    try:
        socket.socket(family, kind).close()
        out[name] = "made"
    except OSError as exc:
        out[name] = exc.errno
try:
    with socket.socket() as server:
        server.listen()
        out["listen"] = "listening"
except OSError as exc:
    out["listen"] = exc.errno
print(json.dumps(out))
"""


@pytest.fixture
def http_service() -> Iterator[int]:
    """A plain HTTP service on the host's loopback (a local model server, a dev API)."""
    import http.server

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_an_allow_list_is_kept_without_a_network_namespace(
    http_service: int, loopback_service: tuple[int, list[bytes]]
) -> None:
    """Every connect() the code makes is made by its supervisor, to the proxy's relay: the
    listed service answers through the proxy; a client that ignores the proxy variables, or
    names an address elsewhere, reaches the proxy all the same and is refused; no other socket;
    and no other process of the host's can use the relay."""
    unlisted, received = loopback_service
    with UnprivilegedHost("default", no_userns=True, network=[f"127.0.0.1:{http_service}"]) as box:
        assert box.isolation["provider"] == "landlock"
        assert box.isolation["network"] == "filtered", box.isolation
        result = box.execute(BROKERED % {"listed": http_service, "unlisted": unlisted})
        assert result["ending"] == "completed", result
        seen = json.loads(result["stdout"])
        relay = int(seen["proxy"].rsplit(":", 1)[1])
        # Another process of the host's (this test's) at the relay's port: closed unheard.
        with socket.create_connection(("127.0.0.1", relay), timeout=10) as other:
            other.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % http_service)
            try:
                answer = other.recv(100)
            except ConnectionResetError:
                answer = b""
            assert answer == b""
    assert seen["listed"] == "hello /p", seen
    assert received == []  # the unlisted service never heard from the code
    for name in ("direct", "direct6", "elsewhere"):
        assert " 200" not in str(seen[name]), (name, seen)
    assert seen["udp"] == 1, seen  # EPERM
    assert seen["unix"] == 1, seen
    assert seen["listen"] == 1, seen
    attempts = result["network"]["attempts"]
    assert [a["verdict"] for a in attempts].count("allowed") == 1, attempts


def test_without_landlock_the_subprocess_provider_still_keeps_network_none(
    loopback_service: tuple[int, list[bytes]],
) -> None:
    """A kernel without Landlock (simulated: its calls fail with ENOSYS): the landlock provider
    says why it cannot run and is not chosen; the subprocess provider that is says the host's
    files are open, and still keeps network="none" with the filter that refuses every socket."""
    port, received = loopback_service
    with UnprivilegedHost("landlock", no_userns=True, no_landlock=True) as box:
        assert any("Landlock" in note for note in box.isolation["notes"]), box.isolation
        refused = box.execute("print('ran')")
        assert refused["ending"] == "start_failed", refused
        assert "has no Landlock" in refused["message"], refused
    with UnprivilegedHost("default", no_userns=True, no_landlock=True) as box:
        isolation = box.isolation
        assert isolation["provider"] == "subprocess", isolation
        assert isolation["files"] == "open"
        assert isolation["network"] == "isolated"
        notes = " ".join(isolation["notes"])
        assert "nor the landlock one" in notes, notes
        result = box.execute(
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "    print('connected')\nexcept OSError as exc:\n    print(exc.errno)"
        )
        assert result["stdout"] == "1\n", result  # EPERM: no socket at all
    assert received == []


DISK_BOMB = """
import os
written = 0
with open("bomb", "wb") as handle:
    for _ in range(64):
        handle.write(b"x" * (1 << 20))
        handle.flush()
        os.fsync(handle.fileno())
        written += 1
print("wrote", written)
"""


def test_a_disk_bomb_is_stopped_without_root() -> None:
    """No root, so no filesystem of its own for the scratch folder: a watcher bounds it. The
    code writing past disk_limit_mb is stopped; later workers write nothing until the code
    removes what it made; then they write again."""
    with UnprivilegedHost("default", no_userns=True, disk_limit_mb=16, timeout=30) as box:
        assert box.isolation["provider"] == "landlock"
        assert "watched" in (box.isolation["disk"] or ""), box.isolation
        bomb = box.execute(DISK_BOMB)
        assert "wrote 64" not in bomb["stdout"], bomb
        assert bomb["ending"] in ("killed", "exception", "crashed"), bomb
        held = box.execute("import os\nprint(os.path.getsize('bomb') >> 20)")
        assert int(held["stdout"]) < 64, held
        # The watcher looks every 0.2 s; the workers it stopped are replaced by workers that
        # write nothing (a worker forked ahead, before it looked, is stopped if it writes).
        probe = "import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE)[0])"
        for _ in range(50):
            limit = box.execute(probe)
            if limit["stdout"] == "0\n":
                break
            time.sleep(0.1)
        assert limit["stdout"] == "0\n", limit
        assert limit["disk_full"], limit
        refused = box.execute("with open('more', 'wb') as handle:\n    handle.write(b'x' * 4096)")
        assert refused["error"]["ename"] == "OSError", refused  # EFBIG: no write while over
        assert "File too large" in refused["error"]["evalue"], refused
        box.execute("import os\nos.remove('bomb')\nos.remove('more')")
        # (the watcher sees the folder under its quota again within an interval or two)
        for _ in range(50):
            again = box.execute(
                "with open('after', 'wb') as handle:\n    handle.write(b'x' * 4096)\nprint('wrote')"
            )
            if again["stdout"] == "wrote\n":
                break
            time.sleep(0.1)
        assert again["stdout"] == "wrote\n", again
