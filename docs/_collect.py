"""Run the code blocks of the documentation's pages as tests (Sybil; docs/conftest.py wires it).

What runs, per page (``docs/**/*.md``), in the order of the page:

- A fenced ```` ```python ```` block runs in this process. The page's blocks share one
  namespace. Top-level ``await`` works (the block then runs in an event loop of its own).
- A ```` ```bash ```` (or ``sh``) block runs as one ``bash`` script under ``set -euo pipefail``.
  A ```` ```console ```` block runs its ``$ `` lines the same way (a line ending in ``\\`` goes
  on to the next; the other lines are output, shown to the reader and not compared).
- ```` ```{code-block} LANGUAGE ```` (or ``{code}``) runs as a fenced block of LANGUAGE does.
- A ```` ```{code-cell} ```` block, or a ```` ```python ```` block just under the comment
  ``% kernel``, runs as a cell of the real sandboxed kernel ("Python (sandboxed)",
  ``rewyn_kernel.kernel.kernelspec.KERNEL_NAME``), started with jupyter_client in the page's
  folder (the notebook's folder, so it is the kernel's workspace). One kernel per page and
  kernelspec; the cells come at a person's pace (a pause before each, so each has its undo
  point). Options, any of them, after a colon: ``spec=NAME`` runs it on the kernelspec NAME
  (one a ``bash`` block of the page installed, say); ``cwd=DIR`` starts the kernel in DIR, a
  folder under the page's (the notebook's folder; it counts at the kernel's first cell only);
  ``expect=error``: the cell must end in an error (a time limit, a refused host).
- Any other block (```` ```text ````, ```` ```json ````, ```` ```toml ````...) is for reading.
  A python block in IPython's syntax (``%%sandbox``, ``%pip``) fails as plain Python: run it
  on a kernel (``% kernel: spec=python3`` is the plain IPython kernel, where ``%%sandbox``
  belongs) or mark it not-run.

Every page gets a fresh folder, the current directory of all its blocks and its kernels, and
Jupyter's data, runtime and config dirs of its own (``JUPYTER_DATA_DIR``... beside that
folder), so ``rewyn-kernel install --user``, ``agent-token`` and the run logs stay in it. The
dev venv's ``bin/`` is first on ``PATH``: ``rewyn-kernel`` and ``python`` are the project's.

Comments on the line(s) just before a block (MyST comments, not rendered):

- ``% not-run: REASON``: the block does not run. REASON must say why; a marker without one, or
  one that no block follows, is an error when the page is collected.
- ``% kernel`` / ``% kernel: spec=NAME expect=error``: above.
- ``% needs: bubblewrap`` (or ``landlock``, ``docker``, ``podman``; comma-separated): the block
  is skipped where that is missing, except under ``CI``, where it fails.

No block may send traffic anywhere but loopback. Where ``unshare --net`` works (as root), shell
blocks and the page's kernels run in a network namespace of their own with only loopback up (a
kernel then speaks to the collector over Unix sockets). A connection a Python block (or a
thread it started, such as the sandbox's egress proxy) makes to anything but loopback or a Unix
socket raises ``PermissionError``. A process a Python block starts itself (``rewyn-kernel
mcp``) is not confined: give it no ``--allow-host``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

PAGE_KEY = "__rewyn_docs_page__"
"""Where a page's state sits in its namespace (which is also its Python blocks' globals)."""
VENV_BIN = Path(sys.executable).parent
SHELL_TIMEOUT = 100.0
"""Seconds a shell block may take (pytest's own per-test timeout is 120 s)."""
CELL_TIMEOUT = 60.0
"""Seconds a kernel cell may take."""
PACE = 0.3
"""Seconds between two kernel cells: the kernel keeps an undo point for a cell only when it
did not come at once after the one before (as cells a person runs do not)."""
NEEDS = ("bubblewrap", "landlock", "docker", "podman")

MARKER = re.compile(r"[ \t]*%[ \t]*(?P<name>[\w-]+)[ \t]*(?P<colon>:?)(?P<rest>.*)")
LOOKS_LIKE_NOT_RUN = re.compile(r"[ \t]*%[ \t]*not[-_ ]?run", re.IGNORECASE)
INFO = re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)
DIRECTIVE = re.compile(r"\{(?P<name>code-cell|code-block|code|sourcecode)\}(?P<language>.*)")
SHELLS = {"bash", "sh", "shell"}
PYTHONS = {"python", "py", "python3"}


class PageError(ValueError):
    """A page whose markers are wrong: it fails when collected, naming the line."""


