"""The docs collector (docs/_collect.py) fails what it should: run over a docs tree of its own.

Each case runs pytest in a subprocess on a temporary tree holding a copy of the collector and a
page or two, and reads the outcome of each block from ``-rA``'s summary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FENCE = "```"

GOOD = f"""# Runs

{FENCE}python
x = 41
{FENCE}

{FENCE}python
x += 1
assert x == 42
{FENCE}

% not-run: fails on purpose, and is not run
{FENCE}python
raise SystemExit("a not-run block ran")
{FENCE}

{FENCE}bash
echo made > made.txt
{FENCE}

{FENCE}console
$ test "$(cat made.txt)" = made && echo same
same
{FENCE}

{FENCE}text
$ false (a text block is for reading)
{FENCE}
"""

BAD = f"""# Fails

{FENCE}python
raise ValueError("a failing python block")
{FENCE}

{FENCE}bash
false
echo "never"
{FENCE}

{FENCE}bash
echo "$NOT_SET_ANYWHERE"
{FENCE}

{FENCE}console
$ exit 3
{FENCE}

% kernel
{FENCE}python
1 / 0
{FENCE}

% kernel: expect=error
{FENCE}python
1 / 0
{FENCE}
"""


def run(
    tmp_path: Path, pages: dict[str, str], env: dict[str, str] | None = None
) -> tuple[int, str]:
    """pytest over a docs tree of ``pages`` with a copy of the collector: (exit code, output)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("conftest.py", "_collect.py"):
        shutil.copy(HERE / name, docs / name)
    for name, text in pages.items():
        (docs / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "docs"]
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100, check=False
    )
    return done.returncode, done.stdout + done.stderr


def outcomes(output: str) -> dict[str, str]:
    """``{"page.md:LINE": "PASSED" | "FAILED" | ...}`` from pytest's short summary."""
    found = re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) docs/(\S+?)::line:(\d+)", output, re.M)
    return {f"{page}:{line}": outcome for outcome, page, line in found}


def test_blocks_run_in_order_and_failures_fail(tmp_path: Path) -> None:
    code, output = run(tmp_path, {"good.md": GOOD, "bad.md": BAD})
    assert code == 1, output
    assert outcomes(output) == {
        "good.md:3": "PASSED",
        "good.md:7": "PASSED",
        "good.md:17": "PASSED",
        "good.md:21": "PASSED",
        "bad.md:3": "FAILED",
        "bad.md:7": "FAILED",
        "bad.md:12": "FAILED",
        "bad.md:16": "FAILED",
        "bad.md:21": "FAILED",
        "bad.md:26": "PASSED",
    }, output
    assert "a failing python block" in output
    assert "ZeroDivisionError" in output


def test_a_not_run_marker_needs_a_reason(tmp_path: Path) -> None:
    page = f"% not-run:\n{FENCE}python\nx = 1\n{FENCE}\n"
    code, output = run(tmp_path, {"page.md": page})
    assert code != 0, output
    assert "ERROR docs/page.md" in output
    assert "needs a reason" in output


def test_a_marker_away_from_its_block_is_an_error(tmp_path: Path) -> None:
    page = f"% not-run: a blank line follows\n\n{FENCE}python\nx = 1\n{FENCE}\n"
    code, output = run(tmp_path, {"page.md": page})
    assert code != 0, output
    assert "marks nothing" in output


def test_a_block_whose_needs_are_missing_skips_but_fails_under_ci(tmp_path: Path) -> None:
    page = f"% needs: podman\n{FENCE}python\nx = 1\n{FENCE}\n"
    bare = {k: v for k, v in os.environ.items() if k != "CI"} | {"PATH": "/nowhere"}
    (tmp_path / "here").mkdir()
    code, output = run(tmp_path / "here", {"page.md": page}, env=bare)
    assert code == 0, output
    assert "1 skipped" in output, output
    assert "this block needs podman: no podman on PATH" in output
    (tmp_path / "ci").mkdir()
    code, output = run(tmp_path / "ci", {"page.md": page}, env=bare | {"CI": "true"})
    assert code == 1, output
    assert outcomes(output) == {"page.md:2": "FAILED"}, output
    assert "no podman on PATH" in output
