"""The channel between the host and the worker: frame models, codec and hard size bounds.

Frames to the worker are declared in ``worker/frames.py`` (stdlib records the worker reads
with the same classes); the ones below are the worker's, read here. Everything the worker
sends is hostile input. Each frame is ``>II`` (header length, payload
length), a JSON header and a raw payload; the host checks both lengths before it reads a byte of
either, validates the header against the models below, and replaces unpaired surrogates so no
string from the sandbox can break an encoder downstream. Anything else is a ``ProtocolError``,
which ends that sandbox (never the host).
"""

from __future__ import annotations

import json
import marshal
import struct
from functools import cache
from importlib import resources
from importlib.machinery import SourceFileLoader
from pathlib import Path, PurePath
from types import CodeType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from rewyn_kernel.errors import ProtocolError
from rewyn_kernel.runtime.worker.config import WorkerConfig
from rewyn_kernel.runtime.worker.frames import HostFrame

HEADER = struct.Struct(">II")
MAX_HEADER_BYTES = 16 * 1024 * 1024
"""Largest JSON header accepted: rich outputs (an inline PNG) travel in headers."""
MAX_PAYLOAD_BYTES = 1024 * 1024
"""Largest raw payload accepted; the worker sends output in chunks of 64 KiB."""
MAX_JSON_CONTAINERS = 100_000
"""Most objects and arrays one header may hold: nesting can exhaust the parser's recursion."""
MAX_JSON_ITEMS = 1_000_000
"""Most values one header may hold (counted by its commas and colons, so a little over): parsed
JSON takes many times its size in memory, a list of small numbers about 40 bytes per item."""
MAX_MATCHES = 1000
MAX_NAME_CHARS = 4096


Text = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ReadyFrame(_Frame):
    """The supervisor is up (in a session: its code process too)."""

    t: Literal["ready"]
    pid: int
    python: Annotated[str, Field(max_length=64)]
    implementation: Annotated[str, Field(max_length=64)]
    executable: Text
    platform: Annotated[str, Field(max_length=64)]
    shell: Literal["stdlib", "ipython"] = "stdlib"
    notes: Annotated[list[Text], Field(max_length=16)] = []


class OutFrame(_Frame):
    """Bytes the code wrote to its stdout or stderr (the payload); only the supervisor sends it."""

    t: Literal["out"]
    s: Literal["stdout", "stderr"]


class DisplayFrame(_Frame):
    t: Literal["display"]
    data: dict[str, Any]
    metadata: dict[str, Any]
    display_id: Annotated[str, Field(max_length=256)] | None = None
    update: bool = False
    """Replace the output shown earlier under ``display_id`` (``update_display``)."""


class ClearOutputFrame(_Frame):
    """``clear_output()``: clear what the cell showed (``wait``: when the next output comes)."""

    t: Literal["clear_output"]
    wait: bool = False


class PayloadFrame(_Frame):
    """What IPython puts in an execute reply's payload: the pager (``zip?``), a next cell's
    text (``%load``), or a request to stop the kernel (``exit()``). The host decides."""

    t: Literal["payload"]
    source: Literal["page", "set_next_input", "ask_exit"]
    data: dict[str, Any] = {}
    start: Annotated[int, Field(ge=0)] = 0
    text: str = ""
    replace: bool = False


class ResultFrame(_Frame):
    t: Literal["result"]
    data: dict[str, Any]
    metadata: dict[str, Any]
    count: int


class ErrorFrame(_Frame):
    t: Literal["error"]
    ename: Text
    evalue: str
    traceback: list[str]


class CommFrame(_Frame):
    """A Jupyter comm message the code sent (ipywidgets' models): relayed only as the host's
    policy allows (the kernel's ``widgets.py``). ``buffers`` are base64."""

    t: Literal["comm"]
    msg_type: Literal["comm_open", "comm_msg", "comm_close"]
    content: dict[str, Any]
    metadata: dict[str, Any] = {}
    buffers: Annotated[list[str], Field(max_length=1024)] = []
    """(The kernel's policy relays far fewer: past that, a message is refused, not the frame.)"""


DoneStatus = Literal["ok", "error", "exit", "interrupted", "crashed", "protocol_error", "aborted"]


