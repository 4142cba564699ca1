"""The run log's record of a tool call (``TOOL_CALL``), for the layers that write and read it.

``ToolCall`` (version ``TOOL_CALL_VERSION``) holds a call's arguments, its ``Outcome``, what
the model was given, and the files (``LoggedFile``) and images (``LoggedImage``) that went in
and out, each bounded (``bounded_text``, ``bounded_arguments``, ``logged_file``,
``logged_image``; at most ``MAX_FILES`` and ``MAX_IMAGES``). Implemented in ``_tool_call.py``;
this is their public path (``ToolCall`` is also ``rewyn_kernel.runtime.events``').
"""

from rewyn_kernel.runtime._tool_call import (
    MAX_FILES,
    MAX_IMAGES,
    TOOL_CALL_VERSION,
    LoggedFile,
    LoggedImage,
    Outcome,
    ToolCall,
    bounded_arguments,
    bounded_text,
    logged_file,
    logged_image,
)

__all__ = [
    "LoggedFile",
    "LoggedImage",
    "MAX_FILES",
    "MAX_IMAGES",
    "Outcome",
    "TOOL_CALL_VERSION",
    "ToolCall",
    "bounded_arguments",
    "bounded_text",
    "logged_file",
    "logged_image",
]
