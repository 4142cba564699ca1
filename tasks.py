#!/usr/bin/env python3
"""Set up and run rewyn-kernel from a fresh checkout, with nothing but python3.

    python3 tasks.py demo     the main job: the quickstart notebook through the sandbox kernel
    python3 tasks.py test     the whole test suite, with the format, lint and type checks
    python3 tasks.py bench    benchmarks that print figures

Each command creates or updates ``.venv`` first (reinstalling when pyproject.toml changes), so
it works on a machine that has never seen the project.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
STAMP = VENV / ".rewyn-installed"


def run(*argv: str | Path) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], cwd=ROOT, check=True)


def ensure_venv() -> None:
    """Create .venv and install the project with its dev extras, unless already current."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and (BIN / "python").exists():
        return
    if not (BIN / "python").exists():
        print(f"+ creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip: list[str | Path] = [BIN / "python", "-m", "pip", "--disable-pip-version-check", "-q"]
    run(*pip, "install", "--upgrade", "pip")
    run(*pip, "install", "-e", ".[dev]")
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command not in {"demo", "test", "bench"}:
        print(__doc__)
        return 2
    ensure_venv()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    try:
        if command == "demo":
            output = ROOT / "runs" / "quickstart.ipynb"
            run(BIN / "rewyn-kernel", "run", ROOT / "notebooks" / "quickstart.ipynb", "-o", output)
        elif command == "bench":
            run(BIN / "python", "-m", "benchmarks.bench_runtime", *argv[1:])
        else:
            run(BIN / "ruff", "format", "--check", ".")
            run(BIN / "ruff", "check", ".")
            run(BIN / "mypy")
            run(BIN / "python", "-m", "pytest", *argv[1:])
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
