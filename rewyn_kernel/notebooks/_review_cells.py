"""The cells of a review: one per step of the run (``_review_log.Step``), in call order.

Every step is a code cell, so that what the model was given shows as outputs in every viewer
(JupyterLab, nbconvert, GitHub): its text, its images as ``display_data``, and a failure as an
``error`` output, which they show in red. The first output, the call line, names the call's
number, tool, session and ending; the records are in the cell's metadata.

- Code the agent ran: the code, then what the tool gave the model (else outputs rebuilt from
  the event's excerpts), an error when it did not end well, the files it changed in its
  workspace, and the event's summary.
- A file the agent gave the sandbox (``write_file``): code that writes the same bytes, so a
  re-run of the review (by hand, or ``review --check``) has the agent's inputs.
- Any other call (a read, a listing, a reset, a close; a refusal, a denial, bad arguments): a
  comment naming the call, so running it runs nothing, then what the model read, or the error.

Everything here comes from a run log, which the agent's code could have shaped: values reach a
cell's source only through ``ascii()`` (one line, no way out of the comment or the literal);
images only of the types ``_tool_call`` lets through, their base64 checked when the log was read.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

from rewyn_kernel.kernel.record import ERROR_NAMES, METADATA_KEY, event_json, event_output
from rewyn_kernel.notebooks._review_log import Step
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.printable import printable
from rewyn_kernel.runtime.result import without_traceback
from rewyn_kernel.runtime.tool_call import LoggedFile, ToolCall

Output = dict[str, Any]
OUTCOME_ERRORS = {
    "invalid_arguments": "ToolArgumentsError",
    "refused": "PermissionError",
    "denied": "PolicyError",
    "error": "ToolError",
    "cancelled": "CancelledError",
}
"""The error a cell shows for a call that did not do its work."""
OUTCOME_WORDS = {
    "invalid_arguments": "bad arguments",
    "refused": "refused",
    "denied": "denied",
    "error": "error",
    "cancelled": "cancelled",
}
_DATA_LINE = 76
"""Characters of base64 per line of a written file's source."""


# -- sessions ------------------------------------------------------------------------------------


def session_labels(steps: list[Step]) -> dict[str, str]:
    """A short label per session id: the name the agent gave it, numbered when a name was
    used again after a close (``'alpha'#2``), else the id itself."""
    names: dict[str, str] = {}
    for step in steps:
        named = step.call.session if step.call else step.given.session if step.given else None
        if step.session_id and named and step.session_id not in names:
            names[step.session_id] = named
    seen: Counter[str] = Counter()
    labels: dict[str, str] = {}
    for step in steps:
        key = step.session_id
        if key is None or key in labels:
            continue
        if key in names:
            seen[names[key]] += 1
            count = seen[names[key]]
            labels[key] = ascii(names[key]) + (f"#{count}" if count > 1 else "")
        else:
            labels[key] = ascii(key)[1:-1]
    return labels


def status_of(step: Step) -> str:
    """How the step ended, in a word or two."""
    if step.call is not None and step.call.failed:
        return OUTCOME_WORDS[step.call.outcome]
    if step.event is not None:
        return "ok" if step.event.ok else step.event.ending.replace("_", " ")
    return "ok"


def tool_of(step: Step) -> str:
    if step.call is not None:
        return step.call.tool
    return step.given.tool if step.given is not None else "code"


def call_line(number: int, step: Step, label: str | None) -> str:
    """'call 7 · run_python · session 'alpha' · timeout 2 s · ok · 1.2 s'."""
    parts = [f"call {number}", ascii(tool_of(step))[1:-1]]
    if label:
        parts.append(f"session {label}")
    call = step.call
    if call is not None and call.timeout is not None:
        parts.append(f"timeout {call.timeout:g} s")
    if call is not None and call.session_effect == "restarted":
        parts.append("the session's interpreter restarted: its variables are gone, files stay")
    elif call is not None and call.session_effect == "closed":
        parts.append("the session closed: its variables and files are gone")
    if call is not None and call.keeps_state is False:
        parts.append("a fresh interpreter (files stay)")
    parts += [status_of(step), f"{step.seconds:,.1f} s"]
    if step.event_missing:
        parts.append("its execution's event is not in the log")
    return " · ".join(parts)


