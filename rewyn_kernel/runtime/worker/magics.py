"""The magics a kernel's shell adds to IPython's, as the sandbox's shell has them.

ipykernel's shell brings its own line magics (``KernelMagics`` in ``zmqshell.py``): a pager for
files and man pages, ``%clear``, ``%autosave``, ``%connect_info`` and ``%qtconsole``. A notebook
that uses them must not meet "magic not found" in a sandbox, so each is here, doing what it can
do from inside one: the pager goes out as a payload as on ipykernel; the two that would show the
kernel's connection (its key) or start a program on the host say so instead.

Installs (``%pip``, ``%uv``, ``!pip install``) go where the kernel keeps them for the notebook
(kernel/packages.py), and the note after one that worked is plain output. They are run, not
refused: without a network the package tools work offline (``PIP_NO_INDEX``, ``UV_OFFLINE``),
so an install whose packages are all in place succeeds as it does on ipykernel ("Requirement
already satisfied"), and one that needs a download fails with the tool's own error and then one
note that says why. conda and
its kin have no useful offline install: they are refused at once, with the same note.
"""

from __future__ import annotations

import io
import os
import re
import sys
from contextlib import redirect_stdout

from . import kept

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, FrozenSet, Optional

INSTALL = re.compile(
    r"(^|[\s;&|(])(pip3?|python3?(\.\d+)?\s+-m\s+pip|uv\s+pip|uv|conda|mamba|micromamba)"
    r"\s+(install|add|sync)\b"
)
"""A command that installs packages (what ``%pip install``, ``!pip install`` and the like run)."""
NEEDS_INDEX = frozenset({"conda", "mamba", "micromamba"})
"""Installers that are refused at once without a network (no useful offline install)."""
HOW_TO_INSTALL = (
    'To install from the Python package index, allow it for this notebook: "Allow the Python '
    "package index for this notebook\" in the kernel's status line; or install a kernel that "
    "lists it, rewyn-kernel install --allow-host pypi.org --allow-host files.pythonhosted.org. "
    "Or install the package into the environment the sandbox runs (or its image)]\n"
)
NO_NETWORK = "[rewyn: %s needs the network, and this sandbox has none (network='none'). "
OFFLINE_FAILED = (
    "[rewyn: %s failed, and this sandbox has no network (network='none'): it can install only "
    "what is already on disk. "
)
OFFLINE_ENVIRONMENT = (
    ("PIP_NO_INDEX", "1"),
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ("UV_OFFLINE", "1"),
)
"""What makes pip and uv work from what is installed and on disk, without trying a network
that a sandbox does not have (and so failing at once rather than after retries)."""
PROXIED_DONE = (
    "[rewyn: installed into %s, the sandbox's own site-packages (under its HOME): it imports "
    "from there at once, and goes with the sandbox]\n"
)
KEPT_DONE = (
    "[rewyn: installed into %s, the notebook's own packages: it imports from there at once, "
    "and the notebook's next kernels have it too (rewyn-kernel packages lists and removes "
    "them)]\n"
)
PROXIED_FAILED = (
    "[rewyn: %s failed. This sandbox reaches only the hosts of its allow-list (network=[...]) "
    "through a proxy, which refuses the others (pip may say only that no version was found). "
)
DISK_FULL = "[rewyn: %s failed: the sandbox's disk quota (disk_limit_mb) is full]\n"
RESTART_NOTE = "Note: you may need to restart the kernel to use updated packages."
"""What IPython prints after ``%pip`` and its kin (left out after a failed install)."""
CONNECT_INFO = (
    "This kernel runs its code in a sandbox: its connection file, with the key that signs its "
    "messages, stays on the host, out of the code's reach, so it is not shown here.\n"
    "To connect another client to this kernel, on the host run:\n"
    "    $> jupyter <app> --existing\n"
    "if this is the most recent Jupyter kernel you have started, or pass the kernel's "
    "kernel-*.json from `jupyter --runtime-dir`."
)
NO_HOST_PROGRAMS = (
    "[rewyn: %qtconsole starts a program on the host, which code in a sandbox cannot do. On "
    "the host, run: jupyter qtconsole --existing]\n"
)

