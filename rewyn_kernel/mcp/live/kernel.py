"""The notebook's kernel, reached through the Jupyter server's websocket.

``LiveKernel`` owns one ``KernelWebSocketClient`` (jupyter_kernel_client: the server's kernel
websocket protocol, maintained there) and three reader threads, one per channel it listens on
(iopub, shell, control); each thread is the only reader of its channel's queue and hands every
message to the event loop, where the execution it belongs to (by its parent's msg_id) takes it.
Other clients' messages (the person's cells) arrive on the same iopub and are ignored, but for the
kernel's own states: a restart or death ends every execution waiting here.

An execution ends when both its reply and its iopub ``idle`` have come (as nbclient waits), the
connection is lost, or the kernel restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_kernel_client.wsclient import KernelWebSocketClient

from rewyn_kernel.mcp.live.jupyter import JupyterError, JupyterServer

logger = logging.getLogger(__name__)

POLL = 0.25
"""Seconds a reader thread waits on its channel before it looks whether it should stop."""
CONNECT_TIMEOUT = 15.0
PROBE_EVERY = 0.5
"""Seconds to wait for a probe's word on iopub before sending another."""


class KernelLost(Exception):
    """The kernel's connection closed, or the kernel restarted or died, mid-execution."""


@dataclass
class Running:
    """One execution sent by this client: its messages as they come, and how it ended."""

    on_message: Callable[[dict[str, Any]], None]
    done: asyncio.Event = field(default_factory=asyncio.Event)
    reply: dict[str, Any] | None = None
    busy: bool = False
    """Its busy status came on iopub (the output channel carried its words from the start)."""
    idle: bool = False
    lost: str | None = None
    new_process: bool = False
    """Its reply came from a kernel process other than the one this client knew: the kernel
    restarted before it ran."""

    def settle(self) -> None:
        if self.lost is not None or (self.reply is not None and self.idle):
            self.done.set()


class _Probe:
    """A kernel_info request in flight: its reply (control), and any word of it on iopub."""

    def __init__(self) -> None:
        self.reply = threading.Event()
        self.heard = threading.Event()
        self.content: dict[str, Any] = {}
        self.process: Any = None
        """The session id the kernel's messages carry: one per kernel process."""

    def hear(self, channel: str, msg: dict[str, Any]) -> None:
        if channel == "control":
            self.process = (msg.get("header") or {}).get("session")
            content = msg.get("content")
            self.content = content if isinstance(content, dict) else {}
            self.reply.set()
        else:
            self.heard.set()


