"""What each provider stops, for the layers above the runtime: the one declared table
(``ROWS`` over ``COLUMNS``), a provider's column (``stops_for``), its conditions settled on
this host (``settle``) and the table as Markdown (``markdown``, the README's block). They are
implemented in ``runtime/providers/stops/``; this is their public path.
"""

from rewyn_kernel.runtime.providers.stops import (
    COLUMNS,
    ROWS,
    Cell,
    Column,
    Condition,
    Row,
    Settled,
    Verdict,
    markdown,
    settle,
    stops_for,
)

__all__ = [
    "COLUMNS",
    "ROWS",
    "Cell",
    "Column",
    "Condition",
    "Row",
    "Settled",
    "Verdict",
    "markdown",
    "settle",
    "stops_for",
]
