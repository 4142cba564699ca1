"""``%%sandbox``: run one cell of an ordinary IPython kernel in a sandbox.

``%load_ext rewyn_kernel`` registers it. The cell body goes to a sandbox (a one-shot one, kept
warm per set of options, or a named session that keeps state); its output streams into the
notebook as it comes, rich output passes the same safety filter as the sandbox kernel's, and the
``SandboxResult`` is bound to a variable (``_sandbox`` unless ``--out`` says otherwise). The
limits are enforced where the code runs, not by inspecting it: there is nothing to get around.

``%sandbox`` (line) lists the named sessions, stops them (``%sandbox stop NAME`` or ``--all``)
and sets this notebook's defaults (``%sandbox config --timeout 10 --memory 256``), which
``c.SandboxMagics.*`` in an IPython config file can also set.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import publish_display_data

from rewyn_kernel.kernel._settings import configured, trait_value, traits_for
from rewyn_kernel.kernel.safety import drop_note, filter_bundle
from rewyn_kernel.runtime.sandbox import RichOutput, Sandbox, SandboxResult, Session
from rewyn_kernel.settings import (
    KernelSettings,
    Surface,
    from_options,
    option_arguments,
    taken_by,
)

_Item = tuple[str, Any]


MAGIC_SETTINGS = taken_by(Surface.MAGIC_DEFAULTS)
"""The settings this notebook's %%sandbox cells take defaults for (``c.SandboxMagics.*``)."""


def _options(function: Any) -> Any:
    """The options every %%sandbox cell and %sandbox config take (from rewyn_kernel.settings)."""
    for flags, kwargs in reversed(option_arguments(taken_by(Surface.MAGIC), defaults=False)):
        function = argument(*flags, **kwargs)(function)
    return function


@magics_class
class SandboxMagics(Magics):
    """%%sandbox and %sandbox; the traits are this notebook's defaults (``MAGIC_SETTINGS``;
    ``workspace`` None: this notebook's folder, the kernel's working directory)."""

    # (At class scope, locals() is the namespace the class is made from: see kernel/_settings.)
    locals().update(traits_for(Surface.MAGIC_DEFAULTS))

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        self._sandboxes: dict[str, Sandbox] = {}
        self._sessions: dict[str, Session] = {}

    # -- the magic -----------------------------------------------------------------------------

    @magic_arguments()
    @_options
    @argument("--session", help="run in this named session: state is kept between its cells")
    @argument("--out", default="_sandbox", help="variable the SandboxResult is bound to")
    @argument("words", nargs="*", help="(line) list | stop NAME | stop --all | config OPTIONS")
    @argument("--all", action="store_true", help="with stop: every session")
    @line_cell_magic
    def sandbox(self, line: str, cell: str | None = None) -> Any:
        """Run the cell in a sandbox (cell magic), or manage sessions and defaults (line)."""
        args = parse_argstring(self.sandbox, line)
        if cell is None:
            return self._line(args)
        if args.words:
            raise ValueError(f"%%sandbox takes options only, not {' '.join(args.words)!r}")
        target = self._target(args.session, self._merged(args))
        result = self._run(target, cell)
        if self.shell is not None:
            self.shell.user_ns[args.out] = result
        return None

    def _line(self, args: Any) -> Any:
        command = args.words[0] if args.words else "list"
        if command == "list":
            for name, session in sorted(self._sessions.items()):
                state = "closed" if session.closed else f"{session.execution_count} executions"
                print(f"{name}: {session.provider_name}, {state}")
            if not self._sessions:
                print("no sandbox sessions (start one with %%sandbox --session NAME)")
            return None
        if command == "stop":
            names = list(self._sessions) if args.all else args.words[1:]
            if not names:
                raise ValueError("%sandbox stop NAME (or --all)")
            for name in names:
                if name not in self._sessions:
                    raise KeyError(f"no sandbox session named {name!r}")
                self._sessions.pop(name).close()
            return None
        if command == "config":
            self._configure(args)
            return None
        raise ValueError(f"unknown %sandbox command {command!r}: use list, stop or config")

    # -- options -------------------------------------------------------------------------------

    def _configure(self, args: Any) -> None:
        settings = self._merged(args)
        for name in MAGIC_SETTINGS:
            setattr(self, name, trait_value(getattr(settings, name)))

    def _merged(self, args: Any) -> KernelSettings:
        """This notebook's defaults, overridden by the options on the line."""
        return from_options(args, base=configured(self, MAGIC_SETTINGS))

    def _target(self, session_name: str | None, settings: KernelSettings) -> Sandbox | Session:
        if session_name:
            session = self._sessions.get(session_name)
            if session is None or session.closed:
                session = self._sandbox(settings).session()
                self._sessions[session_name] = session
            return session
        return self._sandbox(settings)

    def _sandbox(self, settings: KernelSettings) -> Sandbox:
        """A sandbox per set of settings, kept so the next cell finds a warm worker."""
        key = settings.model_dump_json()
        box = self._sandboxes.get(key)
        if box is None or box.closed:
            box = settings.make_sandbox()
            self._sandboxes[key] = box
        return box

    # -- running -------------------------------------------------------------------------------

    def _run(self, target: Sandbox | Session, code: str) -> SandboxResult:
        """Execute in a thread; show output from this (the kernel's) thread as it comes.

        An interrupt of the notebook arrives here as KeyboardInterrupt: it is passed on to the
        code in the sandbox (whose state survives), and the cell ends when the code does.
        """
        items: queue.Queue[_Item] = queue.Queue()
        done: dict[str, Any] = {}

        def work() -> None:
            try:
                done["result"] = target.execute(
                    code,
                    on_stream=lambda name, text: items.put((name, text)),
                    on_output=lambda output: items.put(("rich", output)),
                )
            except BaseException as exc:
                done["error"] = exc
            finally:
                items.put(("end", None))

        threading.Thread(target=work, daemon=True, name="rewyn-magic").start()
        dropped: set[str] = set()
        while True:
            try:
                kind, value = items.get(timeout=0.1)
                if kind == "end":
                    break
                if kind == "rich":
                    dropped.update(_publish(value))
                else:
                    stream = sys.stdout if kind == "stdout" else sys.stderr
                    stream.write(value)
                    stream.flush()
            except queue.Empty:
                continue
            except KeyboardInterrupt:  # wherever it lands, the code in the sandbox gets it
                target.interrupt()
        if "error" in done:
            raise done["error"]
        result: SandboxResult = done["result"]
        if dropped:
            print(drop_note(sorted(dropped)), file=sys.stderr)
        _report(result)
        return result

    def close(self) -> None:
        """Close every sandbox and session this notebook opened."""
        for session in self._sessions.values():
            session.close()
        for box in self._sandboxes.values():
            box.close()
        self._sessions.clear()
        self._sandboxes.clear()


def _publish(output: RichOutput) -> tuple[str, ...]:
    filtered = filter_bundle(output.data, output.metadata)
    publish_display_data(data=filtered.data, metadata=filtered.metadata)
    return filtered.dropped


def _report(result: SandboxResult) -> None:
    """Say how the cell ended when it did not simply complete."""
    if result.error is not None and result.ending in ("exception", "interrupted", "timeout"):
        print("".join(result.error.traceback), end="", file=sys.stderr)
    if result.ending not in ("completed", "exception") or result.state_lost:
        print(f"[sandbox: {result.message or result.ending}]", file=sys.stderr)