class LiveKernel:
    """One kernel of the Jupyter server, its executions matched to their messages."""

    def __init__(
        self, server: JupyterServer, kernel_id: str, username: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.server = server
        self.kernel_id = kernel_id
        self._loop = loop
        self._running: dict[str, Running] = {}
        self._probes: dict[str, _Probe] = {}
        self.process: str | None = None
        """The kernel process's session id (its messages carry it): a new one, a restart."""
        self.stale = False
        self.closed = False
        self._retiring = False
        self._stop = threading.Event()
        endpoint = server.websocket_url(f"api/kernels/{urllib.parse.quote(kernel_id)}/channels")
        self._client = KernelWebSocketClient(
            endpoint=endpoint,
            token=None,  # (in the header: a token in a URL ends up in the server's logs)
            username=username,
            timeout=CONNECT_TIMEOUT,
            log=logger,
            headers=server.headers(run=True),  # (an agent token may not run code: a runner may)
        )
        self._threads: list[threading.Thread] = []

    def connect(self) -> None:
        """Open the websocket and start the readers (blocking: call it off the loop)."""
        self._client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
        if not self._client.connection_ready.is_set():
            self._client.stop_channels()
            raise JupyterError(
                f"the websocket of kernel {self.kernel_id} did not open in {CONNECT_TIMEOUT:g} s"
            )
        for name, get in (
            ("iopub", self._client.get_iopub_msg),
            ("shell", self._client.get_shell_msg),
            ("control", self._client.get_control_msg),
        ):
            thread = threading.Thread(
                target=self._read, args=(name, get), name=f"rewyn-live-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    @property
    def connected(self) -> bool:
        """Open, and with no sign that the kernel restarted under it (after a restart the
        server's subscription to the new process's output may have missed its first words,
        so the next call opens a new websocket, whose output channel the server checks, as
        JupyterLab reconnects after a restart)."""
        return self._client.connection_ready.is_set() and not self._stop.is_set() and not self.stale

    def close(self) -> None:
        """Stop the readers, then the websocket (blocking). Executions still waiting end as
        lost."""
        self._stop.set()
        for thread in self._threads:
            thread.join(POLL * 4)
        self._client.stop_channels()
        self.closed = True
        with contextlib.suppress(RuntimeError):  # (the loop closed first: nobody waits)
            self._loop.call_soon_threadsafe(self._lose_all, "the attachment closed")

    # -- executions -------------------------------------------------------------------------

    def send_execute(
        self, code: str, metadata: dict[str, Any], on_message: Callable[[dict[str, Any]], None]
    ) -> tuple[str, Running]:
        """Send an execute_request (on the loop); its messages go to ``on_message`` on the
        loop. Returns its msg_id and the execution to await."""
        if not self.connected:
            raise KernelLost("the kernel's connection is closed")
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = self._client.session.msg("execute_request", content, metadata=metadata)
        msg_id: str = msg["header"]["msg_id"]
        running = Running(on_message)
        self._running[msg_id] = running
        try:
            self._client.shell_channel.send(msg)
        except Exception as exc:
            del self._running[msg_id]
            raise KernelLost(f"the request could not be sent: {exc}") from None
        return msg_id, running

    def forget(self, msg_id: str) -> None:
        """The execution ``msg_id`` is over for its caller (on the loop)."""
        self._running.pop(msg_id, None)
        if self._retiring and not self._running:
            self._close_later()

    def retire(self) -> None:
        """No new execution goes here (a newer websocket took over); this one closes once the
        executions it carries have ended (on the loop)."""
        self._retiring = True
        if not self._running:
            self._close_later()

    def _close_later(self) -> None:
        if not self._stop.is_set():
            self._stop.set()  # (closing: not connected from now on)
            threading.Thread(target=self.close, name="rewyn-live-close", daemon=True).start()

    def probe(self, timeout: float = CONNECT_TIMEOUT) -> dict[str, Any]:
        """The kernel's kernel_info_reply content, once its output channel is seen to carry
        the kernel's words too (blocking). As the Jupyter server nudges a new websocket: a
        kernel's output channel drops what it publishes before the server's subscription
        takes (a kernel just restarted, say), so the request is sent again until its status
        comes on iopub, and only then does an execution go. On the control channel: a kernel
        busy with a cell (the person's) answers it at once."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._client.session.msg("kernel_info_request", {})
            msg_id: str = msg["header"]["msg_id"]
            probe = _Probe()
            self._probes[msg_id] = probe
            try:
                self._client.control_channel.send(msg)
                wait = min(PROBE_EVERY, max(deadline - time.monotonic(), 0.0))
                if probe.heard.wait(wait) and probe.reply.wait(max(deadline - time.monotonic(), 0)):
                    if isinstance(probe.process, str):
                        self.process = probe.process
                    return probe.content
            except Exception as exc:
                raise JupyterError(f"the kernel could not be asked: {exc}") from None
            finally:
                self._probes.pop(msg_id, None)
            if time.monotonic() >= deadline or not self.connected:
                raise JupyterError(
                    f"the notebook's kernel did not answer on both of its channels in {timeout:g} s"
                )

    # -- the readers (threads) ----------------------------------------------------------------

    def _read(self, channel: str, get: Callable[..., Any]) -> None:
        while not self._stop.is_set():
            try:
                msg = get(timeout=POLL)
            except (queue.Empty, TimeoutError):
                if not self._client.connection_ready.is_set() and not self._stop.is_set():
                    self._loop.call_soon_threadsafe(self._lose_all, self._closed_why())
                    return
                continue
            except Exception:  # (a broken message: the client logs it)
                continue
            if not isinstance(msg, dict):
                continue
            parent = (msg.get("parent_header") or {}).get("msg_id")
            probe = self._probes.get(parent) if isinstance(parent, str) else None
            if probe is not None:
                probe.hear(channel, msg)
                continue
            with contextlib.suppress(RuntimeError):  # (the loop closed: nobody waits)
                self._loop.call_soon_threadsafe(self._dispatch, channel, msg)

    def _closed_why(self) -> str:
        why = "the kernel's connection to the Jupyter server closed"
        if self.server.runner is None:
            why += (
                " (if the token is one of rewyn-kernel agent-token: it runs no code, and its "
                "runner token, which runs the agent's cells, was not found beside the tokens' "
                "file: set REWYN_AGENT_TOKENS_FILE)"
            )
        return why

    # -- on the loop ------------------------------------------------------------------------

    def _dispatch(self, channel: str, msg: dict[str, Any]) -> None:
        header = msg.get("header") or {}
        kind = header.get("msg_type")
        content = msg.get("content") or {}
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if channel == "iopub" and kind == "status":
            state = content.get("execution_state")
            # (restarting, dead: the server's word on a kernel it lost: what it ran is gone.
            # starting: the first word of a new kernel process, as after a restart the person
            # asked for; a request sent to it will be answered, one the old process took was
            # lost with it, which the attachment's watch finds: the kernel idle, no reply.)
            if state in ("restarting", "dead"):
                self.stale = True
                self._lose_all(f"the kernel {'died' if state == 'dead' else 'restarted'}")
                return
            if state == "starting":
                self.stale = True
                return
        running = self._running.get(parent) if isinstance(parent, str) else None
        if running is None:
            return
        if channel == "shell":
            if kind == "execute_reply":
                process = header.get("session")
                if isinstance(process, str) and self.process not in (None, process):
                    running.new_process = True
                    self.stale = True  # (the websocket heard a kernel that is gone: reopen)
                self.process = process if isinstance(process, str) else self.process
                running.reply = msg
                running.settle()
            return
        if kind == "status":
            if content.get("execution_state") == "busy":
                running.busy = True
            if content.get("execution_state") == "idle":
                running.idle = True
                running.settle()
            return
        try:
            running.on_message(msg)
        except Exception:
            logger.exception("an output of the kernel could not be kept")

    def _lose_all(self, why: str) -> None:
        for running in self._running.values():
            if running.lost is None:
                running.lost = why
                running.settle()
