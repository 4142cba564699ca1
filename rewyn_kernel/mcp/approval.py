"""What a person is shown when the policy asks them to approve a call: all of the code, as it is.

The question goes to the person through the client (MCP elicitation), whose dialog may render
Markdown. A person approves what they see, so what they see must be exactly what runs:

- the whole code, in a fenced code block whose fence no run of backticks in the code can close
  (Markdown then shows it verbatim: no heading, link, HTML or comment hides a part of it);
- every character that does not show as itself made visible as ``⟨U+XXXX⟩``: control
  characters (a carriage return can make a terminal overwrite a line), bidirectional overrides
  and isolates (which reorder what is shown: "Trojan Source"), zero-width and other format
  characters, line and paragraph separators;
- code too long to read in a dialog (``MAX_SHOWN_CHARS``, ``MAX_SHOWN_LINES``) is not shown in
  part: the call is refused with a reason the agent can act on (split it).
"""

from __future__ import annotations

import re
import unicodedata

MAX_SHOWN_CHARS = 20_000
MAX_SHOWN_LINES = 400
_KEPT = frozenset("\n\t")
_SHOWN_AS_IS = frozenset({"Zs"})  # (spaces: shown, though wide ones look alike)


def visible(code: str) -> str:
    """``code`` with every character that would not show as itself written as ``⟨U+XXXX⟩``."""
    out = []
    for char in code:
        category = unicodedata.category(char)
        hidden = category in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp") and char not in _KEPT
        wide_space = category in _SHOWN_AS_IS and char != " "
        out.append(f"⟨U+{ord(char):04X}⟩" if hidden or wide_space else char)
    return "".join(out)


def too_long(code: str) -> str | None:
    """Why ``code`` is too long to ask a person about, or None."""
    lines = code.count("\n") + 1
    if len(code) > MAX_SHOWN_CHARS or lines > MAX_SHOWN_LINES:
        return (
            f"the code ({len(code):,} characters, {lines:,} lines) is too long to show a person "
            f"for approval (at most {MAX_SHOWN_CHARS:,} characters and {MAX_SHOWN_LINES} "
            "lines): split it into smaller calls, each of which the person can read whole"
        )
    return None


def message(code: str, reason: str) -> str:
    """The question put to the person: why it is asked, then the whole code, verbatim."""
    shown = visible(code)
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * max(3, longest + 1)
    notes = ""
    if shown != code:
        notes = "\n(Characters that do not show as themselves are written as ⟨U+XXXX⟩.)"
    lines = code.count("\n") + 1
    return (
        f"Run this code in the sandbox? {reason}\n\n"
        f"All {len(code):,} characters ({lines:,} lines) of it:{notes}\n\n"
        f"{fence}python\n{shown}\n{fence}"
    )
