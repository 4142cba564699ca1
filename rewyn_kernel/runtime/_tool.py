"""sandbox_tool: give an agent code execution, under the same permission policy as any tool.

The tool's risk level follows from what the sandbox actually applies (``box.isolation``, never
what was merely asked for) and from the names of the variables passed in (``box.spec``):

========  ==========================================================================
risk      sandbox
========  ==========================================================================
LOW       container (any OCI runtime), or bubblewrap with its seccomp filter: network
          isolated, no secret-named variable
MEDIUM    subprocess, network isolated (namespaces applied), no secret-named variable; or
          bubblewrap where libseccomp could not be loaded (no filter); or a container or
          bubblewrap whose network is an allow-list, no secret-named variable
HIGH      network isolated, but a secret-named variable is passed in
HIGH      an allow-list, and a secret-named variable or the host's files (subprocess)
HIGH      container with the network reachable, no secret-named variable
CRITICAL  network reachable, and a secret-named variable or the host's files (subprocess)
========  ==========================================================================

"Network reachable" is ``network="allow"``, or a cut that could not be enforced here
(``isolation.network == "not_isolated"``: a subprocess without namespaces). An allow-list
(``network=[...]``, ``isolation.network == "filtered"``) lets the code reach its hosts only: it
can still send what it reads or was given to one of them, so it sits a level above no network.
CRITICAL is the pair that lets code *take* something: a subprocess reads every file its user
can (SSH keys, ``~/.aws``, browser profiles), so with a network it can send them anywhere; a
container sees only its scratch directory, so it needs a secret passed in for the same. Without
a network a secret can still leave through the tool's own result, which goes to the model: that
is HIGH.

A variable is secret-named when its name contains KEY, TOKEN, SECRET, PASS, CREDENTIAL, AUTH,
PRIVATE, COOKIE, SESSION or DSN (in any case). Values are never read: ``DATA_DIR`` stays
MEDIUM, ``OPENAI_API_KEY`` makes it HIGH. Names are taken from ``env``, from ``inherit_env``
(a ``PREFIX*`` pattern counts by its prefix and by the names it matches in this process's
environment when the tool is made). Time and memory limits do not change the level: they bound
cost, not reach. The level follows what the sandbox reports in ``isolation`` (its files, its
network, its seccomp filter), whatever the provider's name: a provider from a package of its own
is taken at its report, which is part of the provider contract.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import uuid
from datetime import datetime, timezone
from typing import Any

from rewyn_kernel.errors import PolicyError, RewynError
from rewyn_kernel.runtime._result import (
    Isolation,
    RichOutput,
    SandboxResult,
    plain_traceback,
    without_traceback,
)
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime._tool_call import Outcome, bounded_arguments, bounded_text
from rewyn_kernel.runtime.events import ToolCall, record_tool_call
from rewyn_kernel.runtime.host.base import Sandbox
from rewyn_kernel.runtime.host.session import UNSET, Session
from rewyn_kernel.tools import RiskLevel, Tool

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "assess", "risk_of", "sandbox_tool"]

Payload = dict[str, Any]
logger = logging.getLogger(__name__)

DEFAULT_MAX_RESULT_CHARS = 20_000
"""Characters of text (stdout, stderr, error, outputs together) in one result, about 5k tokens."""
MAX_LISTED_OUTPUTS = 20
MAX_MESSAGE_CHARS = 300
MAX_CODE_CHARS = 1_000_000
MAX_TIMEOUT = 7 * 24 * 3600.0
SECRET_WORDS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "DSN",
)


def sandbox_tool(
    box: Sandbox | Session,
    name: str = "run_code",
    *,
    description: str | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> Tool:
    """Return a Tool that runs ``arguments["code"]`` in ``box`` and returns a bounded result.

    ``box`` is a Sandbox: each call runs in a fresh worker, so variables and imports do not
    carry over (files in the scratch directory do). Pass a ``Session`` (``box.session()``)
    instead to keep state between calls; you close it. ``arguments["timeout"]`` may shorten
    the sandbox's timeout, never extend it. The result is a JSON-safe dict: ``ok``,
    ``exit_code``, ``timed_out``, ``ending``, ``message``, ``stdout``, ``stderr``, ``error``
    (``ename``, ``evalue``, ``traceback``, or None), ``outputs`` (the text of the first 20
    rich outputs), ``state_lost``, ``duration_ms`` and ``truncated``. The text fields hold at
    most ``max_result_chars`` characters together (``message`` is kept short on its own): a
    longer field keeps its head and tail around a marker that says how much was left out, and
    ``truncated`` says the same per field (``shown_chars``, ``omitted_chars``, and
    ``written_bytes`` when the sandbox's own output cap already applied).

    Every call goes to the box's run logs (``JsonlRunLog`` listeners) as a TOOL_CALL record:
    the payload given to the model, or why the call was refused (its arguments, the policy).
    """
    if max_result_chars < 2_000:
        raise ValueError("max_result_chars must be at least 2000")
    spec, isolation, keeps_state = _describe_box(box)
    level, reasons = assess(isolation, spec)
    schema = _input_schema(spec)

    def record(
        arguments: object, started: datetime, outcome: Outcome, text: str, execution: str | None
    ) -> None:
        """Write the call to the box's run logs (a failure to is logged, never the caller's)."""
        shown, cut = bounded_text(text)
        given = _as_object(arguments)
        asked = given.get("timeout")
        timeout = None
        if isinstance(asked, int | float) and not isinstance(asked, bool) and 0 < asked < math.inf:
            timeout = float(asked)
        try:
            call = ToolCall(
                id=uuid.uuid4().hex,
                tool=name,
                execution_id=execution,
                keeps_state=keeps_state,
                timeout=timeout,
                started_at=started,
                finished_at=datetime.now(timezone.utc),
                arguments=bounded_arguments(given),
                outcome=outcome,
                text=shown,
                text_truncated=cut,
            )
        except ValueError:
            logger.exception("the call to tool %r was not recorded", name)
            return
        record_tool_call(call, box.listeners)

    def refused(arguments: object, error: RewynError) -> None:
        outcome: Outcome = "denied" if isinstance(error, PolicyError) else "invalid_arguments"
        record(arguments, datetime.now(timezone.utc), outcome, str(error), None)

    def given(arguments: dict[str, Any], started: datetime, result: SandboxResult) -> Payload:
        """The payload for the model, recorded as what it was given."""
        payload = result_payload(result, max_result_chars)
        text = json.dumps(payload, ensure_ascii=False)
        record(arguments, started, "ok", text, result.execution_id)
        return payload

    def failed(arguments: dict[str, Any], started: datetime, exc: Exception) -> None:
        record(arguments, started, "error", f"{type(exc).__name__}: {exc}", None)

    def handler(arguments: dict[str, Any]) -> dict[str, Any]:
        started = datetime.now(timezone.utc)
        try:
            result = box.execute(arguments["code"], timeout=_timeout(arguments))
        except Exception as exc:  # (a closed sandbox, say: the caller sees it raised)
            failed(arguments, started, exc)
            raise
        return given(arguments, started, result)

    async def async_handler(arguments: dict[str, Any]) -> dict[str, Any]:
        started = datetime.now(timezone.utc)
        try:
            result = await box.aexecute(arguments["code"], timeout=_timeout(arguments))
        except Exception as exc:
            failed(arguments, started, exc)
            raise
        return given(arguments, started, result)

    return Tool(
        name=name,
        description=description or _description(spec, isolation, keeps_state),
        input_schema=schema,
        risk_level=level,
        risk_reason="; ".join(reasons),
        handler=handler,
        async_handler=async_handler,
        on_refused=refused,
    )


UNFILTERED_WITHOUT_SECCOMP = ("bubblewrap", "landlock", "subprocess")
"""Providers whose only system-call filter is their own seccomp filter
(providers/local/seccomp.py). (landlock does not start without it; one that said so anyway
would rate as bubblewrap's does.)"""


def risk_of(isolation: Isolation, spec: SandboxSpec) -> RiskLevel:
    """The risk level of code execution in a sandbox with ``isolation`` and ``spec`` (the
    table above); ``provider.isolation(spec)`` gives it without starting anything."""
    return assess(isolation, spec)[0]


def _describe_box(box: Sandbox | Session) -> tuple[SandboxSpec, Isolation, bool]:
    if isinstance(box, Session):
        return box.spec, box.isolation, box.keep_state
    if not isinstance(box, Sandbox):
        raise TypeError(f"sandbox_tool needs a Sandbox or a Session, not {type(box).__name__}")
    return box.spec, box.isolation, False


def _secret_names(spec: SandboxSpec) -> list[str]:
    names = set(spec.env) | set(spec.build_env()) | set(spec.inherit_env)
    return sorted(name for name in names if any(word in name.upper() for word in SECRET_WORDS))


def assess(isolation: Isolation, spec: SandboxSpec) -> tuple[RiskLevel, list[str]]:
    """The risk level (the table above) and the reasons for it, in words."""
    # A container or bubblewrap sees only its scratch dir of the host's files (isolation.files):
    # a fresh one, unless the caller gave their own (a home directory, say), which then counts
    # as the host's files.
    confined = isolation.files == "isolated" and spec.workdir is None
    network = isolation.network in ("allowed", "not_isolated")
    filtered = isolation.network == "filtered"
    secrets = _secret_names(spec)
    reasons = []
    if spec.workdir is not None and isolation.files == "isolated":
        reasons.append(f"the code can read and write the directory mounted: {spec.workdir}")
    if isolation.workspace == "direct":
        # (a versioned workspace keeps every version the code replaces: nothing is lost)
        confined = False
        reasons.append(
            f"the code changes the files of {spec.workspace} directly, and no earlier version "
            "is kept"
        )
    if isolation.network == "allowed":
        reasons.append("network='allow': the code can reach the network")
    elif network:
        reasons.append("the network cut is not enforced here: the code can reach the network")
    elif filtered and spec.allow_list is not None:
        reasons.append(
            "network=[...]: the code can reach these hosts, and no other: "
            + ", ".join(spec.allow_list.allow)
        )
    if secrets:
        reasons.append(f"secret-named variables are passed in: {', '.join(secrets)}")
    if not confined:
        reasons.append(f"{isolation.provider}: the code can read this user's files")
    if network and (secrets or not confined):
        return RiskLevel.CRITICAL, reasons
    if network or secrets or (filtered and not confined):
        return RiskLevel.HIGH, reasons
    if filtered:
        return RiskLevel.MEDIUM, [*reasons, "no secret-named variables"]
    if not confined:
        return RiskLevel.MEDIUM, [*reasons, "no network, no secret-named variables"]
    if isolation.provider in UNFILTERED_WITHOUT_SECCOMP and isolation.seccomp is None:
        # (a container's engine applies its own profile; a local sandbox only its own filter)
        why = "no seccomp filter: the host user's keyrings and every system call are in reach"
        return RiskLevel.MEDIUM, [f"{isolation.provider}: {why}", "no network, no secrets"]
    return RiskLevel.LOW, [f"{isolation.provider}: no network, no secret-named variables"]


def _input_schema(spec: SandboxSpec) -> dict[str, Any]:
    limit = spec.timeout or MAX_TIMEOUT
    default = f"{spec.timeout:g} s, also the maximum" if spec.timeout else "no limit"
    return {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "Python source to run, like a notebook cell: print what you "
                "need to see; the value of a last expression is shown too.",
                "maxLength": MAX_CODE_CHARS,
            },
            "timeout": {
                "type": "number",
                "description": f"Seconds before the run is stopped (default {default}).",
                "exclusiveMinimum": 0,
                "maximum": limit,
            },
        },
        "required": ["code"],
        "additionalProperties": False,
    }


