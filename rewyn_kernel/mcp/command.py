"""``rewyn-kernel mcp``: the MCP server on the command line. Importing this needs no MCP SDK:
the command says how to install it when it is missing."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from rewyn_kernel.mcp.options import (
    MCP_TIMEOUT,
    SANDBOX_OPTIONS,
    ServerOptions,
    default_run_log,
    option_arguments,
    option_values,
    with_flags,
)
from rewyn_kernel.mcp.provider_choice import choose
from rewyn_kernel.mcp.token import MIN_CHARS, TOKEN_VARIABLE, TokenError, kept_token, token_file
from rewyn_kernel.runtime.container import DEFAULT_IMAGE
from rewyn_kernel.settings import CONTAINER_CLIS, CONTAINER_ONLY, add_options, from_options


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "mcp",
        help="serve sandboxed Python to agents over the Model Context Protocol",
        description="An MCP server: tools to run Python in sandboxed sessions (state kept per "
        "session) and to move files in and out. Speaks stdio unless --http is given. Every "
        "call is a SANDBOX_EXECUTED event in the run log; rewyn-kernel review turns it into "
        "a notebook.",
    )
    parser.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST: 127.0.0.1 "
        "unless given); every request needs the bearer token",
    )
    parser.add_argument(
        "--token",
        help=f"the bearer token for --http (default: ${TOKEN_VARIABLE}, else the one kept in "
        "<Jupyter data dir>/rewyn-kernel/mcp-token, made there (0600) at the first start)",
    )
    for flag, kwargs in option_arguments():
        parser.add_argument(flag, **kwargs)
    group = parser.add_argument_group(
        "sandbox settings",
        f"as the kernel's; --timeout defaults to {MCP_TIMEOUT:g} s here. Without --provider "
        "(or with auto) the sandboxes run on bubblewrap where it works, else in a container of "
        "--image where an engine (--runtime, else docker, podman, nerdctl) answers and has "
        "it, else on subprocess; the server says which when it starts.",
    )
    add_options(group, SANDBOX_OPTIONS, defaults=False)
    return parser


def options_from(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[ServerOptions, str]:
    """The server's options from the command line, the provider chosen where none was given
    (``provider_choice.py``); and the line that says where the sandboxes run."""
    args, said = placed(args, parser)
    settings = from_options(args, error=parser.error)
    if not said:
        provider = settings.make_provider()
        image = f", image {settings.image}" if settings.provider == "container" else ""
        said = f"{provider.name}{image} (--provider {settings.provider})"
    try:
        options = ServerOptions(settings=settings, **option_values(args))
    except ValueError as exc:
        parser.error(with_flags(str(exc)))
        raise  # (parser.error exits)
    return options, said


def placed(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[argparse.Namespace, str]:
    """``args`` with the provider chosen where none (or auto) was given, and the line that
    says why; the container's options (--image, --runtime, --oci-runtime) then say which
    container to use if it comes to one, and are dropped where it does not. ``args`` as they
    are, and '', where a provider was given. Bad container options end via ``parser``."""
    given = vars(args)
    if given.get("provider", "auto") != "auto":
        return args, ""
    container = {name: given[name] for name in CONTAINER_ONLY if name in given}
    from_options(argparse.Namespace(**container, provider="container"), error=parser.error)
    runtime = given.get("container_runtime")
    choice = choose(
        given.get("image", DEFAULT_IMAGE),
        [runtime] if runtime else CONTAINER_CLIS,
        given.get("oci_runtime"),
    )
    values = {name: value for name, value in given.items() if name not in CONTAINER_ONLY}
    if choice.provider == "container":
        values.update(container, provider="container", container_runtime=choice.runtime)
    # (else auto stays: the local default is the provider chosen, with its notes of why)
    return argparse.Namespace(**values), choice.said


def address(text: str, parser: argparse.ArgumentParser) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        parser.error(f"--http {text!r}: give [HOST:]PORT, e.g. 8000 or 127.0.0.1:8000")
    return host, int(port)


def bearer_token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The token every HTTP request must carry: given, else the kept one (``token.py``), whose
    file stderr names; None when the kept one cannot be used (stderr says why)."""
    token: str | None = args.token or os.environ.get(TOKEN_VARIABLE)
    if token:
        if len(token) < MIN_CHARS:
            parser.error(f"the token must be at least {MIN_CHARS} characters")
        return token
    try:
        token, made = kept_token()
    except TokenError as exc:
        print(f"rewyn-kernel mcp: {exc}", file=sys.stderr)
        return None
    print(
        f"bearer token: in {token_file()} ({'made now' if made else 'made earlier'}; the same "
        f"at every start, readable by this user only); --token or ${TOKEN_VARIABLE} give another",
        file=sys.stderr,
    )
    return token


def live_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ServerOptions:
    """The options of ``--notebook``: the server's own; sandbox settings are refused (the
    notebook's kernel has its own, from its kernelspec)."""
    given = sorted(f"--{name.replace('_', '-')}" for name in SANDBOX_OPTIONS if name in vars(args))
    if given:
        parser.error(
            f"{', '.join(given)}: with --notebook the code runs in the notebook's own sandbox "
            "kernel, whose settings are its kernelspec's (rewyn-kernel install ...)"
        )
    try:
        options = ServerOptions(**option_values(args))
        from rewyn_kernel.mcp.live.jupyter import JupyterServer, notebook_path

        JupyterServer(options.jupyter_url, options.jupyter_token)
        notebook_path(options.notebook or "")
    except ValueError as exc:
        parser.error(with_flags(str(exc)))
        raise  # (parser.error exits)
    return options


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    live = getattr(args, "server_notebook", None) is not None
    if live:
        options, runs_on = live_options(args, parser), ""
    else:
        options, runs_on = options_from(args, parser)
    try:
        from rewyn_kernel.mcp.live.server import build_live_server
        from rewyn_kernel.mcp.server import build_server, risk_of_server
        from rewyn_kernel.mcp.transport import serve_http, serve_stdio
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in (
            "mcp",
            "uvicorn",
            "anyio",
            "jupyter_nbmodel_client",
            "pycrdt",
            "jupyter_kernel_client",
        ):
            raise
        print(
            f"rewyn-kernel mcp needs the MCP SDK and the Jupyter clients ({exc.name} is "
            "missing): install the mcp extra (from a clone: pip install '.[mcp]'; see the "
            "README's Install)",
            file=sys.stderr,
        )
        return 2
    http: tuple[str, int, str] | None = None
    if args.http is not None:
        where = address(args.http, parser)
        token = bearer_token(args, parser)
        if token is None:
            return 2
        http = (*where, token)
    options = dataclasses.replace(options, run_log=options.run_log or default_run_log())
    server: Any
    if live:
        server = build_live_server(options)
        print(
            f"rewyn-kernel mcp: the agent works in {options.notebook} on {options.jupyter_url} "
            "(its sandbox kernel: the risk is judged at the first call, from the kernel); "
            f"run log: {options.run_log}",
            file=sys.stderr,
        )
    else:
        level, reasons = risk_of_server(options)
        server = build_server(options)
        print(f"rewyn-kernel mcp: sandboxes run on {runs_on}", file=sys.stderr)
        print(
            f"rewyn-kernel mcp: run_python is {level} risk ({'; '.join(reasons)}); "
            f"run log: {options.run_log}",
            file=sys.stderr,
        )
    if http is None:
        import anyio

        anyio.run(serve_stdio, server)
        return 0
    host, port, token = http
    print(f"serving MCP at http://{host}:{port}/mcp", file=sys.stderr, flush=True)
    serve_http(server, host, port, token)
    return 0
