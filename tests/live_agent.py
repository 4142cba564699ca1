"""An agent for the live-notebook tests: the MCP SDK's client, driving ``rewyn-kernel mcp
--notebook`` over stdio from a thread of its own (the browser's Playwright is synchronous and
keeps the test's thread; each agent's calls run on its own event loop meanwhile)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

Job = Callable[[Client], Awaitable[Any]]


class Agent:
    """One MCP client named ``name`` (its client info), attached to ``notebook`` of the Jupyter
    server at ``url``; its calls are futures, made on the agent's own thread."""

    def __init__(
        self,
        name: str,
        url: str,
        token: str,
        notebook: str,
        work: Path,
        *extra: str,
    ) -> None:
        self.name = name
        self.errlog = work / f"mcp-{name}.err"
        self.run_log = work / f"mcp-{name}.jsonl"
        self.params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "rewyn_kernel.cli",
                "mcp",
                "--notebook",
                notebook,
                "--jupyter-url",
                url,
                "--run-log",
                str(self.run_log),
                *extra,
            ],
            env={**os.environ, "JUPYTER_TOKEN": token},
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: asyncio.Queue[tuple[Job, concurrent.futures.Future[Any]] | None] | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"agent-{name}", daemon=True)

    def __enter__(self) -> Agent:
        self._thread.start()
        self._ready.wait(60)
        if self._failed is not None:
            raise AssertionError(f"the agent did not start: {self._failed}\n{self.stderr()}")
        assert self._loop is not None, f"the agent did not start in 60 s\n{self.stderr()}"
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._jobs is not None:
            jobs = self._jobs
            self._loop.call_soon_threadsafe(jobs.put_nowait, None)
        self._thread.join(30)

    def stderr(self) -> str:
        try:
            return self.errlog.read_text()[-4000:]
        except OSError:
            return ""

    def submit(
        self, job: Job, future: concurrent.futures.Future[Any] | None = None
    ) -> concurrent.futures.Future[Any]:
        assert self._loop is not None
        assert self._jobs is not None
        future = future or concurrent.futures.Future()
        jobs = self._jobs
        self._loop.call_soon_threadsafe(jobs.put_nowait, (job, future))
        return future

    def call(self, tool: str, arguments: dict[str, Any]) -> concurrent.futures.Future[Any]:
        """``tools/call``; the future's result is the CallToolResult. ``started`` (on the
        future) is the wall-clock time the call was sent."""

        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        async def job(client: Client) -> types.CallToolResult:
            future.started = time.time()  # type: ignore[attr-defined]
            return await client.call_tool(tool, arguments)

        return self.submit(job, future)

    def run(self, tool: str, arguments: dict[str, Any], timeout: float = 120) -> Any:
        return self.call(tool, arguments).result(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._failed = exc
            self._ready.set()

    async def _serve(self) -> None:
        jobs: asyncio.Queue[tuple[Job, concurrent.futures.Future[Any]] | None] = asyncio.Queue()
        with self.errlog.open("w") as err:
            async with Client(
                stdio_client(self.params, errlog=err),
                client_info=Implementation(name=self.name, version="1.0"),
            ) as client:
                self._jobs = jobs
                self._loop = asyncio.get_running_loop()
                self._ready.set()
                running: set[asyncio.Task[None]] = set()
                while (item := await jobs.get()) is not None:
                    job, future = item
                    task = asyncio.ensure_future(self._do(client, job, future))
                    running.add(task)
                    task.add_done_callback(running.discard)
                for task in list(running):
                    task.cancel()

    @staticmethod
    async def _do(client: Client, job: Job, future: concurrent.futures.Future[Any]) -> None:
        try:
            future.set_result(await job(client))
        except BaseException as exc:
            future.set_exception(exc)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
