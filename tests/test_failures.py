"""Bad input and misbehaving code: every ending is a result and exactly one event."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rewyn_kernel.runtime import JsonlRunLog, acreate, create
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .conftest import leftover_containers

# Code that finds its own process's frame pipe to the supervisor (same process: that much is
# always possible) and writes to it directly.
FORGE = """
import gc, os
sender = next(o for o in gc.get_objects() if type(o).__name__ == "Sender")
os.write(sender.fd, {frame!r})
import time; time.sleep(5)
"""

KILL_PARENT = "import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('parent?')"
ENDINGS = [
    ("print('fine')", "completed", 0),
    ("1/0", "exception", 1),
    ("def broken(:\n  pass", "exception", 1),
    ("import sys; sys.exit(3)", "exit", 3),
    ("import sys; sys.exit('bye')", "exit", 1),
    ("import os; os._exit(4)", "crashed", 4),
    ("import ctypes; ctypes.string_at(0)", "crashed", 139),
    ("import os; os.close(1); os.close(2); print('kept')", "completed", 0),
    # The parent is the supervisor: the namespace's first process, which the kernel shields from
    # signals sent from inside, and in a container another user than the code's (see the test).
    (KILL_PARENT, "completed", 0),
    (FORGE.format(frame=b"\x00\x00\x00\x05\x00\x00\x00\x00hello"), "protocol_error", 137),
    (FORGE.format(frame=b"\x7f\xff\xff\xff\x00\x00\x00\x00"), "protocol_error", 137),
    (FORGE.format(frame=b'\x00\x00\x00\x0b\x00\x00\x00\x00{"t":"bad"}'), "protocol_error", 137),
    ("while True: pass", "timeout", 124),
]


@pytest.mark.parametrize(("code", "ending", "exit_code"), ENDINGS)
def test_every_ending_is_a_clear_result_and_one_event(
    make_box: Callable[..., Sandbox],
    events: list[SandboxEvent],
    code: str,
    ending: str,
    exit_code: int,
) -> None:
    box = make_box(timeout=2.0)
    if code == KILL_PARENT and box.provider.name.startswith(("container", "landlock")):
        # PermissionError: the supervisor is another user (a container's), or outside the
        # code's Landlock domain
        ending, exit_code = "exception", 1
    started = time.monotonic()
    result = box.execute(code)
    assert time.monotonic() - started < 5
    assert (result.ending, result.exit_code) == (ending, exit_code), result
    if ending != "completed":
        assert result.message
        assert not result.ok
    assert len(events) == 1
    event = events[0]
    assert event.id == result.execution_id
    assert (event.ending, event.exit_code) == (ending, exit_code)
    # The sandbox is still usable afterwards.
    assert box.execute("print('next')").stdout == "next\n"


def test_killing_the_parent_in_a_session_harms_neither_host_nor_sandbox(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box().session() as session:
        session.execute("x = 1")
        result = session.execute("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
        if session.provider_name.startswith(("container", "landlock")):
            # The supervisor runs as another user, or outside the code's Landlock domain: the
            # code may not signal it at all.
            assert result.error is not None
            assert result.error.ename == "PermissionError"
        else:
            assert result.ok, result  # the namespace's first process: the kernel drops it
        assert session.execute("print(x)").stdout == "1\n"


LOST = "[rewyn: the session's state was lost: it ended between executions: "


@pytest.mark.parametrize("first", ["a-cell", "a-comm-delivery", "a-silent-execution"])
def test_a_process_that_ends_between_executions_is_said_with_its_cause_by_the_next_cell(
    make_box: Callable[..., Sandbox], first: str
) -> None:
    # The code's process ends while nothing runs (a thread's os._exit; so does a kill): the
    # first execution a person sees says so, first, with how it ended. A widget's message or
    # a silent request that comes first runs in the fresh sandbox and leaves it to that cell
    # (what they print nobody sees: said there, it was said to no one).
    with make_box().session() as session:
        ender = "import os, threading; x = 1; threading.Timer(0.2, os._exit, (5,)).start()"
        assert session.execute(ender).ok
        time.sleep(1.0)
        if first == "a-comm-delivery":
            message = {"comm_id": "0" * 32, "data": {"method": "update", "state": {}}}
            delivered = session.deliver_comm({"msg_type": "comm_msg", "content": message})
            assert not delivered.state_lost
        elif first == "a-silent-execution":
            assert not session.execute("y = 2", silent=True).state_lost
        after = session.execute("print('x' in globals())")
        assert after.state_lost, after
        assert after.stderr.startswith(LOST + "the code's process exited with code 5."), after
        assert after.stdout == "False\n"
        again = session.execute("print('again')")
        assert (again.state_lost, again.stderr) == (False, ""), again  # (said once)


def test_syntax_error_is_structured(make_box: Callable[..., Sandbox]) -> None:
    result = make_box().execute("def broken(:\n  pass")
    assert result.error is not None
    assert result.error.ename == "SyntaxError"
    assert any("<cell-1>" in line for line in result.error.traceback)


def test_segfault_reports_the_signal_and_the_fault_location(
    make_box: Callable[..., Sandbox],
) -> None:
    result = make_box().execute("import ctypes\nctypes.string_at(0)")
    assert "signal 11 (SIGSEGV" in result.message
    assert "Fatal Python error" in result.stderr
    assert "<cell-1>" in result.stderr


def test_closing_fds_1_and_2_does_not_break_the_next_execution(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box().session() as session:
        broken = session.execute("import os; os.close(1); os.close(2); os.write(1, b'x')")
        assert broken.error is not None
        assert broken.error.ename == "OSError"  # within the cell the fd stays closed
        assert session.execute("print('back')").stdout == "back\n"
        assert session.execute("os.write(2, b'err')").stderr == "err"


def test_a_fork_that_falls_off_the_cell_never_speaks_on_the_channel(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box().session() as session:
        code = "import os\npid = os.fork()\nprint('parent' if pid else 'child')\nif pid: os.wait()"
        result = session.execute(code)
        assert sorted(result.stdout.split()) == ["child", "parent"]
        assert session.execute("print(pid > 0)").stdout == "True\n"


def test_code_over_1_mb_runs(make_box: Callable[..., Sandbox]) -> None:
    code = "values = []\n" + "values.append(1)\n" * 100_000 + "print(len(values))"
    assert len(code) > 1024 * 1024
    result = make_box(timeout=60).execute(code)
    assert result.stdout == "100000\n"


def test_startup_failure_is_a_result_with_the_reason(
    make_box: Callable[..., Sandbox], events: list[SandboxEvent]
) -> None:
    box = make_box(python="/nonexistent/python3")
    result = box.execute("print(1)")
    assert result.ending == "start_failed"
    assert result.exit_code != 0
    assert "did not start" in result.message
    # The launcher's own words (unshare's, bwrap's, the engine's), or where the interpreter is
    # started directly (landlock), the error that says it is not there.
    assert result.stderr or "/nonexistent/python3" in result.message, result
    assert len(events) == 1


@pytest.mark.providers("subprocess", "docker")
def test_twenty_sandboxes_execute_concurrently(provider: SandboxProvider) -> None:
    async def scenario() -> list[str]:
        boxes = await asyncio.gather(*(acreate(provider=provider, timeout=30) for _ in range(20)))
        try:
            results = await asyncio.gather(
                *(
                    box.aexecute(f"import time; time.sleep(0.5); print({i} * {i})")
                    for i, box in enumerate(boxes)
                )
            )
        finally:
            await asyncio.gather(*(box.aclose() for box in boxes))
        return [r.stdout for r in results]

    started = time.monotonic()
    assert asyncio.run(scenario()) == [f"{i * i}\n" for i in range(20)]
    assert time.monotonic() - started < 60
    assert leftover_containers(provider) == []


def test_cancelling_aexecute_interrupts_and_still_emits_an_event(
    provider: SandboxProvider, events: list[SandboxEvent]
) -> None:
    async def scenario() -> None:
        box = await acreate(provider=provider, timeout=30)
        with box.session() as session:
            await session.aexecute("x = 1")
            running = asyncio.Event()
            task = asyncio.create_task(
                session.aexecute(
                    "import time\nprint('running', flush=True)\ntime.sleep(30)",
                    on_stream=lambda name, text: running.set(),
                )
            )
            await running.wait()  # cancelled while the code runs
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await session.aexecute("print(x)")).stdout == "1\n"
        await box.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert [e.ending for e in events] == ["completed", "interrupted", "completed"]
    assert leftover_containers(provider) == []


def test_async_callbacks_run_on_the_loop_in_order() -> None:
    async def scenario() -> tuple[list[str], bool]:
        loop_thread = threading.get_ident()
        threads: set[int] = set()
        chunks: list[str] = []

        def on_stream(name: str, text: str) -> None:
            threads.add(threading.get_ident())
            chunks.append(text)

        async def on_input(prompt: str, password: bool) -> str:
            await asyncio.sleep(0.01)
            return "typed"

        box = await acreate()
        with box.session() as session:
            result = await session.aexecute(
                "for i in range(3): print(i, flush=True)\nprint(input('> '))",
                on_stream=on_stream,
                on_input=on_input,
            )
        await box.aclose()
        return chunks, threads == {loop_thread} and result.stdout == "".join(chunks)

    chunks, consistent = asyncio.run(scenario())
    assert "".join(chunks) == "0\n1\n2\ntyped\n"
    assert consistent


def test_jsonl_run_log_gets_one_flushed_line_per_event(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "run.jsonl"
    box = create(listeners=[JsonlRunLog(log)], env={"TOKEN": "never-logged"}, timeout=1)
    try:
        box.execute("print('a')")
        assert len(log.read_text().splitlines()) == 1  # written before execute returned
        box.execute("1/0")
        box.execute("while True: pass")
    finally:
        box.close()
    lines = log.read_text().splitlines()
    assert [json.loads(line)["ending"] for line in lines] == ["completed", "exception", "timeout"]
    assert "never-logged" not in log.read_text()
    events = JsonlRunLog.read(log)
    assert events[0].type == "SANDBOX_EXECUTED"
    assert events[0].stdout == "a\n"
    assert events[1].error is not None
    assert events[0].isolation is not None
    assert events[0].spec["env_names"] == ["TOKEN"]


def test_malformed_run_log_line_is_named(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text('{"type": "SANDBOX_EXECUTED"}\n')
    with pytest.raises(ValueError, match=r"run.jsonl:1: not a SANDBOX_EXECUTED event"):
        JsonlRunLog.read(log)


@pytest.mark.providers("subprocess")
def test_a_failing_listener_does_not_change_the_result(make_box: Callable[..., Sandbox]) -> None:
    def broken(event: SandboxEvent) -> None:
        raise RuntimeError("listener bug")

    box = make_box(listeners=[broken])
    assert box.execute("print(1)").stdout == "1\n"
