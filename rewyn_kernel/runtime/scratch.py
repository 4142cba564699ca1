"""A sandbox's scratch directory as the host handles it: never following a link the code made.

Every path is walked from a descriptor of the directory, one component at a time, with
``O_NOFOLLOW`` (see ``host/scratch.py``, which implements it); a path the rules refuse raises
``ScratchError``. This is the public path of those operations, for the layers above the runtime.
"""

from rewyn_kernel.runtime.host.scratch import (
    READ_LIMIT,
    ScratchEntry,
    ScratchError,
    file_facts,
    list_dir,
    read_file,
    remove_tree,
    write_file,
)

__all__ = [
    "READ_LIMIT",
    "ScratchEntry",
    "ScratchError",
    "file_facts",
    "list_dir",
    "read_file",
    "remove_tree",
    "write_file",
]
