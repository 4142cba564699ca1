"""The parts of a ``SandboxResult`` and of its event, for the layers above the runtime.

``NetworkLog`` (``result.network``: every connection the code tried) and ``WorkspaceFiles``
(``result.files``: what an execution changed in its workspace); ``without_traceback`` (stderr
without the traceback its end repeats, for a view that shows the error on its own);
``scrub`` (JSON with unpaired surrogates replaced, as the run log writes it); ``build_models``
(build the result's validators ahead, off the path of a first execution). They are implemented
in the runtime's private modules; this is their public path.
"""

from rewyn_kernel.runtime._result import (
    NetworkAttempt,
    NetworkLog,
    WorkspaceFiles,
    without_traceback,
)
from rewyn_kernel.runtime.host.core import build_models
from rewyn_kernel.runtime.host.protocol import scrub

__all__ = [
    "NetworkAttempt",
    "NetworkLog",
    "WorkspaceFiles",
    "build_models",
    "scrub",
    "without_traceback",
]
