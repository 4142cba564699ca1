"""Text the code chose (a file name, a host, an error message), made safe to show on a
terminal or in a log line: what a terminal would act on instead of showing is written as its
escape. That is C0 controls, DEL and C1 controls (a lone ``\\x9b`` is CSI on many terminals),
hence every ESC sequence (a title, a cursor move, a screen erase); bidi overrides and
isolates and line separators, which reorder or break what follows; and the lone surrogates
of a name whose bytes are not UTF-8 (shown as those bytes). Everything else, other scripts
included, stays as it is.

Every place where such text reaches the person's terminal, a notebook's text or a log line
goes through ``printable`` (the review's and the kernel's notes, ``rewyn-kernel files``,
``run`` and ``review``; loggers format such values with ``%r``)."""

from __future__ import annotations

import re

_ACTS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # (a byte that was not UTF-8: os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with what a terminal acts on escaped (``\\x1b``, ``\\r``, ``\\x9b``,
    ``\\u202e``...); ``lines``: new lines are kept (a message of several lines)."""
    if lines:
        return "\n".join(_ACTS.sub(_escape, line) for line in text.split("\n"))
    return _ACTS.sub(_escape, text)
