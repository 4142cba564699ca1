"""One owner for each worker's life: nothing touches a worker after it is closed, nothing a
sandbox starts outlives it, and the host buffers no more than it says."""

from __future__ import annotations

import contextlib
import marshal
import os
import py_compile
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.host import protocol
from rewyn_kernel.runtime.host.drive import SESSION_GRACE_SECONDS
from rewyn_kernel.runtime.providers.scripted import ScriptedProvider, ScriptedWorker
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .conftest import leftover_containers
from .test_limits import STUBBORN


@pytest.mark.providers("subprocess")
def test_a_late_answer_never_reaches_the_next_sandbox(provider: SandboxProvider) -> None:
    """The answer to A's question comes after A is closed; B's input() must not receive it."""
    a = create(provider=provider, timeout=20)
    session_a = a.session()

    def slow_a(prompt: str, password: bool) -> str:
        session_a.interrupt()
        time.sleep(1.0)  # the person answers after the code was interrupted and A closed
        return "A-password"

    interrupted = session_a.execute(
        "import getpass; getpass.getpass('A password: ')", on_input=slow_a
    )
    assert interrupted.ending == "interrupted"
    a.close()
    b = create(provider=provider, timeout=10)
    try:
        session_b = b.session()

        def slow_b(prompt: str, password: bool) -> str:
            time.sleep(2.0)  # A's answer is written meanwhile
            return "B"

        result = session_b.execute("print('B got:', input('B? '))", on_input=slow_b)
        assert result.stdout == "B got: B\n"
    finally:
        b.close()


def test_an_answer_after_close_is_written_nowhere() -> None:
    """Scripted: the question is open when the sandbox closes; the answer comes after."""
    asked = threading.Event()
    release = threading.Event()

    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        worker.expect("exec")
        worker.send({"t": "input_request", "prompt": "? ", "password": False, "id": 1})
        asked.set()
        worker.expect("never")  # until the host kills it

    provider = ScriptedProvider(script)
    box = provider.create()
    session = box.session()
    results = []

    def answer(prompt: str, password: bool) -> str:
        release.wait(10)
        return "too late"

    runner = threading.Thread(
        target=lambda: results.append(session.execute("input()", on_input=answer))
    )
    runner.start()
    assert asked.wait(10)
    box.close()
    runner.join(10)
    assert results[0].ending == "crashed"
    assert "closed" in results[0].message
    # Pipes made now take the numbers the closed sandbox's descriptors had.
    spares = [os.pipe() for _ in range(4)]
    try:
        release.set()
        time.sleep(0.2)  # (the answering thread has nothing to wait for: it is released)
        for read_end, _ in spares:
            os.set_blocking(read_end, False)
            with pytest.raises(BlockingIOError):
                os.read(read_end, 1)
    finally:
        for read_end, write_end in spares:
            os.close(read_end)
            os.close(write_end)
    process = provider.processes[0]
    assert [frame["t"] for frame in process.received] == ["exec"]


def test_a_done_racing_the_timeout_ends_in_one_timeout_and_one_event(
    events: list[SandboxEvent],
) -> None:
    """Scripted: the worker reports the code done just as the host's interrupt arrives."""

    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        while True:
            header, _ = worker.expect("exec")
            worker.expect("interrupt")
            worker.done(header["id"], status="ok")

    box = ScriptedProvider(script).create(listeners=())
    with box.session() as session:
        result = session.execute("spin()", timeout=0.3)
        assert (result.ending, result.exit_code) == ("timeout", 124)
        assert not result.sandbox_restarted  # the code stopped: its state is whole
    box.close()
    assert [event.ending for event in events] == ["timeout"]


