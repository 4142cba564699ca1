"""SandboxKernel: a Jupyter kernel that runs every cell in one sandbox session.

The kernel process itself runs no user code. Each cell goes to a ``Session`` of a sandbox made
from the kernel's settings (traitlets, so they work from kernel.json argv, config files and the
command line); output streams back live, coalesced; rich output passes the safety filter; and
the cell's SANDBOX_EXECUTED event rides in the reply metadata and in a small persisted output.
"""

from __future__ import annotations

import asyncio
import codeop
import contextlib
import logging
import signal
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType
from typing import Any

from ipykernel._version import kernel_protocol_version
from ipykernel.kernelbase import Kernel
from jupyter_client.session import Session as JupyterSession

from rewyn_kernel import __version__
from rewyn_kernel.kernel import packages, prestart
from rewyn_kernel.kernel._compat import iopub_topic, main_shell_lock, shell_ident
from rewyn_kernel.kernel._relay import StreamRelay
from rewyn_kernel.kernel._settings import SandboxSettings
from rewyn_kernel.kernel.grants import TARGET, GrantDesk, GrantStore, grants_path, with_grants
from rewyn_kernel.kernel.history import History, is_complete_ipython
from rewyn_kernel.kernel.record import (
    METADATA_KEY,
    cell_error,
    compact_record,
    event_json,
    event_output,
    shown_error,
)
from rewyn_kernel.kernel.safety import WIDGET_VIEW_MIME, drop_note, filter_bundle
from rewyn_kernel.kernel.undo import UNDO_KEY, Undo, UsageError, is_undo, request
from rewyn_kernel.kernel.widgets import WidgetPolicy
from rewyn_kernel.runtime.events import JsonlRunLog, SandboxEvent
from rewyn_kernel.runtime.network import entry_for
from rewyn_kernel.runtime.printable import printable
from rewyn_kernel.runtime.result import NetworkLog
from rewyn_kernel.runtime.sandbox import (
    CommFrame,
    RichOutput,
    SandboxResult,
    SubprocessProvider,
)
from rewyn_kernel.runtime.session import UNSET
from rewyn_kernel.runtime.tool import assess
from rewyn_kernel.runtime.workspace import not_a_workspace

logger = logging.getLogger(__name__)
INTROSPECT_WAIT = 10.0
"""Seconds a completion or inspection may take in the sandbox (it runs off the event loop)."""


