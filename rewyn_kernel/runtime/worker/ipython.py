"""IPython in the code's process: the shell a notebook expects, speaking the sandbox's frames.

ipykernel puts IPython behind ZMQ by swapping three things in ``InteractiveShell``: the display
publisher, the displayhook and the payload manager's writers (``zmqshell.py``). This does the
same behind the supervisor: a display becomes a ``display`` frame (with its ``display_id``, or
as an update), ``clear_output`` a ``clear_output`` frame, the last expression's value a
``result`` frame, a traceback an ``error`` frame, and the pager, ``set_next_input`` and
``exit()`` ``payload`` frames that the host decides about. Shell commands (``!ls``, ``%%bash``)
run in the sandbox, under its limits; ipykernel's own magics and the install magics are in
``magics``. Cells run in an asyncio loop that also runs between cells, as on ipykernel
(``idle``). Imported only where IPython is installed (the subprocess provider runs the kernel's
own environment; a container, when its image has it).
"""

from __future__ import annotations

import os
import sys

from .executor import WORKER_FILE_PREFIX, Gate, describe_error, exit_status, sandbox_hint
from .frontend import Output, encode_binary
from .idle import CellLoop
from .magics import Installs, add_kernel_magics
from .wire import Sender

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, List, Optional, Set, Tuple

    from .frames import CompleteFrame, InspectFrame
    from .wire import Header

MAX_TRACEBACK_ENTRIES = 200
MAX_ENTRY_CHARS = 16384
SHOWN_ERROR_MIME = "application/vnd.rewyn.shown-error+json"
"""A traceback shown while the cell went on, as a display (ename, evalue, traceback): the
kernel publishes it as an ``error`` output (kernel/record.py declares the same name)."""
SHELL_FILE = os.path.join("IPython", "core", "interactiveshell.py")
SHOWING = frozenset({"showtraceback", "showsyntaxerror", "showindentationerror", "_showtraceback"})
CELL_MACHINERY = frozenset({"run_cell_async", "_run_cell", "run_ast_nodes", "run_code"})
"""Where IPython shows the error a cell ends with (its ``error_before_exec`` or
``error_in_exec``)."""

