"""The boundary holds against the code inside it: no forged result, no stolen execution, nothing
that reaches another sandbox or outlives its own."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.sandbox import Sandbox

FORGE_THROUGH_PROC = textwrap.dedent(
    """
    import json, os, struct
    def frame(header, payload=b""):
        body = json.dumps(header).encode()
        return struct.pack(">II", len(body), len(payload)) + body + payload
    forged = frame({"t": "out", "s": "stdout"}, b"all tests passed\\n")
    forged += frame({"t": "done", "id": "x", "exit_code": 0, "status": "ok"})
    reached = []
    for fd in range(0, 12):
        try:
            handle = os.open("/proc/1/fd/%d" % fd, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(handle, forged)
            reached.append(fd)
        except OSError:
            pass
        os.close(handle)
    print("reached", reached)
    raise SystemExit(3)
    """
)


def test_code_cannot_forge_its_result_through_the_supervisors_descriptors(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box()
    for run in (box.execute, box.session().execute):
        result = run(FORGE_THROUGH_PROC)
        assert (result.ending, result.exit_code) == ("exit", 3), result
        assert "all tests passed" not in result.stdout
        # fd 0 and 1 of the supervisor are /dev/null: gVisor lets anyone open those.
        assert set(eval(result.stdout.split("reached ", 1)[1])) <= {0, 1}, result.stdout


def _host_pid_of_supervisor(box: Sandbox) -> int:
    """The host pid of the sandbox's first process (the supervisor)."""
    session = box._oneshot()  # type: ignore[attr-defined]
    worker = session._next
    process = worker.process
    if isinstance(box.provider, ContainerProvider):
        name = process._name
        done = subprocess.run(
            [*process._cli, "inspect", "--format", "{{.State.Pid}}", name],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout.strip())
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    return int(children[0])


def _memory_holds(pid: int, needle: bytes) -> bool:
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(part, 16) for part in span.split("-"))
            try:
                memory.seek(start)
                chunk = memory.read(end - start)
            except OSError:
                continue
            if needle in chunk:
                return True
    return False


@pytest.mark.providers("subprocess", "docker", "podman")
def test_no_execution_finds_another_ones_code_or_output_in_its_memory(
    make_box: Callable[..., Sandbox],
) -> None:
    """The next execution's process is a fork of the supervisor: its memory must not hold what
    an earlier one sent or printed. (Read from the host, so the needle is not in the scanner.)"""
    secret = f"secret-{uuid.uuid4().hex}"
    box = make_box()
    code = (
        f"value = {secret[::-1]!r}[::-1]\nprint(value)\ndisplay({{'text/plain': value}}, raw=True)"
    )
    result = box.execute(code)
    assert result.stdout == secret + "\n"
    assert box.execute("print('next')").ok  # its process is forked now
    supervisor = _host_pid_of_supervisor(box)
    assert not _memory_holds(supervisor, secret.encode())
    assert not _memory_holds(supervisor, secret[::-1].encode())