def test_a_session_whose_code_ignores_the_interrupt_is_killed_at_the_grace(
    events: list[SandboxEvent],
) -> None:
    """Scripted: past the deadline the worker takes the interrupt and says nothing more."""

    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        worker.expect("exec")
        worker.expect("interrupt")
        worker.recv(timeout=60)  # (nothing comes: the host kills the worker)

    box = ScriptedProvider(script).create(listeners=())
    with box.session() as session:
        started = time.monotonic()
        result = session.execute("spin()", timeout=0.3)
        assert 0.3 + SESSION_GRACE_SECONDS <= time.monotonic() - started < 0.3 + 5
        assert (result.ending, result.exit_code) == ("timeout", 124)
        assert result.sandbox_restarted
        assert "state lost" in result.message
    box.close()
    assert [event.ending for event in events] == ["timeout"]


def test_a_worker_dying_in_mid_frame_is_a_crash_with_its_exit_code() -> None:
    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        worker.expect("exec")
        worker.write(b'\x00\x00\x00\x40\x00\x00\x00\x00{"t": "disp')  # half a frame
        worker.exit(5)

    with ScriptedProvider(script).create() as box:
        result = box.execute("x")
    assert (result.ending, result.exit_code) == ("crashed", 5), result


def test_a_worker_that_never_reads_its_program_fails_to_start_in_time() -> None:
    started = time.monotonic()
    provider = ScriptedProvider(lambda worker: None, read_program=False)
    with create(provider=provider, startup_timeout=1.0) as box:
        result = box.execute("x")
    assert result.ending == "start_failed"
    assert "did not take its program: it did not read it in time" in result.message
    assert time.monotonic() - started < 10


def test_garbage_between_executions_is_dropped_unparsed() -> None:
    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        while True:
            header, _ = worker.expect("exec")
            worker.done(header["id"])
            # After the end: not JSON, and not even a frame the host would accept.
            worker.write(b"\x00\x00\x00\x05\x00\x00\x00\x00junk!")

    with ScriptedProvider(script).create() as box, box.session() as session:
        assert session.execute("a").ok
        time.sleep(0.2)  # (the junk is on its way; nothing waits for it)
        second = session.execute("b")
        assert second.ok, second
        assert "1 frames of output written between executions were dropped" in second.stderr


def test_a_listener_takes_what_comes_between_executions_and_nothing_of_one() -> None:
    """Orderings on purpose: the scripted worker writes only when the test says so."""
    go = threading.Event()

    def script(worker: ScriptedWorker) -> None:
        worker.ready()
        header, _ = worker.expect("exec")
        worker.out("stdout", b"one\n")
        worker.done(header["id"])
        go.wait(30)
        worker.out("stdout", b"between one\n")  # (no execution: the listener's)
        header, _ = worker.expect("exec")
        worker.out("stdout", b"two\n")
        worker.done(header["id"])
        worker.out("stdout", b"between two\n")  # (right after the end: the listener's too)
        worker.expect("exec")

    heard: list[str] = []
    arrived = threading.Condition()

    def on_stream(name: str, text: str) -> None:
        with arrived:
            heard.append(text)
            arrived.notify_all()

    def wait_for(text: str) -> None:
        with arrived:
            assert arrived.wait_for(lambda: text in "".join(heard), timeout=10), heard

    with ScriptedProvider(script).create() as box, box.session() as session:
        assert session.execute("a").stdout == "one\n"
        listening = session.listen(on_stream=on_stream)
        assert listening is not None
        assert session.listening
        go.set()
        wait_for("between one\n")
        second = session.execute("b")  # (takes the worker over, and gives it back)
        assert second.stdout == "two\n", second
        assert "dropped" not in second.stderr, second
        wait_for("between two\n")
        assert "".join(heard) == "between one\nbetween two\n"
        listening.stop()
        assert not session.listening


def test_an_answer_given_at_once_is_not_taken_for_a_stale_one() -> None:
    """The worker registers a question before it asks it (unit test of the worker part)."""
    from rewyn_kernel.runtime.worker.frames import InputReplyFrame
    from rewyn_kernel.runtime.worker.frontend import Questions

    class AnswersAtOnce:
        def send(self, header: dict[str, object], payload: bytes = b"") -> None:
            assert isinstance(header["id"], int)
            questions.deliver(InputReplyFrame(id=header["id"], exec="x"), b"quick")

    questions = Questions(AnswersAtOnce(), lambda: None)  # type: ignore[arg-type]
    result: list[str] = []
    asker = threading.Thread(target=lambda: result.append(questions.input("? ")), daemon=True)
    asker.start()
    asker.join(5)
    assert result == ["quick"]


