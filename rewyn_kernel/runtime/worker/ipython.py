"""IPython in the code's process: the shell a notebook expects, speaking the sandbox's frames.

ipykernel puts IPython behind ZMQ by swapping three things in ``InteractiveShell``: the display
publisher, the displayhook and the payload manager's writers (``zmqshell.py``). This does the
same behind the supervisor: a display becomes a ``display`` frame (with its ``display_id``, or
as an update), ``clear_output`` a ``clear_output`` frame, the last expression's value a
``result`` frame, a traceback an ``error`` frame, and the pager, ``set_next_input`` and
``exit()`` ``payload`` frames that the host decides about. Shell commands (``!ls``, ``%%bash``)
run in the sandbox, under its limits; ``pip install`` without a network fails at once, saying
why. Imported only where IPython is installed (the subprocess provider runs the kernel's own
environment; a container, when its image has it).
"""

from __future__ import annotations

import os
import re
import sys

from .executor import Gate, exit_status, sandbox_hint
from .frontend import Output
from .wire import Sender

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Tuple

    from .wire import Header

MAX_TRACEBACK_ENTRIES = 200
MAX_ENTRY_CHARS = 16384
INSTALL = re.compile(
    r"(^|[\s;&|(])(pip3?|python3?(\.\d+)?\s+-m\s+pip|uv\s+pip|conda|mamba|micromamba)\s+install\b"
)
NO_NETWORK = (
    "[rewyn: %s needs the network, and this sandbox has none (network='none'). Install the "
    "package into the environment the sandbox runs (or its image), or start a kernel with "
    "--network allow]\n"
)


def available() -> bool:
    """Whether IPython can be imported here (without importing it)."""
    return _has("IPython")


class IPythonRunner:
    """Runs cells through an ``InteractiveShell`` whose output goes out as frames."""

    def __init__(
        self,
        namespace_module: Any,
        *,
        sender: Sender,
        output: Output,
        flush: Callable[[], None],
        gate: Gate,
        network: str,
    ) -> None:
        self.sender = sender
        self.output = output
        self.flush = flush
        self.gate = gate
        self.network = network
        if "MPLBACKEND" not in os.environ and _has("matplotlib_inline"):
            # As ipykernel: figures are shown inline, after each cell and by plt.show().
            os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        os.environ.setdefault("PAGER", "cat")
        self.shell = _make_shell(self, namespace_module)
        self.reported = False  # this cell's error went out through the traceback hook

    # -- running -------------------------------------------------------------------------

    def run(self, code: str, count: int, silent: bool = False) -> Tuple[int, str]:
        """Run a cell as execution ``count`` (the kernel's number, so ``Out[n]`` and ``_n``
        match the prompts); return (exit code, status) as the stdlib runner does."""
        shell = self.shell
        self.reported = False
        shell.payload_manager.clear_payload()
        if not silent:
            shell.execution_count = count
        self.gate.in_code = True
        try:
            if self.gate.pending:
                raise KeyboardInterrupt("interrupted before the code started")
            result = shell.run_cell(code, store_history=not silent, silent=silent)
        except KeyboardInterrupt:  # one that landed outside the shell's own handling
            self.gate.in_code = False
            self.sender.send(
                {
                    "t": "error",
                    "ename": "KeyboardInterrupt",
                    "evalue": "",
                    "traceback": ["KeyboardInterrupt"],
                }
            )
            return 130, "interrupted"
        finally:
            self.gate.in_code = False
            self.gate.pending = False
        self.flush()
        payloads = shell.payload_manager.read_payload()
        shell.payload_manager.clear_payload()
        for payload in payloads[:16]:
            self.send_payload(payload)
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return 0, "ok"
        if isinstance(error, KeyboardInterrupt):
            return 130, "interrupted"
        if isinstance(error, SystemExit):
            return exit_status(error), "exit"
        if not self.reported:
            # Shown by the shell itself, with no traceback (a UsageError goes to stderr): the
            # reply names it, as ipykernel's does, and no traceback means nothing more to show.
            self.sender.send(
                {
                    "t": "error",
                    "ename": type(error).__name__[:200],
                    "evalue": _text(error),
                    "traceback": [],
                }
            )
        return 1, "error"

    def send_payload(self, payload: Header) -> None:
        source = str(payload.get("source", ""))
        frame: Header = {"t": "payload", "source": source}
        if source == "page":
            data = payload.get("data")
            frame["data"] = data if isinstance(data, dict) else {"text/plain": str(data)}
            frame["start"] = int(payload.get("start") or 0)
        elif source == "set_next_input":
            frame["text"] = str(payload.get("text", ""))
            frame["replace"] = bool(payload.get("replace"))
        elif source != "ask_exit":
            return  # (edit_magic and the like: nothing a sandbox kernel can act on)
        self.output.send_any(frame)

    # -- what the shell sends --------------------------------------------------------------

    def publish(self, data: Any, metadata: Any, transient: Any, update: bool) -> None:
        self.flush()  # text printed before a display stays before it
        frame: Header = {"t": "display", "data": data, "metadata": metadata or {}}
        display_id = (transient or {}).get("display_id") if isinstance(transient, dict) else None
        if display_id is not None:
            frame["display_id"] = str(display_id)[:256]
            if update:
                frame["update"] = True
        self.output.send(frame)

    def clear_output(self, wait: bool) -> None:
        self.flush()
        self.sender.send({"t": "clear_output", "wait": bool(wait)})

    def result(self, data: Any, metadata: Any, count: int) -> None:
        self.flush()  # what the cell printed comes before its value
        self.output.send({"t": "result", "data": data, "metadata": metadata or {}, "count": count})

    def traceback(self, etype: Any, evalue: Any, stb: List[str]) -> None:
        self.flush()
        self.reported = True
        entries = [str(entry)[:MAX_ENTRY_CHARS] for entry in stb]
        if len(entries) > MAX_TRACEBACK_ENTRIES:
            half = MAX_TRACEBACK_ENTRIES // 2
            dropped = len(entries) - 2 * half
            entries = [*entries[:half], "... %d entries omitted ..." % dropped, *entries[-half:]]
        value = _text(evalue)
        name = getattr(etype, "__name__", "Exception")[:200]
        hint = sandbox_hint(evalue) if isinstance(evalue, BaseException) else ""
        if hint:
            entries.append("(%s)" % hint)
        self.sender.send({"t": "error", "ename": name, "evalue": value, "traceback": entries})

    def system(self, command: str, run: Callable[[str], Any]) -> Any:
        match = INSTALL.search(command) if self.network == "none" else None
        if match:
            sys.stderr.write(NO_NETWORK % (match.group(2) + " install"))
            sys.stderr.flush()
            self.shell.user_ns["_exit_code"] = 1
            return None
        return run(command)

    # -- introspection ---------------------------------------------------------------------

    def complete(self, header: Header) -> Header:
        """Completions as ipykernel finds them: IPython's completer (with jedi where it is
        installed), through its provisional API, the matches made to share one span."""
        code = str(header.get("code", ""))
        pos = int(header.get("cursor_pos", len(code)))
        start, end, matches = pos, pos, []  # type: Tuple[int, int, List[str]]
        try:
            from IPython.core.completer import provisionalcompleter, rectify_completions

            with provisionalcompleter():
                found = list(rectify_completions(code, self.shell.Completer.completions(code, pos)))
        except Exception:
            found = []
        if found:
            start, end = found[0].start, found[0].end
            matches = [completion.text for completion in found[:1000]]
        return {
            "t": "complete_reply",
            "id": header.get("id"),
            "matches": matches,
            "cursor_start": start,
            "cursor_end": end,
        }

    def inspect(self, header: Header) -> Header:
        code = str(header.get("code", ""))
        pos = int(header.get("cursor_pos", len(code)))
        reply: Header = {"t": "inspect_reply", "id": header.get("id"), "found": False, "data": {}}
        try:
            from IPython.utils.tokenutil import token_at_cursor

            name = token_at_cursor(code, pos)
            data = self.shell.object_inspect_mime(name, detail_level=int(header.get("detail", 0)))
        except Exception:
            return reply
        if isinstance(data, dict):
            reply.update(found=True, data=data)
        return reply


