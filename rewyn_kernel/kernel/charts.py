"""Chart output: plotly figures and Vega / Vega-Lite specs, kept as data that fetches nothing.

A chart's MIME value is JSON that a renderer in the page (plotly.js through ``jupyterlab-plotly``;
vega-embed through JupyterLab's vega5 extension) turns into SVG or canvas. The JSON is checked as
``application/json`` is (size, depth), and then for what the renderer would fetch, link to or
run, by what each renderer does with it:

plotly (``application/vnd.plotly.v1+json``, plotly.js 4 in jupyterlab-plotly 7):
- text anywhere (titles, hover templates, ``text``, ``customdata``, tick labels...) is plotly's
  subset of HTML: ``<a href>`` is a link (its tag is removed, its text kept); ``style=`` goes
  through ``css.clean_declarations`` (no ``url(``); other tags show as text. A ``<`` or ``>`` that
  is not one of the kept tags is escaped, so values substituted into a template cannot put tags
  together;
- ``source`` (``layout.images``, the ``image`` trace, in any template, frame or button's args)
  is kept only as an inline PNG, JPEG or GIF ``data:`` URL: anything else the browser fetches;
- maps are refused: plotly.js fetches the base map of ``scattergeo``/``choropleth`` (topojson
  from cdn.plot.ly) and the tiles of the ``*mapbox``/``*map`` traces, and a map style may name
  any server; a trace type plotly.js has outside the list below is refused as well;
- ``config`` keeps display options only (no ``topojsonURL``, no ``plotlyServerURL`` or links to
  Chart Studio) and turns off ``typesetMath``: MathJax would typeset ``$...$`` in any text.

Vega-Lite and Vega (``application/vnd.vegalite.v3+json`` to ``v6``, ``application/vnd.vega.v5``
and ``v6``; vega-embed with a loader that fetches relative URLs with the person's cookies):
- refused: a ``url`` anywhere (remote data, an image mark's or channel's URL), any CSS
  ``url(`` (a cursor), and expressions (``expr``, ``calculate``, ``signal``, string ``filter``
  and ``test``...): Vega compiles them to JavaScript in the page, and its expression sandbox has
  been escaped before; a chart without them (Altair's usual encodings, selections) is kept;
- removed: ``href`` (a link on click), ``usermeta`` (vega-embed takes its ``embedOptions``,
  a loader and HTML for its source view, from there), a binding's ``element`` (a selector of the
  page to put inputs into), and ``$schema`` unless it is one of vega.github.io's (vega-embed
  only reads the version from it: nothing loads it).

GeoJSON (``application/geo+json``) is not relayed: its only renderer draws it over map tiles
it fetches from OpenStreetMap, and loads marker icons from unpkg.com.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rewyn_kernel.kernel import css

__all__ = ["MAX_DEPTH", "PLOTLY_MIME", "Refused", "is_chart", "filter_chart"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
_VEGA_MIME = re.compile(r"application/vnd\.(?:vegalite\.v[3-6]|vega\.v[56])[+.]json")
MAX_DEPTH = 64
"""A chart nested deeper than this (objects and arrays) is refused."""


@dataclass(frozen=True)
class Refused:
    """A chart that cannot be shown as it is, and why (said in the drop note)."""

    reason: str


def is_chart(mime: str) -> bool:
    return mime == PLOTLY_MIME or _VEGA_MIME.fullmatch(mime) is not None


def filter_chart(mime: str, value: Any, max_bytes: int) -> Any:
    """The chart to relay for ``mime`` (changed where it linked or fetched), or ``Refused``."""
    if not isinstance(value, dict):
        return Refused("not a JSON object")
    if _too_deep(value):
        return Refused(f"nested deeper than {MAX_DEPTH}")
    try:
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return Refused("not JSON")
    if size > max_bytes:
        return Refused("too large")
    try:
        return _plotly(value) if mime == PLOTLY_MIME else _Vega().spec(value)
    except _Refusal as refusal:
        return Refused(str(refusal))


class _Refusal(Exception):
    pass


def _too_deep(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


# -- CSS ``url(`` in any spelling (escapes, comments, whitespace) ---------------------------

_CSS_ESCAPE = re.compile(r"\\([0-9a-fA-F]{1,6})\s?|\\(.)", re.DOTALL)
_CSS_NOISE = re.compile(r"[\x00-\x20]+|/\*.*?\*/", re.DOTALL)
_CSS_FETCH = re.compile(r"url\(|image-set\(|image\(|src\(")


def _css_fetches(text: str) -> bool:
    if "(" not in text:
        return False

    def unescape(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(2)
        code = int(match.group(1), 16)
        return chr(code) if 0 < code <= 0x10FFFF else "\ufffd"

    bare = _CSS_NOISE.sub("", _CSS_ESCAPE.sub(unescape, text)).lower()
    return _CSS_FETCH.search(bare) is not None


# -- plotly ----------------------------------------------------------------------------------

# plotly.js's trace types (plotly.js 2 to 4) that draw from the figure's data alone.
_PLOTLY_TRACES_NAMES = (
    "bar barpolar box candlestick carpet cone contour contourcarpet funnel funnelarea heatmap "
    "heatmapgl histogram histogram2d histogram2dcontour icicle image indicator isosurface "
    "mesh3d ohlc parcats parcoords pie pointcloud quiver sankey scatter scatter3d scattercarpet "
    "scattergl scatterpolar scatterpolargl scattersmith scatterternary splom streamtube "
    "sunburst surface table treemap violin volume waterfall"
)
_PLOTLY_TRACES = frozenset(_PLOTLY_TRACES_NAMES.split())
_PLOTLY_MAPS_NAMES = (
    "scattergeo choropleth scattermapbox choroplethmapbox densitymapbox scattermap "
    "choroplethmap densitymap"
)
_PLOTLY_MAPS = frozenset(_PLOTLY_MAPS_NAMES.split())
_MAP_REASON = "a map, whose base map or tiles plotly.js would fetch"
# What plotly.js renders of the HTML in its text (src/lib/svg_text_utils.js), less <a>.
_PLOTLY_TAGS = frozenset({"br", "b", "i", "em", "sup", "sub", "s", "u", "span", "extra"})
_TAG = re.compile(r"<[^<>]*>")
_TAG_PARTS = re.compile(r"<(/?)([^ >]*)(\s+(.*))?>", re.IGNORECASE | re.DOTALL)
_STYLE = re.compile(r"""(^|[\s"'])style\s*=\s*("([^"]*);?"|'([^']*);?')""", re.IGNORECASE)
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*")
# config: how the plot looks and which buttons it has; nothing that names a server.
_PLOTLY_CONFIG_NAMES = (
    "autosizable displayModeBar displaylogo doubleClick doubleClickDelay editable fillFrame "
    "frameMargins modeBarButtonsToRemove plotGlPixelRatio responsive scrollZoom "
    "showAxisDragHandles showAxisRangeEntryBoxes showTips staticPlot toImageButtonOptions "
    "watermark"
)
_PLOTLY_CONFIG = frozenset(_PLOTLY_CONFIG_NAMES.split())


def _plotly(figure: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    data = figure.get("data", [])
    if not isinstance(data, list):
        raise _Refusal("its data is not a list")
    kept["data"] = [_trace(trace) for trace in data]
    if isinstance(figure.get("layout"), dict):
        kept["layout"] = _plotly_value(figure["layout"])
    else:
        kept["layout"] = {}
    if isinstance(figure.get("frames"), list):
        frames = []
        for frame in figure["frames"]:
            if not isinstance(frame, dict):
                continue
            traces = frame.get("data")
            checked = [_trace(trace) for trace in traces] if isinstance(traces, list) else None
            frames.append(_plotly_value(frame) | ({} if checked is None else {"data": checked}))
        kept["frames"] = frames
    config = figure.get("config")
    settings = config if isinstance(config, dict) else {}
    kept["config"] = {
        key: _plotly_value(value) for key, value in settings.items() if key in _PLOTLY_CONFIG
    }
    kept["config"]["typesetMath"] = False
    return kept


def _trace(trace: Any) -> Any:
    _check_trace(trace)
    return _plotly_value(trace)


def _check_trace(trace: Any) -> None:
    kind = trace.get("type", "scatter") if isinstance(trace, dict) else "scatter"
    if kind in _PLOTLY_MAPS:
        raise _Refusal(_MAP_REASON)
    if kind not in _PLOTLY_TRACES:
        raise _Refusal(f"a trace of a type not known to fetch nothing: {str(kind)[:40]!r}")


def _plotly_value(value: Any, in_args: bool = False) -> Any:
    if isinstance(value, str):
        return _plotly_text(value)
    if isinstance(value, list):
        return [_plotly_value(item, in_args) for item in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, item in value.items():
        name = re.sub(r"\[\d*\]", "", key).rsplit(".", 1)[-1]
        if name == "source" and not _data_images(item):
            continue  # (an image the browser would fetch)
        if in_args and name == "type" and _names_a_map(item):
            raise _Refusal(_MAP_REASON)  # (a button that would turn a trace into a map)
        if in_args and name == "data" and isinstance(item, list):
            for trace in item:  # (an animation's frame given in a button's args)
                _check_trace(trace)
        kept[key] = _plotly_value(item, in_args or key in ("args", "args2"))
    return kept


def _names_a_map(value: Any) -> bool:
    if isinstance(value, list):
        return any(_names_a_map(item) for item in value)
    return isinstance(value, str) and value in _PLOTLY_MAPS


def _data_images(value: Any) -> bool:
    if isinstance(value, list):
        return all(_data_images(item) for item in value)
    return value is None or (isinstance(value, str) and _DATA_IMAGE.fullmatch(value) is not None)


def _plotly_text(text: str) -> str:
    if "<" not in text and ">" not in text:
        return text
    parts: list[str] = []
    end = 0
    for match in _TAG.finditer(text):
        parts.append(_escape_angles(text[end : match.start()]))
        parts.append(_plotly_tag(match.group()))
        end = match.end()
    parts.append(_escape_angles(text[end:]))
    return "".join(parts)


def _escape_angles(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _plotly_tag(tag: str) -> str:
    parts = _TAG_PARTS.fullmatch(tag)
    if parts is None:
        return _escape_angles(tag)
    closing, name = parts.group(1), parts.group(2).lower()
    if name == "a":
        return ""  # a link: its text stays, as plain text
    if name not in _PLOTLY_TAGS:
        return _escape_angles(tag)  # (plotly.js shows other tags as text too)
    if closing or name in ("br", "extra"):
        return f"<{closing}{name}>"
    style = _STYLE.search(parts.group(3) or "")
    declarations = css.clean_declarations(style.group(3) or style.group(4) or "") if style else ""
    if not declarations or ('"' in declarations and "'" in declarations):
        return f"<{name}>"
    quote = "'" if '"' in declarations else '"'
    return f"<{name} style={quote}{declarations}{quote}>"


# -- Vega and Vega-Lite ----------------------------------------------------------------------

# Where Vega and Vega-Lite take an expression (Vega's language, compiled to JavaScript).
_EXPRESSION_KEYS = frozenset({"expr", "calculate", "signal", "update"})
_PREDICATE_KEYS = frozenset({"filter", "test"})
_SCHEMA = re.compile(r"https://vega\.github\.io/schema/vega(?:-lite)?/v\d+(?:\.\d+){0,2}\.json")


# Inline data: its rows' field names are the data's own ("url" is a column there), and reach the
# page only through channels, whose keys are checked.
_DATA_KEYS = frozenset({"datasets", "values"})


class _Vega:
    def spec(self, spec: dict[str, Any]) -> Any:
        return self._value(spec, top=True)

    def _value(self, value: Any, *, top: bool = False, data: bool = False) -> Any:
        if isinstance(value, str):
            if _css_fetches(value):
                raise _Refusal("a CSS url(), which the browser would fetch")
            return value
        if isinstance(value, list):
            return [self._value(item, data=data) for item in value]
        if not isinstance(value, dict):
            return value
        if data:
            return {key: self._value(item, data=True) for key, item in value.items()}
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if key == "init" and isinstance(item, str):  # (a Vega signal's; Vega-Lite's is data)
                raise _Refusal("an expression (init): Vega compiles it to JavaScript")
            if key == "url":
                raise _Refusal("a URL (remote data or an image), which the browser would fetch")
            if key in _EXPRESSION_KEYS:
                raise _Refusal(f"an expression ({key}): Vega compiles it to JavaScript")
            if key in _PREDICATE_KEYS and _has_expression(item):
                raise _Refusal(f"an expression ({key}): Vega compiles it to JavaScript")
            if key == "on" and _has_event_filter(item):
                raise _Refusal("an event filter: an expression Vega compiles to JavaScript")
            if key in ("href", "element", "usermeta"):
                continue
            if top and key == "$schema":
                if isinstance(item, str) and _SCHEMA.fullmatch(item):
                    kept[key] = item
                continue
            kept[key] = self._value(item, data=key in _DATA_KEYS)
        return kept


def _has_expression(predicate: Any) -> bool:
    """A Vega-Lite predicate that is (or composes) an expression string."""
    if isinstance(predicate, str):
        return True
    if isinstance(predicate, list):
        return any(_has_expression(item) for item in predicate)
    if isinstance(predicate, dict):
        return any(
            _has_expression(predicate[key]) for key in ("and", "or", "not") if key in predicate
        )
    return False


# An event stream's filter follows its event: "mousedown[event.shiftKey]" (a bracket that opens
# a stream, "[mousedown, mouseup] > mousemove", is a span between two events).
_EVENT_FILTER = re.compile(r"[\w*)]\s*\[")


def _has_event_filter(value: Any) -> bool:
    """An event stream given as a string with a filter (in an object, "filter" is checked as
    every predicate is)."""
    if isinstance(value, str):
        return _EVENT_FILTER.search(value) is not None
    if isinstance(value, list):
        return any(_has_event_filter(item) for item in value)
    return False