UNDO_ALONE = (
    "%undo must be a cell of its own: the kernel reads it on the host, before anything runs "
    "in the sandbox (code in a cell cannot ask for an undo)"
)


class Installs:
    """Runs installs offline where the sandbox has no network, and says why one failed."""

    def __init__(self, network: str) -> None:
        self.offline = network == "none"
        self.proxied = network == "proxy"  # (an allow-list: see child.set_path)
        self.kept = kept.wanted()  # (the kernel keeps installs for the notebook: kept.py)
        self.in_magic = False  # (a magic's own wrapper says why, after the tool's output)
        self.before = None  # type: Optional[FrozenSet[str]]
        if self.offline:
            for name, value in OFFLINE_ENVIRONMENT:
                os.environ[name] = value

    def installer(self, command: str) -> Optional[str]:
        """The installer ``command`` runs ("pip", "uv pip", "conda" ...) when it installs
        packages in a sandbox with no network; None otherwise."""
        watched = self.offline or self.proxied or self.kept
        match = INSTALL.search(command) if watched else None
        if match is None:
            return None
        self.before = _listing(_user_site()) if self.kept else None
        return re.sub(r"\s+", " ", match.group(2))

    def refuse(self, installer: str, shell: Any) -> bool:
        """Say, and return True, when ``installer`` cannot work offline at all."""
        if not self.offline or installer.split(maxsplit=1)[0] not in NEEDS_INDEX:
            return False
        self.explain(NO_NETWORK, installer)
        shell.user_ns["_exit_code"] = 1
        return True

    def failed(self, installer: str, exit_code: int) -> None:
        """After a shell command that ran ``installer``: say why it failed, if it did (or,
        through the proxy, where it installed)."""
        if not self.in_magic:
            self.after(installer, exit_code == 0)

    def after(self, installer: str, ok: bool, output: str = "") -> None:
        """Say where an install went (plain output), or why one failed (an error), from its
        ``output`` where it was captured."""
        target = _user_site() if self.kept else os.environ.get("PIP_TARGET", "")
        if self.kept and target:  # (an upgrade in a virtual environment leaves the old one)
            sys.stdout.write(kept.tidy(target))
        if not ok and "No space left on device" in output:
            self.explain(DISK_FULL, installer)
            return
        changed = not self.kept or _listing(target) != self.before
        if ok:  # (and nothing to say after "Requirement already satisfied")
            pip = installer.split(maxsplit=1)[0] in ("pip", "pip3", "python")
            if changed and target and pip:
                sys.stdout.write((KEPT_DONE if self.kept else PROXIED_DONE) % target)
                sys.stdout.flush()
        elif self.proxied:
            self.explain(PROXIED_FAILED, installer)
        elif self.offline:
            self.explain(OFFLINE_FAILED, installer)

    def explain(self, words: str, installer: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(
            words % _command(installer) + ("" if words == DISK_FULL else HOW_TO_INSTALL)
        )
        sys.stderr.flush()


def _listing(folder: str) -> FrozenSet[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def _user_site() -> str:
    import site

    return site.getusersitepackages()


def uninstalled(installs: Installs, line: str) -> Optional[str]:
    """What ``pip uninstall`` (``line`` after ``pip``) printed, where the packages are kept for
    the notebook and pip would refuse them (see kept.py); None where pip is to run."""
    words = line.split()
    if not installs.kept or not words or words[0] != "uninstall":
        return None
    names = [word for word in words[1:] if not word.startswith("-")]
    return kept.uninstall(names, _user_site()) or None


def _command(installer: str) -> str:
    """How a note names what ran: "pip install" for "python -m pip", and so on."""
    return installer.rsplit(maxsplit=1)[-1] + " install"


def add_kernel_magics(shell: Any, installs: Installs) -> None:
    """Register ipykernel's own line magics on ``shell``, and wrap its install magics."""
    from IPython.core import page
    from IPython.core.error import UsageError
    from IPython.utils import openpy

    def less(arg_s: str) -> None:
        """Show a file through the pager. Files ending in .py are syntax-highlighted."""
        if not arg_s:
            raise UsageError("Missing filename.")
        if arg_s.endswith(".py"):
            text = shell.pycolorize(openpy.read_py_file(arg_s, skip_encoding_cookie=False))
        else:
            with open(arg_s) as handle:
                text = handle.read()
        page.page(text)

    def man(arg_s: str) -> None:
        """Find the man page for the given command and display in pager."""
        page.page(shell.getoutput("man %s | col -b" % arg_s, split=False))

    def clear(arg_s: str) -> None:
        """Clear the terminal."""
        shell.system("clear")

    def connect_info(arg_s: str) -> None:
        """How to connect another client to this kernel (its connection stays on the host)."""
        print(CONNECT_INFO)

    def qtconsole(arg_s: str) -> None:
        """Open a qtconsole connected to this kernel: from the host, not from a sandbox."""
        sys.stdout.flush()
        sys.stderr.write(NO_HOST_PROGRAMS)
        sys.stderr.flush()

    def autosave(arg_s: str) -> None:
        """Set the autosave interval in the notebook (in seconds); 0 disables it."""
        try:
            interval = int(arg_s)
        except ValueError:
            raise UsageError("%%autosave requires an integer, got %r" % arg_s) from None
        # (ipykernel also sends the classic notebook's JavaScript, which JupyterLab ignores
        # and the sandbox's output filter drops: the words are what a person sees)
        print("Autosaving every %i seconds" % interval if interval else "Autosave disabled")

    def undo(arg_s: str) -> None:
        """Undo the last cell's changes to the state: the kernel does it, on the host."""
        raise UsageError(UNDO_ALONE)

    for name, function in (
        ("undo", undo),
        ("less", less),
        ("more", less),
        ("man", man),
        ("clear", clear),
        ("connect_info", connect_info),
        ("qtconsole", qtconsole),
        ("autosave", autosave),
    ):
        shell.register_magic_function(function, "line", name)
    _wrap_install_magics(shell, installs)


def _wrap_install_magics(shell: Any, installs: Installs) -> None:
    """%pip, %uv, %conda and the like: when an install fails for want of a network, the
    tool's error and one note that says why, not IPython's "you may need to restart"."""
    try:  # (loaded now: IPython 9 loads them lazily, on first use, over what is wrapped here)
        from IPython.core.magics.packaging import PackagingMagics

        shell.register_magics(PackagingMagics)
    except ImportError:
        pass
    line_magics = shell.magics_manager.magics["line"]
    for name in ("pip", "uv", "conda", "mamba", "micromamba"):
        original = line_magics.get(name)
        if original is None:
            continue

        def magic(line: str, _name: str = name, _original: Any = original) -> Any:
            done = uninstalled(installs, line) if _name == "pip" else None
            if done is not None:
                sys.stdout.write(done)
                return None
            installer = installs.installer("%s %s" % (_name, line))
            if installer is None:
                return _original(line)
            if installs.refuse(installer, shell):
                return None
            captured = io.StringIO()
            installs.in_magic = True
            try:
                with redirect_stdout(captured):
                    result = _original(line)
            finally:
                installs.in_magic = False
            text = captured.getvalue()
            if shell.user_ns.get("_exit_code", 0) == 0:
                sys.stdout.write(text)
                installs.after(installer, True)
                return result
            head, note, tail = text.rpartition(RESTART_NOTE)
            sys.stdout.write(head + tail.lstrip("\n") if note else text)
            installs.after(installer, False, text)
            return None

        shell.register_magic_function(magic, "line", name)
