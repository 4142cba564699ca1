"""Installs in the sandbox, for the layers above the runtime: which commands of a cell install
packages (``INSTALL``; ``NEEDS_INDEX``, the installers useless without their index), and the
variable that tells the sandbox's worker to keep what pip installs for the notebook
(``ENV_NAME``). Implemented in ``worker/magics.py`` and ``worker/kept.py``, which run in the
sandbox; this is their public path.
"""

from rewyn_kernel.runtime.worker.kept import ENV_NAME
from rewyn_kernel.runtime.worker.magics import INSTALL, NEEDS_INDEX

__all__ = ["ENV_NAME", "INSTALL", "NEEDS_INDEX"]
