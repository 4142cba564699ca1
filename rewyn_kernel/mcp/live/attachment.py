"""One notebook, attached: its shared document and its kernel, and an agent's calls in it.

``Attachment`` opens the notebook's document on the first call and finds its kernel on every
call (the person may restart it or change it: the session says which kernel is the notebook's
now), refusing a kernel that is not the sandbox kernel: the agent's code runs sandboxed or not
at all. ``run`` makes the agent's cell and runs it; ``propose`` makes it pending and waits for
the person (run, edited and run, rejected, deleted) until the approval delay ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.mcp.live.document import CellOutputs, LiveNotebook
from rewyn_kernel.mcp.live.jupyter import JupyterError, JupyterServer
from rewyn_kernel.mcp.live.kernel import KernelLost, LiveKernel, Running
from rewyn_kernel.mcp.live.outcome import CellRef, LiveOutput, read_outputs
from rewyn_kernel.mcp.results import ErrorOut
from rewyn_kernel.notebooks.agent_cells import (
    AgentMark,
    agent_mark,
    count_of,
    record_of,
    source_of,
)
from rewyn_kernel.tools import RiskLevel

logger = logging.getLogger(__name__)

SANDBOX_IMPLEMENTATION = "rewyn-kernel"
"""``implementation`` in the sandbox kernel's kernel_info_reply."""
DEFAULT_KERNEL = "rewyn-sandbox"
"""The kernelspec a notebook with none named gets (the one ``pip install`` puts in Jupyter)."""
GRACE = 30.0
"""Seconds past the kernel's own limit before the attachment gives up on a reply (the kernel
ends a cell at its limit itself; this is for a kernel that stopped answering)."""
AFTER_INTERRUPT = 10.0
WATCH_EVERY = 5.0
"""Seconds between looks at the kernel's state while a call waits on it."""
"""Seconds to wait for the reply after an interrupt."""
SETTLE = 3.0
"""Seconds to wait, once the person's run of a pending cell has its record, for the notebook's
outputs to settle (the person's JupyterLab writes them; the record comes with the reply)."""

Progress = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class KernelRisk:
    level: RiskLevel
    reasons: list[str]


