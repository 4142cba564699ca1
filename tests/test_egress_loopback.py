"""An allow entry that names the host's loopback by address: reached through the proxy.

The sandbox's own loopback is empty; where an entry names a loopback address (or
``localhost``), the code's clients must not take it for their own (``NO_PROXY``): urllib,
requests, pip and httpx go to the proxy, which reaches the host's server and records the
attempt. Where no entry names loopback, the sandbox's own loopback stays direct. The servers
here listen on 127.0.0.1 and ::1 only.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rewyn_kernel.runtime import SandboxResult
from rewyn_kernel.runtime.egress.policy import NetworkPolicy
from rewyn_kernel.runtime.sandbox import Sandbox
from tests.egress_servers import PACKAGE, _Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
def loopback_ports() -> Iterator[dict[str, int]]:
    """The ports of a server (a plain page and a package index) on 127.0.0.1, and on ::1
    where this host has it: ``{"127.0.0.1": port, "::1": port}``."""
    servers = [_Server(("127.0.0.1", 0), _Handler)]
    if _has_ipv6_loopback():
        servers.append(_Server6(("::1", 0), _Handler))
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield {str(s.server_address[0]): int(s.server_address[1]) for s in servers}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


CLIENTS = """
import json, os, subprocess, sys, tempfile, urllib.request
def attempt(call):
    try:
        return call()
    except Exception as exc:
        return "failed: %r" % (exc,)
def by_urllib(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()
def by_requests(url):
    import requests
    return requests.get(url, timeout=10).text
def by_httpx(url):
    import httpx
    return httpx.get(url, timeout=10).text
def by_pip(base):
    target = tempfile.mkdtemp()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
         "--target", target, "--index-url", base + "/simple", "{package}"],
        capture_output=True, text=True, timeout=120,
    )
    return "installed" if done.returncode == 0 else done.stdout[-500:] + done.stderr[-1500:]
def have(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True
"""


def clients_code(bases: list[str], pip: bool = True) -> str:
    """Code that fetches each base URL with every client the sandbox has, printing JSON:
    ``[{client: answer}, ...]`` (a missing client is left out; pip only if ``pip``)."""
    return (
        CLIENTS.replace("{package}", PACKAGE)
        + f"""
found = []
for base in {bases!r}:
    answers = {{"urllib": attempt(lambda: by_urllib(base + "/ping"))}}
    if have("requests"):
        answers["requests"] = attempt(lambda: by_requests(base + "/ping"))
    if have("httpx"):
        answers["httpx"] = attempt(lambda: by_httpx(base + "/ping"))
    if {pip!r} and have("pip"):
        answers["pip"] = attempt(lambda: by_pip(base))
    found.append(answers)
print(json.dumps([os.environ.get("NO_PROXY"), found]))
"""
    )


def run_json(box: Sandbox, code: str) -> tuple[Any, SandboxResult]:
    result = box.execute(code)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result


@pytest.mark.providers("bubblewrap", "landlock", "subprocess", "docker")
def test_a_loopback_address_in_the_allow_list_is_reached_through_the_proxy(
    make_box: Callable[..., Sandbox], loopback_ports: dict[str, int]
) -> None:
    """``--allow-host 127.0.0.1:PORT`` (and ``[::1]:PORT``) as the README says: urllib,
    requests, httpx and pip reach the host's server by its address, each attempt recorded."""
    entries = [
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        for host, port in loopback_ports.items()
    ]
    bases = [f"http://{entry}" for entry in entries]
    box = make_box(network=entries, timeout=300)
    (no_proxy, found), result = run_json(box, clients_code(bases, True))
    assert no_proxy is None  # (an entry names loopback: nothing of it is the sandbox's own)
    for entry, answers in zip(entries, found, strict=True):
        for client, answer in answers.items():
            expected = "installed" if client == "pip" else f"hello from {entry} /ping"
            assert answer == expected, (entry, client, answer)
    if box.provider.name == "bubblewrap":  # (the host's Python: every client is there)
        assert {client for answers in found for client in answers} == {
            "urllib",
            "requests",
            "httpx",
            "pip",
        }
    assert result.network is not None
    reached = {(a.host.strip("[]"), a.port) for a in result.network.attempts}
    assert reached == {(host, port) for host, port in loopback_ports.items()}
    assert {a.verdict for a in result.network.attempts} == {"allowed"}


@pytest.mark.providers("bubblewrap", "landlock")
def test_localhost_in_the_allow_list_is_the_hosts_loopback(
    make_box: Callable[..., Sandbox], loopback_ports: dict[str, int]
) -> None:
    """An entry ``localhost:PORT`` names the host's loopback too: the proxy lets in what the
    name resolves to there."""
    port = loopback_ports["127.0.0.1"]
    box = make_box(network=[f"localhost:{port}"])
    code = CLIENTS + f'print(json.dumps(attempt(lambda: by_urllib("http://localhost:{port}/x"))))'
    answer, result = run_json(box, code)
    assert answer == f"hello from localhost:{port} /x"
    assert result.network is not None
    assert [(a.host, a.verdict) for a in result.network.attempts] == [("localhost", "allowed")]


SERVES_ITSELF = """
import http.server, json, threading, urllib.request, urllib.error
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"mine")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
threading.Thread(target=server.serve_forever, daemon=True).start()
try:
    with urllib.request.urlopen("http://127.0.0.1:%d/" % server.server_port, timeout=10) as a:
        print(json.dumps([a.status, a.read().decode()]))
except urllib.error.HTTPError as exc:
    print(json.dumps([exc.code, exc.read().decode()]))
"""


@pytest.mark.providers("bubblewrap")
def test_the_sandboxes_own_loopback_stays_direct_where_no_entry_names_loopback(
    make_box: Callable[..., Sandbox],
) -> None:
    """A server the code starts on its own loopback answers it directly where the list names
    no loopback; where it does, the code's loopback requests go to the proxy (documented)."""
    box = make_box(network=["files.test"])
    answer, result = run_json(box, SERVES_ITSELF)
    assert answer == [200, "mine"]
    assert result.network is not None
    assert result.network.attempts == ()
    box = make_box(network=["127.0.0.1:1"])
    answer, result = run_json(box, SERVES_ITSELF)
    assert answer[0] == 403  # (the proxy's answer: that port of the host's is not listed)
    assert result.network is not None
    assert [a.verdict for a in result.network.attempts] == ["refused"]


@pytest.mark.parametrize(
    ("entries", "direct"),
    [
        (["pypi.org"], True),
        (["127.0.0.1:8901"], False),
        (["127.0.0.0/8"], False),
        (["127.1.2.3:*"], False),
        (["[::1]:11434"], False),
        (["::1"], False),
        (["[::ffff:127.0.0.1]:80"], False),
        (["localhost:8000"], False),
        (["*.localhost"], True),
        (["10.0.0.0/8", "pypi.org"], True),
        (["0.0.0.0/0"], False),
    ],
)
def test_no_proxy_keeps_the_sandboxes_loopback_only_where_no_entry_names_loopback(
    entries: list[str], direct: bool
) -> None:
    from rewyn_kernel.runtime.egress.proxy import sandbox_no_proxy

    policy = NetworkPolicy.model_validate(entries)
    assert sandbox_no_proxy(policy) == ("localhost,127.0.0.1,::1" if direct else "")