BACKEND_MODULES = frozenset(
    "matplotlib.backends.backend_" + name
    for name in (
        *("nbagg", "webagg", "macosx", "wx", "wxagg", "wxcairo", "qtagg", "qtcairo"),
        *("qt5agg", "qt5cairo", "tkagg", "tkcairo"),
        *("gtk3agg", "gtk3cairo", "gtk4agg", "gtk4cairo"),
    )
)
"""The modules of matplotlib's interactive backends that need a window, a web server of their
own or JavaScript output: in a sandbox each is ipympl's (nbagg, where ipympl is installed) or
the inline backend, so a figure is still drawn. ipympl's own backend is not among them: its
figures are widgets, whose comms the kernel relays and checks (``kernel/figures.py``)."""
NBAGG = ("nbagg", "notebook")
"""The names of matplotlib's nbagg backend, which draws through a JavaScript output (refused by
the output filter) and a comm: where ipympl is installed, its widget backend stands in."""
NO_LIVE_FIGURES = (
    "[rewyn: matplotlib's %r backend needs a window or a live connection to the browser, which "
    "a sandbox does not have: figures are shown inline instead, as images]\n"
)
NBAGG_AS_IPYMPL = (
    "[rewyn: matplotlib's %r backend draws with JavaScript output, which a sandbox does not "
    "relay: figures are interactive through ipympl's widget backend instead (%%matplotlib "
    "widget)]\n"
)
KERNEL_ENVIRONMENT = (
    ("TERM", "xterm-color"),
    ("CLICOLOR", "1"),
    ("FORCE_COLOR", "1"),
    ("CLICOLOR_FORCE", "1"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
)
NON_INTERACTIVE = ("inline", "agg", "cairo", "pdf", "pgf", "ps", "svg", "template")


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
        kernel_version: str = "",
    ) -> None:
        self.sender = sender
        self.output = output
        self.flush = flush
        self.gate = gate
        self.kernel_version = kernel_version or "0"
        if "MPLBACKEND" not in os.environ and _has("matplotlib_inline"):
            # As ipykernel: figures are shown inline, after each cell and by plt.show().
            os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        # What ipykernel's launcher gives a kernel's environment: libraries read it as "in a
        # notebook" (the supervisor is this process's parent, as the server is a kernel's).
        os.environ.setdefault("JPY_PARENT_PID", str(os.getppid()))
        # What ipykernel's shell sets for the programs that !cmd starts (colours, no pager).
        for name, value in KERNEL_ENVIRONMENT:
            os.environ[name] = value
        self.installs = Installs(network)
        self.backend_noted = False
        sys.meta_path.insert(0, InlineBackends(self))
        sys.meta_path.insert(0, AltairAsData())
        self.shell = _make_shell(self, namespace_module)
        self.loop = CellLoop(gate)
        """The asyncio loop cells run in, and that runs between cells (``idle.py``)."""
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
            result = self.loop.run_cell(shell, code, store_history=not silent, silent=silent)
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
        except Exception as exc:
            # Raised past the shell's own handling (IPython 8's automatic pdb asking for input
            # the frontend does not give, say): the cell's error, never the process's end.
            self.gate.in_code = False
            self.flush()
            name, value, lines = describe_error(exc)
            self.sender.send({"t": "error", "ename": name, "evalue": value, "traceback": lines})
            return 1, "error"
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
        frame: Header = {
            "t": "display",
            "data": encode_binary(data),
            "metadata": encode_binary(metadata or {}),
        }
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
        self.output.send(
            {
                "t": "result",
                "data": encode_binary(data),
                "metadata": encode_binary(metadata or {}),
                "count": count,
            }
        )

    def traceback(self, etype: Any, evalue: Any, stb: List[str]) -> None:
        """A traceback IPython shows: the cell's own error (an ``error`` frame, the one the
        execution ends with), or one shown while the cell goes on (``%run`` of a failing
        script, an event callback, a formatter, an Output widget): an error output now, in
        order, as ipykernel publishes every traceback its shell shows."""
        self.flush()
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
        error = {"ename": name, "evalue": value, "traceback": entries}
        if not _raised_by_cell():
            text = "\n".join(entries)
            data = {SHOWN_ERROR_MIME: error, "text/plain": text}
            self.output.send({"t": "display", "data": data, "metadata": {}})
            return
        self.reported = True
        self.sender.send({"t": "error", **error})

    def backend_fallback(self, name: str, note: str = NO_LIVE_FIGURES) -> None:
        """Note, once, that an interactive matplotlib backend is shown inline (or, ``note``,
        through ipympl)."""
        if not self.backend_noted:
            self.backend_noted = True
            self.flush()
            sys.stderr.write(note % name)
            sys.stderr.flush()

    # -- introspection ---------------------------------------------------------------------

    def complete(self, frame: CompleteFrame) -> Header:
        """Completions as ipykernel finds them: IPython's completer (with jedi where it is
        installed), through its provisional API, the matches made to share one span."""
        code, pos = frame.code, frame.cursor_pos
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
            "id": frame.id,
            "matches": matches,
            "cursor_start": start,
            "cursor_end": end,
        }

    def inspect(self, frame: InspectFrame) -> Header:
        code, pos = frame.code, frame.cursor_pos
        reply: Header = {"t": "inspect_reply", "id": frame.id, "found": False, "data": {}}
        try:
            from IPython.utils.tokenutil import token_at_cursor

            name = token_at_cursor(code, pos)
            data = self.shell.object_inspect_mime(name, detail_level=frame.detail)
        except Exception:
            return reply
        if isinstance(data, dict):
            reply.update(found=True, data=data)
        return reply


class InlineBackends:
    """Finds matplotlib's interactive backends as the inline one (``matplotlib.use('QtAgg')``,
    ``'webagg'``...), and nbagg as ipympl's where it is installed, saying so once."""

    def __init__(self, runner: IPythonRunner) -> None:
        self.runner = runner

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in BACKEND_MODULES:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> Any:
        name = spec.name.rsplit("backend_", 1)[-1]
        if name == "nbagg" and _has("ipympl"):
            import importlib

            self.runner.backend_fallback(name, NBAGG_AS_IPYMPL)
            module = importlib.import_module("ipympl.backend_nbagg")
            self.runner.shell.events.register("post_execute", _flush_nbagg_figures)
            return module
        from matplotlib_inline import backend_inline

        self.runner.backend_fallback(name)
        # Its own import enables the inline hooks only under its own name: here, by hand (the
        # shell's figure formats, and the figures shown after each cell).
        backend_inline.configure_inline_support(
            self.runner.shell, "module://matplotlib_inline.backend_inline"
        )
        return backend_inline  # (the module itself: one set of inline hooks, as on ipykernel)

    def exec_module(self, module: Any) -> None:
        pass


def _flush_nbagg_figures() -> None:
    """Show the figures made in interactive mode (``plt.ion()``) under the name 'nbagg', as
    nbagg shows them: ipympl's own hook does this only under ipympl's names (its
    ``flush_figures`` looks at ``matplotlib.get_backend()``)."""
    from IPython.display import display

    # (loaded by then, as the backend is matplotlib's; taken from sys.modules, so that the
    # worker's type check, for Python 3.8, does not read matplotlib's sources)
    matplotlib = sys.modules["matplotlib"]
    backend = sys.modules["ipympl.backend_nbagg"]._Backend_ipympl
    if matplotlib.get_backend().lower() != "nbagg" or not backend._draw_called:
        return
    try:
        figures = sys.modules["matplotlib._pylab_helpers"].Gcf.get_all_fig_managers()
        active = {manager.canvas.figure for manager in figures}
        for figure in [figure for figure in backend._to_show if figure in active]:
            display(figure.canvas)
    finally:
        backend._to_show = []
        backend._draw_called = False


