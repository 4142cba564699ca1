"""``rewyn-kernel grants``: the hosts the person allowed a notebook's code to reach from the page
(kernel/grants.py keeps them on the host), listed and revoked."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from rewyn_kernel.runtime.printable import printable


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "grants",
        help="list or revoke the network granted to notebooks from the page",
        description="The hosts (or presets: pypi, conda-forge, huggingface, github) the person "
        "allowed a notebook's code to reach with the Allow button of a cell's status line. They "
        "are kept on this host, per notebook, never in the notebook file; each later kernel of "
        "the notebook starts with them. A revoke takes effect from the notebook's next kernel.",
    )
    actions = parser.add_subparsers(
        dest="action",
        required=True,
        metavar="{list,revoke}",
        help="list [NOTEBOOK] [--json]: the grants of one notebook, or of every one; "
        "revoke NOTEBOOK (HOST|PRESET | --all): drop a grant",
    )
    listing = actions.add_parser("list", help="list the grants of one notebook, or of all")
    listing.add_argument(
        "notebook",
        nargs="?",
        help="the notebook's path, or its key as the list prints it (default: every notebook)",
    )
    listing.add_argument("--json", action="store_true", help="print the grants as JSON")
    revoke = actions.add_parser("revoke", help="revoke a notebook's grant of a host or preset")
    revoke.add_argument("notebook", help="the notebook's path, or its key as the list prints it")
    revoke.add_argument(
        "grant", nargs="?", help="the host or preset to revoke (a host: the grant holding it)"
    )
    revoke.add_argument("--all", action="store_true", help="revoke every grant of the notebook")
    return parser


def notebook_key_of(notebook: str) -> str:
    """The key a kernel of ``notebook`` keeps its grants under (settings.notebook_key, as the
    server's JPY_SESSION_NAME gives the notebook's path), or ``notebook`` itself when it is a
    key already."""
    from rewyn_kernel.kernel.grants import grants_path
    from rewyn_kernel.runtime.workspace import safe_name

    if not Path(notebook).exists() and (
        grants_path(notebook).is_file() or re.fullmatch(r".+-[0-9a-f]{8}", notebook)
    ):
        return notebook
    where = os.path.abspath(notebook)
    tag = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{safe_name(Path(notebook).stem)}-{tag}"


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from rewyn_kernel.kernel.grants import GrantStore, grant_listing, grants_path, known_notebooks

    if args.action == "list":
        keys = [notebook_key_of(args.notebook)] if args.notebook else known_notebooks()
        if args.json:
            found = {key: GrantStore(grants_path(key)).read() for key in keys}
            print(json.dumps({k: [g.model_dump(mode="json") for g in v] for k, v in found.items()}))
            return 0
        if not keys:
            print("no notebook has network grants")
        for key in keys:
            sys.stdout.write(printable(grant_listing(key), lines=True))
        return 0
    if not args.all and not args.grant:
        parser.error("grants revoke takes a host or preset, or --all")
    key = notebook_key_of(args.notebook)
    store = GrantStore(grants_path(key))
    dropped = store.revoke_all() if args.all else store.revoke(args.grant)
    if not dropped:
        what = "grants" if args.all else f"grant of {printable(args.grant)}"
        print(f"rewyn-kernel grants: {printable(key)} has no {what}", file=sys.stderr)
        return 2
    for grant in dropped:
        print(f"revoked {printable(grant.name)} ({', '.join(grant.hosts)}) for {printable(key)}")
    print("(a kernel running now keeps it until it restarts)")
    return 0
