"""The ``rewyn-kernel`` command: a demo of the runtime and a check of the providers."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

from rewyn_kernel import __version__
from rewyn_kernel.runtime import JsonlRunLog, create
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.sandbox import SandboxProvider, SandboxResult, SubprocessProvider

DEMO_STEPS: list[tuple[str, dict[str, object], str]] = [
    ("The spec's minimal example", {}, "print(sum(range(10)))"),
    ("An uncaught exception is a result, not a raise", {}, "values = [1, 2]\nvalues[5]"),
    ("A loop that never ends meets the timeout", {"timeout": 1.0}, "while True:\n    pass"),
    (
        "A 1 GiB allocation under a 256 MiB cap",
        {"memory_limit_mb": 256},
        "blob = bytearray(1024 ** 3)",
    ),
    (
        "network='none': nothing to connect to, not even loopback",
        {},
        "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
    ),
    (
        "inherit_env=[]: the parent's secrets stay outside",
        {"inherit_env": [], "env": {"DATA_DIR": "/tmp/analysis"}},
        "import os\nprint(sorted(os.environ))",
    ),
    (
        "A flood of output is capped, head and tail kept",
        {"output_limit_bytes": 2048},
        "for i in range(100_000):\n    print('line', i)",
    ),
]


def _show(title: str, code: str, result: SandboxResult) -> None:
    print(f"\n== {title}")
    print(textwrap.indent(code, "   >>> ", lambda line: True))
    for name in ("stdout", "stderr"):
        text = getattr(result, name)
        lines = text.splitlines()
        if len(lines) > 12:  # a long stream: its ends and the truncation marker
            middle = [line for line in lines[4:-4] if "rewyn:" in line] or ["..."]
            lines = [*lines[:4], *middle, *lines[-4:]]
        for line in lines:
            print(f"   {name}| {line}")
    line = f"   exit_code={result.exit_code} ending={result.ending} {result.duration_ms:.0f} ms"
    if result.timed_out:
        line += " timed_out"
    if result.stdout_truncated:
        line += f" stdout_bytes={result.stdout_bytes:,} (truncated)"
    print(line)
    if result.message:
        print(f"   message: {result.message}")


def demo() -> int:
    """Run the spec's examples and the main failure modes, each in a real sandbox."""
    with tempfile.TemporaryDirectory(prefix="rewyn-demo-") as scratch:
        log = JsonlRunLog(Path(scratch) / "run.jsonl")
        for title, limits, code in DEMO_STEPS:
            with create(listeners=[log], **limits) as box:  # type: ignore[arg-type]
                _show(title, code, box.execute(code))

        print("\n== A session keeps state between executions (the kernel uses one per notebook)")
        with create(listeners=[log]) as box, box.session() as session:
            for code in ("total = 40", "total += 2", "total"):
                result = session.execute(code)
                value = result.outputs[0].data["text/plain"] if result.outputs else ""
                print(f"   >>> {code:<12} {value}")

        async def production() -> SandboxResult:
            box = create(timeout=15.0, network="none", memory_limit_mb=512, inherit_env=[])
            async with box:
                return await box.aexecute("import platform\nprint(platform.python_version())")

        _show("The spec's production example, with aexecute", "...", asyncio.run(production()))

        events = JsonlRunLog.read(log.path)
        print(f"\n== The run log: {len(events)} SANDBOX_EXECUTED events in {log.path.name}")
        for event in events:
            network = event.isolation.network if event.isolation else "?"
            print(
                f"   {event.started_at:%H:%M:%S} {event.ending:<12} exit={event.exit_code:<4} "
                f"{event.duration_ms:7.1f} ms  network={network}  code={event.code_hash[:12]}"
            )
        isolation = events[0].isolation
        if isolation is not None:
            print("\nWhat the subprocess provider applied here:")
            print(
                f"   network: {isolation.network}; PID namespace: {isolation.pid_namespace}; "
                f"user namespace: {isolation.user_namespace}"
            )
            for note in isolation.notes:
                print(f"   note: {note}")
    return 0


def doctor(image: str, oci_runtimes: Sequence[str]) -> int:
    """Say, per provider, what works on this machine and what is missing."""
    providers: list[SandboxProvider] = [SubprocessProvider()]
    for cli in ("docker", "podman", "nerdctl"):
        providers.append(ContainerProvider(image=image, runtime=cli))
        providers += [
            ContainerProvider(image=image, runtime=cli, oci_runtime=oci) for oci in oci_runtimes
        ]
    usable = 0
    for provider in providers:
        items = provider.check()
        ok = all(item.ok for item in items)
        usable += ok
        print(f"{provider.name}: {'usable' if ok else 'NOT usable'}")
        for item in items:
            print(f"   [{'ok' if item.ok else '!!'}] {item.name}: {item.detail}")
    return 0 if usable else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rewyn-kernel", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rewyn-kernel {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the runtime's examples in real sandboxes")
    check = commands.add_parser("doctor", help="check what each provider can do here")
    check.add_argument("--image", default="python:3.13-slim", help="image the containers use")
    check.add_argument(
        "--oci-runtime",
        action="append",
        default=[],
        help="also check this OCI runtime (e.g. runsc for gVisor); repeatable",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    return doctor(args.image, args.oci_runtime)


if __name__ == "__main__":
    sys.exit(main())
