"""Which comm messages pass between the sandbox's code and the frontend: ipywidgets', checked.

A comm is a channel between code in the kernel and a JavaScript model in the page. The page
runs whatever model module a comm names, and a widget's state can carry HTML the page puts in
as it is (``HTML``, ``HTMLMath``, descriptions with ``description_allow_html``), math MathJax
typesets, a URL an ``Image`` loads (``format='url'``) and CSS its layout and style apply. So the
kernel relays the comms of ipywidgets' own models only, and checks what they carry:

- targets ``jupyter.widget``, ``jupyter.widget.control`` and ``jupyter.widget.version``, and
  models and views of ``@jupyter-widgets/base``, ``controls`` and ``output`` (``MODULES``) and
  ipympl's figures (``jupyter-matplotlib``, every trait and message checked in ``figures``);
  anything else is refused, and the cell says so once, naming why for the libraries people use
  (``REFUSED``: anywidget's models are JavaScript, which the page would run);
- the states the control comm sends back when a page (re)loads the widgets (``update_states``:
  the page makes models of them, or sets an open model's state, as it is) checked as the same
  models' are when they open, and only for models already relayed;
- HTML through the same sanitiser as ``text/html`` (``safety.clean_html``), math through the
  same TeX rules, CSS values of layouts and styles through ``css.safe_value``, an ``Output``
  widget's outputs through ``filter_bundle``; no media loaded from a URL; no class of
  JupyterLab's own on a widget;
- at most ``MAX_BUFFERS`` binary buffers of ``MAX_BUFFER_BYTES`` in all per message;
- from the frontend (the person's browser): messages for the comms the code opened, and comms
  opened on the widget targets, nothing else.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rewyn_kernel.kernel import css, figures, tex
from rewyn_kernel.kernel.safety import clean_html, filter_bundle
from rewyn_kernel.runtime.sandbox import CommFrame

__all__ = [
    "MAX_BUFFERS",
    "MAX_BUFFER_BYTES",
    "MODULES",
    "REFUSED",
    "TARGETS",
    "Relayed",
    "WidgetPolicy",
]

TARGETS = frozenset({"jupyter.widget", "jupyter.widget.control", "jupyter.widget.version"})
MODULES = frozenset(
    {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/output"}
)
REFUSED = {
    "anywidget": (
        "an anywidget widget{name}: its model is JavaScript (_esm) the page would run, which a "
        "sandbox cannot relay; shown as its text"
    ),
    "bqplot": (
        "a bqplot figure: its models carry CSS styles, HTML tooltips and images the page would "
        "apply and load, which the kernel does not check yet; shown as its text (matplotlib "
        "with %matplotlib widget, or plotly's fig.show(), draw interactive figures here)"
    ),
    "bqscales": "",  # (bqplot's scales: the figure's note says it)
    "jupyter-leaflet": (
        "an ipyleaflet map: the page would fetch its tiles from the servers it names; shown as "
        "its text"
    ),
}
"""Widget libraries people use that are not relayed, and why (a note said once per cell)."""
MAX_BUFFERS = 64
MAX_BUFFER_BYTES = 16 * 1024 * 1024
MAX_COMMS = 10_000
"""Comms one kernel keeps track of; past it the oldest are forgotten (their widgets stop)."""
HTML_TRAITS = {"HTMLModel": ("value", "placeholder"), "HTMLMathModel": ("value", "placeholder")}
"""The traits a model's view puts in the page as HTML."""
TYPESET_TRAITS = ("value", "description", "placeholder")
"""Text MathJax typesets in a widget (a Label's value, any description)."""
URL_MEDIA = frozenset({"ImageModel", "VideoModel", "AudioModel"})
"""Models whose ``format='url'`` makes the page load what their value names."""
_COMM_ID = re.compile(r"[\w.-]{1,128}")
_APP_CLASS_PREFIXES = ("jp-", "lm-", "p-", "mod-")
_TEX_REMOVED = "[rewyn: math removed: it asked MathJax to style itself or load]"


@dataclass
class _Comm:
    target: str
    model: str = ""
    module: str = ""
    """``figures.MODULE`` for ipympl's models, '' for ipywidgets' own."""
    opened_by_code: bool = True
    description: str = ""
    allow_html: bool = False


