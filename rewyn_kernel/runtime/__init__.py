"""The Sandbox runtime: run untrusted Python under limits. Imports nothing from Jupyter.

``from rewyn_kernel.runtime import create`` then ``create().execute(code)``; see
``rewyn_kernel.runtime.sandbox`` for the whole API.
"""

from rewyn_kernel.runtime import container, events, sandbox
from rewyn_kernel.runtime.container import ContainerProvider, ContainerSandbox
from rewyn_kernel.runtime.events import JsonlRunLog, SandboxEvent
from rewyn_kernel.runtime.pool import BatchSummary, SandboxPool
from rewyn_kernel.runtime.sandbox import (
    BubblewrapProvider,
    BubblewrapSandbox,
    LandlockProvider,
    Sandbox,
    SandboxProvider,
    SandboxResult,
    SandboxSpec,
    Session,
    SubprocessProvider,
    SubprocessSandbox,
    acreate,
    create,
    get_default_provider,
    local_provider,
    sandbox_tool,
    set_default_provider,
)

__all__ = [
    "BatchSummary",
    "BubblewrapProvider",
    "BubblewrapSandbox",
    "ContainerProvider",
    "ContainerSandbox",
    "JsonlRunLog",
    "LandlockProvider",
    "Sandbox",
    "SandboxEvent",
    "SandboxPool",
    "SandboxProvider",
    "SandboxResult",
    "SandboxSpec",
    "Session",
    "SubprocessProvider",
    "SubprocessSandbox",
    "acreate",
    "container",
    "create",
    "events",
    "get_default_provider",
    "local_provider",
    "sandbox",
    "sandbox_tool",
    "set_default_provider",
]
