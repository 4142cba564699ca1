"""The kernel process's models, built without pydantic's plugin scan.

pydantic looks for plugins the first time it builds a model's validator: a scan of every
installed distribution's metadata (about 8 ms here, more with many packages), for plugins the
kernel process never uses. The runtime builds its settings' and spec's models as it is
imported, and the session's when the early start makes them, so both are done inside
``no_pydantic_plugins``: then no scan happens during a kernel's start at all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

SWITCH = "PYDANTIC_DISABLE_PLUGINS"


@contextlib.contextmanager
def no_pydantic_plugins() -> Iterator[None]:
    """Turn pydantic's plugins off for the body's time. Only that long, with no sandbox started
    meanwhile: a sandbox started with the host's environment must not see the switch, nor code
    in this process that does want plugins."""
    if SWITCH in os.environ:
        yield
        return
    os.environ[SWITCH] = "__all__"
    try:
        yield
    finally:
        os.environ.pop(SWITCH, None)
