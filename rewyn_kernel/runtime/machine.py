"""What this machine offers the local providers: whether bubblewrap starts a sandbox here
(``probe_bubblewrap``) and whether memory cgroups bound all of a worker's processes together
(``cgroup_support``). ``rewyn-kernel doctor`` and the MCP server's choice of provider read
them. Implemented in ``providers/bubblewrap.py`` and ``providers/local/cgroup.py``; this is
their public path."""

from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap
from rewyn_kernel.runtime.providers.local.cgroup import cgroup_support

__all__ = ["cgroup_support", "probe_bubblewrap"]
