"""Agent tokens (rewyn_kernel.server) on a real JupyterLab with real-time collaboration: the
token's notebook works through the real clients (jupyter_nbmodel_client's room,
jupyter_kernel_client's channels), everything else of the server answers 403, and the person's
own token still opens everything."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from rewyn_kernel.cli import main as cli
from rewyn_kernel.server import command, tokens
from tests.conftest import unavailable
from tests.jupyter_browser import JupyterServer, jupyter_server, kernels_left, write_notebook
from tests.kernel_client import write_spec
from tests.live_agent import Agent, text_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

KERNEL = "plain-python"
"""A plain ipykernel spec: the access rules do not depend on the kernel."""
OTHER_KERNEL = "other-python"
"""The same kernel under a name the agent's token does not allow it to start."""
SANDBOX_KERNEL = "rewyn-access"
"""The sandboxed kernel, for rewyn-kernel mcp --notebook (which takes no other)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


def call(
    server: JupyterServer, token: str | None, method: str, path: str, body: Any = None
) -> Reply:
    """One REST call with ``token`` in the Authorization header; the status and JSON body, 4xx
    and 5xx included."""
    headers = {"Authorization": f"token {token}"} if token else {}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(
        f"{server.url}/{path.lstrip('/')}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return Reply(status, json.loads(raw) if raw.strip() else None)
    except ValueError:
        return Reply(status, raw.decode(errors="replace"))


def websocket_status(server: JupyterServer, token: str, path: str) -> int:
    """101 if the websocket at ``path`` opens with ``token`` (then closed), else the status."""
    url = server.url.replace("http", "ws", 1) + "/" + path.lstrip("/")
    try:
        with connect(url, additional_headers={"Authorization": f"token {token}"}, open_timeout=30):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def write_kernelspec(root: Path, name: str) -> None:
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": name, "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


@dataclass(frozen=True)
class Setup:
    server: JupyterServer
    tokens_file: Path
    work: Path
    agent: str
    runner: str
    """The agent token's runner token, as rewyn-kernel mcp --notebook finds it."""
    b_session: str
    b_kernel: str
    b_file_id: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    for module in ("jupyterlab", "jupyter_server_ydoc", "jupyter_nbmodel_client"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"{module} is not installed: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("agent-access")
    root = work / "notebooks"
    root.mkdir()
    for name in ("a.ipynb", "b.ipynb"):
        write_notebook(root / name, KERNEL, [("code", f"name = {name!r}")])
    (root / "secret.txt").write_text("the person's file")
    kernels = work / "kernels-path"
    write_kernelspec(kernels, KERNEL)
    write_kernelspec(kernels, OTHER_KERNEL)
    write_spec(kernels, SANDBOX_KERNEL)
    write_notebook(root / "live.ipynb", SANDBOX_KERNEL, [("code", "shared = 'from the person'")])
    tokens_file = tokens.default_tokens_file(str(work / "runtime"))
    with jupyter_server(
        root, kernels, work, collaboration=True, extra_args=command.SERVER_FLAGS
    ) as server:
        agent, _ = tokens.mint(tokens_file, "a.ipynb", name="tester", ttl=3600, kernels=(KERNEL,))
        # The person's notebook b.ipynb, with its kernel and its collaboration room.
        b = server.api(
            "sessions", "POST", {"path": "b.ipynb", "type": "notebook", "kernel": {"name": KERNEL}}
        )
        room = server.api(
            "collaboration/session/b.ipynb", "PUT", {"format": "json", "type": "notebook"}
        )
        runner = tokens.runner_token(tokens_file, agent)
        assert runner is not None
        assert runner != agent
        yield Setup(
            server, tokens_file, work, agent, runner, b["id"], b["kernel"]["id"], room["fileId"]
        )
    assert kernels_left(server.runtime_dir) == [], "a kernel outlived the server"


@pytest.fixture(scope="module")
def a_kernel(setup: Setup) -> str:
    """The kernel of a.ipynb, started by the agent through POST /api/sessions."""
    made = call(setup.server, setup.agent, "POST", "api/sessions", new_session("a.ipynb", KERNEL))
    assert made.status == 201, made
    kernel_id: str = made.body["kernel"]["id"]
    return kernel_id


def new_session(path: str, kernel: str | None) -> dict[str, Any]:
    return {"path": path, "name": path, "type": "notebook", "kernel": {"name": kernel}}


def test_the_agent_starts_a_kernel_only_of_its_token_kernelspecs(setup: Setup) -> None:
    server = setup.server
    token, _ = tokens.mint(setup.tokens_file, "c.ipynb", name="c", ttl=3600, kernels=(KERNEL,))
    for kernel in (OTHER_KERNEL, None):  # None: the server's default kernelspec (python3)
        refused = call(server, token, "POST", "api/sessions", new_session("c.ipynb", kernel))
        assert refused.status == 403, refused
        assert "is not one this token may start" in refused.body["message"]
    assert call(server, token, "GET", "api/sessions").body == []


def test_the_agent_works_in_its_notebook_through_the_real_clients(
    setup: Setup, a_kernel: str
) -> None:
    from jupyter_kernel_client import JupyterKernelClient
    from jupyter_nbmodel_client import NbModelClient, get_jupyter_notebook_websocket_url

    server, agent = setup.server, setup.agent
    listed = call(server, agent, "GET", "api/sessions")
    assert listed.status == 200
    assert [(s["path"], s["kernel"]["id"]) for s in listed.body] == [("a.ipynb", a_kernel)]
    # The notebook's session again: the server answers with it, whatever kernel is asked for.
    again = call(server, agent, "POST", "api/sessions", new_session("a.ipynb", OTHER_KERNEL))
    assert (again.status, again.body["kernel"]["id"]) == (201, a_kernel)
    session_id = listed.body[0]["id"]
    assert call(server, agent, "GET", f"api/sessions/{session_id}").status == 200
    assert call(server, agent, "GET", f"api/kernels/{a_kernel}").status == 200
    assert call(server, setup.runner, "POST", f"api/kernels/{a_kernel}/interrupt").status == 204
    specs = call(server, agent, "GET", "api/kernelspecs")
    assert specs.status == 200
    assert {KERNEL, OTHER_KERNEL} <= set(specs.body["kernelspecs"])
    assert call(server, agent, "GET", f"api/kernelspecs/{KERNEL}").status == 200

    # (The code runs with the runner token, as rewyn-kernel mcp --notebook runs it.)
    kernel = JupyterKernelClient(server_url=server.url, token=setup.runner, kernel_id=a_kernel)
    kernel.start()
    try:
        reply = kernel.execute("1 + 1")
        assert reply["status"] == "ok"
        assert reply["outputs"][0]["data"]["text/plain"] == "2"

        async def edit() -> list[dict[str, Any]]:
            url = get_jupyter_notebook_websocket_url(server.url, "a.ipynb", token=agent)
            async with NbModelClient(url) as notebook:
                assert notebook.synced
                assert notebook.get_cell_source(0) == "name = 'a.ipynb'"
                index = notebook.add_code_cell("name")
                for cell in (0, index):
                    result = await asyncio.to_thread(notebook.execute_cell, cell, kernel)
                    assert result["status"] == "ok", result
                # What the person's own client sees of the room.
                person_url = get_jupyter_notebook_websocket_url(
                    server.url, "a.ipynb", token=server.token
                )
                async with NbModelClient(person_url) as person:
                    cells: list[dict[str, Any]] = []

                    def seen() -> bool:
                        cells[:] = person.as_dict()["cells"]
                        return len(cells) == 2 and bool(cells[1].get("outputs"))

                    await until(seen, "the person's view of the agent's cell")
                    return cells

        cells = asyncio.run(edit())
        assert cells[1]["source"] == "name"
        assert cells[1]["outputs"][0]["data"]["text/plain"] == "'a.ipynb'"
    finally:
        kernel.stop(shutdown_kernel=False)


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {timeout:g} s"
        await asyncio.sleep(0.05)


REFUSED_CALLS = [
    ("GET", "api/contents/b.ipynb", None),
    ("GET", "api/contents/a.ipynb", None),  # the notebook goes through the room, not contents
    ("GET", "api/contents", None),
    ("GET", "api/contents/secret.txt", None),
    ("PUT", "api/contents/new.txt", {"type": "file", "format": "text", "content": "x"}),
    ("PUT", "api/contents/a.ipynb", {"type": "file", "format": "text", "content": "x"}),
    ("POST", "api/contents", {"type": "notebook"}),
    ("GET", "files/secret.txt", None),
    ("GET", "api/terminals", None),
    ("POST", "api/terminals", {}),
    ("GET", "api/kernels", None),
    ("POST", "api/kernels", {"name": KERNEL}),
    ("POST", "api/sessions", {"path": "c.ipynb", "type": "notebook", "kernel": {"name": KERNEL}}),
    ("PUT", "api/collaboration/session/b.ipynb", {"format": "json", "type": "notebook"}),
    ("PUT", "api/collaboration/session/a.ipynb", {"format": "text", "type": "file"}),
    ("GET", "api/collaboration/timeline/json:notebook:a.ipynb", None),
    ("GET", "api/me", None),
    ("GET", "api/status", None),
    ("GET", "api/config/notebook", None),
    ("GET", "lab/api/workspaces", None),
    ("GET", "lab/api/settings", None),
    ("GET", "lab", None),
    ("GET", "lab/tree/a.ipynb", None),
    ("GET", "nbconvert/html/b.ipynb", None),
]


@pytest.mark.parametrize(("method", "path", "body"), REFUSED_CALLS)
def test_everything_else_is_refused(
    setup: Setup, a_kernel: str, method: str, path: str, body: Any
) -> None:
    reply = call(setup.server, setup.agent, method, path, body)
    assert reply.status == 403, reply


def test_the_person_notebook_b_is_out_of_reach(setup: Setup, a_kernel: str) -> None:
    server, agent = setup.server, setup.agent
    b_kernel = setup.b_kernel
    for method, path, body in [
        ("GET", f"api/kernels/{b_kernel}", None),
        ("POST", f"api/kernels/{b_kernel}/interrupt", None),
        ("POST", f"api/kernels/{b_kernel}/restart", None),
        ("DELETE", f"api/kernels/{b_kernel}", None),
        ("GET", f"api/sessions/{setup.b_session}", None),
        ("DELETE", f"api/sessions/{setup.b_session}", None),
        # a.ipynb's session onto b.ipynb's kernel, or renamed to b.ipynb
        (
            "POST",
            "api/sessions",
            {"path": "a.ipynb", "type": "notebook", "kernel": {"id": b_kernel}},
        ),
        ("PATCH", f"api/sessions/{setup.b_session}", {"path": "a.ipynb"}),
    ]:
        reply = call(server, agent, method, path, body)
        assert reply.status == 403, (method, path, reply)
    assert websocket_status(server, agent, f"api/kernels/{b_kernel}/channels") == 403
    assert (
        websocket_status(server, agent, f"api/collaboration/room/json:notebook:{setup.b_file_id}")
        == 403
    )
    # The same room named another way (an encoded ':', a nested path) is refused too.
    assert (
        websocket_status(
            server, agent, f"api/collaboration/room/json%3Anotebook%3A{setup.b_file_id}"
        )
        == 403
    )
    assert (
        websocket_status(server, agent, f"api/collaboration/room/x/json:notebook:{setup.b_file_id}")
        == 403
    )
    # And the agent does not learn that b.ipynb has a session.
    assert "b.ipynb" not in json.dumps(call(server, agent, "GET", "api/sessions").body)


def test_the_agent_may_not_restart_rename_or_end_its_own_notebook_session(
    setup: Setup, a_kernel: str
) -> None:
    server, agent = setup.server, setup.agent
    (session,) = call(server, agent, "GET", "api/sessions").body
    for method, path, body in [
        ("POST", f"api/kernels/{a_kernel}/restart", None),
        ("DELETE", f"api/kernels/{a_kernel}", None),
        ("PATCH", f"api/sessions/{session['id']}", {"path": "b.ipynb"}),
        ("PATCH", f"api/sessions/{session['id']}", {"kernel": {"name": OTHER_KERNEL}}),
        ("DELETE", f"api/sessions/{session['id']}", None),
    ]:
        reply = call(server, agent, method, path, body)
        assert reply.status == 403, (method, path, reply)
    assert call(server, agent, "GET", f"api/kernels/{a_kernel}").status == 200


def test_the_person_token_still_opens_everything(setup: Setup, a_kernel: str) -> None:
    server = setup.server
    person = server.token
    assert call(server, person, "GET", "api/contents/b.ipynb").status == 200
    assert call(server, person, "GET", "api/contents").status == 200
    assert call(server, person, "GET", "api/terminals").status == 200
    assert call(server, person, "GET", "api/kernels").status == 200
    assert call(server, person, "GET", f"api/kernels/{setup.b_kernel}").status == 200
    assert call(server, person, "GET", "api/me").status == 200
    assert call(server, person, "GET", "lab/api/workspaces").status == 200
    paths = {s["path"] for s in call(server, person, "GET", "api/sessions").body}
    assert paths == {"a.ipynb", "b.ipynb"}
    assert (
        websocket_status(server, person, f"api/collaboration/room/json:notebook:{setup.b_file_id}")
        == 101
    )
    # Without a token: nothing (the server's own rule, unchanged).
    assert call(server, None, "GET", "api/sessions").status == 403


def test_a_revoked_an_expired_an_unknown_token_open_nothing(setup: Setup, a_kernel: str) -> None:
    server = setup.server
    revoked, grant = tokens.mint(
        setup.tokens_file, "a.ipynb", name="revoked", ttl=3600, kernels=None
    )
    assert call(server, revoked, "GET", "api/sessions").status == 200
    assert tokens.revoke(setup.tokens_file, grant.id) == [grant]
    # ttl 1e-9 s: the expiry is the instant of creation itself (a float's precision).
    expired, _ = tokens.mint(setup.tokens_file, "a.ipynb", name="expired", ttl=1e-9, kernels=None)
    for token in (revoked, expired, "not-a-token", setup.agent[:-1]):
        assert call(server, token, "GET", "api/sessions").status == 403, token
        assert call(server, token, "GET", f"api/kernels/{a_kernel}").status == 403, token
        assert websocket_status(server, token, f"api/kernels/{a_kernel}/channels") == 403
    assert call(server, setup.agent, "GET", "api/sessions").status == 200


def test_revoking_a_token_closes_its_open_websockets(setup: Setup, a_kernel: str) -> None:
    server = setup.server
    token, grant = tokens.mint(setup.tokens_file, "a.ipynb", name="open", ttl=3600, kernels=None)
    room = call(server, token, "PUT", "api/collaboration/session/a.ipynb", ROOM_BODY).body
    base = server.url.replace("http", "ws", 1)
    header = {"Authorization": f"token {token}"}
    runner = {"Authorization": f"token {tokens.runner_token(setup.tokens_file, token)}"}
    paths = [
        (f"api/kernels/{a_kernel}/channels", header),
        (
            f"api/collaboration/room/json:notebook:{room['fileId']}?sessionId={room['sessionId']}",
            header,
        ),
        (f"api/kernels/{a_kernel}/channels", runner),
    ]
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(connect(f"{base}/{path}", additional_headers=headers))
            for path, headers in paths
        ]
        tokens.revoke(setup.tokens_file, grant.id)
        assert [closed_by_server(socket) for socket in sockets] == [True, True, True]