class AltairAsData:
    """Altair, once imported, draws with its ``mimetype`` renderer: the Vega-Lite spec as data,
    which JupyterLab renders and the output filter checks. Its default renderer is HTML that
    loads Vega from a CDN, which the filter strips (no chart at all); code that enables a
    renderer of its own keeps it."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "altair":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        real = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            real(module)
            try:
                module.renderers.enable("mimetype")
            except Exception:
                pass

        # (this spec's loader: a new one per import)
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _raised_by_cell() -> bool:
    """Whether the traceback being shown is the cell's own error: shown by IPython's running
    of the cell the kernel asked for, not by code that runs within it (a magic such as
    ``%run``, an event callback, a formatter, an Output widget, a cell run from a cell)."""
    frame: Optional[FrameType] = sys._getframe(1)
    caller = None
    cells = 0
    while frame is not None:
        code = frame.f_code
        shell = code.co_filename.endswith(SHELL_FILE)
        ours = code.co_filename.startswith(WORKER_FILE_PREFIX)
        if caller is None and not ours and not (shell and code.co_name in SHOWING):
            caller = code
        if shell and code.co_name == "run_cell_async":
            cells += 1
        frame = frame.f_back
    return (
        caller is not None
        and caller.co_filename.endswith(SHELL_FILE)
        and caller.co_name in CELL_MACHINERY
        and cells <= 1
    )


def _without_worker_frames(error: Any, tb: Any) -> Any:
    """``tb`` (and the tracebacks of the exceptions chained to ``error``) without the frames
    of the worker's own modules: an interrupt is raised from the worker's signal handler."""
    seen: Set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 100:
        seen.add(id(error))
        error.__traceback__ = _strip(error.__traceback__)
        error = error.__cause__ or error.__context__
    return _strip(tb)


def _strip(tb: Any) -> Any:
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(WORKER_FILE_PREFIX):
            kept.append(tb)
        tb = tb.tb_next
    for index, entry in enumerate(kept):
        entry.tb_next = kept[index + 1] if index + 1 < len(kept) else None
    return kept[0] if kept else None


def _text(error: Any) -> str:
    try:
        return str(error)[:65536]
    except Exception:
        return "<str() of the exception failed>"


_TERMINALS: list[bool] = []


def _has_terminals() -> bool:
    """Whether the code can make a pseudo-terminal (once a process). Not under Landlock alone:
    it opens ``/dev/ptmx`` but not ``/dev/pts``, where the host's own terminals are too."""
    if not _TERMINALS:
        try:
            ends = os.openpty()
        except OSError:
            _TERMINALS.append(False)
        else:
            for end in ends:
                os.close(end)
            _TERMINALS.append(True)
    return _TERMINALS[0]


