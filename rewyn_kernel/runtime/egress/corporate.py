"""What a corporate network's host configuration gives a sandbox: its upstream proxy
(upstream.py), said in ``isolation``.
"""

from __future__ import annotations

from rewyn_kernel.runtime._result import Isolation
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.egress.upstream import choose


def egress_isolation(isolation: Isolation, spec: SandboxSpec) -> Isolation:
    """``isolation`` with what the host's configuration adds to the sandbox's way out: the
    upstream proxy an allow-list's connections go through (never its credentials)."""
    policy = spec.allow_list
    if policy is None:
        return isolation
    routes = choose(policy.upstream_proxy)
    update: dict[str, object] = {"upstream_proxy": routes.describe()}
    if routes.problem:
        update["notes"] = (*isolation.notes, routes.problem)
    return isolation.model_copy(update=update)
