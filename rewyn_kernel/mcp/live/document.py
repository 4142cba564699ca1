"""The notebook's shared document, as the agent's MCP server edits and reads it.

``LiveNotebook`` owns one ``NbModelClient`` (jupyter_nbmodel_client: the notebook's Y document
over jupyter-collaboration's room, kept in sync both ways), so the agent's cells appear in the
person's open notebook as they are made, with no reload and no write over the person's edits
(the document merges them). Every read and write happens on the event loop, the thread the
client applies the room's updates on.

Outputs come from the kernel's messages as they arrive (``add_output``), as JupyterLab keeps
them: consecutive stream text in one output, ``clear_output`` (with ``wait``), display updates
by display id. The notebook is the person's and the kernel's output is the sandbox's: what one
cell may put in the document is bounded (``MAX_CELL_OUTPUT_CHARS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pycrdt
from jupyter_nbmodel_client import NbModelClient, get_jupyter_notebook_websocket_url
from nbformat.v4 import output_from_msg

from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.mcp.live.jupyter import JupyterError, JupyterServer
from rewyn_kernel.notebooks.agent_cells import AGENT_KEY, AgentMark, agent_mark

logger = logging.getLogger(__name__)

SYNC_TIMEOUT = 20.0
MAX_CELL_OUTPUT_CHARS = 2_000_000
"""Characters of output one agent cell may put in the notebook (its streams, texts and images
together); past it, a line says what was left out (the agent's result has its own budget)."""
OUTPUT_KINDS = ("stream", "display_data", "execute_result", "error")


@dataclass
class CellOutputs:
    """What the kernel has put in one agent cell so far (the loop's, like the document)."""

    cell_id: str
    chars: int = 0
    full: bool = False
    clear_on_next: bool = False
    displays: dict[str, list[int]] = field(default_factory=dict)
    kept: list[dict[str, Any]] = field(default_factory=list)
    """The outputs as plain JSON, in the document's order (the agent's result reads these)."""


class LiveNotebook:
    """One notebook's shared document, opened for an agent called ``name``."""

    def __init__(self, server: JupyterServer, path: str, name: str) -> None:
        self.server = server
        self.path = path
        self.name = name
        self._client: NbModelClient | None = None
        self.changed = asyncio.Event()
        """Set on every change to the cells (the agent's, the person's, anyone's)."""

    async def open(self) -> None:
        url = await asyncio.to_thread(
            get_jupyter_notebook_websocket_url,
            self.server.url,
            self.path,
            self.server.token,
        )
        client = NbModelClient(url, path=self.path, username=self.name, log=logger)
        try:
            await client.start()
            await asyncio.wait_for(client.wait_until_synced(), SYNC_TIMEOUT)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await client.stop()
            raise JupyterError(f"the notebook {self.path!r} could not be opened: {exc}") from None
        self._client = client
        self._ycells().observe_deep(lambda _events: self.changed.set())

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.stop()

    @property
    def client_id(self) -> int | None:
        """This client's id in the room's awareness (the page sees who is there by it)."""
        return None if self._client is None else int(self._client.get_local_client_id())

    @property
    def connected(self) -> bool:
        """Open and in sync with the room (a client whose websocket closed resets its
        document: nothing written to it would reach anyone)."""
        return self._client is not None and bool(self._client.synced)

    # -- the document ---------------------------------------------------------------------------

    def _doc(self) -> Any:
        if self._client is None:
            raise JupyterError("the notebook is not open")
        # (The client's YNotebook, jupyter_ydoc's: the cells as the room shares them.)
        return self._client._doc

    def _ycells(self) -> pycrdt.Array[Any]:
        return self._doc().ycells  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def _edit(self) -> Iterator[None]:
        client = self._client
        if client is None:
            raise JupyterError("the notebook is not open")
        with client._lock, self._doc()._ydoc.transaction(origin=client._changes_origin):
            yield

    def _find(self, cell_id: str) -> tuple[int, pycrdt.Map[Any]] | None:
        for index, ycell in enumerate(self._ycells()):
            if ycell.get("id") == cell_id:
                return index, ycell
        return None

    def cells(self) -> list[dict[str, Any]]:
        """Every cell as plain JSON (nbformat's shape), in the notebook's order."""
        return [ycell.to_py() for ycell in self._ycells()]

    def cell(self, cell_id: str) -> dict[str, Any] | None:
        found = self._find(cell_id)
        return None if found is None else found[1].to_py()

    def kernel_name(self) -> str | None:
        """The kernelspec the notebook names in its metadata, if any."""
        metadata = self._doc()._ymeta.get("metadata")
        spec = metadata.to_py().get("kernelspec") if metadata is not None else None
        name = spec.get("name") if isinstance(spec, dict) else None
        return name if isinstance(name, str) else None

    # -- the agent's cells --------------------------------------------------------------------

    def add_cell(self, code: str, mark: AgentMark) -> str:
        """A new code cell at the notebook's end with ``code``, marked as the agent's; its id.

        Above a trailing blank cell of the person's (JupyterLab keeps one at the end of a
        notebook, for the next thing the person types): it stays last.
        """
        doc = self._doc()
        cell_id = str(uuid.uuid4())
        ycell = doc.create_ycell(
            {
                "id": cell_id,
                "cell_type": "code",
                "source": code,
                "metadata": {METADATA_KEY: {AGENT_KEY: mark.as_json()}},
                "outputs": [],
                "execution_count": None,
            }
        )
        with self._edit():
            ycells = self._ycells()
            at = len(ycells)
            if at and _blank(ycells[at - 1].to_py()):
                at -= 1
            ycells.insert(at, ycell)
            if mark.state == "running":
                ycells[at]["execution_state"] = "running"
        return cell_id

    def mark(self, cell_id: str, mark: AgentMark, record: dict[str, Any] | None = None) -> None:
        """Write ``mark`` (and the execution's ``record``, if given) into the cell's metadata,
        keeping what else is there; nothing if the cell is gone."""
        found = self._find(cell_id)
        if found is None:
            return
        metadata = found[1]["metadata"]
        holder = metadata.get(METADATA_KEY)
        known = holder.to_py() if isinstance(holder, pycrdt.Map) else holder
        entry: dict[str, Any] = dict(known) if isinstance(known, dict) else {}
        entry[AGENT_KEY] = mark.as_json()
        if record is not None:
            entry["record"] = record
        with self._edit():
            metadata[METADATA_KEY] = entry

    def started(self, cell_id: str) -> None:
        found = self._find(cell_id)
        if found is not None:
            with self._edit():
                found[1]["outputs"].clear()
                found[1]["execution_count"] = None
                found[1]["execution_state"] = "running"

    def finished(self, cell_id: str, execution_count: int | None) -> None:
        found = self._find(cell_id)
        if found is not None:
            with self._edit():
                found[1]["execution_count"] = execution_count
                found[1]["execution_state"] = "idle"

    def add_output(self, outputs: CellOutputs, msg: dict[str, Any]) -> None:
        """One iopub message of the cell's execution, into the cell (as JupyterLab keeps it)."""
        kind = (msg.get("header") or {}).get("msg_type")
        content = msg.get("content") or {}
        if kind == "execute_input":
            count = content.get("execution_count")
            if isinstance(count, int):
                found = self._find(outputs.cell_id)
                if found is not None:
                    with self._edit():
                        found[1]["execution_count"] = count
            return
        if kind == "clear_output":
            if content.get("wait"):
                outputs.clear_on_next = True
            else:
                self._clear(outputs)
            return
        if kind not in (*OUTPUT_KINDS, "update_display_data"):
            return
        try:
            shown = _as_display(msg) if kind == "update_display_data" else msg
            output = dict(output_from_msg(shown))  # type: ignore[no-untyped-call]
        except (KeyError, ValueError, TypeError):
            return  # (a message nbformat cannot read: the kernel is the sandbox's)
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "update_display_data":
            if isinstance(display_id, str):
                self._update_display(outputs, display_id, output)
            return
        if outputs.clear_on_next:
            self._clear(outputs)
        self._append(outputs, output, display_id if isinstance(display_id, str) else None)

    def _clear(self, outputs: CellOutputs) -> None:
        outputs.clear_on_next = False
        outputs.kept.clear()
        outputs.displays.clear()
        found = self._find(outputs.cell_id)
        if found is not None:
            with self._edit():
                found[1]["outputs"].clear()

    def _append(self, outputs: CellOutputs, output: dict[str, Any], display_id: str | None) -> None:
        if outputs.full:
            return
        size = _size(output)
        if outputs.chars + size > MAX_CELL_OUTPUT_CHARS:
            outputs.full = True
            output = {
                "output_type": "stream",
                "name": "stderr",
                "text": f"[rewyn: output past {MAX_CELL_OUTPUT_CHARS:,} characters is left out "
                "of the notebook]\n",
            }
            size = 0
        outputs.chars += size
        found = self._find(outputs.cell_id)
        if found is None:
            return
        youtputs = found[1]["outputs"]
        last = outputs.kept[-1] if outputs.kept else None
        with self._edit():
            if (
                output["output_type"] == "stream"
                and last is not None
                and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")
                and len(youtputs) == len(outputs.kept)
            ):
                last["text"] += output["text"]
                ytext = youtputs[len(youtputs) - 1]["text"]
                ytext += output["text"]
                return
            outputs.kept.append(output)
            if display_id is not None:
                outputs.displays.setdefault(display_id, []).append(len(outputs.kept) - 1)
            youtputs.append(self._doc()._create_youtputs([output])[0])

    def _update_display(
        self, outputs: CellOutputs, display_id: str, output: dict[str, Any]
    ) -> None:
        found = self._find(outputs.cell_id)
        if found is None:
            return
        youtputs = found[1]["outputs"]
        for index in outputs.displays.get(display_id, []):
            if index < len(outputs.kept) and index < len(youtputs):
                kept = outputs.kept[index]
                output = {**output, "output_type": kept["output_type"]}
                if "execution_count" in kept:
                    output["execution_count"] = kept["execution_count"]
                outputs.kept[index] = output
                with self._edit():
                    youtputs[index] = self._doc()._create_youtputs([output])[0]

    async def wait_for_change(self, timeout: float) -> None:
        """Until the cells change, or ``timeout`` seconds."""
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout)


def _blank(cell: dict[str, Any]) -> bool:
    """A cell the person left empty: no source, no outputs, no agent's."""
    source = cell.get("source")
    text = "".join(source) if isinstance(source, list) else str(source or "")
    return (
        not text.strip()
        and not cell.get("outputs")
        and cell.get("cell_type") in ("code", "markdown", "raw")
        and agent_mark(cell.get("metadata")) is None
    )


def _as_display(msg: dict[str, Any]) -> dict[str, Any]:
    return {**msg, "header": {**(msg.get("header") or {}), "msg_type": "display_data"}}


def _size(output: dict[str, Any]) -> int:
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    data = output.get("data") or {}
    size = sum(len(value) if isinstance(value, str) else len(str(value)) for value in data.values())
    if output.get("output_type") == "error":
        size += sum(len(line) for line in output.get("traceback", []))
    return size + 64


def mark_of(cell: dict[str, Any]) -> AgentMark | None:
    return agent_mark(cell.get("metadata"))
