"""Keep the CSS of the sandbox's HTML output that only styles it: ``<style>`` and ``style=``.

pandas' Styler colours its cells through a ``<style>`` element and element ids, and reports set
colours, borders and fonts inline. A stylesheet reaches the whole page, though, and CSS can
fetch (``url()``, ``@import``, ``image-set()``, ``@font-face``): from a sandbox with no network
of its own that carries data out, and a relative URL reaches the Jupyter server with the user's
cookies. So the CSS is parsed with tinycss2 (a maintained CSS Syntax Level 3 parser) and
re-serialised from what passes:

- declarations of plain properties only (``PROPERTIES``: colours, backgrounds without images,
  borders, fonts and text, sizes, spacing, in-flow layout), values with no URL and no function
  but colours, gradients and arithmetic; no negative margin, no ``position``, no ``content``;
- no at-rule at all (``@import``, ``@font-face``, ``@media``...);
- rules whose every selector is scoped: it is prefixed with the output's own class, so it
  matches only inside that output; a selector that starts with a combinator (a sibling of the
  output) or uses ``&`` is dropped; ids are renamed as the HTML's are (``ID_PREFIX``).

The same declaration rules apply to ``style=`` attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import tinycss2
from tinycss2 import ast

__all__ = [
    "ID_PREFIX",
    "MAX_STYLESHEET_CHARS",
    "PROPERTIES",
    "clean_declarations",
    "clean_sheet",
    "safe_value",
]

ID_PREFIX = "rewyn-"
"""Prefixed to every element id of an output (and to ``#id`` in its selectors and links): an
id of the output can then never be one of JupyterLab's (DOM clobbering)."""
MAX_STYLESHEET_CHARS = 256 * 1024
"""The CSS of one output kept at most; a larger stylesheet is dropped whole."""
MAX_RULES = 5000

_SIDES = ("top", "right", "bottom", "left")
PROPERTIES = frozenset(
    {
        # colours and backgrounds (an image only as a gradient: see FUNCTIONS)
        *("color", "opacity", "background", "background-color", "background-image"),
        *("background-repeat", "background-position", "background-size", "background-clip"),
        # borders and outlines
        *("border", "border-width", "border-style", "border-color", "border-radius"),
        *(f"border-{side}" for side in _SIDES),
        *(f"border-{side}-{part}" for side in _SIDES for part in ("width", "style", "color")),
        *(f"border-{v}-{h}-radius" for v in ("top", "bottom") for h in ("left", "right")),
        *("border-collapse", "border-spacing", "box-shadow"),
        *("outline", "outline-color", "outline-style", "outline-width", "outline-offset"),
        # fonts and text
        *("font", "font-family", "font-size", "font-style", "font-weight", "font-variant"),
        *("font-variant-numeric", "font-feature-settings", "line-height", "letter-spacing"),
        *("text-align", "text-decoration", "text-decoration-line", "text-decoration-color"),
        *("text-decoration-style", "text-transform", "text-indent", "text-overflow"),
        *("text-shadow", "word-spacing", "white-space", "word-break", "word-wrap"),
        *("overflow-wrap", "vertical-align"),
        # sizes and spacing (a margin never negative: see _NO_NEGATIVE)
        *("width", "min-width", "max-width", "height", "min-height", "max-height"),
        *("box-sizing", "padding", "margin"),
        *(f"padding-{side}" for side in _SIDES),
        *(f"margin-{side}" for side in _SIDES),
        # layout in the flow of the output (no position, no transform, no z-index)
        *("display", "float", "clear", "overflow", "overflow-x", "overflow-y", "visibility"),
        *("table-layout", "caption-side", "empty-cells", "list-style", "list-style-type"),
        *("list-style-position", "flex", "flex-direction", "flex-wrap", "flex-grow"),
        *("flex-shrink", "flex-basis", "justify-content", "align-items", "align-self"),
        *("align-content", "gap", "row-gap", "column-gap", "order"),
        *("grid-template-columns", "grid-template-rows", "grid-column", "grid-row"),
    }
)
"""The properties kept, in stylesheets and ``style=`` alike."""
FUNCTIONS = frozenset(
    {
        *("rgb", "rgba", "hsl", "hsla", "hwb", "lab", "lch", "oklab", "oklch", "color"),
        *("color-mix", "calc", "min", "max", "clamp", "repeat", "minmax"),
        *("linear-gradient", "radial-gradient", "conic-gradient"),
        *("repeating-linear-gradient", "repeating-radial-gradient"),
        *("repeating-conic-gradient",),
    }
)
"""Functions a value may call: none of them fetches (``url``, ``image-set``, ``image``,
``cross-fade``, ``element``, ``paint``), reads the page (``attr``, ``var``, ``env``) or runs
anything (``expression``)."""
_NO_NEGATIVE = frozenset({"margin", *(f"margin-{side}" for side in _SIDES)})
_COMBINATORS = frozenset({">", "+", "~"})
_APP_CLASS_PREFIXES = ("jp-", "lm-", "p-", "mod-")


def clean_declarations(text: str) -> str:
    """The declarations of ``text`` (a ``style=`` attribute's value) that pass, as CSS."""
    declarations = tinycss2.parse_declaration_list(text, skip_comments=True, skip_whitespace=True)
    return "; ".join(_kept_declarations(declarations))


def safe_value(text: str, *, no_negative: bool = False) -> bool:
    """Whether ``text`` may be a CSS value of an output (a widget's layout or style trait):
    nothing that fetches or reads the page, nothing that could end a style."""
    tokens = tinycss2.parse_component_value_list(text, skip_comments=True)
    return len(text) <= 4096 and _safe_value(tokens, no_negative=no_negative)


def clean_sheet(sheets: Sequence[str], scope: str) -> str:
    """The rules of ``sheets`` that pass, scoped under the class ``scope``; '' when none does
    or the sheets are too large."""
    if sum(len(sheet) for sheet in sheets) > MAX_STYLESHEET_CHARS:
        return ""
    kept: list[str] = []
    for sheet in sheets:
        rules = tinycss2.parse_stylesheet(sheet, skip_comments=True, skip_whitespace=True)
        for rule in rules[:MAX_RULES]:
            if rule.type != "qualified-rule":
                continue  # (at-rules: @import, @font-face, @media, @namespace...; errors)
            selectors = _scoped_selectors(rule.prelude, scope)
            if not selectors:
                continue
            declarations = tinycss2.parse_declaration_list(
                rule.content, skip_comments=True, skip_whitespace=True
            )
            body = "; ".join(_kept_declarations(declarations))
            if body:
                kept.append(f"{', '.join(selectors)} {{ {body} }}")
    text = "\n".join(kept[:MAX_RULES])
    # What could end the <style> element it goes into: never there (no value or selector
    # that passes holds one), and never let through if it were.
    return "" if "<" in text else text


def _kept_declarations(declarations: Iterable[Any]) -> list[str]:
    kept = []
    for item in declarations:
        if item.type != "declaration" or item.lower_name not in PROPERTIES:
            continue
        if not _safe_value(item.value, no_negative=item.lower_name in _NO_NEGATIVE):
            continue
        value = tinycss2.serialize(item.value).strip()
        if value:
            kept.append(f"{item.lower_name}: {value}{' !important' if item.important else ''}")
    return kept


def _safe_value(tokens: Iterable[Any], *, no_negative: bool) -> bool:
    for token in tokens:
        if _forbidden(token):
            return False
        number = isinstance(token, (ast.NumberToken, ast.DimensionToken, ast.PercentageToken))
        if no_negative and number and token.value < 0:
            return False
        if isinstance(token, ast.FunctionBlock) and (
            token.lower_name not in FUNCTIONS or no_negative  # (calc() could go negative)
        ):
            return False
        if not _safe_value(_inside(token), no_negative=no_negative):
            return False
    return True


def _forbidden(token: Any) -> bool:
    """A token no value or selector may hold: what fetches, opens a block or could end the
    ``<style>`` element (a ``<``)."""
    if isinstance(token, (ast.URLToken, ast.AtKeywordToken, ast.ParseError)):
        return True
    if isinstance(token, ast.CurlyBracketsBlock):
        return True
    if isinstance(token, ast.LiteralToken) and token.value in ("<", ";", "{", "}", "&"):
        return True
    return isinstance(token, ast.StringToken) and "<" in token.value


def _inside(token: Any) -> list[Any]:
    """The tokens a function or a bracketed block holds ([] for any other token)."""
    if isinstance(token, ast.FunctionBlock):
        return list(token.arguments)
    if isinstance(token, (ast.ParenthesesBlock, ast.SquareBracketsBlock)):
        return list(token.content)
    return []


def _scoped_selectors(prelude: list[Any], scope: str) -> list[str]:
    """Each selector of a rule's prelude under ``.scope``; [] if any of them cannot be."""
    selectors: list[list[Any]] = [[]]
    for token in prelude:
        if isinstance(token, ast.LiteralToken) and token.value == ",":
            selectors.append([])
        else:
            selectors[-1].append(token)
    scoped = []
    for selector in selectors:
        tokens = _trimmed(selector)
        if not tokens or not _scopable(tokens):
            return []  # (one bad selector: the whole rule goes, as a browser drops it)
        scoped.append(f".{scope} {tinycss2.serialize(_renamed(tokens)).strip()}")
    return scoped


def _trimmed(tokens: list[Any]) -> list[Any]:
    while tokens and isinstance(tokens[0], ast.WhitespaceToken):
        tokens = tokens[1:]
    while tokens and isinstance(tokens[-1], ast.WhitespaceToken):
        tokens = tokens[:-1]
    return tokens


def _scopable(tokens: list[Any]) -> bool:
    """Whether a selector matches only inside the output once prefixed with its scope: it
    does not start with a combinator (a sibling of the output), holds no ``&`` and no class
    of JupyterLab's own, at any depth (``:is()``, ``:not()``, ``[attr]``)."""
    first = tokens[0]
    if isinstance(first, ast.LiteralToken) and first.value in _COMBINATORS:
        return False
    return _selector_parts_allowed(tokens)


def _selector_parts_allowed(tokens: list[Any]) -> bool:
    previous = None
    for token in tokens:
        if _forbidden(token):
            return False
        after_dot = isinstance(previous, ast.LiteralToken) and previous.value == "."
        if (
            after_dot
            and isinstance(token, ast.IdentToken)
            and token.lower_value.startswith(_APP_CLASS_PREFIXES)
        ):
            return False  # (JupyterLab's own classes: the HTML loses them too)
        if not _selector_parts_allowed(_inside(token)):
            return False
        previous = token
    return True


def _renamed(tokens: list[Any]) -> list[Any]:
    """``tokens`` with each ``#id`` renamed as the HTML's ids are (in ``:is()`` and the like
    too)."""
    renamed: list[Any] = []
    for token in tokens:
        if isinstance(token, ast.HashToken) and token.is_identifier:
            line, column = token.source_line, token.source_column
            renamed.append(ast.HashToken(line, column, ID_PREFIX + token.value, True))
        elif isinstance(token, ast.FunctionBlock):
            line, column = token.source_line, token.source_column
            arguments = _renamed(token.arguments)
            renamed.append(ast.FunctionBlock(line, column, token.name, arguments))
        else:
            renamed.append(token)
    return renamed
