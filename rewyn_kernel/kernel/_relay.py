"""Coalesce a cell's stream output into few iopub messages, in order.

IOPub is a ZMQ socket with a high-water mark: past 1000 queued messages it drops the rest
without a word, so one message per write loses output (JUPYTER-FACTS). Text is buffered and
sent at most every ``interval`` seconds, or sooner once ``max_buffer`` characters wait; runs
of the same stream are merged, and the order between stdout and stderr is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

SendStream = Callable[[str, str], None]
LEADING_GAP = 0.005
"""With ``interval`` 0 (a comm message's handler): text goes out as it comes when nothing went
in the last 5 ms, else at the loop's next turn, merged with what comes meanwhile."""


class StreamRelay:
    """Buffer (stream name, text) pieces and send them merged, on the kernel's event loop."""

    def __init__(
        self,
        send: SendStream,
        loop: asyncio.AbstractEventLoop,
        *,
        interval: float = 0.05,
        max_buffer: int = 256 * 1024,
    ) -> None:
        self._send = send
        self._loop = loop
        self._interval = interval
        self._max_buffer = max_buffer
        self._pieces: list[tuple[str, str]] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sent = -LEADING_GAP  # (the loop's time of the last send)

    def write(self, name: str, text: str) -> None:
        """Queue ``text`` for ``name``; called on the loop (the runtime's async callbacks are)."""
        if not text:
            return
        self._pieces.append((name, text))
        self._size += len(text)
        if self._size >= self._max_buffer:
            self.flush()
        elif self._timer is None:
            if self._interval == 0 and self._loop.time() - self._sent >= LEADING_GAP:
                self.flush()  # (a widget's feedback: at once, not a turn of the loop later)
            else:
                self._timer = self._loop.call_later(self._interval, self.flush)

    def flush(self) -> None:
        """Send everything queued now, one message per run of the same stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pieces, self._pieces, self._size = self._pieces, [], 0
        run_name, run = "", list[str]()
        for name, text in pieces:
            if name != run_name and run:
                self._send(run_name, "".join(run))
                run = []
            run_name = name
            run.append(text)
        if run:
            self._send(run_name, "".join(run))
            self._sent = self._loop.time()