class Attachment:
    """The notebook at ``path`` on ``server``, for the agent's calls."""

    def __init__(self, server: JupyterServer, path: str, *, approval_timeout: float) -> None:
        self.server = server
        self.path = path
        self.approval_timeout = approval_timeout
        self.notebook: LiveNotebook | None = None
        self.kernel: LiveKernel | None = None
        self.risk: KernelRisk | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._retired: list[LiveKernel] = []
        """Kernel connections a newer one replaced (each closes itself when its calls end)."""
        self._pending: dict[str, tuple[LiveNotebook, AgentMark]] = {}
        """The cells waiting for the person, by id: withdrawn if their call ends first."""

    async def close(self) -> None:
        for cell_id in list(self._pending):  # (the agent is gone: nothing waits for them;
            self._withdraw(cell_id)  # the document client sends the last changes as it stops)
        kernel, self.kernel = self.kernel, None
        kernels = [*self._retired, *([kernel] if kernel is not None else [])]
        self._retired.clear()
        for each in kernels:
            await asyncio.to_thread(each.close)
        notebook, self.notebook = self.notebook, None
        if notebook is not None:
            await notebook.close()

    async def document(self, agent: str) -> LiveNotebook:
        """The notebook open (opened at the first need), its kernel left as it is."""
        async with self._lock:
            return await self._open(agent)

    async def _open(self, agent: str) -> LiveNotebook:
        if self.notebook is not None and not self.notebook.connected:
            old, self.notebook = self.notebook, None  # (the room closed: open it again)
            await old.close()
        if self.notebook is None:
            notebook = LiveNotebook(self.server, self.path, agent)
            await notebook.open()
            self.notebook = notebook
        return self.notebook

    async def ready(self, agent: str) -> tuple[LiveNotebook, LiveKernel, KernelRisk]:
        """The notebook open and its kernel connected (opening or reconnecting as needed)."""
        async with self._lock:
            notebook = await self._open(agent)
            session = await asyncio.to_thread(self.server.session_of, self.path)
            if session is None:
                name = notebook.kernel_name() or DEFAULT_KERNEL
                session = await asyncio.to_thread(self.server.start_session, self.path, name)
            kernel_id = session["kernel"]["id"]
            if (
                self.kernel is None
                or self.kernel.kernel_id != kernel_id
                or not self.kernel.connected
            ):
                old, self.kernel = self.kernel, None
                self._retired = [each for each in self._retired if not each.closed]
                if old is not None:  # (it closes once the calls it carries have ended)
                    old.retire()
                    self._retired.append(old)
                kernel = LiveKernel(self.server, kernel_id, agent, asyncio.get_running_loop())
                await asyncio.to_thread(kernel.connect)
                try:
                    self.risk = _sandbox_risk(await asyncio.to_thread(kernel.probe))
                except Exception:
                    await asyncio.to_thread(kernel.close)
                    raise
                self.kernel = kernel
            assert self.risk is not None
            return notebook, self.kernel, self.risk

    # -- a call that runs ---------------------------------------------------------------------

    async def run(
        self,
        agent: str,
        call: str,
        code: str,
        timeout: float | None,
        budget: int,
        *,
        number: int | None = None,
    ) -> tuple[LiveOutput, list[tuple[str, str]]]:
        notebook, kernel, _ = await self.ready(agent)
        mark = AgentMark(name=agent, call=call, state="running", number=number)
        cell_id = notebook.add_cell(code, mark)
        outputs = CellOutputs(cell_id)
        metadata: dict[str, Any] = {"cellId": cell_id}
        if timeout is not None:
            metadata[METADATA_KEY] = {"timeout": timeout}
        started = time.monotonic()
        try:
            msg_id, running = kernel.send_execute(
                code, metadata, lambda msg: notebook.add_output(outputs, msg)
            )
        except KernelLost as exc:
            notebook.finished(cell_id, None)
            notebook.mark(cell_id, replace(mark, state="interrupted"))
            raise JupyterError(str(exc)) from None
        interrupted = False
        try:
            limit = (timeout or 0) + GRACE if timeout else None
            try:
                await asyncio.wait_for(self._watch(kernel, running), limit)
            except TimeoutError:
                interrupted = True
                await asyncio.to_thread(self.server.interrupt, kernel.kernel_id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(running.done.wait(), AFTER_INTERRUPT)
        except asyncio.CancelledError:  # (the client cancelled the call: stop the code)
            # (No await here: under the SDK's cancel scope every await would be cancelled
            # again. The cell says so at once; the interrupt goes out on a task of its own.)
            notebook.finished(cell_id, None)
            notebook.mark(cell_id, replace(mark, state="interrupted"))
            self._background(asyncio.to_thread(self.server.interrupt, kernel.kernel_id))
            raise
        finally:
            kernel.forget(msg_id)
        reply = running.reply or {}
        content = reply.get("content") or {}
        record = record_of(reply.get("metadata"))
        count = content.get("execution_count")
        count = count if isinstance(count, int) else None
        ending = _ending(content, record, running.lost)
        by: Any = None
        if ending == "interrupted":
            by = "agent" if interrupted else "person"
        if running.lost is not None or ending not in ("completed", "exception"):
            # (Interrupted, crashed, timed out: the kernel may be restarting under it, and a
            # new process's first words can miss this websocket. The next call reconnects.)
            kernel.stale = True
        notebook.finished(cell_id, count)
        state: Any = "interrupted" if ending in ("interrupted", "lost") else "done"
        notebook.mark(cell_id, replace(mark, state=state), record)
        parts, images, left_out = read_outputs(outputs.kept, budget)
        message = _message(ending, by, running.lost, parts["error"])
        note = None
        if running.new_process and not running.busy:
            note = (
                "the notebook's kernel restarted just before this call: the start of its "
                "output may be missing from the result and the cell"
            )
        return _output(
            ending=ending,
            message=message,
            by=by,
            approval="not asked",
            cell=self._ref(notebook, cell_id),
            count=count,
            record=record,
            parts=parts,
            images=len(images),
            left_out=left_out,
            elapsed=time.monotonic() - started,
            note=note,
        ), images

    def _background(self, work: Awaitable[Any]) -> None:
        """Run ``work`` on a task this attachment holds until it ends (its errors logged)."""

        async def run() -> None:
            try:
                await work
            except Exception:
                logger.exception("the notebook's kernel could not be interrupted")

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, kernel: LiveKernel, running: Running) -> None:
        """Until ``running`` ends; or, where the kernel says it is idle twice in a row while no
        reply came (its process was replaced, and the request with it), until that is said."""
        idle = 0
        while not running.done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(running.done.wait(), WATCH_EVERY)
                return
            try:
                state = await asyncio.to_thread(self.server.kernel_state, kernel.kernel_id)
            except JupyterError:
                continue
            idle = idle + 1 if state in ("idle", None, "dead") else 0
            if idle >= 2 and not running.done.is_set():
                running.lost = (
                    "the kernel is gone"
                    if state is None
                    else f"the kernel is {state} and "
                    "never answered: it was restarted, or the request was lost"
                )
                running.settle()

    # -- a call that waits for the person -----------------------------------------------------

    async def propose(
        self,
        agent: str,
        call: str,
        code: str,
        *,
        risk: KernelRisk,
        reason: str,
        budget: int,
        number: int | None = None,
    ) -> tuple[LiveOutput, list[tuple[str, str]]]:
        """Add the call's cell as pending and wait for the person. A call that ends first (the
        agent cancels it, or goes away: the server closes) leaves its cell withdrawn, so the
        page offers no Run for it (``close``)."""
        notebook, _, _ = await self.ready(agent)
        mark = AgentMark(
            name=agent,
            call=call,
            state="pending",
            risk=str(risk.level),
            reason=reason,
            code=code,
            number=number,
            client=notebook.client_id,
        )
        cell_id = notebook.add_cell(code, mark)
        self._pending[cell_id] = (notebook, mark)
        try:
            return await self._wait_for_person(notebook, cell_id, mark, code, budget)
        except BaseException:
            # (No await here: under the SDK's cancel scope every await would be cancelled.)
            self._withdraw(cell_id)
            raise
        finally:
            self._pending.pop(cell_id, None)

    def _withdraw(self, cell_id: str) -> None:
        """Mark the pending cell ``cell_id`` withdrawn, where the person has not decided yet."""
        notebook, mark = self._pending.pop(cell_id, (None, None))
        if notebook is None or mark is None or not notebook.connected:
            return
        with contextlib.suppress(Exception):
            cell = notebook.cell(cell_id)
            seen = agent_mark(cell.get("metadata")) if cell is not None else None
            if (
                cell is not None
                and seen is not None
                and seen.state == "pending"
                and record_of(cell.get("metadata")) is None
                and cell.get("execution_state") != "running"
            ):
                notebook.mark(cell_id, replace(mark, state="withdrawn"))

    async def _wait_for_person(
        self, notebook: LiveNotebook, cell_id: str, mark: AgentMark, code: str, budget: int
    ) -> tuple[LiveOutput, list[tuple[str, str]]]:
        deadline = time.monotonic() + self.approval_timeout
        while True:
            cell = notebook.cell(cell_id)
            if cell is None:
                return self._refused("rejected", "the person deleted the cell", None), []
            seen = agent_mark(cell.get("metadata"))
            record = record_of(cell.get("metadata"))
            if record is not None:
                return await self._ran(notebook, cell_id, mark, code, record=record, budget=budget)
            if seen is not None and seen.rejected is not None:
                note = seen.rejected or None
                notebook.mark(cell_id, replace(mark, state="rejected", note=note))
                return self._refused("rejected", note, self._ref(notebook, cell_id)), []
            running = cell.get("execution_state") == "running"
            left = deadline - time.monotonic()
            if left <= 0 and not running:
                notebook.mark(cell_id, replace(mark, state="expired"))
                return self._refused("expired", None, self._ref(notebook, cell_id)), []
            await notebook.wait_for_change(max(left, 1.0) if not running else 5.0)

    async def _ran(
        self,
        notebook: LiveNotebook,
        cell_id: str,
        mark: AgentMark,
        code: str,
        *,
        record: dict[str, Any],
        budget: int,
    ) -> tuple[LiveOutput, list[tuple[str, str]]]:
        """The person ran the pending cell: its outcome, from the notebook."""
        settle = time.monotonic() + SETTLE
        cell = notebook.cell(cell_id) or {}
        while cell.get("execution_state") == "running" and time.monotonic() < settle:
            await notebook.wait_for_change(settle - time.monotonic())
            cell = notebook.cell(cell_id) or cell
        source = source_of(cell)
        edited = source != code
        notebook.mark(cell_id, replace(mark, state="edited" if edited else "approved"), record)
        parts, images, left_out = read_outputs(cell.get("outputs"), budget)
        ending = str(record.get("ending") or "completed")
        return _output(
            ending=ending,
            message=_message(
                ending, "person" if ending == "interrupted" else None, None, parts["error"]
            ),
            by="person" if ending == "interrupted" else None,
            approval="edited" if edited else "approved",
            cell=self._ref(notebook, cell_id),
            count=count_of(cell),
            record=record,
            parts=parts,
            images=len(images),
            left_out=left_out,
            elapsed=None,
            code=source if edited else None,
        ), images

    def _refused(self, how: Any, note: str | None, cell: CellRef | None) -> LiveOutput:
        if how == "rejected":
            message = "the person rejected this call" + (f": {note}" if note else "")
        else:
            message = (
                f"nobody approved this call within {self.approval_timeout:g} s: it did not run"
            )
        return LiveOutput(
            ran=False,
            ok=False,
            ending=how,
            message=message,
            approval=how,
            note=note,
            cell=cell,
            execution_count=None,
            duration_ms=None,
            stdout="",
            stderr="",
            error=None,
            outputs=[],
            images=0,
            truncated={},
        )

    @staticmethod
    def _ref(notebook: LiveNotebook, cell_id: str) -> CellRef | None:
        for index, cell in enumerate(notebook.cells()):
            if cell.get("id") == cell_id:
                return CellRef(index=index, id=cell_id)
        return None


