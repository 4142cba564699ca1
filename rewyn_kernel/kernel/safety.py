"""Filter the sandbox's rich output before it reaches the frontend.

Jupyter trusts every output produced in a live session: JupyterLab 4 and Notebook 7 render
``text/html`` unsanitised in the page's own origin and evaluate ``application/javascript``. Script
there holds the user's Jupyter credentials, so it can start an unsandboxed kernel through the
server's REST API, open a terminal or write files, and saving signs the notebook so it replays on
reopen. The code in the sandbox is hostile, so this kernel is the only place to stop it:
``filter_bundle`` passes the MIME types that cannot carry script (TeX only where every control
sequence is on ``tex.py``'s allow-list, and no CSS ``url(``), sanitises HTML and Markdown with
nh3 (bindings to ammonia, a maintained allow-list sanitiser) and HTML's CSS with tinycss2
(``css.py``: scoped to its output, nothing that fetches), shows SVG only through ``<img>``
(where browsers never run its scripts) and drops everything else, which ``drop_note`` names.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import nh3

from rewyn_kernel.kernel import charts, css, tex

__all__ = [
    "FilteredOutput",
    "MAX_SVG_BYTES",
    "MAX_VALUE_BYTES",
    "WIDGET_VIEW_MIME",
    "clean_html",
    "drop_note",
    "filter_bundle",
]

MAX_VALUE_BYTES = 16 * 1024 * 1024
"""A single MIME value larger than this (UTF-8 bytes, or JSON text) is dropped."""
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
"""A widget shown in an output: kept when it names a model the kernel relayed."""
MAX_SVG_BYTES = 8 * 1024 * 1024
"""SVG larger than this is dropped: base64 in an ``<img>`` grows it by a third."""

_TEXT_TYPES = frozenset({"text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml"})
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif"})

_MIME_NAME = re.compile(r"[\w.+/=; -]{1,100}", re.ASCII)
_BASE64 = re.compile(r"[A-Za-z0-9+/\r\n]*={0,2}[\r\n]*")
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif);base64,[a-z0-9+/=]*")
_AUTOLOAD_ATTRIBUTES = frozenset({"src", "srcset", "poster", "background", "lowsrc", "dynsrc"})
# Browsers drop ASCII tab and newline anywhere in a URL and C0 controls or spaces around it
# (https://url.spec.whatwg.org/#concept-basic-url-parser); Markdown adds backslash escapes.
_URL_NOISE = re.compile(r"[\x00-\x20\\]+")
_SCRIPT_URL = re.compile(r"(?:java|vb)script:")
# A link destination that is a data: URL (inline, autolink, reference), after _URL_NOISE went.
_DATA_LINK = re.compile(r"(?:\]\(|<|\]:)data:")
_DROP: Any = object()  # not None: JSON null is a value
# HTML that is one <svg> element (and whatever follows it up to a last </svg>: all of it goes
# into the image, where nothing runs or loads).
_INLINE_SVG = re.compile(r"\s*<svg(?=[\s>/])[^>]*>.*</svg>\s*", re.IGNORECASE | re.DOTALL)
_SVG_NAMESPACE = 'xmlns="http://www.w3.org/2000/svg"'
_XLINK_NAMESPACE = 'xmlns:xlink="http://www.w3.org/1999/xlink"'

# ammonia's defaults (no script, style, iframe, object, embed, form, svg, math, meta, base, link;
# URLs limited to known schemes; no event handlers) plus what DataFrame HTML and captions use.
_HTML_TAGS = nh3.ALLOWED_TAGS | {"tfoot"}
_HTML_ATTRIBUTES = {tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()}
# Inline style keeps what css.PROPERTIES allows (no URL, nothing that lifts an element out of
# the output area); ids are prefixed (css.ID_PREFIX).
_HTML_ATTRIBUTES["*"] = {"class", "title", "style", "id"}
# data: is allowed past ammonia's scheme check only so that _attribute_filter can keep inline
# PNG/JPEG/GIF images (what matplotlib's HTML and many reports embed); nothing else survives.
_URL_SCHEMES = frozenset({"http", "https", "mailto", "data"})
# Classes of JupyterLab's own UI (jp-Dialog is a full-page overlay) would let output restyle
# itself as part of the application, e.g. a fake login dialog; other class names are harmless.
_APP_CLASS_PREFIXES = ("jp-", "lm-", "p-", "mod-")


@dataclass(frozen=True)
class FilteredOutput:
    """A MIME bundle after filtering, and what the filter removed or changed."""

    data: dict[str, Any]
    """The bundle to relay; never empty (a ``text/plain`` note when nothing else is left)."""
    metadata: dict[str, Any]
    dropped: tuple[str, ...]
    """MIME types removed entirely (unsafe, unknown, malformed or too large)."""
    sanitised: tuple[str, ...]
    """MIME types changed by sanitising (``image/svg+xml`` when it became an ``<img>``)."""


def filter_bundle(
    data: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    trust: bool = False,
    widgets: Container[str] = (),
) -> FilteredOutput:
    """Return the part of an output bundle that is safe to show in a trusted frontend.

    With ``trust=True`` (``SandboxKernel.trust_output``) data and metadata pass unchanged apart
    from entries that are not str-keyed; nothing is reported dropped. ``widgets``: the ids of
    the widget models the kernel relayed (a widget's view names one of them, or goes).
    """
    data = _str_keyed(data)
    metadata = _str_keyed(metadata)
    if trust:
        return FilteredOutput(data or {"text/plain": drop_note(())}, metadata, (), ())
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    sanitised: list[str] = []
    for mime, value in data.items():
        if mime == WIDGET_VIEW_MIME:
            clean = value if _widget_view(value, widgets) else _DROP
        else:
            clean = _filter_value(mime, value)
        if clean is _DROP:
            dropped.append(_display_name(mime))
            continue
        if isinstance(clean, charts.Refused):
            dropped.append(f"{_display_name(mime)} ({clean.reason})")
            continue
        kept[mime] = clean
        if clean != value:
            sanitised.append(mime)
    if "image/svg+xml" in kept:
        svg = kept.pop("image/svg+xml")
        if "text/html" in kept:  # the bundle already has its own HTML view
            dropped.append("image/svg+xml")
        else:
            kept["text/html"] = _svg_as_img(svg, metadata.get("image/svg+xml"))
            sanitised.append("image/svg+xml")
    dropped = list(dict.fromkeys(dropped))
    if not kept:
        kept = {"text/plain": drop_note(dropped)}
    return FilteredOutput(kept, _filter_metadata(metadata, kept), tuple(dropped), tuple(sanitised))


def clean_html(source: str) -> str:
    """HTML from the sandbox as ``text/html`` output shows it (a widget's ``HTML`` value, say),
    or '' when it would not be shown at all."""
    clean = _filter_value("text/html", source)
    return "" if clean is _DROP else str(clean)


def _widget_view(value: object, widgets: Container[str]) -> bool:
    """A widget's view: the model it names is one the kernel relayed; nothing else in it."""
    if not isinstance(value, Mapping) or set(value) - {
        "model_id",
        "version_major",
        "version_minor",
    }:
        return False
    major, minor = value.get("version_major"), value.get("version_minor")
    numbers = all(isinstance(n, int) and not isinstance(n, bool) for n in (major, minor))
    return numbers and isinstance(value.get("model_id"), str) and value["model_id"] in widgets


def drop_note(dropped: Sequence[str]) -> str:
    """Return the one-line note shown where output was dropped."""
    if not dropped:
        return "[rewyn: the sandbox sent an empty or malformed output]"
    names = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
    return (
        f"[rewyn: dropped {names} output from the sandbox: not safe to render from untrusted "
        "code. Set SandboxKernel.trust_output = True only for code you trust.]"
    )


def _str_keyed(mapping: object) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        return {}
    return {key: value for key, value in mapping.items() if isinstance(key, str)}


def _display_name(mime: str) -> str:
    # The name is the sandbox's choice and ends up in the visible note: keep it short and plain.
    return mime if _MIME_NAME.fullmatch(mime) else "(malformed MIME type)"


def _filter_value(mime: str, value: object) -> Any:
    """Return the value to relay for one MIME type, or _DROP."""
    if mime in _TEXT_TYPES:
        if not isinstance(value, str) or _utf8_size(value) > MAX_VALUE_BYTES:
            return _DROP
        value = _unicode(value)
        if mime == "text/html" and _INLINE_SVG.fullmatch(value):
            # (an element of its own, such as seaborn's palettes: shown as image/svg+xml is)
            return _svg_as_img(_svg_document(value), None) if len(value) <= MAX_SVG_BYTES else _DROP
        if mime in ("text/html", "text/markdown", "text/latex"):
            if mime == "text/latex":
                # (typeset by MathJax, as plain text otherwise: no markup)
                return value if tex.refusal(value) is None else _DROP
            clean = _clean_html(value) if mime == "text/html" else _clean_markdown(value)
            if clean is _DROP or tex.refusal(clean) is not None:
                return _DROP  # (the math in what is left would style itself or load)
            if value.strip() and not clean.strip():
                return _DROP  # it was nothing but script: show the note, not a blank output
            return _with_styles(clean, value) if mime == "text/html" else clean
        if mime == "image/svg+xml" and _utf8_size(value) > MAX_SVG_BYTES:
            return _DROP
        return value
    if mime in _IMAGE_TYPES:
        if not isinstance(value, str) or len(value) > MAX_VALUE_BYTES:
            return _DROP
        chars = len(value) - value.count("\n") - value.count("\r")
        plausible = chars > 0 and chars % 4 == 0 and _BASE64.fullmatch(value) is not None
        return value if plausible else _DROP
    if charts.is_chart(mime):
        return charts.filter_chart(mime, value, MAX_VALUE_BYTES)
    if mime == "application/json":
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            return _DROP
        return value if len(text) <= MAX_VALUE_BYTES else _DROP
    return _DROP


def _utf8_size(text: str) -> int:
    if len(text) * 4 <= MAX_VALUE_BYTES:  # cheap bound: no need to encode small strings
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _unicode(text: str) -> str:
    """``text`` with each unpaired surrogate replaced by U+FFFD: nh3 (and any encoder after
    it) refuses them, and the filter must not raise."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _clean_html(source: str) -> str:
    return nh3.clean(
        source,
        tags=_HTML_TAGS,
        attributes=_HTML_ATTRIBUTES,
        attribute_filter=_attribute_filter,
        url_schemes=_URL_SCHEMES,
        link_rel="noopener noreferrer",
    )


def _with_styles(clean: str, source: str) -> str:
    """``clean`` (the sanitised HTML of ``source``) with the CSS of ``source``'s ``<style>``
    elements that passes ``css.clean_sheet``, scoped to a wrapper of its own."""
    sheets = _StyleSheets.of(source)
    if not sheets:
        return clean
    scope = "rewyn-css-" + hashlib.sha256(source.encode("utf-8", "replace")).hexdigest()[:12]
    rules = css.clean_sheet(sheets, scope)
    if not rules:
        return clean
    return f'<div class="{scope}"><style>{rules}</style>{clean}</div>'


class _StyleSheets(HTMLParser):
    """The text of each ``<style>`` element, as the standard library's HTML parser finds it
    (what it finds only goes through the CSS filter: a parser that disagrees with the
    browser's can only lose style)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.sheets: list[str] = []
        self.inside = False

    @classmethod
    def of(cls, source: str) -> list[str]:
        if "<style" not in source.lower():
            return []
        parser = cls()
        try:
            parser.feed(source)
            parser.close()
        except Exception:  # (malformed markup: whatever was found so far)
            pass
        return parser.sheets

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "style":
            self.inside = True
            self.sheets.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self.inside = False

    def handle_data(self, data: str) -> None:
        if self.inside and sum(map(len, self.sheets)) <= css.MAX_STYLESHEET_CHARS:
            self.sheets[-1] += data


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    """Keep data: URLs only for inline raster images, drop JupyterLab's own classes, prefix
    ids (and links to them) so none is one of the page's, and keep the CSS of ``style=``
    that passes ``css.clean_declarations``."""
    if attribute == "class":
        names = [name for name in value.split() if not name.lower().startswith(_APP_CLASS_PREFIXES)]
        return " ".join(names) or None
    if attribute == "id":
        return css.ID_PREFIX + value.strip() if value.strip() else None
    if attribute == "style":
        return css.clean_declarations(value) or None
    if attribute == "href" and value.startswith("#"):
        return "#" + css.ID_PREFIX + value[1:]
    url = _URL_NOISE.sub("", value).lower()
    if url.startswith(("javascript:", "vbscript:")):  # ammonia checks href and src, not cite
        return None
    if url.startswith("data:"):
        inline_image = tag == "img" and attribute == "src" and _DATA_IMAGE.fullmatch(url)
        return value if inline_image else None
    if attribute in _AUTOLOAD_ATTRIBUTES:
        # The browser fetches these without a click: an <img src="https://host/?secret"> would
        # carry data out of a sandbox that has no network of its own (and a relative URL
        # would hit the Jupyter server with the user's cookies).
        return None
    return value


def _clean_markdown(source: str) -> Any:
    """Sanitise the raw HTML in Markdown; drop Markdown that carries a script URL.

    Raw HTML in CommonMark needs a literal ``<``, so text without one passes unchanged; text with
    one goes through the HTML sanitiser (which escapes ``<``, ``>`` and ``&`` in text: a
    blockquote marker or a comparison in a code block then shows as an entity). Link
    destinations can be written many ways (inline, reference, autolink, entity-encoded, MathJax
    ``\\href``), so rather than parse them, Markdown containing ``javascript:`` or ``vbscript:``
    in any spelling is dropped; the bundle's ``text/plain`` still shows.
    """
    cleaned = _clean_html(source) if "<" in source else source
    if "![" in cleaned:
        # Markdown images (inline, reference, shortcut, nested brackets) are fetched by the
        # browser on sight: too many spellings to vet one by one (see _attribute_filter).
        return _DROP
    decoded = cleaned
    for _ in range(3):  # entities decode once in Markdown and once more in the HTML it makes
        decoded = html.unescape(decoded)
    bare = _URL_NOISE.sub("", decoded).lower()
    if _SCRIPT_URL.search(bare) or _DATA_LINK.search(bare):
        return _DROP
    return cleaned


def _svg_document(svg: str) -> str:
    """Inline SVG (HTML's, in no namespace) as an SVG document: an image needs the namespace."""
    svg = svg.strip()
    root = svg[: svg.index(">")]
    declared = ""
    if "xmlns=" not in root:
        declared += " " + _SVG_NAMESPACE
    if "xlink:" in svg and "xmlns:xlink=" not in root:
        declared += " " + _XLINK_NAMESPACE
    return svg[:4] + declared + svg[4:]


def _svg_as_img(svg: str, metadata: object) -> str:
    # Browsers run no script and load no external resource in an SVG shown through <img>
    # (https://www.w3.org/TR/SVG2/conform.html#secure-static-mode), so the SVG itself needs no
    # sanitising; inline SVG would run its <script> and on* handlers in the page.
    encoded = base64.b64encode(svg.encode("utf-8", "replace")).decode("ascii")
    size = ""
    if isinstance(metadata, Mapping):
        for key in ("width", "height"):
            if _is_dimension(metadata.get(key)):
                size += f' {key}="{metadata[key]:g}"'
    return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG image"{size}>'


def _is_dimension(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 100_000
    )


_METADATA_CHECKS: dict[str, Callable[[object], bool]] = {
    "width": _is_dimension,
    "height": _is_dimension,
    "needs_background": lambda value: value in ("light", "dark"),
    "unconfined": lambda value: isinstance(value, bool),
}


def _filter_metadata(metadata: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only layout hints; drop everything else, ``isolated`` and ``trusted`` included.

    ``isolated`` is deliberately not forced on HTML: JupyterLab 4's IsolatedRenderer is an
    iframe without a ``sandbox`` attribute into which it ``document.write``s the rendered HTML,
    so it runs in the page's origin, holds the same credentials and would re-parse our output
    a second time; it also loses the theme's CSS (unreadable in dark mode) and the DataFrame
    table styles. See ``Private.IsolatedRenderer`` in
    https://github.com/jupyterlab/jupyterlab/blob/main/packages/outputarea/src/widget.ts
    """
    result = _layout_hints(metadata)
    for mime in kept:
        hints = _layout_hints(metadata.get(mime))
        if hints:
            result[mime] = hints
    return result


def _layout_hints(metadata: object) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        return {}
    return {
        key: metadata[key]
        for key, check in _METADATA_CHECKS.items()
        if key in metadata and check(metadata[key])
    }
