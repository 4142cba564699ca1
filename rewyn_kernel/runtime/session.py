"""A session's checkpoints, and the marker of an argument not given, for the layers above the
runtime (``Session`` itself: ``rewyn_kernel.runtime.sandbox``).

``Checkpoint`` is what ``Session.checkpoint()`` returns and ``Session.restore()`` takes;
``UNSET`` is the default of ``Session.execute``'s ``timeout`` (the spec's), where None means no
limit. Implemented in ``host/session.py``; this is their public path.
"""

from rewyn_kernel.runtime.host.session import UNSET, Checkpoint

__all__ = ["Checkpoint", "UNSET"]