def _description(spec: SandboxSpec, isolation: Isolation, keeps_state: bool) -> str:
    state = (
        "Variables and imports are kept between calls (unless a result says state_lost)."
        if keeps_state
        else "Each call starts a fresh interpreter: variables and imports do not carry over "
        "between calls, files in the working directory do."
    )
    limits = [f"{spec.timeout:g} s per call" if spec.timeout else "no time limit"]
    if spec.memory_limit_mb:
        limits.append(f"{spec.memory_limit_mb} MiB of memory")
    limits.append("no network" if isolation.network == "isolated" else "network available")
    return (
        "Run Python code in a sandbox and get back JSON: ok, exit_code, stdout, stderr, error "
        f"(exception name, value, traceback), outputs and timed_out. {state} Limits: "
        f"{', '.join(limits)}. Long output is shortened (head and tail kept): write large "
        "results to a file and print a summary."
    )


def _as_object(arguments: object) -> dict[str, Any]:
    """Arguments as a model sent them (a JSON string, or a mapping), as a JSON object for the
    record: what does not parse as one is kept under ``"arguments"``."""
    if isinstance(arguments, str | bytes):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    if isinstance(arguments, dict):
        return {str(key): value for key, value in arguments.items()}
    if isinstance(arguments, bytes):
        arguments = arguments.decode("utf-8", "replace")
    return {"arguments": arguments}


