"""``rewyn-kernel files``: the versions of a workspace's files kept before the code changed them
(runtime/host/workspace.py keeps them), listed and restored."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rewyn_kernel.runtime.printable import printable
from rewyn_kernel.runtime.workspace import STORE, Workspace


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "files",
        help="list the versions of a workspace's files kept before the code changed them; "
        "restore one",
        description="Before the sandbox's code overwrites, truncates, replaces or deletes a file "
        f"of its workspace, the earlier version is kept in {STORE}/versions. This lists them "
        "(oldest first) and puts one back; what a restore replaces is kept in turn.",
    )
    parser.add_argument(
        "workspace", nargs="?", type=Path, default=Path(), help="the workspace (default: here)"
    )
    parser.add_argument("--path", help="only the versions of this path (relative)")
    parser.add_argument(
        "--restore",
        nargs="+",
        metavar=("ID", "PATH"),
        help="put back every file of the version ID, or only PATH of it",
    )
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    return parser


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    root: Path = args.workspace.resolve()
    if not root.is_dir():
        parser.error(f"{args.workspace}: no such folder")
    workspace = Workspace(root)
    if not (workspace.store / "versions").is_dir():
        print(f"rewyn-kernel files: {printable(str(root))} holds no kept versions", file=sys.stderr)
        return 0 if not args.restore else 2
    if args.restore:
        if len(args.restore) > 2:
            parser.error("--restore takes ID and at most one PATH")
        version, path = args.restore[0], (args.restore[1] if len(args.restore) == 2 else None)
        known = [
            item
            for item in workspace.versions()
            if item["id"] == version and (path is None or item["path"] == path)
        ]
        if not known:
            what = f"{path} in " if path else ""
            print(
                f"rewyn-kernel files: no kept version {printable(what + version)}", file=sys.stderr
            )
            return 2
        try:
            restored = workspace.restore(version, path)
        except OSError as exc:
            print(f"rewyn-kernel files: {printable(str(exc))}", file=sys.stderr)
            return 1
        for name in restored:
            print(f"restored {printable(name)}")
        return 0
    items = [item for item in workspace.versions() if args.path in (None, item["path"])]
    if args.json:
        print(json.dumps(items, indent=1))
        return 0
    if not items:
        print(f"no kept versions in {printable(str(root))}")
        return 0
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(item["time"])))
        path, why = printable(str(item["path"])), printable(str(item["why"]))
        print(f"{printable(str(item['id']))}  {when}  {int(item['size']):>12,}  {path}  ({why})")
    print(f"restore one: rewyn-kernel files {printable(str(root))} --restore ID [PATH]")
    return 0