def closed_by_server(socket: ClientConnection, timeout: float = 30.0) -> bool:
    """Read (and drop) what ``socket`` receives until the server closes it: True; or False
    when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            socket.recv(timeout=deadline - time.monotonic())
    except ConnectionClosed:
        return True
    except TimeoutError:
        return False
    return False


ROOM_BODY = {"format": "json", "type": "notebook"}


V1 = "v1.kernel.websocket.jupyter.org"
"""The kernel websocket's binary protocol (jupyter_kernel_client's); without it, the legacy
JSON one (JupyterLab's older clients)."""


class KernelSocket:
    """A raw kernel websocket: messages as any client may write them, not only ours."""

    def __init__(
        self, server: JupyterServer, token: str, kernel_id: str, protocol: str | None
    ) -> None:
        from jupyter_client.session import Session

        url = f"{server.url.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels"
        self.protocol = protocol
        self._opening = connect(
            url,
            additional_headers={"Authorization": f"token {token}"},
            subprotocols=[protocol] if protocol else None,  # type: ignore[list-item]
            open_timeout=30,
        )
        self.session = Session(key=b"unused", username="raw")  # (the server signs for the kernel)

    def __enter__(self) -> KernelSocket:
        self.socket = self._opening.__enter__()
        return self

    def __exit__(self, *_: object) -> None:
        self.socket.close()

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1

        msg = self.session.msg(msg_type, content)
        if self.protocol == V1:
            parts = [
                json.dumps(msg[part], default=str).encode()
                for part in ("header", "parent_header", "metadata", "content")
            ]
            self.socket.send(serialize_msg_to_ws_v1(parts, channel))  # type: ignore[no-untyped-call]
        else:
            self.socket.send(json.dumps({**msg, "channel": channel}, default=str))
        msg_id: str = msg["header"]["msg_id"]
        return msg_id

    def reply(self, msg_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """The reply to ``msg_id`` (its header's type ends in _reply)."""
        from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1

        deadline = time.monotonic() + timeout
        while True:
            raw = self.socket.recv(timeout=max(deadline - time.monotonic(), 0.01))
            if isinstance(raw, bytes):
                _, parts = deserialize_msg_from_ws_v1(raw)  # type: ignore[no-untyped-call]
                header, parent, _, content = (json.loads(part) for part in parts[:4])
            else:
                msg = json.loads(raw)
                header, parent, content = msg["header"], msg["parent_header"], msg["content"]
            if parent.get("msg_id") == msg_id and header["msg_type"].endswith("_reply"):
                return {"msg_type": header["msg_type"], "content": content}

    def refusal(self, timeout: float = 30.0) -> str | None:
        """The reason the server gave when it closed the socket as a policy violation (1008);
        None if it did not close it within ``timeout`` seconds (or closed it otherwise)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.socket.recv(timeout=deadline - time.monotonic())
        except ConnectionClosed as exc:
            return exc.rcvd.reason if exc.rcvd is not None and exc.rcvd.code == 1008 else None
        except TimeoutError:
            return None
        return None


def run(socket: KernelSocket, code: str, show: str | None = None) -> dict[str, Any]:
    """Execute ``code`` (and the expression ``show``): the execute_reply's content."""
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {"shown": show} if show else {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    reply: dict[str, Any] = socket.reply(socket.send("shell", "execute_request", content))
    return reply["content"]  # type: ignore[no-any-return]


def shown(reply: dict[str, Any]) -> str:
    value: str = reply["user_expressions"]["shown"]["data"]["text/plain"]
    return value


THAT_RUN_CODE: list[tuple[str, str | None, dict[str, Any]]] = [
    ("shell", "execute_request", {"code": "kept = 'the agent'", "silent": True}),
    ("control", "execute_request", {"code": "kept = 'the agent'", "silent": True}),
    ("control", "shutdown_request", {"restart": True}),
    ("control", "shutdown_request", {"restart": False}),
    ("shell", "shutdown_request", {"restart": True}),  # (older kernels took it on shell)
    ("control", "interrupt_request", {}),
    ("shell", "inspect_request", {"code": "kept", "cursor_pos": 4, "detail_level": 1}),
    ("shell", "complete_request", {"code": "kept.", "cursor_pos": 5}),
    ("shell", "history_request", {"hist_access_type": "tail", "n": 10, "output": True}),
    ("control", "debug_request", {"seq": 1, "type": "request", "command": "initialize"}),
    ("stdin", "input_reply", {"value": "kept = 'the agent'"}),
    ("shell", "comm_open", {"comm_id": "x", "target_name": "jupyter.widget", "data": {}}),
    ("shell", "comm_msg", {"comm_id": "x", "data": {}}),
    # (the person's network grant, answered on the kernel's host side: kernel/grants.py)
    (
        "shell",
        "comm_open",
        {"comm_id": "g", "target_name": "rewyn_kernel.grants", "data": {"action": "grant"}},
    ),
    ("shell", None, {}),  # (no type at all)
]
"""What may run, restart or interrupt code in the kernel (or read what the agent cannot see
in the notebook): the agent's token sends none of it."""


@pytest.mark.parametrize("protocol", [None, V1])
def test_the_agent_token_runs_restarts_and_interrupts_nothing(
    setup: Setup, a_kernel: str, protocol: str | None
) -> None:
    """Issue 38, finding 6: each of these closes the agent's websocket as a policy violation
    before the kernel hears of it, and the person's state in the kernel survives them all."""
    server = setup.server
    with KernelSocket(server, server.token, a_kernel, protocol) as person:
        assert run(person, f"kept = {protocol!r}")["status"] == "ok"
    for channel, msg_type, content in THAT_RUN_CODE:
        with KernelSocket(server, setup.agent, a_kernel, protocol) as agent:
            agent.send(channel, msg_type or "", content)
            reason = agent.refusal()
        assert reason is not None, f"{msg_type} on {channel} went through"
        assert reason.endswith(": not a message the agent token sends"), reason
    with KernelSocket(server, server.token, a_kernel, protocol) as person:
        assert shown(run(person, "", "kept")) == repr(protocol)
    # The kernel's REST interrupt is refused to the agent's token too.
    assert call(server, setup.agent, "POST", f"api/kernels/{a_kernel}/interrupt").status == 403


def test_a_header_that_names_its_type_twice_is_refused(setup: Setup, a_kernel: str) -> None:
    """Two parsers may take either of two keys of one name: such a header is refused, even
    where both name a message the token may send."""
    from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1

    with KernelSocket(setup.server, setup.agent, a_kernel, V1) as agent:
        msg = agent.session.msg("kernel_info_request", {})
        header = json.dumps(msg["header"], default=str)
        twice = header[:-1] + ', "msg_type": "kernel_info_request"}'
        parts = [twice.encode(), b"{}", b"{}", b"{}"]
        agent.socket.send(serialize_msg_to_ws_v1(parts, "shell"))  # type: ignore[no-untyped-call]
        reason = agent.refusal()
    assert reason == "an unreadable message: not a message the agent token sends", reason


def test_the_runner_token_runs_code_and_restarts_nothing(setup: Setup, a_kernel: str) -> None:
    """The runner token (rewyn-kernel mcp --notebook's) adds execute_request on shell and the
    REST interrupt; a restart, a shutdown, an interrupt or stdin over the websocket stay
    refused, and the runner token reaches no more of the server than the agent token."""
    server = setup.server
    with KernelSocket(server, setup.runner, a_kernel, V1) as runner:
        assert shown(run(runner, "ran = 6 * 7", "ran")) == "42"
    for channel, msg_type, content in THAT_RUN_CODE:
        if (channel, msg_type) == ("shell", "execute_request"):
            continue
        with KernelSocket(server, setup.runner, a_kernel, V1) as runner:
            runner.send(channel, msg_type or "", content)
            reason = runner.refusal()
        assert reason is not None, f"{msg_type} on {channel} went through"
    with KernelSocket(server, server.token, a_kernel, V1) as person:
        assert shown(run(person, "", "ran")) == "42"  # (the same kernel process)
    assert call(server, setup.runner, "POST", f"api/kernels/{a_kernel}/interrupt").status == 204
    for method, path in [
        ("POST", f"api/kernels/{a_kernel}/restart"),
        ("POST", f"api/kernels/{setup.b_kernel}/interrupt"),
        ("GET", "api/contents"),
    ]:
        assert call(server, setup.runner, method, path).status == 403, (method, path)
    assert websocket_status(server, setup.runner, f"api/kernels/{setup.b_kernel}/channels") == 403


def test_the_agent_token_still_reads_the_kernel_info(setup: Setup, a_kernel: str) -> None:
    """What attaching needs (the kernel's implementation and risk): kernel_info, on either
    channel, answered on a socket that stays open."""
    with KernelSocket(setup.server, setup.agent, a_kernel, V1) as agent:
        for channel in ("shell", "control"):
            reply = agent.reply(agent.send(channel, "kernel_info_request", {}))
            assert reply["msg_type"] == "kernel_info_reply"
            assert reply["content"]["status"] == "ok"


def test_agent_token_command_mints_lists_and_revokes(
    setup: Setup, a_kernel: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server, path = setup.server, str(setup.tokens_file)
    assert cli(["agent-token", "a.ipynb", "--name", "cli", "--tokens-file", path]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert "--ServerApp.authorizer_class=rewyn_kernel.server.AgentAuthorizer" in err
    assert token not in setup.tokens_file.read_text()  # only its hash is kept
    assert setup.tokens_file.stat().st_mode & 0o777 == 0o600
    # The runner token is kept for the MCP server (0600), never printed.
    runner = tokens.runner_token(setup.tokens_file, token)
    assert runner is not None
    assert runner not in out + err
    (runner_file,) = [
        each
        for each in (setup.tokens_file.parent / tokens.RUNNERS).iterdir()
        if each.read_text() == runner
    ]
    assert runner_file.stat().st_mode & 0o777 == 0o600
    assert f"{tokens.TOKENS_FILE_ENV}={path}" in err
    assert call(server, token, "GET", f"api/kernels/{a_kernel}").status == 200
    assert call(server, token, "GET", "api/contents").status == 403
    assert cli(["agent-token", "--list", "--tokens-file", path]) == 0
    listed = capsys.readouterr().out
    assert "cli  a.ipynb" in listed
    assert "kernels=rewyn-sandbox" in listed  # the default: only the sandboxed kernel
    assert cli(["agent-token", "--revoke", "cli", "--tokens-file", path]) == 0
    assert call(server, token, "GET", f"api/kernels/{a_kernel}").status == 403
    assert call(server, runner, "GET", f"api/kernels/{a_kernel}").status == 403
    assert not runner_file.exists()
    with pytest.raises(SystemExit):
        cli(["agent-token", "../a.ipynb", "--tokens-file", path])


def test_rewyn_kernel_mcp_attaches_with_an_agent_token(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP server's live mode (its own REST and websocket clients) needs no more than the
    token allows: it starts the notebook's kernel, runs a cell (with the runner token it finds
    beside the tokens' file), lists the cells."""
    token, _ = tokens.mint(
        setup.tokens_file, "live.ipynb", name="mcp", ttl=3600, kernels=(SANDBOX_KERNEL,)
    )
    monkeypatch.setenv(tokens.TOKENS_FILE_ENV, str(setup.tokens_file))
    with Agent("mcp", setup.server.url, token, "live.ipynb", setup.work) as agent:
        result = agent.run("run_python", {"code": "print(21 * 2)"})
        assert not result.is_error, f"{text_of(result)}\n{agent.stderr()}"
        assert "42" in text_of(result)
        listed = agent.run("list_cells", {})
        assert not listed.is_error, text_of(listed)
        assert listed.structured_content is not None
        assert listed.structured_content["total"] == 2
    log = setup.server.log.read_text()
    assert "Agent 'mcp' (live.ipynb) refused" not in log, setup.server.log_tail()


def test_without_its_runner_token_the_mcp_server_runs_nothing(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent token alone (its runner token not found): the kernel's websocket refuses the
    cell's execute_request, and the call says why."""
    token, _ = tokens.mint(
        setup.tokens_file, "live.ipynb", name="alone", ttl=3600, kernels=(SANDBOX_KERNEL,)
    )
    monkeypatch.setenv(tokens.TOKENS_FILE_ENV, str(setup.work / "elsewhere" / "tokens.json"))
    with Agent("alone", setup.server.url, token, "live.ipynb", setup.work) as agent:
        result = agent.run("run_python", {"code": "print('should not run')"})
        assert result.is_error, text_of(result)
        assert "runner token" in text_of(result), text_of(result)
    log = setup.server.log.read_text()
    assert "execute_request on shell refused" in log, setup.server.log_tail()


def test_the_agent_cannot_stop_the_server(setup: Setup) -> None:
    """Last: were it let through, the server would be gone for the tests after it."""
    assert call(setup.server, setup.agent, "POST", "api/shutdown").status == 403
    assert call(setup.server, setup.server.token, "GET", "api/status").status == 200


def test_the_identity_provider_refuses_to_start_without_the_authorizer(
    tmp_path: Path,
) -> None:
    """Alone, the provider would let an agent list every session: the server does not start."""
    (tmp_path / "notebooks").mkdir()
    with (
        pytest.raises(RuntimeError, match="AgentIdentityProvider needs"),
        jupyter_server(
            tmp_path / "notebooks",
            tmp_path / "kernels",
            tmp_path,
            extra_args=command.SERVER_FLAGS[:1],
        ),
    ):
        pass
