"""Print how closely the sandbox kernel matches plain ipykernel on real public notebooks.

Never asserts. Four corpora: ``benchmarks/notebooks/`` holds the code cells of notebooks from
jakevdp/PythonDataScienceHandbook; ``benchmarks/notebooks2/`` public notebooks that print SymPy,
use interactive matplotlib backends, widgets, pandas' Styler and shell commands (each folder's
README.md says which, with their licenses); ``benchmarks/notebooks_asyncio/`` two small
notebooks written here (asyncio tasks between cells, errors IPython shows while a cell goes on);
``benchmarks/notebooks3/`` public notebooks with plotly and Altair charts, an anywidget library
(jupyter-scatter) and statsmodels summaries.
Each notebook runs with nbclient (``allow_errors``, 120 s a cell, interrupted past it) on plain
ipykernel and then on the sandbox kernel, each kernel in its own fresh copy of the notebooks
folder (so ``data/*.csv`` resolve and nothing a notebook writes is left behind or seen by the
other kernel). Two pairs of kernels: the default
sandbox kernel against this interpreter's ipykernel, and a docker sandbox kernel on the
data-science image against that image's own ipykernel (``docker_ipykernel.py``), so each
pair runs the same packages.

Each kernel's replies are awaited in one-second polls (``PromptClient``: nbclient can wait
out a widget cell's whole timeout for a reply that has come). Per code cell it compares the
outcome (error or not) and the set of output kinds: the stream's name for a stream, each MIME
type of a ``display_data``, ``execute_result`` plus
``execute_result:<MIME>`` for each of its types, ``error``, and ``payload:<source>`` for each
payload of the ``execute_reply`` (the pager: ``%prun``, ``?``). A stderr stream of the sandbox
made only of ``[rewyn: ...]`` lines (what its output filter says it dropped) is a *filter
note*: not a mismatch, but counted in the second, strict ratio. Cells that fail on ipykernel
are left out of both ratios (and listed when they fail on both).

    python -m benchmarks.bench_notebooks              # both corpora, both kernels (minutes)
    python -m benchmarks.bench_notebooks --corpus round2 --kernels docker
    python -m benchmarks.bench_notebooks 01.07 03.0   # those whose name contains one of these
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from queue import Empty
from typing import IO, Any
from unittest.mock import patch

import nbformat
from nbclient import NotebookClient

from benchmarks.bench_kernel import kernels_on_path
from benchmarks.docker_ipykernel import LABEL as CONTROL_LABEL

HERE = Path(__file__).resolve().parent
NOTEBOOKS = HERE / "notebooks"
CORPORA = {
    "handbook": NOTEBOOKS,
    "round2": HERE / "notebooks2",
    "asyncio": HERE / "notebooks_asyncio",
    "round3": HERE / "notebooks3",
}
"""The first corpus (PythonDataScienceHandbook), the second (SymPy printing, interactive
matplotlib, widgets, pandas' Styler, shell commands: see notebooks2/README.md), two small
notebooks written here for asyncio between cells and the errors IPython shows while a cell goes
on (notebooks_asyncio/README.md), and the third (plotly and Altair charts, jupyter-scatter's
anywidget, statsmodels summaries: notebooks3/README.md)."""
DATASCIENCE_IMAGE = os.environ.get("REWYN_DS_IMAGE", "rewyn-datascience:bookworm-3")
PLAIN, SANDBOX = "rewyn-bench-ipykernel", "rewyn-bench-sandbox"
DOCKER_PLAIN, DOCKER_SANDBOX = "rewyn-bench-ipykernel-docker", "rewyn-bench-sandbox-docker"
LABELS = {
    PLAIN: "ipykernel",
    SANDBOX: "sandbox",
    DOCKER_PLAIN: "ipykernel-docker",
    DOCKER_SANDBOX: "sandbox-docker",
}
ARGV = {
    PLAIN: [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    SANDBOX: [sys.executable, "-m", "rewyn_kernel", "-f", "{connection_file}"],
    DOCKER_PLAIN: [
        *(sys.executable, str(HERE / "docker_ipykernel.py")),
        *("{connection_file}", DATASCIENCE_IMAGE),
    ],
    DOCKER_SANDBOX: [
        *(sys.executable, "-m", "rewyn_kernel", "-f", "{connection_file}"),
        *("--SandboxKernel.provider=container", f"--SandboxKernel.image={DATASCIENCE_IMAGE}"),
    ],
}
PAIRS = {"default": (PLAIN, SANDBOX), "docker": (DOCKER_PLAIN, DOCKER_SANDBOX)}
"""Each sandbox kernel and its control with the same packages: this interpreter's ipykernel
for the default kernel (bubblewrap here); the image's own ipykernel for the docker kernel."""
CELL_TIMEOUT = 120
TARGET = 0.97
SLOWER_S = 1.0
"""A cell that takes this much longer on the sandbox is named with its two timings."""
NOTE_PREFIX = "[rewyn:"
EVENT_MIME = "application/vnd.rewyn.sandbox-event+json"
"""The sandbox kernel's own record of a cell (``event_output``): left out of the comparison."""
LIBRARIES = ("numpy", "pandas", "matplotlib", "scipy", "IPython", "ipykernel", "nbclient")


@dataclass
class CellRun:
    """What one code cell did on one kernel."""

    error: tuple[str, str] | None  # ename, first line of evalue
    kinds: frozenset[str]
    notes: tuple[str, ...] = ()  # the [rewyn: ...] lines of a stderr made only of them
    seconds: float = 0.0


@dataclass
class NotebookRun:
    """One notebook on one kernel: its code cells by index, and how long it took."""

    cells: dict[int, CellRun] = field(default_factory=dict)
    seconds: float = 0.0  # kernel start to shutdown
    failure: str | None = None  # why it stopped before its last cell, if it did
    isolation: str = ""  # the sandbox's own word on where its cells ran


SHELL_POLL = 1.0
"""Seconds: the longest wait for a shell reply in one poll (see ``PromptClient``)."""


class PromptClient(NotebookClient):
    """nbclient waiting for each reply in polls of ``SHELL_POLL`` seconds.

    nbclient sometimes waits out a cell's whole timeout for an ``execute_reply`` that has
    arrived, on widget cells and on every kernel (jupyter/nbclient#312; ipykernel as often
    as the sandbox here); polling again finds it, so such a cell costs a second, not 120 s,
    and the times compare kernels, not that stall."""

    async def async_start_new_kernel_client(self) -> Any:
        kc = await super().async_start_new_kernel_client()
        channel = kc.shell_channel
        get_msg = channel.get_msg

        async def polling_get_msg(timeout: float | None = None) -> Any:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                remaining = SHELL_POLL if deadline is None else deadline - time.monotonic()
                try:
                    return await get_msg(timeout=max(0.0, min(SHELL_POLL, remaining)))
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise

        channel.get_msg = polling_get_msg
        return kc


def write_spec(root: Path, name: str) -> None:
    """Write kernels/NAME/kernel.json under ``root`` (as tests/kernel_client.py does)."""
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": ARGV[name], "display_name": name, "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


def first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


SVG_AS_IMG = re.compile(r'\s*<img src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]*"[^<>]*>\s*')
VEGA_DATA = re.compile(r"application/vnd\.vega(?:lite)?\.v\d+\+json")


def shown_as(data: dict[str, Any]) -> set[str]:
    """The MIME types of a bundle, a figure counted as what it shows where the sandbox relays it
    in the one type a sandbox can: an SVG (``image/svg+xml``; the sandbox's is an ``<img>`` of
    it in HTML, as inline SVG can run script) and an Altair chart (``chart:vega``; Vega-Lite
    data in the sandbox, HTML that loads Vega from a CDN and runs it on ipykernel). Both draw
    the same figure in JupyterLab."""
    kinds = set(data)
    html = data.get("text/html")
    if isinstance(html, list):
        html = "".join(html)
    if isinstance(html, str) and SVG_AS_IMG.fullmatch(html):
        kinds.discard("text/html")
        kinds.add("image/svg+xml")
    vega = {kind for kind in kinds if VEGA_DATA.fullmatch(kind)}
    if vega or (isinstance(html, str) and "vegaEmbed(" in html):
        kinds -= vega | {"text/html"}
        kinds.add("chart:vega")
    return kinds


def kinds_of(outputs: Sequence[Any], reply: dict[str, Any]) -> tuple[frozenset[str], list[str]]:
    """Return a cell's output kinds, and the filter notes of a stderr made only of them."""
    kinds: set[str] = set()
    stderr: list[str] = []
    for output in outputs:
        kind = output["output_type"]
        if kind == "stream":
            if output["name"] == "stderr":
                stderr.append(output["text"])
            else:
                kinds.add(output["name"])
        elif kind == "display_data":
            data = output.get("data", {})
            if EVENT_MIME not in data:
                kinds.update(shown_as(data))
        elif kind == "execute_result":
            kinds.add("execute_result")
            kinds.update(f"execute_result:{mime}" for mime in shown_as(output.get("data", {})))
        else:  # error, and anything new
            kinds.add(kind)
    for payload in reply.get("content", {}).get("payload", None) or ():
        kinds.add(f"payload:{payload.get('source', '?')}")
    lines = [line for line in "".join(stderr).splitlines() if line.strip()]
    notes = [line for line in lines if line.startswith(NOTE_PREFIX)]
    if len(notes) < len(lines):
        kinds.add("stderr")
        notes = []
    return frozenset(kinds), notes


def cell_error(outputs: Sequence[Any], reply: dict[str, Any]) -> tuple[str, str] | None:
    content = reply.get("content", {})
    errors = [o for o in outputs if o["output_type"] == "error"]
    if content.get("status", "ok") == "ok" and not errors:
        return None
    source = errors[-1] if errors else content
    return str(source.get("ename", content.get("status"))), first_line(str(source.get("evalue")))


def run_notebook(path: Path, kernel: str, workdir: Path, log: IO[str]) -> NotebookRun:
    """Execute the notebook ``path`` on ``kernel`` in a copy of its folder under ``workdir``."""
    folder = workdir / LABELS[kernel]
    shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("*.md", "*.toml"))
    copy = folder / path.name
    nb = nbformat.read(copy, as_version=4)  # type: ignore[no-untyped-call]
    run, started = NotebookRun(), [0.0]

    def on_cell_execute(cell: Any, cell_index: int) -> None:
        started[0] = time.perf_counter()

    def on_cell_executed(cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        seconds = time.perf_counter() - started[0]
        kinds, notes = kinds_of(cell.outputs, execute_reply)
        error = cell_error(cell.outputs, execute_reply)
        run.cells[cell_index] = CellRun(error, kinds, tuple(notes), seconds)
        event = execute_reply.get("metadata", {}).get("rewyn_kernel", {}).get("event", {})
        if event and not run.isolation:
            isolation = event.get("isolation") or {}
            run.isolation = ", ".join(
                f"{key} {isolation[key]}" for key in ("provider", "network") if key in isolation
            )

    client = PromptClient(
        nb,
        timeout=CELL_TIMEOUT,
        interrupt_on_timeout=True,
        allow_errors=True,
        kernel_name=kernel,
        resources={"metadata": {"path": str(folder)}},
        on_cell_execute=on_cell_execute,
        on_cell_executed=on_cell_executed,
    )
    began = time.perf_counter()
    # JupyterLab tells a kernel its notebook in JPY_SESSION_NAME (the sandbox kernel names its
    # staging folders and kept versions after it); the kernels inherit this environment.
    with patch.dict(os.environ, {"JPY_SESSION_NAME": str(copy)}):
        try:
            client.execute(stderr=log)
        except Exception as exc:  # a dead kernel, a start that failed: say so, go on
            run.failure = f"{type(exc).__name__}: {first_line(str(exc))}"
    run.seconds = time.perf_counter() - began
    if kernel == DOCKER_PLAIN:
        remove_control_containers()
    return run


def remove_control_containers() -> None:
    """Remove the docker controls left running (a hung kernel is killed through its client)."""
    found = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label={CONTROL_LABEL}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if found:
        subprocess.run(["docker", "rm", "-f", *found], capture_output=True, check=False)


def show_kinds(cell: CellRun | None) -> str:
    if cell is None:
        return "(not run)"
    return ", ".join(sorted(cell.kinds)) or "(no output)"


def show_error(cell: CellRun | None) -> str:
    return f"{cell.error[0]}: {cell.error[1]}".rstrip(": ") if cell and cell.error else ""


@dataclass
class Tally:
    cells: int = 0
    plain_ok: int = 0
    matching: int = 0  # outcome and kinds match, filter notes aside
    strict: int = 0  # ... and no filter note either
    both_failed: int = 0
    errors_alike: int = 0  # of those, same ename and output kinds
    plain_s: float = 0.0
    sandbox_s: float = 0.0

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "-"


def matches(a: CellRun | None, b: CellRun | None) -> bool:
    """Whether both kernels ran the cell with the same outcome and output kinds."""
    if a is None or b is None:
        return False
    return (a.error is None) == (b.error is None) and a.kinds == b.kinds


def compare(source: list[str], plain: NotebookRun, sandbox: NotebookRun) -> tuple[Tally, list[str]]:
    """Return the notebook's tally and the lines that describe its differences."""
    tally = Tally(plain_s=plain.seconds, sandbox_s=sandbox.seconds)
    mismatches: list[str] = []
    notes: list[str] = []
    both_failed: list[str] = []
    for index in sorted(set(plain.cells) | set(sandbox.cells)):
        a, b = plain.cells.get(index), sandbox.cells.get(index)
        tally.cells += 1
        head = f"[{index}] {first_line(source[index])[:60]!r}"
        same, counted = matches(a, b), a is not None and a.error is None
        if counted:
            tally.plain_ok += 1
            tally.matching += same
            tally.strict += same and b is not None and not b.notes
        elif a is not None and a.error and b is not None and b.error:
            differ = "" if a.error[0] == b.error[0] else f" (sandbox: {b.error[0]})"
            both_failed.append(f"[{index}] {a.error[0]}{differ}")
            tally.both_failed += 1
            tally.errors_alike += same and not differ
        if b is not None and b.notes:
            notes.append(f"  filter note {head}: {' | '.join(b.notes)}")
        if not same:
            aside = "" if counted else "  (failed on ipykernel: not in the ratios)"
            mismatches.append(f"  mismatch {head}{aside}")
            mismatches.append(f"      ipykernel: {show_kinds(a)}  {show_error(a)}".rstrip())
            mismatches.append(f"      sandbox:   {show_kinds(b)}  {show_error(b)}".rstrip())
    lines = [*mismatches, *notes]
    for label, run in (("ipykernel", plain), ("sandbox", sandbox)):
        if run.failure:
            lines.append(f"  {label} stopped early: {run.failure}")
    if both_failed:
        lines.append("  failed on both: " + ", ".join(both_failed))
    slower = [
        (b.seconds - a.seconds, index, a.seconds, b.seconds)
        for index, a in plain.cells.items()
        if (b := sandbox.cells.get(index)) is not None and b.seconds - a.seconds >= SLOWER_S
    ]
    if slower:
        cells = [f"[{i}] {a:.1f} -> {b:.1f} s" for _, i, a, b in sorted(slower, reverse=True)[:3]]
        lines.append("  slower on the sandbox: " + ", ".join(cells))
    return tally, lines


def row(*cells: object) -> None:
    print("{:<40} {:>5} {:>6} {:>5} {:>6} {:>6} {:>8} {:>8} {:>6}".format(*cells), flush=True)


def library_versions() -> str:
    found = []
    for name in LIBRARIES:
        if importlib.util.find_spec(name) is None:
            found.append(f"{name} MISSING")
            continue
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (no version)")
    return ", ".join(found)


def bench(
    paths: Sequence[Path], root: Path, log: IO[str], pair: tuple[str, str], folder: Path
) -> Tally:
    """Run ``paths`` on both kernels of ``pair``; print each notebook's differences and the
    table; return the totals."""
    plain_kernel, sandbox_kernel = pair
    if pair == PAIRS["default"]:
        print(f"interpreter (both kernels): {sys.executable}")
        print(f"libraries: {library_versions()}")
    else:
        print(f"image (both kernels): {DATASCIENCE_IMAGE}; the control is its own ipykernel")
    print(f"notebooks: {len(paths)} from {folder}; {CELL_TIMEOUT} s a cell; target >= {TARGET}")
    results: list[tuple[str, Tally]] = []
    began = time.perf_counter()
    for n, path in enumerate(paths):
        workdir = root / f"run-{LABELS[sandbox_kernel]}-{folder.name}-{n:02d}"
        nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
        source = [str(cell.source) for cell in nb.cells]
        plain = run_notebook(path, plain_kernel, workdir, log)
        sandbox = run_notebook(path, sandbox_kernel, workdir, log)
        tally, lines = compare(source, plain, sandbox)
        results.append((path.stem, tally))
        speed = f"{tally.sandbox_s / tally.plain_s:.2f}x" if tally.plain_s else "-"
        print(f"\n== {path.stem}: {tally.cells} cells run, {tally.plain_ok} ok on ipykernel")
        matching = f"{tally.matching}/{tally.plain_ok} ({ratio(tally.matching, tally.plain_ok)})"
        strict = f"{tally.strict}/{tally.plain_ok} ({ratio(tally.strict, tally.plain_ok)})"
        print(f"  matching {matching}, strict (filter notes count) {strict}")
        if tally.both_failed:
            alike = f"{tally.errors_alike}/{tally.both_failed}"
            print(f"  failing on both kernels alike (same ename and kinds): {alike}")
        cells_s = [sum(c.seconds for c in r.cells.values()) for r in (plain, sandbox)]
        print(
            f"  time: ipykernel {tally.plain_s:.1f} s (cells {cells_s[0]:.1f} s), "
            f"sandbox {tally.sandbox_s:.1f} s (cells {cells_s[1]:.1f} s), sandbox/ipykernel {speed}"
        )
        if sandbox.isolation:
            print(f"  sandbox isolation: {sandbox.isolation}")
        for line in lines:
            print(line)
    print()
    row("notebook", "cells", "ok ipk", "match", "ratio", "strict", "ipk s", "sbx s", "x")
    total = Tally()
    for name, tally in [*results, ("TOTAL", total)]:
        if name == "TOTAL":
            print("-" * 97)
        else:
            total.add(tally)
        speed = f"{tally.sandbox_s / tally.plain_s:.2f}" if tally.plain_s else "-"
        row(
            name[:40],
            tally.cells,
            tally.plain_ok,
            tally.matching,
            ratio(tally.matching, tally.plain_ok),
            ratio(tally.strict, tally.plain_ok),
            f"{tally.plain_s:.1f}",
            f"{tally.sandbox_s:.1f}",
            speed,
        )
    reached = (
        "reached" if total.plain_ok and total.matching / total.plain_ok >= TARGET else "NOT met"
    )
    wall = time.perf_counter() - began
    print(
        f"\nmatching ratio {ratio(total.matching, total.plain_ok)} (target >= {TARGET}: {reached})"
    )
    print(f"strict ratio {ratio(total.strict, total.plain_ok)} (filter notes count as differences)")
    alike = (
        f"{total.errors_alike}/{total.both_failed} ({ratio(total.errors_alike, total.both_failed)})"
    )
    print(f"cells failing on both kernels alike (same ename and kinds): {alike}; wall {wall:.1f} s")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("only", nargs="*", help="run the notebooks whose name contains one")
    parser.add_argument(
        "--corpus", choices=[*CORPORA, "all"], default="all", help="which corpus (all: every one)"
    )
    parser.add_argument(
        "--kernels", choices=[*PAIRS, "all"], default="all", help="which sandbox kernel"
    )
    args = parser.parse_args(argv)
    corpora = list(CORPORA) if args.corpus == "all" else [args.corpus]
    pairs = list(PAIRS) if args.kernels == "all" else [args.kernels]
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rewyn-bench-notebooks-") as folder:
        root = Path(folder)
        for name in ARGV:
            write_spec(root, name)
        with kernels_on_path(folder) as log:
            for pair in pairs:
                for corpus in corpora:
                    paths = [
                        p
                        for p in sorted(CORPORA[corpus].glob("*.ipynb"))
                        if not args.only or any(word in p.name for word in args.only)
                    ]
                    if not paths:
                        continue
                    print(f"\n##### corpus {corpus}, kernel {pair} #####")
                    total = bench(paths, root, log, PAIRS[pair], CORPORA[corpus])
                    summary.append(
                        f"{corpus} on {pair}: {total.matching}/{total.plain_ok} cells match "
                        f"({ratio(total.matching, total.plain_ok)}; strict "
                        f"{ratio(total.strict, total.plain_ok)}), sandbox/ipykernel time "
                        f"{total.sandbox_s / total.plain_s if total.plain_s else 0:.2f}x"
                    )
    if not summary:
        print(f"no notebook matches {args.only}", file=sys.stderr)
        return 2
    print("\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