def _sandbox_risk(info: dict[str, Any]) -> KernelRisk:
    """The kernel's risk as its kernel_info says; JupyterError for a kernel that is not
    sandboxed."""
    if info.get("implementation") != SANDBOX_IMPLEMENTATION:
        raise JupyterError(
            f"the notebook's kernel is {info.get('implementation')!r}, not the sandbox kernel: "
            "the agent runs code only in a sandbox (choose the kernel 'Python (sandboxed)' for "
            "the notebook)"
        )
    ours = info.get(METADATA_KEY)
    risk = ours.get("risk") if isinstance(ours, dict) else None
    reasons = ours.get("reasons") if isinstance(ours, dict) else None
    try:
        level = RiskLevel(risk)
    except ValueError:
        raise JupyterError(
            "the sandbox kernel did not say its risk (an older rewyn-kernel?): restart it"
        ) from None
    words = [str(reason)[:500] for reason in reasons] if isinstance(reasons, list) else []
    return KernelRisk(level, words[:20])


def _ending(content: dict[str, Any], record: dict[str, Any] | None, lost: str | None) -> str:
    if record is not None and isinstance(record.get("ending"), str):
        return str(record["ending"])[:40]
    if lost is not None and not content:
        return "lost"
    status = content.get("status")
    if status == "ok":
        return "completed"
    if content.get("ename") == "KeyboardInterrupt":
        return "interrupted"
    return "exception" if status == "error" else "lost"