@dataclass(frozen=True)
class Relayed:
    """A comm message that may go to the frontend, as the kernel sends it."""

    msg_type: str
    content: dict[str, Any]
    metadata: dict[str, Any]
    buffers: list[bytes | memoryview[bytes]]


@dataclass
class WidgetPolicy:
    """The comms of one kernel: what the code opened, and what may pass each way."""

    comms: dict[str, _Comm] = field(default_factory=dict)
    figures: figures.Figures = field(default_factory=figures.Figures)

    def models(self) -> set[str]:
        """The ids of the widget models relayed so far (what a widget view may name)."""
        return {comm_id for comm_id, comm in self.comms.items() if comm.model}

    def info(self, target: str | None) -> dict[str, dict[str, str]]:
        """What ``comm_info_request`` answers: the open comms (of ``target``)."""
        return {
            comm_id: {"target_name": comm.target}
            for comm_id, comm in self.comms.items()
            if target is None or comm.target == target
        }

    # -- from the code ---------------------------------------------------------------------

    def outgoing(self, frame: CommFrame) -> Relayed | str:
        """The message to relay of one the code sent, or why it is refused."""
        content = frame.content
        comm_id = content.get("comm_id")
        if not isinstance(comm_id, str) or not _COMM_ID.fullmatch(comm_id):
            return "a comm message without a valid comm id"
        buffers = _buffers(frame.buffers)
        if isinstance(buffers, str):
            return buffers
        data = content.get("data")
        data = dict(data) if isinstance(data, Mapping) else {}
        if frame.msg_type == "comm_open":
            return self._open(comm_id, content, data, frame.metadata, buffers)
        comm = self.comms.get(comm_id)
        if comm is None:
            return ""  # (a comm refused when it opened, or closed: nothing to say again)
        if frame.msg_type == "comm_close":
            self.comms.pop(comm_id, None)
            return Relayed("comm_close", {"comm_id": comm_id, "data": {}}, {}, [])
        method = data.get("method")
        if method in ("update", "echo_update"):
            if comm.module and (buffers or data.get("buffer_paths")):
                return "a matplotlib widget's state with buffers (ipympl sends none)"
            state = data.get("state")
            checked = self._state(comm, state if isinstance(state, Mapping) else {})
            if isinstance(checked, str):
                return checked
            data["state"] = checked
        elif method == "update_states" and comm.target == "jupyter.widget.control":
            return self._states(comm_id, data, frame.metadata, buffers)
        elif comm.module:
            if method != "custom":
                return f"a matplotlib widget's {str(method)[:40]!r} message"
            sent = data.get("content")
            custom = self.figures.custom(
                comm.model, sent if isinstance(sent, Mapping) else {}, buffers
            )
            if isinstance(custom, str):
                return custom
            data = {"method": "custom", "content": custom}  # (nothing else of the message)
        message = {"comm_id": comm_id, "data": data}
        return Relayed("comm_msg", message, _metadata(frame.metadata), buffers)

    def _open(
        self,
        comm_id: str,
        content: Mapping[str, Any],
        data: dict[str, Any],
        metadata: Mapping[str, Any],
        buffers: list[bytes | memoryview[bytes]],
    ) -> Relayed | str:
        target = content.get("target_name")
        if target not in TARGETS:
            return f"a comm to {str(target)[:80]!r} (only ipywidgets' own targets are relayed)"
        comm = _Comm(str(target))
        if target == "jupyter.widget":
            state = data.get("state")
            state = state if isinstance(state, Mapping) else {}
            module = state.get("_model_module")
            if module == figures.MODULE and state.get("_view_module") == module:
                comm.module = figures.MODULE
            else:
                refused = _refused_module(state)
                if refused is not None:
                    return refused
            comm.model = str(state.get("_model_name", ""))[:128] or "?"
            checked = self._state(comm, state)
            if isinstance(checked, str):
                return checked
            data["state"] = checked
        if len(self.comms) >= MAX_COMMS:
            self.comms.pop(next(iter(self.comms)))
        self.comms[comm_id] = comm
        message = {"comm_id": comm_id, "target_name": target, "data": data}
        target_module = content.get("target_module")
        if target_module is None or isinstance(target_module, str):
            message["target_module"] = target_module
        return Relayed("comm_open", message, _metadata(metadata), buffers)

    def _states(
        self,
        comm_id: str,
        data: Mapping[str, Any],
        metadata: Mapping[str, Any],
        buffers: list[bytes | memoryview[bytes]],
    ) -> Relayed | str:
        """The control comm's answer to a page that (re)loads the widgets: each model's state
        checked as its own messages are, for the models relayed only (the page makes a model
        of any other id, and sets an open model's state as it is)."""
        states = data.get("states")
        states = states if isinstance(states, Mapping) else {}
        kept: dict[str, Any] = {}
        for model_id, entry in states.items():
            comm = self.comms.get(model_id) if isinstance(model_id, str) else None
            if comm is None or not comm.model or not isinstance(entry, Mapping):
                continue
            module = figures.MODULE if comm.module else entry.get("model_module")
            if entry.get("model_name") != comm.model or (
                module != entry.get("model_module") or module not in (*MODULES, figures.MODULE)
            ):
                continue
            state = entry.get("state")
            checked = self._state(comm, state if isinstance(state, Mapping) else {})
            if isinstance(checked, str):
                continue
            version = entry.get("model_module_version")
            version = version if isinstance(version, str) and len(version) <= 32 else ""
            kept[model_id] = {
                "model_name": comm.model,
                "model_module": module,
                "model_module_version": version,
                "state": checked,
            }
        paths, kept_buffers = [], []
        raw_paths = data.get("buffer_paths")
        raw_paths = raw_paths if isinstance(raw_paths, list) else []
        for path, buffer in zip(raw_paths[: len(buffers)], buffers, strict=False):
            # (a buffer stands for a value of a model kept; ipympl's models have none)
            if (
                isinstance(path, list)
                and path
                and path[0] in kept
                and not self.comms[path[0]].module
            ):
                paths.append(path)
                kept_buffers.append(buffer)
        message = {"method": "update_states", "states": kept, "buffer_paths": paths}
        return Relayed(
            "comm_msg",
            {"comm_id": comm_id, "data": message},
            _metadata(metadata),
            kept_buffers,
        )

    def _state(self, comm: _Comm, state: Mapping[str, Any]) -> dict[str, Any] | str:
        """The state of a widget, checked trait by trait; or why it is refused."""
        if comm.module:
            figure = self.figures.state(comm.model, state, self.models())
            if isinstance(figure, dict) and "_dom_classes" in figure:
                figure["_dom_classes"] = self._trait(comm, "_dom_classes", figure["_dom_classes"])
            return figure
        checked: dict[str, Any] = {}
        for key, value in state.items():
            if key in ("_model_module", "_view_module", "_model_name", "_view_name"):
                if comm.model and key in ("_model_name",) and value != comm.model:
                    return "a widget that changed its model"
                if key.endswith("_module") and value is not None and value not in MODULES:
                    return f"a widget that moved to {str(value)[:80]!r}"
            if key == "format" and comm.model in URL_MEDIA and value == "url":
                kind = comm.model[:-5]
                article = "an" if kind[:1] in "AEIOU" else "a"
                return f"{article} {kind} widget that would load its value from a URL"
            checked[key] = self._trait(comm, key, value)
        if "description_allow_html" in checked:
            comm.allow_html = checked["description_allow_html"] is True
            if comm.allow_html and "description" not in checked:
                checked["description"] = comm.description  # (sent as text: now shown as HTML)
        if isinstance(checked.get("description"), str):
            comm.description = checked["description"]
            if comm.allow_html:
                checked["description"] = clean_html(comm.description)
        return checked

    def _trait(self, comm: _Comm, key: str, value: Any) -> Any:
        if key == "_dom_classes" and isinstance(value, list):
            return [
                name
                for name in value
                if isinstance(name, str) and not name.lower().startswith(_APP_CLASS_PREFIXES)
            ]
        if comm.model == "OutputModel" and key == "outputs" and isinstance(value, list):
            return [item for item in map(self._output, value[:1000]) if item is not None]
        if not isinstance(value, str):
            return value
        if key in HTML_TRAITS.get(comm.model, ()):
            return clean_html(value)
        if comm.model == "LayoutModel" or comm.model.endswith("StyleModel"):
            if key.startswith("_"):
                return value
            return value if css.safe_value(value, no_negative="margin" in key) else None
        if key in TYPESET_TRAITS and "$" in value and tex.refusal(value) is not None:
            return _TEX_REMOVED
        return value

    def _output(self, item: object) -> dict[str, Any] | None:
        """One output an Output widget holds in its state, as a cell's would be filtered."""
        if not isinstance(item, Mapping):
            return None
        kind = item.get("output_type")
        if kind == "stream":
            name = item.get("name") if item.get("name") in ("stdout", "stderr") else "stdout"
            text = item.get("text")
            return {"output_type": "stream", "name": name, "text": str(text)[: 1 << 20]}
        if kind in ("display_data", "execute_result"):
            data, metadata = item.get("data"), item.get("metadata")
            filtered = filter_bundle(
                data if isinstance(data, Mapping) else {},
                metadata if isinstance(metadata, Mapping) else {},
                widgets=self.models(),
            )
            output = {"output_type": kind, "data": filtered.data, "metadata": filtered.metadata}
            if kind == "execute_result":
                count = item.get("execution_count")
                output["execution_count"] = count if isinstance(count, int) else None
            return output
        if kind == "error":
            traceback = item.get("traceback")
            lines = traceback if isinstance(traceback, list) else []
            return {
                "output_type": "error",
                "ename": str(item.get("ename", ""))[:200],
                "evalue": str(item.get("evalue", ""))[:65536],
                "traceback": [str(line)[:16384] for line in lines[:200]],
            }
        return None

    # -- from the frontend -----------------------------------------------------------------

    def incoming(self, msg_type: str, message: Mapping[str, Any]) -> dict[str, Any] | None:
        """What to deliver to the code of a comm message from the frontend, or None."""
        content = message.get("content")
        content = content if isinstance(content, Mapping) else {}
        comm_id = content.get("comm_id")
        if not isinstance(comm_id, str) or not _COMM_ID.fullmatch(comm_id):
            return None
        if msg_type == "comm_open":
            target = content.get("target_name")
            if target not in TARGETS or comm_id in self.comms:
                return None
            if len(self.comms) >= MAX_COMMS:
                self.comms.pop(next(iter(self.comms)))
            self.comms[comm_id] = _Comm(str(target), opened_by_code=False)
        elif comm_id not in self.comms:
            return None
        elif msg_type == "comm_close":
            self.comms.pop(comm_id, None)
        elif self.comms[comm_id].module:
            data = content.get("data")
            self.figures.asked(self.comms[comm_id].model, data if isinstance(data, Mapping) else {})
        header = message.get("header")
        msg_id = header.get("msg_id") if isinstance(header, Mapping) else None
        buffers = message.get("buffers") or []
        return {
            "msg_type": msg_type,
            "msg_id": str(msg_id or "")[:256],
            "content": dict(content),
            "metadata": dict(message.get("metadata") or {}),
            "buffers": [base64.b64encode(bytes(buffer)).decode("ascii") for buffer in buffers],
        }


