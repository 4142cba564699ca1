"""The MCP server (``rewyn-kernel mcp``): agents run Python in sandboxed sessions over the
Model Context Protocol, and their runs come back as notebooks (``rewyn-kernel review``).

``server.build_server(options)`` makes the server (it needs the SDK: the ``mcp`` extra, ``pip
install '.[mcp]'`` from a clone); ``transport`` serves it over stdio or HTTP; ``command`` is
the CLI.
"""