@dataclass(frozen=True)
class Block:
    """One block that runs: ``kind`` is python, shell or kernel; ``source`` the code."""

    kind: str
    source: str
    line: int
    spec: str | None = None
    expect_error: bool = False
    needs: tuple[str, ...] = ()
    cwd: str = "."


@dataclass
class Kernel:
    """A kernel of the page, started on first use."""

    manager: Any
    client: Any

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=False)


@dataclass
class Page:
    """One page's folder, environment and kernels."""

    root: Path
    folder: Path
    env: dict[str, str]
    kernels: dict[str, Kernel] = field(default_factory=dict)
    saved_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls) -> Page:
        root = Path(tempfile.mkdtemp(prefix="rewyn-docs-"))
        folder = root / "page"
        folder.mkdir()
        env = dict(os.environ)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        for name in ("data", "runtime", "config"):
            path = root / "jupyter" / name
            path.mkdir(parents=True)
            env[f"JUPYTER_{name.upper()}_DIR"] = str(path)
        env.pop("JUPYTER_PATH", None)
        page = cls(root, folder, env, saved_env=dict(os.environ))
        os.environ.clear()
        os.environ.update(env)
        return page

    def close(self) -> None:
        try:
            for kernel in self.kernels.values():
                kernel.close()
        finally:
            os.environ.clear()
            os.environ.update(self.saved_env)
            shutil.rmtree(self.root, ignore_errors=True)

    @contextmanager
    def inside(self) -> Iterator[None]:
        """The page's folder as the current directory, for the length of a block."""
        before = os.getcwd()
        os.chdir(self.folder)
        try:
            yield
        finally:
            os.chdir(before)

    def kernel(self, spec: str, cwd: str) -> Kernel:
        """The page's kernel of ``spec``, started in ``cwd`` (under the page's folder) when the
        page has none yet."""
        if spec not in self.kernels:
            manager = _manager(spec, self.root)
            manager.start_kernel(cwd=str(self.folder / cwd))
            client = manager.client()
            client.start_channels()
            kernel = Kernel(manager, client)
            self.kernels[spec] = kernel
            client.wait_for_ready(timeout=60)
        return self.kernels[spec]


