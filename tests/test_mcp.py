"""``rewyn-kernel mcp``, a real server process, driven by the MCP SDK's own client over stdio
and over streamable HTTP; the sandboxes are real (the default provider)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from rewyn_kernel.notebooks._review_log import read_records, steps_of
from rewyn_kernel.runtime.events import JsonlRunLog, ToolCall
from rewyn_kernel.runtime.providers.landlock import probe_landlock

from .conftest import TEST_IMAGE, engine_problem, processes_with, unavailable, wait_until_gone

PNG = b"\x89PNG\r\n\x1a\n"
Elicitor = ElicitationFnT


def server_args(run_log: Path, *extra: str) -> list[str]:
    return ["-m", "rewyn_kernel.cli", "mcp", "--run-log", str(run_log), *extra]


@asynccontextmanager
async def stdio_server(
    run_log: Path,
    *extra: str,
    elicit: Elicitor | None = None,
    errlog: Path | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """The server over stdio, as a client starts it; its stderr goes to ``errlog``."""
    params = StdioServerParameters(
        command=sys.executable, args=server_args(run_log, *extra), env=env or dict(os.environ)
    )
    with open(errlog or os.devnull, "w") as err:
        async with Client(stdio_client(params, errlog=err), elicitation_callback=elicit) as client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def run(coroutine: Callable[[], Awaitable[None]]) -> None:
    anyio.run(coroutine)


# -- over stdio -------------------------------------------------------------------------------


def test_state_plots_and_files_round_trip(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"

    async def body() -> None:
        async with stdio_server(log) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(listed) == {
                "run_python",
                "list_sessions",
                "reset_session",
                "close_session",
                "write_file",
                "read_file",
                "list_files",
                "fork_session",
                "undo",
            }
            run_tool = listed["run_python"]
            assert run_tool.output_schema is not None
            assert run_tool.annotations is not None
            assert run_tool.annotations.read_only_hint is False
            assert run_tool.annotations.open_world_hint is False  # (network none)
            assert "risk" in (run_tool.title or "")

            first = await client.call_tool("run_python", {"code": "x = 41\nprint('hi')"})
            assert first.structured_content is not None
            assert first.structured_content["ok"] is True
            assert first.structured_content["stdout"] == "hi\n"
            second = await client.call_tool("run_python", {"code": "x + 1"})
            assert second.structured_content is not None
            assert second.structured_content["outputs"] == ["42"]
            assert second.structured_content["execution_count"] == 2
            assert "42" in text_of(second)

            plot = await client.call_tool(
                "run_python",
                {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9]); plt.show()"},
            )
            images = [block for block in plot.content if isinstance(block, types.ImageContent)]
            assert len(images) == 1
            assert images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(PNG)

            blob = bytes(range(256))
            await client.call_tool(
                "write_file",
                {
                    "path": "in/blob.bin",
                    "content": base64.b64encode(blob).decode(),
                    "encoding": "base64",
                },
            )
            await client.call_tool("write_file", {"path": "in/note.txt", "content": "héllo"})
            made = await client.call_tool(
                "run_python",
                {
                    "code": "data = open('in/blob.bin', 'rb').read()\n"
                    "open('out.txt', 'w').write(f\"{len(data)} {open('in/note.txt').read()}\")"
                },
            )
            assert made.structured_content is not None
            assert made.structured_content["files_written"] == ["out.txt"]
            read = await client.call_tool("read_file", {"path": "out.txt"})
            assert text_of(read) == "256 héllo"
            back = await client.call_tool("read_file", {"path": "in/blob.bin"})
            assert base64.b64decode(text_of(back)) == blob
            listing = await client.call_tool("list_files", {"path": "in"})
            assert listing.structured_content is not None
            names = [entry["name"] for entry in listing.structured_content["entries"]]
            assert names == ["blob.bin", "note.txt"]
            other = await client.call_tool("run_python", {"code": "x", "session": "other"})
            assert other.structured_content is not None
            assert other.structured_content["error"]["ename"] == "NameError"  # its own state
            sessions = await client.call_tool("list_sessions", {})
            assert sessions.structured_content is not None
            assert {s["name"] for s in sessions.structured_content["sessions"]} == {
                "default",
                "other",
            }

    run(body)
    events = JsonlRunLog.read(log)
    assert [event.code for event in events][:2] == ["x = 41\nprint('hi')", "x + 1"]
    assert len({event.session_id for event in events}) == 2


def test_with_a_workspace_the_agent_works_in_the_project_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """``--workspace``: the code reads the project's data where it is, what it writes stays
    after the session and the server, the file tools work there, a replaced file is kept,
    protected paths are refused, and listings leave out the sandbox's own folders."""
    log = tmp_path / "run.jsonl"
    project = tmp_path / "repo"
    (project / "data").mkdir(parents=True)
    (project / "data" / "sales.csv").write_text("region,total\nnorth,3\nsouth,4\n")
    (project / "README.md").write_text("the person's\n")
    (project / ".git").mkdir()

    async def body() -> None:
        async with stdio_server(log, "--workspace", str(project)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert str(project) in (tools["run_python"].description or "")
            code = (
                "import csv, os\nrows = list(csv.DictReader(open('data/sales.csv')))\n"
                "total = sum(int(r['total']) for r in rows)\n"
                "open('summary.txt', 'w').write(str(total))\nprint(os.getcwd(), total)"
            )
            done = await client.call_tool("run_python", {"code": code})
            assert done.structured_content is not None
            assert done.structured_content["stdout"] == f"{project} 7\n"
            assert done.structured_content["files_written"] == ["summary.txt"]
            assert (project / "summary.txt").read_text() == "7"  # (already, in the project)
            wrote = await client.call_tool("write_file", {"path": "README.md", "content": "new"})
            assert wrote.structured_content is not None
            assert wrote.structured_content["replaced_version"]
            refused = await client.call_tool(
                "write_file", {"path": ".git/hooks/pre-commit", "content": "x"}
            )
            assert refused.is_error
            assert "protected" in text_of(refused)
            hidden = await client.call_tool("read_file", {"path": ".rewyn/versions/index.jsonl"})
            assert hidden.is_error
            listing = await client.call_tool("list_files", {})
            assert listing.structured_content is not None
            names = [entry["name"] for entry in listing.structured_content["entries"]]
            assert names == [".git", "README.md", "data", "summary.txt"]

    run(body)
    assert (project / "README.md").read_text() == "new"
    index = (project / ".rewyn/versions/index.jsonl").read_text().splitlines()
    kept = [json.loads(line) for line in index]
    assert [item["path"] for item in kept] == ["README.md"]
    assert not (project / ".git" / "hooks").exists()

    async def again() -> None:  # (a new server: the results are still there)
        async with stdio_server(log, "--workspace", str(project)) as client:
            read = await client.call_tool(
                "run_python", {"code": "print(open('summary.txt').read())"}
            )
            assert read.structured_content is not None
            assert read.structured_content["stdout"] == "7\n"

    run(again)


class _ModelServer(http.server.BaseHTTPRequestHandler):
    """A local model server's list of models, as Ollama answers ``/api/tags``."""

    def do_GET(self) -> None:
        body = json.dumps({"models": [{"name": "tiny:1b"}], "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_agent_reaches_a_local_model_server_by_its_allow_listed_address(
    tmp_path: Path,
) -> None:
    """The agent developer's path: ``--allow-host 127.0.0.1:PORT``, as the docs say to reach a
    local service; urllib and requests in the sandbox reach it by that address, through the
    proxy, and the call's record shows the attempt (they met the sandbox's own loopback, and
    'Connection refused', while NO_PROXY named it)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ModelServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    code = (
        "import json, urllib.request, requests\n"
        f"url = 'http://127.0.0.1:{port}/api/tags'\n"
        "print(json.load(urllib.request.urlopen(url, timeout=10))['models'][0]['name'])\n"
        "print(requests.get(url, timeout=10).json()['path'])"
    )

    async def body() -> None:
        log = tmp_path / "run.jsonl"
        async with stdio_server(log, "--allow-host", f"127.0.0.1:{port}") as client:
            done = await client.call_tool("run_python", {"code": code})
            out = done.structured_content
            assert out is not None
            assert out["stdout"] == "tiny:1b\n/api/tags\n", text_of(done)

    try:
        run(body)
    finally:
        server.shutdown()
        server.server_close()
    (event,) = JsonlRunLog.read(tmp_path / "run.jsonl")
    assert event.network is not None
    assert {(a.host, a.port, a.verdict) for a in event.network.attempts} == {
        ("127.0.0.1", port, "allowed")
    }


def test_without_a_workspace_listings_leave_out_the_sandboxs_own_folders(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl") as client:
            await client.call_tool(
                "run_python",
                {"code": "import matplotlib.pyplot as plt\nopen('mine.txt', 'w').write('m')"},
            )
            listing = await client.call_tool("list_files", {})
            assert listing.structured_content is not None
            names = [entry["name"] for entry in listing.structured_content["entries"]]
            assert names == ["mine.txt"]

    run(body)


def test_long_output_keeps_head_and_tail_and_saves_the_whole(tmp_path: Path) -> None:
    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl", "--max-output-chars", "4000") as client:
            result = await client.call_tool(
                "run_python", {"code": "for i in range(5000): print(f'row {i}')"}
            )
            out = result.structured_content
            assert out is not None
            assert out["stdout"].startswith("row 0\n")
            assert out["stdout"].rstrip().endswith("row 4999")
            assert len(out["stdout"]) <= 4000
            assert out["truncated"]["stdout"]["omitted_chars"] > 0
            path = out["whole_output"]["stdout"]
            assert path in text_of(result)
            whole = await client.call_tool("read_file", {"path": path})
            assert text_of(whole).splitlines() == [f"row {i}" for i in range(5000)]

    run(body)


def test_a_timeout_keeps_the_partial_output_and_says_when_state_is_lost(tmp_path: Path) -> None:
    stubborn = (
        "import time\nprint('started', flush=True)\n"
        "while True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
    )

    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl", "--timeout", "3") as client:
            await client.call_tool("run_python", {"code": "kept = 1"})
            polite = await client.call_tool(
                "run_python", {"code": "print('waiting', flush=True)\nimport time; time.sleep(30)"}
            )
            out = polite.structured_content
            assert out is not None
            assert (out["timed_out"], out["state_lost"], out["stdout"]) == (
                True,
                False,
                "waiting\n",
            )
            shorter = await client.call_tool(
                "run_python", {"code": "import time; time.sleep(30)", "timeout": 1}
            )
            assert shorter.structured_content is not None
            assert shorter.structured_content["duration_ms"] < 2900
            kept = await client.call_tool("run_python", {"code": "print(kept)"})
            assert kept.structured_content is not None
            assert kept.structured_content["stdout"] == "1\n"
            lost = await client.call_tool("run_python", {"code": stubborn})
            out = lost.structured_content
            assert out is not None
            assert (out["timed_out"], out["sandbox_restarted"]) == (True, True)
            assert out["stdout"] == "started\n"
            assert "state lost" in text_of(lost)
            after = await client.call_tool("run_python", {"code": "print(kept)"})
            assert after.structured_content is not None
            assert after.structured_content["state_lost"] is True
            assert after.structured_content["error"]["ename"] == "NameError"

    run(body)


def test_bad_arguments_are_tool_errors_and_the_server_goes_on(tmp_path: Path) -> None:
    async def body() -> None:
        async with stdio_server(
            tmp_path / "run.jsonl", "--max-sessions", "2", "--timeout", "5"
        ) as c:
            calls: list[tuple[str, dict[str, Any], str]] = [
                ("run_python", {"code": "1", "session": "../x"}, "bad session name"),
                ("run_python", {"code": "1", "timeout": 60}, "over this server's limit"),
                ("read_file", {"path": "../../etc/passwd"}, "leads out"),
                ("read_file", {"path": "/etc/passwd"}, "relative"),
                ("read_file", {"path": "missing.txt"}, "no such file"),
                ("write_file", {"path": "x", "content": "%%%", "encoding": "base64"}, "base64"),
                ("close_session", {"session": "never"}, "no session"),
                ("reset_session", {"session": "never"}, "no session"),
            ]
            for name, arguments, expected in calls:
                result = await c.call_tool(name, arguments)
                assert result.is_error, (name, arguments)
                assert expected in text_of(result), (name, text_of(result))
            await c.call_tool(
                "run_python", {"code": "import os; os.symlink('/etc/passwd', 'link')"}
            )
            for name, arguments in (
                ("read_file", {"path": "link"}),
                ("write_file", {"path": "link", "content": "x"}),
                ("list_files", {"path": "link"}),
            ):
                refused = await c.call_tool(name, arguments)
                assert refused.is_error, name
            await c.call_tool("run_python", {"code": "1", "session": "second"})
            full = await c.call_tool("run_python", {"code": "1", "session": "third"})
            assert full.is_error
            assert "2 sessions are open" in text_of(full)
            closed = await c.call_tool("close_session", {"session": "second"})
            assert "closed" in text_of(closed)
            third = await c.call_tool("run_python", {"code": "print('third')", "session": "third"})
            assert third.structured_content is not None
            assert third.structured_content["stdout"] == "third\n"
            await c.call_tool("close_session", {"session": "third"})
            again = await c.call_tool("run_python", {"code": "1", "session": "second"})
            assert again.structured_content is not None
            assert "is new: the previous one was closed by close_session" in (
                again.structured_content["note"] or ""
            )

    run(body)


def test_argument_errors_say_what_sandbox_tool_says_and_name_unknown_arguments(
    tmp_path: Path,
) -> None:
    """The SDK's checks of a call's arguments read as sandbox_tool's (the argument, what is
    wrong; no pydantic text, no URL), and an argument the tool does not take is refused by
    name instead of dropped: a misspelt timeout does not run the code without one."""
    from rewyn_kernel.runtime import create, sandbox_tool
    from rewyn_kernel.runtime.sandbox import SubprocessProvider
    from rewyn_kernel.tools import ToolArgumentsError

    same_schema: list[dict[str, Any]] = [
        {"code": 123},
        {},
        {"code": "1", "timeout": -1},
        {"code": "1", "timeout": "x"},
    ]
    expected = []
    with create(provider=SubprocessProvider(), timeout=5) as box:
        tool = sandbox_tool(box, "run_python")
        for arguments in same_schema:
            with pytest.raises(ToolArgumentsError) as raised:
                tool.validate(arguments)
            expected.append(str(raised.value))
    assert expected[0] == (
        "invalid arguments for tool 'run_python': 'code' must be a string, not an integer"
    )
    others: list[tuple[str, dict[str, Any], str]] = [
        (
            "run_python",
            {"source": "print(1)"},
            "invalid arguments for tool 'run_python': missing required argument 'code'; "
            "unknown argument 'source' (allowed: 'code', 'session', 'timeout')",
        ),
        (
            "run_python",
            {"code": "print('ran')", "timout": 1},
            "invalid arguments for tool 'run_python': unknown argument 'timout' (allowed: "
            "'code', 'session', 'timeout')",
        ),
        (
            "read_file",
            {"path": "x", "encoding": "utf8", "max_bytes": 0},
            "invalid arguments for tool 'read_file': 'max_bytes' must be greater than 0 (got 0); "
            "'encoding' must be one of 'auto', 'text', 'base64'",
        ),
        (
            "write_file",
            {"path": 7, "content": None},
            "invalid arguments for tool 'write_file': 'path' must be a string, not an integer; "
            "'content' must be a string, not null",
        ),
    ]

    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl", "--timeout", "5") as c:
            for listed in (await c.list_tools()).tools:
                assert listed.input_schema["additionalProperties"] is False, listed.name
            for arguments, said in zip(same_schema, expected, strict=True):
                result = await c.call_tool("run_python", arguments)
                assert result.is_error
                assert text_of(result) == said
            for name, arguments, said in others:
                result = await c.call_tool(name, arguments)
                assert result.is_error
                assert text_of(result) == said
            listing = await c.call_tool("list_sessions", {})
            assert listing.structured_content is not None
            assert listing.structured_content["sessions"] == []  # (nothing ran)
            fine = await c.call_tool("run_python", {"code": "print(6 * 7)", "timeout": "3"})
            assert fine.structured_content is not None  # (a number as a string: still taken)
            assert fine.structured_content["stdout"] == "42\n"

    run(body)


def test_a_megabyte_of_code_runs_and_fifty_calls_at_once_all_answer(tmp_path: Path) -> None:
    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl") as client:
            code = "data = '" + "a" * 1_048_576 + "'\nprint(len(data))"
            big = await client.call_tool("run_python", {"code": code})
            assert big.structured_content is not None
            assert big.structured_content["stdout"] == "1048576\n"

            answers: dict[int, Any] = {}

            async def one(n: int) -> None:
                session = f"s{n % 5}"
                result = await client.call_tool(
                    "run_python", {"code": f"n = {n}\nprint(n * n)", "session": session}
                )
                answers[n] = result.structured_content

            async with anyio.create_task_group() as group:
                for n in range(50):
                    group.start_soon(one, n)
            assert sorted(answers) == list(range(50))
            assert all(out["stdout"] == f"{n * n}\n" for n, out in answers.items())

    run(body)


def test_the_server_survives_hostile_code(tmp_path: Path) -> None:
    hostile = {
        "exit": "import os; os._exit(3)",
        "kill the session's processes": "import os, signal; os.kill(0, signal.SIGKILL)",
        "write to the protocol's descriptors": "import os\nfor fd in (0, 1, 2):\n    try:\n"
        '        os.write(fd, b\'{"jsonrpc": "2.0", "id": 1, "result": {}}\\n\')\n'
        "    except OSError:\n        pass\nprint('after')",
        "close every descriptor": "import os; os.closerange(0, 1024)",
        "a flood": "import sys\nfor _ in range(20000): sys.stdout.write('x' * 1000 + '\\n')",
        "a forged image": "from IPython.display import display\n"
        "display({'image/png': '!!not base64!!', 'text/plain': 'img'}, raw=True)",
        "recursion": "def f(): return f()\nf()",
    }

    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl", "--timeout", "20") as client:
            for what, code in hostile.items():
                result = await client.call_tool("run_python", {"code": code})
                assert result.structured_content is not None, what
                alive = await client.call_tool("run_python", {"code": "print('alive')"})
                assert alive.structured_content is not None, what
                assert alive.structured_content["stdout"] == "alive\n", what
            listed = await client.call_tool("list_sessions", {})
            assert listed.structured_content is not None

    run(body)


def test_cancelling_a_call_interrupts_the_code_and_keeps_the_session(tmp_path: Path) -> None:
    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl") as client:
            code = (
                "import time\nticks = 0\n"
                "while True:\n    ticks += 1\n    open('ticks.txt', 'w').write(str(ticks))\n"
                "    time.sleep(0.05)"
            )
            seen = anyio.Event()

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                seen.set()  # (one a second while it runs)

            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await client.call_tool(
                        "run_python", {"code": code}, progress_callback=on_progress
                    )

                group.start_soon(call)
                with anyio.fail_after(60):
                    await seen.wait()
                group.cancel_scope.cancel()
            await anyio.sleep(0.5)
            first = text_of(await client.call_tool("read_file", {"path": "ticks.txt"}))
            await anyio.sleep(0.5)
            second = text_of(await client.call_tool("read_file", {"path": "ticks.txt"}))
            assert first == second  # stopped
            state = await client.call_tool("run_python", {"code": "print(ticks > 0)"})
            assert state.structured_content is not None
            assert state.structured_content["stdout"] == "True\n"  # interrupted, not restarted

    run(body)
    (*_, cancelled, _) = JsonlRunLog.read(tmp_path / "run.jsonl")
    assert cancelled.ending == "interrupted"
    # The call has its record, and a review pairs it with the execution it interrupted.
    records, problems = read_records(tmp_path / "run.jsonl")
    assert problems == []
    (call,) = [r for _, r in records if isinstance(r, ToolCall) and r.outcome == "cancelled"]
    assert call.tool == "run_python"
    (step,) = [step for step in steps_of(records) if step.call is call]
    assert step.event is not None
    assert step.event.id == cancelled.id
    assert not any(
        step.call is None and step.event is not None and step.event.id == cancelled.id
        for step in steps_of(records)
    )


def test_idle_sessions_are_closed_and_the_next_call_says_so(tmp_path: Path) -> None:
    async def body() -> None:
        async with stdio_server(tmp_path / "run.jsonl", "--idle-ttl", "1") as client:
            await client.call_tool("run_python", {"code": "x = 1"})
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                listed = await client.call_tool("list_sessions", {})
                assert listed.structured_content is not None
                if not listed.structured_content["sessions"]:
                    break
                await anyio.sleep(0.2)
            else:
                raise AssertionError("the idle session was not closed")
            fresh = await client.call_tool("run_python", {"code": "print('x' in globals())"})
            out = fresh.structured_content
            assert out is not None
            assert out["stdout"] == "False\n"
            assert "closed after 1 s without a call" in (out["note"] or "")

    run(body)


def test_approval_goes_through_the_client_or_the_call_is_denied(tmp_path: Path) -> None:
    """The subprocess sandbox is medium risk (the host's files are open): with approval above
    low, a client that can ask its person gets asked; one that cannot is denied."""
    asked: list[str] = []

    def answering(approve: bool) -> Elicitor:
        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"approve": approve})

        return elicit

    extra = ("--provider", "subprocess", "--approve-above", "low")

    async def body() -> None:
        log = tmp_path / "run.jsonl"
        async with stdio_server(log, *extra, elicit=answering(True)) as client:
            ran = await client.call_tool("run_python", {"code": "print('approved')"})
            assert ran.structured_content is not None
            assert ran.structured_content["stdout"] == "approved\n"
        assert len(asked) == 1
        assert "print('approved')" in asked[0]
        async with stdio_server(log, *extra, elicit=answering(False)) as client:
            declined = await client.call_tool("run_python", {"code": "print('no')"})
            assert declined.is_error
            assert "did not approve" in text_of(declined)
        async with stdio_server(log, *extra) as client:
            denied = await client.call_tool("run_python", {"code": "print('no')"})
            assert denied.is_error
            assert "cannot ask a person" in text_of(denied)
        deny = ("--provider", "subprocess", "--max-risk", "low", "--approve-above", "none")
        async with stdio_server(log, *deny) as client:
            denied = await client.call_tool("run_python", {"code": "print('no')"})
            assert denied.is_error
            assert "denied" in text_of(denied)
        assert [event.stdout for event in JsonlRunLog.read(log)] == ["approved\n"]  # only one ran

    run(body)


def test_the_person_sees_all_the_code_they_approve(tmp_path: Path) -> None:
    """Issue 22: code padded past the first 2,000 characters hid its payload from the person.
    Now the whole code is shown, in a fence nothing in it can close, with bidirectional
    overrides and control characters made visible; code too long to read is refused, saying
    how to do it instead."""
    asked: list[str] = []

    async def approve(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    padding = "# " + "x" * 78 + "\n"
    hidden = "print('payload')"
    padded = padding * 30 + hidden  # 2,430 characters: the payload past 2,000
    trojan = (
        "ok = 'user\u202e \u2066# admin\u2069 \u2066'\r print('shown')\n```\nprint('after fence')"
    )
    extra = ("--provider", "subprocess", "--approve-above", "low")

    async def body() -> None:
        log = tmp_path / "run.jsonl"
        async with stdio_server(log, *extra, elicit=approve) as client:
            ran = await client.call_tool("run_python", {"code": padded})
            assert not ran.is_error, text_of(ran)
            assert (await client.call_tool("run_python", {"code": trojan})).structured_content
            too_long = await client.call_tool("run_python", {"code": "x = 1\n" * 500})
            assert too_long.is_error
            assert "split it into smaller calls" in text_of(too_long)
        assert len(asked) == 2  # (the long one was never put to the person)
        assert hidden in asked[0]
        assert asked[0].count("x" * 78) == 30
        shown = asked[1]
        for mark in ("⟨U+202E⟩", "⟨U+2066⟩", "⟨U+2069⟩", "⟨U+000D⟩"):
            assert mark in shown, shown
        assert "\u202e" not in shown
        assert "\r" not in shown
        fence = shown.splitlines()[-1]
        assert set(fence) == {"`"}
        assert len(fence) > 3  # (longer than the code's own ```)
        assert "print('after fence')" in shown

    run(body)


HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
"""What a raw client sends first (the SDK's client is not used where the wire itself is tested)."""


# -- branches and undo -------------------------------------------------------------------------


def calls_of(log: Path, tool: str) -> list[dict[str, Any]]:
    """The TOOL_CALL records of ``tool`` in the run log, in call order."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r["type"] == "TOOL_CALL" and r["tool"] == tool]


def test_a_fork_has_the_state_then_goes_its_own_way_and_shares_the_files(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"

    async def body() -> None:
        async with stdio_server(log) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            fork_tool = listed["fork_session"]
            assert fork_tool.input_schema["required"] == ["session", "new_name"]
            assert fork_tool.input_schema["additionalProperties"] is False
            assert fork_tool.annotations is not None
            assert fork_tool.annotations.destructive_hint is False
            assert "Threads" in (fork_tool.description or "")
            await client.call_tool("run_python", {"code": "import threading\nx = 1"})
            await client.call_tool(
                "run_python", {"code": "t = threading.Thread(target=threading.Event().wait)"}
            )
            await client.call_tool("run_python", {"code": "t.daemon = True; t.start()"})
            forked = await client.call_tool(
                "fork_session", {"session": "default", "new_name": "try-1"}
            )
            assert not forked.is_error, text_of(forked)
            said = forked.structured_content
            assert said is not None
            assert said["session"] == "try-1"
            assert said["forked_from"] == "default"
            assert said["execution_count"] == 3
            assert "threads" in said["not_copied"]
            assert "files" in said["shared"]
            await client.call_tool(
                "run_python", {"code": "y = 'branch'; x += 10", "session": "try-1"}
            )
            await client.call_tool("run_python", {"code": "z = 'parent'"})
            branch = await client.call_tool(
                "run_python",
                {
                    "code": "print(x, y, 'z' in dir(), t.is_alive())\n"
                    "open('from-branch.txt', 'w').write('hi')",
                    "session": "try-1",
                },
            )
            assert branch.structured_content is not None
            assert branch.structured_content["stdout"] == "11 branch False False\n"
            parent = await client.call_tool(
                "run_python", {"code": "print(x, z, 'y' in dir(), open('from-branch.txt').read())"}
            )
            assert parent.structured_content is not None
            assert parent.structured_content["stdout"] == "1 parent False hi\n"
            listing = await client.call_tool("list_sessions", {})
            assert listing.structured_content is not None
            sessions = {s["name"]: s for s in listing.structured_content["sessions"]}
            assert sessions["try-1"]["forked_from"] == "default"
            assert sessions["default"]["forked_from"] is None
            closed = await client.call_tool("close_session", {"session": "default"})
            assert "its files stay for 'try-1' (forked sessions share" in text_of(closed)
            after = await client.call_tool(
                "run_python",
                {"code": "print(x, open('from-branch.txt').read())", "session": "try-1"},
            )
            assert after.structured_content is not None
            assert after.structured_content["stdout"] == "11 hi\n"  # (its sandbox lives on)

    run(body)
    events = JsonlRunLog.read(log)
    parent_id = events[0].session_id
    branch_events = [e for e in events if e.session_id != parent_id]
    assert branch_events
    assert {e.forked_from for e in branch_events} == {parent_id}
    [call] = calls_of(log, "fork_session")
    assert call["outcome"] == "ok"
    assert call["session"] == "default"
    assert call["session_id"] == parent_id
    assert call["arguments"] == {"session": "default", "new_name": "try-1"}


def test_undo_restores_the_state_before_the_last_calls_and_says_which(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"

    async def body() -> None:
        async with stdio_server(log, "--undo-depth", "2") as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "last 2 calls" in (listed["undo"].description or "")
            assert listed["undo"].input_schema["required"] == ["session"]
            nothing = await client.call_tool("undo", {"session": "fresh"})
            assert nothing.is_error
            assert "no session 'fresh' is open" in text_of(nothing)
            for code in ("x = 1", "x = 2", "x = 3\nopen('kept.txt', 'w').write('3')"):
                ran = await client.call_tool("run_python", {"code": code})
                assert ran.structured_content is not None
                assert ran.structured_content["note"] is None
            undone = await client.call_tool("undo", {"session": "default"})
            assert not undone.is_error
            assert text_of(undone) == (
                "undid call 3 of session 'default' (call 3 began `x = 3 ...`): its variables, "
                "imports and figures are as they were before it. Files are not rolled back: "
                "what it wrote stays. 1 more undo point(s) kept."
            )
            back = await client.call_tool(
                "run_python", {"code": "print(x, open('kept.txt').read())"}
            )
            assert back.structured_content is not None
            assert back.structured_content["stdout"] == "2 3\n"
            assert back.structured_content["execution_count"] == 4  # (calls count on)
            again = await client.call_tool("undo", {"session": "default"})
            assert text_of(again).startswith("undid call 4 of session 'default'")
            first = await client.call_tool("run_python", {"code": "x"})
            assert first.structured_content is not None
            assert first.structured_content["outputs"] == ["2"]  # (call 4 only read it)
            await client.call_tool("undo", {"session": "default"})
            oldest = await client.call_tool("undo", {"session": "default"})
            assert text_of(oldest).startswith("undid call 2 of session 'default' (call 2 began")
            empty = await client.call_tool("undo", {"session": "default"})
            assert empty.is_error
            assert "nothing to undo in session 'default'" in text_of(empty)
            await client.call_tool("run_python", {"code": "y = 1"})
            await client.call_tool("reset_session", {"session": "default"})
            reset = await client.call_tool("undo", {"session": "default"})
            assert reset.is_error
            assert "nothing to undo" in text_of(reset)

    run(body)
    calls = calls_of(log, "undo")
    assert [c["outcome"] for c in calls] == ["error", "ok", "ok", "ok", "ok", "error", "error"]
    assert calls[1]["session"] == "default"
    assert calls[1]["session_id"]
    assert calls[1]["text"].startswith("undid call 3")


def test_a_checkpoint_that_cannot_be_taken_never_fails_the_call(tmp_path: Path) -> None:
    """The code holds every process the pids limit allows (threads count): the checkpoint's
    fork fails, the call runs anyway and says so, and undo goes back to the last one kept."""
    log = tmp_path / "run.jsonl"
    fill = (
        "import threading\nstop = threading.Event()\nthreads = []\nwhile True:\n"
        "    try:\n        t = threading.Thread(target=stop.wait, daemon=True)\n"
        "        t.start()\n        threads.append(t)\n"
        "    except RuntimeError:\n        break"
    )

    async def body() -> None:
        async with stdio_server(log, "--pids", "64") as client:
            await client.call_tool("run_python", {"code": "x = 1"})
            await client.call_tool("run_python", {"code": fill})
            ran = await client.call_tool("run_python", {"code": "x = 2\nprint(x)"})
            assert ran.structured_content is not None
            assert ran.structured_content["ok"] is True
            assert ran.structured_content["stdout"] == "2\n"
            note = ran.structured_content["note"]
            # (The fork fails, or the branch cannot start its threads: either is a ForkError.)
            assert note.startswith(
                "no undo point was kept before this call: the session could not be forked: "
            ), note
            assert note.endswith("undo goes back to before call 2")
            undone = await client.call_tool("undo", {"session": "default"})
            assert text_of(undone).startswith("undid calls 2 to 3 of session 'default'")
            back = await client.call_tool("run_python", {"code": "x, 'threads' in dir()"})
            assert back.structured_content is not None
            assert back.structured_content["outputs"] == ["(1, False)"]

    run(body)


def test_fork_and_undo_errors_are_tool_errors_and_undo_can_be_off(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"

    async def body() -> None:
        async with stdio_server(log, "--max-sessions", "2", "--undo-depth", "0") as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert "fork_session" in listed
            assert "undo" not in listed
            await client.call_tool("run_python", {"code": "x = 1"})
            unknown = await client.call_tool("fork_session", {"session": "nope", "new_name": "b"})
            assert unknown.is_error
            assert "no session 'nope' is open" in text_of(unknown)
            taken = await client.call_tool(
                "fork_session", {"session": "default", "new_name": "default"}
            )
            assert taken.is_error
            assert "a session 'default' is already open: pick another name" in text_of(taken)
            bad = await client.call_tool("fork_session", {"session": "default", "new_name": "a/b"})
            assert bad.is_error
            assert "bad session name 'a/b'" in text_of(bad)
            ok = await client.call_tool("fork_session", {"session": "default", "new_name": "b"})
            assert not ok.is_error
            full = await client.call_tool("fork_session", {"session": "b", "new_name": "c"})
            assert full.is_error
            assert "2 sessions are open, the most" in text_of(full)
            ran = await client.call_tool("run_python", {"code": "x", "session": "b"})
            assert ran.structured_content is not None
            assert ran.structured_content["outputs"] == ["1"]
            assert ran.structured_content["note"] is None  # (no checkpoints: none to skip)

    run(body)
    outcomes = [c["outcome"] for c in calls_of(log, "fork_session")]
    assert outcomes == ["error", "error", "invalid_arguments", "ok", "error"]


def test_a_tree_search_forks_candidates_from_one_loaded_state(tmp_path: Path) -> None:
    """The README's sketch: load once, a fork per candidate, keep the best, close the rest."""
    log = tmp_path / "run.jsonl"
    load = (
        "import random\nrandom.seed(0)\n"
        "data = [(x, 3 * x + 1 + random.gauss(0, 0.1)) for x in range(1000)]"
    )
    score = "err = sum((y - (a * x + 1)) ** 2 for x, y in data) / len(data)\nprint(round(err, 3))"

    async def body() -> None:
        async with stdio_server(log) as client:
            await client.call_tool("run_python", {"code": load, "session": "base"})
            scores: dict[str, float] = {}
            for a in (2, 3, 4):
                name = f"a{a}"
                forked = await client.call_tool(
                    "fork_session", {"session": "base", "new_name": name}
                )
                assert not forked.is_error, text_of(forked)
                ran = await client.call_tool(
                    "run_python", {"code": f"a = {a}\n{score}", "session": name}
                )
                assert ran.structured_content is not None
                scores[name] = float(ran.structured_content["stdout"])
            best = min(scores, key=scores.__getitem__)
            assert best == "a3"
            for name in scores:
                if name != best:
                    await client.call_tool("close_session", {"session": name})
            kept = await client.call_tool("run_python", {"code": "a, len(data)", "session": best})
            assert kept.structured_content is not None
            assert kept.structured_content["outputs"] == ["(3, 1000)"]
            base = await client.call_tool("run_python", {"code": "'a' in dir()", "session": "base"})
            assert base.structured_content is not None
            assert base.structured_content["outputs"] == ["False"]
            listing = await client.call_tool("list_sessions", {})
            assert listing.structured_content is not None
            assert {s["name"] for s in listing.structured_content["sessions"]} == {"base", "a3"}

    run(body)
    loads = [e for e in JsonlRunLog.read(log) if e.code == load]
    assert len(loads) == 1  # (the data was loaded once)


def raw_call(run_log: Path, code: str, *extra: str) -> tuple[subprocess.Popen[bytes], list[Any]]:
    """Start a server, say hello, run ``code`` (request id 2); return the server (still
    running) and every line it wrote to stdout until that answer, parsed."""
    process = subprocess.Popen(
        [sys.executable, *server_args(run_log, *extra)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": code}},
    }
    for message in (HELLO, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
        process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()
    lines: list[Any] = []
    while not lines or lines[-1].get("id") != 2:
        line = process.stdout.readline()
        assert line, "the server closed stdout before answering"
        lines.append(json.loads(line))
    return process, lines


def test_stdout_carries_only_protocol(tmp_path: Path) -> None:
    """A raw client: every line the server writes to stdout is JSON-RPC, even while the code
    in the sandbox writes everywhere it can."""
    code = (
        "import os, sys\nprint('out')\nos.write(1, b'raw\\n')\n"
        "sys.stderr.write('err\\n')\nos.system('echo child')"
    )
    process, lines = raw_call(tmp_path / "run.jsonl", code)
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.close()  # (the client goes: the server ends)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        process.stdout.close()
    assert all(line["jsonrpc"] == "2.0" for line in lines)
    stdout = lines[-1]["result"]["structuredContent"]["stdout"]
    assert sorted(stdout.split()) == ["child", "out", "raw"]  # all in the result, none on the wire


def test_sigterm_closes_every_session(tmp_path: Path, marker: str) -> None:
    code = "import subprocess\nchild = subprocess.Popen(['sleep', '300'])\nprint(child.pid)"
    process, _ = raw_call(tmp_path / "run.jsonl", code, "--env", f"MARK={marker}")
    assert process.stdin is not None
    assert process.stdout is not None
    assert processes_with(marker)  # the session's worker and its child
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=20) == 0
    finally:
        process.stdin.close()
        process.stdout.close()
    assert wait_until_gone(marker, timeout=10) == []


# -- over HTTP --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_http_needs_the_token_and_then_serves(tmp_path: Path, marker: str) -> None:
    port, token = free_port(), "a-token-of-enough-length-0123"
    extra = ("--http", f"{port}", "--token", token, "--env", f"MARK={marker}")
    process = subprocess.Popen(
        [sys.executable, *server_args(tmp_path / "run.jsonl", *extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.TransportError:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the server did not listen"
                time.sleep(0.1)
        accept = {"Accept": "application/json, text/event-stream"}
        for given in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
            refused = httpx2.post(url, json=HELLO, headers={**accept, **given}, timeout=5)
            assert refused.status_code == 401, given

        async def body() -> None:
            refused = False
            bad = {"Authorization": "Bearer not-the-token"}
            async with create_mcp_http_client(headers=bad) as wrong:
                try:
                    with anyio.fail_after(20):
                        async with Client(streamable_http_client(url, http_client=wrong)):
                            pass
                except Exception:  # (the SDK raises an exception group)
                    refused = True
            assert refused
            good = {"Authorization": f"Bearer {token}"}
            async with (
                create_mcp_http_client(headers=good) as right,
                Client(streamable_http_client(url, http_client=right)) as client,
            ):
                seen: list[float] = []

                async def on_progress(
                    progress: float, total: float | None, message: str | None
                ) -> None:
                    seen.append(progress)

                result = await client.call_tool(
                    "run_python",
                    {"code": "import time; time.sleep(1.5); print('over http')"},
                    progress_callback=on_progress,
                )
                assert result.structured_content is not None
                assert result.structured_content["stdout"] == "over http\n"
                assert seen
                await client.call_tool(  # (left running: the stop must end it)
                    "run_python", {"code": "import subprocess; subprocess.Popen(['sleep', '300'])"}
                )
                assert processes_with(marker)

        run(body)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    # (uvicorn stops gracefully, the lifespan closing the sessions, then re-raises the signal.)
    assert process.returncode in (0, -signal.SIGTERM)
    assert b"serving MCP at" in stderr
    assert wait_until_gone(marker, timeout=10) == []


CSV = "day,temp\n1,3.5\n2,4.0\n3,2.5\n"
PLOT = (
    "import pandas as pd\nimport matplotlib.pyplot as plt\n"
    "df = pd.read_csv('data/temps.csv')\ndf.describe().to_csv('summary.csv')\n"
    "df.plot(x='day', y='temp')\nplt.savefig('temps.png')\nplt.show()"
)
SCENARIO: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "data/temps.csv", "content": CSV}),
    ("run_python", {"code": PLOT}),
    ("read_file", {"path": "summary.csv"}),
    ("read_file", {"path": "temps.png"}),
    ("list_files", {}),
    ("run_python", {"code": "x = 1", "session": "other"}),
    ("run_python", {"code": "print(len(df))"}),
    ("reset_session", {"session": "default"}),
    ("run_python", {"code": "'df' in globals()"}),
    ("read_file", {"path": "../../etc/passwd"}),
    ("run_python", {"code": 123}),
    ("run_python", {}),
    ("read_file", {"path": "summary.csv", "max_bytes": 0}),
    ("run_python", {"code": "1", "timeout": 60}),
    ("run_python", {"code": "1", "session": "../x"}),
    (
        "run_python",
        {"code": "import time\nprint('waiting', flush=True)\ntime.sleep(30)", "timeout": 2},
    ),
    ("run_python", {"code": "1 / 0"}),
    ("run_python", {"code": "print(x)", "session": "other"}),
    ("close_session", {"session": "other"}),
    ("run_python", {"code": "print('x' in globals())", "session": "other"}),
]
"""Issue 25's run, in small: a file in, a plot and a CSV out and read back, a listing, two
sessions interleaved, a reset, a refused path, five calls with bad arguments, a call with its
own timeout, a failure, a close."""
REFUSED, BAD, TIMED, FAILS = [10], [11, 12, 13, 14, 15], 16, 17


def test_review_of_an_mcp_run_shows_every_call_and_replays_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: every call is in the run log and in the review, in call order, sessions marked
    on each cell; what the model was given, images included; failures as errors, named by call
    in the summary; a kernel JupyterLab has; and --check replays it with the agent's inputs and
    timeouts, every replayable cell as recorded."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from nbconvert import HTMLExporter

    from rewyn_kernel.cli import main as cli

    log = tmp_path / "run.jsonl"
    results: list[types.CallToolResult] = []

    async def body() -> None:
        async with stdio_server(log, "--timeout", "20") as client:
            for name, arguments in SCENARIO:
                results.append(await client.call_tool(name, arguments))

    run(body)
    failed = [n for n, result in enumerate(results, 1) if result.is_error]
    assert failed == [*REFUSED, *BAD]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [call for call in calls if call["type"] == "TOOL_CALL"]
    assert [(c["tool"], c["outcome"]) for c in calls] == [
        (name, "refused" if n in REFUSED else "invalid_arguments" if n in BAD else "ok")
        for n, (name, _) in enumerate(SCENARIO, 1)
    ]
    (written,) = calls[0]["files"]
    assert (written["path"], written["direction"], written["size"]) == ("data/temps.csv", "in", 27)
    assert base64.b64decode(written["content"]).decode() == CSV
    assert calls[TIMED - 1]["timeout"] == 2
    assert calls[7]["session_effect"] == "restarted"

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "review.ipynb"
    assert cli(["review", str(log), "-o", str(out), "--install-kernel"]) == 0
    nb = nbformat.read(out, as_version=4)  # type: ignore[no-untyped-call]
    header, *cells = nb.cells
    assert [cell.id for cell in cells] == [f"call-{n}" for n in range(1, len(SCENARIO) + 1)]
    assert all(cell.cell_type == "code" for cell in cells)
    lines = [cell.outputs[0].data["text/plain"] for cell in cells]
    sessions = [arguments.get("session", "default") for _, arguments in SCENARIO]
    for n, (line, (name, _), session) in enumerate(zip(lines, SCENARIO, sessions, strict=True), 1):
        assert line.startswith(f"call {n} · {name} · "), line
        assert f" · session '{session}'{'#2' if n == 20 else ''} · " in line, line
    assert "the session's interpreter restarted" in lines[7]
    assert cells[8].outputs[1].data["text/plain"] == text_of(results[8])  # False, after it
    assert "timeout 2 s" in lines[TIMED - 1]

    # What the model read, exactly; the images it was given, as images.
    for n in (2, 3, 7, 9):
        assert cells[n - 1].outputs[1].data["text/plain"] == text_of(results[n - 1]), n
    for n in (2, 4):
        given = [b.data for b in results[n - 1].content if isinstance(b, types.ImageContent)]
        shown = [
            o.data["image/png"] for o in cells[n - 1].outputs if "image/png" in o.get("data", {})
        ]
        assert len(given) == 1, n
        assert shown == given, n
    assert "with open('data/temps.csv', 'wb') as _file:" in cells[0].source

    # Failures as errors, named by call in the summary.
    errors = {
        n: [o for o in cell.outputs if o.output_type == "error"] for n, cell in enumerate(cells, 1)
    }
    assert [errors[n][0].ename for n in REFUSED] == ["PermissionError"]
    assert {errors[n][0].ename for n in BAD} == {"ToolArgumentsError"}
    assert errors[TIMED][0].ename == "TimeoutError"
    assert errors[FAILS][0].ename == "ZeroDivisionError"
    assert [n for n, found in errors.items() if found] == [*REFUSED, *BAD, TIMED, FAILS]
    summary = next(line for line in header.source.splitlines() if line.startswith("- **Failed:**"))
    assert summary.startswith(
        f"- **Failed:** 8 of {len(SCENARIO)} calls; call 10 (`read_file`: refused)"
    )
    for n in [*REFUSED, *BAD, TIMED, FAILS]:
        assert f"call {n} (" in summary

    # A kernel JupyterLab has: no Select Kernel dialog (the browser test opens one).
    assert nb.metadata.kernelspec.name in KernelSpecManager().find_kernel_specs()
    assert nb.metadata.kernelspec.name == nb.metadata.rewyn_kernel.review.kernel
    # Red in nbconvert's HTML: an error output per failure; the images inline.
    html, _ = HTMLExporter().from_notebook_node(nb)  # type: ignore[no-untyped-call]
    assert html.count('data-mime-type="application/vnd.jupyter.stderr"') >= 8
    for n in (2, 4):
        (image,) = [b for b in results[n - 1].content if isinstance(b, types.ImageContent)]
        assert f"data:image/png;base64,{image.data}" in html

    capsys.readouterr()
    assert cli(["review", "--check", str(out)]) == 0
    said = capsys.readouterr().out
    replayed = [2, 6, 7, 9, TIMED, FAILS, 18, 20]
    for n in replayed:
        assert f"cell call-{n}: same as the recorded run" in said, said
    assert "cell call-1: written again, the same bytes as recorded: data/temps.csv" in said
    assert "cell call-3: read again, the same bytes as recorded: summary.csv" in said
    assert "cell call-4: read again, the same bytes as recorded: temps.png" in said
    assert "cell call-8: its session restarted" in said
    assert "cell call-19: its session closed" in said
    assert "11 of 11 cells as recorded (7 not replayed: they ran nothing)" in said


def start_http(run_log: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``rewyn-kernel mcp --http PORT`` with no token given, once it listens."""
    process = subprocess.Popen(
        [sys.executable, *server_args(run_log, "--http", str(port))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx2.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return process
        except httpx2.TransportError:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the server did not listen"
            time.sleep(0.1)


def stop_http(process: subprocess.Popen[bytes]) -> str:
    """Stop the server; what it wrote to stderr."""
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    return stderr.decode()


def test_a_token_made_once_is_kept_for_every_start(tmp_path: Path) -> None:
    """Without --token the server makes one at its first start and keeps it in the Jupyter
    data directory (0600), saying where; the next start takes the same one, so a client's
    saved header keeps working. A kept token others can read is refused, with the fix."""
    data = tmp_path / "jupyter-data"
    env = {k: v for k, v in os.environ.items() if k != "REWYN_MCP_TOKEN"}
    env["JUPYTER_DATA_DIR"] = str(data)
    kept = data / "rewyn-kernel" / "mcp-token"
    accept = {"Accept": "application/json, text/event-stream"}
    tokens = []
    for start in ("made now", "made earlier"):
        port = free_port()
        process = start_http(tmp_path / "run.jsonl", port, env)
        try:
            token = kept.read_text().strip()
            tokens.append(token)
            url = f"http://127.0.0.1:{port}/mcp"
            refused = httpx2.post(url, json=HELLO, headers=accept, timeout=5)
            assert refused.status_code == 401
            good = {**accept, "Authorization": f"Bearer {token}"}
            assert httpx2.post(url, json=HELLO, headers=good, timeout=5).status_code == 200
        finally:
            stderr = stop_http(process)
        assert f"bearer token: in {kept} ({start};" in stderr
        assert token not in stderr  # (its file is named; the token itself is not logged)
    assert tokens[0] == tokens[1]
    assert len(tokens[0]) >= 32
    assert oct(kept.stat().st_mode & 0o777) == oct(0o600)
    assert oct(kept.parent.stat().st_mode & 0o777) == oct(0o700)
    assert [path.name for path in kept.parent.iterdir()] == ["mcp-token"]  # (no staged file)

    kept.chmod(0o644)
    done = subprocess.run(
        [sys.executable, *server_args(tmp_path / "run.jsonl", "--http", str(free_port()))],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"{kept} can be read by other users (mode 0644): delete {kept}" in done.stderr


def test_servers_that_start_together_keep_one_token_and_a_link_is_refused(tmp_path: Path) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rewyn_kernel.mcp.token import TokenError, kept_token

    path = tmp_path / "data" / "mcp-token"
    gate = threading.Barrier(8)

    def start() -> tuple[str, bool]:
        gate.wait()
        return kept_token(path)

    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda _: start(), range(8)))
    assert len({token for token, _ in found}) == 1
    assert sum(made for _, made in found) == 1
    assert [p.name for p in path.parent.iterdir()] == ["mcp-token"]

    elsewhere = tmp_path / "elsewhere"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(TokenError, match="cannot be read"):
        kept_token(path)
    path.unlink()
    path.write_text("short\n")
    path.chmod(0o600)
    with pytest.raises(TokenError, match="holds no token"):
        kept_token(path)


# -- where the sandboxes run -------------------------------------------------------------------


def without_bubblewrap(tmp_path: Path, *tools: str) -> dict[str, str]:
    """An environment whose PATH holds only ``tools`` (links to the host's): no bwrap, as on
    macOS, Windows or a Linux without the package."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found is not None, tool
        (folder / tool).symlink_to(found)
    return {**os.environ, "PATH": str(folder)}


def test_without_bubblewrap_the_server_runs_in_a_container_an_engine_answers_for(
    tmp_path: Path,
) -> None:
    """No bwrap, docker answering with the image: the sandboxes are containers (low risk, so
    the default policy runs the calls), and the server says so when it starts."""
    if (problem := engine_problem("docker")) is not None:
        unavailable(f"docker is not usable here ({problem}); run scripts/container-engines.sh")
    env = without_bubblewrap(tmp_path, "docker")
    errlog = tmp_path / "stderr.txt"

    async def body() -> None:
        async with stdio_server(
            tmp_path / "run.jsonl", "--image", TEST_IMAGE, errlog=errlog, env=env
        ) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert listed["run_python"].title == "Run Python (low risk)"
            assert "(container/docker; network isolated;" in (
                listed["run_python"].description or ""
            )
            ran = await client.call_tool(
                "run_python",
                {"code": "import os\nprint(os.getcwd(), os.path.exists('/.dockerenv'))"},
            )
            assert ran.structured_content is not None
            assert ran.structured_content["stdout"] == "/scratch True\n"

    run(body)
    said = errlog.read_text()
    assert (
        f"rewyn-kernel mcp: sandboxes run on container/docker, image {TEST_IMAGE} (bubblewrap "
        "cannot run here: bwrap is not installed (the package bubblewrap); docker answers and "
        "has the image)\n"
    ) in said
    assert "rewyn-kernel mcp: run_python is low risk (container/docker: no network" in said


def test_without_bubblewrap_or_an_engine_with_the_image_the_server_says_what_would_fix_it(
    tmp_path: Path,
) -> None:
    """docker answers but has no such image (podman is not there): the local fallback (the
    landlock provider where this kernel has Landlock, else subprocess), and a start line that
    names each engine's problem (and, on subprocess, the fix)."""
    if (problem := engine_problem("docker")) is not None:
        unavailable(f"docker is not usable here ({problem}); run scripts/container-engines.sh")
    env = without_bubblewrap(tmp_path, "docker")
    errlog = tmp_path / "stderr.txt"
    image = "rewyn-no-such-image:0"
    local = "landlock" if probe_landlock().works else "subprocess"

    async def body() -> None:
        async with stdio_server(
            tmp_path / "run.jsonl", "--image", image, errlog=errlog, env=env
        ) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert f"({local};" in (listed["run_python"].description or "")

    run(body)
    said = errlog.read_text()
    why = (
        "(bubblewrap cannot run here: bwrap is not installed (the package "
        f"bubblewrap); no container engine answers with the image {image}: docker: image: "
        f"{image} is not present: docker pull {image}; podman: binary: podman is not on PATH; "
        "nerdctl: binary: nerdctl is not on PATH)"
    )
    if local == "landlock":
        assert (
            "rewyn-kernel mcp: sandboxes run on landlock, Landlock and seccomp without "
            f"namespaces {why}\n"
        ) in said
        return
    assert (
        "rewyn-kernel mcp: sandboxes run on subprocess, which leaves the host's files open to "
        f"the code {why}. To keep them out of reach, install "
        "bubblewrap (Linux), or run Docker Desktop or podman with the image (docker pull "
        f"{image}, or --image NAME for one you have), then restart the server\n"
    ) in said


def test_one_number_names_a_call_in_its_result_and_the_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The result's "call N" is the call's number in the run log, every tool's calls counted
    and a later server's too, as the log's review numbers it; the session's execution count is
    "[N]" beside it."""
    from rewyn_kernel.cli import main as cli

    log = tmp_path / "run.jsonl"
    texts: list[str] = []
    numbers: list[Any] = []

    async def body() -> None:
        for calls in (
            [("list_sessions", {}), ("run_python", {"code": "1"})],
            [("run_python", {"code": "2"})],
        ):
            async with stdio_server(log) as client:
                for name, arguments in calls:
                    result = await client.call_tool(name, arguments)
                    assert not result.is_error, text_of(result)
                    if name == "run_python":
                        texts.append(text_of(result))
                        numbers.append((result.structured_content or {}).get("call"))

    run(body)
    assert numbers == [2, 3]
    assert texts[0].startswith("[ok] call 2 · exit 0 · ")
    assert " · session 'default' [1]" in texts[0].splitlines()[0]
    assert texts[1].startswith("[ok] call 3 · exit 0 · ")
    assert " · session 'default' [1]" in texts[1].splitlines()[0]  # (a new server's session)
    out = tmp_path / "review.ipynb"
    assert cli(["review", str(log), "-o", str(out)]) == 0
    lines = [
        "".join(cell["outputs"][0]["data"]["text/plain"]).split(" · ")[:2]
        for cell in json.loads(out.read_text())["cells"]
        if cell["cell_type"] == "code"
    ]
    assert lines == [
        ["call 1", "list_sessions"],
        ["call 2", "run_python"],
        ["call 3", "run_python"],
    ]
