"""Branches of a session's state: session.fork(), checkpoints and restore, on every provider.

A branch is a fork of the session's code process in the same sandbox; the supervisor keeps its
pipes apart and tags what it sends, so each branch has its own output, input, interrupts and
records, and nothing one branch does after the fork reaches another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from rewyn_kernel.errors import ForkError
from rewyn_kernel.runtime import SandboxPool
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.host.session import Session
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .conftest import processes_with, wait_until_gone

FORK_PROVIDERS = ("subprocess", "bubblewrap", "docker", "docker+runsc")
pytestmark = pytest.mark.providers(*FORK_PROVIDERS)

FORGE_SWITCH = """
import gc, os, struct
sender = next(o for o in gc.get_objects() if type(o).__name__ == "Sender")
for body in (b'{"t":"b","b":0}', b'{"t":"done","id":"x","exit_code":0,"status":"ok"}'):
    os.write(sender.fd, struct.pack(">II", len(body), 0) + body)
import time
time.sleep(5)
"""


def text(session_result: object) -> str:
    return str(getattr(session_result, "stdout", "")).strip()


def test_branches_diverge_and_never_see_each_others_later_state(
    make_box: Callable[..., Sandbox], events: list[SandboxEvent]
) -> None:
    box = make_box()
    main = box.session()
    assert main.execute("x = [1, 2]; import random; random.seed(7)").ok
    branch = main.fork()
    assert branch.forked_from == main.id
    assert branch.execute("x.append('branch'); y = 'only here'").ok
    assert main.execute("x.append('main'); z = 'only main'").ok
    assert text(branch.execute("print(x)")) == "[1, 2, 'branch']"
    assert text(main.execute("print(x)")) == "[1, 2, 'main']"
    missing = branch.execute("z")
    assert missing.error is not None
    assert missing.error.ename == "NameError"
    assert main.execute("y").error is not None
    # Random state is copied as it is: the same numbers follow in each branch, unless reseeded.
    same = {text(s.execute("print(random.random())")) for s in (main, branch)}
    assert len(same) == 1
    reseeded = main.fork(2, reseed=True)
    drawn = {text(s.execute("print(random.random())")) for s in reseeded}
    assert len(drawn) == 2
    assert all(event.forked_from == main.id for event in events if event.session_id == branch.id)
    assert [e.forked_from for e in events if e.session_id == main.id] == [None] * 5


def test_output_input_and_interrupts_stay_with_their_branch(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(timeout=60)
    main = box.session()
    assert main.execute("import time").ok
    branch = main.fork()
    started = {name: threading.Event() for name in ("main", "branch")}
    streams: dict[str, list[str]] = {"main": [], "branch": []}

    def on_stream(name: str) -> Callable[[str, str], None]:
        def take(stream: str, chunk: str) -> None:
            streams[name].append(chunk)
            started[name].set()

        return take

    results = {}

    def run_main() -> None:
        code = "print('main', flush=True)\nanswer = input('main? ')\nprint('main got', answer)"
        results["main"] = main.execute(
            code, on_stream=on_stream("main"), on_input=lambda prompt, pw: "for main"
        )

    runner = threading.Thread(target=run_main)
    runner.start()
    ask = threading.Thread(target=lambda: started["branch"].wait(30) and branch.interrupt())
    ask.start()
    results["branch"] = branch.execute(
        "print('branch', flush=True)\nwhile True: time.sleep(0.01)",
        on_stream=on_stream("branch"),
    )
    runner.join(30)
    ask.join(30)
    assert results["branch"].interrupted, results["branch"]
    assert results["main"].ok, results["main"]
    assert "main got for main" in results["main"].stdout
    assert "branch" not in "".join(streams["main"])
    assert "main" not in "".join(streams["branch"])
    # The interrupted branch keeps its state; the main session never saw the interrupt.
    assert text(branch.execute("print(time.time() > 0)")) == "True"


def test_closing_one_branch_leaves_the_others(
    make_box: Callable[..., Sandbox], marker: str
) -> None:
    box = make_box()
    main = box.session()
    assert main.execute(f"tag = {marker!r}").ok
    first, second = main.fork(2)
    first.close()
    assert text(main.execute("print(tag)")) == marker
    main.close()
    assert text(second.execute("print(tag)")) == marker
    assert second.execute("1").sandbox_restarted is False
    box.close()
    assert wait_until_gone(marker) == []
    assert processes_with(marker) == []


def test_a_branch_that_dies_loses_only_its_own_state(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    main = box.session()
    assert main.execute("import os; kept = 41").ok
    branch = main.fork()
    died = branch.execute("os._exit(3)")
    assert not died.ok
    assert died.ending == "crashed", died
    assert text(main.execute("print(kept + 1)")) == "42"
    # The branch's session goes on in a fresh sandbox, and says its state is gone.
    again = branch.execute("print('kept' in globals())")
    assert again.state_lost
    assert text(again) == "False"


def test_a_branch_cannot_speak_for_another(make_box: Callable[..., Sandbox]) -> None:
    box = make_box(timeout=20)
    main = box.session()
    assert main.execute("value = 'main'").ok
    branch = main.fork()
    forged = branch.execute(FORGE_SWITCH)
    assert forged.ending == "protocol_error", forged
    assert text(main.execute("print(value)")) == "main"


def test_restore_brings_back_the_state_of_a_checkpoint(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    session = box.session()
    assert session.execute("data = bytearray(b'a' * (8 << 20)); n = 1").ok
    checkpoint = session.checkpoint()
    assert checkpoint.lost is None
    assert session.execute("data[:] = b'b' * len(data); n = 2; extra = True").ok
    session.restore(checkpoint)
    assert text(
        session.execute("print(n, data.count(b'a') == len(data), 'extra' in globals())")
    ) == ("1 True False")
    assert not checkpoint.alive
    with pytest.raises(ForkError, match="gone"):
        session.restore(checkpoint)
    # A dropped checkpoint cannot be restored either; the session is unchanged.
    other = session.checkpoint()
    other.close()
    with pytest.raises(ForkError, match="gone"):
        session.restore(other)
    assert text(session.execute("print(n)")) == "1"


def test_a_checkpoint_not_waited_for_holds_the_state_before_the_next_execution(
    make_box: Callable[..., Sandbox],
) -> None:
    # The kernel asks for each cell's checkpoint as the cell before ends and sends the next
    # cell at once: the code's process forks before it reads the cell, whatever the timing.
    session = make_box().session()
    for n in range(12):
        assert session.execute(f"x = {n}").ok
        checkpoint = session.checkpoint(wait=False)
        assert session.execute("x = -1; changed = True").ok
        session.restore(checkpoint)
        assert checkpoint.taken is True
        assert text(session.execute("print(x, 'changed' in globals())")) == f"{n} False"


LIMIT_TASKS = """
import os, resource
def tasks():
    count = 0
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if os.stat('/proc/' + pid).st_uid == os.getuid():
                count += len(os.listdir('/proc/%s/task' % pid))
        except OSError:
            pass
    return count
hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
resource.setrlimit(resource.RLIMIT_NPROC, (tasks() + {extra}, hard))
x = 1
"""


@pytest.mark.providers("bubblewrap")  # (its own user namespace: the count is the sandbox's)
@pytest.mark.parametrize(
    ("extra", "which"),
    [(0, "the code's process could not fork"), (1, "the process in between could not fork")],
    ids=["its-own-fork-fails", "the-second-fork-fails"],
)
def test_a_checkpoint_the_sandbox_cannot_make_says_why_and_the_session_lives_on(
    make_box: Callable[..., Sandbox], extra: int, which: str
) -> None:
    # At the process limit the code's process cannot fork (0), or the process in between
    # cannot fork the branch (1): either says why, and nothing of the session is lost.
    session = make_box().session()
    assert session.execute(LIMIT_TASKS.format(extra=extra)).ok
    checkpoint = session.checkpoint(wait=False)
    ran = session.execute("x = 2; print('ran')")
    assert (ran.stdout, ran.state_lost) == ("ran\n", False), ran
    deadline = time.monotonic() + 15
    while checkpoint.taken is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpoint.taken is False
    assert not checkpoint.alive
    assert f"{which}: Resource temporarily unavailable" in (checkpoint.lost or "")
    with pytest.raises(ForkError, match="gone: it could not be made"):
        session.restore(checkpoint)
    with pytest.raises(ForkError, match="could not fork: Resource temporarily unavailable"):
        session.checkpoint()
    after = session.execute("print(x)")
    assert (after.stdout, after.state_lost) == ("2\n", False), after


@pytest.mark.providers("bubblewrap", "docker")  # (a PID namespace: /proc lists the sandbox's)
def test_a_checkpoint_dropped_before_it_is_made_is_killed_as_it_comes(
    make_box: Callable[..., Sandbox],
) -> None:
    session = make_box().session()
    count = "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))"
    before = text(session.execute(count))
    for _ in range(3):
        checkpoint = session.checkpoint(wait=False)
        checkpoint.close()  # (the sandbox reads the close after the ask: never a leftover)
    deadline = time.monotonic() + 15
    while text(session.execute(count)) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert text(session.execute(count)) == before
    assert session.checkpoint().alive


SLOW_FRAME = """
import gc, os, sys, time
sender = next(o for o in gc.get_objects() if type(o).__name__ == "Sender")
wire = sys.modules[type(sender).__module__]
shown = {{"t": "display", "data": {{"text/plain": "x" * 200000}}, "metadata": {{}}}}
body = wire.encode_header(shown)
with sender.lock:  # (a frame over a pipe's size, sent in two parts a pause apart)
    os.write(sender.fd, wire.HEADER.pack(len(body), 0) + body[:1000])
    time.sleep({pause})
    rest = memoryview(body)[1000:]
    while rest:
        rest = rest[os.write(sender.fd, rest):]