def _timeout(arguments: dict[str, Any]) -> float | None:
    # UNSET keeps the spec's timeout; None would mean "no limit".
    return float(arguments["timeout"]) if "timeout" in arguments else UNSET


def result_payload(result: SandboxResult, max_chars: int) -> dict[str, Any]:
    """The model-facing, JSON-safe form of ``result``, its text within ``max_chars``."""
    # (stderr ends with the traceback, which the error carries: not twice in the budget.)
    texts = {"stdout": result.stdout, "stderr": without_traceback(result.stderr, result.error)}
    if result.error is not None:
        texts["error.evalue"] = result.error.evalue
        texts["error.traceback"] = plain_traceback(result.error)  # (IPython's: no colours)
    listed = result.outputs[:MAX_LISTED_OUTPUTS]
    texts.update((f"outputs[{i}]", _plain(output)) for i, output in enumerate(listed))
    written = {"stdout": result.stdout_bytes, "stderr": result.stderr_bytes}
    capped = {"stdout": result.stdout_truncated, "stderr": result.stderr_truncated}
    shown: dict[str, str] = {}
    truncated: dict[str, dict[str, int]] = {}
    outputs_cut = {"shortened_items": 0, "omitted_chars": 0}
    for (key, text), limit in zip(
        texts.items(), _share([len(t) for t in texts.values()], max_chars), strict=True
    ):
        shown[key], cut = _shorten(text, limit, written[key] if capped.get(key) else None)
        if cut and key.startswith("outputs["):
            outputs_cut["shortened_items"] += 1
            outputs_cut["omitted_chars"] += cut["omitted_chars"]
        elif cut:
            truncated[key] = cut
    if len(result.outputs) > len(listed):
        outputs_cut["omitted_items"] = len(result.outputs) - len(listed)
    if any(outputs_cut.values()):
        truncated["outputs"] = outputs_cut
    message, _ = _shorten(result.message or result.ending, MAX_MESSAGE_CHARS, None)
    if truncated:
        message += (
            "; output was shortened (head and tail kept): write large results to a file and "
            "print a summary"
        )
    error = None
    if result.error is not None:
        error = {
            "ename": _shorten(result.error.ename, MAX_MESSAGE_CHARS, None)[0],
            "evalue": shown["error.evalue"],
            "traceback": shown["error.traceback"],
        }
    return {
        "ok": result.ok,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "ending": result.ending,
        "message": message,
        "stdout": shown["stdout"],
        "stderr": shown["stderr"],
        "error": error,
        "outputs": [shown[f"outputs[{i}]"] for i in range(len(listed))],
        "state_lost": result.state_lost,
        "duration_ms": round(result.duration_ms, 1),
        "truncated": truncated,
    }


