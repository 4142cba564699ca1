"""Coverage-guided fuzzing of the output filter with atheris (libFuzzer), for a longer run than
CI's: not a test, not run in CI.

    pip install atheris
    python -m benchmarks.fuzz_output --seconds 60

Each input becomes a display bundle (a MIME type and a value: HTML, Markdown, TeX, SVG, base64,
JSON) with metadata, and goes through ``filter_bundle``; what it keeps is checked with the
checker of ``tests/test_fuzz.py``. A crash is any exception of the filter (it documents none)
or anything kept that fails the checker; each is printed with the input that made it, and the
inputs are written where ``--crashes`` says (atheris' own artifact files, re-run by passing
one as the corpus). Coverage is of nh3's Python side, tinycss2, the TeX allow-list and the
filter itself (atheris instruments Python; nh3's Rust parser is not instrumented).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

MIMES = [
    "text/html", "text/markdown", "text/latex", "text/plain", "image/svg+xml", "image/png",
    "application/json", "application/javascript", "application/vnd.jupyter.widget-view+json",
]  # fmt: skip


def bundle_of(data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """A bundle and metadata from the fuzzer's bytes (its first byte picks the MIME type)."""
    if not data:
        return {}, {}
    mime = MIMES[data[0] % len(MIMES)]
    text = data[1:].decode("utf-8", "replace")
    value: Any = text
    if mime in ("application/json", "application/vnd.jupyter.widget-view+json"):
        try:
            value = json.loads(text)
        except ValueError:
            value = text
    metadata: dict[str, Any] = {mime: {"width": len(text) % 300}, "isolated": True}
    return {mime: value, "text/plain": "p"}, metadata


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz")
    parser.add_argument("--crashes", default="fuzz-crashes", help="folder for crashing inputs")
    parser.add_argument("corpus", nargs="*", help="atheris corpus folders or inputs to re-run")
    options = parser.parse_args(argv)
    try:
        import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        print("atheris is not installed: pip install atheris", file=sys.stderr)
        return 2
    with atheris.instrument_imports():
        from rewyn_kernel.kernel import css, safety, tex  # noqa: F401
        from tests import test_fuzz

    def one(data: bytes) -> None:
        bundle, metadata = bundle_of(data)
        result = safety.filter_bundle(bundle, metadata)
        test_fuzz.assert_kept_is_inert(result, bundle)

    Path(options.crashes).mkdir(parents=True, exist_ok=True)
    libfuzzer = [
        sys.argv[0],
        f"-max_total_time={options.seconds}",
        f"-artifact_prefix={options.crashes.rstrip('/')}/",
        "-max_len=4096",
        "-len_control=0",
        *options.corpus,
    ]
    atheris.Setup(libfuzzer, one)
    atheris.Fuzz()  # (ends the process: a crash's report and input, or "Done" at the time limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