def test_a_failure_puts_the_traceback_in_stderr(make_box: Callable[..., Sandbox]) -> None:
    result = make_box().execute("def f():\n    1/0\nf()")
    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert result.stderr.endswith("ZeroDivisionError: division by zero\n")
    assert 'File "<cell-1>", line 3' in result.stderr
    assert result.error is not None
    assert result.stderr.endswith("".join(result.error.traceback))
    assert result.stderr_bytes == 0  # what the code itself wrote


@pytest.mark.providers("subprocess", "docker")
@pytest.mark.timeout(300)  # (128 MiB through the channel: a minute on a loaded 2-core machine)
def test_a_flood_of_frames_between_executions_does_not_grow_the_host(
    make_box: Callable[..., Sandbox], tmp_path: Path
) -> None:
    """16 MiB displays sent by a background thread after its cell ended, while the host is
    idle, are read and dropped unparsed (before, the host kept up to 64 of them, parsed: the
    eight sent here, kept, are more than the 100 MiB of growth allowed)."""

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    workdir = tmp_path / "scratch"
    workdir.mkdir()
    workdir.chmod(0o777)
    box = make_box(timeout=60, workdir=workdir)
    inside = box.provider.worker_config(box.spec, box.files).cwd
    flood = textwrap.dedent(
        f"""
        import threading, time
        def flood():
            time.sleep(0.3)
            for i in range(8):
                display({{'text/plain': 'x' * (16 * 1024 * 1024 - 16384)}}, raw=True)
            open({inside + "/flooded"!r}, "w").close()
        threading.Thread(target=flood).start()
        """
    )
    with box.session() as session:
        session.execute("pass")
        before = peak = rss()
        assert session.execute(flood).ok
        deadline = time.monotonic() + 240
        while not (workdir / "flooded").exists() and time.monotonic() < deadline:
            peak = max(peak, rss())
            time.sleep(0.05)
        assert (workdir / "flooded").exists()
        peak = max(peak, rss())
        after = session.execute("print('fine')")
        assert after.stdout == "fine\n"
    assert peak - before < 100 * 1024 * 1024, f"host RSS grew {(peak - before) >> 20} MiB"


HEARTBEAT = """
import ctypes, os, threading, time
try:
    ctypes.CDLL(None).prctl(1, 0)  # clear this process's death signal
except Exception:
    pass
def beat():
    while True:
        with open({path!r}, "a") as handle:
            handle.write("x")
        time.sleep(0.05)
threading.Thread(target=beat, daemon=False).start()
os._exit = lambda *args: None
print("beating", flush=True)
"""


def _still_beating(path: Path, wait: float = 1.0) -> bool:
    size = path.stat().st_size if path.exists() else 0
    time.sleep(wait)
    return (path.stat().st_size if path.exists() else 0) > size


def test_nothing_the_code_starts_outlives_close_or_a_timeout(
    make_box: Callable[..., Sandbox], tmp_path: Path
) -> None:
    workdir = tmp_path / "scratch"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)  # the container's user writes here too
    box = make_box(timeout=2.0, workdir=workdir)
    inside = box.provider.worker_config(box.spec, box.files).cwd
    heartbeat = HEARTBEAT.format(path=f"{inside}/beat")
    session = box.session()
    assert session.execute(heartbeat).stdout == "beating\n"
    assert _still_beating(workdir / "beat")
    result = session.execute(STUBBORN)  # (code that stops on the interrupt keeps its state)
    assert result.timed_out
    assert result.sandbox_restarted
    assert not _still_beating(workdir / "beat")
    assert session.execute(heartbeat).stdout == "beating\n"
    assert _still_beating(workdir / "beat")
    box.close()  # the session with it
    assert not _still_beating(workdir / "beat")


