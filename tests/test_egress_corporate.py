"""Behind a corporate network: the host's upstream proxy, and the host's CA configuration.

A recording CONNECT proxy on 127.0.0.1 (tests/upstream_proxy.py) stands in for the corporate
one, the local servers and their test CA (tests/egress_servers.py) for the internet. The test
names do not resolve on the host here (``name=-`` in the proxy's test-only map), as outside
names do not behind such a proxy: the upstream resolves them, to loopback.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime import SandboxResult
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress import proxy
from rewyn_kernel.runtime.egress.policy import NetworkPolicy
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import Sandbox
from tests.egress_servers import PACKAGE, Servers, local_servers
from tests.upstream_proxy import upstream_proxy

SECRET = "s3cret-Pa55"
USER = "alice.corp"
UNRESOLVED = "files.test=-,index.test=-"
"""The test names as the host sees them behind the corporate proxy: unresolvable."""
PROXY_NAMES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY")
CA_NAMES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Servers]:
    monkeypatch.setenv(proxy.TEST_HOSTS, UNRESOLVED)
    for name in PROXY_NAMES:  # (the host's own: each test sets what it means)
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name in CA_NAMES:
        monkeypatch.delenv(name, raising=False)
    with local_servers() as found:
        yield found


def run_json(box: Sandbox, code: str) -> tuple[Any, SandboxResult]:
    result = box.execute(code)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result


FETCH = """
import json, urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            return [answer.status, answer.read().decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.reason + " | " + exc.read().decode()]
    except Exception as exc:
        return [0, repr(exc)]
"""


def entries(servers: Servers) -> list[str]:
    return [f"files.test:{servers.http_port}", f"files.test:{servers.https_port}"]


@pytest.mark.providers("bubblewrap")
def test_the_proxy_goes_through_the_hosts_upstream_with_its_credentials_never_shown(
    make_box: Callable[..., Sandbox],
    servers: Servers,
    monkeypatch: pytest.MonkeyPatch,
    events: list[SandboxEvent],
) -> None:
    """The host's HTTPS_PROXY (with a user and password): plain HTTP and HTTPS both go as
    CONNECT to it, authenticated; isolation says so; the password is in no record."""
    http, https = servers.http_port, servers.https_port
    with upstream_proxy({"files.test": "127.0.0.1"}, f"{USER}:{SECRET}") as upstream:
        monkeypatch.setenv("HTTPS_PROXY", upstream.url(f"{USER}:{SECRET}"))
        ca = str(servers.ca_file)
        box = make_box(
            network=entries(servers),
            env={"SSL_CERT_FILE": ca},
            read_dirs=[servers.ca_file.parent],
        )
        code = FETCH + (
            f'print(json.dumps([fetch("http://files.test:{http}/plain"), '
            f'fetch("https://files.test:{https}/secure")]))'
        )
        answers, result = run_json(box, code)
    assert answers == [
        [200, f"hello from files.test:{http} /plain"],
        [200, f"hello from files.test:{https} /secure"],
    ]
    assert [(s.method, s.target, s.credentials) for s in upstream.seen] == [
        ("CONNECT", f"files.test:{http}", f"{USER}:{SECRET}"),
        ("CONNECT", f"files.test:{https}", f"{USER}:{SECRET}"),
    ]
    shown = box.isolation.upstream_proxy
    assert shown is not None
    assert f"http://127.0.0.1:{upstream.port}" in shown
    assert "HTTPS_PROXY" in shown
    assert result.network is not None
    assert [a.verdict for a in result.network.attempts] == ["allowed", "allowed"]
    written = [result.model_dump_json(), box.isolation.model_dump_json(), repr(box.isolation)]
    written += [event.model_dump_json() for event in events]
    assert events
    for text in written:
        assert SECRET not in text
        assert USER not in text


@pytest.mark.providers("bubblewrap")
def test_wrong_credentials_are_the_upstreams_refusal_without_the_password(
    make_box: Callable[..., Sandbox], servers: Servers
) -> None:
    """The setting names the upstream (a URL with the wrong password): the code reads the
    upstream's refusal, and neither the answer nor the record holds the password."""
    http = servers.http_port
    with upstream_proxy({"files.test": "127.0.0.1"}, f"{USER}:{SECRET}") as upstream:
        policy = NetworkPolicy(
            allow=tuple(entries(servers)), upstream_proxy=upstream.url(f"{USER}:wrong-{SECRET}")
        )
        box = make_box(spec=SandboxSpec(network=policy))
        answer, result = run_json(
            box, FETCH + f'print(json.dumps(fetch("http://files.test:{http}/")))'
        )
    assert answer[0] == 502
    assert "407" in answer[1]
    assert f"http://127.0.0.1:{upstream.port}" in answer[1]
    assert upstream.seen[0].credentials == f"{USER}:wrong-{SECRET}"
    shown = box.isolation.upstream_proxy
    assert shown is not None
    assert "the setting upstream_proxy" in shown
    for text in (answer[1], result.model_dump_json(), shown, json.dumps(box.spec.summary())):
        assert SECRET not in text
        assert USER not in text


