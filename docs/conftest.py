"""pytest runs the code blocks of the documentation's pages: ``pytest docs/``.

The rules (which blocks run, how, and the ``% not-run: REASON``, ``% kernel`` and ``% needs:``
comments that change it) are in ``docs/_collect.py``'s docstring. In short: ```` ```python ````
blocks run in one namespace per page, ```` ```bash ```` and ```` ```console ```` blocks run as
shell in the page's own folder, ```` ```{code-cell} ```` blocks and python blocks under
``% kernel`` run on the real sandboxed kernel, and ``% not-run: REASON`` (a reason is required)
keeps a block from running.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _collect import make_sybil

HERE = Path(__file__).resolve().parent

pytest_collect_file = make_sybil(HERE).pytest()


@pytest.hookimpl(tryfirst=True)  # (before xdist reads the groups off the markers)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The blocks of one page stay in one process of a parallel run (``--dist loadgroup``), in
    the page's order: they share a namespace, a folder and a kernel."""
    for item in items:
        if item.path.suffix == ".md" and item.path.is_relative_to(HERE):
            page = item.path.relative_to(HERE).as_posix()
            item.add_marker(pytest.mark.xdist_group(f"docs:{page}"))