def _piped_system(cmd: str) -> int:
    """``!cmd`` where no terminal can be made: its stdout and stderr through one pipe, in
    order, as they come (programs see no terminal: no colours, no prompts); an interrupt goes
    on to it as SIGINT, as IPython's does. Its exit status, negative for a signal."""
    import codecs
    import signal
    import subprocess

    process = subprocess.Popen(
        cmd,
        shell=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = process.stdout
    assert out is not None
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        with out:
            while chunk := os.read(out.fileno(), 1 << 16):
                sys.stdout.write(decoder.decode(chunk))
                sys.stdout.flush()
            sys.stdout.write(decoder.decode(b"", final=True))
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
        print("^C")
    return process.wait()


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

    class ZMQInteractiveShell(InteractiveShell):  # type: ignore[misc]
        """IPython, as the sandbox kernel's cells see it: named as ipykernel's shell, which is
        how libraries (pandas, tqdm, rich, plotly) tell a notebook from a terminal."""

        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)
        parent_header: Any = None

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

        def _get_exc_info(self, exc_tuple: Any = None) -> Any:
            etype, value, tb = super()._get_exc_info(exc_tuple)
            return etype, value, _without_worker_frames(value, tb)

        def system(self, cmd: str) -> None:
            """``!cmd`` as on ipykernel: under a terminal (pexpect), so programs see one and
            their stdout and stderr come back as one stream, in order."""
            installer = runner.installs.installer(cmd)
            if installer is not None and runner.installs.refuse(installer, self):
                return
            if cmd.rstrip().endswith("&"):
                raise OSError("Background processes not supported.")  # (IPython's words)
            from IPython.utils.process import system as run_system

            # (depth=1: $names are expanded from the frame that ran the ! line)
            expanded = self.var_expand(cmd, depth=1)
            exit_code = run_system(expanded) if _has_terminals() else _piped_system(expanded)
            self.user_ns["_exit_code"] = exit_code
            if installer is not None:
                runner.installs.failed(installer, exit_code)
            if getattr(self, "system_raise_on_error", False) and exit_code != 0:
                from subprocess import CalledProcessError

                raise CalledProcessError(exit_code, cmd)

        def enable_gui(self, gui: Any = None) -> None:
            """``%gui``: as on ipykernel for ``asyncio`` (its loop runs the cells and runs
            between them already, ``idle.py``) and for the browser's backends (nothing to
            run); a window toolkit's loop has no display to run on in a sandbox."""

        def enable_matplotlib(self, gui: Any = None) -> Any:
            interactive = isinstance(gui, str) and gui.lower() not in (*NON_INTERACTIVE, "auto")
            if interactive and gui.lower() in ("widget", "ipympl", "module://ipympl.backend_nbagg"):
                interactive = False  # (ipympl's figures are widgets: relayed; or, without it,
                # the import fails as on ipykernel: "No module named 'ipympl'")
            elif interactive and gui.lower() in NBAGG and _has("ipympl"):
                runner.backend_fallback(gui, NBAGG_AS_IPYMPL)
                gui = "widget"
                interactive = False
            if interactive and not gui.startswith("module://matplotlib_inline"):
                runner.backend_fallback(gui)
                gui = "inline"
            return super().enable_matplotlib(gui)

        def init_virtualenv(self) -> None:
            pass  # (the interpreter is the environment: nothing to adjust)

        def get_parent(self) -> Any:
            """The request being handled, as ipykernel's shell gives it (the Output widget
            tags what it captures with its id)."""
            return self.parent_header or {}

        def set_parent(self, parent: Any) -> None:
            self.parent_header = parent

    # Where libraries look to tell a notebook from a terminal (tqdm.autonotebook looks for
    # ipykernel.zmqshell in sys.modules, plotly and rich at the shell's class and module):
    # this shell answers as ipykernel's does, and no module of the real ipykernel is loaded.
    ZMQInteractiveShell.__module__ = "ipykernel.zmqshell"
    _stand_in_ipykernel(ZMQInteractiveShell, runner.kernel_version)
    config = Config()
    # History lives in memory (the kernel answers history requests itself, across restarts):
    # no SQLite file in the sandbox's home, and no thread saving to one.
    config.HistoryManager.hist_file = ":memory:"
    # As a kernel's: libraries (tqdm.autonotebook, plotly) look for this section.
    config.IPKernelApp = Config()
    shell = ZMQInteractiveShell.instance(user_module=module, config=config)
    shell.kernel = KernelStandIn(shell)
    add_kernel_magics(shell, runner.installs)
    return shell


class KernelStandIn:
    """``get_ipython().kernel``: what libraries read of ipykernel's kernel object (pandas
    takes its presence for "in a notebook"; ipywidgets and the Output widget ask it for the
    comm manager and the request being handled)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    @property
    def comm_manager(self) -> Any:
        try:
            import comm
        except ImportError:
            return None
        return comm.get_comm_manager()

    def get_parent(self, channel: str = "shell") -> Any:
        return self.shell.get_parent()

    def do_shutdown(self, restart: bool = False) -> Any:
        """What notebooks call to restart their kernel: asked of the host, as ``exit()`` is
        (a sandbox kernel is stopped or restarted from the frontend only, and says so)."""
        self.shell.ask_exit()
        return {"status": "ok", "restart": restart}


def _stand_in_ipykernel(shell_class: Any, version: str) -> None:
    """``ipykernel`` and ``ipykernel.zmqshell`` in ``sys.modules``, as in a kernel: modules of
    their own (the real ones would start ZMQ machinery that a sandbox has no use for), with
    the version of the ipykernel that speaks for the sandbox, and nothing else inside."""
    if "ipykernel" in sys.modules:
        return
    import types

    # (a package with no other submodules: ``import ipykernel.comm`` fails as it would where
    # ipykernel is not installed)
    package = types.ModuleType("ipykernel", "Stand-in: the sandbox kernel's cells run here.")
    package.__path__ = []
    package.__version__ = version  # type: ignore[attr-defined]
    package.version_info = tuple(  # type: ignore[attr-defined]
        int(part) if part.isdigit() else part for part in version.split(".")
    )
    zmqshell = types.ModuleType("ipykernel.zmqshell")
    zmqshell.ZMQInteractiveShell = shell_class  # type: ignore[attr-defined]
    package.zmqshell = zmqshell  # type: ignore[attr-defined]
    sys.modules["ipykernel"] = package
    sys.modules["ipykernel.zmqshell"] = zmqshell
