"""The documentation site builds as Read the Docs builds it: ``sphinx-build -W``, so a warning (a
broken internal link, a reference to a page or heading that is not there, a docstring autodoc
cannot read) fails the suite. The build is the same command as ``python3 tasks.py docs``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def build(out: Path, builder: str = "html") -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder]
    return subprocess.run(
        [*argv, "-d", str(out / "doctrees"), str(DOCS), str(out / builder)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_site_builds_without_a_warning(tmp_path: Path) -> None:
    done = build(tmp_path)
    assert done.returncode == 0, done.stderr
    assert not done.stderr.strip(), done.stderr
    assert (tmp_path / "html" / "index.html").exists()


def test_a_broken_internal_link_fails_the_build(tmp_path: Path) -> None:
    """The check above can fail: a page linking to a page that is not there breaks the build.
    (A two-page site with the same conf.py and extensions: the whole site is built above.)"""
    source = tmp_path / "docs"
    source.mkdir()
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # (rewyn_bench reads its figures)
    for name in ("conf.py", "_ext", "_static"):
        (source / name).symlink_to(DOCS / name)
    (source / "index.md").write_text("# Home\n\n```{toctree}\npage\n```\n")
    (source / "page.md").write_text("# A page\n\nSee [the missing page](no-such-page.md).\n")
    argv = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    done = subprocess.run(
        [*argv, str(source), str(tmp_path / "out-html")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "no-such-page" in done.stderr
    # (and the same two pages without the link build: the failure is the link's)
    (source / "page.md").write_text("# A page\n\nSee [home](index.md).\n")
    done = subprocess.run(
        [*argv, str(source), str(tmp_path / "ok-html")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_install_page_shows_the_commands_the_install_test_runs() -> None:
    """docs/install.md includes the README's Install section, which tests/test_install.py runs
    line by line: the site's install commands are those, not a copy that could drift."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert section.lstrip().startswith("<!-- install:begin -->"), "README: the marker moved"
    assert section.rstrip().endswith("<!-- install:end -->"), "README: the marker moved"
    page = (DOCS / "install.md").read_text()
    assert "```{include} ../README.md" in page
    assert ":start-after: <!-- install:begin -->" in page
    assert ":end-before: <!-- install:end -->" in page
