"""Errors raised by rewyn-kernel, one rooted tree.

::

    RewynError
    ├── SandboxError                  something about a sandbox itself
    │   ├── SandboxClosedError        used after close()
    │   ├── ProviderUnavailableError  the provider cannot run here (binary, daemon, image missing)
    │   ├── ForkError                 a session could not be forked (it runs code, its memory
    │   │                             cap leaves too little, its sandbox is gone)
    │   └── ProtocolError             the sandbox broke the channel protocol (internal; it ends
    │                                 that sandbox and becomes a result, never an exception to
    │                                 the caller)
    ├── PolicyError                   a permission policy refused a tool call
    └── ToolArgumentsError            a tool call's arguments do not fit its schema
                                      (defined in rewyn_kernel.tools)

Execution failures (timeouts, crashes, exceptions in the sandboxed code) are never raised: they
are reported in ``SandboxResult``.
"""

from __future__ import annotations

__all__ = [
    "ForkError",
    "PolicyError",
    "ProtocolError",
    "ProviderUnavailableError",
    "RewynError",
    "SandboxClosedError",
    "SandboxError",
]


class RewynError(Exception):
    """Base class of every error rewyn-kernel raises."""


class SandboxError(RewynError):
    """Something went wrong with a sandbox itself, not with the code it ran."""


class SandboxClosedError(SandboxError, RuntimeError):
    """The sandbox or session was used after ``close()``; create a new one."""


class ProviderUnavailableError(SandboxError, RuntimeError):
    """The provider cannot run sandboxes on this machine; the message names what is missing."""


class ForkError(SandboxError, RuntimeError):
    """A session (or a checkpoint) could not be forked; the message says why. The session
    it was asked of is unchanged. ``memory``: because its memory cap leaves too little room
    (freeing memory, or dropping a checkpoint, may let the next one through)."""

    def __init__(self, message: str, *, memory: bool = False) -> None:
        super().__init__(message)
        self.memory = memory


class ProtocolError(SandboxError):
    """The sandbox sent something that is not a valid frame."""


class PolicyError(RewynError, PermissionError):
    """A permission policy refused a tool call."""
