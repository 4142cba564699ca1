"""The boundary inside a JupyterHub-style container (issue 37, tests (a)): the engine's default
seccomp profile, which refuses user namespaces, no added capability, uid 1000, and the package
installed in it (tests/hub_container.py). There, every surface picks the landlock provider by
default: ``rewyn-kernel run`` through the sandboxed kernel, ``create()`` with each network form,
the MCP server over stdio (driven by the MCP SDK's client from the host, through ``docker exec``)
and a pool.

Before that provider, the same code ran there on the subprocess provider: it read uid 1000's
files, connected to the Jupyter server's port on the container's loopback with
``network="none"`` and could signal the server. The hostile probes below do each of these, and
the same probe run as plain code of uid 1000 (the control) succeeds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.runtime import JsonlRunLog
from rewyn_kernel.runtime.providers.landlock import probe_landlock

from .conftest import TEST_IMAGE, engine_problem, unavailable
from .hub_container import HOME, PORT, SECRETS, HubContainer, docker, hub_container, hub_venv

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hub-container"), pytest.mark.timeout(900)]
# (900 s: the first test builds the venv; about 40 s with pip's cache filled, minutes without)

EPERM, EACCES = 1, 13
SECRET_PATHS = [f"{HOME}/{name}" for name in SECRETS]

PROBE = """
import json, os, socket
label = %(label)r
out = {}
for name in %(secrets)r:
    try:
        with open(name) as handle:
            out[name] = "read: " + handle.read()[:40]
    except OSError as exc:
        out[name] = exc.errno
# The kernel's own connection file, named on its command line (which /proc shows).
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open("/proc/%%s/cmdline" %% pid, "rb") as handle:
            argv = handle.read().decode().split("\\0")
    except OSError:
        continue
    if "-f" in argv and argv[argv.index("-f") + 1].endswith(".json"):
        name = argv[argv.index("-f") + 1]
        try:
            with open(name) as handle:
                out["connection file"] = "read: " + handle.read()[:40]
        except OSError as exc:
            out["connection file"] = exc.errno
try:
    with socket.create_connection(("127.0.0.1", %(port)d), timeout=5) as sock:
        sock.sendall(("from " + label).encode())
    out["tcp"] = "connected"
except OSError as exc:
    out["tcp"] = exc.errno
for who, pid in (("sleep", %(sleep)d), ("server", %(server)d)):
    try:
        os.kill(pid, 0)
        out["signal " + who] = "sent"
    except OSError as exc:
        out["signal " + who] = exc.errno
print(json.dumps(out))
"""


def probe(hub: HubContainer, label: str) -> str:
    """The hostile code: read uid 1000's secrets (and a kernel's connection file if a kernel
    runs), connect to the listener and send it ``from LABEL``, signal the server's processes."""
    return PROBE % {
        "label": label,
        "secrets": SECRET_PATHS,
        "port": PORT,
        "sleep": hub.sleep_pid,
        "server": hub.server_pid,
    }


def assert_held(seen: dict[str, Any]) -> None:
    """What the sandbox's probe must have found: nothing of the user's, nobody to signal."""
    for name in SECRET_PATHS:
        assert seen[name] == EACCES, (name, seen)  # Landlock
    assert seen.get("connection file", EACCES) == EACCES, seen
    assert seen["signal sleep"] == EPERM, seen  # Landlock's signal scope
    assert seen["signal server"] == EPERM, seen


@pytest.fixture(scope="module")
def hub() -> Iterator[HubContainer]:
    if (problem := engine_problem("docker")) is not None:
        unavailable(f"docker is not usable here ({problem}); run scripts/container-engines.sh")
    if not (support := probe_landlock()).works:
        unavailable(f"this kernel has no usable Landlock: {support.detail}")
    venv = hub_venv()
    print(
        f"hub venv {venv.path}: "
        + ("cached" if venv.built_in is None else f"built in {venv.built_in:.1f} s")
    )
    with hub_container(TEST_IMAGE, venv.path) as container:
        yield container


