"""Print what the network allow-list's proxy costs, against a direct download in the same run.

Never asserts on timings. A local server on 127.0.0.1 (tests/egress_servers.py) serves both
runs; the same code downloads from it in two default-provider sandboxes: one with
``network="allow"`` (bubblewrap shares the host's network: the direct path) and one whose
allow-list names the server (the path through the relay and the host's proxy).

- throughput of one download (100 MiB by default), over plain HTTP (the proxy parses each
  request and answer with h11) and over HTTPS (a CONNECT tunnel: bytes relayed as they are),
  the median of the runs; the target is at least 0.8x the direct figure;
- latency: N small requests one after the other, each on a new connection (as urllib makes
  them), the added time per request (through the proxy minus direct); the target is < 1 ms.

    python -m benchmarks.bench_egress            # 3 rounds: 100 MiB x 3, 300 requests each
    python -m benchmarks.bench_egress --quick    # 3 rounds: 20 MiB x 2, 50 requests each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.egress.proxy import TEST_HOSTS
from rewyn_kernel.runtime.sandbox import Sandbox
from tests.egress_servers import Servers

DOWNLOAD = """
import json, time, urllib.request
def download(url):
    started = time.perf_counter()
    got = 0
    with urllib.request.urlopen(url, timeout=120) as answer:
        while True:
            chunk = answer.read(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    return got, time.perf_counter() - started
def requests(url, count):
    started = time.perf_counter()
    for _ in range(count):
        with urllib.request.urlopen(url, timeout=10) as answer:
            answer.read()
    return (time.perf_counter() - started) / count
"""


RESOLVE_LOCALLY = """
import socket
_resolve = socket.getaddrinfo
def _local(host, *rest, **kw):
    return _resolve("127.0.0.1" if host == "files.test" else host, *rest, **kw)
socket.getaddrinfo = _local
"""
"""The direct path's name resolution (the sandbox shares the host's resolver, which does not
know the test name): the same URLs, to the same server."""


ROUNDS = 3


def measure(
    box: Sandbox, servers: Servers, size: int, runs: int, count: int, *, direct: bool = False
) -> dict[str, float]:
    name = "files.test"
    code = (
        (RESOLVE_LOCALLY if direct else "")
        + DOWNLOAD
        + f"""
plain = [download("http://{name}:{servers.http_port}/bytes?n={size}") for _ in range({runs})]
secure = [download("https://{name}:{servers.https_port}/bytes?n={size}") for _ in range({runs})]
each = requests("http://{name}:{servers.http_port}/small", {count})
assert all(got == {size} for got, _ in plain + secure)
print(json.dumps([[s for _, s in plain], [s for _, s in secure], each]))
"""
    )
    result = box.execute(code, timeout=3600)
    if result.exit_code != 0:
        raise SystemExit(f"the benchmark's code failed:\n{result.stderr}")
    plain, secure, each = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "plain": size / statistics.median(plain),
        "secure": size / statistics.median(secure),
        "request_ms": each * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    size, runs, count = (20 << 20, 2, 50) if args.quick else (100 << 20, 3, 300)
    os.environ[TEST_HOSTS] = "files.test=127.0.0.1"
    folder = Path(tempfile.mkdtemp(prefix="rewyn-bench-egress-"))
    folder.chmod(0o755)
    # The servers run in a process of their own, as the internet would: in this one, their
    # threads would take turns with the proxy's for the interpreter.
    serving = subprocess.Popen(
        [sys.executable, "-m", "tests.egress_servers", str(folder)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serving.stdout is not None
        http_port, https_port, ca_file = json.loads(serving.stdout.readline())
        servers = Servers(http_port, https_port, Path(ca_file))
        ca = str(servers.ca_file)
        env, shown = {"SSL_CERT_FILE": ca}, [folder]
        listed = servers.allowed()
        with (
            create(network="allow", env=env, read_dirs=shown, timeout=3600.0) as direct_box,
            create(network=listed, env=env, read_dirs=shown, timeout=3600.0) as proxied_box,
        ):
            provider = proxied_box.isolation.provider
            # Rounds taken in turn (direct, then through the proxy): what else the machine
            # does weighs on both alike; each figure is the median of its rounds.
            rounds: dict[str, list[dict[str, float]]] = {"direct": [], "proxied": []}
            for _ in range(ROUNDS):
                rounds["direct"].append(
                    measure(direct_box, servers, size, runs, count, direct=True)
                )
                rounds["proxied"].append(measure(proxied_box, servers, size, runs, count))
            direct, proxied = (
                {key: statistics.median(r[key] for r in rounds[way]) for key in rounds[way][0]}
                for way in ("direct", "proxied")
            )
    finally:
        serving.kill()
        serving.wait()
        shutil.rmtree(folder, ignore_errors=True)
    mib = 1 << 20
    print(
        f"allow-list proxy, {provider} provider, {ROUNDS} rounds in turn of {size >> 20} MiB x "
        f"{runs} and {count} requests"
    )
    for key, label in (("plain", "HTTP"), ("secure", "HTTPS (CONNECT)")):
        ratio = proxied[key] / direct[key]
        print(
            f"  {label:16} direct {direct[key] / mib:8.1f} MiB/s   proxy "
            f"{proxied[key] / mib:8.1f} MiB/s   {ratio:.2f}x  (target >= 0.8x)"
        )
    added = proxied["request_ms"] - direct["request_ms"]
    print(
        f"  per request      direct {direct['request_ms']:.2f} ms   proxy "
        f"{proxied['request_ms']:.2f} ms   added {added:.2f} ms  (target < 1 ms)"
    )


if __name__ == "__main__":
    main()
