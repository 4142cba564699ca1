"""Shared fixtures: real sandboxes, closed after each test, and a /proc scan for survivors."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import Sandbox


@pytest.fixture
def make_box() -> Iterator[Callable[..., Sandbox]]:
    """Create sandboxes that are closed when the test ends, whatever happens."""
    boxes: list[Sandbox] = []

    def make(**kwargs: Any) -> Sandbox:
        box = create(**kwargs)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def events() -> Iterator[list[SandboxEvent]]:
    """Collect every SANDBOX_EXECUTED event of the process while the test runs."""
    from rewyn_kernel.runtime.events import add_listener, remove_listener

    seen: list[SandboxEvent] = []
    add_listener(seen.append)
    yield seen
    remove_listener(seen.append)


@pytest.fixture
def marker() -> str:
    """A unique value to put in a sandbox's environment and find again in /proc."""
    return f"rewyn-test-{uuid.uuid4().hex}"


def processes_with(marker: str) -> list[int]:
    """Host pids whose environment holds ``marker`` (any process of that sandbox)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def wait_until_gone(marker: str, timeout: float = 3.0) -> list[int]:
    """Return the survivors of ``marker`` once none are left or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