@pytest.fixture(autouse=True)
def nothing_left(hub: HubContainer) -> Iterator[None]:
    """After each test, the container runs its listener and its sleep only: every sandbox,
    kernel and server a test started there is gone."""
    yield
    deadline = time.monotonic() + 15
    while len(rest := hub.processes()) > 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(rest) == 2, rest


def test_the_control_plain_code_of_the_user_reaches_all_of_it(hub: HubContainer) -> None:
    """Without the sandbox, uid 1000's code in the container reads the secrets, connects to
    the listener and signals the server: what the other tests see refused is there."""
    seen = hub.python(probe(hub, "plain code"))
    for name, text in SECRETS.items():
        assert seen[f"{HOME}/{name}"] == "read: " + text[:40], seen
    assert seen["tcp"] == "connected", seen
    assert seen["signal sleep"] == seen["signal server"] == "sent", seen
    assert b"from plain code" in hub.received()
    # The engine's default profile: no user namespace for anyone in the container.
    unshare = hub.python(
        "import ctypes, json\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(json.dumps({'unshare': libc.unshare(0x10000000), 'errno': ctypes.get_errno()}))\n"
    )
    assert unshare == {"unshare": -1, "errno": EPERM}, unshare


NOTEBOOK_CELLS = (
    "import os\nprint('hello from the hub', os.getuid())",
    "print(open('data.csv').read())",  # the notebook's folder: its workspace, read-only
    "open('data.csv', 'a').write('more')",
)


