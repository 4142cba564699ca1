"""What ``sandbox_tool`` gives a model, for other tool servers (``rewyn-kernel mcp``).

``assess`` (and ``risk_of``) rate the risk of running code in a sandbox of this spec and
isolation, with the reasons; ``result_payload`` is a result as a model reads it, its output
shortened (head and tail) to a budget of characters, ``DEFAULT_MAX_RESULT_CHARS`` by default;
``shorten`` is that rule for one text.
Implemented in ``_tool.py``; this is their public path.
"""

from rewyn_kernel.runtime._tool import (
    DEFAULT_MAX_RESULT_CHARS,
    assess,
    result_payload,
    risk_of,
    shorten,
)

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "assess", "result_payload", "risk_of", "shorten"]
