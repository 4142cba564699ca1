"""Local stand-ins for the internet, for the network allow-list's tests and benchmark.

Everything listens on 127.0.0.1 only: an origin over HTTP, the same over HTTPS (a test CA made
by trustme, whose certificate the sandbox is given), and a package index (PEP 503) holding one
small wheel built here. Names reach them through the proxy's test-only name map
(``REWYN_KERNEL_TEST_HOSTS``); nothing here ever sends traffic off this machine.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import shutil
import ssl
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import trustme

PACKAGE = "rewyntiny"
VERSION = "1.0"
BLOCK = b"x" * (1 << 20)


def wheel() -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel of PACKAGE whose module says hello."""
    dist = f"{PACKAGE}-{VERSION}.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": b"GREETING = 'hello from the index'\n",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode()
        ),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return f"{PACKAGE}-{VERSION}-py3-none-any.whl", buffer.getvalue()


def git_repository(folder: Path) -> Path:
    """A bare repository with one commit, served by a plain file server (git's "dumb" HTTP)."""
    work, bare = folder / "git-work", folder / "repo.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    (work / "README").write_text("served over the proxy\n")
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "one"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(bare)], check=True)
    subprocess.run([*git, "-C", str(bare), "update-server-info"], check=True)
    return bare


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wheel_name, wheel_bytes = wheel()
    git_root: Path | None = None

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path.startswith("/git/") and self.git_root is not None:
            found = (self.git_root.parent / url.path.removeprefix("/git/")).resolve()
            if self.git_root in found.parents and found.is_file():
                self._send(found.read_bytes(), "application/octet-stream")
            else:
                self.send_error(404)
            return
        if url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path == "/bytes":
            size = int(query["n"][0])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            while size > 0:
                chunk = BLOCK[: min(size, len(BLOCK))]
                self.wfile.write(chunk)
                size -= len(chunk)
            return
        if url.path.rstrip("/") == f"/simple/{PACKAGE}":
            body = f'<a href="/files/{self.wheel_name}">{self.wheel_name}</a>\n'.encode()
            self._send(body, "text/html")
            return
        if url.path == f"/files/{self.wheel_name}":
            self._send(self.wheel_bytes, "application/octet-stream")
            return
        self._send(f"hello from {self.headers.get('Host')} {url.path}".encode(), "text/plain")

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@dataclass(frozen=True)
class Servers:
    """The local servers' ports and the test CA's certificate (a PEM file)."""

    http_port: int
    https_port: int
    ca_file: Path

    def allowed(self) -> list[str]:
        """The allow entries that reach both servers by the name ``files.test`` (and the
        loopback address it maps to, which an entry must name)."""
        ports = (self.http_port, self.https_port)
        return [*(f"files.test:{port}" for port in ports), *(f"127.0.0.1:{port}" for port in ports)]


@contextmanager
def local_servers(folder: Path | None = None) -> Iterator[Servers]:
    """An HTTP and an HTTPS origin (serving the index too) on 127.0.0.1, for the ``with``;
    their CA's file in ``folder``, else in a folder of their own, removed after."""
    if folder is None:
        # (the CA's folder is shown to the sandbox, whose code may run as another uid: readable
        # by all, and not under pytest's folders, which are this user's alone)
        own = Path(tempfile.mkdtemp(prefix="rewyn-egress-ca-"))
        own.chmod(0o755)
        try:
            with local_servers(own) as found:
                yield found
        finally:
            shutil.rmtree(own, ignore_errors=True)
        return
    ca = trustme.CA()
    names = ["files.test", "index.test", "evil.test", "127.0.0.1"]
    cert = ca.issue_cert(*names)
    ca_file = folder / "test-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca_file.chmod(0o644)
    _Handler.git_root = git_repository(folder)
    plain = _Server(("127.0.0.1", 0), _Handler)
    secure = _Server(("127.0.0.1", 0), _Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (plain, secure)]
    for thread in threads:
        thread.start()
    try:
        yield Servers(plain.server_address[1], secure.server_address[1], ca_file)
    finally:
        for server in (plain, secure):
            server.shutdown()
            server.server_close()


FETCH = """import os, urllib.request, urllib.error
for name in ("NO_PROXY", "no_proxy"):
    os.environ.pop(name, None)
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except Exception as exc:
        return repr(exc)
"""
"""Code that defines ``fetch(url)``: the HTTP status urllib got through the proxy (or the
error's repr), for a cell to print."""
TEST_HOSTS = (
    "files.test=127.0.0.1,index.test=127.0.0.1,evil.test=127.0.0.1,meta.test=169.254.169.254"
)
"""The proxy's test-only name map (REWYN_KERNEL_TEST_HOSTS): every name a loopback address but
``meta.test``, the cloud metadata address, which the proxy must refuse before connecting."""


def main() -> None:
    """Serve until killed, in a process of its own (``python -m tests.egress_servers DIR``):
    print the ports and the CA's path as one JSON line (the benchmark's stand-in for the
    internet, apart from the host process whose proxy it measures)."""
    import json
    import sys
    import time

    with local_servers(Path(sys.argv[1])) as servers:
        print(json.dumps([servers.http_port, servers.https_port, str(servers.ca_file)]), flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
