"""``rewyn-kernel review``: turn an agent's run log into a notebook, and re-run it to compare.

``review RUNLOG.jsonl -o REVIEW.ipynb`` writes a header cell that summarises the run, then one
code cell per SANDBOX_EXECUTED event in the order of the log's lines: the code the agent ran, the
outputs it saw (rebuilt from the event's excerpts), the persisted event output, and the event in
``cell.metadata["rewyn_kernel"] = {"events": [event], "recorded": True}``. The notebook names a
kernelspec with the run's limits and says how to install it. Bad lines of the log are reported
as ``file:line: what is wrong``; everything valid is still converted.

``review --check REVIEW.ipynb`` executes the notebook on that kernel with nbclient, appends each
cell's new event to its ``events`` and says in the event output whether the outcome differs.
How the notebook itself is made (header, outputs, limits, kernel name) is in ``_review_notebook``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from traitlets import TraitError

from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.kernel._settings import settings_from_argv
from rewyn_kernel.kernel.record import EVENT_MIME, METADATA_KEY, event_output, reply_event
from rewyn_kernel.kernel.record import summary_line as event_summary_line
from rewyn_kernel.notebooks._review_notebook import (
    DEFAULT_LIMITS,
    Line,
    build_notebook,
    install_command,
    kernel_name_for,
    limits_of,
    resolved,
    settings_for,
)
from rewyn_kernel.runtime.events import EVENT_TYPE, TOOL_RESULT_TYPE, SandboxEvent, ToolResult
from rewyn_kernel.runtime.host.protocol import scrub

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


# -- reading the log ----------------------------------------------------------------------------


def read_log(
    path: str | Path, given: dict[str, ToolResult] | None = None
) -> tuple[list[Line], list[str]]:
    """Return the events of a run log with their line numbers, and a problem per bad line.

    Each problem reads ``file:line: what is wrong``. A last line without a newline that is not
    complete JSON is reported as cut off (a writer killed mid-line, or a log copied mid-write).
    What tools gave the model (TOOL_RESULT lines) goes into ``given``, by execution id.
    """
    events: list[Line] = []
    problems: list[str] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                item = _parse(raw)
                if isinstance(item, ToolResult):
                    if given is not None:
                        given[item.execution_id] = item
                    continue
                events.append((number, item))
            except ValueError as exc:
                if not raw.endswith(b"\n") and isinstance(exc, _NotJson):
                    exc = ValueError(
                        "the last line is cut off: no newline at its end and incomplete JSON "
                        "(the log was copied while being written, or its writer was killed)"
                    )
                problems.append(f"{where}: {exc}")
    return events, problems


class _NotJson(ValueError):
    """A line that does not parse as JSON."""


def _parse(raw: bytes) -> SandboxEvent | ToolResult:
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
    try:
        # A lone surrogate (valid as a JSON escape) cannot be written to a notebook: U+FFFD.
        data = scrub(json.loads(text))
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        hint = "; the line ends before the JSON does" if cut else ""
        raise _NotJson(
            f"not JSON ({exc.msg.removesuffix(' at')} at column {exc.colno}{hint})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an event object")  # noqa: TRY004
    if data.get("type") == TOOL_RESULT_TYPE:
        try:
            return ToolResult.model_validate(data)
        except ValidationError as exc:
            raise ValueError(
                f"not a valid {TOOL_RESULT_TYPE} line: {exc.errors()[0]['msg']}"
            ) from None
    if data.get("type") != EVENT_TYPE:
        kind = repr(data["type"])[:60] if "type" in data else "no type"
        raise ValueError(f"an event of {kind}, not {EVENT_TYPE}")
    try:
        return SandboxEvent.model_validate(data)
    except ValidationError as exc:
        errors = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        more = f"; and {len(errors) - 3} more" if len(errors) > 3 else ""
        raise ValueError(f"not a valid {EVENT_TYPE} event: {'; '.join(errors[:3])}{more}") from None


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
    given: dict[str, ToolResult] = {}
    lines, problems = read_log(runlog, given)
    for problem in problems:
        print(f"rewyn-kernel review: {problem}", file=sys.stderr)
    nb = build_notebook(
        lines, problems, str(runlog), kernel_name, notebook=output.name, given=given
    )
    write_notebook(nb, output)
    review = nb["metadata"][METADATA_KEY]["review"]
    name = nb["metadata"]["kernelspec"]["name"]
    print(f"Wrote {output}: {len(lines)} executions, {len(problems)} bad lines; kernel {name}")
    if install_kernel:
        try:
            place = kernelspec.install(
                user=True, name=name, settings=settings_for(review["limits"])
            )
        except OSError as exc:
            print(f"rewyn-kernel review: could not install kernel {name}: {exc}", file=sys.stderr)
            return 1
        print(f"Installed kernelspec {name} in {place}")
    else:
        print(f"Create its kernel with: {review['install_command']}")
    return 1 if problems else 0


# -- re-running and comparing -------------------------------------------------------------------


def compare(recorded: SandboxEvent, rerun: SandboxEvent) -> list[str]:
    """Say how ``rerun``'s outcome differs from ``recorded``'s; [] when it does not.

    Compared: exit code, ending, the stdout and stderr excerpts (and byte counts), the error's
    name and the text of rich outputs. Not compared: durations, ids, traceback details.
    """
    differences = []
    if rerun.exit_code != recorded.exit_code:
        differences.append(f"exit {rerun.exit_code} (was {recorded.exit_code})")
    if rerun.ending != recorded.ending:
        differences.append(f"ending {rerun.ending} (was {recorded.ending})")
    for name in ("stdout", "stderr"):
        new, old = getattr(rerun, f"{name}_bytes"), getattr(recorded, f"{name}_bytes")
        if getattr(rerun, name) != getattr(recorded, name) or new != old:
            differences.append(
                f"{name} differs" + (f" ({new:,} bytes, was {old:,})" * (new != old))
            )
    new_error = rerun.error.ename if rerun.error else "none"
    old_error = recorded.error.ename if recorded.error else "none"
    if new_error != old_error:
        differences.append(f"error {new_error} (was {old_error})")
    if [(o.output_type, o.text) for o in rerun.outputs] != [
        (o.output_type, o.text) for o in recorded.outputs
    ]:
        differences.append("rich outputs differ")
    return differences


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


def _mark(cell: Any, reply: dict[str, Any]) -> tuple[str, bool] | None:
    """Append the re-run's event to ``cell`` and mark its event output.

    Return the verdict and whether the outcome differs, or None for a cell with no recorded
    event (one the reviewer added).
    """
    import nbformat

    data = reply_event(reply)
    record = cell.metadata.setdefault(METADATA_KEY, {})
    recorded_data = record.get("events", [None])[0] if record.get("recorded") else None
    if data is not None:
        record.setdefault("events", []).append(data)
    if recorded_data is None:
        return None
    if data is None:
        return "the re-run sent no SANDBOX_EXECUTED event: is this the sandbox kernel?", True
    try:
        recorded = SandboxEvent.model_validate(recorded_data)
        rerun = SandboxEvent.model_validate(data)
    except ValidationError as exc:
        return f"an event in this cell is not valid: {exc.error_count()} errors", True
    differences = compare(recorded, rerun)
    code_changed = rerun.code_hash != recorded.code_hash
    record["check"] = {"differences": differences, "code_changed": code_changed}
    verdict = ("code changed since the recording; " if code_changed else "") + (
        f"differs from the recorded run: {'; '.join(differences)}"
        if differences
        else "same as the recorded run"
    )
    line = f"{event_summary_line(rerun)} — {verdict}"
    for output in cell.outputs:
        if output.get("output_type") == "display_data" and EVENT_MIME in output.get("data", {}):
            output["data"]["text/plain"] = line
            break
    else:  # the kernel runs with event_output off: add the output it would have written
        output_data, output_metadata = event_output(rerun)
        output_data["text/plain"] = line
        node = {"output_type": "display_data", "data": output_data, "metadata": output_metadata}
        cell.outputs.append(nbformat.from_dict(node))  # type: ignore[no-untyped-call]
    return verdict, bool(differences)


def check(path: Path, output: Path | None = None, *, kernel_name: str | None = None) -> int:
    """Re-run review notebook ``path`` on its kernel and mark each cell that differs.

    The kernel is ``kernel_name`` or the notebook's; it must be the sandbox kernel, and the
    notebook's own must apply the recorded limits (one named here only gets a warning). Writes
    the result to ``output`` (default: ``path``), also when the run stops early. Return 0 when
    every recorded cell matched, 1 when any differed or the run failed or was refused.
    """
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient

    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)  # type: ignore[no-untyped-call]
    review = nb.metadata.setdefault(METADATA_KEY, {}).setdefault("review", {})
    name = kernel_name or nb.metadata.get("kernelspec", {}).get("name")
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
    differing: list[str] = []
    checked = 0

    def on_cell_executed(**kwargs: Any) -> None:
        nonlocal checked
        cell, where = kwargs["cell"], kwargs["cell"].get("id", str(kwargs["cell_index"]))
        marked = _mark(cell, kwargs["execute_reply"])
        if marked is not None:
            checked += 1
            differing.extend([where] * marked[1])
            print(f"cell {where}: {marked[0]}", flush=True)

    timeout = (review.get("limits") or {}).get("timeout")
    client = NotebookClient(
        nb,
        kernel_name=name,
        # The sandbox enforces the recorded timeout; nbclient's own is only a backstop.
        timeout=None if timeout is None else int(timeout) + 60,
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent.resolve())}},
        on_cell_executed=on_cell_executed,
    )
    error = ""
    try:
        client.execute()
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
            "checked": checked,
            "differing": differing,
            "error": error,
        }
        write_notebook(nb, output or path)
    if error:
        print(f"rewyn-kernel review: {error}", file=sys.stderr)
    print(f"{checked - len(differing)} of {checked} cells as recorded; wrote {output or path}")
    return 1 if differing or error else 0


# -- the command --------------------------------------------------------------------------------


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``review`` subcommand to ``commands``; return its parser."""
    parser = commands.add_parser(
        "review",
        help="turn an agent's run log into a notebook to review, or re-run one (--check)",
        description="Turn RUNLOG.jsonl (SANDBOX_EXECUTED events) into a notebook: a summary, "
        "then one cell per execution with the code and the outputs the agent saw. Exit code 1 "
        "if a line of the log could not be read (the notebook is still written). With --check, "
        "re-run a review notebook on its kernel and mark each cell whose outcome differs "
        "from the recorded run (exit code 1 if any does).",
    )
    parser.add_argument("source", type=Path, metavar="RUNLOG.jsonl|REVIEW.ipynb")
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
    if args.check:
        if args.install_kernel:
            parser.error("--install-kernel: only when converting a run log, not with --check")
        output = args.output or args.source.with_name(f"{args.source.stem}.checked.ipynb")
        return check(args.source, output, kernel_name=args.kernel_name)
    output = args.output or args.source.with_name(f"{args.source.stem}.review.ipynb")
    return convert(
        args.source, output, kernel_name=args.kernel_name, install_kernel=args.install_kernel
    )
