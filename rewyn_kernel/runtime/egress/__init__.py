"""The network by allow-list: a policy of hosts (policy.py) and the host's proxy (proxy.py).

A sandbox whose ``network`` is a list of hosts has no network of its own, as with ``"none"``;
its only way out is a proxy in the host process, reached through a Unix socket that the
provider shows to the sandbox (worker/relay.py turns it into a loopback port there).
"""

EGRESS_FOLDER = "/run/rewyn-egress"
"""Where a provider that shows the sandbox a view of its own puts the proxy's folder."""
EGRESS_NOTE = (
    "network=[...]: no network of its own; the hosts of the allow-list only, through a proxy "
    "on the host (every connection is in the execution's event)"
)
