"""``rewyn-kernel review``: turn an agent's run log into a notebook, and re-run it to compare.

``review RUNLOG.jsonl -o REVIEW.ipynb`` writes a header cell that summarises the run, then one
cell per call the agent made, in call order (``_review_log`` reads the log, ``_review_cells``
makes the cells): the code it ran or the call it made, what the model was given (text and
images), failures as errors, and the records in ``cell.metadata["rewyn_kernel"]``. The notebook
says which kernel applies the run's limits and how to install it, and names a kernel installed
here so that JupyterLab opens it without asking. Bad lines of the log are reported as
``file:line: what is wrong``; everything valid is still converted.

``review NOTEBOOK.ipynb``, for a notebook an agent worked in beside a person (``rewyn-kernel mcp
--notebook``), writes its review instead: who wrote each cell, and what the person did with each
call they were asked to approve (``_review_live``).

``review --check REVIEW.ipynb`` replays the notebook on that kernel, each session on a kernel of
its own with the agent's inputs and timeouts (``_review_check``), appends each cell's new event
to its ``events`` and says in the event output whether the outcome differs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from traitlets import TraitError

from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.kernel._settings import settings_from_argv
from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.notebooks._review_check import Kernels, Tally, compare, replay, scratch_root
from rewyn_kernel.notebooks._review_live import NotALiveNotebook, review_live
from rewyn_kernel.notebooks._review_log import read_log, read_records, steps_of
from rewyn_kernel.notebooks._review_notebook import (
    DEFAULT_LIMITS,
    build_notebook,
    install_command,
    installed_kernels,
    kernel_name_for,
    kernel_to_open,
    limits_of,
    resolved,
    settings_for,
)
from rewyn_kernel.runtime.events import NetworkGrant
from rewyn_kernel.runtime.printable import printable

__all__ = [
    "DEFAULT_LIMITS",
    "add_parser",
    "build_notebook",
    "check",
    "compare",
    "convert",
    "install_command",
    "kernel_name_for",
    "limits_of",
    "main",
    "read_log",
    "write_notebook",
]


def write_notebook(nb: Any, path: Path) -> None:
    """Validate ``nb`` and write it atomically (a crash never leaves half a file)."""
    import nbformat  # (here: importing it takes seconds, and every command imports this)

    nbformat.validate(nb)
    node = nbformat.from_dict(nb)  # type: ignore[no-untyped-call]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(nbformat.writes(node) + "\n", encoding="utf-8")  # type: ignore[no-untyped-call]
    partial.replace(path)


def convert(
    runlog: Path, output: Path, *, kernel_name: str | None = None, install_kernel: bool = False
) -> int:
    """Write the review notebook of ``runlog``; return 1 if any line was bad, else 0."""
    records, problems = read_records(runlog)
    for problem in problems:
        print(f"rewyn-kernel review: {printable(problem)}", file=sys.stderr)
    steps = steps_of(records)
    nb = build_notebook(steps, problems, str(runlog), kernel_name, notebook=output.name)
    review = nb["metadata"][METADATA_KEY]["review"]
    name = review["kernel"]
    failed = 0
    if install_kernel:
        try:
            place = kernelspec.install(
                user=True, name=name, settings=settings_for(review["limits"])
            )
            print(f"Installed kernelspec {name} in {place}")
        except OSError as exc:
            print(f"rewyn-kernel review: could not install kernel {name}: {exc}", file=sys.stderr)
            failed = 1
    installed = installed_kernels()
    opened = kernel_to_open(name, installed)
    if opened != name:  # (the header says which it opens on, and why)
        nb = build_notebook(
            steps, problems, str(runlog), kernel_name, notebook=output.name, opened=opened
        )
    grants = [record for _, record in records if isinstance(record, NetworkGrant)]
    if grants:  # (the person's, from the page: what the code could reach from then on)
        nb["metadata"][METADATA_KEY]["review"]["grants"] = [
            grant.model_dump(mode="json") for grant in grants
        ]
    write_notebook(nb, output)
    for grant in grants:
        when = "live" if grant.live else "from the notebook's next kernel"
        print(
            f"At {grant.granted_at:%Y-%m-%d %H:%M:%S} the person allowed "
            f"{printable(grant.grant)} ({printable(', '.join(grant.hosts))}) for "
            f"{printable(grant.notebook)}, {when}"
        )
    print(
        f"Wrote {output}: {len(steps)} calls, {len(problems)} bad lines; kernel {name}"
        + (f" (it opens on {opened}, which is installed here)" if opened != name else "")
    )
    if name not in installed:
        print(f"Create its kernel with: {review['install_command']}")
    return 1 if problems or failed else 0


def live(source: Path, output: Path | None) -> int:
    """Review a notebook an agent and a person shared: who wrote each cell, what was approved,
    edited or rejected (``_review_live``)."""
    output = output or source.with_name(f"{source.stem}.review.ipynb")
    try:
        nb, lines = review_live(source, output)
    except NotALiveNotebook as exc:
        print(f"rewyn-kernel review: {exc}", file=sys.stderr)
        return 2
    write_notebook(nb, output)
    print(f"Wrote {output}: " + "; ".join(lines))
    return 0


# -- re-running and comparing -------------------------------------------------------------------


def _kernel_mismatches(name: str, limits: dict[str, Any] | None) -> list[str]:
    """Say where kernel ``name``'s settings (from its kernel.json argv) differ from ``limits``.

    Raise ValueError if ``name`` is not the sandbox kernel: the agent's code never runs outside.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        argv = KernelSpecManager().get_kernel_spec(name).argv
    except NoSuchKernel:  # (before anything is written: no empty *.checked.ipynb)
        command = install_command(name, limits) if limits else f"rewyn-kernel install --name {name}"
        raise ValueError(
            f"kernel {name} is not installed: create it with {command} (nothing was written)"
        ) from None
    if not kernelspec.launches_sandbox_kernel(list(argv)):
        raise ValueError(
            f"kernel {name} is not the rewyn-kernel sandbox kernel: the agent's code is only "
            "re-run in a sandbox"
        )
    try:
        settings = resolved(settings_from_argv(argv).model_dump(mode="json"))
    except (ValueError, TraitError) as exc:
        return [f"the settings of kernel {name} cannot be read ({exc})"]
    return [
        f"{key} {settings.get(key)} (recorded {value})"
        for key, value in (limits or {}).items()
        if settings.get(key) != value
    ]


