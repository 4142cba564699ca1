"""The review notebook of a run log: header, cells in call order, kernelspec and limits.

Everything shown in the header comes from a run log, which an agent's code could have shaped:
values go into Markdown code spans or are HTML-escaped, so it renders as text, never as markup.
The cells are ``_review_cells``'.
"""

from __future__ import annotations

import hashlib
import html
import json
import shlex
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.notebooks._review_cells import cell_of, session_labels, status_of, tool_of
from rewyn_kernel.notebooks._review_log import Step
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import SandboxSpec
from rewyn_kernel.settings import (
    CONTAINER_ONLY,
    OPTIONS,
    KernelSettings,
    Surface,
    plain_type,
    taken_by,
)

REVIEWED = taken_by(Surface.REVIEW)
"""The settings a review's kernel pins: the provider (with a container's CLI and OCI runtime,
which the recorded provider's name carries) and the limits each event's spec records."""
LIMIT_FIELDS = tuple(name for name in REVIEWED if name not in CONTAINER_ONLY)
"""The provider and the limits, pinned for every run (a container's runtimes for a container)."""


def _no_limit_when_none(name: str) -> bool:
    kind, nullable = plain_type(KernelSettings.model_fields[name].annotation)
    return nullable and kind in (int, float)


NULLABLE = tuple(filter(_no_limit_when_none, LIMIT_FIELDS))
"""Limits where none means no limit (and not the kernel's default)."""
DEFAULT_LIMITS: dict[str, Any] = {
    name: KernelSettings.model_fields[name].default for name in LIMIT_FIELDS
}
"""The limits of the shipped ``rewyn-sandbox`` kernelspec (a kernel with no flags)."""
RECORDED_DEFAULTS: dict[str, Any] = {"ipython": False, "pids_limit": None}
"""What an event written before its spec named a setting ran with (sessions ran plain Python,
under no task limit)."""


# -- limits and the kernel that applies them ----------------------------------------------------


def limits_of(event: SandboxEvent) -> dict[str, Any] | None:
    """Return the kernel settings that reproduce ``event``'s limits, or None if unknown.

    From ``event.provider``: "bubblewrap", "subprocess", or "container/CLI[+OCI]" (the
    container runtime and OCI runtime; the image is not recorded). From ``event.spec``: the
    other ``LIMIT_FIELDS``, ipython among them (what ran the code: a re-run's tracebacks and
    displays look alike only on the same). None when the
    provider is another kind or a value is out of the kernel's bounds.
    """
    limits: dict[str, Any] = {"provider": event.provider}
    if event.provider.startswith("container/"):
        cli, _, oci = event.provider.removeprefix("container/").partition("+")
        limits.update(provider="container", container_runtime=cli, oci_runtime=oci or None)
    for name in LIMIT_FIELDS:
        if name != "provider":
            limits[name] = event.spec.get(name, RECORDED_DEFAULTS.get(name, DEFAULT_LIMITS[name]))
    try:
        settings = KernelSettings.model_validate(limits)
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


def settings_for(limits: dict[str, Any]) -> KernelSettings:
    """Return the kernel settings that pin ``limits`` (none included, for those that have no
    limit: the kernel's default would apply one)."""
    return KernelSettings.model_validate(
        {key: value for key, value in limits.items() if value is not None or key in NULLABLE}
    )


def install_command(name: str, limits: dict[str, Any]) -> str:
    """Return the ``rewyn-kernel install`` command that creates kernel ``name`` with ``limits``
    (a limit of none written as ``none``: it differs from the default).

    Each value is written as its flag reads it back: the settings' own value (``limits`` hold
    JSON), so an allow-list is its comma form (``pypi.org,!bad.pypi.org``), not a dict.
    """
    settings = settings_for(limits)
    words = ["rewyn-kernel", "install", "--user", "--name", name]
    for setting in REVIEWED:
        option = OPTIONS[setting]
        if setting not in limits or (limits[setting] is None and setting not in NULLABLE):
            continue
        value = getattr(settings, setting)
        if option.const is not None:
            words += [option.flag] if value == option.const else []
        else:
            words += [option.flag, _flag_text(value)]
    return shlex.join(words)


