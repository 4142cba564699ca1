"""Timeouts, processes, network, environment and memory: what the subprocess sandbox stops."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.host.drive import SESSION_GRACE_SECONDS
from rewyn_kernel.runtime.providers.local import cgroup
from rewyn_kernel.runtime.sandbox import BubblewrapProvider, Sandbox, SandboxProvider

from .conftest import inside_workdir, processes_with, wait_until_gone
from .unprivileged import UnprivilegedHost

GRANDCHILD_THEN_SPIN = """
import subprocess
subprocess.Popen(["sleep", "1000"])
print("started", flush=True)
while True:
    pass
"""

SETSID_DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1000)
    os._exit(0)
print("daemon started", flush=True)
time.sleep(1000)
"""


IGNORES_INTERRUPTS = """
import time
print("stubborn started", flush=True)
while True:
    try:
        time.sleep(10)
    except KeyboardInterrupt:
        pass
"""


@pytest.mark.parametrize(
    "code",
    [GRANDCHILD_THEN_SPIN, SETSID_DAEMON, IGNORES_INTERRUPTS],
    ids=["grandchild", "setsid", "ignores-interrupts"],
)
def test_timeout_returns_promptly_and_leaves_no_process(
    make_box: Callable[..., Sandbox], marker: str, code: str
) -> None:
    box = make_box(timeout=1.0, env={"MARKER": marker})
    started = time.monotonic()
    result = box.execute(code)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.ending == "timeout"
    assert result.exit_code == 124
    assert elapsed < 1.0 + 2.0, elapsed
    assert "started" in result.stdout
    assert "timed out after 1 s" in result.message
    assert result.error is not None
    assert result.error.ename == "TimeoutError"
    # Closing kills only the fresh spare worker; anything left of the timed-out one would stay.
    box.close()
    assert wait_until_gone(marker, timeout=1.0) == []


STUBBORN = """
while True:
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass
"""
"""Code that swallows every interrupt: only killing its sandbox stops it."""


def test_timeout_in_a_session_interrupts_and_keeps_the_state(
    make_box: Callable[..., Sandbox],
) -> None:
    """Past the limit the code is interrupted first; code that stops keeps its variables (a
    person's work on a slow cell), and the result says where it was stuck."""
    with make_box(timeout=1.0).session() as session:
        session.execute("x = 1")
        timed_out = session.execute("while True: pass")
        assert timed_out.timed_out
        assert (timed_out.ending, timed_out.exit_code) == ("timeout", 124)
        assert not timed_out.sandbox_restarted
        assert "the state is kept" in timed_out.message
        assert any("<cell-2>" in line for line in timed_out.error.traceback)  # type: ignore[union-attr]
        after = session.execute("print(x)")
        assert after.stdout == "1\n"
        assert not after.state_lost


