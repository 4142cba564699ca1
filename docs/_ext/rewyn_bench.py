"""Sphinx extension: the benchmark figures, as tables and a plot, from one data file.

``benchmarks/figures.json`` holds each figure with the baseline measured in the same run, the
ratio the benchmark printed, the command that printed it and the commit that recorded it. Two
directives read it:

``{rewyn-bench-table} AREA``
    the figures of one area as a table (every area when none is named);
``{rewyn-bench-plot}``
    each figure against its baseline, drawn with matplotlib when the site is built, as an SVG
    in the build's ``_static`` (no image is committed).

The file is checked as it is read: a missing field, an unknown area, or a printed ratio that the
value and the baseline do not give is a warning, which fails the build (``-W``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

PLOT = "rewyn-bench.svg"
"""The plot's file in the build's _static."""
RATIO_SLACK = 0.04
"""How far a printed ratio may be from value / baseline: the file keeps the rounded figures."""
SECONDS = {"ms": 0.001, "s": 1.0}
REQUIRED = ("id", "area", "label", "what", "value", "unit", "better", "command", "recorded")


@dataclass(frozen=True)
class Figure:
    """One figure of the data file (see its ``about``)."""

    id: str
    area: str
    label: str
    what: str
    value: float
    unit: str
    better: str
    command: str
    commit: str
    date: str
    baseline: float | None = None
    baseline_unit: str | None = None
    against: str | None = None
    ratio: float | None = None
    ratio_printed_as: str = "value/baseline"
    target: str | None = None
    note: str | None = None
    run_at: str | None = None

    @property
    def measured_ratio(self) -> float | None:
        """value / baseline, in one unit; None without a baseline."""
        if self.baseline is None or self.baseline == 0:
            return None
        scale = 1.0
        if self.baseline_unit is not None and self.baseline_unit != self.unit:
            scale = SECONDS[self.baseline_unit] / SECONDS[self.unit]
        return self.value / (self.baseline * scale)

    @property
    def cost(self) -> float | None:
        """The time (or memory) the figure costs relative to its baseline: below 1, less."""
        ratio = self.measured_ratio
        if ratio is None or ratio <= 0:
            return None
        return ratio if self.better == "lower" else 1 / ratio

    @property
    def shown_ratio(self) -> str:
        """The ratio as the benchmark printed it, else as the two figures give it."""
        if self.ratio is not None:
            return f"{self.ratio:g}x" + (
                " (baseline / value)" if self.ratio_printed_as == "baseline/value" else ""
            )
        ratio = self.measured_ratio
        return "" if ratio is None else f"{ratio:.2g}x"


def data_path(app: Sphinx) -> Path:
    return Path(app.confdir).parent / "benchmarks" / "figures.json"


def load(path: Path) -> list[Figure]:
    """The figures of ``path``, each checked; a figure that fails a check is warned of."""
    document = json.loads(path.read_text())
    figures = []
    seen: set[str] = set()
    for raw in document["figures"]:
        where = f"{path.name}: {raw.get('id', '?')}"
        missing = [key for key in REQUIRED if key not in raw]
        if missing:
            logger.warning(f"{where}: no {', '.join(missing)}", type="rewyn_bench")
            continue
        if raw["id"] in seen:
            logger.warning(f"{where}: the id is used twice", type="rewyn_bench")
        seen.add(raw["id"])
        fields: dict[str, Any] = {k: v for k, v in raw.items() if k != "recorded"}
        figure = Figure(**fields, commit=raw["recorded"]["commit"], date=raw["recorded"]["date"])
        check(figure, where)
        figures.append(figure)
    return figures


def check(figure: Figure, where: str) -> None:
    if figure.better not in ("lower", "higher"):
        logger.warning(f"{where}: better is {figure.better!r}", type="rewyn_bench")
    if not re.fullmatch(r"[0-9a-f]{7,40}", figure.commit) or not re.fullmatch(
        r"\d{4}-\d\d-\d\d", figure.date
    ):
        logger.warning(f"{where}: recorded needs a commit and a date", type="rewyn_bench")
    if figure.ratio is None:
        return
    measured = figure.measured_ratio
    if measured is None:
        logger.warning(f"{where}: a ratio without a baseline", type="rewyn_bench")
        return
    if figure.ratio_printed_as == "baseline/value":
        measured = 1 / measured
    if abs(measured - figure.ratio) > RATIO_SLACK * figure.ratio:
        logger.warning(
            f"{where}: printed ratio {figure.ratio} but value and baseline give {measured:.3g}",
            type="rewyn_bench",
        )


def figures_of(app: Sphinx) -> list[Figure]:
    """The data file's figures, read once per build."""
    cached: list[Figure] | None = getattr(app, "_rewyn_bench_figures", None)
    if cached is None:
        cached = load(data_path(app))
        app._rewyn_bench_figures = cached  # type: ignore[attr-defined]
    return cached


def number(value: float, unit: str) -> str:
    shown = f"{value:,.4g}" if abs(value) < 10_000 else f"{value:,.0f}"
    return f"{shown} {unit}"


def paragraph(directive: SphinxDirective, text: str) -> list[nodes.Node]:
    """``text`` (MyST inline Markdown: code spans) as inline nodes."""
    parsed, _ = directive.state.inline_text(text, directive.lineno)
    return list(parsed)