def _refused_module(state: Mapping[str, Any]) -> str | None:
    """Why a widget of another library than ipywidgets' is refused, or None for ipywidgets'."""
    for key in ("_model_module", "_view_module"):
        module = state.get(key)
        if module in MODULES or (key == "_view_module" and module is None):
            continue
        reason = REFUSED.get(module) if isinstance(module, str) else None
        if reason is not None:
            name = state.get("_anywidget_id")
            named = f" ({name[:80]})" if isinstance(name, str) and name else ""
            return reason.format(name=named)
        return (
            f"a widget of {str(module)[:80]!r}: only the widgets of @jupyter-widgets/base, "
            "controls and output, and ipympl's figures, are relayed"
        )
    return None


def _buffers(encoded: list[str]) -> list[bytes | memoryview[bytes]] | str:
    if len(encoded) > MAX_BUFFERS:
        return f"a comm message with more than {MAX_BUFFERS} buffers"
    if sum(len(item) for item in encoded) * 3 // 4 > MAX_BUFFER_BYTES:
        return f"a comm message with more than {MAX_BUFFER_BYTES:,} bytes of buffers"
    try:
        return [base64.b64decode(item, validate=True) for item in encoded]
    except (binascii.Error, ValueError):
        return "a comm message whose buffers are not base64"


def _metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A comm message's metadata: ipywidgets sends its protocol version, nothing else."""
    version = metadata.get("version")
    return {"version": version} if isinstance(version, str) and len(version) <= 32 else {}
