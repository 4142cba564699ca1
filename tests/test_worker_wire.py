"""What crosses into the sandbox: the worker's config and the frames to the worker, checked where
the host builds them and where the worker reads them (the worker's own program, run as a
sandbox runs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.host.protocol import (
    HEADER,
    decode_header,
    program_with,
    worker_program,
)
from rewyn_kernel.runtime.providers.base import BOOTSTRAP
from rewyn_kernel.runtime.providers.bubblewrap import BubblewrapProvider
from rewyn_kernel.runtime.providers.local.files import LocalFiles
from rewyn_kernel.runtime.providers.subprocess import SubprocessProvider
from rewyn_kernel.runtime.sandbox import SandboxSpec
from rewyn_kernel.runtime.worker.config import Clean, Cover, Users, WorkerConfig, WorkspaceSetting
from rewyn_kernel.runtime.worker.frames import (
    CODE_KINDS,
    HOST_KINDS,
    AbortFrame,
    CloseFrame,
    CompleteFrame,
    ExecFrame,
    ForkFrame,
    ForkSelfFrame,
    InputReplyFrame,
    InspectFrame,
    InterruptFrame,
    ResumeFrame,
    ViewFrame,
    read_frame,
    read_host_frame,
)
from rewyn_kernel.runtime.worker.record import Record, WireError


def full_config() -> WorkerConfig:
    """A config with a value in every kind of field (records, tuples of them, unions)."""
    return WorkerConfig(
        cwd="/scratch",
        fork_per_exec=True,
        memory_limit_bytes=256 << 20,
        oom_counter="self",
        proc_sys="remount",
        cover=(Cover(dir="/tmp", mode="1777", keep=("/tmp/x",), limit=1 << 20),),
        binds=(("/host/a", "/a"),),
        clean=Clean(dirs=("/tmp",), ipc=True),
        users=Users(supervisor=(65533, 65533), code=(1000, 1000)),
        workspace=WorkspaceSetting(path="/work", protected=(".git",), staging=".rewyn/stage"),
    )


def wire(config: WorkerConfig) -> dict[str, Any]:
    """``config`` as the worker receives it (through JSON)."""
    loaded: dict[str, Any] = json.loads(json.dumps(config.to_wire()))
    return loaded


# -- the host's side: built by keyword -------------------------------------------------------


def test_a_misspelt_field_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig has no field 'seccmp' \(a misspelt name"):
        WorkerConfig(cwd="/scratch", seccmp="00")  # type: ignore[call-arg]


def test_a_field_of_the_wrong_type_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig.own_ipc: expected bool, got str 'yes'"):
        WorkerConfig(cwd="/scratch", own_ipc="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WorkerConfig.nproc: expected None or int, got bool"):
        WorkerConfig(cwd="/scratch", nproc=True)
    with pytest.raises(TypeError, match=r"WorkerConfig.read_only: expected a tuple, got list"):
        WorkerConfig(cwd="/scratch", read_only=["/etc"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WorkerConfig.cover\[0\]: expected Cover, got dict"):
        WorkerConfig(cwd="/scratch", cover=({"dir": "/tmp", "mode": "1777"},))  # type: ignore[arg-type]


def test_a_missing_field_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig needs 'cwd'"):
        WorkerConfig()  # type: ignore[call-arg]


def test_a_field_given_twice_when_the_config_is_put_together_is_a_type_error() -> None:
    """host/core.py puts the provider's fields, the launch's and its own together: each field
    comes from one of them."""
    provided = WorkerConfig(cwd="/scratch", own_ipc=True)
    assert provided.given() == {"cwd": "/scratch", "own_ipc": True}
    with pytest.raises(TypeError, match="multiple values for keyword argument 'own_ipc'"):
        WorkerConfig(**provided.given(), own_ipc=False)


def test_a_config_is_frozen() -> None:
    config = WorkerConfig(cwd="/scratch")
    with pytest.raises(AttributeError, match="frozen"):
        config.cwd = "/elsewhere"  # type: ignore[misc]
    assert config.replace(cwd="/elsewhere").cwd == "/elsewhere"
    with pytest.raises(TypeError, match=r"WorkerConfig\.cwd: expected str"):
        config.replace(cwd=None)


@pytest.mark.parametrize("kind", ["subprocess", "bubblewrap"])
def test_a_providers_config_reads_back_as_it_was_built(kind: str, tmp_path: Path) -> None:
    provider = SubprocessProvider() if kind == "subprocess" else BubblewrapProvider()
    spec = SandboxSpec(memory_limit_mb=256, read_dirs=(tmp_path,))
    config = provider.worker_config(spec, LocalFiles(tmp_path, owned=False))
    assert WorkerConfig.from_wire(wire(config)) == config


# -- the worker's side: read from JSON ----------------------------------------------------------


def test_annotations_read_as_python_3_8_writes_them() -> None:
    """Python 3.8 writes a subscript of constants in parentheses (``Literal[('a', 'b')]``);
    a record made there must read it as the same type."""
    made: type[Record] = type(
        "Made",
        (Record,),
        {
            "__module__": __name__,
            "__annotations__": {"kind": "Literal[('a', 'b')]", "pair": "Tuple[(int, int)]"},
        },
    )
    assert made.from_wire({"kind": "b", "pair": [1, 2]}).to_wire() == {"kind": "b", "pair": [1, 2]}
    with pytest.raises(WireError, match=r"Made\.kind: expected 'a' or 'b', got str 'c'"):
        made.from_wire({"kind": "c", "pair": [1, 2]})
    with pytest.raises(TypeError, match=r"Unread\.x: 'list' is not a type a record field may have"):
        type("Unread", (Record,), {"__module__": __name__, "__annotations__": {"x": "list[int]"}})


def test_the_worker_reads_back_every_kind_of_field() -> None:
    config = full_config()
    read = WorkerConfig.from_wire(wire(config))
    assert read == config
    assert read.cover[0].keep == ("/tmp/x",)  # (JSON arrays become tuples)
    assert read.users is not None
    assert read.users.code == (1000, 1000)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cwdd": "/scratch"}, r"WorkerConfig has no field 'cwdd'"),
        ({"cwd": 3}, r"WorkerConfig.cwd: expected str, got int 3"),
        ({"oom_counter": 1}, r"WorkerConfig.oom_counter: expected bool or str, got int 1"),
        ({"proc_sys": "on"}, r"WorkerConfig.proc_sys: expected None or 'remount' or 'check'"),
        ({"binds": [["/a"]]}, r"WorkerConfig.binds\[0\]: expected 2 items, got 1"),
        (
            {"cover": [{"dir": "/tmp", "mode": 1777, "keep": [], "limit": None}]},
            r"WorkerConfig.cover\[0\]: Cover.mode: expected str, got int 1777",
        ),
        (
            {"users": {"supervisor": [1, 1], "code": [1, 1], "root": [0, 0]}},
            r"WorkerConfig.users: Users has no field 'root'",
        ),
    ],
)
def test_the_worker_refuses_a_field_it_does_not_know_or_of_the_wrong_type(
    change: dict[str, Any], said: str
) -> None:
    sent = {**wire(full_config()), **change}
    with pytest.raises(WireError, match=said):
        WorkerConfig.from_wire(sent)


@pytest.mark.parametrize("field", ["cwd", "seccomp", "users"])
def test_the_worker_refuses_a_config_that_lacks_a_field(field: str) -> None:
    """On the wire every field is there (defaults are the host's): one missing means the
    host and the worker disagree on what the config is."""
    sent = wire(full_config())
    del sent[field]
    with pytest.raises(WireError, match=f"WorkerConfig needs '{field}'"):
        WorkerConfig.from_wire(sent)


def run_worker(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    """The worker's program with ``config``, run as a sandbox runs it (its modules as text,
    as every sandbox but the local ones gets them), with nothing after the program."""
    return subprocess.run(
        [sys.executable, "-I", "-c", BOOTSTRAP],
        input=program_with(config, compiled=False),
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_the_worker_program_refuses_a_bad_config_before_it_starts(tmp_path: Path) -> None:
    sent = {**wire(WorkerConfig(cwd=str(tmp_path))), "hide_": None}
    done = run_worker(sent, tmp_path)
    assert done.returncode == 70
    assert done.stdout == b""  # (not a frame: nothing started)
    assert b"rewyn: the host's config cannot be read here: WorkerConfig has no field 'hide_'" in (
        done.stderr
    )


# -- frames to the worker -----------------------------------------------------------------------


def test_a_frame_is_built_by_keyword_and_checked_at_the_host() -> None:
    frame = ExecFrame(id="e1", count=3, silent=True)
    assert frame.to_wire() == {
        "t": "exec",
        "b": 0,
        "id": "e1",
        "count": 3,
        "silent": True,
        "comm": False,
        "parent": "",
        "fork": "",
        "fork_n": 0,
    }
    assert next(iter(frame.to_wire())) == "t"  # (the supervisor tells a kind from its first key)
    with pytest.raises(TypeError, match=r"ExecFrame\.id: expected str, got int 1"):
        ExecFrame(id=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="InterruptFrame has no field 'exec_id'"):
        InterruptFrame(exec_id="e1")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="ForkFrame needs 'n'"):
        ForkFrame(id="f1")  # type: ignore[call-arg]


def test_the_worker_reads_each_frame_the_host_sends() -> None:
    sent = [
        ExecFrame(id="e1", comm=True, parent="p", b=2),
        InputReplyFrame(id=None, exec="e1", error="no stdin", unavailable=True),
        InterruptFrame(id="e1"),
        AbortFrame(id="e1"),
        CompleteFrame(id="c1", code="pri", cursor_pos=3),
        InspectFrame(id="i1", code="x", cursor_pos=1, detail=1),
        ViewFrame(id="v1", cell=4, protected=(".git", "a.ipynb")),
        ForkFrame(id="f1", n=3, pause=True),
        CloseFrame(b=3),
        ResumeFrame(b=3),
    ]
    assert sorted(frame.t for frame in sent) == sorted(HOST_KINDS)
    for frame in sent:
        assert read_host_frame(json.loads(json.dumps(frame.to_wire()))) == frame


@pytest.mark.parametrize(
    ("header", "said"),
    [
        ({"t": "shutdown", "b": 0}, r"a frame of kind 'shutdown' is not one this end reads"),
        ({"t": "fork_self", "reseed": False, "pause": False, "once": True}, "'fork_self' is not"),
        ({"b": 0, "id": "x"}, r"a frame of kind None is not one this end reads"),
        ([], r"a frame's header must be a JSON object, not list"),
        (
            {**InterruptFrame(id="e1").to_wire(), "id": 5},
            r"InterruptFrame\.id: expected str, got int 5",
        ),
        (
            {**ExecFrame(id="e1").to_wire(), "count": "7"},
            r"ExecFrame\.count: expected None or int, got str '7'",
        ),
        (
            {**ViewFrame(id="v", cell=1).to_wire(), "protected": [".git", 3]},
            r"ViewFrame\.protected\[1\]: expected str, got int 3",
        ),
        ({**CloseFrame().to_wire(), "branch": 1}, r"CloseFrame has no field 'branch'"),
        ({"t": "fork", "b": 0, "id": "f1"}, r"ForkFrame needs 'n', 'pause', 'reseed'"),
    ],
)
def test_the_worker_refuses_a_frame_it_cannot_read(header: object, said: str) -> None:
    with pytest.raises(WireError, match=said):
        read_host_frame(header)


def test_a_code_process_takes_only_the_supervisors_frames() -> None:
    assert read_frame(ForkSelfFrame(once=True).to_wire(), CODE_KINDS) == ForkSelfFrame(once=True)
    with pytest.raises(WireError, match="a frame of kind 'abort' is not one this end reads"):
        read_frame(AbortFrame(id="e1").to_wire(), CODE_KINDS)


class RawWorker:
    """The worker's program in a process of its own, spoken to frame by frame (no provider:
    what the supervisor does with the host's frames, and nothing else)."""

    def __init__(self, tmp_path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        assert self.process.stdin is not None
        self.process.stdin.write(worker_program(WorkerConfig(cwd=str(tmp_path))))
        self.process.stdin.flush()

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        assert self.process.stdin is not None
        body = json.dumps(header).encode("ascii")
        self.process.stdin.write(HEADER.pack(len(body), len(payload)) + body + payload)
        self.process.stdin.flush()

    def until(self, kind: str) -> Any:
        """Frames up to the first of ``kind`` (None if the channel ends first)."""
        assert self.process.stdout is not None
        while head := self.process.stdout.read(HEADER.size):
            body_len, payload_len = HEADER.unpack(head)
            frame = decode_header(self.process.stdout.read(body_len))
            self.process.stdout.read(payload_len)
            if frame.t == kind:
                return frame
        return None

    def end(self) -> tuple[int, str]:
        """The exit status and stderr once the worker has ended."""
        assert self.process.stderr is not None
        stderr = self.process.stderr.read().decode("utf-8", "replace")
        return self.process.wait(timeout=30), stderr


def test_a_frame_the_worker_cannot_read_ends_the_execution_and_the_sandbox_saying_why(
    tmp_path: Path,
) -> None:
    worker = RawWorker(tmp_path)
    try:
        assert worker.until("ready") is not None
        worker.send(ExecFrame(id="e1").to_wire(), b"input('? ')")
        assert worker.until("input_request") is not None
        worker.send({**InterruptFrame(id="e1").to_wire(), "id": 5})  # (a host's bug)
        done = worker.until("done")
        assert done is not None
        assert (done.id, done.status) == ("e1", "protocol_error")
        said = "the host sent a frame the sandbox cannot read: InterruptFrame.id: expected str"
        assert said in done.detail
        status, stderr = worker.end()
        assert status == 70
        assert f"rewyn: {said}" in stderr
    finally:
        worker.process.kill()
        worker.process.wait()
        for stream in (worker.process.stdin, worker.process.stdout, worker.process.stderr):
            assert stream is not None
            stream.close()


def test_a_frame_of_a_kind_the_worker_does_not_take_ends_the_sandbox(tmp_path: Path) -> None:
    """``shutdown`` was a kind the supervisor took but no host sent: gone, and refused."""
    worker = RawWorker(tmp_path)
    try:
        assert worker.until("ready") is not None
        worker.send({"t": "shutdown"})
        assert worker.until("done") is None  # (nothing ran: the channel just ends)
        status, stderr = worker.end()
        assert status == 70
        assert "a frame of kind 'shutdown' is not one this end reads" in stderr
    finally:
        worker.process.kill()
        worker.process.wait()
        for stream in (worker.process.stdin, worker.process.stdout, worker.process.stderr):
            assert stream is not None
            stream.close()


def python_3_8() -> str | None:
    """A Python 3.8 interpreter here (the oldest the worker runs on), or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [os.environ.get("REWYN_TEST_PYTHON38"), shutil.which("python3.8")]
    candidates += [str(path) for path in sorted(pyenv.glob("versions/3.8*/bin/python3.8"))]
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        if done.stdout.strip() == "True":  # (a shim may name one it cannot run)
            return candidate
    return None


def test_the_worker_runs_on_python_3_8(tmp_path: Path) -> None:
    """The worker's modules as text, read by Python 3.8 (the type check of the worker is for
    3.8; this runs it): a session, a branch, a completion, a one-shot execution."""
    python = python_3_8()
    if python is None:
        pytest.skip("no Python 3.8 here (set REWYN_TEST_PYTHON38 to one)")
    with create(provider=SubprocessProvider(), python=python, timeout=60) as box:
        session = box.session()
        first = session.execute("import sys; x = 41; print(sys.version_info[:2])")
        assert first.stdout == "(3, 8)\n", first
        branch = session.fork()
        assert branch.execute("print(x + 1)").stdout == "42\n"
        completed = session.complete("pri", 3)
        assert completed is not None
        assert "print(" in completed.matches
        assert box.execute("print('once')").stdout == "once\n"
