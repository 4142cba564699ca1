"""The review notebook of a run log's events: header, cells, outputs, kernelspec and limits.

Everything shown in the header comes from a run log, which an agent's code could have shaped:
values go into Markdown code spans or are HTML-escaped, so it renders as text, never as markup.
"""

from __future__ import annotations

import hashlib
import html
import json
import shlex
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.kernel.record import ERROR_NAMES, METADATA_KEY, event_json, event_output
from rewyn_kernel.runtime._result import without_traceback
from rewyn_kernel.runtime.events import SandboxEvent, ToolResult
from rewyn_kernel.runtime.sandbox import SandboxSpec

Line = tuple[int, SandboxEvent]
"""An event and the number of the log line it came from."""


LIMIT_FIELDS = (
    "provider",
    "timeout",
    "memory_limit_mb",
    "pids_limit",
    "disk_limit_mb",
    "network",
    "ipython",
)
NULLABLE = ("timeout", "memory_limit_mb", "pids_limit", "disk_limit_mb")
"""Limits where none means no limit (and not the kernel's default)."""
DEFAULT_LIMITS: dict[str, Any] = {
    name: kernelspec.KernelSettings.model_fields[name].default for name in LIMIT_FIELDS
}
"""The limits of the shipped ``rewyn-sandbox`` kernelspec (a kernel with no flags)."""
RECORDED_DEFAULTS: dict[str, Any] = {"ipython": False, "pids_limit": None}
"""What an event written before its spec named a setting ran with (sessions ran plain Python,
under no task limit)."""


# -- limits and the kernel that applies them ----------------------------------------------------


def limits_of(event: SandboxEvent) -> dict[str, Any] | None:
    """Return the kernel settings that reproduce ``event``'s limits, or None if unknown.

    From ``event.provider``: "bubblewrap", "subprocess", or "container/CLI[+OCI]" (the
    container runtime and OCI runtime; the image is not recorded). From ``event.spec``:
    timeout, memory_limit_mb, pids_limit, disk_limit_mb, network and ipython (what ran the
    code: a re-run's tracebacks and displays look alike only on the same). None when the
    provider is another kind or a value is out of the kernel's bounds.
    """
    limits: dict[str, Any] = {"provider": event.provider}
    if event.provider.startswith("container/"):
        cli, _, oci = event.provider.removeprefix("container/").partition("+")
        limits.update(provider="container", container_runtime=cli, oci_runtime=oci or None)
    for name in LIMIT_FIELDS[1:]:
        limits[name] = event.spec.get(name, RECORDED_DEFAULTS.get(name, DEFAULT_LIMITS[name]))
    try:
        settings = kernelspec.KernelSettings.model_validate(limits)
    except ValidationError:
        return None
    return settings.model_dump(mode="json", include=set(limits))


def resolved(limits: dict[str, Any]) -> dict[str, Any]:
    """``limits`` with provider "auto" as the provider it means on this machine (a kernel set
    to auto applies the limits of a run recorded on bubblewrap here, or on subprocess where
    bubblewrap cannot run)."""
    if limits.get("provider") != "auto":
        return limits
    from rewyn_kernel.runtime import local_provider

    return {**limits, "provider": local_provider().name}


def kernel_name_for(limits: dict[str, Any]) -> str:
    """Return ``rewyn-sandbox`` for the default limits, else ``rewyn-review-<hash of limits>``.

    The name is a function of the limits, so reviews of runs under the same policy share one
    kernel and installing it again is harmless.
    """
    if resolved(limits) == resolved(DEFAULT_LIMITS):
        return kernelspec.KERNEL_NAME
    digest = hashlib.sha256(json.dumps(limits, sort_keys=True).encode()).hexdigest()
    return f"rewyn-review-{digest[:8]}"


def settings_for(limits: dict[str, Any]) -> kernelspec.KernelSettings:
    """Return the kernel settings that pin ``limits`` (none included, for those that have no
    limit: the kernel's default would apply one)."""
    return kernelspec.KernelSettings.model_validate(
        {key: value for key, value in limits.items() if value is not None or key in NULLABLE}
    )


def _limit(value: object) -> object:
    """A limit as its flag writes it: none is written, as it differs from the default."""
    return "none" if value is None else value