def test_one_shot_code_cannot_reach_the_supervisor(make_box: Callable[..., Sandbox]) -> None:
    """No ptrace of the sandbox's first process, no way into its descriptors or memory."""
    code = textwrap.dedent(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        seized = libc.ptrace(0x4206, 1, 0, 0)  # PTRACE_SEIZE
        print("seize", seized, ctypes.get_errno() != 0)
        # (fd 0 and 1 of the supervisor are /dev/null, which gVisor lets anyone open; 2, 3 and
        # 4 are its diagnostics and the host's channel.)
        for name in ("fd/2", "fd/3", "fd/4", "mem"):
            mode = os.O_RDWR if name.startswith("fd") else os.O_RDONLY
            try:
                os.close(os.open("/proc/1/" + name, mode))
                print("opened", name)
            except OSError:
                pass
        """
    )
    box = make_box()
    for run in (box.execute, box.session().execute):
        result = run(code)
        assert result.stdout == "seize -1 True\n", result


@pytest.mark.providers("subprocess", "bubblewrap", "docker", "podman")
def test_nothing_outlives_the_host_process(
    provider: SandboxProvider, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workdir = tmp_path / "scratch"
    workdir.mkdir()
    workdir.chmod(0o777)
    host = textwrap.dedent(
        f"""
        import sys
        from tests.conftest import build_provider
        from rewyn_kernel.runtime import create
        box = create(provider=build_provider({request.node.callspec.params["provider"]!r}),
                     workdir={str(workdir)!r})
        session = box.session()
        inside = box.provider.worker_config(box.spec, box.files).cwd
        beating = session.execute({HEARTBEAT!r}.format(path=inside + "/beat"))
        print(beating.stdout if beating.ok else repr(beating), flush=True)
        print(box.execute("print('warm')").stdout, flush=True)
        sys.stdin.read()
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", host],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == b"beating\n", first
        assert _still_beating(workdir / "beat")
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 15
        while _still_beating(workdir / "beat", 0.5) and time.monotonic() < deadline:
            pass
        assert not _still_beating(workdir / "beat")
        if isinstance(provider, ContainerProvider):
            deadline = time.monotonic() + 15
            while provider.containers(host_pid=process.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert provider.containers(host_pid=process.pid) == []
    finally:
        if process.poll() is None:
            process.kill()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


@pytest.mark.providers("docker", "podman")
def test_a_container_closed_while_it_starts_leaves_nothing(provider: SandboxProvider) -> None:
    """close() racing `<cli> run`: no container may be left, not even in Created state."""
    from rewyn_kernel.errors import SandboxClosedError

    for delay in (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3):
        box = create(provider=provider, timeout=10)

        def open_session(target: Sandbox = box) -> None:
            with contextlib.suppress(SandboxClosedError):
                target.session()  # it launches a container now

        opener = threading.Thread(target=open_session)
        opener.start()
        time.sleep(delay)
        box.close()
        opener.join(30)
    assert leftover_containers(provider, timeout=20.0) == []


SLOW_ENGINE = """#!/bin/sh
# A docker CLI whose 'run' reaches the engine late: the engine goes on creating the container
# even after this CLI is killed (in its own session, as a request the daemon already has).
real={real}
if [ "$1" = run ]; then
    shift
    for arg; do [ "$prev" = --name ] && name=$arg; prev=$arg; done
    setsid -w sh -c 'sleep 6; exec "$0" create "$@" >/dev/null' "$real" "$@" &
    wait $!
    exec "$real" start -ai "$name"
fi
exec "$real" "$@"
"""


@pytest.mark.providers("docker")
def test_a_container_the_engine_creates_late_is_still_removed(
    provider: SandboxProvider, tmp_path: Path
) -> None:
    """Scripted engine timing: the container appears seconds after close() began."""
    import shutil

    assert isinstance(provider, ContainerProvider)
    cli = tmp_path / "docker"
    cli.write_text(SLOW_ENGINE.format(real=shutil.which("docker")))
    cli.chmod(0o755)
    slow = ContainerProvider(image=provider.image, runtime=str(cli), pull="never")
    box = create(provider=slow, timeout=10)
    opener = threading.Thread(target=box.session)  # it launches a container now
    opener.start()
    time.sleep(1.0)  # `run` is under way; the engine has not created the container yet
    box.close()
    opener.join(60)
    assert provider.containers() == []
    time.sleep(7)  # past the moment the late creation would land
    assert provider.containers() == []


@pytest.mark.providers("docker", "podman")
def test_the_sweep_removes_only_the_containers_of_hosts_that_died(
    provider: SandboxProvider,
) -> None:
    """A sweep judges each container by its labels: this process's running sandbox, another
    boot's container and one of a host in another PID namespace stay, a dead host's goes.
    (podman's `ps` cannot print a label: a sweep that read them there took every container for
    a dead host's, this process's own too.)"""
    from rewyn_kernel.runtime.providers.container import (
        BOOT_LABEL,
        HOST_PID_LABEL,
        LABEL,
        PIDNS_LABEL,
    )

    assert isinstance(provider, ContainerProvider)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # (a pid whose process has exited)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    pidns = os.readlink("/proc/self/ns/pid")
    planted = {
        "rewyn-sweep-test-dead": (gone, boot, pidns),
        "rewyn-sweep-test-other-boot": (gone, "b", pidns),
        "rewyn-sweep-test-in-a-container": (gone, boot, "pid:[1]"),
    }
    box = create(provider=provider)
    try:
        session = box.session()
        assert session.execute("x = 1").ok
        for thread in threading.enumerate():  # this process's own first sweep is over
            if thread.name == "rewyn-sweep":
                thread.join(60)
        for name, (pid, booted, namespace) in planted.items():
            labels = [f"{LABEL}={name}", f"{HOST_PID_LABEL}={pid}", f"{BOOT_LABEL}={booted}"]
            labels.append(f"{PIDNS_LABEL}={namespace}")
            made = subprocess.run(
                [provider.runtime, "create", "--name", name]
                + [f"--label={label}" for label in labels]
                + [provider.image, "true"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            assert made.returncode == 0, made.stderr
        ours = provider.containers()
        assert len(ours) == 1, ours
        swept = provider.sweep()  # (and any other dead host's that this engine still has)
        assert "rewyn-sweep-test-dead" in swept
        assert provider.containers() == ours
        assert session.execute("print(x)").stdout == "1\n"
        left = provider.containers(everyone=True)
        assert "rewyn-sweep-test-other-boot" in left
        assert "rewyn-sweep-test-in-a-container" in left
        assert "rewyn-sweep-test-dead" not in left
    finally:
        box.close()
        for name in planted:  # (one at a time: podman's rm of a missing name removes none)
            subprocess.run(
                [provider.runtime, "rm", "-f", name], capture_output=True, check=False, timeout=60
            )


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(inner for c in nested for inner in _code_objects(c))]


def test_the_worker_goes_compiled_from_the_bytecode_cache_as_its_source_compiles(
    tmp_path: Path,
) -> None:
    """What the subprocess provider sends into a sandbox (the worker's modules, compiled by
    this interpreter) is read from Python's bytecode cache where it is current; it must be the
    code its source compiles to, and every frame of it labelled as the worker's."""
    protocol._compiled_modules.cache_clear()
    try:
        sent = marshal.loads(protocol._compiled_modules())
    finally:
        protocol._compiled_modules.cache_clear()
    _, texts = protocol.worker_sources()
    assert sorted(sent) == sorted(protocol.WORKER_MODULES)
    for name, code in sent.items():
        label = f"<rewyn-worker/{name}.py>"
        fresh = compile(texts[name], label, "exec")
        assert [c.co_code for c in _code_objects(code)] == [
            c.co_code for c in _code_objects(fresh)
        ], name
        assert {c.co_filename for c in _code_objects(code)} == {label}
    # A stale cache entry (the source changed since) is not used: the source is.
    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    py_compile.compile(str(source), doraise=True)
    source.write_text("x = 2  # changed\n")
    code = protocol._module_code(source, source.read_text())
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace["x"] == 2
    assert code.co_filename == "<rewyn-worker/mod.py>"