# -- outputs -------------------------------------------------------------------------------------


def _mark(**flags: object) -> dict[str, Any]:
    return {METADATA_KEY: flags}


def _text_output(text: str, **flags: object) -> Output:
    return {"output_type": "display_data", "data": {"text/plain": text}, "metadata": _mark(**flags)}


def _error(ename: str, evalue: str, traceback: list[str]) -> Output:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback}


def event_outputs(event: SandboxEvent) -> list[Output]:
    """The outputs the agent saw, rebuilt from the event's excerpts (stdout, stderr, the text
    of rich outputs, the error)."""
    # stderr ends with the traceback, as Python prints it; the error output shows it.
    stderr = without_traceback(event.stderr, event.error)
    outputs: list[Output] = [
        {"output_type": "stream", "name": name, "text": text}
        for name, text in (("stdout", event.stdout), ("stderr", stderr))
        if text
    ]
    for rich in event.outputs:
        text = rich.text
        if not text and "text/plain" not in rich.mime_types:
            text = f"[{', '.join(rich.mime_types)}: the run log keeps only text/plain]"
        output: Output = {
            "output_type": rich.output_type,
            "data": {"text/plain": text},
            "metadata": _mark(mime_types=list(rich.mime_types)),
        }
        if rich.output_type == "execute_result":
            output["execution_count"] = event.execution_count
        outputs.append(output)
    error = event_error(event)
    return outputs + ([error] if error else [])


def event_error(event: SandboxEvent, *, short: bool = False) -> Output | None:
    """The error output of an execution that did not end well (None if it did); ``short``:
    its name and value only (the text above it shows the traceback as the model read it)."""
    if event.error is None and event.ok:
        return None
    ename = event.error.ename if event.error else ERROR_NAMES.get(event.ending, "SandboxError")
    evalue = event.error.evalue if event.error else event.message or str(event.exit_code)
    if event.error and not short:
        traceback = list(event.error.traceback)
    else:
        traceback = [f"{ename}: {evalue}" if evalue else ename]
    return _error(ename, evalue, traceback)


def files_output(event: SandboxEvent) -> Output | None:
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
            lines.append(f"  {kind} ({count}): {', '.join(map(printable, listed))}{more}")
    if files.versions:
        kept = ", ".join(map(printable, files.versions))
        lines.append(f"  earlier versions kept: {kept} (rewyn-kernel files)")
    return _text_output("\n".join(lines), files=True)


def network_output(event: SandboxEvent) -> Output | None:
    """What the execution tried on the network (an allow-list's proxy), as a text output."""
    if event.network is None or not (event.network.attempts or event.network.omitted):
        return None
    lines = ["Connections the code tried, through the sandbox's proxy:"]
    lines += [f"  {line}" for line in event.network.lines()]
    return _text_output("\n".join(lines), network=True)


def payload_outputs(text: str, tool: str) -> list[Output] | None:
    """``sandbox_tool``'s JSON payload as the outputs it describes (streams, outputs, error,
    exactly as shortened for the model); None if ``text`` is not one."""
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("stdout"), str):
        return None
    outputs: list[Output] = [
        {"output_type": "stream", "name": name, "text": payload[name]}
        for name in ("stdout", "stderr")
        if isinstance(payload.get(name), str) and payload[name]
    ]
    outputs += [
        _text_output(str(shown), given_to_model=True, tool=tool)
        for shown in payload.get("outputs") or []
    ]
    error = payload.get("error")
    if isinstance(error, dict):
        outputs.append(
            _error(
                str(error.get("ename", "")),
                str(error.get("evalue", "")),
                str(error.get("traceback", "")).splitlines(),
            )
        )
    return outputs


