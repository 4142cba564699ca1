"""The rewyn-kernel command: the sandbox's demo, a check of this machine, the Jupyter kernel's
installer, and notebooks as the record (run one in the sandbox, review an agent's run log)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

from jupyter_core.paths import jupyter_path

from rewyn_kernel import __version__
from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.runtime import JsonlRunLog, create
from rewyn_kernel.runtime.sandbox import SandboxResult
from rewyn_kernel.settings import KernelSettings, Surface, add_options, from_options, taken_by

DESCRIPTION = (
    "Run model-written and untrusted Python in a sandbox: from code (the runtime), in Jupyter "
    "(the Python (sandboxed) kernel) and for agents. Each command takes --help."
)

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


TRUST_WARNING = """\
!!! WARNING: --trust-output turns off output filtering for this kernel. !!!
HTML, JavaScript and widget messages from the sandbox will reach the notebook unfiltered.
A live frontend runs them with YOUR Jupyter credentials, outside any sandbox: code in the
sandbox could then start an unsandboxed kernel, open a terminal or read and write your files.
Use this kernel only for code you trust as much as your own."""


def _add_install_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "install",
        help="install a kernelspec for the sandboxed kernel",
        description="Install a Jupyter kernelspec that runs every cell in a sandbox. Settings "
        "not given here keep the kernel's defaults.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--user",
        action="store_true",
        help="install for the current user (the default, unless running as root: then system-wide)",
    )
    where.add_argument(
        "--sys-prefix",
        action="store_true",
        help=f"install into this Python environment ({sys.prefix}); for venvs and conda",
    )
    where.add_argument("--prefix", metavar="PATH", help="install under PATH/share/jupyter/kernels")
    parser.add_argument(
        "--name",
        default=kernelspec.KERNEL_NAME,
        help=f"kernelspec name (default {kernelspec.KERNEL_NAME}); an existing one is replaced",
    )
    parser.add_argument(
        "--display-name",
        help=f'name shown in the launcher (default "{kernelspec.DISPLAY_NAME}", or '
        '"Python (sandboxed, NAME)" with --name)',
    )
    _add_settings(parser, Surface.INSTALL)
    return parser


def _add_settings(parser: argparse.ArgumentParser, surface: Surface) -> None:
    """The kernel settings ``install`` bakes into a spec and ``run`` runs a notebook with
    (``env`` only for ``install``, whose person types the values; ``run`` takes none)."""
    add_options(parser.add_argument_group("kernel settings"), taken_by(surface))


def _settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> KernelSettings:
    """The kernel settings given on the command line; bad ones end via ``parser.error``."""
    return from_options(args, error=parser.error)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Execute a notebook on the sandbox kernel, keeping each cell's events (``run``)."""
    from rewyn_kernel.notebooks.run import print_summary, run_notebook

    settings = _settings(args, parser)
    if not args.notebook.is_file():
        parser.error(f"{args.notebook}: no such notebook")
    summary = run_notebook(
        args.notebook, args.output, settings=settings, allow_errors=args.allow_errors
    )
    print_summary(summary)
    if summary.interrupted:
        return 130
    return 0 if summary.ok or (args.allow_errors and not summary.error) else 1


def _add_run_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "run",
        help="execute a notebook on the sandbox kernel, keeping each cell's events",
        description="Execute NOTEBOOK headless on the sandboxed kernel. Each cell's "
        "SANDBOX_EXECUTED events go into its metadata, a summary into the notebook's; the "
        "output file is rewritten after every cell.",
    )
    parser.add_argument("notebook", type=Path, help="the .ipynb to run")
    parser.add_argument(
        "-o", "--output", type=Path, help="where to write the result (default NOTEBOOK.out.ipynb)"
    )
    parser.add_argument(
        "--allow-errors", action="store_true", help="run every cell even after one fails; exit 0"
    )
    _add_settings(parser, Surface.RUN)
    return parser