kept = 'here'
"""


@pytest.mark.parametrize("meanwhile", ["made", "dropped"])
def test_a_checkpoint_made_or_dropped_while_the_session_sends_a_large_frame_costs_nothing(
    make_box: Callable[..., Sandbox], meanwhile: str
) -> None:
    # On purpose, the orderings a notebook meets by chance: the kernel asks for a checkpoint
    # as a cell ends and a widget's update runs at once (the checkpoint says it is set up
    # while the update's echo, a figure, is half read), or drops one as the next runs (it is
    # reaped meanwhile). Each code process's frame is put together apart from the others'.
    session = make_box().session()
    assert session.execute("x = 1").ok
    if meanwhile == "made":
        checkpoint = session.checkpoint(wait=False)  # (its branch says so during the pause)
        ran = session.execute(SLOW_FRAME.format(pause=1.5))
    else:
        checkpoint = session.checkpoint()
        threading.Timer(0.5, checkpoint.close).start()
        ran = session.execute(SLOW_FRAME.format(pause=2.0))
    assert (ran.ending, ran.state_lost, ran.stderr) == ("completed", False, ""), ran
    assert [len(out.data["text/plain"]) for out in ran.outputs] == [200000]
    after = session.execute("print(x, kept)")
    assert (text(after), after.state_lost) == ("1 here", False), after
    if meanwhile == "made":
        assert checkpoint.taken is True
        session.restore(checkpoint)
        assert "NameError" in session.execute("kept").stderr


def test_a_checkpoint_is_paused_and_goes_first_when_memory_runs_out(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box()
    session = box.session()
    assert session.execute("import os, time; counter = 0").ok
    checkpoint = session.checkpoint()
    # Its process exists, is stopped (SIGSTOP takes effect as the process is next scheduled:
    # looked for until it shows, within a bound), and is the OOM killer's first choice.
    found = session.execute(
        "import glob\n"
        "def stopped():\n"
        "    for path in sorted(glob.glob('/proc/[0-9]*/status')):\n"
        "        try:\n"
        "            status = open(path).read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if '(stopped)' in status:\n"
        "            return open(path.replace('status', 'oom_score_adj')).read().strip()\n"
        "deadline = time.monotonic() + 5\n"
        "while stopped() is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(stopped())\n"
    )
    assert text(found) == "1000", found
    session.restore(checkpoint)
    assert text(session.execute("print(open('/proc/self/oom_score_adj').read().strip())")) == "0"


def test_a_fork_under_a_nearly_full_memory_cap_fails_cleanly(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(memory_limit_mb=256)
    session = box.session()
    used, cap = sandbox_memory(session)
    size = (cap - used - (16 << 20)) >> 20  # (16 MiB left: a fork needs 32)
    assert session.execute(
        f"block = bytearray({size} << 20); block[::4096] = b'x' * len(block[::4096])"
    ).ok
    with pytest.raises(ForkError, match="memory cap") as refused:
        session.fork()
    assert refused.value.memory
    with pytest.raises(ForkError, match="memory cap"):
        session.checkpoint()
    after = session.execute("print(len(block) >> 20)")
    assert text(after) == str(size)
    assert not after.state_lost
    assert session.execute("del block").ok
    if getattr(box.provider, "oci_runtime", None) == "runsc":
        # gVisor counts memory the code freed as used for a while: a fork now may still be
        # refused, for memory and nothing else, or go through.
        try:
            branch = session.fork()
        except ForkError as exc:
            refused_for = "memory" if exc.memory else str(exc)
            assert refused_for == "memory"
            return
    else:
        branch = session.fork()
    assert branch.execute("print('branch up')").ok


def test_a_fork_waits_for_no_thread_and_no_lock(make_box: Callable[..., Sandbox]) -> None:
    """A thread holding a logging handler's lock, and another running matrix products (BLAS
    threads at work: OpenBLAS's own fork handler deadlocks on a worker going to sleep), must
    neither hang the fork nor the branch."""
    box = make_box(timeout=60)
    session = box.session()
    setup = session.execute(
        "import logging, threading, time\n"
        "handler = logging.StreamHandler()\n"
        "logging.getLogger('held').addHandler(handler)\n"
        "threading.Thread(target=lambda: (handler.acquire(), time.sleep(3600)), daemon=True)"
        ".start()\n"
        "try:\n"
        "    import numpy\n"
        "    a = numpy.ones((600, 600))\n"
        "    def spin():\n"
        "        while True:\n"
        "            a @ a\n"
        "    threading.Thread(target=spin, daemon=True).start()\n"
        "except ImportError:\n"
        "    numpy = None\n"
        "time.sleep(0.3)\n"
    )
    assert setup.ok, setup
    for _ in range(3):
        branch = session.fork()
        result = branch.execute(
            "logging.getLogger('held').warning('logged in the branch')\n"
            "print(threading.active_count() <= 3, numpy is None or float((a @ a)[0, 0]))"
        )
        assert result.ok, result
        assert "logged in the branch" in result.stderr
        assert text(result).startswith("True ")
        branch.close()


PRELOAD = "import json\nPRELOADED = ['yes']\n"
ITEM = """
import os, subprocess, sys
seen = (PRELOADED, 'json' in sys.modules, 'leak' in globals(), os.path.exists('/tmp/item'))
print(seen, sorted(name for name in os.listdir('.') if name != '.tmp'))
PRELOADED.append('changed by an item')
leak = 1
open('/tmp/item', 'w').write('x')
open('scratch-file', 'w').write('x')
subprocess.Popen(['sleep', '600', {marker!r}], start_new_session=True)
"""


def test_a_preloaded_pool_starts_each_item_from_the_preload_alone(
    provider: SandboxProvider, marker: str
) -> None:
    with SandboxPool(provider=provider, size=1, preload=PRELOAD) as pool:
        results = pool.map([ITEM.format(marker=marker)] * 3, progress=False)
    for result in results:
        assert result.ok, result
        assert result.stdout.strip() == "(['yes'], True, False, False) []", result.stdout
    assert wait_until_gone(marker) == []


@pytest.mark.providers("bubblewrap")
def test_a_failed_preload_leaves_a_note_and_items_still_run(provider: SandboxProvider) -> None:
    with SandboxPool(provider=provider, size=1, preload="raise ValueError('no')") as pool:
        result = pool.map(["print('ran')"], progress=False)[0]
    assert result.ok, result
    assert result.stdout.strip() == "ran"
    assert result.isolation is not None
    assert any("the preload failed" in note for note in result.isolation.notes)


def sandbox_memory(session: Session) -> tuple[int, int]:
    """What the sandbox uses and its cap, as the runtime reads them: from its cgroup on the
    host, or (gVisor) from the sandbox's own /proc/meminfo."""
    assert session.execute("pass").ok  # (its worker up)
    try:
        used, cap = session._next.process.memory_usage()  # type: ignore[union-attr]
    except OSError:
        said = session.execute(
            "info = dict(line.split(':') for line in open('/proc/meminfo'))\n"
            "total, free = (int(info[k].split()[0]) << 10 for k in ('MemTotal', 'MemAvailable'))\n"
            "print(total - free, total)"
        )
        used, cap = (int(number) for number in text(said).split())
    assert cap is not None
    return used, cap


