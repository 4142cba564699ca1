"""The container provider (the spec's ``rewyn.runtime.container``): docker, podman, nerdctl.

See ``rewyn_kernel.runtime.providers.container`` for how a container is locked down.
"""

from rewyn_kernel.runtime.providers.container import (
    DEFAULT_IMAGE,
    LABEL,
    ContainerProvider,
    ContainerSandbox,
)

__all__ = ["ContainerProvider", "ContainerSandbox", "DEFAULT_IMAGE", "LABEL"]
