"""Code that attacks the host side: forged frames, floods, forks, stuck callbacks, leaks."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rewyn_kernel.runtime import JsonlRunLog, create
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .conftest import processes_with, wait_until_gone
from .unprivileged import UnprivilegedHost

WRITE_TO_CHANNEL = """
import gc, os, struct, time
sender = next(o for o in gc.get_objects() if type(o).__name__ == "Sender")
frame = memoryview(struct.pack(">II", len({body!r}), 0) + {body!r})
while frame:
    frame = frame[os.write(sender.fd, frame):]
for tick in range(60):
    print("tick", tick, flush=True)
    time.sleep(0.1)
"""

FORGED = {
    "done": b'{"t": "done", "id": "x", "exit_code": 0, "status": "ok"}',
    "bigint": b'{"t": "error", "ename": "E", "evalue": "v", "traceback": [], "n": '
    + b"9" * 5000
    + b"}",
    "deep": b'{"t": "display", "data": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
}


@pytest.mark.parametrize("kind", sorted(FORGED))
def test_forged_frames_never_end_an_execution_early(
    make_box: Callable[..., Sandbox], kind: str
) -> None:
    box = make_box(timeout=4.0)
    code = WRITE_TO_CHANNEL.format(body=FORGED[kind])
    for run in (box.execute, box.session().execute):
        started = time.monotonic()
        result = run(code)
        assert time.monotonic() - started < 7
        # The supervisor relays no 'done' of the code's (in a session neither), and the host
        # refuses a frame it cannot parse: either way the code's process is killed.
        assert result.ending == "protocol_error", result
        assert result.exit_code == 137
        assert not result.ok


@pytest.mark.providers("subprocess")
def test_an_unclosed_sandbox_is_cleaned_up_when_dropped() -> None:
    def counts() -> tuple[int, int]:
        return len(os.listdir("/proc/self/fd")), threading.active_count()

    with create() as warm:  # warm-up: probes, caches; closing it joins its threads
        warm.execute("pass")
    gc.collect()
    before = counts()
    workdirs = []
    for _ in range(10):
        box = create()
        workdirs.append(box.workdir)
        assert box.execute("print(1)").stdout == "1\n"
        del box
    gc.collect()
    deadline = time.monotonic() + 5
    while counts() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts() <= before
    assert not any(path.exists() for path in workdirs)


@pytest.mark.providers("subprocess")
def test_rich_output_is_bounded_by_bytes_including_metadata(
    make_box: Callable[..., Sandbox],
) -> None:
    code = (
        "for i in range(12):\n"
        "    display({'text/plain': '', 'x' * 3_000_000: ''}, raw=True, "
        "metadata={'m': 'y' * 3_000_000})"
    )
    result = make_box().execute(code)
    assert result.ok
    assert len(result.outputs) == 5  # 5 x 6 MB fit in 32 MiB
    assert "7 rich outputs dropped" in result.stderr


@pytest.mark.providers("subprocess")
def test_a_raising_output_callback_does_not_stop_the_execution(
    make_box: Callable[..., Sandbox], events: list[SandboxEvent]
) -> None:
    def broken(name: str, text: str) -> None:
        raise RuntimeError("callback bug")

    result = make_box().execute("print('still here')", on_stream=broken)
    assert result.stdout == "still here\n"
    assert len(events) == 1


@pytest.mark.providers("subprocess")
def test_a_host_interrupt_kills_the_code_and_still_emits_the_event(
    make_box: Callable[..., Sandbox], events: list[SandboxEvent], marker: str
) -> None:
    box = make_box(timeout=30, env={"MARKER": marker})

    def ctrl_c(name: str, text: str) -> None:
        raise KeyboardInterrupt

    with box.session() as session:
        with pytest.raises(KeyboardInterrupt):
            session.execute(
                "import time\nprint('go', flush=True)\ntime.sleep(30)", on_stream=ctrl_c
            )
        assert [e.ending for e in events] == ["crashed"]
        assert "host stopped the execution" in events[0].message
        after = session.execute("print('fresh')")
        assert after.state_lost
        assert after.stdout == "fresh\n"


def test_forks_and_unjoined_children_do_not_hold_up_a_one_shot(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(timeout=10)
    started = time.monotonic()
    forked = box.execute("import os\nos.fork()\nprint('hi')")
    assert forked.ok, forked
    assert "hi" in forked.stdout
    spawned = box.execute(
        "import multiprocessing as mp, time\n"
        "p = mp.get_context('fork').Process(target=time.sleep, args=(100,))\n"
        "p.start()\nprint('started')"
    )
    assert spawned.ok, spawned
    assert time.monotonic() - started < 5


def test_without_namespaces_a_stubborn_child_is_still_killed(marker: str) -> None:
    # (without namespaces: an ordinary host only, see tests/unprivileged.py)
    with UnprivilegedHost("subprocess-no-namespaces", timeout=1.0, env={"MARKER": marker}) as box:
        code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
        started = time.monotonic()
        assert box.execute(code)["timed_out"]
        assert time.monotonic() - started < 3
        box.close()
    assert wait_until_gone(marker) == []


@pytest.mark.providers("subprocess")
def test_cancelling_a_queued_aexecute_cancels_only_that_one(provider: SandboxProvider) -> None:
    async def scenario() -> tuple[str, str, str]:
        box = create(provider=provider, timeout=30)
        session = box.session()
        started = asyncio.Event()

        def on_stream(name: str, text: str) -> None:
            if "started" in text:
                started.set()

        first = asyncio.create_task(
            session.aexecute(
                "import time\nprint('started', flush=True)\ntime.sleep(1.5)\nprint('first done')",
                on_stream=on_stream,
            )
        )
        await started.wait()  # the first runs; the second can only wait behind it
        second = asyncio.create_task(session.aexecute("print('second ran')"))
        await asyncio.sleep(0)  # (let it start waiting)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        result = await first
        after = await session.aexecute("print('third')")
        await box.aclose()
        return result.stdout, result.ending, after.stdout

    stdout, ending, after = asyncio.run(scenario())
    assert (stdout, ending) == ("started\nfirst done\n", "completed")
    assert after == "third\n"  # 'second ran' never printed anywhere


@pytest.mark.providers("subprocess")
def test_an_interrupt_during_compilation_is_not_lost(make_box: Callable[..., Sandbox]) -> None:
    code = "x = 0\n" * 300_000 + "while True: x += 1\n"
    with make_box(timeout=20).session() as session:
        session.execute("kept = True")

        def interrupt_once_running() -> None:
            while not session.interrupt():  # False until the execution has begun
                time.sleep(0.001)

        threading.Thread(target=interrupt_once_running, daemon=True).start()
        started = time.monotonic()
        result = session.execute(code)
        assert result.ending == "interrupted", result
        assert time.monotonic() - started < 10
        assert session.execute("print(kept)").stdout == "True\n"


@pytest.mark.providers("subprocess")
def test_an_interrupted_input_does_not_shift_later_answers(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box(timeout=20).session() as session:
        answers = {"slow? ": "first answer", "next? ": "second answer"}
        first_over = threading.Event()
        late_sent = threading.Event()

        def slow_answer(prompt: str, password: bool) -> str:
            if prompt == "slow? ":
                session.interrupt()
                first_over.wait(10)  # answered after the code was interrupted: must be dropped
                late_sent.set()
            else:
                late_sent.wait(10)  # the late answer goes out while this question is open
            return answers[prompt]

        interrupted = session.execute("input('slow? ')", on_input=slow_answer)
        assert interrupted.ending == "interrupted"
        first_over.set()
        later = session.execute("print(input('next? '))", on_input=slow_answer)
        assert later.stdout == "second answer\n"


@pytest.mark.providers("subprocess")
def test_oversized_names_and_prompts_are_trimmed_not_fatal(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box().session() as session:
        named = session.execute("raise type('E' * 5000, (Exception,), {})('boom')")
        assert named.ending == "exception"
        assert named.error is not None
        assert len(named.error.ename) <= 200
        prompt = session.execute("input('\\U0001f600' * 2_000_000)", on_input=lambda p, w: "ok")
        assert prompt.ending == "completed", prompt
        assert session.execute("print('alive')").stdout == "alive\n"


@pytest.mark.providers("subprocess")
def test_a_worker_dying_mid_output_is_a_crash_not_a_protocol_error(
    make_box: Callable[..., Sandbox],
) -> None:
    code = "import os, sys\nsys.stdout.write('y' * 5_000_000)\nsys.stdout.flush()\nos._exit(5)"
    box = make_box(timeout=20)
    for _ in range(5):
        with box.session() as session:
            result = session.execute(code)
            assert (result.ending, result.exit_code) == ("crashed", 5), result


@pytest.mark.providers("subprocess")
def test_code_with_lone_surrogates_still_reaches_the_run_log(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with create(listeners=[JsonlRunLog(log)]) as box:
        box.execute("s = '\\udcff'")
        box.execute("x = '\udcff'")
    assert len(JsonlRunLog.read(log)) == 2


@pytest.mark.providers("subprocess")
def test_no_process_of_many_sandboxes_outlives_them(marker: str) -> None:
    boxes = [create(env={"MARKER": marker}) for _ in range(5)]
    for box in boxes:
        box.execute("import subprocess; subprocess.Popen(['sleep', '100'])")
        box.session().execute("x = 1")
    assert processes_with(marker)
    for box in boxes:
        box.close()
    assert wait_until_gone(marker) == []


@pytest.mark.providers("subprocess")
def test_an_input_left_open_in_a_thread_does_not_stop_the_clock(
    make_box: Callable[..., Sandbox],
) -> None:
    def never(prompt: str, password: bool) -> str:
        time.sleep(20)
        return "too late"

    code = (
        "import threading\n"
        "threading.Thread(target=input, args=('hold> ',), daemon=True).start()\n"
        "while True: pass"
    )
    with make_box(timeout=2).session() as session:
        started = time.monotonic()
        result = session.execute(code, on_input=never)
        assert result.timed_out
        assert time.monotonic() - started < 5


@pytest.mark.providers("subprocess")
def test_only_one_input_question_is_open_at_a_time(make_box: Callable[..., Sandbox]) -> None:
    refused = threading.Event()

    def answer_once_the_other_is_refused(prompt: str, password: bool) -> str:
        refused.wait(10)
        return "answer"

    def watch(name: str, text: str) -> None:
        if "refused" in text:
            refused.set()

    code = (
        "import threading\n"
        "answers = []\n"
        "def ask():\n"
        "    try:\n"
        "        answers.append(input('q> '))\n"
        "    except EOFError as exc:\n"
        "        answers.append(str(exc))\n"
        "        print('refused', flush=True)\n"
        "threads = [threading.Thread(target=ask) for _ in range(2)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(sorted(answers))"
    )
    with make_box(timeout=10).session() as session:
        result = session.execute(code, on_input=answer_once_the_other_is_refused, on_stream=watch)
    assert "'answer'" in result.stdout
    assert "another input() is already waiting for an answer" in result.stdout
