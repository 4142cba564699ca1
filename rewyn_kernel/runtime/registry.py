"""The providers this environment has, by name (entry points of the ``rewyn_kernel.providers``
group; the built-in ones first). Implemented in ``providers/registry.py``; this is its public
path."""

from rewyn_kernel.runtime.providers.registry import (
    AUTO,
    BUILTIN,
    GROUP,
    ProviderEntry,
    entries,
    make,
    names,
    problems,
)

__all__ = ["AUTO", "BUILTIN", "GROUP", "ProviderEntry", "entries", "make", "names", "problems"]
