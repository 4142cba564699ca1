"""``rewyn-kernel agent-token``: mint, list and revoke the tokens that give an agent one notebook
of a Jupyter server started with ``rewyn_kernel.server``'s identity provider and authorizer."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from rewyn_kernel.kernel.kernelspec import KERNEL_NAME
from rewyn_kernel.server import tokens

SERVER_FLAGS = (
    "--ServerApp.identity_provider_class=rewyn_kernel.server.AgentIdentityProvider",
    "--ServerApp.authorizer_class=rewyn_kernel.server.AgentAuthorizer",
)
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "agent-token",
        help="mint a Jupyter token that reaches one notebook only, for rewyn-kernel mcp --notebook",
        description="Mint a token for a Jupyter server started with rewyn-kernel's identity "
        "provider and authorizer (the flags are printed): it opens NOTEBOOK's session, kernel "
        "and collaboration room, and nothing else of the server (no other file, kernel or "
        "terminal); it runs, restarts and interrupts no code. The token goes to stdout, once; "
        "only its sha256 is kept, in a 0600 file under Jupyter's runtime dir, which the server "
        "reads on each request. A second token, which may also run code in the notebook's "
        "kernel, is written beside that file for rewyn-kernel mcp --notebook, which finds it "
        "from the first.",
    )
    parser.add_argument(
        "notebook",
        nargs="?",
        help="the notebook's path relative to the server's root (as in /lab/tree/PATH)",
    )
    parser.add_argument("--name", default="agent", help="the agent's name (default: agent)")
    parser.add_argument(
        "--ttl",
        type=float,
        default=86400.0,
        metavar="SECONDS",
        help="the token's lifetime in seconds (default 86400: a day)",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        metavar="KERNELSPEC",
        help="a kernelspec the agent may start for the notebook when it has no kernel yet "
        f"(repeatable; default: {KERNEL_NAME}, the sandboxed kernel); a running kernel of the "
        "notebook is the agent's whatever its spec",
    )
    parser.add_argument(
        "--any-kernel",
        action="store_true",
        help="let the agent start the notebook's kernel with any kernelspec, unsandboxed ones too",
    )
    parser.add_argument(
        "--tokens-file",
        type=Path,
        help="the tokens' file (default: <jupyter runtime dir>/rewyn-kernel/agent-tokens.json; "
        "give the server the same with --AgentIdentityProvider.tokens_file)",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list the tokens (not their secrets)")
    what.add_argument("--revoke", metavar="ID_OR_NAME", help="revoke tokens by id or name")
    return parser


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    path: Path = args.tokens_file or tokens.default_tokens_file()
    try:
        if args.list:
            return _list(path)
        if args.revoke:
            removed = tokens.revoke(path, args.revoke)
            for grant in removed:
                print(f"revoked {grant.id} {grant.name} ({grant.path})")
            if not removed:
                print(f"rewyn-kernel agent-token: no token {args.revoke!r}", file=sys.stderr)
            return 0 if removed else 2
        if not args.notebook:
            parser.error("give the NOTEBOOK the token opens (or --list, --revoke)")
        if not _NAME.fullmatch(args.name):
            parser.error("--name: 1 to 64 of letters, digits, '.', '_', '-'")
        if args.any_kernel and args.kernel:
            parser.error("--kernel and --any-kernel: give one")
        kernels = None if args.any_kernel else tuple(args.kernel or [KERNEL_NAME])
        token, grant = tokens.mint(
            path, args.notebook, name=args.name, ttl=args.ttl, kernels=kernels
        )
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"rewyn-kernel agent-token: {exc}", file=sys.stderr)
        return 1
    print(token)
    extra = "" if args.tokens_file is None else f" --AgentIdentityProvider.tokens_file={path}"
    found = "" if args.tokens_file is None else f"{tokens.TOKENS_FILE_ENV}={path} "
    print(
        f"Token {grant.id} for {grant.path!r} ({grant.name}), valid until "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(grant.expires))}; kernelspecs "
        f"it may start: {'any' if kernels is None else ', '.join(kernels)}.\n"
        f"Kept (as a hash) in {path}.\n"
        "The Jupyter server must run with:\n"
        f"  jupyter lab {' '.join(SERVER_FLAGS)}{extra}\n"
        "The token reads the notebook; it runs, restarts and interrupts nothing. Give it to "
        "the agent's MCP server:\n"
        f"  {found}rewyn-kernel mcp --notebook {grant.path} --jupyter-url URL "
        "--jupyter-token TOKEN\n"
        f"which runs the agent's cells with the runner token kept in "
        f"{tokens.runner_file(path, grant)} (never give that one to the agent).\n"
        f"Revoke it with: rewyn-kernel agent-token --revoke {grant.id}",
        file=sys.stderr,
    )
    return 0


def _list(path: Path) -> int:
    now = time.time()
    for grant in tokens.read_grants(path):
        state = "expired" if grant.expired(now) else f"{(grant.expires - now) / 3600:.1f} h left"
        kernels = "any" if grant.kernels is None else ",".join(grant.kernels)
        print(f"{grant.id}  {grant.name}  {grant.path}  {state}  kernels={kernels}")
    return 0
