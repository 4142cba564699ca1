"""Sphinx configuration of rewyn-kernel's documentation site (``python3 tasks.py docs``).

MyST Markdown pages, the pydata theme, and the project's own extension (``_ext/rewyn_docs.py``)
for the reference pages generated from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from rewyn_kernel import __version__  # noqa: E402

project = "rewyn-kernel"
author = "the rewyn-kernel developers"
copyright = "2026, the rewyn-kernel developers"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "sphinx_design",
    # The project's own (docs/_ext): pages generated from the code, so they cannot drift.
    "rewyn_docs",
    "rewyn_stops",
    "rewyn_bench",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "conftest.py", "README.md"]
templates_path: list[str] = []
html_static_path = ["_static"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# (In Sphinx 9 this boolean default overrides an explicit :members: list: the API page lists
# members with :no-members: and autodoc directives of their own where it wants fewer.)
autodoc_default_options = {"members": True, "show-inheritance": False}

html_theme = "pydata_sphinx_theme"
html_title = "rewyn-kernel"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
