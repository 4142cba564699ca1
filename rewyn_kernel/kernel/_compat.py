"""The private parts of ipykernel's Kernel this kernel uses, in one place.

Both work on every ipykernel from 6.29.5 (the declared floor, tested in CI) to 7.x.
"""

from __future__ import annotations

from typing import Any

from ipykernel.kernelbase import Kernel


def shell_ident(kernel: Kernel) -> Any:
    """The ZMQ identity of the shell request being handled: where a stdin request goes.

    ipykernel 7 keeps it in a context variable and ``_parent_ident`` as a view of it, kept "for
    backward compatibility"; 6.x keeps it in ``_parent_ident`` itself.
    """
    return kernel._parent_ident["shell"]


def iopub_topic(kernel: Kernel, msg_type: str) -> bytes:
    """The IOPub topic this kernel publishes ``msg_type`` under (``kernel.<id>.<type>``)."""
    topic: bytes = kernel._topic(msg_type)  # type: ignore[no-untyped-call]
    return topic


def main_shell_lock(kernel: Kernel) -> Any:
    """ipykernel 7's lock that keeps the main shell's requests one at a time (6.x has none: it
    handles them one at a time from a queue)."""
    return kernel._main_asyncio_lock
