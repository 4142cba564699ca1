"""A workspace, the host folder a sandbox's code works in, for the layers above the runtime.

``Workspace`` publishes what an execution wrote there and keeps the versions it replaced in
``STORE``; ``FileChanges`` is what one publication changed; ``safe_name`` makes a name usable as
a folder's; ``not_a_workspace`` says why a folder cannot be one (empty when it can).
Implemented in ``host/workspace.py`` and ``_spec.py``; this is their public path.
"""

from rewyn_kernel.runtime._spec import not_a_workspace
from rewyn_kernel.runtime.host.workspace import STORE, FileChanges, Workspace, safe_name

__all__ = ["FileChanges", "STORE", "Workspace", "not_a_workspace", "safe_name"]
