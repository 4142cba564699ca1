"""The Sandbox API: specs, results, providers, and create()/acreate().

>>> from rewyn_kernel.runtime.sandbox import create
>>> result = create().execute("print(sum(range(10)))")
>>> result.stdout, result.exit_code
('45\\n', 0)
"""

from rewyn_kernel.runtime._result import (
    Ending,
    ErrorInfo,
    Isolation,
    Payload,
    RichOutput,
    SandboxResult,
)
from rewyn_kernel.runtime._spec import (
    DEFAULT_DISK_MB,
    DEFAULT_INHERIT_ENV,
    DEFAULT_MEMORY_MB,
    DEFAULT_PIDS,
    SandboxSpec,
)
from rewyn_kernel.runtime._tool import sandbox_tool
from rewyn_kernel.runtime.factory import (
    acreate,
    create,
    get_default_provider,
    local_provider,
    set_default_provider,
)
from rewyn_kernel.runtime.host.base import BaseSandbox, Sandbox
from rewyn_kernel.runtime.host.protocol import CommFrame
from rewyn_kernel.runtime.host.session import Session
from rewyn_kernel.runtime.providers.base import (
    CheckItem,
    ExitInfo,
    SandboxProvider,
    WorkerProcess,
)
from rewyn_kernel.runtime.providers.bubblewrap import BubblewrapProvider, BubblewrapSandbox
from rewyn_kernel.runtime.providers.landlock import LandlockProvider
from rewyn_kernel.runtime.providers.subprocess import SubprocessProvider, SubprocessSandbox

__all__ = [
    "BaseSandbox",
    "BubblewrapProvider",
    "BubblewrapSandbox",
    "CheckItem",
    "CommFrame",
    "DEFAULT_DISK_MB",
    "DEFAULT_INHERIT_ENV",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_PIDS",
    "Ending",
    "ErrorInfo",
    "ExitInfo",
    "Isolation",
    "LandlockProvider",
    "Payload",
    "RichOutput",
    "Sandbox",
    "SandboxProvider",
    "SandboxResult",
    "SandboxSpec",
    "Session",
    "SubprocessProvider",
    "SubprocessSandbox",
    "WorkerProcess",
    "acreate",
    "create",
    "get_default_provider",
    "local_provider",
    "sandbox_tool",
    "set_default_provider",
]