def _manager(spec: str, root: Path) -> Any:
    """A KernelManager for ``spec``. Where shell blocks get a network namespace, the kernel gets
    one too, and speaks to us over Unix sockets (the ``ipc`` transport) under ``root``."""
    from jupyter_client.manager import KernelManager

    if not NETNS:
        return KernelManager(kernel_name=spec)

    class Isolated(KernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            command: list[str] = super().format_kernel_cmd(extra_arguments)
            return [*NETNS_PREFIX, *command]

    sockets = root / f"kernel-{len(os.listdir(root))}"
    return Isolated(kernel_name=spec, transport="ipc", ip=str(sockets))


def setup(namespace: dict[str, Any]) -> None:
    namespace[PAGE_KEY] = Page.open()


def teardown(namespace: dict[str, Any]) -> None:
    page = namespace.pop(PAGE_KEY, None)
    if isinstance(page, Page):
        page.close()


def page_of(example: Example) -> Page:
    page = example.namespace[PAGE_KEY]
    assert isinstance(page, Page)
    return page


# Parsing


def markers_above(text: str, fence_start: int) -> list[tuple[int, re.Match[str]]]:
    """The ``%`` comment lines right above the fence at ``fence_start`` (their offsets)."""
    found: list[tuple[int, re.Match[str]]] = []
    end = text.rfind("\n", 0, fence_start)
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        match = MARKER.fullmatch(text, start, end)
        if match is None:
            break
        found.append((start, match))
        end = start - 1
    return found


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def block_of(document: Document, region: Region) -> Block | None:
    """The block a fenced region holds, or None when it is for reading only or not run."""
    text = document.text
    info = str(region.lexemes["info"]).strip()
    source = str(region.lexemes["source"])
    line = line_of(text, region.start)
    spec: str | None = None
    cwd = "."
    expect_error = False
    needs: list[str] = []
    kernel = False
    for offset, marker in markers_above(text, region.start):
        name, rest = marker["name"], marker["rest"].strip()
        where = f"{document.path}:{line_of(text, offset)}"
        if LOOKS_LIKE_NOT_RUN.match(marker[0]) and name != "not-run":
            raise PageError(f"{where}: write the marker as `% not-run: REASON`")
        if name == "not-run":
            if not marker["colon"] or not rest:
                raise PageError(f"{where}: `% not-run:` needs a reason after the colon")
            return None
        if name == "kernel":
            kernel = True
            for word in rest.split():
                key, _, value = word.partition("=")
                if key == "spec" and value:
                    spec = value
                elif key == "cwd" and value:
                    cwd = value
                elif word == "expect=error":
                    expect_error = True
                else:
                    raise PageError(f"{where}: `% kernel:` takes spec=, cwd= and expect=error")
        elif name == "needs":
            for need in filter(None, (n.strip() for n in rest.split(","))):
                if need not in NEEDS:
                    raise PageError(f"{where}: `% needs:` knows {', '.join(NEEDS)}")
                needs.append(need)
    directive = DIRECTIVE.fullmatch(info)
    if directive is not None:  # ```{code-cell}, or ```{code-block} LANGUAGE and its kin
        lines = source.splitlines(keepends=True)
        while lines and re.match(r"\s*:[\w-]+:", lines[0]):
            lines.pop(0)
        source = "".join(lines)
        if directive["name"] == "code-cell":
            return Block("kernel", source, line, spec, expect_error, tuple(needs), cwd)
        info = directive["language"].strip()
    if info in PYTHONS:
        kind = "kernel" if kernel else "python"
        return Block(kind, source, line, spec, expect_error, tuple(needs), cwd)
    if kernel:
        raise PageError(f"{document.path}:{line}: `% kernel` marks a python block only")
    if info in SHELLS:
        return Block("shell", source, line, needs=tuple(needs))
    if info == "console":
        return Block("shell", console_commands(source), line, needs=tuple(needs))
    return None


def console_commands(source: str) -> str:
    """The commands of a console block: its ``$ `` lines and their continuations."""
    commands: list[str] = []
    going_on = False
    for raw in source.splitlines():
        if going_on:
            commands.append(raw[2:] if raw.startswith("> ") else raw)
        elif raw.startswith("$ "):
            commands.append(raw[2:])
        else:
            continue
        going_on = raw.endswith("\\")
    return "\n".join(commands) + "\n"


def parse(document: Document) -> Iterable[Region]:
    """Sybil's parser: a region, with its evaluator, for each block that runs."""
    lexer = RawFencedCodeBlockLexer(info_pattern=INFO)
    used: set[int] = set()
    for region in lexer(document):
        used.update(offset for offset, _ in markers_above(document.text, region.start))
        block = block_of(document, region)
        if block is not None:
            yield Region(region.start, region.end, parsed=block, evaluator=evaluate)
    for match in re.finditer(r"^.*$", document.text, re.MULTILINE):
        marker = MARKER.fullmatch(match[0])
        if match.start() in used or not (
            LOOKS_LIKE_NOT_RUN.match(match[0])
            or (marker is not None and marker["name"] in ("kernel", "needs"))
        ):
            continue
        where = f"{document.path}:{line_of(document.text, match.start())}"
        raise PageError(
            f"{where}: {match[0].strip()!r} marks nothing: write `% not-run: REASON`, `% kernel`"
            " or `% needs: ...` on the line just before the block it is for"
        )


# Running


def evaluate(example: Example) -> str | None:
    """Run one block: None when it did what it should, else what went wrong (Sybil fails the
    test with it; a text, so the report needs none of the traceback's frames of Sybil's own)."""
    block = example.parsed
    assert isinstance(block, Block)
    for need in block.needs:
        if (missing := why_missing(need)) is not None:
            message = f"this block needs {need}: {missing}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    page = page_of(example)
    try:
        if block.kind == "python":
            run_python(example, block, page)
        elif block.kind == "shell":
            run_shell(example, block, page)
        else:
            run_cell(example, block, page)
    except BlockFailed as exc:
        return str(exc)
    except (Exception, SystemExit) as exc:  # the page's own Python raised
        return page_traceback(exc, example.path)
    return None


class BlockFailed(AssertionError):
    """A shell block or a kernel cell that did not end as it should; the message says how."""


def page_traceback(exc: BaseException, path: str) -> str:
    """The traceback of ``exc`` from the page's own frames down (the collector's left out)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename == path), 0)
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(frames[first:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def why_missing(need: str) -> str | None:
    """Why ``need`` cannot be had here, or None when it can."""
    if need == "bubblewrap":
        from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap

        found = probe_bubblewrap()
        return None if found.works else f"bubblewrap is not usable here ({found.detail})"
    if need == "landlock":
        from rewyn_kernel.runtime.providers.landlock import probe_landlock

        support = probe_landlock()
        return None if support.works else f"landlock is not usable here ({support.detail})"
    if shutil.which(need) is None:
        return f"no {need} on PATH"
    answer = subprocess.run([need, "info"], capture_output=True, timeout=20, check=False)
    return None if answer.returncode == 0 else f"`{need} info` failed: the engine does not answer"


def run_python(example: Example, block: Block, page: Page) -> None:
    source = "\n" * (block.line) + block.source  # tracebacks name the page's own lines
    code = compile(source, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with page.inside(), loopback_only():
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, example.namespace))
        else:
            exec(code, example.namespace)


def run_shell(example: Example, block: Block, page: Page) -> None:
    script = "set -euo pipefail\n" + block.source
    argv = [*NETNS_PREFIX, "bash", "-c", script] if NETNS else ["bash", "-c", script]
    try:
        done = subprocess.run(
            argv,
            cwd=page.folder,
            env=page.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SHELL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BlockFailed(f"the block ran past {SHELL_TIMEOUT:.0f} s:\n{block.source}") from exc
    print(done.stdout, done.stderr, sep="")  # pytest shows it with -rP
    if done.returncode != 0:
        raise BlockFailed(
            f"the block exited {done.returncode}:\n{block.source}\n"
            f"--- stdout\n{tail(done.stdout)}\n--- stderr\n{tail(done.stderr)}"
        )


def run_cell(example: Example, block: Block, page: Page) -> None:
    from rewyn_kernel.kernel.kernelspec import KERNEL_NAME

    spec = block.spec or KERNEL_NAME
    with page.inside():
        kernel = page.kernel(spec, block.cwd)
    time.sleep(PACE)
    client = kernel.client
    msg_id = client.execute(block.source, allow_stdin=False, stop_on_error=False)
    texts: list[str] = []
    deadline = time.monotonic() + CELL_TIMEOUT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BlockFailed(f"the cell ran past {CELL_TIMEOUT:.0f} s: {''.join(texts)}")
        try:
            msg = client.get_iopub_msg(timeout=min(left, 1.0))
        except Exception:  # queue.Empty
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "stream":
            texts.append(content["text"])
        elif kind == "error":
            texts.append("\n".join(content["traceback"]))
    while True:
        reply = client.get_shell_msg(timeout=CELL_TIMEOUT)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    status = reply["content"]["status"]
    output = ANSI.sub("", "".join(texts))
    print(output)  # pytest shows it with -rP, to check what a page says the reader sees
    if block.expect_error and status != "error":
        raise BlockFailed(f"the cell was to end in an error; it ended {status}:\n{output}")
    if not block.expect_error and status != "ok":
        raise BlockFailed(f"the cell on {spec} ended {status}:\n{tail(output)}")


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tail(text: str, keep: int = 4000) -> str:
    return text if len(text) <= keep else "[...]\n" + text[-keep:]


def netns_works() -> bool:
    """Whether a shell block can run in a network namespace with loopback alone."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = ["unshare", "--net", "--", "ip", "link", "set", "lo", "up"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


NETNS = netns_works()
NETNS_PREFIX = ["unshare", "--net", "--", "bash", "-c", 'ip link set lo up && exec "$@"', "-"]
"""What runs a command in a network namespace of its own, with loopback up."""

# Python blocks: loopback only


class _Guard:
    active = 0


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _Guard.active:
        return
    address = args[1]
    if not isinstance(address, tuple):  # a Unix socket (str or bytes)
        return
    host = str(address[0])
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host.split("%", maxsplit=1)[0]).is_loopback:
            return
    except ValueError:
        pass
    raise PermissionError(f"a docs block may reach loopback only, not {host}:{address[1]}")


