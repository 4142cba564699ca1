"""``rewyn-kernel mcp --notebook PATH``: the agent works in a notebook a person has open.

The agent's session is the sandboxed kernel of that notebook, the one the person's JupyterLab
runs. Each ``run_python`` call becomes a code cell of the shared notebook (real-time
collaboration: the person sees it appear and fill with output as it runs), marked as the
agent's; where the policy asks for approval, the cell waits, not run, until the person runs it
(as it is or edited) or rejects it. The parts, each the one owner of what it holds:

- ``jupyter.py``: the Jupyter server's REST API, the few calls the agent needs (the notebook's
  session and kernel, an interrupt);
- ``kernel.py``: the notebook's kernel over the server's websocket (jupyter_kernel_client's
  transport), executions matched to their messages;
- ``document.py``: the notebook's shared document (jupyter_nbmodel_client over
  jupyter-collaboration's room), the agent's cells and what the person does to them;
- ``rewyn_kernel/notebooks/agent_cells.py``: what an agent's cell keeps in its metadata, read as
  hostile (the person's notebook, and anything that edits it, may hold any JSON), shared with
  ``rewyn-kernel review``;
- ``outcome.py``: a cell's outputs as the agent's result;
- ``tools.py`` and ``server.py``: the MCP tools and the server.
"""
