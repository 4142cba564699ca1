"""network=[...]: the hosts of an allow-list through the host's proxy, and nothing else.

Local servers stand in for the internet (tests/egress_servers.py); the proxy's test-only name
map sends the test names to 127.0.0.1, and the metadata name to 169.254.169.254, which the
proxy must refuse before any connection is tried. Nothing leaves this machine.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime import SandboxResult, create, sandbox_tool
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import proxy
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider
from rewyn_kernel.tools import RiskLevel
from tests.conftest import sandboxes
from tests.egress_servers import PACKAGE, TEST_HOSTS, Servers, local_servers


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Servers]:
    monkeypatch.setenv(proxy.TEST_HOSTS, TEST_HOSTS)
    with local_servers() as found:
        yield found


def ca_env(servers: Servers) -> dict[str, Any]:
    """What makes the sandbox's clients trust the test CA (its file shown read-only)."""
    ca = str(servers.ca_file)
    return {
        "env": {"SSL_CERT_FILE": ca, "REQUESTS_CA_BUNDLE": ca, "CURL_CA_BUNDLE": ca},
        "read_dirs": [servers.ca_file.parent],
    }


def run_json(box: Sandbox, code: str) -> tuple[Any, SandboxResult]:
    result = box.execute(code)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result


FETCH = """
import json, os, urllib.request, urllib.error
for name in ("NO_PROXY", "no_proxy"):  # (loopback too goes to the proxy: the host's, refused)
    os.environ.pop(name, None)
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return [answer.status, answer.read().decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.reason + " | " + exc.read().decode()]
    except Exception as exc:
        return [0, repr(exc)]
"""


