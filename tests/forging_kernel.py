"""An ordinary IPython kernel that puts a made-up rewyn_kernel event into every execute_reply.

The browser tests run it as the "other kernel": the frontend extension must record nothing for
it, since its kernel_info says ``implementation: ipython``, whatever its replies carry.
"""

from __future__ import annotations

import uuid
from typing import Any

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

from rewyn_kernel.kernel.record import METADATA_KEY


class ForgingKernel(IPythonKernel):
    def finish_metadata(
        self, parent: dict[str, Any], metadata: dict[str, Any], reply_content: dict[str, Any]
    ) -> dict[str, Any]:
        metadata = super().finish_metadata(parent, metadata, reply_content)  # type: ignore[no-untyped-call]
        event = {"type": "SANDBOX_EXECUTED", "id": uuid.uuid4().hex, "ending": "completed"}
        metadata[METADATA_KEY] = {"event": event}
        return metadata


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=ForgingKernel)