@pytest.mark.providers("bubblewrap")
def test_loopback_and_no_proxy_hosts_are_reached_directly(
    make_box: Callable[..., Sandbox], servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry naming the host's loopback is connected to directly (the upstream's loopback
    is another machine's), and so is a host NO_PROXY names; the upstream sees neither."""
    http = servers.http_port
    monkeypatch.setenv(proxy.TEST_HOSTS, "files.test=127.0.0.1,index.test=-")
    with upstream_proxy({}) as upstream:
        monkeypatch.setenv("https_proxy", upstream.url())
        monkeypatch.setenv("no_proxy", "index.test,.corp.test")
        box = make_box(network=[f"files.test:{http}", f"127.0.0.1:{http}", f"index.test:{http}"])
        answers, _ = run_json(
            box,
            FETCH + f'print(json.dumps([fetch("http://127.0.0.1:{http}/a"), '
            f'fetch("http://files.test:{http}/b"), fetch("http://index.test:{http}/c")]))',
        )
    assert answers[0] == [200, f"hello from 127.0.0.1:{http} /a"]
    assert answers[1] == [200, f"hello from files.test:{http} /b"]
    assert answers[2][0] == 502  # (NO_PROXY: directly, and it does not resolve here)
    assert "index.test does not resolve" in answers[2][1]
    assert upstream.seen == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://p.corp:3128"}, "http://p.corp:3128"),
        ({"https_proxy": "p.corp:8080", "HTTPS_PROXY": "http://other:1"}, "http://p.corp:8080"),
        ({"HTTP_PROXY": "http://u:pw@p.corp"}, "http://p.corp:80"),
        ({"HTTPS_PROXY": "socks5://p.corp:1080"}, None),
    ],
)
def test_the_hosts_environment_names_the_upstream(
    environ: dict[str, str], expected: str | None
) -> None:
    from rewyn_kernel.runtime.egress.upstream import choose

    routes = choose("env", environ)
    found = routes.upstream("connect")
    assert (found.shown if found else None) == expected
    if "socks5" in str(environ):
        assert "not used" in routes.problem


def test_no_proxy_entries_are_read_as_curl_and_requests_read_them() -> None:
    from rewyn_kernel.runtime.egress.upstream import choose

    routes = choose("env", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "corp.test,.int,10.0.0.0/8"})
    assert routes.direct("corp.test")
    assert routes.direct("a.corp.test")
    assert routes.direct("x.int")
    assert not routes.direct("notcorp.test")
    assert not routes.direct("pypi.org")
    assert routes.direct(ipaddress.ip_address("10.2.3.4"))
    assert routes.direct(ipaddress.ip_address("127.0.0.1"))
    assert routes.direct(ipaddress.ip_address("169.254.169.254"))
    assert not routes.direct(ipaddress.ip_address("151.101.0.223"))
    assert choose("env", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}).direct("pypi.org")


def test_a_bad_upstream_setting_is_refused_without_its_password() -> None:
    with pytest.raises(ValueError, match="only an http:// proxy") as caught:
        NetworkPolicy(allow=("pypi.org",), upstream_proxy="https://bob:hunter2@p.corp:3128")
    assert "hunter2" not in str(caught.value)


TLS_CLIENTS = """
import json, ssl, subprocess, sys, tempfile, urllib.request
def attempt(call):
    try:
        return call()
    except Exception as exc:
        return "failed: %r" % (exc,)
def by_urllib(url):
    with urllib.request.urlopen(url, timeout=20) as answer:
        return answer.read().decode()
def by_requests(url):
    import requests
    return requests.get(url, timeout=20).text
def by_pip(index):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
         "--target", tempfile.mkdtemp(), "--index-url", index, "{package}"],
        capture_output=True, text=True, timeout=120,
    )
    return "installed" if done.returncode == 0 else (done.stdout + done.stderr)[-1500:]
def have(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True
base = "https://index.test:{port}"
found = {"urllib": attempt(lambda: by_urllib(base + "/tls"))}
if have("requests"):
    found["requests"] = attempt(lambda: by_requests(base + "/tls"))
if {pip} and have("pip"):
    found["pip"] = attempt(lambda: by_pip(base + "/simple"))
import os
print(json.dumps([found, {name: os.environ.get(name) for name in {names}}]))
"""