sys.addaudithook(_audit)


@contextmanager
def loopback_only() -> Iterator[None]:
    _Guard.active += 1
    try:
        yield
    finally:
        _Guard.active -= 1


def _report_any_failure() -> None:
    """Sybil's pytest item trims a failure's traceback to the example's frames, and fails with
    IndexError (an INTERNALERROR that stops the run) when the failure has none: a warning that
    pytest raises after the block (an unclosed file's ResourceWarning, under
    ``filterwarnings = error``). Fall back to the whole traceback then."""
    from _pytest._code.code import Traceback
    from sybil.integration.pytest import SybilItem

    trim = SybilItem._traceback_filter

    def trim_or_keep(item: SybilItem, excinfo: pytest.ExceptionInfo[BaseException]) -> Traceback:
        try:
            return trim(item, excinfo)
        except IndexError:
            return excinfo.traceback

    setattr(SybilItem, "_traceback_filter", trim_or_keep)  # noqa: B010 (a method, replaced)


_report_any_failure()


def make_sybil(path: Path) -> Sybil:
    """The Sybil that runs every page under ``path`` (docs/)."""
    return Sybil(
        parsers=[parse],
        patterns=["*.md"],
        excludes=["_build/*", "_static/*", "_ext/*", "README.md"],
        path=str(path),
        setup=setup,
        teardown=teardown,
    )