def test_a_notebook_runs_on_the_sandboxed_kernel_under_landlock(hub: HubContainer) -> None:
    work = hub.home / "work"
    work.mkdir()
    (work / "data.csv").write_text("a,b\n1,2\n")
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    sources = [*NOTEBOOK_CELLS, probe(hub, "the notebook")]
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]  # type: ignore[no-untyped-call]
    nbformat.write(nb, work / "analysis.ipynb")  # type: ignore[no-untyped-call]
    docker("exec", "-u", "0", hub.name, "chown", "-R", "1000:1000", f"{HOME}/work")
    argv = hub.exec_argv(
        str(hub.venv / "bin" / "rewyn-kernel"), "run", "--allow-errors", "work/analysis.ipynb"
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    out: nbformat.NotebookNode = nbformat.read(  # type: ignore[no-untyped-call]
        work / "analysis.out.ipynb", as_version=4
    )
    cells = out.cells
    assert [cell.metadata[METADATA_KEY]["record"]["provider"] for cell in cells] == [
        "landlock"
    ] * len(cells)
    assert cells[0].outputs[0]["text"] == "hello from the hub 1000\n"
    assert cells[1].outputs[0]["text"] == "a,b\n1,2\n\n"
    assert cells[2].outputs[0]["ename"] == "PermissionError"  # (the workspace is read-only)
    assert (work / "data.csv").read_text() == "a,b\n1,2\n"
    seen = json.loads(cells[3].outputs[0]["text"])
    assert "connection file" in seen, seen  # (the kernel's was found, and refused)
    assert_held(seen)
    assert seen["tcp"] == EPERM, seen  # the seccomp filter: no new socket at all
    assert b"from the notebook" not in hub.received()


CREATE = """
import json, os, sys
from rewyn_kernel.runtime import create
PROBES = json.loads(sys.argv[1])
out = {}
for network in ("none", "allow"):
    with create(network=network) as box:
        result = box.execute(PROBES[network])
        out[network] = {
            "provider": box.isolation.provider,
            "network": box.isolation.network,
            "result provider": result.provider,
            "ending": result.ending,
            "stderr": result.stderr,
            "seen": json.loads(result.stdout or "{}"),
        }
LISTED = r'''
import json, os, socket
out = {}
def tunnel(port, payload):
    host, proxy_port = os.environ["HTTPS_PROXY"].split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(proxy_port)), timeout=10) as sock:
        ask = b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n" % port
        sock.sendall(ask + b"Host: 127.0.0.1:%d\\r\\n\\r\\n" % port)
        head = sock.recv(1024).split(b"\\r\\n")[0].decode()
        if " 200" in head:
            sock.sendall(payload)
        return head
out["listed"] = tunnel(8888, b"from network=list")
out["unlisted"] = tunnel(8889, b"from an unlisted port")
try:
    with socket.create_connection(("127.0.0.1", 8888), timeout=10) as sock:
        sock.sendall(b"from a direct connect\\r\\n\\r\\n")
        out["direct"] = sock.recv(200).split(b"\\r\\n")[0].decode() or "closed"
except OSError as exc:
    out["direct"] = exc.errno
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out["udp"] = "made"
except OSError as exc:
    out["udp"] = exc.errno
print(json.dumps(out))
'''
before = set(filter(str.isdigit, os.listdir("/proc")))
with create(network=["127.0.0.1:8888"]) as box:
    listed = box.execute(LISTED)
    out["list"] = {
        "provider": box.isolation.provider,
        "network": box.isolation.network,
        "result provider": listed.provider,
        "ending": listed.ending,
        "stderr": listed.stderr,
        "seen": json.loads(listed.stdout or "{}"),
    }
after = set(filter(str.isdigit, os.listdir("/proc")))
out["left over"] = len(after - before)
print(json.dumps(out))
"""


def test_create_keeps_none_allows_allow_and_an_allow_list(hub: HubContainer) -> None:
    probes = {network: probe(hub, f"network={network}") for network in ("none", "allow")}
    out = hub.python(CREATE, json.dumps(probes))
    for network in ("none", "allow"):
        found = out[network]
        assert found["provider"] == found["result provider"] == "landlock", found
        assert found["ending"] == "completed", found
        assert_held(found["seen"])
    none, allow = out["none"], out["allow"]
    assert none["network"] == "isolated"
    assert none["seen"]["tcp"] == EPERM, none  # no socket at all, not even on the loopback
    assert b"from network=none" not in hub.received()
    assert allow["network"] == "allowed"
    assert allow["seen"]["tcp"] == "connected", allow  # (the control, inside the sandbox)
    assert b"from network=allow" in hub.received()
    listed = out["list"]
    assert listed["provider"] == listed["result provider"] == "landlock", listed
    assert listed["network"] == "filtered", listed
    assert listed["ending"] == "completed", listed["stderr"]
    seen = listed["seen"]
    assert " 200" in seen["listed"], seen  # through the proxy, to the listed address
    assert b"from network=list" in hub.received()
    assert " 403" in seen["unlisted"], seen
    # A client that ignores the proxy variables reaches the proxy all the same, which refuses
    # what is no proxy request: the listener never hears from it.
    assert b"from a direct connect" not in hub.received()
    assert seen["direct"] != "", seen
    assert seen["udp"] == EPERM, seen
    assert out["left over"] == 0, out


def test_the_mcp_server_over_stdio_runs_python_under_landlock(
    hub: HubContainer, tmp_path: Path
) -> None:
    log = f"{HOME}/mcp.jsonl"
    errlog = tmp_path / "stderr.txt"
    argv = hub.exec_argv(
        str(hub.venv / "bin" / "rewyn-kernel"), "mcp", "--run-log", log, stdin=True
    )
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    results: list[types.CallToolResult] = []

    async def body() -> None:
        with open(errlog, "w") as err:
            async with Client(stdio_client(params, errlog=err)) as client:
                await calls(client)

    async def calls(client: Client) -> None:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        description = tools["run_python"].description or ""
        assert "(landlock; network isolated; files isolated" in description, description
        results.append(await client.call_tool("run_python", {"code": "x = 6 * 7\nprint(x)"}))
        results.append(await client.call_tool("run_python", {"code": probe(hub, "mcp")}))

    anyio.run(body)
    said = errlog.read_text()
    # The start line names the provider the sandboxes run on (it said subprocess, "which leaves
    # the host's files open", while they ran on landlock).
    assert "rewyn-kernel mcp: sandboxes run on landlock, Landlock and seccomp" in said, said
    assert "rewyn-kernel mcp: run_python is low risk (landlock: no network" in said, said
    first, hostile = (result.structured_content for result in results)
    assert first is not None
    assert hostile is not None
    assert first["stdout"] == "42\n", first
    seen = json.loads(hostile["stdout"])
    assert_held(seen)
    assert seen["tcp"] == EPERM, seen
    assert b"from mcp" not in hub.received()
    events = JsonlRunLog.read(hub.home / "mcp.jsonl")
    assert [event.provider for event in events] == ["landlock", "landlock"]


POOL = """
import json, sys
from rewyn_kernel.runtime import SandboxPool
codes = json.loads(sys.argv[1])
with SandboxPool(size=2) as pool:
    results = pool.map(codes)
print(json.dumps([
    {"provider": r.provider, "ending": r.ending, "stdout": r.stdout,
     "error": r.error.ename if r.error else None}
    for r in results
]))
"""


def test_a_pool_maps_snippets_under_landlock(hub: HubContainer) -> None:
    codes = [
        "print(6 * 7)",
        "x = 'left'\nprint('set')",
        "print('x' in globals())",  # (one-shots: nothing carried over)
        "raise ValueError('item 4')",
        probe(hub, "the pool"),
    ]
    out = hub.python(POOL, json.dumps(codes))
    assert isinstance(out, list)
    assert [item["provider"] for item in out] == ["landlock"] * len(codes), out
    assert [item["stdout"] for item in out[:3]] == ["42\n", "set\n", "False\n"], out
    assert out[3]["error"] == "ValueError", out
    seen = json.loads(out[4]["stdout"])
    assert_held(seen)
    assert seen["tcp"] == EPERM, seen
    assert b"from the pool" not in hub.received()


@pytest.fixture
def other_pods() -> Iterator[None]:
    """Tasks of uid 1000 outside the container, as the other single-user pods of a JupyterHub
    node run them (every pod's user is uid 1000): one process of 300 threads on the host. The
    container's /proc does not list them, but RLIMIT_NPROC counts them."""
    script = (
        "import sys, threading\n"
        "for _ in range(300):\n"
        "    threading.Thread(target=sys.stdin.read, daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    argv = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]
    pods = subprocess.Popen(
        [*argv, "/usr/bin/python3", "-I", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert pods.stdout is not None
    assert pods.stdout.readline() == "ready\n"
    yield
    pods.kill()
    pods.wait()
    pods.stdout.close()
    if pods.stdin is not None:
        pods.stdin.close()


BOUNDS = """
import json
from rewyn_kernel.runtime import create
THREADS = '''
import os, threading
threads = [threading.Thread(target=lambda: None) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("threads and a fork")
'''
FORK_BOMB = '''
import os, time
made = 0
try:
    for _ in range(400):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        made += 1
except OSError as exc:
    print("refused after", made, exc.errno)
'''
with create(pids_limit=64, timeout=60) as box:
    threads = box.execute(THREADS)
    bomb = box.execute(FORK_BOMB)
    print(json.dumps({
        "pids": box.isolation.pids,
        "threads": [threads.ending, threads.stdout, threads.stderr[-400:]],
        "bomb": [bomb.ending, bomb.stdout, bomb.stderr[-400:]],
    }))
"""


def test_the_pids_bound_counts_the_users_tasks_in_other_pods(
    hub: HubContainer, other_pods: None
) -> None:
    """RLIMIT_NPROC counts uid 1000's tasks across the node, which the container's /proc does
    not list: the bound is sized by the kernel's count, so the code still starts threads and
    a process (it could start none when the bound was sized by /proc), and a fork bomb stops
    at the bound."""
    out = hub.python(BOUNDS)
    assert "RLIMIT_NPROC: 64 tasks more" in out["pids"], out
    assert out["threads"][:2] == ["completed", "threads and a fork\n"], out
    ending, stdout, _ = out["bomb"]
    assert ending == "completed", out
    words = stdout.split()
    assert words[:2] == ["refused", "after"], out
    assert 8 <= int(words[2]) <= 64, out  # (the bound holds; it is not zero)