def entry(directive: SphinxDirective, text: str) -> nodes.entry:
    cell = nodes.entry()
    if text:
        cell += nodes.paragraph("", "", *paragraph(directive, text))
    return cell


COLUMNS = (
    ("figure", 40),
    ("value", 12),
    ("baseline, in the same run", 28),
    ("ratio", 9),
    ("target", 16),
)


class BenchTable(SphinxDirective):
    """The figures of one area (the argument; every area without it): a table of the figures,
    then a list of how each was measured (its command, the commit that recorded it, notes)."""

    optional_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(data_path(self.env.app)))
        figures = figures_of(self.env.app)
        area = self.arguments[0] if self.arguments else None
        if area is not None:
            figures = [figure for figure in figures if figure.area == area]
            if not figures:
                areas = sorted({figure.area for figure in figures_of(self.env.app)})
                message = f"rewyn-bench-table: no area {area!r} (the areas: {areas})"
                return [self.state.document.reporter.warning(message, line=self.lineno)]
        table = nodes.table(classes=["rewyn-bench"])
        group = nodes.tgroup(cols=len(COLUMNS))
        table += group
        for _, width in COLUMNS:
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        row = nodes.row()
        for title, _ in COLUMNS:
            row += entry(self, title)
        head += row
        group += head
        body = nodes.tbody()
        for figure in figures:
            body += self.row(figure)
        group += body
        how = nodes.bullet_list(classes=["rewyn-bench-how"])
        for figure in figures:
            how += self.how(figure)
        return [table, how]

    def row(self, figure: Figure) -> nodes.row:
        baseline = ""
        if figure.baseline is not None:
            unit = figure.baseline_unit or figure.unit
            baseline = f"{figure.against}: {number(figure.baseline, unit)}"
        elif figure.against:
            baseline = figure.against
        row = nodes.row(ids=[f"bench-{figure.id}"])
        for text in (
            figure.what,
            number(figure.value, figure.unit),
            baseline,
            figure.shown_ratio,
            figure.target or "",
        ):
            row += entry(self, text)
        return row

    def how(self, figure: Figure) -> nodes.list_item:
        """``label``: its command, the commit that recorded it (and ran it), its note."""
        ran = f", run on {figure.run_at}" if figure.run_at else ""
        text = (
            f"*{figure.label}*: `{figure.command}`, recorded in {figure.commit} "
            f"({figure.date}{ran})."
            + (f" {figure.note[:1].upper()}{figure.note[1:]}." if figure.note else "")
        )
        item = nodes.list_item()
        item += nodes.paragraph("", "", *paragraph(self, text))
        return item


class BenchPlot(SphinxDirective):
    """The plot of every figure with a baseline (drawn when the build ends)."""

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(data_path(self.env.app)))
        depth = self.env.docname.count("/")
        src = "../" * depth + f"_static/{PLOT}"
        alt = (
            "Each benchmark figure's time or memory relative to its baseline measured in the "
            "same run, on a log scale: left of 1x costs less than the baseline, right more."
        )
        html = (
            f'<figure class="rewyn-bench-plot"><img src="{src}" alt="{alt}" '
            f'style="width: 100%"></figure>'
        )
        return [nodes.raw("", html, format="html")]


def draw(figures: list[Figure], out: Path) -> None:
    """The plot: each figure's cost relative to its baseline (log scale), by area."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    plotted = [figure for figure in figures if figure.cost is not None]
    areas = list(dict.fromkeys(figure.area for figure in plotted))
    colours = plt.get_cmap("tab10")
    matplotlib.rcParams["svg.hashsalt"] = "rewyn-bench"  # (the same file from the same data)
    height = 0.28 * len(plotted) + 1.2
    fig, axis = plt.subplots(figsize=(8, height))
    labels = []
    for index, figure in enumerate(reversed(plotted)):
        cost = figure.cost
        assert cost is not None
        colour = colours(areas.index(figure.area) % 10)
        axis.barh(index, cost - 1, left=1, color=colour, height=0.7)  # (from 1x: the baseline)
        more = cost >= 1
        axis.annotate(
            f" {cost:.2g}x ",
            (cost, index),
            va="center",
            ha="left" if more else "right",
            fontsize=7,
        )
        labels.append(figure.label.replace("`", ""))
    axis.set_xscale("log")
    axis.set_xlim(1e-3, 50)
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_yticks(range(len(labels)), labels, fontsize=7)
    axis.set_ylim(-0.6, len(labels) - 0.4)
    axis.set_xlabel(
        "time (or memory) relative to the baseline in the same run; throughput as time per "
        "item (log scale)",
        fontsize=7,
    )
    axis.tick_params(axis="x", labelsize=7)
    handles = [Patch(color=colours(i % 10)) for i in range(len(areas))]
    axis.legend(
        handles,
        areas,
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.4, 1.0),
        ncol=3,
        frameon=False,
    )
    axis.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)


def build_finished(app: Sphinx, exception: BaseException | None) -> None:
    if exception is None and app.builder.format == "html":
        draw(figures_of(app), Path(app.outdir) / "_static" / PLOT)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rewyn-bench-table", BenchTable)
    app.add_directive("rewyn-bench-plot", BenchPlot)
    app.connect("build-finished", build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