def install(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Install a kernelspec from the parsed ``install`` options; report bad ones via ``parser``."""
    settings = _settings(args, parser)
    try:
        name = kernelspec.normalize_kernel_name(args.name)
    except ValueError as exc:
        parser.error(f"--name: {exc}")
    display_name = args.display_name or kernelspec.default_display_name(name)
    if settings.trust_output:
        print(TRUST_WARNING, file=sys.stderr)
    try:
        destination = kernelspec.install(
            user=args.user,
            sys_prefix=args.sys_prefix,
            prefix=args.prefix,
            name=name,
            display_name=display_name,
            settings=settings,
        )
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"rewyn-kernel install: {exc}", file=sys.stderr)
        if exc.errno in (errno.EACCES, errno.EPERM):
            print("Install with --user or --sys-prefix, or run as root.", file=sys.stderr)
        return 1
    print(f"Installed kernelspec {name} in {destination}")
    print(f"Display name: {display_name}")
    searched = {Path(folder).resolve() for folder in jupyter_path("kernels")}
    if Path(destination).parent.resolve() not in searched:
        print(
            f"Note: Jupyter does not look in {Path(destination).parent} here; add "
            f"{Path(destination).parents[1]} to JUPYTER_PATH to use this kernelspec.",
            file=sys.stderr,
        )
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``rewyn-kernel`` parser, and each subcommand's own parser by name (in the order
    ``--help`` lists them): ``main`` parses with the first and reports a subcommand's bad
    options through its own; the documentation's command-line page is rendered from both."""
    parser = argparse.ArgumentParser(
        prog="rewyn-kernel",
        description=DESCRIPTION,
    )
    parser.add_argument("--version", action="version", version=f"rewyn-kernel {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="run the runtime's examples in real sandboxes")
    from rewyn_kernel import doctor

    doctor_parser = doctor.add_parser(commands)
    install_parser = _add_install_parser(commands)
    run_parser = _add_run_parser(commands)
    from rewyn_kernel.notebooks import review  # here, so importing cli does not load nbformat

    review_parser = review.add_parser(commands)
    from rewyn_kernel.mcp import command as mcp_command  # (needs no MCP SDK to parse)

    mcp_parser = mcp_command.add_parser(commands)
    from rewyn_kernel import files_command

    files_parser = files_command.add_parser(commands)
    from rewyn_kernel import grants_command

    grants_parser = grants_command.add_parser(commands)
    from rewyn_kernel import packages_command

    packages_parser = packages_command.add_parser(commands)
    from rewyn_kernel.server import command as agent_token  # (needs no Jupyter server to load)

    agent_token_parser = agent_token.add_parser(commands)
    parsers = {
        "demo": demo_parser,
        "doctor": doctor_parser,
        "install": install_parser,
        "run": run_parser,
        "review": review_parser,
        "mcp": mcp_parser,
        "files": files_parser,
        "grants": grants_parser,
        "packages": packages_parser,
        "agent-token": agent_token_parser,
    }
    return parser, parsers


def main(argv: Sequence[str] | None = None) -> int:
    parser, parsers = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    if args.command == "install":
        return install(args, parsers["install"])
    if args.command == "run":
        return run(args, parsers["run"])
    if args.command == "review":
        from rewyn_kernel.notebooks import review

        return review.main(args, parsers["review"])
    if args.command == "mcp":
        from rewyn_kernel.mcp import command as mcp_command

        return mcp_command.main(args, parsers["mcp"])
    if args.command == "files":
        from rewyn_kernel import files_command

        return files_command.main(args, parsers["files"])
    if args.command == "grants":
        from rewyn_kernel import grants_command

        return grants_command.main(args, parsers["grants"])
    if args.command == "packages":
        from rewyn_kernel import packages_command

        return packages_command.main(args, parsers["packages"])
    if args.command == "agent-token":
        from rewyn_kernel.server import command as agent_token

        return agent_token.main(args, parsers["agent-token"])
    from rewyn_kernel import doctor

    return doctor.main(args)


if __name__ == "__main__":
    sys.exit(main())
