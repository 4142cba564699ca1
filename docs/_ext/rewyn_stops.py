"""Sphinx extension: what each provider stops, rendered from the one declared source.

``rewyn-stops`` draws the table of ``rewyn_kernel/runtime/providers/stops/`` (the README's
copy is rendered from the same rows, and ``tests/test_stops.py`` checks both against sandboxes):

    ```{rewyn-stops}
    :legend:
    :conditions:
    ```

``:legend:`` puts what each verdict means before the table; ``:conditions:`` puts after it the
facts of a host that some cells depend on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from rewyn_kernel.runtime.providers.stops import COLUMNS, ROWS, Cell, Condition, Verdict

STYLE = """<style>
.bd-main .bd-content .bd-article-container:has(table.rewyn-stops) { max-width: 100%; }
table.rewyn-stops { font-size: 0.8rem; }
table.rewyn-stops th, table.rewyn-stops td { padding: 0.3rem 0.45rem; vertical-align: top; }
table.rewyn-stops td:first-child { min-width: 9rem; }
table.rewyn-stops .sd-badge { font-size: 0.72rem; }
</style>"""
"""The table has six columns of phrases: on a page of its own, give it the page's width and a
smaller type (in the page itself, so that the extension stays one file)."""
COLOURS = {Verdict.STOPPED: "success", Verdict.PARTLY: "warning", Verdict.NOT_STOPPED: "danger"}
"""sphinx-design's badge colour of each verdict."""


def inline(text: str) -> list[nodes.Node]:
    """``text`` as inline nodes: what stands between backticks as code, the rest as text."""
    parts: list[nodes.Node] = []
    for index, part in enumerate(text.split("`")):
        if part:
            parts.append(nodes.literal(part, part) if index % 2 else nodes.Text(part))
    return parts


def badge(verdict: Verdict) -> nodes.inline:
    colour = COLOURS[verdict]
    classes = ["sd-sphinx-override", "sd-badge", f"sd-bg-{colour}", f"sd-bg-text-{colour}"]
    return nodes.inline(verdict.value, verdict.value, classes=classes)


def cell_paragraph(cell: Cell) -> nodes.paragraph:
    """One cell: its verdict, the condition it holds under, its phrase, and what holds
    otherwise."""
    paragraph = nodes.paragraph()
    paragraph += badge(cell.verdict)
    if cell.when is not None:
        paragraph += nodes.emphasis("", f" ({cell.when.value})")
    paragraph += nodes.Text(": ")
    paragraph.extend(inline(cell.says))
    if cell.otherwise is not None:
        paragraph += nodes.Text("; else ")
        paragraph += badge(cell.otherwise)
        paragraph += nodes.Text(": ")
        paragraph.extend(inline(cell.otherwise_says))
    return paragraph


def table_row(entries: list[nodes.paragraph]) -> nodes.row:
    row = nodes.row()
    for paragraph in entries:
        entry = nodes.entry()
        entry += paragraph
        row += entry
    return row


def table() -> nodes.table:
    """The whole table: a row per concern, a column per provider."""
    found = nodes.table(classes=["rewyn-stops"])
    group = nodes.tgroup(cols=len(COLUMNS) + 1)
    found += group
    for width in (14, *([17] * len(COLUMNS))):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    heading = [nodes.paragraph("", "")]
    heading += [nodes.paragraph(column.value, column.value) for column in COLUMNS]
    head += table_row(heading)
    group += head
    body = nodes.tbody()
    for each in ROWS:
        concern = nodes.paragraph()
        concern += nodes.strong("", "", *inline(each.concern))
        body += table_row([concern, *(cell_paragraph(cell) for cell in each.cells)])
    group += body
    return found


def legend() -> nodes.bullet_list:
    """What each verdict means."""
    found = nodes.bullet_list()
    for verdict in Verdict:
        paragraph = nodes.paragraph()
        paragraph += badge(verdict)
        paragraph += nodes.Text(f": {verdict.meaning}.")
        found += nodes.list_item("", paragraph)
    return found


def conditions() -> nodes.bullet_list:
    """The facts of a host that a cell may depend on, as the table names them."""
    found = nodes.bullet_list()
    for condition in Condition:
        paragraph = nodes.paragraph()
        paragraph += nodes.emphasis("", condition.value)
        paragraph += nodes.Text(": ")
        paragraph.extend(inline(condition.explained))
        paragraph += nodes.Text(".")
        found += nodes.list_item("", paragraph)
    return found


class StopsDirective(SphinxDirective):
    """``rewyn-stops``: the table, with ``:legend:`` and ``:conditions:`` if asked for."""

    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {
        "legend": directives.flag,
        "conditions": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(__file__)
        found: list[nodes.Node] = [nodes.raw("", STYLE, format="html")]
        if "legend" in self.options:
            found.append(legend())
        found.append(table())
        if "conditions" in self.options:
            found.append(conditions())
        return found


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rewyn-stops", StopsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