def test_allowed_hosts_answer_and_others_are_refused_with_a_reason(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """Plain HTTP and HTTPS (CONNECT) to allowed names work; a host not listed, and an allowed
    host's other port, are refused with a reason the code reads; every attempt is recorded."""
    http, https = servers.http_port, servers.https_port
    box = make_box(
        network=[*servers.allowed(), f"evil.test:{https}", "!evil.test"], **ca_env(servers)
    )
    assert box.isolation.network == "filtered"
    code = (
        FETCH
        + f"""
print(json.dumps([
    fetch("http://files.test:{http}/plain"),
    fetch("https://files.test:{https}/secure"),
    fetch("http://other.test/x"),
    fetch("https://files.test:{http + 1}/port"),
    fetch("https://evil.test:{https}/denied"),
]))
"""
    )
    answers, result = run_json(box, code)
    assert answers[0] == [200, f"hello from files.test:{http} /plain"]
    assert answers[1] == [200, f"hello from files.test:{https} /secure"]
    assert answers[2][0] == 403
    assert "other.test:80 refused: not in the allow-list" in answers[2][1]
    assert "--allow-host other.test" in answers[2][1]  # (the body says how to allow it)
    assert "port" in answers[3][1]
    assert "not allowed" in answers[3][1]
    assert "denied by the entry 'evil.test'" in answers[4][1]
    assert result.network is not None
    seen = [(a.host, a.port, a.protocol, a.verdict) for a in result.network.attempts]
    assert seen == [
        ("files.test", http, "http", "allowed"),
        ("files.test", https, "connect", "allowed"),
        ("other.test", 80, "http", "refused"),
        ("files.test", http + 1, "connect", "refused"),
        ("evil.test", https, "connect", "refused"),
    ]
    first, second = result.network.attempts[:2]
    assert first.bytes_in > 0
    assert first.bytes_out > 0
    assert first.address == "127.0.0.1"
    assert second.bytes_in > 1000  # (a TLS handshake and the answer)


@pytest.mark.providers("bubblewrap")
def test_curl_git_requests_httpx_and_socks_use_the_proxy_unchanged(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """What the code's programs read from their environment is enough: curl (HTTPS and
    SOCKS5), git (a clone over HTTP), requests and httpx (HTTPS)."""
    http, https = servers.http_port, servers.https_port
    box = make_box(network=servers.allowed(), **ca_env(servers))
    code = f"""
import json, subprocess, httpx, requests
port = __import__("os").environ["HTTP_PROXY"].rsplit(":", 1)[1]
def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    return done.stdout.strip() or done.stderr.strip()
print(json.dumps([
    run("curl", "-sS", "https://files.test:{https}/curl"),
    run("curl", "-sS", "--proxy", "", "--socks5-hostname", "127.0.0.1:" + port,
        "http://files.test:{http}/socks"),
    requests.get("https://files.test:{https}/requests", timeout=10).text,
    run("curl", "-sS", "https://nowhere.test/"),
    httpx.get("https://files.test:{https}/httpx", timeout=10).text,
    run("git", "clone", "-q", "http://files.test:{http}/git/repo.git", "cloned")
    or open("cloned/README").read().strip(),
]))
"""
    answers, result = run_json(box, code)
    assert answers[0] == f"hello from files.test:{https} /curl"
    assert answers[1] == f"hello from files.test:{http} /socks"
    assert answers[2] == f"hello from files.test:{https} /requests"
    assert "403" in answers[3]  # curl: "CONNECT tunnel failed, response 403"
    assert answers[4] == f"hello from files.test:{https} /httpx"
    assert answers[5] == "served over the proxy"
    assert result.network is not None
    protocols = [a.protocol for a in result.network.attempts]
    assert "socks5" in protocols
    assert "connect" in protocols


def test_the_hosts_own_services_are_refused_by_address_name_or_redirect(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """Loopback by IP, a name that resolves to loopback (DNS rebinding), a redirect from an
    allowed host to loopback, and the metadata address: all refused, none connected to."""
    http = servers.http_port
    box = make_box(
        network=[f"files.test:{http}", f"127.0.0.1:{http}", f"evil.test:{http}", "meta.test:80"]
    )
    other = servers.https_port  # (a service of the host's the list does not name)
    code = (
        FETCH
        + f"""
print(json.dumps([
    fetch("http://127.0.0.1:{other}/"),
    fetch("http://localhost:{http}/"),
    fetch("http://[::ffff:127.0.0.1]:{other}/"),
    fetch("http://files.test:{http}/redirect?to=http://127.0.0.1:{other}/jupyter"),
    fetch("http://meta.test/latest/meta-data/"),
]))
"""
    )
    answers, result = run_json(box, code)
    assert [answer[0] for answer in answers] == [403, 403, 403, 403, 403]
    assert f"127.0.0.1:{other} refused" in answers[0][1]
    assert "loopback" in answers[1][1] or "not in the allow-list" in answers[1][1]
    assert "127.0.0.1:" + str(other) in answers[3][1]  # (the redirect's target, refused)
    assert "169.254.169.254 is a link-local address" in answers[4][1]
    assert result.network is not None
    meta = [a for a in result.network.attempts if a.host == "meta.test"]
    assert meta
    assert meta[0].verdict == "refused"
    assert meta[0].address is None


def test_a_name_resolving_to_loopback_needs_an_entry_naming_the_address(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    http = servers.http_port
    box = make_box(network=[f"evil.test:{http}"])
    answers, _ = run_json(box, FETCH + f'print(json.dumps(fetch("http://evil.test:{http}/")))')
    assert answers[0] == 403
    assert "127.0.0.1 is a loopback address" in answers[1]
    assert f"'127.0.0.1:{http}'" in answers[1]  # (the entry that would let it through)


@pytest.mark.providers("bubblewrap")
def test_pip_installs_from_an_allowed_index_and_not_from_a_refused_one(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """%pip install through the proxy, into the sandbox's own site-packages, importable at
    once; the same from an index the list does not name fails with the proxy's reason."""
    http = servers.http_port
    spec = SandboxSpec.model_validate(
        {"network": [f"index.test:{http}", f"127.0.0.1:{http}"], "ipython": True}
    )
    box = make_box(spec=spec)
    with box.session() as session:
        index = f"http://index.test:{http}/simple"
        done = session.execute(
            f"%pip install --no-cache-dir --index-url {index} --trusted-host index.test {PACKAGE}"
        )
        assert done.ok, done.stdout + done.stderr
        assert f"Successfully installed {PACKAGE}-1.0" in done.stdout
        assert "installed into" in done.stdout  # (a note, not an error)
        assert "site-packages" in done.stdout
        imported = session.execute(f"import {PACKAGE}; print({PACKAGE}.GREETING)")
        assert imported.stdout.strip() == "hello from the index", imported.stderr
        refused = session.execute(
            f"%pip install --no-cache-dir --index-url http://files.test:{http}/simple "
            f"--trusted-host files.test {PACKAGE}==1.0 --force-reinstall"
        )
        assert "pip install failed" in refused.stderr
        assert "allow-list" in refused.stderr
        assert refused.network is not None
        assert {(a.host, a.reason) for a in refused.network.refused} == {
            ("files.test", "not in the allow-list")
        }


def test_limits_hold_under_a_flood_and_hostile_clients(
    make_box: Callable[..., Sandbox], servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More connections than allowed at once are refused; a malformed request, a huge header,
    a head sent too slowly and a CONNECT to a port not listed each get an answer; the proxy
    answers an allowed request afterwards."""
    monkeypatch.setattr(proxy, "HEAD_TIMEOUT", 2.0)
    http = servers.http_port
    box = make_box(
        network={"allow": [f"files.test:{http}", f"127.0.0.1:{http}"], "max_connections": 8}
    )
    code = f"""
import json, os, socket, time
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
def ask(data, pause=0.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    for part in data:
        s.sendall(part)
        time.sleep(pause)
    answer = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    except OSError as exc:
        answer += repr(exc).encode()
    s.close()
    return answer.split(b"\\r\\n", 1)[0].decode("ascii", "replace")
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
time.sleep(0.5)
flood = ask([b"GET http://files.test:{http}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"])
for s in held:
    s.close()
time.sleep(0.5)
print(json.dumps([
    flood,
    ask([b"NOT HTTP AT ALL\\r\\n\\r\\n"]),
    ask([b"GET http://files.test:{http}/ HTTP/1.1\\r\\nHost: x\\r\\nX: " + b"a" * 100000
         + b"\\r\\n\\r\\n"]),
    ask([b"GET http://files.test:{http}/ HTTP/1.1\\r\\n", b"Host: x\\r\\n"], pause=3.0),
    ask([b"CONNECT files.test:22 HTTP/1.1\\r\\nHost: files.test:22\\r\\n\\r\\n"]),
    ask([b"GET http://files.test:{http}/after HTTP/1.1\\r\\nHost: x\\r\\n"
         b"Connection: close\\r\\n\\r\\n"]),
    ask([b"GET http://[::1/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"]),
    ask([b"CONNECT no-port-here HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"]),
    ask([b"\\x05\\x01\\x00\\x05\\x02\\x00\\x01\\x7f\\x00\\x00\\x01\\x00\\x16"]),
]))
"""
    answers, result = run_json(box, code)
    assert answers[0].startswith("HTTP/1.1 503"), answers[0]
    assert answers[1].startswith("HTTP/1.1 400"), answers[1]
    assert answers[2].startswith("HTTP/1.1 431") or answers[2].startswith("HTTP/1.1 400")
    assert answers[3] == "" or "408" in answers[3] or "reset" in answers[3].lower()
    assert answers[4].startswith("HTTP/1.1 403")
    assert "port 22" in answers[4]
    assert answers[5] == "HTTP/1.1 200 OK"
    assert answers[6].startswith("HTTP/1.1 400"), answers[6]  # (a URL that is not one)
    assert answers[7].startswith("HTTP/1.1 400"), answers[7]  # (a CONNECT without a port)
    assert answers[8] == "\x05\x00\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00"  # (SOCKS BIND)
    assert result.network is not None
    assert any("connections are open already" in a.reason for a in result.network.attempts)


def test_the_bytes_of_an_execution_are_bounded(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    http = servers.http_port
    box = make_box(
        network={"allow": [f"files.test:{http}", f"127.0.0.1:{http}"], "max_bytes": 1 << 20}
    )
    code = (
        FETCH
        + f"""
first = fetch("http://files.test:{http}/bytes?n={4 << 20}")
print(json.dumps([first[0], len(first[1]), fetch("http://files.test:{http}/after")]))
"""
    )
    result = box.execute(code)
    assert result.network is not None
    assert "bytes through the proxy were spent" in result.network.limit_reached
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    assert answers[1] < 4 << 20 or answers[0] == 0
    assert answers[2][0] == 429
    after = box.execute(FETCH + f'print(fetch("http://files.test:{http}/next")[0])')
    assert after.stdout.strip() == "200"  # (the next execution has its own budget)


def test_every_provider_reaches_only_the_list(provider: SandboxProvider, servers: Servers) -> None:
    http = servers.http_port
    with sandboxes(provider=provider) as make:
        box = make(network=[f"files.test:{http}", f"127.0.0.1:{http}"])
        answers, result = run_json(
            box,
            FETCH + f'print(json.dumps([fetch("http://files.test:{http}/p"), '
            f'fetch("http://other.test/")]))',
        )
    expected = "filtered" if provider.name != "subprocess" else ("filtered", "not_isolated")
    assert box.isolation.network in expected
    assert answers[0] == [200, f"hello from files.test:{http} /p"]
    assert answers[1][0] == 403
    assert result.network is not None
    assert [a.verdict for a in result.network.attempts] == ["allowed", "refused"]


def test_the_event_and_the_run_log_hold_every_attempt(servers: Servers, tmp_path: Path) -> None:
    from rewyn_kernel.runtime import JsonlRunLog

    http = servers.http_port
    log = tmp_path / "run.jsonl"
    with create(
        network=[f"files.test:{http}", f"127.0.0.1:{http}"], listeners=[JsonlRunLog(log)]
    ) as box:
        box.execute(FETCH + f'fetch("http://files.test:{http}/a"); fetch("http://no.test/")')
    event = json.loads(log.read_text().splitlines()[-1])
    attempts = event["network"]["attempts"]
    assert [(a["host"], a["verdict"]) for a in attempts] == [
        ("files.test", "allowed"),
        ("no.test", "refused"),
    ]
    assert attempts[0]["bytes_in"] > 0
    assert event["spec"]["network"]["allow"] == [f"files.test:{http}", f"127.0.0.1:{http}"]

    # The review shows them under the cell that made them.
    import nbformat

    from rewyn_kernel.notebooks.review import convert

    review = tmp_path / "review.ipynb"
    assert convert(log, review) == 0
    texts = [
        str(output.get("data", {}).get("text/plain", ""))
        for cell in nbformat.read(review, as_version=4).cells  # type: ignore[no-untyped-call]
        for output in cell.get("outputs", [])
    ]
    (shown,) = [text for text in texts if "Connections the code tried" in text]
    assert f"files.test:{http} (GET) allowed" in shown
    assert "no.test:80 (GET) refused: not in the allow-list" in shown


def test_an_allow_list_sits_between_none_and_allow_in_the_risk_policy() -> None:
    with sandboxes() as make:
        none = sandbox_tool(make(network="none"))
        listed = sandbox_tool(make(network=["pypi.org"]))
        secret = sandbox_tool(make(network=["pypi.org"], env={"API_TOKEN": "x"}))
    if none.risk_level == RiskLevel.LOW:  # (bubblewrap with its filter)
        assert listed.risk_level == RiskLevel.MEDIUM
    assert secret.risk_level == RiskLevel.HIGH
    assert "pypi.org" in listed.risk_reason


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("*", "a bare '*'"),
        ("*:443", "a bare '*'"),
        ("a.*.org", "may only start"),
        ("pypi.org:99999", "port"),
        ("10.0.0.0/33", "address range"),
        ("bad host", "no spaces"),
    ],
)
def test_bad_entries_are_refused_when_the_sandbox_is_made(entry: str, words: str) -> None:
    with pytest.raises(ValueError, match="network") as raised:
        create(network=[entry])
    assert words in str(raised.value)


def test_wildcards_match_subdomains_only_and_deny_wins() -> None:
    from rewyn_kernel.runtime.egress.policy import Gate, NetworkPolicy

    gate = Gate(NetworkPolicy.model_validate(["*.example.org", "!bad.example.org"]))
    assert gate.decide("a.example.org", 443).verdict == "allowed"
    assert gate.decide("a.b.EXAMPLE.org.", 80).verdict == "allowed"
    assert gate.decide("example.org", 443).verdict == "refused"
    assert gate.decide("bad.example.org", 443).verdict == "refused"
    assert gate.decide("a.example.org", 22).verdict == "refused"
    assert gate.decide("notexample.org", 443).verdict == "refused"


def test_the_proxy_closes_with_its_workers(servers: Servers) -> None:
    """Each worker's door (its socket and folder) goes when the sandbox closes."""
    http = servers.http_port
    box = create(network=[f"files.test:{http}"])
    with box.session() as session:
        assert session.execute("x = 1").ok
        doors = [worker.egress for worker in box._core._live]  # type: ignore[attr-defined]
        assert doors
        assert all(door is not None for door in doors)
        folders = [door.folder for door in doors if door is not None]
        assert all(folder.exists() for folder in folders)
    box.close()
    assert all(door is not None and door._closed for door in doors)
    assert not any(folder.exists() for folder in folders)


def test_a_kernel_installed_with_allow_host_names_each_refused_host(
    servers: Servers, tmp_path: Path
) -> None:
    """``install --allow-host`` writes the list into the kernelspec; a cell reaches the listed
    host, and a refused one gets a note naming it and the flag that would allow it."""
    import argparse

    from rewyn_kernel.settings import add_options, from_options
    from tests.kernel_client import run_cell, running_kernel, write_spec

    http = servers.http_port
    parser = argparse.ArgumentParser()
    add_options(parser, ["network"])
    hosts = ["--allow-host", f"files.test:{http}", "--allow-host", f"127.0.0.1:{http}"]
    settings = from_options(parser.parse_args(hosts))
    assert settings.flags() == [f"--SandboxKernel.network=files.test:{http},127.0.0.1:{http}"]
    write_spec(tmp_path, "rewyn-egress", settings.flags())
    with running_kernel(tmp_path, "rewyn-egress") as (_, kc):
        cell = run_cell(kc, FETCH + f'print(fetch("http://files.test:{http}/k")[1])')
        assert cell.stream() == f"hello from files.test:{http} /k\n"
        refused = run_cell(kc, FETCH + 'print(fetch("http://elsewhere.test/data.csv")[0])')
        assert refused.stream() == "403\n"
        assert refused.stream("stderr") == (
            "[rewyn: the sandbox may not reach elsewhere.test (not in the allow-list); to allow "
            "it, install the kernel with --allow-host elsewhere.test]\n"
            "[rewyn: or allow elsewhere.test for this notebook with the button in the cell's "
            "status line]\n"
        )


@pytest.mark.providers("bubblewrap", "docker")
def test_what_the_code_hands_the_proxy_that_is_no_connection_is_closed_unused(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """The relay hands connections to the host as descriptors over hand.sock; the code can
    reach that socket too. A file, a pipe, a UDP socket and an unconnected TCP socket sent
    there are closed unused, and the proxy serves the next request as before."""
    http = servers.http_port
    box = make_box(network=[f"files.test:{http}", f"127.0.0.1:{http}"])
    code = (
        FETCH
        + """
import array, socket
hand = socket.socket(socket.AF_UNIX)
hand.connect("/run/rewyn-egress/hand.sock")
read_end, write_end = os.pipe()
sent = [
    os.open("handed.txt", os.O_RDWR | os.O_CREAT),
    read_end,
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).detach(),
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).detach(),
]
rights = array.array("i", sent)
hand.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
hand.sendmsg([b"garbage without descriptors"])
hand.close()
"""
        + f'print(json.dumps(fetch("http://files.test:{http}/after")))'
    )
    answer, result = run_json(box, code)
    assert answer == [200, f"hello from files.test:{http} /after"]
    assert result.network is not None
    assert [(a.host, a.verdict) for a in result.network.attempts] == [("files.test", "allowed")]


def test_names_are_compared_as_idna_2008_both_ways() -> None:
    """IDNA 2008 with UTS 46 (what browsers, curl and requests send), not Python's IDNA 2003
    codec, which maps 'faß.de' to 'fass.de', another domain."""
    from rewyn_kernel.runtime.egress.policy import Gate, NetworkPolicy, entry_for

    unicode_rule = Gate(NetworkPolicy.model_validate(["faß.de", "*.bücher.example"]))
    assert unicode_rule.decide("xn--fa-hia.de", 443).verdict == "allowed"
    assert unicode_rule.decide("XN--FA-HIA.DE.", 443).verdict == "allowed"
    assert unicode_rule.decide("fass.de", 443).verdict == "refused"
    assert unicode_rule.decide("www.xn--bcher-kva.example", 443).verdict == "allowed"
    assert unicode_rule.decide("www.bucher.example", 443).verdict == "refused"
    ascii_rule = Gate(NetworkPolicy.model_validate(["xn--fa-hia.de"]))
    assert ascii_rule.decide("faß.de", 443).verdict == "allowed"
    assert ascii_rule.decide("FAß.DE", 443).verdict == "allowed"
    assert ascii_rule.decide("fass.de", 443).verdict == "refused"
    assert Gate(NetworkPolicy.model_validate(["fass.de"])).decide("faß.de", 443).reason == (
        "not in the allow-list"
    )
    assert entry_for("faß.de", 443) == "xn--fa-hia.de"


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("xn--zz.de", "'xn--zz' is not a valid IDNA label"),
        ("xn--fass-2n.de", "'xn--fass-2n' is not a valid IDNA label"),
        ("a.xn--.de", "'xn--' is not a valid IDNA label"),
        ("\u202eed.faß", "not a valid IDNA label"),
        ("💩.la", "not a valid IDNA label"),
    ],
)
def test_invalid_idna_labels_are_clear_errors(entry: str, words: str) -> None:
    from rewyn_kernel.runtime.egress.policy import Gate, NetworkPolicy

    with pytest.raises(ValueError, match="network") as raised:
        create(network=[entry])
    assert words in str(raised.value)
    # (a request naming such a host is refused, with the same reason)
    decision = Gate(NetworkPolicy.model_validate(["example.org"])).decide(entry, 443)
    assert decision.verdict == "refused"
    assert words in decision.reason


FLOOD = """
import json, os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
held = {"hand": [], "proxy": [], "relay": []}
def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)  # (a full backlog: refused at once)
    s.connect(path)
    return s
for _ in range(300):
    for kind, connect in (
        ("hand", lambda: unix("/run/rewyn-egress/hand.sock")),
        ("proxy", lambda: unix("/run/rewyn-egress/proxy.sock")),
        ("relay", lambda: socket.create_connection(("127.0.0.1", port), timeout=10)),
    ):
        try:
            held[kind].append(connect())
        except OSError:
            pass
open("holding", "w").close()
for _ in range(1200):  # (the host looks at its descriptors, then says go)
    if os.path.exists("go"):
        break
    time.sleep(0.05)
first = held["hand"][0]
first.setblocking(True)
first.settimeout(20)
try:
    cut = first.recv(1) == b""
except OSError as exc:
    cut = not isinstance(exc, socket.timeout)
print(json.dumps({"made": {kind: len(socks) for kind, socks in held.items()}, "cut": cut}))
"""


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def held_descriptors(rounds: int = 50) -> int:
    """The host's descriptors once what the code holds has settled: the proxy accepts, refuses
    and closes the connections past its limits as it reads them, which a loaded machine does
    later; the count is taken once two looks 0.2 s apart agree (at most ``rounds`` looks)."""
    last = open_descriptors()
    for _ in range(rounds):
        time.sleep(0.2)
        now = open_descriptors()
        if now == last:
            return now
        last = now
    return last


@pytest.mark.providers("bubblewrap")
def test_a_flood_of_connections_holds_few_of_the_hosts_descriptors(
    make_box: Callable[..., Sandbox], servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code opens hundreds of connections to each way into its proxy (hand.sock,
    proxy.sock, the relay's port) and holds them, sending nothing. The host process keeps a
    bounded number of descriptors for them, another sandbox's request is carried meanwhile,
    a hand-over connection that sends nothing is cut, and the sandbox's own requests work
    again once the code lets go."""
    monkeypatch.setattr(proxy, "HAND_IDLE", 1.0, raising=False)
    http = servers.http_port
    allow = [f"files.test:{http}", f"127.0.0.1:{http}"]
    box = make_box(network={"allow": allow, "max_connections": 16}, timeout=120.0)
    other = make_box(network=allow)
    get = FETCH + f'print(json.dumps(fetch("http://files.test:{http}/again")))'
    for each in (box, other):  # (each worker's door open)
        assert run_json(each, get)[0] == [200, f"hello from files.test:{http} /again"]
    folder = box.files.host_path
    assert folder is not None
    baseline = open_descriptors()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        flood = pool.submit(box.execute, FLOOD)
        while not (folder / "holding").exists():
            assert not flood.done(), flood.result().stderr
            time.sleep(0.05)
        during = held_descriptors()
        answer, _ = run_json(other, get)
        (folder / "go").touch()
        result = flood.result()
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["made"]["relay"] == 300  # (the code's end accepts them all)
    assert during - baseline < 100, (during, baseline, report)
    assert answer == [200, f"hello from files.test:{http} /again"]
    assert report["cut"]
    assert run_json(box, get)[0] == [200, f"hello from files.test:{http} /again"]