def _message(ending: str, by: str | None, lost: str | None, error: ErrorOut | None) -> str:
    if ending == "lost":
        return f"no reply: {lost or 'the kernel did not answer'}"
    if ending == "interrupted":
        who = {"person": "the person, in the notebook", "agent": "this server, at the call's limit"}
        return f"interrupted by {who.get(by or '', 'an interrupt')}"
    if ending == "completed":
        return "ran to its end"
    if error is not None:
        return f"{error.ename}: {error.evalue}"[:500]
    return ending.replace("_", " ")


def _output(
    *,
    ending: str,
    message: str,
    by: Any,
    approval: Any,
    cell: CellRef | None,
    count: int | None,
    record: dict[str, Any] | None,
    parts: dict[str, Any],
    images: int,
    left_out: int,
    elapsed: float | None,
    code: str | None = None,
    note: str | None = None,
) -> LiveOutput:
    """The result; its duration the record's, else the call's (``elapsed`` seconds)."""
    duration = record.get("duration_ms") if record else None
    if not isinstance(duration, int | float) or isinstance(duration, bool):
        duration = round(elapsed * 1000, 1) if elapsed is not None else None
    ok = ending == "completed" and parts["error"] is None
    if left_out:
        images_note = f"{left_out} image(s) left out (too many, too big, or broken)"
        note = f"{note}; {images_note}" if note else images_note
    return LiveOutput(
        ran=ending != "lost",
        ok=ok,
        ending=ending,
        message=message,
        interrupted_by=by,
        approval=approval,
        code=code,
        note=note,
        cell=cell,
        execution_count=count,
        duration_ms=duration,
        stdout=parts["stdout"],
        stderr=parts["stderr"],
        error=parts["error"],
        outputs=parts["outputs"],
        images=images,
        truncated=parts["truncated"],
    )
