"""The host side of a sandbox: the channel to its worker, sessions, executions, the sandbox."""