def tls_code(servers: Servers, pip: bool) -> str:
    from rewyn_kernel.runtime.egress.corporate import CA_VARIABLES

    return (
        TLS_CLIENTS.replace("{package}", PACKAGE)
        .replace("{port}", str(servers.https_port))
        .replace("{pip}", repr(pip))
        .replace("{names}", repr(CA_VARIABLES))
    )


@pytest.mark.providers("bubblewrap", "landlock", "subprocess", "docker")
def test_the_hosts_ca_is_given_read_only_and_tls_verifies_only_with_it(
    make_box: Callable[..., Sandbox],
    servers: Servers,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Behind an inspecting proxy: the host's SSL_CERT_FILE, REQUESTS_CA_BUNDLE and PIP_CERT
    name the test CA; through the upstream, urllib, requests and pip verify the index's
    certificate with it, in the sandbox, and fail without it. The copy is read-only; a file
    that holds a private key is refused with a note."""
    ca = str(servers.ca_file)
    key = tmp_path / "client.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n")
    entries = [f"index.test:{servers.https_port}"]
    with upstream_proxy({"index.test": "127.0.0.1"}) as upstream:
        monkeypatch.setenv("HTTPS_PROXY", upstream.url())
        box = make_box(network=entries, timeout=300)
        pip = box.provider.name in ("bubblewrap", "landlock")  # (the host's Python, with pip)
        (without, _), _ = run_json(box, tls_code(servers, pip))
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
            monkeypatch.setenv(name, ca)
        monkeypatch.setenv("CURL_CA_BUNDLE", str(key))
        box = make_box(network=entries, timeout=300)
        (found, seen), _ = run_json(box, tls_code(servers, pip))
        copies = Path(seen["SSL_CERT_FILE"]).parent.parent
        write = box.execute(f"open({seen['SSL_CERT_FILE']!r}, 'a').write('x')")
        listed = box.execute(
            f"import os\nfor top, _, names in os.walk({str(copies)!r}):\n"
            f"    print(*(os.path.relpath(os.path.join(top, n), {str(copies)!r}) for n in names))"
        )
        closed = make_box(network="none")
        (_, none_seen), _ = run_json(
            closed,
            "import os, json\n"
            "names = ('SSL_CERT_FILE', 'PIP_CERT')\n"
            "print(json.dumps([{}, {n: os.environ.get(n) for n in names}]))",
        )
    assert without["urllib"].startswith("failed")
    assert "CERTIFICATE_VERIFY_FAILED" in without["urllib"]
    for client, answer in found.items():
        expected = (
            "installed" if client == "pip" else f"hello from index.test:{servers.https_port} /tls"
        )
        assert answer == expected, (client, answer)
        if client != "urllib":
            assert without[client] != expected, client
    if box.provider.name == "bubblewrap":
        assert set(found) == {"urllib", "requests", "pip"}
    assert {s.target for s in upstream.seen} == {f"index.test:{servers.https_port}"}
    assert seen["SSL_CERT_FILE"] != ca  # (the copy's path, as the code sees it)
    assert seen["CURL_CA_BUNDLE"] is None  # (a private key: not given)
    assert write.exit_code != 0
    assert "Read-only file system" in write.stderr or "Permission denied" in write.stderr
    assert listed.stdout.split() == ["SSL_CERT_FILE/test-ca.pem"]  # (that file alone, once)
    shown = box.isolation.ca_files
    assert [item.split("=", 1)[0] for item in shown] == [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "PIP_CERT",
    ]
    assert any("holds a private key" in note for note in box.isolation.notes)
    assert none_seen == {"SSL_CERT_FILE": None, "PIP_CERT": None}
    assert closed.isolation.ca_files == ()


def test_the_setting_reaches_the_policy_and_never_a_kernelspec() -> None:
    """``upstream_proxy`` on the kernel's settings becomes the allow-list's; with credentials
    it is not written into a kernelspec, and a summary shows it without them."""
    from rewyn_kernel.settings import KernelSettings

    plain = KernelSettings.model_validate({"network": ["pypi.org"], "upstream_proxy": "none"})
    policy = plain.spec().allow_list
    assert policy is not None
    assert policy.upstream_proxy == "none"
    assert "--SandboxKernel.upstream_proxy=none" in plain.flags()
    secret = KernelSettings.model_validate(
        {"network": ["pypi.org"], "upstream_proxy": f"http://{USER}:{SECRET}@p:1"}
    )
    with pytest.raises(ValueError, match="not written into a kernelspec"):
        secret.flags()
    assert SECRET not in json.dumps(secret.summary())
    assert SECRET not in repr(secret)
    assert SECRET not in json.dumps(secret.spec().summary())
    spec_policy = secret.spec().allow_list
    assert spec_policy is not None
    assert spec_policy.upstream_proxy == f"http://{USER}:{SECRET}@p:1"  # (used, not shown)
