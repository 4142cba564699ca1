"""Helpers to run real sandbox kernels with jupyter_client and read every message they send."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from rewyn_kernel.kernel.kernelspec import LAUNCH

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without terminal colours (IPython colours its tracebacks, as on ipykernel)."""
    return ANSI.sub("", text)


def write_spec(root: Path, name: str, flags: Sequence[str] = (), **extra: Any) -> None:
    """Write kernels/NAME/kernel.json under ``root`` (put ``root`` on JUPYTER_PATH)."""
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, *LAUNCH, "-f", "{connection_file}", *flags]
    spec = {"argv": argv, "display_name": name, "language": "python", **extra}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def write_ipykernel_spec(root: Path, name: str) -> None:
    """Write kernels/NAME/kernel.json under ``root`` for plain ipykernel in this interpreter
    (the control a test compares the sandbox kernel with)."""
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "ipykernel", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


@contextmanager
def running_kernel(
    root: Path, name: str, cwd: Path | None = None
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """Start the kernel ``name`` from ``root`` in ``cwd`` (the notebook's directory; default a
    fresh one); shut it down (and wait) afterwards."""
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(root)
    made = cwd is None
    if cwd is None:
        cwd = Path(tempfile.mkdtemp(prefix="rewyn-notebook-"))
    try:
        km, kc = start_new_kernel(kernel_name=name, startup_timeout=60, cwd=str(cwd))
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=False)
        if made:
            shutil.rmtree(cwd, ignore_errors=True)


@dataclass
class Cell:
    reply: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.reply["content"]["status"])

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] in types]

    def stream(self, name: str = "stdout") -> str:
        return "".join(
            m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == name
        )


def run_cell(
    kc: BlockingKernelClient,
    code: str,
    *,
    timeout: float = 60,
    allow_stdin: bool = False,
    answer: Callable[[dict[str, Any]], str] | None = None,
    after: tuple[float, Callable[[], object]] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Cell:
    """Execute ``code``; collect its iopub messages up to idle, answering input requests.

    ``after=(seconds, call)`` makes ``call`` from this thread once that long has passed
    (jupyter_client's sync calls leak an event loop when made from other threads).
    ``metadata`` goes in the execute_request's metadata (jupyter_client's ``execute`` sends none).
    """
    if metadata is None:
        msg_id = kc.execute(code, allow_stdin=allow_stdin)
    else:
        content = {"code": code, "silent": False, "store_history": True}
        content |= {"user_expressions": {}, "allow_stdin": allow_stdin, "stop_on_error": True}
        request = kc.session.msg("execute_request", content, metadata=metadata)
        kc.shell_channel.send(request)
        msg_id = request["header"]["msg_id"]
    messages: list[dict[str, Any]] = []
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no idle within {timeout} s; got {messages}")
        if after is not None and time.monotonic() - started >= after[0]:
            after[1]()
            after = None
        if answer is not None and kc.stdin_channel.msg_ready():
            request = kc.get_stdin_msg(timeout=1)
            kc.input(answer(request))
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except Exception:  # queue.Empty
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status":
            if msg["content"]["execution_state"] == "idle":
                break
            continue
        messages.append(msg)
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return Cell(reply, messages)