class DoneFrame(_Frame):
    """An execution is over; only the supervisor sends it (it relays no ``done`` of the code)."""

    t: Literal["done"]
    id: str
    exit_code: int
    status: DoneStatus
    signal: int | None = None
    oom: bool = False
    detail: Text = ""
    lost: bool = False
    """The session's code process is gone, and its state with it (the worker exits)."""


class InputRequestFrame(_Frame):
    t: Literal["input_request"]
    prompt: str
    password: bool
    id: int | None = None
    main: bool = False


class CompleteReplyFrame(_Frame):
    t: Literal["complete_reply"]
    id: str | None
    matches: Annotated[list[Text], Field(max_length=MAX_MATCHES)]
    cursor_start: int
    cursor_end: int


class ViewDoneFrame(_Frame):
    """The supervisor's answer to ``view``: the next execution's view of the workspace is up
    (or why not). Only the supervisor sends it."""

    t: Literal["view_done"]
    id: str
    ok: bool
    detail: Text = ""


class InspectReplyFrame(_Frame):
    t: Literal["inspect_reply"]
    id: str | None
    found: bool
    data: dict[str, Any]


class ForkedFrame(_Frame):
    """The supervisor's answer to ``fork``: the new branch is up (``n``, its process ``pid``
    inside the sandbox), or why not. Only the supervisor sends it."""

    t: Literal["forked"]
    id: str
    ok: bool
    n: int | None = None
    pid: int | None = None
    detail: Text = ""
    memory: bool = False
    """Refused because the memory cap leaves too little room (the supervisor read it)."""
    busy: bool = False
    """(A fork asked for with an execution.) Not made: the next execution came first."""


class GoneFrame(_Frame):
    """A branch's code process ended while the session's sandbox runs others (the last one's
    end ends the sandbox, and its channel). Only the supervisor sends it."""

    t: Literal["gone"]
    b: Annotated[int, Field(ge=0)]
    signal: int | None = None
    exit_code: int | None = None
    detail: Text = ""
    """Why the supervisor ended it, where it did (a checkpoint dropped for memory)."""


WorkerFrame = Annotated[
    ReadyFrame
    | OutFrame
    | DisplayFrame
    | ClearOutputFrame
    | PayloadFrame
    | ResultFrame
    | ErrorFrame
    | DoneFrame
    | InputRequestFrame
    | CompleteReplyFrame
    | InspectReplyFrame
    | ViewDoneFrame
    | ForkedFrame
    | GoneFrame
    | CommFrame,
    Field(discriminator="t"),
]


@cache
def frame_adapter() -> TypeAdapter[WorkerFrame]:
    """Built on first use: it costs ~15 ms, which a kernel's start-up need not pay."""
    return TypeAdapter(WorkerFrame)


class TruncatedFrameError(ProtocolError):
    """The channel ended in the middle of a frame (usually: the sandbox process died)."""


