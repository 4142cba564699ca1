"""ipympl's interactive figures (``jupyter-matplotlib``): every trait and message checked.

An ipympl figure is two widget models in the page, ``MPLCanvasModel`` and ``ToolbarModel``
(ipympl's ``src/mpl_widget.ts`` and ``src/toolbar_widget.ts``, jupyter-matplotlib 0.12). The
code in the sandbox draws with matplotlib and sends PNG frames; the page sends mouse, key and
toolbar events back as comm messages. What of it could make the page fetch or run anything:

- ``_data_url`` becomes an ``<img>``'s ``src`` when the model is made: only a ``data:`` URL of a
  PNG or JPEG passes (ipympl itself sends the bare base64 of a PNG before the page says it is
  there; that is given its ``data:image/png;base64,`` prefix);
- ``_cursor`` becomes a CSS ``cursor``, which may name an image by ``url()``: only cursor
  keywords pass;
- a toolbar item's icon becomes a class (``fa-`` and the name): only ``[a-z0-9-]`` names pass;
- a ``save`` message makes the page download its buffer as a file: relayed only in answer to a
  click on the toolbar's download button (one per click), and only in a figure format;
- a ``binary`` message is an image frame (``Blob`` of type PNG in an ``<img>``, which can
  neither run script nor fetch): one buffer, a PNG's signature first.

The rest is text the page puts in with ``textContent`` or ``title`` (the figure's label, its
footer message, tooltips), booleans, numbers and names from fixed lists. Every trait is checked
against its kind; a trait ipympl does not have is not relayed; a message of a type the page has
no handler for is not relayed; a value of the wrong kind refuses the whole message, with a note.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MODULE", "Figures"]

MODULE = "jupyter-matplotlib"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_TEXT = 4096
"""Characters of a label, message or tooltip (a figure's footer shows the pointer's x and y)."""
MAX_SIZE = 100_000.0
"""Pixels of a figure's side, and of a rubber band's coordinates, either way."""
MAX_TOOL_ITEMS = 32
CURSORS = frozenset(
    {
        *("auto", "default", "none", "pointer", "crosshair", "move", "wait", "progress"),
        *("text", "grab", "grabbing", "not-allowed", "help", "cell", "zoom-in", "zoom-out"),
        *("ew-resize", "ns-resize", "nesw-resize", "nwse-resize", "nw-resize", "se-resize"),
        *("col-resize", "row-resize", "all-scroll", "context-menu", "copy", "alias"),
    }
)
"""CSS cursor keywords (no ``url()``: the page would fetch the image it names)."""
SAVE_FORMATS = frozenset(
    {"png", "jpg", "jpeg", "pdf", "svg", "svgz", "eps", "ps", "tif", "tiff", "webp"}
)
"""The formats matplotlib saves a figure in that a download may carry (ipympl's page maps each
to its MIME type; the file is the figure's, named by its label)."""
_DATA_URL = re.compile(r"data:image/(?:png|jpeg);base64,([A-Za-z0-9+/]*={0,2})")
_BARE_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_MODEL_REF = re.compile(r"IPY_MODEL_([\w.-]{1,128})")
_ICON = re.compile(r"[a-z0-9-]{0,40}")
_METHOD = re.compile(r"\w{0,40}")
_VERSION = re.compile(r"[\w.^~<>=*| -]{0,32}")

Check = Callable[[object], object]
"""A trait's check: its value as relayed, or ``_BAD`` when the value is not of its kind."""


class _Bad:
    """A value a trait does not take (a sentinel: None is a value some traits take)."""


_BAD = _Bad()


def _one_of(*values: object) -> Check:
    def check(value: object) -> object:
        # (bool is an int, and True == 1: so the types are compared too)
        return value if any(type(value) is type(v) and value == v for v in values) else _BAD

    return check


def _bool(value: object) -> object:
    return value if isinstance(value, bool) else _BAD


def _number(low: float, high: float) -> Check:
    def check(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return _BAD
        return value if math.isfinite(value) and low <= value <= high else _BAD

    return check


def _text(value: object) -> object:
    return value[:MAX_TEXT] if isinstance(value, str) else _BAD


def _text_or_none(value: object) -> object:
    return None if value is None else _text(value)


def _version(value: object) -> object:
    return value if isinstance(value, str) and _VERSION.fullmatch(value) else _BAD


def _cursor(value: object) -> object:
    return value if isinstance(value, str) and value in CURSORS else _BAD


def _data_url(value: object) -> object:
    """A ``data:`` URL of a PNG or JPEG (ipympl's bare base64 PNG made one), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        return _BAD
    if _BARE_BASE64.fullmatch(value):
        value = "data:image/png;base64," + value
    match = _DATA_URL.fullmatch(value)
    if match is None:
        return _BAD
    try:
        base64.b64decode(match.group(1), validate=True)
    except (binascii.Error, ValueError):
        return _BAD
    return value


def _size(value: object) -> object:
    side = _number(0, MAX_SIZE)
    if not isinstance(value, list | tuple) or len(value) != 2:
        return _BAD
    return list(value) if all(side(v) is not _BAD for v in value) else _BAD


def _classes(value: object) -> object:
    """``_dom_classes``: names (``widgets.py`` then drops those of JupyterLab's own)."""
    if not isinstance(value, list | tuple) or len(value) > 64:
        return _BAD
    return (
        list(value) if all(isinstance(name, str) and len(name) <= 128 for name in value) else _BAD
    )


def _tool_item(item: object) -> list[str | None] | None:
    """One toolbar button: (text, tooltip, icon, method); its text and tooltip are put in as a
    title, its icon as a class (``fa-`` and the name), its method sent back when clicked."""
    if not isinstance(item, list | tuple) or len(item) != 4:
        return None
    if any(part is not None and not isinstance(part, str) for part in item):
        return None
    text, tooltip, icon, method = item
    if not (_ICON.fullmatch(icon or "") and _METHOD.fullmatch(method or "")):
        return None
    return [
        None if text is None else text[:MAX_TEXT],
        None if tooltip is None else tooltip[:MAX_TEXT],
        icon,
        method,
    ]


def _tool_items(value: object) -> object:
    if not isinstance(value, list | tuple) or len(value) > MAX_TOOL_ITEMS:
        return _BAD
    items = [_tool_item(item) for item in value]
    return _BAD if None in items else items


_REF = object()
"""A reference to another model (``IPY_MODEL_<id>``): checked against the models relayed."""
_DOM_WIDGET: dict[str, Check | object] = {
    "_model_module_version": _version,
    "_view_module_version": _version,
    "_view_count": _one_of(None),
    "_dom_classes": _classes,
    "layout": _REF,
    "tabbable": _one_of(None, True, False),
    "tooltip": _text_or_none,
}
"""What ipywidgets' ``DOMWidget`` adds to every model's state."""
TRAITS: dict[str, dict[str, Check | object]] = {
    "MPLCanvasModel": {
        **_DOM_WIDGET,
        "_cursor": _cursor,
        "_data_url": _data_url,
        "_figure_label": _text,
        "_message": _text,
        "_image_mode": _one_of("full", "diff"),
        "_rubberband_x": _number(-MAX_SIZE, MAX_SIZE),
        "_rubberband_y": _number(-MAX_SIZE, MAX_SIZE),
        "_rubberband_width": _number(-MAX_SIZE, MAX_SIZE),
        "_rubberband_height": _number(-MAX_SIZE, MAX_SIZE),
        "_size": _size,
        "capture_scroll": _bool,
        "footer_visible": _bool,
        "header_visible": _bool,
        "resizable": _bool,
        "pan_zoom_throttle": _number(0, 10_000),
        "toolbar": _REF,
        "toolbar_position": _one_of("top", "bottom", "left", "right"),
        "toolbar_visible": _one_of("visible", "hidden", "fade-in-fade-out", True, False),
    },
    "ToolbarModel": {
        **_DOM_WIDGET,
        "_current_action": _one_of("", "pan", "zoom"),
        "button_style": _one_of("", "primary", "success", "info", "warning", "danger"),
        "collapsed": _bool,
        "orientation": _one_of("horizontal", "vertical"),
        "position": _one_of("top", "bottom", "left", "right"),
        "toolitems": _tool_items,
    },
}
"""Each model's traits and their checks (ipympl 0.10's Python side, 0.12's page)."""
VIEWS = {"MPLCanvasModel": "MPLCanvasView", "ToolbarModel": "ToolbarView"}
_COORDINATE = _number(-MAX_SIZE, MAX_SIZE)
MESSAGES: dict[str, dict[str, Check]] = {
    "draw": {},
    "binary": {},
    "resize": {"size": _size, "forward": _bool},
    "rubberband": {"x0": _COORDINATE, "y0": _COORDINATE, "x1": _COORDINATE, "y1": _COORDINATE},
    "history_buttons": {"Back": _bool, "Forward": _bool},
    "navigate_mode": {"mode": _one_of("PAN", "ZOOM", "NONE", "")},
    "capture_scroll": {"capture_scroll": _bool},
    "save": {"format": _one_of(*SAVE_FORMATS)},
}
"""The canvas's messages to the page, by type, and the checks of their fields (matplotlib's
``backend_webagg_core`` sends them; the page calls its ``handle_<type>``)."""
QUIET = frozenset({"refresh", "ack"})
"""Types matplotlib sends that the page has no handler for: not relayed, nothing said."""


@dataclass
class Figures:
    """The ipympl models of one kernel: their checks, and the downloads the person asked for."""

    saves_asked: int = 0

    def state(
        self, model: str, state: Mapping[str, Any], models: Container[str]
    ) -> dict[str, Any] | str:
        """``state`` of a ``model`` as relayed (traits it does not have left out), or why not.

        ``models``: the ids of the models relayed so far, which a reference may name.
        """
        traits = TRAITS.get(model)
        if traits is None:
            return f"a matplotlib widget of model {model[:80]!r}, which ipympl does not have"
        checked: dict[str, Any] = {}
        for key, value in state.items():
            if key in ("_model_module", "_view_module"):
                if value != MODULE:
                    return "a matplotlib widget that changed its module"
                checked[key] = value
                continue
            if key in ("_model_name", "_view_name"):
                if value != (model if key == "_model_name" else VIEWS[model]):
                    return "a matplotlib widget that changed its model or view"
                checked[key] = value
                continue
            check = traits.get(key)
            if check is None:
                continue  # (no such trait: the page keeps its default)
            if check is _REF:
                good = value is None or (
                    isinstance(value, str)
                    and (ref := _MODEL_REF.fullmatch(value)) is not None
                    and ref.group(1) in models
                )
                if not good:
                    return f"a matplotlib widget whose {key!r} names no widget relayed"
                checked[key] = value
                continue
            assert callable(check)
            result = check(value)
            if result is _BAD:
                return f"a matplotlib widget whose {key!r} is not one of its values"
            checked[key] = result
        return checked

    def custom(
        self, model: str, content: Mapping[str, Any], buffers: list[bytes | memoryview[bytes]]
    ) -> dict[str, Any] | str:
        """A canvas's message to the page (``{"data": "<JSON>"}``) as relayed, or why not
        ('' for one the page would ignore: nothing to say)."""
        if model != "MPLCanvasModel":
            return f"a message to a matplotlib {model[:80]!r}, which takes none"
        data = content.get("data")
        try:
            message = json.loads(data) if isinstance(data, str) and len(data) < 65536 else None
        except ValueError:
            message = None
        kind = message.get("type") if isinstance(message, dict) else None
        if not isinstance(kind, str) or not isinstance(message, dict):
            return "a matplotlib figure's message that is not one"
        if kind in QUIET:
            return ""
        fields = MESSAGES.get(kind)
        if fields is None:
            return f"a matplotlib figure's {kind[:40]!r} message, which ipympl does not send"
        relayed: dict[str, Any] = {"type": kind}
        for key, check in fields.items():
            result = check(message.get(key))
            if result is _BAD:
                return f"a matplotlib figure's {kind!r} message whose {key!r} is not one"
            relayed[key] = result
        if kind == "binary":
            if len(buffers) != 1 or bytes(buffers[0][:8]) != PNG_SIGNATURE:
                return "a matplotlib figure's frame that is not one PNG image"
        elif kind == "save":
            if self.saves_asked <= 0:
                return "a figure's download that was not asked for by the toolbar's button"
            if len(buffers) > 1:
                return "a matplotlib figure's download of more than one file"
            self.saves_asked -= 1
        elif buffers:
            return f"a matplotlib figure's {kind!r} message with buffers"
        return {"data": json.dumps(relayed)}

    def asked(self, model: str, data: Mapping[str, Any]) -> None:
        """Note what the person asked of a figure from the page: a click on the download
        button lets one ``save`` through."""
        content = data.get("content")
        if (
            model == "ToolbarModel"
            and data.get("method") == "custom"
            and isinstance(content, Mapping)
            and content.get("type") == "toolbar_button"
            and content.get("name") in ("save_figure", "download")
        ):
            self.saves_asked = min(self.saves_asked + 1, 8)
