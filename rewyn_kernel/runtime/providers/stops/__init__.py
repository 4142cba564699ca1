"""What each provider stops, and what it does not: the one declared source of these facts.

One ``Row`` per thing a reader asks about (the host's files, the network, other processes...),
one ``Cell`` per provider in it: a ``Verdict`` (stopped, partly, not stopped) and a short plain
phrase, and where the answer depends on the host, the ``Condition`` it holds under and what holds
otherwise. Everything that shows these facts draws them from here:

- each built-in provider names its column (``BubblewrapProvider.stops`` and the others; see
  ``stops_for``), and ``rewyn-kernel doctor`` prints the column of the provider chosen on this
  host, each condition settled (``settle``);
- the README's table and the documentation's (``docs/_ext/rewyn_stops.py``) are rendered from it
  (``markdown``; ``python -m rewyn_kernel.runtime.providers.stops --markdown`` prints it);
- ``tests/test_stops.py`` attacks each provider from inside a real sandbox, row by row where a
  probe is cheap, and checks that what the probe reaches is what the cell says.

``model.py`` holds the types, ``table.py`` the rows, ``__main__.py`` the command. Nothing here
imports a provider at import time (they import it): a condition looks at the host only when it
is settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rewyn_kernel.runtime.providers.stops.model import (
    COLUMNS,
    Cell,
    Column,
    Condition,
    Row,
    Verdict,
    row,
)
from rewyn_kernel.runtime.providers.stops.table import ROWS

__all__ = [
    "COLUMNS",
    "ROWS",
    "Cell",
    "Column",
    "Condition",
    "Row",
    "Settled",
    "Verdict",
    "cells",
    "markdown",
    "row",
    "settle",
    "stops_for",
]


def cells(column: Column) -> tuple[tuple[Row, Cell], ...]:
    """Each row with ``column``'s cell, in the table's order."""
    return tuple((each, each.cell(column)) for each in ROWS)


@dataclass(frozen=True)
class Settled:
    """One row of a column on this host: its condition looked at."""

    row: Row
    verdict: Verdict
    says: str
    condition: Condition | None
    """The condition looked at (None: none applies), and whether it held: ``held``."""
    held: bool


def settle(column: Column, given: Mapping[Condition, bool] | None = None) -> tuple[Settled, ...]:
    """``column`` on this host: each cell's condition looked at once, unless ``given`` says
    whether it holds (for a provider made without what the host has, or another host's)."""
    seen: dict[Condition, bool] = dict(given or {})
    settled = []
    for found, cell in cells(column):
        held = True
        if cell.when is not None:
            if cell.when not in seen:
                seen[cell.when] = cell.when.holds()
            held = seen[cell.when]
        verdict, says = cell.settle(held)
        settled.append(Settled(found, verdict, says, cell.when, held))
    return tuple(settled)


def stops_for(provider: object) -> Column | None:
    """The column of ``provider``: its ``stops`` (every built-in one has it); None for a
    provider that declares none (a package's own)."""
    column = getattr(provider, "stops", None)
    return column if isinstance(column, Column) else None


def markdown_cell(cell: Cell) -> str:
    """A cell as Markdown: the verdict in bold, the phrase, and what holds otherwise."""
    text = f"**{cell.verdict.value}**"
    if cell.when is not None:
        text += f" ({cell.when.value})"
    text += f": {cell.says}"
    if cell.otherwise is not None:
        text += f"; else **{cell.otherwise.value}**: {cell.otherwise_says}"
    return text


def markdown() -> str:
    """The table as Markdown (what README.md holds between its ``stops`` markers)."""
    lines = [
        "| | " + " | ".join(column.value for column in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for each in ROWS:
        cells = " | ".join(markdown_cell(cell) for cell in each.cells)
        lines.append(f"| {each.concern} | {cells} |")
    return "\n".join(lines) + "\n"
