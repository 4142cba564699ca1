"""A sandbox provider in a package of its own, written against the public contract only.

It imports ``rewyn_kernel.runtime.contract`` and other public names of ``rewyn_kernel.runtime``,
nothing of the host: it starts each worker through a
``SubprocessProvider`` it holds, whose files it keeps, and has no sandbox class of its own, so
the host wraps its sandboxes in its ``BaseSandbox``. What it
adds is a name, its own checks and a note in each sandbox's isolation: what a third party's
provider adds on top of a runtime it reaches by the contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rewyn_kernel.runtime import SubprocessProvider
from rewyn_kernel.runtime.contract import CheckItem, SandboxFiles, WorkerConfig, WorkerProcess
from rewyn_kernel.runtime.sandbox import Isolation, SandboxSpec

__all__ = ["RelayProvider"]

NOTE = "started by rewyn-relay-provider, a provider registered by entry point"


class RelayProvider:
    """Workers of a ``SubprocessProvider``, under the name ``relay``."""

    def __init__(self, python: str | None = None) -> None:
        self._inner = SubprocessProvider(python=python)

    @property
    def name(self) -> str:
        return "relay"

    @property
    def available(self) -> bool:
        return self._inner.available

    def isolation(self, spec: SandboxSpec) -> Isolation:
        inner = self._inner.isolation(spec)
        return inner.model_copy(update={"notes": (*inner.notes, NOTE)})

    def worker_config(self, spec: SandboxSpec, files: SandboxFiles) -> WorkerConfig:
        return self._inner.worker_config(spec, files)

    def launch(
        self, spec: SandboxSpec, files: SandboxFiles, name: str, *, egress: Path | None = None
    ) -> WorkerProcess:
        return self._inner.launch(spec, files, name, egress=egress)

    def files(self, spec: SandboxSpec, sandbox_id: str) -> SandboxFiles:
        """The subprocess provider's: a folder of this host, given to the code's uid."""
        return self._inner.files(spec, sandbox_id)

    def check(self) -> Sequence[CheckItem]:
        return [CheckItem("relay", True, "a SubprocessProvider's workers"), *self._inner.check()]

    def __repr__(self) -> str:
        return "RelayProvider()"