def check(path: Path, output: Path | None = None, *, kernel_name: str | None = None) -> int:
    """Replay review notebook ``path`` on the run's kernel and mark each cell that differs.

    The kernel is ``kernel_name`` or the run's, which the notebook records (in a review written
    before it did, its kernelspec's); it must be the sandbox kernel, and the run's own must
    apply the recorded limits (one named here only gets a warning). Writes the result to
    ``output`` (default: ``path``), also when the run stops early. Return 0 when every replayed
    cell matched, 1 when any differed or the run failed or was refused.
    """
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel

    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)  # type: ignore[no-untyped-call]
    review = nb.metadata.setdefault(METADATA_KEY, {}).setdefault("review", {})
    name = kernel_name or review.get("kernel") or nb.metadata.get("kernelspec", {}).get("name")
    if not name:
        print(f"rewyn-kernel review: {path} names no kernel: pass --kernel-name", file=sys.stderr)
        return 1
    try:
        mismatches = _kernel_mismatches(name, review.get("limits"))
    except ValueError as exc:
        print(f"rewyn-kernel review: {exc}", file=sys.stderr)
        return 1
    if mismatches and kernel_name is None:  # a kernel chosen by name is the reviewer's call
        print(
            f"rewyn-kernel review: kernel {name} does not apply the recorded limits "
            f"({'; '.join(mismatches)}): install it again with "
            f"{install_command(name, review['limits'])}, or choose one with --kernel-name",
            file=sys.stderr,
        )
        return 1
    for mismatch in mismatches:
        print(
            f"warning: kernel {name} does not apply the recorded limits: {mismatch}",
            file=sys.stderr,
        )
    tally = Tally()
    timeout = (review.get("limits") or {}).get("timeout")
    error = ""

    async def run(root: Path) -> None:
        # The sandbox enforces each call's timeout; nbclient's own is only a backstop.
        kernels = Kernels(nb, name, None if timeout is None else timeout + 60, root)
        try:
            await replay(nb, kernels, tally, lambda line: print(printable(line), flush=True))
        finally:
            await kernels.aclose()

    try:
        with scratch_root() as root:
            asyncio.run(run(root))
    except NoSuchKernel:
        limits = review.get("limits")
        command = install_command(name, limits) if limits else f"rewyn-kernel install --name {name}"
        error = f"kernel {name} is not installed: create it with {command}"
    except KeyboardInterrupt:
        error = "interrupted"
    except Exception as exc:  # the kernel died or would not start: keep what ran
        error = f"the re-run stopped: {type(exc).__name__}: {exc}"
    finally:
        review["last_check"] = {
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "kernel": name,
            "kernel_mismatches": mismatches,
            "checked": tally.checked,
            "differing": tally.differing,
            "not_replayed": tally.not_replayed,
            "not_written": tally.unwritten,
            "error": error,
        }
        write_notebook(nb, output or path)
    if error:
        print(f"rewyn-kernel review: {printable(error, lines=True)}", file=sys.stderr)
    if tally.unwritten:
        print(
            "warning: not written again, as the log does not hold them whole: "
            f"{', '.join(map(printable, tally.unwritten))} (the cells after them may differ "
            "for it)",
            file=sys.stderr,
        )
    print(
        f"{tally.checked - len(tally.differing)} of {tally.checked} cells as recorded "
        f"({tally.not_replayed} not replayed: they ran nothing); wrote {output or path}"
    )
    return 1 if tally.differing or error else 0