def test_timeout_of_code_that_does_not_stop_restarts_and_says_state_was_lost(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box(timeout=1.0).session() as session:
        session.execute("x = 1")
        started = time.monotonic()
        timed_out = session.execute(STUBBORN)
        assert time.monotonic() - started < 1.0 + SESSION_GRACE_SECONDS + 3.0
        assert timed_out.timed_out
        assert timed_out.sandbox_restarted
        assert "state lost" in timed_out.message
        after = session.execute("print(x)")
        assert after.state_lost
        assert after.error is not None
        assert after.error.ename == "NameError"
        assert "fresh one" in after.message
        again = session.execute("x = 2; print(x)")
        assert again.ok
        assert not again.state_lost


def test_per_execution_timeout_overrides_the_spec(make_box: Callable[..., Sandbox]) -> None:
    box = make_box(timeout=30.0)
    result = box.execute("import time; time.sleep(10)", timeout=0.5)
    assert result.timed_out
    assert result.duration_ms < 3000


def test_interrupt_raises_keyboard_interrupt_and_keeps_state(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box(timeout=30.0).session() as session:
        session.execute("x = 'kept'")
        threading.Timer(0.5, session.interrupt).start()
        started = time.monotonic()
        result = session.execute("import time\ntime.sleep(30)")
        assert time.monotonic() - started < 5
        assert result.interrupted
        assert result.ending == "interrupted"
        assert result.exit_code == 130
        assert result.error is not None
        assert result.error.ename == "KeyboardInterrupt"
        assert not result.sandbox_restarted
        assert session.execute("print(x)").stdout == "kept\n"
        assert session.interrupt() is False  # nothing running


def test_restart_clears_state(make_box: Callable[..., Sandbox], marker: str) -> None:
    box = make_box(env={"MARKER": marker})
    with box.session() as session:
        session.execute("x = 1")
        session.restart()
        result = session.execute("print(x)")
        assert result.error is not None
        assert result.error.ename == "NameError"
    box.close()
    assert wait_until_gone(marker) == []


def test_the_sandbox_has_its_own_process_tree(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    if box.provider.name == "landlock":  # (the README: no PID namespace; it says so)
        assert not box.isolation.pid_namespace
        assert any("no PID namespace" in note for note in box.isolation.notes)
        return
    assert box.isolation.pid_namespace
    code = "import os\nprint(os.getppid(), [p for p in os.listdir('/proc') if p.isdigit()])"
    one_shot = box.execute(code).stdout.split(" ", 1)
    assert one_shot[0] == "1"  # forked by the supervisor: the namespace's first process
    assert len(eval(one_shot[1])) <= 3  # the supervisor and the code (a runtime's init)
    with box.session() as session:
        assert session.execute("import os; print(os.getppid())").stdout == "1\n"


@pytest.fixture
def loopback_server() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"hello from the host\n")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


CONNECT = """
import socket
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
        print("CONNECTED", s.recv(100))
except OSError as exc:
    print("REFUSED", type(exc).__name__, exc)
"""


def test_network_none_blocks_a_host_loopback_server(
    make_box: Callable[..., Sandbox], loopback_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    box = make_box(network="none")
    assert box.isolation.network == "isolated"
    result = box.execute(CONNECT.format(port=loopback_server))
    assert result.stdout.startswith("REFUSED"), result.stdout + result.stderr


@pytest.mark.providers("subprocess")
def test_network_allow_reaches_the_same_server(
    make_box: Callable[..., Sandbox], loopback_server: int
) -> None:
    # The same code reaches the server when the network is allowed: the test above can fail.
    allowed = make_box(network="allow").execute(CONNECT.format(port=loopback_server))
    assert allowed.stdout.startswith("CONNECTED"), allowed.stdout + allowed.stderr


@pytest.mark.providers("subprocess")
def test_isolation_is_reported_honestly_without_namespaces(
    make_box: Callable[..., Sandbox],
) -> None:
    from rewyn_kernel.runtime.sandbox import SubprocessProvider

    box = make_box(provider=SubprocessProvider(namespaces=False))
    isolation = box.isolation
    # network="none" still holds: the seccomp filter refuses every new socket
    assert isolation.network == "isolated"
    assert any("refuses every new socket" in note for note in isolation.notes)
    assert not isolation.pid_namespace
    assert any("the host's files are open" in note for note in isolation.notes)
    result = box.execute("print('still runs')")
    if os.geteuid() == 0:
        # As root, without a user namespace the code would be the host's root: it never runs.
        assert result.ending == "start_failed", result
        assert "uid of its own" in result.message, result.message
        return
    assert result.stdout == "still runs\n"
    assert result.isolation == isolation


def test_inherit_nothing_hides_parent_secrets(
    make_box: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    default = make_box().execute("import os; print(os.environ.get('SECRET_TOKEN'))")
    assert default.stdout == "None\n"
    box = make_box(inherit_env=[])
    result = box.execute(
        "import os\nprint(sorted(os.environ))\nprint(os.environ['HOME'])\nprint(os.getcwd())\n"
        "print(os.environ.get('PATH'))"
    )
    names, home, cwd, path = result.stdout.splitlines()
    assert "SECRET_TOKEN" not in names
    assert path != os.environ["PATH"]
    assert home == inside_workdir(box)
    assert cwd == inside_workdir(box)
    chosen = make_box(inherit_env=["SECRET_TOKEN"]).execute(
        "import os; print(os.environ['SECRET_TOKEN'])"
    )
    assert chosen.stdout == "do-not-leak\n"


def test_env_values_never_appear_in_any_argv(make_box: Callable[..., Sandbox]) -> None:
    value = "s3cr3t-value-" + os.urandom(4).hex()
    box = make_box(env={"API_KEY": value})
    result = box.execute("import os, time; print(os.environ['API_KEY'])")
    assert result.stdout == f"{value}\n"
    with box.session() as session:
        session.execute("import os")
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    assert value.encode() not in (entry / "cmdline").read_bytes()
                except OSError:
                    continue


def test_memory_cap_stops_a_large_allocation_and_ordinary_code_runs(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(memory_limit_mb=256)
    big = box.execute("data = b'x' * (1024 ** 3)\nprint('allocated')")
    assert big.exit_code != 0
    assert "allocated" not in big.stdout
    assert big.memory_exceeded
    assert "memory limit of 256 MiB" in big.message
    if isinstance(box.provider, ContainerProvider):
        assert big.ending == "oom"  # the kernel's OOM killer, reported as such
    ordinary = box.execute(
        "import json, threading\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "print(sum(range(10**6)), len(json.dumps(list(range(10**5)))))"
    )
    assert ordinary.ok, ordinary.stderr
    assert ordinary.stdout == "499999500000 688890\n"


@pytest.mark.providers("subprocess")
def test_memory_cap_in_a_session_keeps_the_session(make_box: Callable[..., Sandbox]) -> None:
    with make_box(memory_limit_mb=128).session() as session:
        session.execute("x = 5")
        assert session.execute("y = ' ' * (512 * 1024 * 1024)").memory_exceeded
        assert session.execute("print(x)").stdout == "5\n"


@pytest.mark.providers("docker", "docker+runsc", "podman")
def test_oom_in_a_container_session_is_reported_and_the_session_restarts(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box(memory_limit_mb=128).session() as session:
        session.execute("x = 5")
        killed = session.execute("y = ' ' * (512 * 1024 * 1024)")
        assert killed.ending == "oom"
        assert killed.memory_exceeded
        assert killed.sandbox_restarted
        after = session.execute("print(1)")
        assert after.state_lost
        assert after.stdout == "1\n"


HOST = """
import sys
sys.path.insert(0, {root!r})
from tests.conftest import build_provider
from rewyn_kernel.runtime import create
box = create(provider=build_provider({kind!r}), env={{"MARKER": "{marker}"}})
session = box.session()
session.execute("import subprocess; subprocess.Popen(['sleep', '1000'])")
print("ready", flush=True)
session.execute("import time; time.sleep(1000)")
"""


def test_nothing_survives_the_host_process_being_killed(
    provider: SandboxProvider, request: pytest.FixtureRequest, marker: str
) -> None:
    import subprocess
    import sys

    kind = request.node.callspec.params["provider"]
    root = str(Path(__file__).resolve().parent.parent)
    host = subprocess.Popen(
        [sys.executable, "-c", HOST.format(root=root, kind=kind, marker=marker)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline() == "ready\n"
        if isinstance(provider, ContainerProvider):
            assert provider.containers(host_pid=host.pid)  # running: the check below can fail
        else:
            assert processes_with(marker)
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
    assert wait_until_gone(marker, timeout=5.0) == []
    if isinstance(provider, ContainerProvider):
        deadline = time.monotonic() + 10
        while provider.containers(host_pid=host.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert provider.containers(host_pid=host.pid) == []


DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", "1000"], {{"DAEMON_MARKER": {mark!r}}})
    os._exit(0)
{then}
"""


# Without namespaces (an ordinary host only: a root host never runs code without them).


def test_without_namespaces_a_setsid_daemon_is_still_killed(marker: str) -> None:
    with UnprivilegedHost("subprocess-no-namespaces", timeout=1.0) as box:
        daemon = DAEMON.format(mark=marker, then="time.sleep(1000)")
        assert box.execute(daemon)["timed_out"]
        # The one-shot's supervisor is a subreaper: it found and killed the daemon.
        assert wait_until_gone(marker) == []
        started = box.session_execute(DAEMON.format(mark=marker, then="print('started')"))
        assert started["ending"] == "completed", started
        deadline = time.monotonic() + 5  # (the daemon's exec comes a moment after the cell)
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_with(marker)  # in a session it may run on, until the sandbox closes
        box.close()  # the supervisor's channel closes: it kills what it started, then exits
    assert wait_until_gone(marker) == []


def test_without_namespaces_killing_the_supervisor_lets_a_daemon_escape_as_the_notes_say(
    marker: str,
) -> None:
    import signal

    with UnprivilegedHost("subprocess-no-namespaces", timeout=5.0) as box:
        assert any("can outlive the sandbox" in note for note in box.isolation["notes"])
        killed = box.execute(DAEMON.format(mark=marker, then="os.kill(os.getppid(), 9)"))
        assert killed["ending"] == "crashed", killed
        box.close()
    survivors = wait_until_gone(marker, timeout=1.0)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors  # the escape the notes admit to: the namespace tests above can fail


def test_small_memory_caps_still_run_ordinary_code(make_box: Callable[..., Sandbox]) -> None:
    box = make_box(memory_limit_mb=64)
    assert box.execute("print(sum(range(100)))").stdout == "4950\n"
    with box.session() as session:
        assert session.execute("print('session')").stdout == "session\n"


CHILDREN = """
import json, subprocess, sys
hold = "b = bytearray(160 * 1024 * 1024)\\nfor i in range(0, len(b), 4096): b[i] = 1\\n"
hold += "import time; time.sleep(3)"
kids = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(8)]
print(json.dumps([kid.wait() for kid in kids]))
"""
GROWS = """
import subprocess, sys, time
hold = "b = bytearray(100 * 1024 * 1024)\\nfor i in range(0, len(b), 4096): b[i] = 1\\n"
kid = subprocess.Popen([sys.executable, "-c", hold + "import time; time.sleep(30)"])
time.sleep(1.5)
mine = bytearray(200 * 1024 * 1024)
for i in range(0, len(mine), 4096):
    mine[i] = 1
print("both held")
"""


def _cgroups_or_skip() -> None:
    from rewyn_kernel.runtime.providers.local.cgroup import cgroup_support

    from .conftest import unavailable

    support = cgroup_support()
    if support.parent is None:
        unavailable(f"no memory cgroup can be made here ({support.detail})")


@pytest.mark.providers("subprocess", "bubblewrap")
def test_children_together_stay_under_the_memory_cap(make_box: Callable[..., Sandbox]) -> None:
    """Eight children of 160 MB each under a 256 MiB cap: RLIMIT_AS alone (one process) lets
    all of them live (1280 MB); the sandbox's cgroup lets at most one."""
    _cgroups_or_skip()
    box = make_box(memory_limit_mb=256, timeout=60)
    assert box.isolation.memory is not None
    assert "for all of a worker's processes together" in box.isolation.memory
    result = box.execute(CHILDREN)
    assert result.ok, result.stderr
    codes = [int(code) for code in result.stdout.strip("[]\n").split(",")]
    assert sum(code == 0 for code in codes) <= 1, codes
    assert all(code in (0, -9) for code in codes), codes
    assert result.memory_exceeded
    assert "killed for exceeding the memory limit of 256 MiB" in result.message


@pytest.mark.providers("subprocess", "bubblewrap")
def test_code_that_grows_past_the_cap_beside_its_child_ends_in_oom(
    make_box: Callable[..., Sandbox],
) -> None:
    """The code (200 MB) and its child (100 MB), each under RLIMIT_AS: together past the cap,
    the kernel kills the largest, the code, and the result says oom; the session lives on."""
    _cgroups_or_skip()
    box = make_box(memory_limit_mb=256, timeout=60)
    with box.session() as session:
        result = session.execute(GROWS)
        assert result.ending == "oom", (result.ending, result.message, result.stderr[-500:])
        assert result.memory_exceeded
        assert "memory limit of 256 MiB" in result.message
        assert session.execute("print('alive')").stdout == "alive\n"


MOVER = "rewyn_kernel.runtime.providers.popen.move_tree"
"""What a launch calls to move its processes into their cgroups (patched to hold or refuse)."""


def _waiting_supervisor(root: int) -> int:
    """The supervisor below ``root`` once it waits for its go (blocked in a read of a pipe
    other than its stdin, three looks in a row); fails after 30 s."""
    deadline, seen = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        for pid in cgroup.descendants(root):
            try:
                if b"rewyn-worker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                call = Path(f"/proc/{pid}/syscall").read_text().split()
                waits = Path(f"/proc/{pid}/wchan").read_text()
            except OSError:
                continue
            if call[:1] == ["0"] and int(call[1], 16) != 0 and "pipe" in waits:
                seen += 1
                if seen == 3:
                    return pid
                break
        else:
            seen = 0
        time.sleep(0.01)
    raise AssertionError("the supervisor never waited for its go")


@pytest.mark.providers("subprocess", "bubblewrap")
def test_no_code_runs_before_the_sandbox_is_in_its_cgroups(
    make_box: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host moves a starting sandbox's processes into its cgroups while they start (the
    first write waits for an RCU grace period, which the start then hides), and the supervisor
    forks no code until they are in. The move held here, the supervisor waits alone and the
    execution with it; let go, the code runs, and every process of a session is inside."""
    _cgroups_or_skip()
    real = cgroup.move_tree
    launches: list[tuple[cgroup.WorkerCgroup, int]] = []
    held, release = threading.Event(), threading.Event()

    def hold(group: cgroup.WorkerCgroup, root: int, alive: Callable[[], bool]) -> str | None:
        launches.append((group, root))
        held.set()
        assert release.wait(60)
        return real(group, root, alive)

    monkeypatch.setattr(MOVER, hold)
    box = make_box(memory_limit_mb=256, timeout=30)
    results: list[object] = []
    runner = threading.Thread(target=lambda: results.append(box.execute("print('ran')")))
    runner.start()
    try:
        assert held.wait(30)
        supervisor = _waiting_supervisor(launches[0][1])
        assert cgroup.descendants(supervisor) == [supervisor]  # (no code process yet)
        assert results == []
    finally:
        release.set()
        runner.join(60)
    assert [getattr(result, "stdout", result) for result in results] == ["ran\n"]
    with box.session() as session:
        started = session.execute("import subprocess\np = subprocess.Popen(['sleep', '60'])")
        assert started.ok, started.stderr
        group, root = launches[-1]
        tree = cgroup.descendants(root)
        assert len(tree) >= 3  # (the launch, the supervisor, the code's process, its sleep)
        for pid in tree:
            for _, key, path in group.members:
                assert cgroup.cgroups_of(pid).get(key) == path, (pid, key)
        if isinstance(box.provider, BubblewrapProvider):  # (a cgroup namespace: the code sees "/")
            seen = session.execute("print(open('/proc/self/cgroup').read())").stdout
            for line in seen.split():
                assert line.split(":", 2)[2] == "/", seen


@pytest.mark.providers("subprocess", "bubblewrap")
def test_a_sandbox_that_cannot_join_its_cgroups_does_not_start(
    make_box: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cgroups_or_skip()
    monkeypatch.setattr(MOVER, lambda group, root, alive: "a test said no")
    result = make_box(memory_limit_mb=256, timeout=30).execute("print('ran')")
    assert result.ending == "start_failed", result
    assert result.message.endswith(
        "it said: the sandbox could not be moved into its cgroups: a test said no"
    ), result.message
    assert result.stdout == ""


LIFT = """
import os
path = [line.split(":", 2)[2] for line in open("/proc/self/cgroup").read().splitlines()
        if "memory" in line.split(":")[1].split(",") or line.startswith("0::")]
tried = []
for part in path:
    for name in ("memory/" + part.strip("/") + "/memory.limit_in_bytes",
                 part.strip("/") + "/memory.max"):
        target = "/sys/fs/cgroup/" + name.replace("//", "/")
        try:
            with open(target, "w") as handle:
                handle.write(str(8 * 1024 ** 3))
            tried.append("lifted " + target)
        except OSError as exc:
            tried.append(type(exc).__name__)
print(tried)
"""


@pytest.mark.providers("subprocess", "bubblewrap")
def test_the_code_cannot_lift_its_own_memory_cap(make_box: Callable[..., Sandbox]) -> None:
    """The cgroup's files belong to the host's user, whom the code runs as on the subprocess
    provider: /sys/fs/cgroup is covered in its mount namespace (bubblewrap has no /sys)."""
    _cgroups_or_skip()
    box = make_box(memory_limit_mb=256, timeout=30)
    from rewyn_kernel.runtime.providers.local.cgroup import cgroup_support, tcp_share

    parent = cgroup_support().parent
    assert parent is not None
    with box.session() as session:
        result = session.execute(LIFT)  # (a session: its worker's cgroup lives on, to be read)
        assert result.ok, result.stderr
        ours = [p for p in parent.iterdir() if p.name.startswith(f"rewyn-{os.getpid()}-")]
        assert ours  # (so that the check below can fail)
        for group in ours:
            cap = 256 * 1024 * 1024
            if (group / "memory.max").exists():
                assert int((group / "memory.max").read_text()) == cap, group
            else:  # (cgroup v1: an eighth of the cap bounds the TCP buffers, apart)
                tcp = int((group / "memory.kmem.tcp.limit_in_bytes").read_text())
                assert tcp == tcp_share(cap) > 0, group
                assert int((group / "memory.limit_in_bytes").read_text()) == cap - tcp, group
        assert session.execute(CHILDREN).memory_exceeded  # (the cap and its OOM count hold)
