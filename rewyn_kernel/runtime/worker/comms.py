"""Jupyter comms in the code's process: what ipywidgets (and tqdm's notebook bar) talk through.

The ``comm`` package is how libraries open comms without knowing the kernel: ipykernel replaces
its ``create_comm`` and ``get_comm_manager``, and so does this module, with comms whose messages
go out as ``comm`` frames (their binary buffers as base64) for the host to check and relay. What
the frontend sends back arrives as an execution whose payload is the message (``deliver``): it
runs on the code's main thread between cells, as ipykernel runs comm handlers on its shell's,
so a widget's callback (``interact``) runs in the sandbox under its limits. Imported only where
the sandbox's Python has the ``comm`` package.
"""

from __future__ import annotations

import base64
import json

from .frontend import Output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

    from .wire import Header

MAX_BUFFERS = 1024
"""Buffers a message may carry to the host (its policy relays fewer, and says so)."""
KINDS = ("comm_open", "comm_msg", "comm_close")


def available() -> bool:
    """Whether the ``comm`` package can be imported here (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("comm") is not None
    except (ImportError, ValueError):
        return False


class Comms:
    """The process's comm manager and its comm class, installed into the ``comm`` package."""

    def __init__(self, output: Output, flush: Callable[[], None]) -> None:
        import comm
        from comm.base_comm import BaseComm, CommManager

        self.output = output
        self.flush = flush
        self.manager = CommManager()
        comms = self

        class SandboxComm(BaseComm):  # type: ignore[misc]
            """A comm whose messages leave the sandbox as frames."""

            def publish_msg(
                self,
                msg_type: str,
                data: Any = None,
                metadata: Any = None,
                buffers: Any = None,
                **keys: Any,
            ) -> None:
                comms.publish(
                    self.comm_id, msg_type, data=data, metadata=metadata, buffers=buffers, keys=keys
                )

        self.comm_class = SandboxComm
        comm.create_comm = self.create
        comm.get_comm_manager = self.get_manager

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self.comm_class(*args, **kwargs)

    def get_manager(self) -> Any:
        return self.manager

    def publish(
        self,
        comm_id: str,
        msg_type: str,
        *,
        data: Any,
        metadata: Any,
        buffers: Any,
        keys: Dict[str, Any],
    ) -> None:
        """Send one comm message to the host (it checks it against its policy)."""
        self.flush()  # what was printed before stays before
        content: Header = {"comm_id": comm_id, "data": data if data is not None else {}}
        for name in ("target_name", "target_module"):
            if name in keys:
                content[name] = keys[name]
        encoded: List[str] = []
        for buffer in list(buffers or [])[:MAX_BUFFERS]:
            encoded.append(base64.b64encode(memoryview(buffer).cast("B")).decode("ascii"))
        frame: Header = {
            "t": "comm",
            "msg_type": msg_type,
            "content": content,
            "metadata": metadata if metadata is not None else {},
            "buffers": encoded,
        }
        self.output.send_any(frame)

    def deliver(self, text: str) -> None:
        """Hand a message from the frontend (JSON, buffers as base64) to its comm or target."""
        message = json.loads(text)
        kind = message.get("msg_type")
        if kind not in KINDS:
            raise ValueError("not a comm message: %r" % (kind,))
        msg = {
            "header": {"msg_id": message.get("msg_id", ""), "msg_type": kind},
            "content": message.get("content") or {},
            "metadata": message.get("metadata") or {},
            "buffers": [base64.b64decode(item) for item in message.get("buffers") or []],
        }
        handler: Optional[Callable[..., Any]] = getattr(self.manager, kind)
        if handler is not None:
            handler(None, None, msg)
