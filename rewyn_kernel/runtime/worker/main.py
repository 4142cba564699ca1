"""The worker's entry point: ``main(config)`` runs the supervisor until the host is gone.

The program a sandbox runs is these modules (``loader.py`` first), sent by the host over the
sandbox's stdin after a one-line bootstrap (``host/protocol.BOOTSTRAP``), so an image needs
nothing but ``python3`` (3.8 or newer, standard library only). Wire format, both directions:
``>II`` (header length, payload length), a JSON header, a raw payload (``wire.py``).

The sandbox's first process becomes the supervisor (``supervisor.py``): it holds the channel and
never runs the code it is given; a code process it forks does (``child.py``).
"""

from __future__ import annotations

import os
import traceback

from .config import WorkerConfig
from .record import WireError
from .supervisor import Supervisor


def main(config: object) -> None:
    """Run the supervisor given ``config`` (the host's JSON: ``config.py``) until the host is
    gone; a config it cannot read stops it before anything starts (exit 70, saying why)."""
    try:
        settings = WorkerConfig.from_wire(config)
    except WireError as exc:
        os.write(2, ("rewyn: the host's config cannot be read here: %s\n" % exc).encode())
        os._exit(70)
    supervisor = Supervisor(settings)
    try:
        supervisor.start()
    except BaseException:
        os.write(2, ("rewyn worker failed to start:\n" + traceback.format_exc()).encode())
        os._exit(70)
    try:
        while True:
            supervisor.step()
    except BaseException:
        # A bug here must not leave the sandbox running unsupervised: report it, end it all.
        try:
            os.write(
                supervisor.diag, ("rewyn supervisor failed:\n" + traceback.format_exc()).encode()
            )
        finally:
            supervisor.shutdown()
