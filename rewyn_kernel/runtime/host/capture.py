"""Bounded capture of one output stream: keep the head and the tail, count the rest."""

from __future__ import annotations

import codecs
from collections import deque


class StreamCapture:
    """Capture one stream of one execution in at most ``limit`` bytes (plus one chunk).

    ``feed`` returns the text to show now: output streams live until the head (half the limit)
    is full. Past that, only the last half is kept; ``finish`` returns it, preceded by a marker
    that says exactly how many bytes were dropped. What ``feed`` and ``finish`` return, joined,
    is ``text``, so what a person saw live is what the result holds.
    """

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.total = 0
        self._head_size = 0
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._parts: list[str] = []
        self._finished = False

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def feed(self, data: bytes) -> str:
        """Take a chunk of raw output; return the text that can be shown now."""
        self.total += len(data)
        text = ""
        room = self.head_limit - self._head_size
        if room > 0:
            part = data[:room]
            self._head_size += len(part)
            text = self._decoder.decode(part)
            self._parts.append(text)
            data = data[room:]
        if data:
            self._tail.append(data)
            self._tail_size += len(data)
            while self._tail and self._tail_size - len(self._tail[0]) >= self.tail_limit:
                self._tail_size -= len(self._tail.popleft())
        return text

    def finish(self) -> str:
        """Return the rest: held-back tail, with a marker if anything was dropped."""
        if self._finished:
            return ""
        self._finished = True
        tail = b"".join(self._tail)[-self.tail_limit :]
        dropped = self.total - self._head_size - len(tail)
        if dropped <= 0:
            text = self._decoder.decode(tail, final=True)
        else:
            head_rest = self._decoder.decode(b"", final=True)
            # The cut may fall inside a character: skip its continuation bytes.
            start = 0
            while start < min(3, len(tail)) and 0x80 <= tail[start] < 0xC0:
                start += 1
            text = head_rest + self.marker(dropped) + tail[start:].decode("utf-8", "replace")
        self._parts.append(text)
        return text

    def marker(self, dropped: int) -> str:
        return (
            f"\n[... rewyn: {dropped:,} bytes of {self.name} dropped ({self.total:,} in all); "
            f"the first {self._head_size:,} and the last {self.tail_limit:,} are kept. "
            "Write large output to a file in the scratch directory instead ...]\n"
        )

    def append(self, text: str) -> None:
        """Add a note of the host's after ``finish``: shown, but not counted as output."""
        self._parts.append(text)

    @property
    def text(self) -> str:
        return "".join(self._parts)


def excerpt(text: str, limit: int) -> str:
    """Return ``text`` shortened to about ``limit`` characters, head and tail kept."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters omitted ...]\n{text[-half:]}"