def given_outputs(text: str, tool: str) -> list[Output]:
    """What a tool gave the model, as outputs: a payload's parts, or the text as it was read."""
    parts = payload_outputs(text, tool)
    if parts is not None:
        return parts
    return [_text_output(text, given_to_model=True, tool=tool)] if text else []


def image_outputs(call: ToolCall) -> list[Output]:
    """The images the model was given, as it saw them (or a line for those the log left out)."""
    outputs: list[Output] = []
    for image in call.images:
        about = f"[{image.mime_type}, {image.size:,} bytes, sha256 {image.sha256[:16]}]"
        if image.data is None:
            outputs.append(_text_output(f"{about}: over the run log's bound, not kept"))
            continue
        data = {image.mime_type: image.data, "text/plain": about}
        outputs.append(
            {"output_type": "display_data", "data": data, "metadata": _mark(given_to_model=True)}
        )
    if call.images_left_out:
        outputs.append(_text_output(f"[{call.images_left_out} more image(s), not kept]"))
    return outputs


def call_error(call: ToolCall) -> Output:
    """The error output of a call that did not do its work: what the model read."""
    lines = call.text.splitlines() or [call.outcome]
    return _error(OUTCOME_ERRORS[call.outcome], lines[0][:300], lines)


def file_facts(files: tuple[LoggedFile, ...]) -> Output | None:
    if not files:
        return None
    lines = []
    for file in files:
        kept = "whole in the log" if file.complete else f"its first {len(file.data()):,} bytes kept"
        verb = "given to the sandbox" if file.direction == "in" else "read from the sandbox"
        lines.append(
            f"{file.path!a}: {verb}, {file.size:,} bytes, sha256 {file.sha256[:16]} ({kept})"
        )
    return _text_output("\n".join(lines), files=True)


# -- sources -------------------------------------------------------------------------------------


def _arguments(call: ToolCall, leave_out: tuple[str, ...] = ()) -> str:
    shown = []
    for key, value in call.arguments.items():
        if key in leave_out:
            continue
        text = ascii(value)
        shown.append(f"{ascii(key)[1:-1]}={text[:117] + '...' if len(text) > 120 else text}")
    return ", ".join(shown)


def comment_source(call: ToolCall) -> str:
    """The source of a call that is not code: a comment naming it (running it runs nothing);
    the code of a run the tool refused, commented out."""
    code = call.arguments.get("code")
    shown = isinstance(code, str) and call.execution_id is None
    lines = [
        f"# {ascii(call.tool)[1:-1]}({_arguments(call, ('code',) if shown else ())})",
        "# A call to a tool, not code: running this cell runs nothing.",
    ]
    if shown:
        assert isinstance(code, str)
        lines.append(f"# The code it was sent ({OUTCOME_WORDS.get(call.outcome, 'not run')}):")
        lines += [f"#     {ascii(line)[1:-1]}" for line in code.splitlines()]
    return "\n".join(lines)


def writable(path: str) -> bool:
    """A path a review writes again: relative, within the session's folder."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


def write_source(call: ToolCall, file: LoggedFile) -> str:
    """Code that writes ``file`` again in the session's folder, or a comment saying why not."""
    head = [f"# {ascii(call.tool)[1:-1]}({_arguments(call, ('content',))})"]
    if not file.complete or not writable(file.path):
        why = (
            f"the run log kept {len(file.data()):,} of its {file.size:,} bytes"
            if file.complete is False
            else "its path is not within the session's folder"
        )
        return "\n".join([*head, f"# This cell cannot write the file again: {why}."])
    head.append(
        f"# The file the agent gave the sandbox ({file.size:,} bytes, sha256 "
        f"{file.sha256[:16]}...): running this cell writes it again, here."
    )
    path = PurePosixPath(file.path)
    lines = list(head)
    if str(path.parent) != ".":
        lines.append(f"__import__('os').makedirs({str(path.parent)!a}, exist_ok=True)")
    lines += [f"with open({file.path!a}, 'wb') as _file:", *_write(file.data()), "del _file"]
    return "\n".join(lines)


