"""The kernelspec: the kernel.json and logos that let Jupyter list and launch the sandboxed kernel.

Modelled on ipykernel's ``kernelspec.py``: build the kernel dict, write a spec directory, install
it (for the user, into an environment's ``sys.prefix``, or under any prefix) with jupyter_client.
``rewyn-kernel install`` is a thin command on top (see ``rewyn_kernel/cli.py``), and the wheel
ships the default spec from ``kernelspec/`` as shared data, so ``pip install`` alone lists it.

Settings travel as traitlets flags in ``argv`` (``--SandboxKernel.provider=container``), never as
an ``env`` block: the sandbox's variables are written only where ``install --env`` names them
(``--SandboxKernel.env=NAME=VALUE``), and the host's own environment never.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_core.paths import jupyter_path

from rewyn_kernel.settings import KernelSettings

if TYPE_CHECKING:
    from jupyter_client.kernelspec import KernelSpecManager

__all__ = [
    "DISPLAY_NAME",
    "KERNEL_NAME",
    "KernelSettings",
    "build_kernel_dict",
    "default_display_name",
    "install",
    "launches_sandbox_kernel",
    "normalize_kernel_name",
    "write_kernel_spec",
]

BOOT = (
    "import sys;sys.path[:]=[p for p in sys.path if p.startswith('/')];"
    "from rewyn_kernel.__main__ import main;main()"
)
"""What the kernel's interpreter runs. Jupyter starts a kernel in its notebook's directory, and
``python -m`` (or ``-c``) puts that directory first on the import path: a ``pydantic.py`` the
code left beside the notebook would then run here, on the host, outside every sandbox. So the
path keeps only absolute entries before the first import (the user's site-packages stay, unlike
under ``-I``, for a ``pip install --user``)."""
LAUNCH = ["-c", BOOT]
"""The kernel's argv after the interpreter (then ``-f {connection_file}`` and the flags)."""


def launches_sandbox_kernel(argv: list[str]) -> bool:
    """Whether a kernelspec's ``argv`` starts this package's kernel (``LAUNCH``, or the
    ``-m rewyn_kernel`` of specs written before it)."""
    return argv[1:3] == LAUNCH or argv[1:3] == ["-m", "rewyn_kernel"]


KERNEL_NAME = "rewyn-sandbox"
DISPLAY_NAME = "Python (sandboxed)"
LOGOS = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")
# jupyter_client's own rule for kernel names (it lowercases them on install).
_KERNEL_NAME = re.compile(r"^[a-z0-9._-]+$", re.IGNORECASE)

log = logging.getLogger(__name__)


def normalize_kernel_name(name: str) -> str:
    """Return ``name`` lowercased, as jupyter_client stores it; raise ValueError if invalid."""
    if not _KERNEL_NAME.match(name):
        raise ValueError(
            f"kernel name {name!r} is not valid: use ASCII letters, digits, '.', '_' and '-'"
        )
    return name.lower()


def default_display_name(name: str) -> str:
    """Return the display name a spec called ``name`` gets when none is given."""
    return DISPLAY_NAME if name == KERNEL_NAME else f"Python (sandboxed, {name})"


def build_kernel_dict(
    settings: KernelSettings | None = None,
    *,
    python: str | None = None,
    display_name: str = DISPLAY_NAME,
) -> dict[str, Any]:
    """Return the kernel.json content that launches the sandboxed kernel with ``settings``.

    ``python`` is argv[0]: None means this interpreter (``sys.executable``), right for a spec
    installed from this environment. The spec shipped in the wheel uses ``"python"``, which
    jupyter_client replaces with the Jupyter server's own interpreter.
    """
    settings = KernelSettings() if settings is None else settings
    argv = [python or sys.executable, *LAUNCH, "-f", "{connection_file}"]
    return {
        "argv": [*argv, *settings.flags()],
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False, "rewyn_kernel": settings.summary()},
    }


def _logo_dir() -> Path | None:
    """Find the shipped logos: the source checkout's ``kernelspec/``, else the installed spec."""
    candidates = [Path(__file__).resolve().parents[2] / "kernelspec"]
    candidates += [Path(folder) / KERNEL_NAME for folder in jupyter_path("kernels")]
    for folder in candidates:
        if all((folder / logo).is_file() for logo in LOGOS):
            return folder
    return None


def write_kernel_spec(
    path: str | os.PathLike[str] | None = None,
    *,
    settings: KernelSettings | None = None,
    display_name: str = DISPLAY_NAME,
    python: str | None = None,
) -> Path:
    """Write kernel.json and the logos into ``path`` and return it.

    ``path`` is created if missing; None means a new temporary directory, which the caller
    removes. Files are made world-readable so a system-wide install works under any umask.
    """
    if path is None:
        path = Path(tempfile.mkdtemp(suffix="_kernels")) / KERNEL_NAME
    path = Path(path)
    if not path.is_dir():
        path.mkdir(parents=True)
        path.chmod(0o755)
    logos = _logo_dir()
    if logos is None:
        log.warning("rewyn-kernel's logos were not found; the kernelspec will have no icon")
    else:
        for logo in LOGOS:
            (path / logo).write_bytes((logos / logo).read_bytes())
            (path / logo).chmod(0o644)
    kernel = build_kernel_dict(settings, python=python, display_name=display_name)
    (path / "kernel.json").write_text(json.dumps(kernel, indent=1) + "\n", encoding="utf-8")
    (path / "kernel.json").chmod(0o644)
    return path


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def install(
    *,
    user: bool = False,
    prefix: str | os.PathLike[str] | None = None,
    sys_prefix: bool = False,
    name: str = KERNEL_NAME,
    display_name: str | None = None,
    settings: KernelSettings | None = None,
    python: str | None = None,
    kernel_spec_manager: KernelSpecManager | None = None,
) -> str:
    """Install a kernelspec for the sandboxed kernel and return the directory it went to.

    Choose at most one place: ``user`` (the user's Jupyter data dir), ``sys_prefix`` (this
    environment, for venvs and conda) or ``prefix`` (``PREFIX/share/jupyter/kernels``). With
    none, the user's dir unless running as root, then the system-wide dir, as bash_kernel
    does (ipykernel always defaults to system-wide, which fails for a non-root user).
    An existing spec of the same name is replaced. ``display_name`` defaults to
    ``default_display_name(name)``; ``python`` is argv[0] (default ``sys.executable``).
    Raise ValueError for an invalid name or more than one place, OSError if the place is not
    writable.
    """
    if sum((user, sys_prefix, prefix is not None)) > 1:
        raise ValueError("choose one of user, sys_prefix and prefix")
    if prefix is not None and not os.fspath(prefix):
        raise ValueError("prefix is empty: give a directory")
    if not (user or sys_prefix or prefix is not None):
        user = not _is_root()
    target = sys.prefix if sys_prefix else (None if prefix is None else os.fspath(prefix))
    name = normalize_kernel_name(name)
    if display_name is None:
        display_name = default_display_name(name)
    if kernel_spec_manager is None:
        from jupyter_client.kernelspec import KernelSpecManager

        kernel_spec_manager = KernelSpecManager()
    with tempfile.TemporaryDirectory(prefix="rewyn-kernelspec-") as staging:
        source = write_kernel_spec(
            Path(staging) / name, settings=settings, display_name=display_name, python=python
        )
        # No replace=: jupyter_client 8 always replaces and warns (DeprecationWarning) if given.
        return kernel_spec_manager.install_kernel_spec(
            str(source), kernel_name=name, user=user, prefix=target
        )
