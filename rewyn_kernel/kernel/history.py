"""What a kernel answers to history and is_complete requests, kept in the kernel process.

History is the cells this kernel ran, as ipykernel answers from IPython's history database:
``tail``, ``range`` and ``search`` (a glob pattern, ``unique``, the last ``n``), entries of
(session, line number, source). It lives on the host, so a sandbox restart does not lose it and
code in the sandbox cannot rewrite it; one kernel is one session (number 1), as its cells are
numbered from 1.
"""

from __future__ import annotations

import fnmatch
from functools import cache
from typing import Any

SESSION = 1
MAX_ENTRIES = 10_000
"""Cells remembered: the oldest go first (IPython's database keeps all; a kernel's memory
should not grow with every cell of a week-long session)."""
MAX_SOURCE_CHARS = 1024 * 1024

Entry = tuple[int, int, str]


class History:
    """The sources of the cells run, by execution count."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, str]] = []

    def append(self, count: int, source: str) -> None:
        self._entries.append((count, source[:MAX_SOURCE_CHARS]))
        if len(self._entries) > MAX_ENTRIES:
            del self._entries[: len(self._entries) - MAX_ENTRIES]

    def answer(
        self,
        access: str,
        *,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
    ) -> list[Entry]:
        """The entries a ``history_request`` asks for (unknown kinds: none)."""
        if access == "tail":
            chosen = self._entries if not n else self._entries[-n:]
        elif access == "range":
            if session not in (None, 0, SESSION, -0):
                return []  # (only this kernel's session is known)
            first = start or 0
            chosen = [(c, s) for c, s in self._entries if c >= first and (stop is None or c < stop)]
        elif access == "search":
            glob = pattern or "*"
            chosen = [(c, s) for c, s in self._entries if fnmatch.fnmatchcase(s, glob)]
            if unique:
                latest: dict[str, tuple[int, str]] = {}
                for count, source in chosen:
                    latest.pop(source, None)
                    latest[source] = (count, source)
                chosen = list(latest.values())
            if n:
                chosen = chosen[-n:]
        else:
            return []
        return [(SESSION, count, source) for count, source in chosen]


def is_complete_ipython(code: str) -> dict[str, Any]:
    """``is_complete`` as ipykernel answers it: through IPython's input transformers, so a line
    magic or ``!cmd`` is complete and a ``%%cell`` magic waits for its body."""
    status, indent = _transformer().check_complete(code)
    reply: dict[str, Any] = {"status": status}
    if status == "incomplete":
        reply["indent"] = " " * (indent or 0)
    return reply


@cache
def _transformer() -> Any:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()  # type: ignore[no-untyped-call]
