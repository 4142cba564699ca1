"""The entries of a network allow-list (``network=["pypi.org", "!bad.example.org"]``), for the
layers above the runtime.

``parse_rule`` reads one entry (ValueError says what is wrong with it) and ``parse_host`` a host
alone; ``entry_for`` is the entry that would allow a host and port (what a refusal's note tells a
person to add). ``NetworkPolicy`` is a whole allow-list, and ``UpstreamProxy`` the type of the
``upstream_proxy`` setting. Implemented in ``egress/policy.py``; this is their public path.
"""

from rewyn_kernel.runtime.egress.policy import (
    NetworkPolicy,
    UpstreamProxy,
    entry_for,
    parse_host,
    parse_rule,
)

__all__ = ["NetworkPolicy", "UpstreamProxy", "entry_for", "parse_host", "parse_rule"]
