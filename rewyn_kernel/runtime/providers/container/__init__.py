"""The container provider: each sandbox's worker runs in a locked-down container (docker,
podman or nerdctl). ``provider.py`` says how a container is locked down."""

from rewyn_kernel.runtime.providers.container.engine import (
    BOOT_LABEL,
    HOST_PID_LABEL,
    LABEL,
    PIDNS_LABEL,
)
from rewyn_kernel.runtime.providers.container.provider import (
    DEFAULT_IMAGE,
    ContainerProvider,
    ContainerSandbox,
)
from rewyn_kernel.runtime.providers.container.worker import ContainerWorker

__all__ = [
    "BOOT_LABEL",
    "DEFAULT_IMAGE",
    "HOST_PID_LABEL",
    "LABEL",
    "PIDNS_LABEL",
    "ContainerProvider",
    "ContainerSandbox",
    "ContainerWorker",
]