class SandboxKernel(Kernel, SandboxSettings):
    """Run each cell in a sandbox; state is kept between cells in one sandbox session."""

    implementation = "rewyn-kernel"
    implementation_version = __version__
    language = "python"
    banner = f"rewyn-kernel {__version__}: Python in a sandbox"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self._last_event: SandboxEvent | None = None
        self._parent: dict[str, Any] = {}
        self._widgets = WidgetPolicy()
        self._turn = asyncio.Lock()
        """Held while a cell or a comm message is in the sandbox (``_parent`` is its)."""
        self._listener: asyncio.Task[None] | None = None
        """Between turns: relays what the code's threads send (``_listen``)."""
        self._listened: StreamRelay | None = None  # (the listener's text, not yet sent)
        self._refused: set[str] = set()  # what this request's note said was not relayed
        for msg_type in ("comm_open", "comm_msg", "comm_close"):
            self.shell_handlers[msg_type] = self._comm_request
        self._stdin_ident: Any = None
        self._asking: set[asyncio.Task[Any]] = set()
        self._history = History()
        # (Started while this process imported Jupyter's stack, if the settings match.)
        # (with the hosts the person granted this notebook from the page: grants.py)
        settings = with_grants(self.settings())
        self._sandbox, self._session = prestart.sandbox_for(settings, self._remember)
        run_log = settings.for_kernel().run_log if settings.keep_run_log else None
        self._grants = GrantDesk(
            self._sandbox, GrantStore(grants_path()), JsonlRunLog(run_log) if run_log else None
        )
        self._grant_comms: set[str] = set()
        self._offers: list[dict[str, Any]] = []  # (this request's, for its record)
        self._undo = Undo(self.checkpoints, self._sandbox.spec.workspace)
        self._packages = packages.attach(self._sandbox) if self.keep_packages else None
        if self._packages is not None and self._packages.startup_files:
            self._session.restart()  # (its worker started before they were there)
        self._undone: tuple[int, ...] = ()  # (what this request's undo undid, for its reply)
        if self.trust_output:
            logger.warning(
                "trust_output is on: rich output from the sandbox (HTML with scripts, "
                "JavaScript) reaches the browser unfiltered, with your Jupyter credentials"
            )

    def _remember(self, event: SandboxEvent) -> None:
        self._last_event = event

    def _banner(self) -> str:
        """What runs the cells, and where (known once the sandbox is up)."""
        ready = self._session.ready if hasattr(self, "_session") else None
        where = self._sandbox.provider.name if hasattr(self, "_sandbox") else "a sandbox"
        if ready is None:
            return f"rewyn-kernel {__version__}: Python in a sandbox ({where})"
        shell = "IPython" if ready.shell == "ipython" else "plain Python (no IPython there)"
        banner = (
            f"rewyn-kernel {__version__}: Python {ready.python} in a sandbox ({where}); {shell}"
        )
        spec = self._sandbox.spec
        memory = f"{spec.memory_limit_mb} MiB" if spec.memory_limit_mb else "no cap"
        timeout = f"{spec.timeout:g} s" if spec.timeout else "none"
        banner += (
            f"\nLimits: memory {memory} (its processes together), a cell's time {timeout}, "
            f"network {spec.network}."
        )
        if self._sandbox.isolation.files == "open":
            provider = self._sandbox.provider
            why = provider.instead_of_bubblewrap if isinstance(provider, SubprocessProvider) else ""
            because = f": bubblewrap cannot run here ({why})" if why else ""
            banner += f"\nThe host's files are open to the code{because}."
        if self._sandbox.spec.workspace is None and self.settings().notebook_workspace:
            why = not_a_workspace(Path.cwd().resolve())
            if why:
                banner += (
                    f"\nThe notebook's folder {Path.cwd()} {why.split(':')[0]}: the code works "
                    "in a scratch directory instead (the kernel setting workspace names a folder: "
                    "--SandboxKernel.workspace=DIR)."
                )
        return banner

    def _language_info(self) -> dict[str, Any]:
        ready = self._session.ready if hasattr(self, "_session") else None
        version = ready.python if ready else ".".join(map(str, sys.version_info[:3]))
        return {
            "name": "python",
            "version": version,
            "mimetype": "text/x-python",
            "file_extension": ".py",
            "pygments_lexer": "ipython3",
            "codemirror_mode": {"name": "ipython", "version": 3},
            "nbconvert_exporter": "python",
        }

    # -- execution -----------------------------------------------------------------------------

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        # (The base class has counted this execution already.)
        self._last_event = None
        if not code.strip():
            return self._ok()
        if is_undo(code):  # (read here, from the frontend's request: never the sandbox's)
            if not silent:
                self.execution_count -= 1  # (an undo uses none: store_history=False's reply)
            async with self._sandbox_turn():
                return await self._run_undo(code, silent)
        timeout = self._requested_timeout(cell_meta)
        async with self._sandbox_turn():
            if not silent:
                self._parent = self.get_parent("shell")  # type: ignore[no-untyped-call]
                self._note(await self._undo.before(self._session, self.execution_count, code))
            return await self._execute(code, silent, store_history, allow_stdin, timeout)

    async def _run_undo(self, code: str, silent: bool) -> dict[str, Any]:
        """``%undo``, ``%undo N``, ``%undo --to N``: the state before a cell (``undo.py``), on
        the host. Not stored in the history: it has no execution count."""
        self._parent = self.get_parent("shell")  # type: ignore[no-untyped-call]
        try:
            asked = request(code)
        except UsageError as exc:  # (nothing is touched: the checkpoints stay as they are)
            return self._undo_refused(str(exc), silent)
        outcome = await self._undo.undo(self._session, asked)
        listener = self._listener
        if outcome.undone and listener is not None:
            # (it listened to the process the undo replaced: the turn's end starts another)
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        self._undone = outcome.undone
        self._undo.prepare(self._session)  # (the state the next cell starts from)
        if not silent:
            self._send_stream("stdout" if outcome.undone else "stderr", outcome.text + "\n")
        return self._ok() if outcome.undone else self._undo_refused(outcome.text, silent, said=True)

    def _undo_refused(self, text: str, silent: bool, *, said: bool = False) -> dict[str, Any]:
        """The reply to an undo that undid nothing (``text`` says why; ``said``: already sent)."""
        if not silent and not said:
            self._send_stream("stderr", text + "\n")
        error = {"ename": "UsageError", "evalue": text, "traceback": []}
        return {"status": "error", "execution_count": self.execution_count, "payload": [], **error}

    def _note(self, notes: list[str]) -> None:
        for note in notes:
            self._send_stream("stderr", f"[rewyn: {note}]\n")

    def _requested_timeout(self, cell_meta: dict[str, Any] | None) -> float | None:
        """The limit an execute_request asks for in its metadata, ``{"rewyn_kernel":
        {"timeout": SECONDS}}`` (``rewyn-kernel review --check`` replays an agent's call under
        the timeout it gave), within the kernel's own; None: the kernel's."""
        asked = ((cell_meta or {}).get(METADATA_KEY) or {}).get("timeout")
        if not isinstance(asked, int | float) or isinstance(asked, bool) or not asked > 0:
            return None
        return float(asked) if self.timeout is None else min(float(asked), self.timeout)

    @contextlib.asynccontextmanager
    async def _sandbox_turn(self) -> AsyncIterator[None]:
        """A cell's or a comm message's turn in the sandbox: one at a time, in order. Between
        turns, what the code's threads send (a print, a progress bar) goes out as it comes,
        with the last request as its parent, as on ipykernel (``_listen``)."""
        async with self._turn:
            if self._listened is not None:
                self._listened.flush()  # (text a thread printed goes before this turn's)
            try:
                yield
            finally:
                listener = self._listener
                if (listener is None or listener.done()) and not self._sandbox.closed:
                    # (one for as long as the sandbox's worker lives: a turn takes the
                    # sandbox over from it, and gives it back, without a thread's hop)
                    self._listener = asyncio.ensure_future(self._listen())

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        relay = self._listened = StreamRelay(self._send_stream, loop)
        noted: set[str] = set()

        def on_output(output: RichOutput) -> None:
            relay.flush()
            dropped = set(self._send_rich(output)) - noted
            if dropped:
                noted.update(dropped)
                self._send_stream("stderr", drop_note(sorted(dropped)) + "\n")

        def on_clear(wait: bool) -> None:
            relay.flush()
            self._publish("clear_output", {"wait": wait})

        try:
            await self._session.alisten(
                on_stream=relay.write,
                on_output=on_output,
                on_clear=on_clear,
                on_comm=lambda frame: self._on_comm(frame, relay),
            )
        except Exception:  # (a closed session, say: the next turn starts another)
            self.log.debug("listening between cells ended", exc_info=True)
        finally:
            relay.flush()

    async def _execute(
        self, code: str, silent: bool, store_history: bool, allow_stdin: bool, timeout: float | None
    ) -> dict[str, Any]:
        # Callbacks run from the runtime's thread, outside this request's context: every
        # message names its parent explicitly, or frontends would not match it to the cell.
        self._parent = self.get_parent("shell")  # type: ignore[no-untyped-call]
        self._stdin_ident = shell_ident(self)
        loop = asyncio.get_running_loop()
        relay = StreamRelay(self._send_stream if not silent else _discard, loop)
        dropped: set[str] = set()

        def on_output(output: RichOutput) -> None:
            relay.flush()  # text printed before a display stays before it
            if not silent:
                dropped.update(self._send_rich(output))

        def on_clear(wait: bool) -> None:
            relay.flush()
            if not silent:
                self._publish("clear_output", {"wait": wait})

        self._refused = set()
        try:
            result = await self._session.aexecute(
                code,
                on_stream=relay.write,
                on_output=on_output,
                on_input=self._ask if allow_stdin else None,
                on_clear=on_clear,
                count=self.execution_count,
                silent=silent,
                on_comm=lambda frame: self._on_comm(frame, relay),
                parent=str(self._parent.get("header", {}).get("msg_id", "")),
                timeout=UNSET if timeout is None else timeout,
                checkpoint_after=self._undo.checkpoint_after and not silent,
            )
        finally:
            relay.flush()
            for task in list(self._asking):
                task.cancel()  # the code is over: a question still open is moot
        if dropped and not silent:
            self._send_stream("stderr", drop_note(sorted(dropped)) + "\n")
        if store_history and not silent:
            self._history.append(self.execution_count, code)
        if self._packages is not None:
            kept = await asyncio.to_thread(self._packages.save)
            if kept and not silent:
                self._send_stream("stderr", kept)
        if not silent:
            self._undo.after(self.execution_count, result.files)
            self._note(self._undo.lost())
        else:
            await self._undo.stale(self._session)  # (silent code may have changed the state)
        return self._finish(result, silent, self.timeout if timeout is None else timeout, code)

    # -- comms (ipywidgets) ------------------------------------------------------------------

    async def shell_main(self, subshell_id: str | None, msg: Any) -> None:
        """(ipykernel 7) Every shell request on its own, in order, as on ipykernel 6.

        ipykernel 7 hands a comm message to its handler beside a running cell (an async cell
        may await a widget) and, when that handler ends, puts back the shell's parent it saw
        when the message came: a comm handler that waits, as this kernel's do (the sandbox
        takes one thing at a time), would then give the cell's reply and idle status the
        wrong parent, and the frontend would wait for them for ever.
        """
        async with main_shell_lock(self):
            await self.dispatch_shell(msg, subshell_id=subshell_id)

    async def _comm_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """A comm message from the frontend (a slider moved, a button clicked): delivered to
        the code's comms when the policy allows it; what its handler shows goes out as the
        reply to it (an Output widget captures it by this message's id)."""
        msg_type = str(parent.get("header", {}).get("msg_type", ""))
        if self._grant_request(msg_type, parent):
            return  # (the person's grant: answered here, never relayed into the sandbox)
        # ipykernel 7 dispatches comm messages while a cell runs (for async cells awaiting a
        # widget): here they wait their turn, in order, as the sandbox's code takes one thing
        # at a time, and the cell's outputs keep the cell as their parent.
        async with self._sandbox_turn():
            await self._deliver(msg_type, parent)

    async def _deliver(self, msg_type: str, parent: dict[str, Any]) -> None:
        message = self._widgets.incoming(msg_type, parent)
        if message is None:
            self.log.warning("comm message refused: %s for an unknown comm or target", msg_type)
            return
        self._parent = parent
        loop = asyncio.get_running_loop()
        # (interval 0: the first text at once, the rest at the loop's next turn, not 50 ms on:
        # a slider's feedback is felt)
        relay = StreamRelay(self._send_stream, loop, interval=0.0)
        self._refused = set()

        def on_output(output: RichOutput) -> None:
            relay.flush()
            self._send_rich(output)

        def on_clear(wait: bool) -> None:
            relay.flush()
            self._publish("clear_output", {"wait": wait})

        await self._undo.stale(self._session)  # (a widget's callback runs code: the state changes)
        try:
            await self._session.adeliver_comm(
                message,
                on_stream=relay.write,
                on_output=on_output,
                on_clear=on_clear,
                on_comm=lambda frame: self._on_comm(frame, relay),
            )
        finally:
            relay.flush()

    def _grant_request(self, msg_type: str, parent: dict[str, Any]) -> bool:
        """Answer a message on the grants' comm (grants.py) on the host, at once (a grant needs
        no turn in the sandbox); False for any other comm message."""
        content = parent.get("content")
        content = content if isinstance(content, dict) else {}
        comm_id = content.get("comm_id")
        if not isinstance(comm_id, str):
            return False
        if msg_type == "comm_open":
            if content.get("target_name") != TARGET:
                return False
            self._grant_comms.add(comm_id)
        elif comm_id not in self._grant_comms:
            return False
        if msg_type == "comm_close":
            self._grant_comms.discard(comm_id)
            return True
        data = content.get("data")
        answer = self._grants.answer(data if isinstance(data, dict) else {})
        topic = iopub_topic(self, "comm_msg")
        reply = {"comm_id": comm_id, "data": answer}
        self._wire.send(self.iopub_socket, "comm_msg", reply, parent, ident=topic)
        return True

    def _on_comm(self, frame: CommFrame, relay: StreamRelay) -> None:
        """Relay a comm message of the code's, as the policy allows; say once per request
        what was refused."""
        relayed = self._widgets.outgoing(frame)
        if isinstance(relayed, str):
            if relayed and relayed not in self._refused:
                self._refused.add(relayed)
                relay.write("stderr", f"[rewyn: not shown: {relayed}]\n")
            return
        relay.flush()
        topic = iopub_topic(self, relayed.msg_type)
        self._wire.send(
            self.iopub_socket,
            relayed.msg_type,
            relayed.content,
            self._parent,
            ident=topic,
            buffers=relayed.buffers,
            metadata=relayed.metadata,
        )

    async def comm_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """The comms the code opened (ipywidgets' manager asks, to restore widgets)."""
        target = parent.get("content", {}).get("target_name")
        content = {"comms": self._widgets.info(target), "status": "ok"}
        self._wire.send(stream, "comm_info_reply", content, parent, ident=ident)

    # -- interrupts --------------------------------------------------------------------------

    def pre_handler_hook(self) -> None:
        """Catch SIGINT while a request is handled (signal interrupt mode).

        IPKernelApp ignores SIGINT between requests and ipykernel's default handler would
        raise KeyboardInterrupt out of the event loop, ending the kernel without a reply.
        The sandbox is in its own process group, so this forwarding is its only interrupt.
        """
        self._loop = asyncio.get_running_loop()
        self.saved_sigint_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def post_handler_hook(self) -> None:
        signal.signal(signal.SIGINT, self.saved_sigint_handler)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self._loop.call_soon_threadsafe(self._session.interrupt)

    async def interrupt_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """Interrupt the sandbox (message interrupt mode; runs on the control thread).

        The default would SIGINT the kernel's whole process group.
        """
        self._session.interrupt()  # thread-safe: one frame down the sandbox's channel
        self._wire.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)

    # -- stdin -----------------------------------------------------------------------------

    async def _ask(self, prompt: str, password: bool) -> str:
        """Ask the frontend for a line, without blocking the event loop.

        ipykernel's raw_input polls the stdin socket on the loop's thread until a reply comes,
        so an interrupt or the end of the code could not be seen meanwhile.
        """
        task = asyncio.current_task()
        assert task is not None
        self._asking.add(task)
        try:
            while self._wire.recv(self.stdin_socket)[1] is not None:
                pass  # stale replies of an earlier question
            content = {"prompt": prompt, "password": password}
            self._wire.send(
                self.stdin_socket, "input_request", content, self._parent, ident=self._stdin_ident
            )
            while True:
                _, reply = self._wire.recv(self.stdin_socket)
                if reply is not None:
                    break
                await asyncio.sleep(0.01)
        finally:
            self._asking.discard(task)
        value = str(reply.get("content", {}).get("value", ""))
        if value == "\x04":
            raise EOFError("end of input")
        return value

    # -- output ------------------------------------------------------------------------------

    def _publish(self, msg_type: str, content: dict[str, Any]) -> None:
        topic = iopub_topic(self, msg_type)
        self._wire.send(self.iopub_socket, msg_type, content, self._parent, ident=topic)

    @property
    def _wire(self) -> JupyterSession:
        """The kernel's Jupyter message session (not a sandbox session)."""
        assert self.session is not None
        return self.session

    def _send_stream(self, name: str, text: str) -> None:
        self._publish("stream", {"name": name, "text": text})

    def _send_rich(self, output: RichOutput) -> list[str]:
        error = shown_error(output.data)
        if error is not None:  # (a traceback IPython showed while the cell went on)
            self._publish("error", error)
            return []
        filtered = filter_bundle(
            output.data, output.metadata, trust=self.trust_output, widgets=self._widgets.models()
        )
        content: dict[str, Any] = {"data": filtered.data, "metadata": filtered.metadata}
        if output.output_type == "execute_result":
            content["execution_count"] = self.execution_count
            self._publish("execute_result", content)
        else:
            transient = {"display_id": output.display_id} if output.display_id else {}
            content["transient"] = transient
            self._publish("update_display_data" if output.update else "display_data", content)
        # (a widget's view goes with its model, whose refusal the cell was told of)
        return [mime for mime in filtered.dropped if mime != WIDGET_VIEW_MIME]

    def _finish(
        self, result: SandboxResult, silent: bool, timeout: float | None, code: str = ""
    ) -> dict[str, Any]:
        """Publish the error (if any), then the event output; build the reply."""
        reply = self._reply(result, silent, timeout, code)
        event = self._last_event
        if event is not None and self.event_output and not silent:
            data, metadata = event_output(event)
            self._publish("display_data", {"data": data, "metadata": metadata, "transient": {}})
        return reply

    def _reply(
        self, result: SandboxResult, silent: bool, timeout: float | None, code: str = ""
    ) -> dict[str, Any]:
        self._offers = self._grants.offers(result.network, code)
        if result.network is not None and not silent:
            note = refused_note(result.network)
            if note:
                self._send_stream("stderr", note)
            if self._offers:
                titles = ", ".join(str(offer["title"]) for offer in self._offers)
                self._send_stream(
                    "stderr",
                    f"[rewyn: or allow {titles} for this notebook with the button in the "
                    "cell's status line]\n",
                )
        error = cell_error(result, timeout)
        payload = [] if silent else self._payloads(result)
        if error is None:
            return self._ok(payload)
        # An error IPython showed itself (a UsageError, in stderr) has no traceback: the reply
        # names it, and no error output repeats it (as on ipykernel).
        shown = (
            result.ending == "exception" and result.error is not None and not result.error.traceback
        )
        if not silent and not shown:
            self._publish("error", error)
        return {
            "status": "error",
            "execution_count": self.execution_count,
            "payload": payload,
            **error,
        }

    def _payloads(self, result: SandboxResult) -> list[dict[str, Any]]:
        """The payloads relayed of those the sandbox's IPython sent (hostile input, already
        bounded by the runtime): the pager as plain text; a next cell's text as a new cell,
        never replacing the person's, and said so; ``exit()`` not at all, and said so."""
        relayed: list[dict[str, Any]] = []
        for item in result.payloads:
            if item.source == "page":
                relayed.append({"source": "page", "data": item.data, "start": item.start})
            elif item.source == "set_next_input" and not any(
                p["source"] == "set_next_input" for p in relayed
            ):
                relayed.append({"source": "set_next_input", "text": item.text, "replace": False})
                self._send_stream(
                    "stderr",
                    "[rewyn: the code in the sandbox put the text of a new cell below this one: "
                    "read it before you run it]\n",
                )
            elif item.source == "ask_exit":
                self._send_stream(
                    "stderr",
                    "[rewyn: exit() does not stop a sandbox kernel from inside the sandbox: use "
                    "the Kernel menu to shut it down or restart it]\n",
                )
        return relayed

    def _ok(self, payload: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {
            "status": "ok",
            "execution_count": self.execution_count,
            "payload": payload or [],
            "user_expressions": {},
        }

    def finish_metadata(
        self, parent: dict[str, Any], metadata: dict[str, Any], reply_content: dict[str, Any]
    ) -> dict[str, Any]:
        """Put the cell's SANDBOX_EXECUTED event in the execute_reply metadata.

        Each event goes into one reply: after an error ipykernel answers the queued requests
        with "aborted" replies through this method too, and those ran nothing.
        """
        metadata = super().finish_metadata(parent, metadata, reply_content)  # type: ignore[no-untyped-call]
        event, self._last_event = self._last_event, None
        undone, self._undone = self._undone, ()
        if reply_content.get("status") == "aborted":
            return metadata
        ours: dict[str, Any] = {}
        offers, self._offers = self._offers, []
        if event is not None:
            ours = {"event": event_json(event), "record": compact_record(event)}
            if offers:  # (the buttons its status line shows: grants.py)
                ours["record"]["offers"] = offers
            granted = self._grants.take_granted()
            if granted:  # (what the person granted since the last cell)
                ours["record"]["grants"] = granted
        if self._undo.keep:  # (whether an undo is there now, for the frontend to show)
            ours[UNDO_KEY] = self._undo.state(undone)
        if ours:
            metadata[METADATA_KEY] = ours
        return metadata

    @property
    def kernel_info(self) -> dict[str, Any]:
        """As the base's, but claiming neither a debugger nor kernel subshells: this kernel
        honours neither. (The base's also imports ipykernel's debugger to ask whether debugpy
        is there: a tenth of a second of the kernel's start, for a feature it does not offer.)"""
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self._language_info(),
            "banner": self._banner(),
            "help_links": self.help_links,
            "supported_features": [],
            **({METADATA_KEY: self._risk()} if hasattr(self, "_sandbox") else {}),
        }

    def _risk(self) -> dict[str, Any]:
        """The sandbox's risk level and why, and what it isolates, as the tool policy judges it
        (``rewyn-kernel mcp --notebook`` puts an agent's calls to the policy with this)."""
        level, reasons = assess(self._sandbox.isolation, self._sandbox.spec)
        return {
            "risk": str(level),
            "reasons": reasons,
            "isolation": self._sandbox.isolation.model_dump(mode="json"),
        }

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """Reply with the sandbox's Python in language_info, and what runs the cells in the
        banner (IPython or plain Python): both are known once the sandbox is up."""
        await asyncio.to_thread(self._session.wait_ready, 10.0)
        await super().kernel_info_request(stream, ident, parent)  # type: ignore[no-untyped-call]

    # -- introspection ---------------------------------------------------------------------

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        """Completions from the sandbox: bounded and checked, since the code there may answer
        for the completer (a session's code can replace it)."""
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        # (IPython's first completion imports jedi: seconds, not the runtime's 2 s default.)
        reply = await asyncio.to_thread(self._session.complete, code, cursor_pos, INTROSPECT_WAIT)
        matches: list[str] = []
        start = cursor_pos
        if reply is not None and 0 <= reply.cursor_start <= cursor_pos:
            start = reply.cursor_start
            # (The protocol bounds their number and length; here, no control characters.)
            matches = list(dict.fromkeys(m for m in reply.matches if m.isprintable()))
        return {
            "status": "ok",
            "matches": matches,
            "cursor_start": start,
            "cursor_end": cursor_pos,
            "metadata": {},
        }

    async def do_inspect(
        self,
        code: str,
        cursor_pos: int | None,
        detail_level: int = 0,
        omit_sections: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """What the sandbox says of a name, through the same output filter as every output:
        a Shift+Tab tooltip renders HTML as a cell does."""
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        reply = await asyncio.to_thread(
            self._session.inspect, code, cursor_pos, INTROSPECT_WAIT, detail_level=detail_level
        )
        if reply is None or not reply.found:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        filtered = filter_bundle(reply.data, {}, trust=self.trust_output)
        return {"status": "ok", "found": True, "data": filtered.data, "metadata": {}}

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        if self.ipython:
            return is_complete_ipython(code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                compiled = codeop.compile_command(code, "<cell>", "exec")
            except (SyntaxError, ValueError, OverflowError):
                return {"status": "invalid"}
        lines = code.splitlines()
        last = lines[-1] if lines else ""
        indent = last[: len(last) - len(last.lstrip())]
        if compiled is None:
            if last.rstrip().endswith(":"):
                indent += "    "
            return {"status": "incomplete", "indent": indent}
        if indent and not code.endswith("\n"):
            # Still inside an indented block, as a console sees it: more lines may follow.
            return {"status": "incomplete", "indent": indent}
        return {"status": "complete"}

    async def do_history(  # noqa: PLR0917 (ipykernel's signature)
        self,
        hist_access_type: str,
        output: bool,
        raw: bool,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
    ) -> dict[str, Any]:
        """The cells run in this kernel, answered here: they outlive a sandbox restart, and
        nothing the sandbox's code does can rewrite them."""
        entries = self._history.answer(
            hist_access_type,
            session=session,
            start=start,
            stop=stop,
            n=n,
            pattern=pattern,
            unique=unique,
        )
        history = [(s, line, (text, None) if output else text) for s, line, text in entries]
        return {"status": "ok", "history": history}

    # -- lifecycle ---------------------------------------------------------------------------

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        """Kill and reap the sandbox now: nothing of it may outlive the kernel."""
        # (The listener between cells ends with the sandbox: its channel ends.)
        await self._undo.stale(self._session)
        await asyncio.to_thread(self._undo.close)
        await asyncio.to_thread(self._sandbox.close)
        return {"status": "ok", "restart": restart}


def _discard(name: str, text: str) -> None:
    """Output of a silent execution goes nowhere."""


def refused_note(log: NetworkLog) -> str:
    """A note for the person on what the sandbox's proxy refused in a cell: the hosts, why, and
    the setting that would allow each ('' when nothing was refused)."""
    refused: dict[str, str] = {}
    for attempt in log.refused:
        if attempt.host and attempt.port:
            entry = printable(entry_for(attempt.host, attempt.port))
            refused.setdefault(entry, printable(attempt.reason))
    lines = []
    for entry, reason in list(refused.items())[:5]:
        lines.append(
            f"[rewyn: the sandbox may not reach {entry} ({reason}); to allow it, install the "
            f"kernel with --allow-host {entry}]\n"
        )
    if len(refused) > 5:
        lines.append(f"[rewyn: and {len(refused) - 5} more hosts refused]\n")
    if log.limit_reached:
        lines.append(f"[rewyn: the network stopped: {log.limit_reached}]\n")
    return "".join(lines)
