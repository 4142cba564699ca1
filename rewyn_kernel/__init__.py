"""rewyn-kernel: run model-written and untrusted Python in a sandbox, from code or Jupyter.

``%load_ext rewyn_kernel`` in IPython or an ipykernel notebook registers ``%%sandbox``.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]

_magics: list[Any] = []


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%sandbox`` and ``%sandbox`` (called by ``%load_ext rewyn_kernel``)."""
    from rewyn_kernel.kernel.magic import SandboxMagics

    magics = SandboxMagics(ipython)
    ipython.register_magics(magics)
    _magics.append(magics)


def unload_ipython_extension(ipython: Any) -> None:
    """Close every sandbox the magic opened (``%unload_ext rewyn_kernel``)."""
    while _magics:
        _magics.pop().close()
