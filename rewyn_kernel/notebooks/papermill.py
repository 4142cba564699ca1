"""A papermill engine that keeps each cell's record, as ``rewyn-kernel run`` does.

``papermill IN.ipynb OUT.ipynb -k rewyn-sandbox --engine rewyn`` runs the notebook on nbclient
as papermill's own engine does, and puts the compact record of each cell's latest execution
from its execute_reply (which no notebook client saves) into the cell's
``metadata["rewyn_kernel"]["record"]``. Registered as the ``rewyn`` entry point of
``papermill.engine``; needs papermill (the ``papermill`` extra: ``pip install '.[papermill]'``
from a clone).
"""

from __future__ import annotations

from typing import Any

from papermill.engines import NBClientEngine

from rewyn_kernel.kernel.record import cell_record, reply_record, set_cell_record

__all__ = ["SandboxEngine", "keep_record"]


def keep_record(cell: Any, execute_reply: dict[str, Any], **_: Any) -> None:
    """nbclient's ``on_cell_executed`` hook: the reply's record into the cell's metadata."""
    record = reply_record(execute_reply)
    if record is not None:
        set_cell_record(cell_record(cell.metadata), record)


class SandboxEngine(NBClientEngine):  # type: ignore[misc]
    """papermill's nbclient engine, keeping the sandbox kernel's records in cell metadata."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        previous = kwargs.pop("on_cell_executed", None)

        def on_cell_executed(**hook: Any) -> None:
            keep_record(**hook)
            if previous is not None:
                previous(**hook)

        return super().execute_managed_notebook(
            nb_man, kernel_name, on_cell_executed=on_cell_executed, **kwargs
        )