def _flag_text(value: object) -> str:
    """``value`` as its command-line flag takes it (``none``, ``1.5``, an allow-list's comma
    form: ``NetworkPolicy.__str__``)."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}" if float(f"{value:g}") == value else repr(value)
    return str(value)


def installed_kernels() -> set[str]:
    """The names of the kernelspecs Jupyter finds here."""
    from jupyter_client.kernelspec import KernelSpecManager

    return set(KernelSpecManager().find_kernel_specs())


def kernel_to_open(name: str, installed: set[str]) -> str:
    """The kernelspec the notebook names, which JupyterLab starts when it opens it: ``name``
    (the run's limits) where it is installed, else the sandbox kernel the package installs.

    JupyterLab 4 (``SessionContext``) starts the kernel a notebook names if it is installed;
    if not, the one kernel of the notebook's language if there is exactly one, and otherwise it
    asks (the Select Kernel dialog). With ipykernel's ``python3`` beside the sandbox kernel that
    is a dialog; with ``python3`` alone it would be a kernel outside any sandbox. So a review
    names a missing kernel only where the sandbox kernel is missing too.
    """
    if name in installed or kernelspec.KERNEL_NAME not in installed:
        return name
    return kernelspec.KERNEL_NAME


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

One cell per call the agent made, in the order it made them: the code it ran, the files it gave
the sandbox and read back, the sessions it reset or closed, and the calls that were refused,
denied or sent bad arguments. Each cell's first output names the call, its tool and its
session; then comes what the tool gave the model (text and images), where the log has it (a
`TOOL_CALL` record, which `sandbox_tool` and `rewyn-kernel mcp` write), else outputs rebuilt
from the event's excerpts. A call that failed ends in an error. The records are in each cell's
metadata (`{key}`).

{facts}

## Re-running it under the same policy

The run's limits are those of kernel {name}, which this command creates:

    {command}

{opened}

{check} re-runs it and compares with the record: each session on a kernel of its own, working in
an empty folder; the files the agent gave the sandbox written again (a `write_file` cell is code
that writes its file); a session restarted or closed where the agent's was; each call under the
timeout it asked for; and each file the agent read compared with what it read then. Calls that
ran nothing are left as they are. By hand, the cells share one kernel: restart it where a cell
says its session restarted.
{caveats}

## What the outputs are

What the tool gave the model is kept whole up to a bound (64 KiB of text, 8 images of 4 MiB, the
first MiB of each file). Where the log has only the event, these are its excerpts: stdout and
stderr up to about 8 KiB each (head and tail; the event has the byte counts), and only the
`text/plain` of rich outputs (each output's metadata lists the types it had); the event does not
keep how the outputs interleaved, so a cell shows stdout, stderr, rich outputs, then the error.
"""


def _facts(steps: list[Step], labels: dict[str, str], problems: list[str]) -> list[str]:
    """The header's list: calls, failures, executions, providers, files, time, bad lines."""
    tools = Counter(tool_of(step) for step in steps)
    sessions = {labels[step.session_id] for step in steps if step.session_id in labels}
    facts = [
        f"- **Calls:** {len(steps)} in {len(sessions)} session(s) ({_some(sessions)})"
        + (
            ": " + ", ".join(f"{_code(tool)} {n}" for tool, n in tools.most_common())
            if tools
            else ""
        )
    ]
    failed = [
        f"call {number} ({_code(tool_of(step))}: {status_of(step)}"
        + (f" {_code(step.event.error.ename)}" if step.event and step.event.error else "")
        + ")"
        for number, step in enumerate(steps, 1)
        if step.failed
    ]
    facts.append(
        f"- **Failed:** {len(failed)} of {len(steps)} calls" + "".join(f"; {f}" for f in failed)
    )
    events = [step.event for step in steps if step.event is not None]
    if events:
        sandboxes = {event.sandbox_id for event in events}
        endings = Counter(event.ending for event in events)
        facts += [
            f"- **Executions:** {len(events)} in {len(sandboxes)} sandbox(es) "
            f"({_some(sandboxes)}), {endings['timeout']} timed out",
            "- **Endings:** " + " · ".join(f"{ending} {n}" for ending, n in endings.items()),
        ]
        facts += _providers(events)
        facts += _workspace_files(events)
    if steps:
        start = min(step.started for step in steps)
        end = max(step.started.timestamp() + step.seconds for step in steps)
        busy = sum(event.duration_ms for event in events) / 1000
        last = datetime.fromtimestamp(end, timezone.utc)
        facts.append(
            f"- **Time:** {start.isoformat(timespec='seconds')} to "
            f"{last.isoformat(timespec='seconds')} ({_duration(end - start.timestamp())}); "
            f"the executions took {_duration(busy)} in all"
        )
    if problems:
        facts.append(f"- **Lines not converted:** {len(problems)}")
        facts += [f"  - {_code(problem)}" for problem in problems[:20]]
    return facts


def _providers(events: list[SandboxEvent]) -> list[str]:
    facts = []
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
    return facts


def _workspace_files(events: list[SandboxEvent]) -> list[str]:
    changed = [e.files for e in events if e.files is not None and any(e.files.counts.values())]
    if not changed:
        return []
    total = Counter[str]()
    for files in changed:
        total.update({kind: n for kind, n in files.counts.items() if n})
    versions = sum(len(files.versions) for files in changed)
    return [
        f"- **Workspace files:** {len(changed)} execution(s) changed files: "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(total.items()))
        + f"; {versions} set(s) of earlier versions kept (`rewyn-kernel files` restores them)"
    ]


