"""create() and acreate(), and the process-wide default provider the spec asks for."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress.policy import NetworkPolicy
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.host.base import Sandbox, open_sandbox
from rewyn_kernel.runtime.host.session import UNSET
from rewyn_kernel.runtime.providers.base import SandboxProvider
from rewyn_kernel.runtime.providers.bubblewrap import BubblewrapProvider, probe_bubblewrap
from rewyn_kernel.runtime.providers.landlock import LandlockProvider
from rewyn_kernel.runtime.providers.subprocess import SubprocessProvider

_default: SandboxProvider | None = None
_default_lock = threading.Lock()


def local_provider() -> SandboxProvider:
    """The best provider this machine has without an engine: bubblewrap where it starts a
    sandbox here (every namespace); else the landlock one where the kernel has Landlock (no
    namespace needed: stock Ubuntu 24.04, a container's default seccomp profile); else the
    subprocess provider, whose isolation notes, ``rewyn-kernel doctor`` and the kernel's
    banner then say why (and which refuses ``network="none"`` where it cannot keep it)."""
    found = probe_bubblewrap()
    if found.works:
        return BubblewrapProvider()
    fallback = LandlockProvider()
    if fallback.available:
        return fallback
    why = f"{found.detail}; nor the landlock one ({fallback.probe().detail})"
    return SubprocessProvider(instead_of_bubblewrap=why)


def set_default_provider(provider: SandboxProvider | None) -> None:
    """Make ``provider`` the one ``create()`` uses when given none (None: back to the local
    default, see ``local_provider``)."""
    global _default
    if provider is not None and not isinstance(provider, SandboxProvider):
        raise TypeError(f"{provider!r} is not a SandboxProvider")
    with _default_lock:
        _default = provider


def get_default_provider() -> SandboxProvider:
    """Return the default provider: the one set with ``set_default_provider``, else
    ``local_provider()`` (bubblewrap where it works, else landlock, else subprocess)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = local_provider()
        return _default


def create(
    spec: SandboxSpec | None = None,
    *,
    provider: SandboxProvider | None = None,
    listeners: Sequence[EventListener] = (),
    timeout: float | None = UNSET,
    network: Literal["none", "allow"] | Sequence[str] | Mapping[str, Any] | NetworkPolicy = UNSET,
    memory_limit_mb: int | None = UNSET,
    pids_limit: int | None = UNSET,
    disk_limit_mb: int | None = UNSET,
    env: Mapping[str, str] = UNSET,
    inherit_env: Sequence[str] = UNSET,
    workdir: str | Path | None = UNSET,
    workspace: str | Path | None = UNSET,
    protected: Sequence[str] = UNSET,
    read_dirs: Sequence[str | Path] = UNSET,
    output_limit_bytes: int = UNSET,
    startup_timeout: float = UNSET,
    python: str | None = UNSET,
) -> Sandbox:
    """Create a sandbox. Keyword limits override ``spec``'s; anything not given keeps its default.

    ``provider=None`` uses the default provider (see ``set_default_provider``). ``listeners``
    receive this sandbox's SANDBOX_EXECUTED events. Invalid values raise ``ValueError``
    (a pydantic ``ValidationError``) that says what is allowed.
    """
    given: dict[str, Any] = {
        key: value
        for key, value in {
            "timeout": timeout,
            "network": network,
            "memory_limit_mb": memory_limit_mb,
            "pids_limit": pids_limit,
            "disk_limit_mb": disk_limit_mb,
            "env": env,
            "inherit_env": inherit_env,
            "workdir": workdir,
            "workspace": workspace,
            "protected": protected,
            "read_dirs": read_dirs,
            "output_limit_bytes": output_limit_bytes,
            "startup_timeout": startup_timeout,
            "python": python,
        }.items()
        if value is not UNSET
    }
    base = spec.model_dump(exclude_unset=True) if spec is not None else {}
    full = SandboxSpec.model_validate({**base, **given})
    return open_sandbox(provider or get_default_provider(), full, listeners)


async def acreate(
    spec: SandboxSpec | None = None,
    *,
    provider: SandboxProvider | None = None,
    listeners: Sequence[EventListener] = (),
    timeout: float | None = UNSET,
    network: Literal["none", "allow"] | Sequence[str] | Mapping[str, Any] | NetworkPolicy = UNSET,
    memory_limit_mb: int | None = UNSET,
    pids_limit: int | None = UNSET,
    disk_limit_mb: int | None = UNSET,
    env: Mapping[str, str] = UNSET,
    inherit_env: Sequence[str] = UNSET,
    workdir: str | Path | None = UNSET,
    workspace: str | Path | None = UNSET,
    protected: Sequence[str] = UNSET,
    read_dirs: Sequence[str | Path] = UNSET,
    output_limit_bytes: int = UNSET,
    startup_timeout: float = UNSET,
    python: str | None = UNSET,
) -> Sandbox:
    """``create()`` without blocking the event loop while the first worker starts."""
    return await asyncio.to_thread(
        create,
        spec,
        provider=provider,
        listeners=listeners,
        timeout=timeout,
        network=network,
        memory_limit_mb=memory_limit_mb,
        pids_limit=pids_limit,
        disk_limit_mb=disk_limit_mb,
        env=env,
        inherit_env=inherit_env,
        workdir=workdir,
        workspace=workspace,
        protected=protected,
        read_dirs=read_dirs,
        output_limit_bytes=output_limit_bytes,
        startup_timeout=startup_timeout,
        python=python,
    )
