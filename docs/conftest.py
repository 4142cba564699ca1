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

from _collect import make_sybil

pytest_collect_file = make_sybil(Path(__file__).resolve().parent).pytest()