def _text(error: Any) -> str:
    try:
        return str(error)[:65536]
    except Exception:
        return "<str() of the exception failed>"


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _make_shell(runner: IPythonRunner, module: Any) -> Any:
    """An InteractiveShell whose display publisher, displayhook, tracebacks, pager,
    set_next_input, exit() and shell commands go through ``runner``."""
    from IPython.core import page
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class Publisher(DisplayPublisher):  # type: ignore[misc]
        def publish(
            self,
            data: Any,
            metadata: Any = None,
            source: Any = None,
            *,
            transient: Any = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            runner.publish(data, metadata, transient, update)

        def clear_output(self, wait: bool = False) -> None:
            runner.clear_output(wait)

    class Hook(DisplayHook):  # type: ignore[misc]
        bundle: Any = None

        def start_displayhook(self) -> None:
            self.bundle = None

        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: Any, md_dict: Any = None) -> None:
            self.bundle = (format_dict, md_dict)

        def finish_displayhook(self) -> None:
            if self.bundle is not None:
                runner.result(self.bundle[0], self.bundle[1], self.prompt_count)
            self.bundle = None

    class SandboxShell(InteractiveShell):  # type: ignore[misc]
        """IPython, as the sandbox kernel's cells see it."""

        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def init_hooks(self) -> None:
            super().init_hooks()
            self.set_hook("show_in_pager", page.as_hook(self.page_payload), 99)

        def page_payload(
            self, text: Any, start: int = 0, screen_lines: int = 0, pager_cmd: Any = None
        ) -> None:
            data = text if isinstance(text, dict) else {"text/plain": text}
            self.payload_manager.write_payload(
                {"source": "page", "data": data, "start": max(0, start)}
            )

        def set_next_input(self, text: str, replace: bool = False) -> None:
            self.payload_manager.write_payload(
                {"source": "set_next_input", "text": text, "replace": replace}
            )

        def ask_exit(self) -> None:
            self.payload_manager.write_payload({"source": "ask_exit", "keepkernel": False})

        def _showtraceback(self, etype: Any, evalue: Any, stb: Any) -> None:
            runner.traceback(etype, evalue, list(stb))

        def system(self, cmd: str) -> Any:
            return runner.system(cmd, super().system_raw)

        def enable_gui(self, gui: Any = None) -> None:
            if gui not in (None, "inline"):
                raise RuntimeError("a sandbox has no GUI event loop: use %matplotlib inline")

        def init_virtualenv(self) -> None:
            pass  # (the interpreter is the environment: nothing to adjust)

    config = Config()
    # History lives in memory (the kernel answers history requests itself, across restarts):
    # no SQLite file in the sandbox's home, and no thread saving to one.
    config.HistoryManager.hist_file = ":memory:"
    return SandboxShell.instance(user_module=module, config=config)