def _plain(output: RichOutput) -> str:
    text = output.data.get("text/plain")
    if isinstance(text, list):
        text = "".join(str(part) for part in text)
    if isinstance(text, str):
        return text
    kinds = ", ".join(sorted(output.data)) or "nothing"
    return f"[{output.output_type} with {kinds}; no text/plain form]"


def _share(sizes: list[int], budget: int) -> list[int]:
    """Split ``budget`` over fields: small ones get all they need, big ones share the rest."""
    limits = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    for done, index in enumerate(order):
        limits[index] = min(sizes[index], left // (len(sizes) - done))
        left -= limits[index]
    return limits


def _shorten(text: str, limit: int, written_bytes: int | None) -> tuple[str, dict[str, int]]:
    """Keep ``text`` within ``limit`` characters: its head and tail around a marker that says
    what was left out, in characters of ``text``, or in bytes of all the code wrote when the
    sandbox had already capped the stream (``written_bytes``; its own marker is then dropped
    with the middle)."""
    if len(text) <= limit:
        if written_bytes is None:
            return _clean(text), {}
        return _clean(text), {"shown_chars": len(text), "written_bytes": written_bytes}
    # The longest the marker can be, so that head + marker + tail fits in ``limit``.
    if written_bytes is None:
        longest = f"\n[... {len(text):,} characters omitted ...]\n"
    else:
        longest = f"\n[... {written_bytes:,} of {written_bytes:,} bytes omitted ...]\n"
    keep = max(limit - len(longest), 0)
    head, tail = text[: keep // 2], text[len(text) - (keep - keep // 2) :]
    cut = {"shown_chars": len(head) + len(tail), "omitted_chars": len(text) - keep}
    if written_bytes is None:
        marker = f"\n[... {len(text) - keep:,} characters omitted ...]\n"
    else:
        kept_bytes = len(head.encode("utf-8", "replace")) + len(tail.encode("utf-8", "replace"))
        dropped = max(written_bytes - kept_bytes, 0)
        marker = f"\n[... {dropped:,} of {written_bytes:,} bytes omitted ...]\n"
        cut["written_bytes"] = written_bytes
    return _clean(head + marker + tail), cut


def shorten(text: str, limit: int) -> tuple[str, int]:
    """``text`` within ``limit`` characters, head and tail around a marker that says how many
    were left out (the model's results' rule), and that number (0: whole)."""
    shown, cut = _shorten(text, limit, None)
    return shown, cut.get("omitted_chars", 0)


def _clean(text: str) -> str:
    # Lone surrogates (possible in rich output) cannot be encoded as UTF-8 JSON.
    return text.encode("utf-8", "replace").decode("utf-8")
