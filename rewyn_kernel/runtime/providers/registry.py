"""The providers this environment has, by name: each registered under an entry point.

A provider is a class (or any callable) that returns a ``SandboxProvider`` (see ``base.py``),
registered in its package's metadata under the ``rewyn_kernel.providers`` group, as
jupyter_client's kernel provisioners are::

    [project.entry-points."rewyn_kernel.providers"]
    mine = "my_package.provider:MyProvider"

The built-in ones (``bubblewrap``, ``landlock``, ``subprocess``, ``container``) are registered the
same way in rewyn-kernel's own ``pyproject.toml``. The kernel's ``provider`` setting, ``rewyn-kernel
doctor`` and ``review`` learn the names from here. A package cannot take a built-in's name (its
entry is refused, with a note in ``problems()``), and ``auto`` is no provider's name: it means the
best local one (``factory.local_provider``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rewyn_kernel.runtime.providers.base import SandboxProvider

__all__ = ["AUTO", "BUILTIN", "GROUP", "ProviderEntry", "entries", "make", "names", "problems"]

GROUP = "rewyn_kernel.providers"
AUTO = "auto"
"""Not a provider: the best one this machine has without an engine."""
BUILTIN: Mapping[str, str] = {
    "bubblewrap": "rewyn_kernel.runtime.providers.bubblewrap:BubblewrapProvider",
    "landlock": "rewyn_kernel.runtime.providers.landlock:LandlockProvider",
    "subprocess": "rewyn_kernel.runtime.providers.subprocess:SubprocessProvider",
    "container": "rewyn_kernel.runtime.providers.container:ContainerProvider",
}
"""The providers of this package, as its ``pyproject.toml`` registers them (a test checks that
the two agree); also what is known when the package runs from a source tree with no metadata."""
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class ProviderEntry:
    """One registered provider: its name, where it is, and which distribution registered it."""

    name: str
    value: str
    """``module:attribute``, as the entry point gives it."""
    distribution: str

    @property
    def builtin(self) -> bool:
        return self.name in BUILTIN and BUILTIN[self.name] == self.value

    def load(self) -> Callable[..., SandboxProvider]:
        """The provider's class (or factory), imported now."""
        loaded: Callable[..., SandboxProvider] = EntryPoint(self.name, self.value, GROUP).load()
        return loaded


@functools.cache
def _scan() -> tuple[dict[str, ProviderEntry], tuple[str, ...]]:
    found = {name: ProviderEntry(name, value, "rewyn-kernel") for name, value in BUILTIN.items()}
    refused: list[str] = []
    for point in entry_points(group=GROUP):
        dist = point.dist.name if point.dist is not None else "?"
        if point.name in BUILTIN:
            if point.value != BUILTIN[point.name]:
                refused.append(
                    f"{dist} registers a provider named {point.name!r}, which is a built-in "
                    "provider's name: refused"
                )
            continue
        if point.name == AUTO or not _NAME.fullmatch(point.name):
            refused.append(
                f"{dist} registers a provider named {point.name!r}: a name is lower-case "
                "letters, digits, '-' and '_' (not 'auto'): refused"
            )
            continue
        if point.name in found:
            refused.append(
                f"{dist} and {found[point.name].distribution} both register a provider named "
                f"{point.name!r}: the first found is used"
            )
            continue
        found[point.name] = ProviderEntry(point.name, point.value, dist)
    return found, tuple(refused)


def entries() -> dict[str, ProviderEntry]:
    """Every registered provider, by name: the built-in ones first."""
    return dict(_scan()[0])


def names() -> tuple[str, ...]:
    """The names a setting may give (``auto`` besides): the built-in ones first."""
    return tuple(_scan()[0])


def problems() -> tuple[str, ...]:
    """Entries that were refused, and why (``rewyn-kernel doctor`` prints them)."""
    return _scan()[1]


def make(name: str, **options: Any) -> SandboxProvider:
    """A provider by its registered name, made with ``options`` (its constructor's keywords).

    An unknown name raises ValueError naming the known ones; a provider that cannot be
    imported or made raises ValueError saying so, with the cause chained; one that makes
    something else than a provider, TypeError."""
    found = _scan()[0]
    entry = found.get(name)
    if entry is None:
        known = ", ".join([AUTO, *found])
        raise ValueError(f"no provider is registered as {name!r}: known ones are {known}")
    try:
        provider = entry.load()(**options)
    except Exception as exc:
        raise ValueError(
            f"the provider {name!r} ({entry.value}, from {entry.distribution}) cannot be "
            f"made: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(provider, SandboxProvider):
        raise TypeError(
            f"the provider {name!r} ({entry.value}) made {provider!r}, which does not "
            "implement the provider contract (rewyn_kernel.runtime.providers.base)"
        )
    return provider