def _write(data: bytes) -> list[str]:
    """The lines of ``_file.write(...)`` that write ``data``: UTF-8 text line by line, anything
    else as base64."""
    if not data:
        return ["    _file.write(b'')"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        encoded = base64.b64encode(data).decode("ascii")
        chunks = [encoded[i : i + _DATA_LINE] for i in range(0, len(encoded), _DATA_LINE)]
        return [
            "    _file.write(__import__('base64').b64decode(",
            *(f"        {chunk!r}" for chunk in chunks),
            "    ))",
        ]
    # (repr escapes line ends and every character that is not printable: one line each)
    lines = [f"        {line!r}" for line in text.splitlines(keepends=True)]
    return ["    _file.write((", *lines, "    ).encode('utf-8'))"]


# -- the cell ------------------------------------------------------------------------------------


def cell_of(number: int, step: Step, labels: dict[str, str]) -> dict[str, Any]:
    """The cell of ``step``, the ``number``-th call of the run (its id: ``call-N``)."""
    label = labels.get(step.session_id) if step.session_id else None
    if label is None and step.call is not None and step.call.session:  # (one it never reached)
        label = ascii(step.call.session)
    line = _text_output(call_line(number, step, label), call_line=True)
    record: dict[str, Any] = {"session": label}
    if step.call is not None:
        record["call"] = step.call.model_dump(mode="json")
    if step.event is not None:
        source, outputs = _execution(step, step.event)
        record.update(events=[event_json(step.event)], recorded=True)
        if step.given is not None:
            record["given"] = step.given.model_dump(mode="json")
    else:
        assert step.call is not None
        source, outputs = _call(step.call)
    return {
        "cell_type": "code",
        "id": f"call-{number}",
        "metadata": {METADATA_KEY: record},
        "source": source,
        "outputs": [line, *outputs],
        "execution_count": step.event.execution_count if step.event is not None else None,
    }


def _execution(step: Step, event: SandboxEvent) -> tuple[str, list[Output]]:
    """The code that ran, and its outputs: what the tool gave the model, else rebuilt from
    the event; an error if it did not end well; the files it changed; the event's summary."""
    source = event.code
    if event.code_truncated:
        source = (
            f"# rewyn-kernel review: the run log kept only the start and end of this code "
            f"({event.code_bytes:,} bytes in all; see the '[... characters omitted ...]' line), "
            "so it does not run as the agent's did.\n" + source
        )
    if step.call is not None:
        outputs = [*given_outputs(step.call.text, step.call.tool), *image_outputs(step.call)]
    elif step.given is not None:
        outputs = given_outputs(step.given.text, step.given.tool)
    else:
        outputs = event_outputs(event)
    error = event_error(event, short=True)
    if error is not None and not any(o["output_type"] == "error" for o in outputs):
        outputs.append(error)  # (a failure shows as one, whatever the tool's text was)
    facts = [found for found in (files_output(event), network_output(event)) if found]
    data, metadata = event_output(event)
    summary = {"output_type": "display_data", "data": data, "metadata": metadata}
    return source, [*outputs, *facts, summary]


def _call(call: ToolCall) -> tuple[str, list[Output]]:
    """A call that ran no code: its source (code that writes a file it gave the sandbox, else a
    comment), and what the model was given, or its error."""
    written = [f for f in call.files if f.direction == "in"] if call.outcome == "ok" else []
    source = write_source(call, written[0]) if len(written) == 1 else comment_source(call)
    facts = file_facts(call.files)
    if call.failed:
        return source, [*([facts] if facts else []), call_error(call)]
    outputs = [*given_outputs(call.text, call.tool), *image_outputs(call)]
    return source, [*outputs, *([facts] if facts else [])]
