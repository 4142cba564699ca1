"""Whether a ``run_python`` call runs, is put to the person, or is denied.

``Gate`` asks the server's policy (``MaxRiskLevel(--max-risk, approve_above=--approve-above,
approve_all=--approve-all)``)
about the sandbox every call runs in. A call the policy wants approved is put to the person
through the client (MCP elicitation: ``approval_for`` is ``run_python``'s resolver), showing all
of its code (``approval.py``); it is denied where the client cannot ask, or the code is too long
to show.
"""

# (No ``from __future__ import annotations``: the SDK reads the resolver's annotations.)
from typing import Literal

from mcp.server.mcpserver import Context, Elicit
from pydantic import BaseModel, Field

from rewyn_kernel.mcp.approval import message as approval_message
from rewyn_kernel.mcp.approval import too_long
from rewyn_kernel.tools import PermissionPolicy, Tool


class Approval(BaseModel):
    approve: bool = Field(description="Run this code in the sandbox?")


class Gate:
    """Whether the policy lets a run_python call run, asks the person for it, or denies it."""

    def __init__(self, policy: PermissionPolicy, judged: Tool) -> None:
        self.policy = policy
        self.judged = judged

    def judge(self, code: str, ctx: Context) -> tuple[Literal["run", "ask", "deny"], str]:
        """What the policy says of this call, and why; a call that needs a person's approval
        is denied where the client cannot ask one (no elicitation)."""
        try:
            decision = self.policy.check(self.judged, {"code": code})
        except Exception as exc:  # (a policy that fails denies)
            return "deny", f"the policy failed: {exc}"
        if not decision.allowed:
            return "deny", f"denied: {decision.reason}"
        if not decision.requires_approval:
            return "run", decision.reason
        unreadable = too_long(code)
        if unreadable is not None:
            return "deny", f"not approved: {unreadable} ({decision.reason})"
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return "deny", (
                f"not approved: {decision.reason}; this client cannot ask a person (it offers "
                "no elicitation): use a sandbox of lower risk (bubblewrap or a container, no "
                "network, no secret-named variables) or start the server with a higher "
                "--approve-above (and without --approve-all)"
            )
        return "ask", decision.reason

    async def approval_for(self, code: str, ctx: Context) -> Elicit[Approval] | Approval:
        verdict, reason = self.judge(code, ctx)
        if verdict != "ask":
            return Approval(approve=verdict == "run")
        return Elicit(approval_message(code, reason), Approval)
