"""The bearer token of ``rewyn-kernel mcp --http``: the one given (``--token``,
``$REWYN_MCP_TOKEN``), else one made once and kept in the user's Jupyter data directory, so the
header a client saved keeps working when the server starts again.

The kept file is the user's alone (0600, in a 0700 folder): it is read only when it is a
regular file (not a link), owned by this user and closed to everyone else; otherwise the server
does not start, and says how to mend it. Two servers that start together keep one token: the
file appears whole (linked into place) or not at all.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

TOKEN_VARIABLE = "REWYN_MCP_TOKEN"
MIN_CHARS = 16
"""The shortest token the server takes."""


class TokenError(ValueError):
    """The kept token cannot be used; the message says why and how to mend it."""


def token_file() -> Path:
    """Where the made token is kept: ``<Jupyter data dir>/rewyn-kernel/mcp-token``."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir(), "rewyn-kernel", "mcp-token")


def kept_token(path: Path | None = None) -> tuple[str, bool]:
    """The token kept in ``path`` (default ``token_file()``), made there first if there is
    none; and whether it was made now. Raises TokenError for a file that is not safe to use."""
    path = path or token_file()
    try:
        return _read(path), False
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    made = secrets.token_urlsafe(32)
    handle, staged = tempfile.mkstemp(dir=path.parent, prefix=".mcp-token-")  # (mode 0600)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(made + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(staged, path)  # (fails where another server made one meanwhile)
        except FileExistsError:
            return _read(path), False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
    return made, True


def _read(path: Path) -> str:
    mend = f"delete {path} (a new token is made at the next start) or pass --token"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise TokenError(f"the kept token {path} cannot be read ({exc.strerror}): {mend}") from exc
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise TokenError(f"{path} is not a file of this user's: {mend}")
        if info.st_mode & 0o077:
            raise TokenError(
                f"{path} can be read by other users (mode {stat.S_IMODE(info.st_mode):04o}): {mend}"
            )
        text = file.read(1024).decode("ascii", "replace").strip()
    if len(text) < MIN_CHARS or not (text.isascii() and text.isprintable()) or " " in text:
        raise TokenError(f"{path} holds no token: {mend}")
    return text
