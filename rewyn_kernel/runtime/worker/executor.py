"""Running one execution's code: compile, run, show the last expression, report the error.

Runs in the code's process (see ``child.py``), with the plain standard library: this is the
executor for any Python 3.8+ without IPython.
"""

from __future__ import annotations

import ast
import linecache
import re
import sys
import traceback
import types

from .frontend import Output, mimebundle
from .wire import Sender

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Callable, Dict, List, Optional, Tuple

WORKER_FILE_PREFIX = "<rewyn-worker"
CO_COROUTINE = 0x80
ERROR_TEXT_LIMIT = 65536
TRACEBACK_LINE_LIMIT = 4096
TRACEBACK_LINES = 200


class Gate:
    """Whether the code is running now: a SIGINT raises KeyboardInterrupt only then."""

    def __init__(self) -> None:
        self.in_code = False
        self.pending = False  # an interrupt arrived before the code started: it does not start


IPYTHON_SYNTAX = re.compile(r"(?m)^\s*(%|!)|\?\s*$")
"""A magic, a shell command or a ``?`` help request: IPython's syntax, not Python's."""


class Runner:
    """Compiles and runs code in one namespace, reporting values and errors as frames."""

    syntax_hint = ""
    """Added to a SyntaxError in code that looks like IPython's (set where IPython was asked
    for and is missing, to say why ``%time`` is not understood)."""

    def __init__(
        self,
        namespace: Dict[str, Any],
        sender: Sender,
        output: Output,
        flush: Callable[[], None],
        gate: Gate,
    ) -> None:
        self.namespace = namespace
        self.sender = sender
        self.output = output
        self.flush = flush
        self.gate = gate
        self.loop: Any = None

    def run(self, code: str, count: int) -> Tuple[int, str]:
        """Run ``code`` as execution ``count``; return (exit code, status)."""
        filename = "<cell-%d>" % count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exit_code, status = 0, "ok"
        try:
            try:
                body, last = self.compile(code, filename)
                self.gate.in_code = True
                try:
                    if self.gate.pending:
                        raise KeyboardInterrupt("interrupted before the code started")
                    self.evaluate(body)
                    value = self.evaluate(last) if last is not None else None
                finally:
                    self.gate.in_code = False
                if value is not None:
                    self.namespace["_"] = value
                    data, metadata = mimebundle(value)
                    self.flush()  # what the cell printed comes before its value
                    frame = {"t": "result", "data": data, "metadata": metadata, "count": count}
                    self.output.send(frame)
            except SystemExit as exc:
                self.gate.in_code = False
                exit_code, status = exit_status(exc), "exit"
            except KeyboardInterrupt as exc:
                self.gate.in_code = False
                self.send_error(exc)
                exit_code, status = 130, "interrupted"
            except BaseException as exc:
                self.gate.in_code = False
                self.send_error(exc, code)
                exit_code, status = 1, "error"
        except KeyboardInterrupt:  # one that landed in the reporting above
            exit_code, status = 130, "interrupted"
        finally:
            self.gate.pending = False
        return exit_code, status

    @staticmethod
    def compile(code: str, filename: str) -> Tuple[types.CodeType, Optional[types.CodeType]]:
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            expression = ast.Expression(tree.body.pop().value)
            last = compile(expression, filename, "eval", flags, dont_inherit=True)
        body = compile(tree, filename, "exec", flags, dont_inherit=True)
        return body, last

    def evaluate(self, code: types.CodeType) -> Any:
        value = eval(code, self.namespace)
        if code.co_flags & CO_COROUTINE:
            import asyncio

            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            value = self.loop.run_until_complete(value)
        return value

    def send_error(self, exc: BaseException, code: str = "") -> None:
        name, value, lines = describe_error(exc)
        if self.syntax_hint and isinstance(exc, SyntaxError) and IPYTHON_SYNTAX.search(code):
            lines.append("(%s)\n" % self.syntax_hint)
        hint = sandbox_hint(exc)
        if hint:
            lines.append("(%s)\n" % hint)
        self.sender.send({"t": "error", "ename": name, "evalue": value, "traceback": lines})


