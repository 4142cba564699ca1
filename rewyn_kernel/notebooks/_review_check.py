"""``review --check``: re-run a review notebook as the agent's run went, and say what differs.

Each session of the run gets a kernel of its own (the sandbox kernel, by name), working in an
empty folder of its own (sessions that shared a workspace share one) under a temporary
directory, so nothing lands beside the notebook. The cells are replayed in call order:

- code the agent ran runs on its session's kernel, under the timeout the call asked for (sent
  in the execute_request's metadata, which the sandbox kernel honours within its own limit); a
  call of a tool that runs each call afresh (``sandbox_tool`` on a Sandbox) gets a restarted
  kernel. Its new event is compared with the recorded one (``compare``).
- a file the agent gave the sandbox is written again by running its cell (code that writes it)
  on the session's kernel, then checked byte for byte from here.
- a file the agent read is compared with the file now in the session's folder.
- a session the agent restarted has its kernel restarted; one it closed is shut down and its
  folder removed.
- calls that ran nothing (refused, denied, bad arguments, listings) are left as they were.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from pydantic import ValidationError
from traitlets import DottedObjectName, Type

from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY, event_output, reply_event
from rewyn_kernel.kernel.record import summary_line as event_summary_line
from rewyn_kernel.notebooks._review_cells import writable
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.result import without_traceback
from rewyn_kernel.runtime.scratch import READ_LIMIT, ScratchError, read_file
from rewyn_kernel.runtime.tool_call import LoggedFile, ToolCall

SERVER_FOLDER = ".rewyn-mcp"
"""Files the MCP server itself wrote in a session's folder (whole outputs): not the code's,
so a re-run does not make them."""


def compare(recorded: SandboxEvent, rerun: SandboxEvent) -> list[str]:
    """Say how ``rerun``'s outcome differs from ``recorded``'s; [] when it does not.

    Compared: exit code, ending, the stdout and stderr excerpts (and byte counts), the error's
    name and the text of rich outputs. Not compared: durations, ids, traceback details.
    """
    differences = []
    if rerun.exit_code != recorded.exit_code:
        differences.append(f"exit {rerun.exit_code} (was {recorded.exit_code})")
    if rerun.ending != recorded.ending:
        differences.append(f"ending {rerun.ending} (was {recorded.ending})")
    for name in ("stdout", "stderr"):
        new, old = getattr(rerun, f"{name}_bytes"), getattr(recorded, f"{name}_bytes")
        if name == "stderr" and (rerun.error or recorded.error):
            # (stderr ends with the traceback, whose details are not compared: the cell's
            # number in it, say, which a replay's kernel counts its own way)
            new = old = 0
        new_text = without_traceback(getattr(rerun, name), rerun.error)
        old_text = without_traceback(getattr(recorded, name), recorded.error)
        if new_text != old_text or new != old:
            differences.append(
                f"{name} differs" + (f" ({new:,} bytes, was {old:,})" * (new != old))
            )
    new_error = rerun.error.ename if rerun.error else "none"
    old_error = recorded.error.ename if recorded.error else "none"
    if new_error != old_error:
        differences.append(f"error {new_error} (was {old_error})")
    if [(o.output_type, o.text) for o in rerun.outputs] != [
        (o.output_type, o.text) for o in recorded.outputs
    ]:
        differences.append("rich outputs differ")
    return differences


# -- the kernels ---------------------------------------------------------------------------------


class ReplayClient(AsyncKernelClient):
    """A kernel client whose execute_request carries ``request_metadata`` (nbclient sends each
    cell through ``execute``; the sandbox kernel reads a timeout there)."""

    request_metadata: dict[str, Any] = {}  # noqa: RUF012 (replaced, never changed in place)

    def execute(  # noqa: PLR0917 (jupyter_client's signature)
        self,
        code: str,
        silent: bool = False,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool | None = None,
        stop_on_error: bool = True,
    ) -> str:
        content = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": user_expressions or {},
            "allow_stdin": self.allow_stdin if allow_stdin is None else allow_stdin,
            "stop_on_error": stop_on_error,
        }
        message = self.session.msg("execute_request", content, metadata=self.request_metadata)
        self.shell_channel.send(message)
        return str(message["header"]["msg_id"])


class ReplayKernelManager(AsyncKernelManager):
    """The kernel manager of a check: its clients are ``ReplayClient``s."""

    client_class = DottedObjectName(f"{__name__}.ReplayClient")
    client_factory = Type(klass=ReplayClient, default_value=ReplayClient)


@dataclass
class _Kernel:
    client: Any  # nbclient.NotebookClient (imported late: nbclient is slow to import)
    stack: contextlib.AsyncExitStack
    replies: list[dict[str, Any]]
    ran: bool = False


class Kernels:
    """The kernels of a check, one per session, each in its folder under ``root``; ``nb`` is the
    notebook they execute cells of, ``timeout`` nbclient's backstop per cell (None: none)."""

    def __init__(self, nb: Any, name: str, timeout: float | None, root: Path) -> None:
        self.nb, self.name, self.timeout, self.root = nb, name, timeout, root
        self._open: dict[str, _Kernel] = {}
        self._folders: dict[str, Path] = {}

    def folder(self, key: str) -> Path:
        """The folder of ``key`` (a sandbox or workspace of the run), made on first use."""
        if key not in self._folders:
            self._folders[key] = self.root / f"folder-{len(self._folders) + 1}"
            self._folders[key].mkdir()
        return self._folders[key]

    async def kernel(self, session: str, folder: str) -> _Kernel:
        """The kernel of ``session``, started in ``folder``'s folder if it is not running."""
        if session in self._open:
            return self._open[session]
        from nbclient import NotebookClient

        replies: list[dict[str, Any]] = []
        client = NotebookClient(
            self.nb,
            kernel_name=self.name,
            kernel_manager_class=ReplayKernelManager,
            timeout=None if self.timeout is None else int(self.timeout),
            allow_errors=True,
            resources={"metadata": {"path": str(self.folder(folder))}},
            on_cell_executed=lambda **kw: replies.append(kw["execute_reply"]),
        )
        client.reset_execution_trackers()
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(client.async_setup_kernel())
        self._open[session] = kernel = _Kernel(client, stack, replies)
        return kernel

    async def run(self, step: Step, metadata: dict[str, Any]) -> dict[str, Any]:
        """Execute ``step``'s cell on its session's kernel, ``metadata`` in the request; return
        the reply."""
        kernel = await self.kernel(step.session, step.folder)
        kernel.client.kc.request_metadata = metadata
        kernel.replies.clear()
        await kernel.client.async_execute_cell(step.cell, step.index)
        kernel.ran = True
        return kernel.replies[-1] if kernel.replies else {}

    def ran(self, session: str) -> bool:
        return session in self._open and self._open[session].ran

    async def stop(self, session: str) -> None:
        """Shut ``session``'s kernel down (the next cell of it starts a new one)."""
        kernel = self._open.pop(session, None)
        if kernel is not None:
            await kernel.stack.aclose()

    async def remove(self, folder: str) -> None:
        path = self._folders.pop(folder, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    async def aclose(self) -> None:
        for session in list(self._open):
            with contextlib.suppress(Exception):  # (one kernel that will not stop: the rest do)
                await self.stop(session)


@contextlib.contextmanager
def scratch_root() -> Iterator[Path]:
    """A temporary directory for the sessions' folders, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="rewyn-review-check-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the replay ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a check found."""

    checked: int = 0
    differing: list[str] = field(default_factory=list)
    not_replayed: int = 0
    unwritten: list[str] = field(default_factory=list)
    """Inputs the log does not hold whole: later differences may come from them."""


@dataclass(frozen=True)
class Step:
    """A cell to replay, where: its session's kernel and its folder."""

    cell: Any
    index: int
    session: str
    folder: str


@dataclass(frozen=True)
class _Cell:
    """What a review cell records: its call and the event of the code it ran."""

    call: ToolCall | None
    event: SandboxEvent | None
    problem: str = ""


def recorded(cell: Any) -> _Cell:
    """The records of a review cell, validated (a notebook is untrusted input too)."""
    record = cell.metadata.get(METADATA_KEY) or {}
    try:
        call = ToolCall.model_validate(record["call"]) if record.get("call") else None
        events = record.get("events") or [None]
        event = SandboxEvent.model_validate(events[0]) if record.get("recorded") else None
    except ValidationError as exc:
        return _Cell(None, None, f"a record in this cell is not valid: {exc.error_count()} errors")
    return _Cell(call, event)


def folders_of(cells: list[_Cell]) -> dict[str, str]:
    """The folder key of each sandbox of the run: its workspace where it had one (sessions
    that shared it share a folder), else the sandbox itself."""
    folders: dict[str, str] = {}
    for item in cells:
        if item.event is not None:
            workspace = item.event.spec.get("workspace")
            where = f"workspace {workspace}" if workspace else f"sandbox {item.event.sandbox_id}"
            folders.setdefault(item.event.sandbox_id, where)
    return folders


def mark_rerun(cell: Any, reply: dict[str, Any], recorded_event: SandboxEvent) -> tuple[str, bool]:
    """Append the re-run's event to ``cell`` and mark its event output; return the verdict and
    whether the outcome differs."""
    import nbformat

    data = reply_event(reply)
    record = cell.metadata.setdefault(METADATA_KEY, {})
    if data is None:
        return "the re-run sent no SANDBOX_EXECUTED event: is this the sandbox kernel?", True
    record.setdefault("events", []).append(data)
    try:
        rerun = SandboxEvent.model_validate(data)
    except ValidationError as exc:
        return f"the re-run's event is not valid: {exc.error_count()} errors", True
    differences = compare(recorded_event, rerun)
    code_changed = rerun.code_hash != recorded_event.code_hash
    record["check"] = {"differences": differences, "code_changed": code_changed}
    verdict = ("code changed since the recording; " if code_changed else "") + (
        f"differs from the recorded run: {'; '.join(differences)}"
        if differences
        else "same as the recorded run"
    )
    line = f"{event_summary_line(rerun)} — {verdict}"
    for output in cell.outputs:
        if output.get("output_type") == "display_data" and EVENT_MIME in output.get("data", {}):
            output["data"]["text/plain"] = line
            break
    else:  # the kernel runs with event_output off: add the output it would have written
        output_data, output_metadata = event_output(rerun)
        output_data["text/plain"] = line
        node = {"output_type": "display_data", "data": output_data, "metadata": output_metadata}
        cell.outputs.append(nbformat.from_dict(node))  # type: ignore[no-untyped-call]
    return verdict, bool(differences)


def compare_file(folder: Path, file: LoggedFile) -> str | None:
    """Say how the file at ``file.path`` in ``folder`` differs from the record; None if not."""
    try:
        data = read_file(folder, file.path, READ_LIMIT)
    except FileNotFoundError:
        return f"{file.path}: not there"
    except (ScratchError, OSError) as exc:
        return f"{file.path}: {exc.strerror or exc}"
    digest = hashlib.sha256(data).hexdigest()
    if digest == file.sha256:
        return None
    return (
        f"{file.path}: {len(data):,} bytes, sha256 {digest[:16]} (was {file.size:,} bytes, "
        f"sha256 {file.sha256[:16]})"
    )


def note(cell: Any, verdict: str, **record: object) -> None:
    """Add the check's verdict to a cell that ran no code: an output, and its metadata."""
    import nbformat

    cell.metadata.setdefault(METADATA_KEY, {})["check"] = {"verdict": verdict, **record}
    node = {
        "output_type": "display_data",
        "data": {"text/plain": f"check: {verdict}"},
        "metadata": {METADATA_KEY: {"check": True}},
    }
    cell.outputs.append(nbformat.from_dict(node))  # type: ignore[no-untyped-call]


def _is_call_line(output: Any) -> bool:
    return bool((output.get("metadata") or {}).get(METADATA_KEY, {}).get("call_line"))


async def replay(nb: Any, kernels: Kernels, tally: Tally, say: Callable[[str], None]) -> None:
    """Replay the code cells of review notebook ``nb`` in order (see the module), counting in
    ``tally`` and saying a line per cell through ``say``."""
    cells = [(i, c, recorded(c)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    folders = folders_of([item for _, _, item in cells])
    last = ("", "")  # (the session and folder of the cell before: where an added cell runs)
    for index, cell, item in cells:
        where = str(cell.get("id", index))
        call, event = item.call, item.event
        if item.problem:
            tally.checked += 1
            tally.differing.append(where)
            say(f"cell {where}: {item.problem}")
            continue
        if call is None and event is None:  # a cell the reviewer added
            await kernels.run(Step(cell, index, *last), {})
            continue
        session = (event.session_id if event else None) or (call.session_id if call else None)
        sandbox = (call.sandbox_id if call else None) or (event.sandbox_id if event else None)
        if session is None or (call is not None and call.failed):
            tally.not_replayed += 1  # (nothing ran: nothing to run again)
            continue
        step = Step(cell, index, session, folders.get(sandbox or "", f"sandbox {sandbox}"))
        last = (step.session, step.folder)
        if event is not None:
            verdict, differs = await _rerun(kernels, step, call, event)
        elif call is not None and call.session_effect is not None:
            await kernels.stop(session)
            if call.session_effect == "closed":
                await kernels.remove(step.folder)
            say(f"cell {where}: its session {call.session_effect}, as the agent's did")
            continue
        else:
            assert call is not None
            found = await _files(kernels, step, call, tally)
            if found is None:
                tally.not_replayed += 1
                continue
            verdict, differs = found
            note(cell, verdict, differs=differs)
        tally.checked += 1
        if differs:
            tally.differing.append(where)
        say(f"cell {where}: {verdict}")


async def _rerun(
    kernels: Kernels, step: Step, call: ToolCall | None, event: SandboxEvent
) -> tuple[str, bool]:
    """Run the code of an execution again, as its call ran it; compare."""
    if call is not None and call.keeps_state is False and kernels.ran(step.session):
        await kernels.stop(step.session)  # (each call of that tool ran in a fresh interpreter)
    cell = step.cell
    line = cell.outputs[0] if cell.outputs and _is_call_line(cell.outputs[0]) else None
    asked = {METADATA_KEY: {"timeout": call.timeout}} if call and call.timeout else {}
    reply = await kernels.run(step, asked)
    if line is not None:
        cell.outputs.insert(0, line)
    return mark_rerun(cell, reply, event)


async def _files(
    kernels: Kernels, step: Step, call: ToolCall, tally: Tally
) -> tuple[str, bool] | None:
    """Write the files a call gave the sandbox again (by running its cell), or compare those it
    read; the verdict and whether it differs, or None for a call with neither."""
    given = [f for f in call.files if f.direction == "in"]
    read = [f for f in call.files if f.direction == "out"]
    if given:
        cut = [f.path for f in given if not (f.complete and writable(f.path))]
        if cut:  # (not a difference of the run's: later cells may differ for it)
            tally.unwritten += cut
            note(step.cell, f"not written again: the log does not hold {', '.join(cut)} whole")
            return None
        cell = step.cell
        outputs, count = list(cell.outputs), cell.execution_count
        await kernels.run(step, {})
        cell.outputs, cell.execution_count = outputs, count  # (what the model was given)
        checked, verb = given, "written again"
    elif [f for f in read if not f.path.startswith(f"{SERVER_FOLDER}/")]:
        checked, verb = read, "read again"
    else:
        return None
    problems = [p for f in checked if (p := compare_file(kernels.folder(step.folder), f))]
    if problems:
        return f"differs from the recorded run: {'; '.join(problems)}", True
    names = ", ".join(f"{f.path} ({f.size:,} bytes)" for f in checked)
    return f"{verb}, the same bytes as recorded: {names}", False
