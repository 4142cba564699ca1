"""The mounter: on an ordinary host, the one process of a sandbox that may still mount.

The code's view of the workspace is an overlay renewed after each execution (the host
publishes what the code wrote, and the next execution reads the folder as it is then: see the
host's ``host/workspace.py``). On a root host the host mounts it; elsewhere only the sandbox's
own user namespace has the rights, so the supervisor forks this helper before it drops its
capabilities, and asks it, frame by frame from the host, for each execution's view.

It keeps the capabilities of the sandbox's namespaces (nothing of the host's), is not dumpable
(the code cannot ptrace it or open anything under its ``/proc`` entry), holds no channel to the
host, and reads only the supervisor's pipe. It holds the real workspace folder open (a
descriptor taken before any view covered it), through which it names the lower layer and the
staging folders. Code that kills it (it runs as the same uid) stops only the renewal of its own
view; the host still publishes what it writes.
"""

from __future__ import annotations

import json
import os

from . import mounts, system

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, Optional


class Mounter:
    """The supervisor's side: the helper's pid and its two pipes."""

    def __init__(self, pid: int, commands: int, replies: int) -> None:
        self.pid = pid
        self.commands = commands
        self.replies = replies

    def ask(self, request: Dict[str, Any]) -> str:
        """Send one request and wait for its answer: '' when it was done, else why not."""
        try:
            os.write(self.commands, (json.dumps(request) + "\n").encode())
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = os.read(self.replies, 4096)
                if not chunk:
                    return "the mounter is gone"
                answer += chunk
        except OSError as exc:
            return "the mounter is gone (%s)" % exc
        return answer.decode("utf-8", "replace").strip()


def start(path: str, staging: str) -> Optional[Mounter]:
    """Fork the mounter for the workspace at ``path`` (``staging``: its staging folder,
    relative to it). Called by the supervisor while it still holds its capabilities."""
    try:
        folder = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    commands_r, commands_w = os.pipe()
    replies_r, replies_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(commands_w)
            os.close(replies_r)
            system.set_dumpable(False)
            serve(folder, path, staging, commands_r, replies_w)
        finally:
            os._exit(0)
    os.close(folder)
    os.close(commands_r)
    os.close(replies_w)
    return Mounter(pid, commands_w, replies_r)


def serve(folder: int, path: str, staging: str, commands: int, replies: int) -> None:
    """Answer the supervisor's requests until its pipe closes (it is gone)."""
    state = {"mounted": False}
    pending = b""
    while True:
        chunk = os.read(commands, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                request = json.loads(line.decode("utf-8"))
                why = handle(request, folder, path, staging, state)
            except Exception as exc:  # (a bad request: say so, serve on)
                why = "bad request (%s)" % exc
            os.write(replies, (why + "\n").encode())


def handle(
    request: Dict[str, Any], folder: int, path: str, staging: str, state: Dict[str, bool]
) -> str:
    cell = int(request["cell"])
    real = "/proc/self/fd/%d" % folder
    upper = "%s/%s/cell-%d/upper" % (real, staging, cell)
    work = "%s/%s/cell-%d/work" % (real, staging, cell)
    if state["mounted"]:
        mounts.unmount(path)
        state["mounted"] = False
    why = mounts.overlay_at(path, real, upper, work)
    if why:
        return why
    state["mounted"] = True
    protected = [str(item) for item in request.get("protected") or ()]
    return mounts.cover_view(path, protected)