def _caveats(steps: list[Step], limits: dict[str, Any], other: list[int]) -> list[str]:
    """What a re-run on this kernel does not reproduce."""
    caveats = []
    events = [step.event for step in steps if step.event is not None]
    if other:
        numbers = ", ".join(map(str, other[:20])) + (" ..." if len(other) > 20 else "")
        caveats.append(
            f"Call{'s' * (len(other) > 1)} {numbers} ran under other limits (see the events)."
        )
    if limits["provider"] == "container":
        caveats.append(
            "The events do not record the container image: add `--image IMAGE` to the command "
            "if the run did not use the kernel's default."
        )
    default = SandboxSpec().summary()
    keys = ("env_names", "inherit_env", "output_limit_bytes", "workdir")
    differing = sorted({key for e in events for key in keys if e.spec.get(key) != default[key]})
    if differing:
        caveats.append(
            f"Not carried over by the kernelspec: {', '.join(differing)} (see the events; "
            "environment values are never recorded)."
        )
    workspaces = {str(e.spec["workspace"]) for e in events if e.spec.get("workspace")}
    if workspaces:
        caveats.append(
            f"The agent worked in {_some(workspaces)}: the files that were there before the "
            "run are not in the log, so a re-run in an empty folder does not have them."
        )
    return caveats


def _opened(name: str, opened: str) -> str:
    if opened == name:
        return "The notebook names that kernel: JupyterLab starts it when it opens the notebook."
    return (
        f"It is not installed here, so the notebook names {_code(opened)}, the sandbox kernel "
        "installed with rewyn-kernel, which JupyterLab starts when it opens the notebook (under "
        "that kernel's own limits). With the run's kernel installed, choose it there (Kernel, "
        "Change Kernel), or convert again with `--install-kernel`."
    )


# -- the notebook -------------------------------------------------------------------------------


def build_notebook(
    steps: list[Step],
    problems: list[str],
    source: str,
    kernel_name: str | None = None,
    *,
    notebook: str = "REVIEW.ipynb",
    opened: str | None = None,
) -> dict[str, Any]:
    """Return the review notebook (nbformat 4.5 JSON data) for the steps of a run.

    The run's kernel is ``kernel_name`` or the name ``kernel_name_for`` gives the run's limits:
    those most of its executions ran under (the first seen, on a tie); ``review --check`` runs
    on it. The notebook's kernelspec names ``opened`` (default: that kernel), the kernel
    JupyterLab starts with it. ``notebook`` is the file name the header's re-run command uses.
    """
    events = [(number, step.event) for number, step in enumerate(steps, 1) if step.event]
    seen = Counter(
        json.dumps(limits) for _, event in events if (limits := limits_of(event)) is not None
    )
    limits = json.loads(seen.most_common(1)[0][0]) if seen else dict(DEFAULT_LIMITS)
    name = kernel_name or kernel_name_for(limits)
    opened = opened or name
    command = install_command(name, limits)
    other = [number for number, event in events if limits_of(event) != limits]
    labels = session_labels(steps)
    text = _HEADER.format(
        source=_code(source),
        key=METADATA_KEY,
        facts="\n".join(_facts(steps, labels, problems)),
        name=_code(name),
        command=command,
        opened=_opened(name, opened),
        check=_code(f"rewyn-kernel review --check {shlex.quote(notebook)}"),
        caveats="".join(f"\n{caveat}" for caveat in _caveats(steps, limits, other)),
    )
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {
                "name": opened,
                "display_name": kernelspec.default_display_name(opened),
                "language": "python",
            },
            "language_info": {"name": "python"},
            METADATA_KEY: {
                "review": {
                    "source": source,
                    "limits": limits,
                    "kernel": name,
                    "install_command": command,
                    "problems": problems,
                }
            },
        },
        "cells": [
            {"cell_type": "markdown", "id": "review-header", "metadata": {}, "source": text},
            *(cell_of(number, step, labels) for number, step in enumerate(steps, 1)),
        ],
    }
