"""The entries of a network allow-list (``network=["pypi.org", "!bad.example.org"]``), for the
layers above the runtime.

``parse_rule`` reads one entry (ValueError says what is wrong with it); ``entry_for`` is the
entry that would allow a host and port (what a refusal's note tells a person to add).
Implemented in ``egress/policy.py``; this is their public path.
"""

from rewyn_kernel.runtime.egress.policy import entry_for, parse_rule

__all__ = ["entry_for", "parse_rule"]
