"""The provider contract, for a provider in a package of its own.

What a provider implements (``SandboxProvider``, ``WorkerProcess``, and optionally
``SandboxFiles``), what it returns (``ExitInfo``, ``CheckItem``, ``WorkerConfig``: the worker's
settings, declared once in ``worker/config.py``), what it runs (``worker_argv``)
and, for one that shows its sandboxes a folder of this host, the host's default files
(``LocalFiles``, ``host_folder``). Implemented in ``providers/base.py`` (which imports nothing
above it) and ``providers/local/files.py``; this is their public path. Register a provider
under the ``rewyn_kernel.providers`` entry point group (see ``rewyn_kernel.runtime.registry``).
"""

from rewyn_kernel.runtime.providers.base import (
    BOOTSTRAP,
    CheckItem,
    ExitInfo,
    SandboxFiles,
    SandboxProvider,
    ScratchEntry,
    ScratchError,
    WorkerConfig,
    WorkerProcess,
    worker_argv,
)
from rewyn_kernel.runtime.providers.local.files import LocalFiles, host_folder

__all__ = [
    "BOOTSTRAP",
    "CheckItem",
    "ExitInfo",
    "LocalFiles",
    "SandboxFiles",
    "SandboxProvider",
    "ScratchEntry",
    "ScratchError",
    "WorkerConfig",
    "WorkerProcess",
    "host_folder",
    "worker_argv",
]