READ_ONLY_HINT = (
    "rewyn: this path is read-only in the sandbox: the workspace's protected paths (VCS "
    "folders, notebooks, editor, shell and Jupyter settings, the Python environment the host "
    "runs from; the setting 'protected' adds more) and the folders shown with 'read_dirs' "
    "cannot be changed by the code"
)


NO_NETWORK_HINT = (
    "rewyn: this sandbox has no network (network='none'), so names do not resolve and no "
    "connection leaves it; a sandbox with an allow-list reaches the hosts it names (a kernel "
    "installed with --allow-host HOST; in JupyterLab, a host allowed for the notebook from the "
    "kernel's status line)"
)
MEMORY_HINT = (
    "rewyn: the sandbox's memory limit is %d MiB for all of its processes together; a sandbox "
    "made with a larger memory_limit_mb (a kernel installed with --memory MB) has more"
)
LIMITS: Dict[str, Any] = {"network": "allow", "memory_limit_mb": None}
"""The sandbox's settings that explain an error (set by the code's process at start)."""
NETWORK_ERRNOS = (101, 113)  # ENETUNREACH, EHOSTUNREACH: no route, no interface
RESOLVER_ERRNOS = (-2, -3, -5)  # EAI_NONAME, EAI_AGAIN, EAI_NODATA


def sandbox_hint(exc: BaseException) -> str:
    """What to add to an error the sandbox caused, or '': a write to a read-only path, a
    name or a connection that fails for want of a network, memory that ran out at the cap.
    The exceptions that libraries wrap around the cause (urllib's URLError, requests' and
    urllib3's) are followed to it."""
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno == 30:  # EROFS
            return READ_ONLY_HINT
        if LIMITS["network"] == "none" and isinstance(cause, OSError):
            resolver = type(cause).__name__ == "gaierror" and cause.errno in RESOLVER_ERRNOS
            if resolver or cause.errno in NETWORK_ERRNOS:
                return NO_NETWORK_HINT
        if isinstance(cause, MemoryError) and LIMITS["memory_limit_mb"]:
            return MEMORY_HINT % int(LIMITS["memory_limit_mb"])
    return ""


def _causes(exc: BaseException) -> List[BaseException]:
    """``exc`` and the exceptions it wraps: chained, or held as ``reason`` or an argument."""
    found: List[BaseException] = []
    todo: List[Any] = [exc]
    while todo and len(found) < 32:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or any(item is seen for seen in found):
            continue
        found.append(item)
        try:  # (the code's own exception classes: anything may raise here)
            todo += [item.__cause__, item.__context__, getattr(item, "reason", None)]
            todo += [arg for arg in tuple(item.args)[:4] if isinstance(arg, BaseException)]
        except Exception:
            pass
    return found


def describe_error(exc: BaseException) -> Tuple[str, str, List[str]]:
    """(name, value, traceback lines as Python prints them), without the worker's frames."""
    try:
        report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        report.stack = traceback.StackSummary.from_list(
            [f for f in report.stack if not f.filename.startswith(WORKER_FILE_PREFIX)]
        )
        lines = list(report.format())
    except Exception:
        lines = ["%s: <the exception could not be formatted>\n" % type(exc).__name__]
    if len(lines) > TRACEBACK_LINES:
        half = TRACEBACK_LINES // 2
        dropped = len(lines) - 2 * half
        lines = [*lines[:half], "... %d lines omitted ...\n" % dropped, *lines[-half:]]
    lines = [line[:TRACEBACK_LINE_LIMIT] for line in lines]
    try:
        value = str(exc)[:ERROR_TEXT_LIMIT]
    except Exception:
        value = "<str() of the exception failed>"
    return type(exc).__name__[:200], value, lines


def exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code if -(2**31) <= code < 2**31 else 1
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1
