"""The supervisor reads the code processes' frames in turns, a read at a time: a frame larger
than a pipe holds takes several reads, and what another process sends meanwhile (a checkpoint
that says it is set up, a branch's display) or a process closed meanwhile (a checkpoint dropped
and reaped) must leave its bytes so far as they were.

The supervisor's own code (``worker/codeframes.py``, ``processes.py``), in this process, on real
pipes; each code process is a real process of the test's own (``sleep``), since a frame the
supervisor takes for a breach kills the process that sent it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewyn_kernel.runtime.worker.children import Child
from rewyn_kernel.runtime.worker.config import WorkerConfig
from rewyn_kernel.runtime.worker.supervisor import Supervisor
from rewyn_kernel.runtime.worker.wire import HEADER, encode_header


class Code:
    """A code process as the supervisor sees it: a Child on real pipes, and the test's ends."""

    def __init__(self, supervisor: Supervisor, branch: int) -> None:
        self.process = subprocess.Popen(["sleep", "60"])
        ctl_r, ctl_w = os.pipe()
        frm_r, self.frm = os.pipe()
        out_r, self.out = os.pipe()
        err_r, self.err = os.pipe()
        os.close(ctl_r)
        self.child = Child(self.process.pid, ctl_w, frm_r, out_r, err_r, branch=branch)
        supervisor.watch(self.child)
        supervisor.branches[branch] = self.child

    def close(self) -> None:
        for fd in (self.frm, self.out, self.err):
            os.close(fd)
        self.process.kill()
        self.process.wait()


class Host:
    """The host's end of the supervisor's channel, read in a thread as the host's I/O thread
    reads it (a frame over a pipe's size is written in several parts)."""

    def __init__(self, supervisor: Supervisor) -> None:
        read, supervisor.host_out = os.pipe()
        self.data = bytearray()
        self._thread = threading.Thread(target=self._read, args=(read,), daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        while chunk := os.read(fd, 1 << 16):
            self.data += chunk
        os.close(fd)

    def frames(self) -> list[bytes]:
        """The frame bodies it was sent, in order (the branch tags among them)."""
        bodies, view = [], bytes(self.data)
        while view:
            size, payload = HEADER.unpack(view[: HEADER.size])
            bodies.append(view[HEADER.size : HEADER.size + size])
            view = view[HEADER.size + size + payload :]
        return bodies

    def close(self, supervisor: Supervisor) -> None:
        """The supervisor's end closes; what it sent is all read once this returns."""
        if supervisor.host_out >= 0:
            os.close(supervisor.host_out)
            supervisor.host_out = -1
        self._thread.join(10)


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[tuple[Supervisor, Host]]:
    made = Supervisor(WorkerConfig(cwd=str(tmp_path)))
    host = Host(made)
    yield made, host
    host.close(made)
    made.selector.close()


def frame(header: dict[str, object]) -> bytes:
    body = encode_header(header)
    return HEADER.pack(len(body), 0) + body


def read_all(supervisor: Supervisor, child: Child) -> None:
    while supervisor.read_frames(child):
        pass


@pytest.mark.parametrize("meanwhile", ["another-sends-a-frame", "another-is-closed", "both"])
def test_a_frame_read_in_parts_is_whole_whatever_another_process_does_meanwhile(
    supervisor: tuple[Supervisor, Host], meanwhile: str
) -> None:
    # The kernel's ordering: a checkpoint is asked for as a cell ends, and a widget's update
    # (ipywidgets echoes a JupyterLab Output widget's outputs back: a figure's PNG, 400 kB)
    # comes at once; the checkpoint says it is set up, or is dropped and reaped, while the
    # session's echo is half read. The echo's bytes so far were wiped (or overwritten), the
    # session's process was killed for "a frame it may not send", and its state lost.
    sup, host = supervisor
    session, checkpoint, other = Code(sup, 0), Code(sup, 1), Code(sup, 2)
    try:
        echo = frame({"t": "comm", "msg_type": "comm_msg", "content": {"png": "A" * 400_000}})
        first = 20_000
        os.write(session.frm, echo[:first])
        read_all(sup, session.child)
        assert session.child.body_len > 0, "the frame is half read"
        if meanwhile != "another-is-closed":
            os.write(other.frm, frame({"t": "display", "data": {"text/plain": "hi"}}))
            read_all(sup, other.child)
        if meanwhile != "another-sends-a-frame":
            sup.close_child(checkpoint.child)
        writer = threading.Thread(target=os.write, args=(session.frm, echo[first:]))
        writer.start()
        deadline = time.monotonic() + 10
        while session.child.body_len != -1 and time.monotonic() < deadline:
            read_all(sup, session.child)
        writer.join(10)
    finally:
        for code in (session, checkpoint, other):
            code.close()
    assert session.child.violation is None
    assert session.process.returncode == -9  # (killed by the test, not by the supervisor)
    host.close(sup)
    assert echo[HEADER.size :] in host.frames()
