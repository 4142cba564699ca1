"""The Jupyter server as the agent's MCP server reaches it: its REST API, a few calls.

Only what attaching to one notebook needs: the notebook's session (and so its kernel), a new
session for the notebook where none runs, the kernel's spec names, an interrupt. The server's
URL and token come from the person (``--jupyter-url``, ``--jupyter-token`` or ``JUPYTER_TOKEN``);
the token may be a narrow one (``rewyn-kernel agent-token``) that allows no more than this and
runs no code. The agent's configuration holds that token, so its cells run with the grant's
runner token, which this server reads beside the grants' file (``runner_of``) and the agent is
never given: the kernel's websocket and the interrupt use it, everything else the agent token.
"""

from __future__ import annotations

import json
import os
import posixpath
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_REPLY_BYTES = 4 * 1024 * 1024
"""The most a REST reply may hold (a sessions list of a busy server is a few KiB)."""
REQUEST_TIMEOUT = 15.0


class JupyterError(Exception):
    """The Jupyter server could not be reached, refused, or answered nonsense: the message says
    which, for the agent and the person."""


def notebook_path(path: str) -> str:
    """``path`` as the server names a file: relative to its root, '/'-separated, normalized;
    ValueError for one that leaves the root."""
    clean = posixpath.normpath(path.replace("\\", "/").lstrip("/"))
    if clean in (".", "") or clean.startswith("../") or clean == "..":
        raise ValueError(f"{path!r} is not a notebook path under the server's root")
    if not clean.endswith(".ipynb"):
        raise ValueError(f"{path!r} is not a notebook (.ipynb)")
    return clean


@dataclass(frozen=True)
class JupyterServer:
    """A Jupyter server: where it is and the token that opens it (``runner``: the one that
    runs code in the notebook's kernel, where it is not ``token`` itself)."""

    url: str
    token: str | None
    runner: str | None = None

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{self.url!r} is not a Jupyter server URL (http[s]://host:port/)")

    @property
    def base(self) -> str:
        return self.url.rstrip("/") + "/"

    def websocket_url(self, path: str) -> str:
        """The ws(s):// URL of the server's ``path`` (the token goes in a header, not here)."""
        scheme = "wss" if self.url.startswith("https") else "ws"
        return scheme + self.base[self.base.index(":") :] + path.lstrip("/")

    def headers(self, *, run: bool = False) -> dict[str, str]:
        """The request's Authorization (``run``: to run or interrupt code, the runner token)."""
        token = (self.runner or self.token) if run else self.token
        return {"Authorization": f"token {token}"} if token else {}

    def call(self, method: str, path: str, body: Any = None, *, run: bool = False) -> Any:
        """One REST call: its JSON reply (None for an empty one); JupyterError otherwise."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path.lstrip("/"), data=data, method=method, headers=self.headers(run=run)
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                raw = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode("utf-8", "replace")
            with_reason = _reason(detail) or exc.reason
            raise JupyterError(
                f"the Jupyter server refused {method} /{path.lstrip('/')}: {exc.code} "
                f"{with_reason}"
                + (" (the token does not allow it)" if exc.code in (401, 403) else "")
            ) from None
        except (OSError, ValueError) as exc:
            raise JupyterError(
                f"the Jupyter server at {self.url} cannot be reached: {exc}"
            ) from None
        if len(raw) > MAX_REPLY_BYTES:
            raise JupyterError(
                f"the Jupyter server's reply to {path} is over {MAX_REPLY_BYTES} bytes"
            )
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise JupyterError(f"the Jupyter server's reply to {path} is not JSON") from None

    # -- what the attachment uses ----------------------------------------------------------

    def session_of(self, path: str) -> dict[str, Any] | None:
        """The session of the notebook at ``path`` (its kernel's id under ``kernel.id``), or
        None where no kernel runs for it."""
        sessions = self.call("GET", "api/sessions")
        if not isinstance(sessions, list):
            raise JupyterError("the Jupyter server's sessions are not a list")
        for session in sessions:
            if not isinstance(session, dict):
                continue
            kernel = session.get("kernel")
            named = session.get("path")
            if (
                isinstance(named, str)
                and isinstance(kernel, dict)
                and named.lstrip("/") == path
                and isinstance(kernel.get("id"), str)
            ):
                return session
        return None

    def start_session(self, path: str, kernel_name: str) -> dict[str, Any]:
        """A session for the notebook at ``path`` on kernelspec ``kernel_name`` (as JupyterLab
        makes when the notebook is opened; it joins this one when the person opens it)."""
        session = self.call(
            "POST",
            "api/sessions",
            {
                "path": path,
                "name": posixpath.basename(path),
                "type": "notebook",
                "kernel": {"name": kernel_name},
            },
        )
        kernel = session.get("kernel") if isinstance(session, dict) else None
        if not isinstance(kernel, dict) or not isinstance(kernel.get("id"), str):
            raise JupyterError("the Jupyter server started a session without a kernel")
        return session  # type: ignore[no-any-return]

    def kernel_state(self, kernel_id: str) -> str | None:
        """The kernel's execution state as the server last saw it (None: no such kernel)."""
        try:
            model = self.call("GET", f"api/kernels/{urllib.parse.quote(kernel_id)}")
        except JupyterError as exc:
            if " 404 " in str(exc):
                return None
            raise
        state = model.get("execution_state") if isinstance(model, dict) else None
        return state if isinstance(state, str) else "unknown"

    def interrupt(self, kernel_id: str) -> None:
        self.call("POST", f"api/kernels/{urllib.parse.quote(kernel_id)}/interrupt", run=True)


def runner_of(token: str | None) -> str | None:
    """The runner token of the agent token ``token``, from beside the grants' file
    (``$REWYN_AGENT_TOKENS_FILE``, else the default one of ``rewyn-kernel agent-token``); None
    where there is none (another kind of token, or a server elsewhere)."""
    if not token:
        return None
    from rewyn_kernel.server import tokens

    named = os.environ.get(tokens.TOKENS_FILE_ENV)
    return tokens.runner_token(Path(named) if named else tokens.default_tokens_file(), token)


def _reason(body: str) -> str:
    """The ``message`` or ``reason`` of a Jupyter error body, if it is one."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if isinstance(parsed, dict):
        for key in ("message", "reason"):
            if isinstance(parsed.get(key), str) and parsed[key]:
                return str(parsed[key])[:500]
    return ""
