"""Which provider the MCP server's sandboxes run on when none is given (``--provider auto``).

An agent's client starts the server on whatever machine it runs on, often one without
bubblewrap (macOS and Windows, where Claude Desktop runs, have none). The local fallback there,
the subprocess provider, leaves the host's files open to the code, and without Linux namespaces
its network too: the risk table makes that critical, and the server's default policy then
refuses every call. So, in this order:

1. bubblewrap, where it starts a sandbox here;
2. else a container, where an engine answers and has the image (``--image``; the engines
   ``--runtime`` names, else docker, podman and nerdctl, in that order: Docker Desktop and
   podman machine answer through these CLIs);
3. else the landlock provider, where this kernel has Landlock (the local default there, as for
   ``create()``: a container's default seccomp profile, a host without user namespaces);
4. else the subprocess provider, and the start line says why nothing better was found and what
   would fix it.

A container is chosen by the engine's own checks (``ContainerProvider.check``: the CLI, the
daemon, the image, the OCI runtime), not by a trial run: ``rewyn-kernel doctor`` does that.
Needs no MCP SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rewyn_kernel.runtime import LandlockProvider
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.machine import probe_bubblewrap
from rewyn_kernel.settings import CONTAINER_CLIS


@dataclass(frozen=True)
class Choice:
    """Where the sandboxes run, and the line that says so when the server starts."""

    provider: Literal["bubblewrap", "container", "landlock", "subprocess"]
    runtime: str | None
    """The engine's CLI, for a container."""
    said: str


def choose(
    image: str,
    runtimes: Sequence[str] = CONTAINER_CLIS,
    oci_runtime: str | None = None,
) -> Choice:
    """The provider for ``--provider auto`` on this machine (see the module's docstring);
    ``image``, ``runtimes`` and ``oci_runtime``: the container to use if it comes to that."""
    found = probe_bubblewrap()
    if found.works:
        return Choice("bubblewrap", None, "bubblewrap (it works here)")
    missing = []
    for cli in runtimes:
        provider = ContainerProvider(image=image, runtime=cli, oci_runtime=oci_runtime)
        problems = [f"{item.name}: {item.detail}" for item in provider.check() if not item.ok]
        if not problems:
            return Choice(
                "container",
                cli,
                f"{provider.name}, image {image} (bubblewrap cannot run here: {found.detail}; "
                f"{cli} answers and has the image)",
            )
        missing.append(f"{cli}: {problems[0]}")
    if LandlockProvider().available:
        return Choice(
            "landlock",
            None,
            f"landlock, Landlock and seccomp without namespaces (bubblewrap cannot run here: "
            f"{found.detail}; no container engine answers with the image {image}: "
            f"{'; '.join(missing)})",
        )
    return Choice(
        "subprocess",
        None,
        f"subprocess, which leaves the host's files open to the code (bubblewrap cannot run "
        f"here: {found.detail}; no container engine answers with the image {image}: "
        f"{'; '.join(missing)}). To keep them out of reach, install bubblewrap (Linux), or "
        f"run Docker Desktop or podman with the image ({runtimes[0] if runtimes else 'docker'} "
        f"pull {image}, or --image NAME for one you have), then restart the server",
    )