def scrub(value: Any) -> Any:
    """Return JSON data with every unpaired surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, dict):
        return {scrub(key): scrub(item) for key, item in value.items()}
    return value


def encode_frame(frame: HostFrame, payload: bytes = b"") -> bytes:
    """Encode one host-to-worker frame (declared in ``worker/frames.py``: the worker reads it
    with the same class)."""
    body = json.dumps(frame.to_wire(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return HEADER.pack(len(body), len(payload)) + body + payload


def decode_header(body: bytes) -> WorkerFrame:
    """Validate one frame header from the worker, or raise ProtocolError."""
    if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
        raise ProtocolError(
            f"the sandbox sent a frame with more than {MAX_JSON_CONTAINERS} JSON objects"
        )
    if body.count(b",") + body.count(b":") > MAX_JSON_ITEMS:
        raise ProtocolError(f"the sandbox sent a frame with more than {MAX_JSON_ITEMS} values")
    try:
        raw = json.loads(body, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, huge ints, keys
        raise ProtocolError(f"the sandbox sent a frame that is not JSON ({exc})") from exc
    try:
        return frame_adapter().validate_python(scrub(raw))
    except RecursionError as exc:
        raise ProtocolError("the sandbox sent a frame nested too deeply") from exc
    except ValidationError as exc:
        summary = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<frame>'}: {err['msg']}"
            for err in exc.errors()[:3]
        )
        raise ProtocolError(f"the sandbox sent an invalid frame ({summary})") from exc


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object with a key twice is refused: the supervisor reads a frame's kind from its
    first key, and a later ``"t"`` must not override what it read."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("a JSON object has the same key twice")
    return result


WORKER_MODULES = (
    "__init__",
    "wire",
    "system",
    "landlock",
    "namespaces",
    "mounts",
    "residue",
    "frontend",
    "executor",
    "kept",
    "magics",
    "idle",
    "ipython",
    "comms",
    "child",
    "mounter",
    "relay",
    "broker",
    "record",
    "config",
    "frames",
    "children",
    "state",
    "memory",
    "codeframes",
    "processes",
    "branches",
    "sandbox_setup",
    "supervisor",
    "main",
)
"""The modules of ``rewyn_kernel.runtime.worker`` sent into every sandbox (``loader`` first)."""


@cache
def worker_sources() -> tuple[str, dict[str, str]]:
    """Return the loader's text and the worker's modules' texts (read once per process)."""
    package = resources.files("rewyn_kernel.runtime.worker")
    loader = package.joinpath("loader.py").read_text("utf-8")
    modules = {name: package.joinpath(f"{name}.py").read_text("utf-8") for name in WORKER_MODULES}
    return loader, modules


@cache
def _compiled_modules() -> bytes:
    """The worker's modules compiled by this interpreter, marshalled (made once per process)."""
    _, modules = worker_sources()
    package = resources.files("rewyn_kernel.runtime.worker")
    return marshal.dumps(
        {name: _module_code(package.joinpath(f"{name}.py"), text) for name, text in modules.items()}
    )


def _module_code(path: object, text: str) -> CodeType:
    """One worker module's code, labelled ``<rewyn-worker/NAME.py>``: from Python's bytecode
    cache where it is current (an installed wheel has it, so a kernel's start compiles none of
    the worker's 60 KB), else compiled from ``text``."""
    label = f"<rewyn-worker/{PurePath(str(path)).name}>"
    if isinstance(path, Path):
        try:
            code = SourceFileLoader("rewyn_worker", str(path)).get_code("rewyn_worker")
        except (ImportError, OSError, SyntaxError, ValueError):
            code = None
        if code is not None:
            return _relabel(code, label)
    return compile(text, label, "exec")


def _relabel(code: CodeType, label: str) -> CodeType:
    """``code`` and the code objects nested in it, as if compiled from a file named ``label``."""
    consts = tuple(_relabel(c, label) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=label, co_consts=consts)


@cache
def _module_texts() -> bytes:
    return json.dumps(worker_sources()[1]).encode("utf-8")


def worker_program(config: WorkerConfig) -> bytes:
    """Return what a sandbox reads on stdin at start: the length-prefixed program that
    ``BOOTSTRAP`` runs (the loader and the call of ``main`` with ``config``, as JSON), then the
    worker's modules.

    Where the sandbox runs this very interpreter (``config.same_python``: the local providers,
    unless told otherwise), the modules go compiled (marshal) and it skips compiling 60 KB of
    source; anywhere else they go as text.
    """
    return program_with(config.to_wire(), compiled=config.same_python)


def program_with(config: dict[str, Any], *, compiled: bool) -> bytes:
    """``worker_program`` for a config already in its JSON form (tests send one the worker
    must refuse)."""
    loader, _ = worker_sources()
    modules = _compiled_modules() if compiled else _module_texts()
    source = (
        f"{loader}\n"
        "_kind, _size = __import__('struct').unpack('>BI', sys.stdin.buffer.read(5))\n"
        "_blob = sys.stdin.buffer.read(_size)\n"
        "install(__import__('marshal' if _kind else 'json').loads(_blob))\n"
        "del _kind, _size, _blob\n"
        "from rewyn_worker.main import main\n"
        f"main(__import__('json').loads({json.dumps(json.dumps(config))}))\n"
    )
    data = source.encode("utf-8")
    return (
        struct.pack(">I", len(data))
        + data
        + struct.pack(">BI", int(compiled), len(modules))
        + modules
    )
