"""The worker's frontend side: rich output, input() and introspection (a mixin of Worker).

Part of the worker program; see ``_worker_wire.py`` for how the parts are put together.
"""

import builtins
import json
import os
import re
import threading

from rewyn_kernel.runtime.worker.wire import MAX_JSON_CONTAINERS  # worker-source: strip

TEXT_LIMIT = 1 << 20  # a single repr or docstring the worker bothers to send
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
BINARY_MIMES = ("image/png", "image/jpeg")


class Frontend:
    """What user code sees of the notebook: display(), input(), completion and inspection."""

    # -- rich output ----------------------------------------------------------------------------

    def mimebundle(self, obj):
        data, metadata = {}, {}
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
                if mime in BINARY_MIMES and isinstance(value, bytes):
                    import base64

                    value = base64.b64encode(value).decode("ascii")
                data[mime] = value
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)[:TEXT_LIMIT]
            except Exception as exc:
                data["text/plain"] = "<repr() failed: %s>" % type(exc).__name__
        return data, metadata

    def display(self, *objs, raw=False, metadata=None):
        """Show rich representations of objects, as IPython's display() does."""
        self.finish_output()  # text printed before the display stays before it
        for obj in objs:
            if raw:
                if not isinstance(obj, dict):
                    raise TypeError("display(raw=True) takes MIME bundles: dicts of type -> data")
                data, meta = obj, dict(metadata or {})
            else:
                data, meta = self.mimebundle(obj)
                meta.update(metadata or {})
            self.send_rich({"t": "display", "data": data, "metadata": meta})

    def send_rich(self, header):
        """Send a display or result frame; one too large for the host becomes a note."""
        limit = self.config.get("max_rich_bytes") or (16 << 20) - 4096
        try:
            if not isinstance(header["data"], dict) or not isinstance(header["metadata"], dict):
                raise TypeError("MIME bundle and metadata must be dicts")
            body = json.dumps(header, ensure_ascii=True, default=repr).encode("ascii")
            if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
                raise ValueError("more than %d JSON objects and arrays" % MAX_JSON_CONTAINERS)
        except (TypeError, ValueError, RecursionError) as exc:
            note = "[rewyn: this output could not be encoded: %s]" % exc
            header = dict(header, data={"text/plain": note}, metadata={})
            body = None
        else:
            if len(body) > limit:
                note = (
                    "[rewyn: an output of %d bytes was dropped, over the limit of %d bytes. "
                    "Save large images or tables to a file instead.]" % (len(body), limit)
                )
                header = dict(header, data={"text/plain": note}, metadata={})
                body = None
        self.channel.send(header, body=body)

    def input(self, prompt=""):
        return self.ask(str(prompt), False)

    def getpass(self, prompt="Password: ", stream=None):
        return self.ask(str(prompt), True)

    def ask(self, prompt, password):
        self.finish_output()
        self.ask_count += 1
        ask_id = self.ask_count
        main = threading.current_thread() is threading.main_thread()
        self.channel.send(
            {
                "t": "input_request",
                "prompt": prompt[:65536],
                "password": password,
                "id": ask_id,
                "main": main,
            }
        )
        reply = self.await_reply(ask_id)
        if reply.get("error"):
            raise EOFError(reply["error"])
        return reply.get("value", "")

    def deliver_reply(self, reply):
        """File a reply under its question's id; one nobody waits for (stale) is dropped."""
        with self.reply_cond:
            if reply.get("id") in self.waiting:
                self.reply_store[reply["id"]] = reply
                self.reply_cond.notify_all()

    def await_reply(self, ask_id):
        """Wait for the reply to question ``ask_id``; other threads may be asking too."""
        with self.reply_cond:
            self.waiting.add(ask_id)
        try:
            while True:
                with self.reply_cond:
                    if ask_id in self.reply_store:
                        return self.reply_store.pop(ask_id)
                    if self.child_replies is None or self.reply_reading:
                        self.reply_cond.wait()  # the reader thread (or another asker) reads
                        continue
                    self.reply_reading = True
                try:
                    reply = self.read_reply_line()
                finally:
                    with self.reply_cond:
                        self.reply_reading = False
                        self.reply_cond.notify_all()
                self.deliver_reply(reply)
        finally:
            with self.reply_cond:
                self.waiting.discard(ask_id)
                self.reply_store.pop(ask_id, None)

    def read_reply_line(self):
        """In a forked child: the next reply from the pipe the worker relays them through."""
        while b"\n" not in self.reply_buffer:
            chunk = os.read(self.child_replies, 65536)
            if not chunk:
                raise EOFError("input() is not available: the reply pipe is closed")
            self.reply_buffer += chunk
        line, _, self.reply_buffer = self.reply_buffer.partition(b"\n")
        return json.loads(line.decode())

    # -- introspection -----------------------------------------------------------------------

    NAME_AT_END = re.compile(r"[A-Za-z_][\w.]*$")
    NAME_AROUND = re.compile(r"[A-Za-z_][\w.]*")

    def complete(self, header):
        import rlcompleter

        code, pos = header.get("code", ""), int(header.get("cursor_pos", 0))
        match = self.NAME_AT_END.search(code[:pos])
        text = match.group(0) if match else ""
        matches = []
        if text:
            completer = rlcompleter.Completer(self.namespace)
            for state in range(1000):
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
            "id": header.get("id"),
            "matches": matches,
            "cursor_start": pos - len(text),
            "cursor_end": pos,
        }

    def inspect(self, header):
        code, pos = header.get("code", ""), int(header.get("cursor_pos", 0))
        name = ""
        for match in self.NAME_AROUND.finditer(code):
            if match.start() <= pos <= match.end():
                name = match.group(0)
        reply = {"t": "inspect_reply", "id": header.get("id"), "found": False, "data": {}}
        if not name:
            return reply
        obj, found = self.lookup(name)
        if not found:
            return reply
        import inspect as inspect_module

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

    def lookup(self, dotted):
        parts = dotted.rstrip(".").split(".")
        if parts[0] in self.namespace:
            obj = self.namespace[parts[0]]
        elif hasattr(builtins, parts[0]):
            obj = getattr(builtins, parts[0])
        else:
            return None, False
        for part in parts[1:]:
            try:
                obj = getattr(obj, part)
            except Exception:
                return None, False
        return obj, True