def install_command(name: str, limits: dict[str, Any]) -> str:
    """Return the ``rewyn-kernel install`` command that creates kernel ``name`` with ``limits``."""
    flags = {
        "--provider": limits["provider"],
        "--runtime": limits.get("container_runtime"),
        "--oci-runtime": limits.get("oci_runtime"),
        "--timeout": "none" if limits["timeout"] is None else f"{limits['timeout']:g}",
        "--memory": _limit(limits.get("memory_limit_mb")),
        "--pids": _limit(limits.get("pids_limit")),
        "--disk": _limit(limits.get("disk_limit_mb")),
        "--network": limits["network"],
    }
    words = ["rewyn-kernel", "install", "--user", "--name", name]
    words += [
        str(part) for flag, value in flags.items() if value is not None for part in (flag, value)
    ]
    if limits.get("ipython") is False:
        words.append("--no-ipython")
    return shlex.join(words)


# -- the header --------------------------------------------------------------------------------


def _code(text: object) -> str:
    """Show text from the log in a Markdown code span (where no HTML or Markdown applies)."""
    clean = " ".join(str(text).split()).replace("`", "'")[:200]
    return f"`{clean}`" if clean else "``"


def _text(text: str) -> str:
    """Show text from the log as Markdown prose, with HTML escaped."""
    return html.escape(" ".join(text.split())[:300])


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:,.0f} ms"
    if seconds < 120:
        return f"{seconds:,.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _some(values: Iterable[str], limit: int = 5) -> str:
    items = sorted(values)
    shown = ", ".join(_code(value) for value in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


_HEADER = """\
# Review of an agent's run: {source}

One code cell per execution, in the order of the log's lines (the log is append-only, so that is
the order the executions finished in), under a heading per session when there were several. Each
cell holds the code the agent ran and the outputs it saw: what the tool gave the model, where the
log has it (a `TOOL_RESULT` line: `sandbox_tool` and `rewyn-kernel mcp` write one), else rebuilt
from the event's excerpts. Its last output is the event's summary; the event itself is in the
cell's metadata (`{key}`).

{facts}

## Re-running a step under the same policy

This notebook's kernel is {name}: the sandbox kernel with the limits of the run, which this
command creates:

    {command}

Then run any cell, or re-run them all and compare with the record:
{check}. The kernel keeps state from cell to cell in one session.
{caveats}

## What the outputs are

Excerpts kept by the run log: stdout and stderr up to about 8 KiB each (head and tail; the event
has the byte counts), and only the `text/plain` of rich outputs (images, HTML and other types are
not in the event; each output's metadata lists the types it had). The event does not keep how the
outputs interleaved, so a cell shows stdout, stderr, rich outputs, then the error.
"""


def _facts(lines: list[Line], problems: list[str]) -> list[str]:
    """The header's list: executions, endings, failures, providers, time, unreadable lines."""
    events = [event for _, event in lines]
    sandboxes, sessions = (
        {getattr(e, key) for e in events} for key in ("sandbox_id", "session_id")
    )
    facts = [
        f"- **Executions:** {len(events)} in {len(sandboxes)} sandbox(es) ({_some(sandboxes)}) "
        f"and {len(sessions)} session(s) ({_some(sessions)})"
    ]
    if events:
        endings = Counter(event.ending for event in events)
        failed = [
            f"line {number}: {e.ending}" + (f" ({_code(e.error.ename)})" if e.error else "")
            for number, e in lines
            if not e.ok
        ]
        facts += [
            "- **Endings:** " + " · ".join(f"{ending} {n}" for ending, n in endings.items()),
            f"- **Not ok:** {len(failed)} of {len(events)}, {endings['timeout']} timed out"
            + "".join(f"; {item}" for item in failed),
        ]
        for provider, count in Counter(event.provider for event in events).items():
            iso = next(e.isolation for e in events if e.provider == provider)
            described = "isolation not recorded"
            if iso is not None:
                yes = {True: "yes", False: "no"}
                described = (
                    f"network {iso.network}, own PID namespace {yes[iso.pid_namespace]}, user "
                    f"namespace {yes[iso.user_namespace]}, "
                    f"memory {_text(iso.memory or 'not capped')}, "
                    f"filesystem: {_text(iso.filesystem)}"
                    + "".join(f"; note: {_text(note)}" for note in iso.notes)
                )
            facts.append(f"- **Provider** {_code(provider)} ({count} executions): {described}")
        start = min(event.started_at for event in events)
        end = max(event.finished_at for event in events)
        busy = sum(event.duration_ms for event in events) / 1000
        changed = [e.files for e in events if e.files is not None and any(e.files.counts.values())]
        if changed:
            total = Counter[str]()
            for files in changed:
                total.update({kind: n for kind, n in files.counts.items() if n})
            versions = sum(len(files.versions) for files in changed)
            facts.append(
                f"- **Workspace files:** {len(changed)} execution(s) changed files: "
                + ", ".join(f"{n} {kind}" for kind, n in sorted(total.items()))
                + f"; {versions} set(s) of earlier versions kept (`rewyn-kernel files` "
                "restores them)"
            )
        facts.append(
            f"- **Time:** {start.isoformat(timespec='seconds')} to "
            f"{end.isoformat(timespec='seconds')} ({_duration((end - start).total_seconds())}); "
            f"the executions took {_duration(busy)} in all"
        )
    if problems:
        facts.append(f"- **Lines not converted:** {len(problems)}")
        facts += [f"  - {_code(problem)}" for problem in problems[:20]]
    return facts


def _caveats(lines: list[Line], limits: dict[str, Any], other: list[int]) -> list[str]:
    """What a re-run on this kernel does not reproduce."""
    caveats = []
    if other:
        numbers = ", ".join(map(str, other[:20])) + (" ..." if len(other) > 20 else "")
        caveats.append(
            f"Line{'s' * (len(other) > 1)} {numbers} ran under other limits (see the events)."
        )
    if limits["provider"] == "container":
        caveats.append(
            "The events do not record the container image: add `--image IMAGE` to the command "
            "if the run did not use the kernel's default."
        )
    default = SandboxSpec().summary()
    keys = ("env_names", "inherit_env", "output_limit_bytes", "workdir")
    differing = sorted({key for _, e in lines for key in keys if e.spec.get(key) != default[key]})
    if differing:
        caveats.append(
            f"Not carried over by the kernelspec: {', '.join(differing)} (see the events; "
            "environment values are never recorded)."
        )
    return caveats


# -- the notebook -------------------------------------------------------------------------------


def _outputs(event: SandboxEvent) -> list[dict[str, Any]]:
    """Rebuild the outputs the agent saw, then the persisted event output."""
    # stderr ends with the traceback, as Python prints it; the error output shows it.
    stderr = without_traceback(event.stderr, event.error)
    outputs: list[dict[str, Any]] = [
        {"output_type": "stream", "name": name, "text": text}
        for name, text in (("stdout", event.stdout), ("stderr", stderr))
        if text
    ]
    for rich in event.outputs:
        text = rich.text
        if not text and "text/plain" not in rich.mime_types:
            text = f"[{', '.join(rich.mime_types)}: the run log keeps only text/plain]"
        output: dict[str, Any] = {
            "output_type": rich.output_type,
            "data": {"text/plain": text},
            "metadata": {METADATA_KEY: {"mime_types": list(rich.mime_types)}},
        }
        if rich.output_type == "execute_result":
            output["execution_count"] = event.execution_count
        outputs.append(output)
    if event.error is not None or not event.ok:
        ename = event.error.ename if event.error else ERROR_NAMES.get(event.ending, "SandboxError")
        evalue = event.error.evalue if event.error else event.message or str(event.exit_code)
        traceback = list(event.error.traceback) if event.error else [f"{ename}: {evalue}"]
        outputs.append(
            {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback}
        )
    files = _files_output(event)
    if files is not None:
        outputs.append(files)
    data, metadata = event_output(event)
    outputs.append({"output_type": "display_data", "data": data, "metadata": metadata})
    return outputs


def _files_output(event: SandboxEvent) -> dict[str, Any] | None:
    """What the execution changed in its workspace, as a text output; None if nothing."""
    files = event.files
    if files is None or not any(files.counts.values()):
        return None
    lines = ["Files changed in the workspace when this execution ended:"]
    for kind in ("created", "changed", "deleted", "refused"):
        listed = getattr(files, kind)
        count = files.counts.get(kind, len(listed))
        if count:
            more = f" (and {count - len(listed)} more)" if count > len(listed) else ""
            lines.append(f"  {kind} ({count}): {', '.join(listed)}{more}")
    if files.versions:
        lines.append(f"  earlier versions kept: {', '.join(files.versions)} (rewyn-kernel files)")
    mark = {METADATA_KEY: {"files": True}}
    return {
        "output_type": "display_data",
        "data": {"text/plain": "\n".join(lines)},
        "metadata": mark,
    }


def _given_outputs(given: ToolResult) -> list[dict[str, Any]]:
    """What the tool gave the model, as outputs: ``sandbox_tool``'s JSON payload as its
    streams, error and outputs (exactly as shortened for the model); any other tool's text as
    it was read."""
    mark = {METADATA_KEY: {"given_to_model": True, "tool": given.tool}}
    try:
        payload = json.loads(given.text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("stdout"), str):
        data = {"text/plain": given.text}
        return [{"output_type": "display_data", "data": data, "metadata": mark}]
    outputs: list[dict[str, Any]] = [
        {"output_type": "stream", "name": name, "text": payload[name]}
        for name in ("stdout", "stderr")
        if isinstance(payload.get(name), str) and payload[name]
    ]
    for text in payload.get("outputs") or []:
        outputs.append(
            {"output_type": "display_data", "data": {"text/plain": str(text)}, "metadata": mark}
        )
    error = payload.get("error")
    if isinstance(error, dict):
        outputs.append(
            {
                "output_type": "error",
                "ename": str(error.get("ename", "")),
                "evalue": str(error.get("evalue", "")),
                "traceback": str(error.get("traceback", "")).splitlines(),
            }
        )
    return outputs


def _code_cell(number: int, event: SandboxEvent, given: ToolResult | None = None) -> dict[str, Any]:
    source = event.code
    if event.code_truncated:
        source = (
            f"# rewyn-kernel review: the run log kept only the start and end of this code "
            f"({event.code_bytes:,} bytes in all; see the '[... characters omitted ...]' line), "
            "so it does not run as the agent's did.\n" + source
        )
    metadata: dict[str, Any] = {"events": [event_json(event)], "recorded": True}
    outputs = _outputs(event)
    if given is not None:  # what the model read, then the event's summary
        metadata["given"] = given.model_dump(mode="json")
        files = _files_output(event)
        outputs = [*_given_outputs(given), *([files] if files else []), outputs[-1]]
    return {
        "cell_type": "code",
        "id": f"line-{number}",
        "metadata": {METADATA_KEY: metadata},
        "source": source,
        "outputs": outputs,
        "execution_count": event.execution_count,
    }


def _cells(lines: list[Line], given: dict[str, ToolResult]) -> list[dict[str, Any]]:
    """The code cells in the log's order; with more than one session, grouped by session
    (in the order each first ran), each under a heading that names it."""
    sessions: dict[str, list[Line]] = {}
    for line in lines:
        sessions.setdefault(line[1].session_id, []).append(line)
    if len(sessions) <= 1:
        return [_code_cell(n, event, given.get(event.id)) for n, event in lines]
    cells: list[dict[str, Any]] = []
    for index, (session_id, members) in enumerate(sessions.items(), 1):
        names = {
            str(given[e.id].session) for _, e in members if e.id in given and given[e.id].session
        }
        called = f" ({_code(', '.join(sorted(names)))})" if names else ""
        heading = (
            f"## Session {index}{called}: {len(members)} execution(s)\n\n"
            f"Session {_code(session_id)} of sandbox {_code(members[0][1].sandbox_id)}; each "
            "session kept its own variables."
        )
        cells.append(
            {"cell_type": "markdown", "id": f"session-{index}", "metadata": {}, "source": heading}
        )
        cells += [_code_cell(n, event, given.get(event.id)) for n, event in members]
    return cells


def build_notebook(
    lines: list[Line],
    problems: list[str],
    source: str,
    kernel_name: str | None = None,
    *,
    notebook: str = "REVIEW.ipynb",
    given: dict[str, ToolResult] | None = None,
) -> dict[str, Any]:
    """Return the review notebook (nbformat 4.5 JSON data) for the events of a run log.

    Its kernelspec is ``kernel_name`` or the name ``kernel_name_for`` gives the run's limits:
    those most of its executions ran under (the first seen, on a tie). ``notebook`` is the file
    name the header's re-run command uses.
    """
    seen = Counter(
        json.dumps(limits) for _, event in lines if (limits := limits_of(event)) is not None
    )
    limits = json.loads(seen.most_common(1)[0][0]) if seen else dict(DEFAULT_LIMITS)
    name = kernel_name or kernel_name_for(limits)
    command = install_command(name, limits)
    other = [number for number, event in lines if limits_of(event) != limits]
    text = _HEADER.format(
        source=_code(source),
        key=METADATA_KEY,
        facts="\n".join(_facts(lines, problems)),
        name=_code(name),
        command=command,
        check=_code(f"rewyn-kernel review --check {shlex.quote(notebook)}"),
        caveats="".join(f"\n{caveat}" for caveat in _caveats(lines, limits, other)),
    )
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {
                "name": name,
                "display_name": kernelspec.default_display_name(name),
                "language": "python",
            },
            "language_info": {"name": "python"},
            METADATA_KEY: {
                "review": {
                    "source": source,
                    "limits": limits,
                    "install_command": command,
                    "problems": problems,
                }
            },
        },
        "cells": [
            {"cell_type": "markdown", "id": "review-header", "metadata": {}, "source": text},
            *_cells(lines, given or {}),
        ],
    }
