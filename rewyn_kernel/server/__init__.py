"""The Jupyter server side of ``rewyn-kernel mcp --notebook``: an identity provider and an
authorizer that let an agent token reach one notebook (its session, kernel and collaboration
room) and nothing else of the server.

``rewyn-kernel agent-token`` mints the tokens (``rewyn_kernel.server.command``; it needs no
Jupyter server installed, so the two classes load only when asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewyn_kernel.server.access import AgentAuthorizer, AgentIdentityProvider

__all__ = ["AgentAuthorizer", "AgentIdentityProvider"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rewyn_kernel.server import access

        return getattr(access, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