# -- the command --------------------------------------------------------------------------------


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``review`` subcommand to ``commands``; return its parser."""
    parser = commands.add_parser(
        "review",
        help="turn an agent's run log into a notebook to review, or re-run one (--check), or "
        "review a notebook an agent and a person shared",
        description="Turn RUNLOG.jsonl (SANDBOX_EXECUTED events) into a notebook: a summary, "
        "then one cell per execution with the code and the outputs the agent saw. Exit code 1 "
        "if a line of the log could not be read (the notebook is still written). With --check, "
        "re-run a review notebook on its kernel and mark each cell whose outcome differs "
        "from the recorded run (exit code 1 if any does). Given a notebook an agent worked in "
        "(rewyn-kernel mcp --notebook), write its review: who wrote each cell, and which "
        "calls the person approved, edited or rejected.",
    )
    parser.add_argument(
        "source",
        type=Path,
        metavar="RUNLOG.jsonl|NOTEBOOK.ipynb",
        help="a run log (the events of a kernel, a run or an MCP server), or a notebook an "
        "agent and a person shared (--notebook)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="OUT.ipynb",
        help="where to write (default: RUNLOG.review.ipynb; with --check, REVIEW.checked.ipynb, "
        "so the outputs the agent saw stay in REVIEW.ipynb)",
    )
    parser.add_argument(
        "--check", action="store_true", help="re-run REVIEW.ipynb and compare with the record"
    )
    parser.add_argument(
        "--kernel-name",
        metavar="NAME",
        help="kernelspec to name in the notebook, or to re-run on with --check (default: "
        "rewyn-sandbox for the default limits, else rewyn-review-<hash of the limits>)",
    )
    parser.add_argument(
        "--install-kernel",
        action="store_true",
        help="also install that kernelspec for this user, with the run's limits",
    )
    return parser


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``review`` with the options ``add_parser`` parsed; bad options end via ``parser``."""
    if args.kernel_name is not None:
        try:
            args.kernel_name = kernelspec.normalize_kernel_name(args.kernel_name)
        except ValueError as exc:
            parser.error(f"--kernel-name: {exc}")
    if not args.source.is_file():
        parser.error(f"{args.source}: no such file")
    if args.source.suffix == ".ipynb" and not args.check:
        return live(args.source, args.output)
    if args.check:
        if args.install_kernel:
            parser.error("--install-kernel: only when converting a run log, not with --check")
        output = args.output or args.source.with_name(f"{args.source.stem}.checked.ipynb")
        return check(args.source, output, kernel_name=args.kernel_name)
    output = args.output or args.source.with_name(f"{args.source.stem}.review.ipynb")
    return convert(
        args.source, output, kernel_name=args.kernel_name, install_kernel=args.install_kernel
    )
