"""What the code sees of the notebook: display(), input(), completion and inspection.

Runs in the code's process (see ``child.py``). Everything goes out as frames through a
``Sender`` to the supervisor, which relays them to the host.
"""

from __future__ import annotations

import base64
import builtins
import re
import sys
import threading

from .wire import Sender, encode_header

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Callable, Dict, List, Optional, Set, Tuple

    from .frames import CompleteFrame, InputReplyFrame, InspectFrame
    from .wire import Header

TEXT_LIMIT = 1 << 20  # a single repr or docstring worth sending
MAX_JSON_CONTAINERS = 100000  # the host's limits per frame (host/protocol.MAX_JSON_*)
MAX_JSON_ITEMS = 1000000
MAX_MATCHES = 1000
REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


def mimebundle(obj: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Return (data, metadata) for ``obj``, from its ``_repr_*_`` methods and ``repr``."""
    data: Dict[str, Any] = {}
    metadata: Dict[str, Any] = {}
    if not isinstance(obj, type):
        method = getattr(obj, "_repr_mimebundle_", None)
        if callable(method):
            try:
                bundle = method(include=None, exclude=None)
                if isinstance(bundle, tuple):
                    bundle, extra = bundle
                    metadata.update(extra or {})
                data.update(bundle or {})
            except Exception:
                pass
        for mime, name in REPR_METHODS:
            method = getattr(obj, name, None)
            if mime in data or not callable(method):
                continue
            try:
                value = method()
            except Exception:
                continue
            if isinstance(value, tuple) and len(value) == 2:
                value, extra = value
                metadata[mime] = extra
            if value is None:
                continue
            data[mime] = value
    if "text/plain" not in data:
        try:
            data["text/plain"] = repr(obj)[:TEXT_LIMIT]
        except Exception as exc:
            data["text/plain"] = "<repr() failed: %s>" % type(exc).__name__
    return encode_binary(data), encode_binary(metadata)


def encode_binary(value: Any, depth: int = 0) -> Any:
    """``value`` with every bytes-like object in it as base64 text, as ipykernel sends them
    (a PNG from ``_repr_png_`` or a formatter is bytes): dicts and lists are copied."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if depth > 32:
        return value
    if isinstance(value, dict):
        return {key: encode_binary(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_binary(item, depth + 1) for item in value]
    return value


class Output:
    """Rich output of the code: display frames and the last expression's value."""

    def __init__(self, sender: Sender, flush: Callable[[], None], max_bytes: int) -> None:
        self.sender = sender
        self.flush = flush
        self.max_bytes = max_bytes

    def display(
        self, *objs: Any, raw: bool = False, metadata: Optional[Dict[str, Any]] = None
    ) -> None:
        """Show rich representations of objects, as IPython's display() does."""
        self.flush()  # text printed before the display stays before it
        for obj in objs:
            if raw:
                if not isinstance(obj, dict):
                    raise TypeError("display(raw=True) takes MIME bundles: dicts of type -> data")
                data, meta = encode_binary(obj), encode_binary(dict(metadata or {}))
            else:
                data, meta = mimebundle(obj)
                meta.update(metadata or {})
            self.send({"t": "display", "data": data, "metadata": meta})

    def send_any(self, header: Header) -> None:
        """Send a frame that may hold anything the code made; one that cannot be encoded, or
        is too large for the host, becomes a note in stderr."""
        try:
            body = encode_header(header)
            if len(body) > self.max_bytes:
                raise ValueError("%d bytes, over the limit of %d" % (len(body), self.max_bytes))
            # (the host's limits per frame: a frame past them would break the protocol and
            # end the sandbox, with every variable in it)
            if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
                raise ValueError("more than %d JSON objects and arrays" % MAX_JSON_CONTAINERS)
            if body.count(b",") + body.count(b":") > MAX_JSON_ITEMS:
                raise ValueError("more than %d JSON values" % MAX_JSON_ITEMS)
        except (TypeError, ValueError, RecursionError) as exc:
            if header.get("msg_type") == "comm_open":
                sys.stderr.write(too_large_widget(header, str(exc)))
                return
            what = "a %s frame" % header.get("t")
            if header.get("t") == "comm":
                what = "a widget's %s message" % header.get("msg_type")
            sys.stderr.write("[rewyn: %s was dropped: %s]\n" % (what, exc))
            return
        self.sender.send(header, body=body)

    def send(self, header: Header) -> None:
        """Send a display or result frame; one too large for the host becomes a note."""
        body: Optional[bytes]
        try:
            if not isinstance(header["data"], dict) or not isinstance(header["metadata"], dict):
                raise TypeError("MIME bundle and metadata must be dicts")
            body = encode_header(header)
            if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
                raise ValueError("more than %d JSON objects and arrays" % MAX_JSON_CONTAINERS)
            if body.count(b",") + body.count(b":") > MAX_JSON_ITEMS:
                raise ValueError("more than %d JSON values" % MAX_JSON_ITEMS)
        except (TypeError, ValueError, RecursionError) as exc:
            note = "[rewyn: this output could not be encoded: %s]" % exc
            header = dict(header, data={"text/plain": note}, metadata={})
            body = None
        else:
            if len(body) > self.max_bytes:
                note = (
                    "[rewyn: an output of %d bytes was dropped, over the limit of %d bytes. "
                    "Save large images or tables to a file instead.]" % (len(body), self.max_bytes)
                )
                header = dict(header, data={"text/plain": note}, metadata={})
                body = None
        self.sender.send(header, body=body)


def too_large_widget(header: Header, why: str) -> str:
    """The note for a widget whose state is past what the channel takes (``why``): it is not
    shown, and what draws the same instead (a plotly FigureWidget: ``fig.show()``)."""
    content = header.get("content")
    data = content.get("data") if isinstance(content, dict) else None
    state = data.get("state") if isinstance(data, dict) else None
    state = state if isinstance(state, dict) else {}
    name, module = (
        state.get("_anywidget_id") or state.get("_model_name"),
        state.get("_model_module"),
    )
    named = " (%s)" % str(name)[:80] if isinstance(name, str) and name else ""
    note = "[rewyn: a widget%s was not shown: its state is too large to relay (%s)" % (named, why)
    if module == "anywidget" or "_esm" in state or "_anywidget_id" in state:
        note += (
            "; a widget built on anywidget is refused in any case, as it carries JavaScript"
            " for the page to run"
        )
    if "plotly" in "%r %r" % (module, name):
        note += ". fig.show() draws the same figure, as data (no widget)"
    return note + ".]\n"


class Questions:
    """input() and getpass() through the host: one question at a time per asking thread.

    A question's id is registered before the question is sent, so an answer that comes back at
    once is never mistaken for a stale one. Answers arrive on the control reader's thread
    (``deliver``); an answer to a question nobody waits for any more is dropped.
    """

    def __init__(self, sender: Sender, flush: Callable[[], None]) -> None:
        self.sender = sender
        self.flush = flush
        self.cond = threading.Condition()
        self.count = 0
        self.waiting: Set[int] = set()
        self.answers: Dict[int, Tuple[InputReplyFrame, bytes]] = {}
        self.closed = False
        self.unavailable: Any = EOFError
        """Raised when nobody can answer (the frontend allows no stdin): IPython's
        StdinNotImplementedError where cells run in IPython, as on ipykernel."""
        self.unavailable_text = ""

    def reset(self) -> None:
        """(In a new branch of the session.) No thread of this process asks anything: the
        ones that did were not copied, nor is the lock they may have held."""
        self.cond = threading.Condition()
        self.waiting = set()
        self.answers = {}
        self.closed = False

    def input(self, prompt: object = "") -> str:
        return self.ask(str(prompt), False)

    def getpass(self, prompt: str = "Password: ", stream: object = None) -> str:
        return self.ask(str(prompt), True)

    def ask(self, prompt: str, password: bool) -> str:
        self.flush()
        main = threading.current_thread() is threading.main_thread()
        with self.cond:
            self.count += 1
            ask_id = self.count
            self.waiting.add(ask_id)
        try:
            self.sender.send(
                {
                    "t": "input_request",
                    "id": ask_id,
                    "prompt": prompt[:65536],
                    "password": password,
                    "main": main,
                }
            )
            with self.cond:
                while ask_id not in self.answers and not self.closed:
                    self.cond.wait()
                answer = self.answers.pop(ask_id, None)
        finally:
            with self.cond:
                self.waiting.discard(ask_id)
                self.answers.pop(ask_id, None)
        if answer is None:
            raise EOFError("input() ended")
        reply, value = answer
        if reply.unavailable:
            raise self.unavailable(self.unavailable_text or reply.error)
        if reply.error:
            raise EOFError(reply.error)
        return value.decode("utf-8", "replace")

    def deliver(self, reply: InputReplyFrame, value: bytes) -> None:
        with self.cond:
            if reply.id is not None and reply.id in self.waiting:
                self.answers[reply.id] = (reply, value)
                self.cond.notify_all()

    def close(self) -> None:
        """The control stream ended: every open question fails."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()


NAME_AT_END = re.compile(r"[A-Za-z_][\w.]*$")
NAME_AROUND = re.compile(r"[A-Za-z_][\w.]*")


def complete(namespace: Dict[str, Any], frame: CompleteFrame) -> Header:
    import rlcompleter

    code, pos = frame.code, frame.cursor_pos
    match = NAME_AT_END.search(code[:pos])
    text = match.group(0) if match else ""
    matches: List[str] = []
    if text:
        completer = rlcompleter.Completer(namespace)
        for state in range(MAX_MATCHES):
            try:
                item = completer.complete(text, state)
            except Exception:
                break
            if item is None:
                break
            if item not in matches:
                matches.append(item)
    return {
        "t": "complete_reply",
        "id": frame.id,
        "matches": matches,
        "cursor_start": pos - len(text),
        "cursor_end": pos,
    }


def inspect(namespace: Dict[str, Any], frame: InspectFrame) -> Header:
    code, pos = frame.code, frame.cursor_pos
    name = ""
    for match in NAME_AROUND.finditer(code):
        if match.start() <= pos <= match.end():
            name = match.group(0)
    reply: Header = {"t": "inspect_reply", "id": frame.id, "found": False, "data": {}}
    found, obj = lookup(namespace, name)
    if not found:
        return reply
    import inspect as inspect_module  # (only here: it costs milliseconds to import)

    lines = ["Type:      %s" % type(obj).__name__]
    try:
        lines.append("Signature: %s%s" % (name, inspect_module.signature(obj)))
    except Exception:
        pass
    try:
        text = repr(obj)
        lines.append("Value:     %s" % (text[:2000] + ("..." if len(text) > 2000 else "")))
    except Exception:
        pass
    doc = inspect_module.getdoc(obj)
    if doc:
        lines.append("Docstring:\n%s" % doc[:TEXT_LIMIT])
    reply.update(found=True, data={"text/plain": "\n".join(lines)})
    return reply


def lookup(namespace: Dict[str, Any], dotted: str) -> Tuple[bool, Any]:
    """(found, the object) for a dotted name in the namespace or the builtins."""
    if not dotted:
        return False, None
    parts = dotted.rstrip(".").split(".")
    if parts[0] in namespace:
        obj = namespace[parts[0]]
    elif hasattr(builtins, parts[0]):
        obj = getattr(builtins, parts[0])
    else:
        return False, None
    for part in parts[1:]:
        try:
            obj = getattr(obj, part)
        except Exception:
            return False, None
    return True, obj