@pytest.mark.providers("subprocess")
def test_shared_memory_is_bounded_and_goes_with_the_sandbox(
    make_box: Callable[..., Sandbox],
) -> None:
    code = textwrap.dedent(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        made = [libc.shmget(0, 200 * 1024 * 1024, 0o1600) for _ in range(3)]
        print(sum(1 for sid in made if sid >= 0))
        """
    )
    before = subprocess.run(["ipcs", "-m"], capture_output=True, text=True, check=True).stdout
    box = make_box(memory_limit_mb=256)
    with box.session() as session:
        assert session.execute(code).stdout == "1\n"  # the cap holds: one of 200 MiB fits
        shown = subprocess.run(["ipcs", "-m"], capture_output=True, text=True, check=True).stdout
        assert shown == before  # not the host's: the sandbox has its own
    assert box.execute(code).stdout == "1\n"
    assert box.execute(code).stdout == "1\n"  # the one-shot before it left nothing
    box.close()


@pytest.mark.providers("docker", "podman")
def test_the_engine_logs_nothing_of_the_channel(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    with box.session() as session:
        session.execute("print('x' * 100_000)")
        process: Any = session._next.process  # type: ignore[union-attr]
        done = subprocess.run(
            [*process._cli, "inspect", "--format", "{{json .HostConfig.LogConfig}}", process._name],
            capture_output=True,
            text=True,
            check=True,
        )
    assert json.loads(done.stdout)["Type"] in ("none", "")
    assert "none" in done.stdout


@pytest.mark.providers("docker")
def test_one_sandbox_full_of_threads_leaves_the_others_theirs(
    make_box: Callable[..., Sandbox],
) -> None:
    """Every container's code runs as one uid; a per-uid process limit was shared by all."""
    spawn = textwrap.dedent(
        """
        import threading
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(240)]
        for t in threads:
            t.start()
        print(len(threads))
        """
    )
    sessions = [make_box().session() for _ in range(4)]
    for session in sessions:
        assert session.execute(spawn).stdout == "240\n"
    fifth = make_box().execute("import threading\nt = threading.Thread(target=print)\nt.start()")
    assert fifth.ok, fifth
    for session in sessions:
        session.close()


def test_a_sessions_code_sees_no_other_session(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    first, second = box.session(), box.session()
    if box.provider.name == "landlock":  # (no PID namespace: it sees the host's process list)
        first.execute("import os; print(os.getpid())")
        other = first.execute("import os; print(os.getpid())").stdout.strip()
        probe = (
            f"import os\ntry:\n    os.kill({other}, 0); print('signalled')\nexcept OSError as e: "
            f"print(e.errno)\ntry:\n    open('/proc/{other}/environ', 'rb').read(); print('read')\n"
            "except OSError as e: print(e.errno)"
        )
        assert second.execute(probe).stdout.split() == ["1", "13"]  # EPERM, EACCES
        return
    count = "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))"
    first.execute("import threading; stop = threading.Event()")
    first.execute("[threading.Thread(target=stop.wait).start() for _ in range(3)]")
    assert int(first.execute(count).stdout) <= 3  # the supervisor, the code, a runtime's init
    assert int(second.execute(count).stdout) <= 3


def test_a_forged_end_in_a_session_does_not_lift_the_next_timeout(
    make_box: Callable[..., Sandbox],
) -> None:
    """A session's code shares its process with its own state: it can end its execution early
    (README), and its next execution's deadline still holds."""
    forge = textwrap.dedent(
        """
        import gc, json, os, struct, threading
        sender = next(o for o in gc.get_objects() if type(o).__name__ == "Sender")
        child = next(o for o in gc.get_objects() if type(o).__name__ == "CodeProcess")
        status = {"t": "status", "id": child.current, "exit_code": 0, "status": "ok"}
        body = json.dumps(status, separators=(",", ":"))  # as the worker writes it
        os.write(sender.fd, struct.pack(">II", len(body), 0) + body.encode())
        while True:
            pass
        """
    )
    box = make_box(timeout=3)
    with box.session() as session:
        started = time.monotonic()
        early = session.execute(forge)
        assert early.ending == "completed"  # the forgery: what the README says a session can do
        assert time.monotonic() - started < 2
        started = time.monotonic()
        result = session.execute("print('next')")
        assert result.timed_out, result  # its code never ran: the deadline held
        assert time.monotonic() - started < 6


def test_two_open_sandboxes_cannot_signal_each_other(make_box: Callable[..., Sandbox]) -> None:
    """No pid of one sandbox names a process of the other: each has its own PID namespace."""
    reachable = textwrap.dedent(
        """
        import os
        found = []
        for pid in range(2, 1 << 15):
            try:
                os.kill(pid, 0)
                found.append(pid)
            except ProcessLookupError:
                pass
            except PermissionError:
                found.append(pid)
        tasks = {
            int(task)
            for p in os.listdir('/proc') if p.isdigit()
            for task in os.listdir('/proc/%s/task' % p)
        }
        print(sorted(set(found) - tasks), len(tasks))
        """
    )
    a, b = make_box(), make_box()
    if a.provider.name == "landlock":
        # No PID namespace: every pid of the host's names a process, but the only ones the code
        # can signal are its own (Landlock's signal scope, ABI 6).
        reachable = reachable.replace(
            "    except PermissionError:\n        found.append(pid)\n",
            "    except PermissionError:\n        pass\n",
        ).replace("for p in os.listdir('/proc') if p.isdigit()", "for p in [str(os.getpid())]")
    with a.session() as sa, b.session() as sb:
        sb.execute("import threading; stop = threading.Event()")
        sb.execute("[threading.Thread(target=stop.wait).start() for _ in range(3)]")
        outside, tasks = sa.execute(reachable).stdout.rsplit(" ", 1)
        assert outside == "[]"  # every pid it can signal is one of its own (threads included)
        assert int(tasks) <= 8  # the supervisor, the code and its threads: nothing of b's
        assert sb.execute("print('alive')").stdout == "alive\n"