WAIT_FOR_THE_DROP = """
import glob, time
def checkpoints():
    found = 0
    for path in glob.glob('/proc/[0-9]*/oom_score_adj'):
        try:
            found += open(path).read().strip() == '1000'
        except OSError:
            pass
    return found
deadline = time.monotonic() + 10
while checkpoints() and time.monotonic() < deadline:
    time.sleep(0.01)
"""


def test_a_checkpoint_is_dropped_before_it_costs_a_cell_memory(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(memory_limit_mb=256)
    session = box.session()
    assert session.execute("import os\nblock = bytearray(os.urandom(1 << 20) * 96)").ok
    checkpoint = session.checkpoint()
    used, cap = sandbox_memory(session)
    # The cell copies what it shares with the checkpoint until the sandbox is 16 MiB from its
    # cap (past the 32 MiB a fork needs), waits for the checkpoint to be dropped, then takes
    # 48 MiB: that fits beside the state alone, not beside the checkpoint's copy.
    copy = min(96, (cap - used - (16 << 20)) >> 20)
    cell = session.execute(
        "zeros = bytes(1 << 20)\n"
        f"for start in range(0, {copy} << 20, 1 << 20):\n"
        "    block[start : start + len(zeros)] = zeros\n"
        + WAIT_FOR_THE_DROP
        + "more = bytearray(48 << 20)\n"
        "print('ok', checkpoints())"
    )
    assert cell.ok, cell
    assert text(cell) == "ok 0"
    assert not cell.memory_exceeded
    assert checkpoint.lost is not None
    assert "dropped when the sandbox's memory came within 32 MiB" in checkpoint.lost
    with pytest.raises(ForkError, match="gone"):
        session.restore(checkpoint)


@pytest.mark.providers("bubblewrap", "docker")  # (a memory cap it reads, and a PID namespace)
def test_a_checkpoint_kept_as_a_cell_ends_and_dropped_while_it_runs_is_never_made(
    make_box: Callable[..., Sandbox],
) -> None:
    # The checkpoint asked for with the cell (made as it ends) is dropped as the cell's memory
    # nears the cap, before the sandbox makes it: it must not be made after all, holding the
    # cell's memory where nothing would ever drop it.
    session = make_box(memory_limit_mb=256).session()
    count = "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))"
    before = text(session.execute(count))
    fill = "b = bytearray(190 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"
    assert session.execute(fill, checkpoint_after=True).ok
    with pytest.raises(ForkError, match="memory cap"):
        session.take_checkpoint()  # (dropped as the cell ran, or refused as it ended)
    assert session.execute("del b").ok
    assert text(session.execute(count)) == before
    used, cap = sandbox_memory(session)
    assert cap - used > 64 << 20  # (the cell's memory is free again)
    assert session.execute("x = 1", checkpoint_after=True).ok
    kept = session.take_checkpoint()
    kept.settle(15)  # (made once no next execution came within 50 ms)
    assert session.execute("x = 2").ok
    session.restore(kept)
    assert text(session.execute("print(x)")) == "1"


def test_a_checkpoint_kept_after_an_execution_is_not_made_when_the_next_comes_at_once(
    make_box: Callable[..., Sandbox],
) -> None:
    # Cells sent at once pay no fork: the next execution makes the last one's checkpoint moot.
    session = make_box().session()
    assert session.execute("x = 1", checkpoint_after=True).ok
    moot = session.take_checkpoint()
    assert session.execute("x = 2", checkpoint_after=True).ok
    with pytest.raises(ForkError, match="the next execution came first"):
        moot.settle(15)
    assert (moot.taken, moot.busy, moot.alive) == (False, True, False)
    kept = session.take_checkpoint()
    kept.settle(15)  # (nothing came within 50 ms: it is made)
    assert (kept.taken, kept.busy) == (True, False)
    assert session.execute("x = 3").ok
    session.restore(kept)
    assert text(session.execute("print(x)")) == "2"
