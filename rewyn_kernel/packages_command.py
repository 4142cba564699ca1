"""``rewyn-kernel packages``: what the sandbox kernel keeps of each notebook's installs
(kernel/packages.py), listed and removed."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from rewyn_kernel.kernel.packages import (
    NOTEBOOK_FILE,
    describe,
    layer_for,
    layers,
    packages_root,
    remove_packages,
    size_of,
)


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "packages",
        help="list or remove the packages the kernel keeps for each notebook",
        description="What %pip install (and !pip install) puts into a notebook's sandbox is "
        "kept for the notebook, so that its next kernels have it (the kernel setting "
        f"keep_packages), in {packages_root()}/<notebook>-<hash>. NOTEBOOK is a notebook's "
        "path or the name of its folder there.",
    )
    parser.add_argument(
        "action",
        choices=("list", "remove"),
        metavar="{list,remove}",
        help="list: the packages kept, per notebook, with versions and sizes; remove: the "
        "packages named, or --all (a running kernel of the notebook keeps its own copy)",
    )
    parser.add_argument(
        "notebook", nargs="?", metavar="NOTEBOOK", help="the notebook (list: default every one)"
    )
    parser.add_argument("names", nargs="*", metavar="PKG", help="remove: the packages to remove")
    parser.add_argument("--all", action="store_true", help="remove: every package kept for it")
    parser.add_argument("--json", action="store_true", help="list: print the list as JSON")
    return parser


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.action == "remove":
        return _remove(args, parser)
    if args.names or args.all:
        parser.error("packages list takes one NOTEBOOK at most, and no --all")
    found = [layer_for(args.notebook)] if args.notebook else layers()
    rows: list[dict[str, Any]] = []
    for layer in found:
        if not layer.is_dir():
            print(f"rewyn-kernel packages: nothing is kept for {args.notebook}", file=sys.stderr)
            return 1
        notebook = layer / NOTEBOOK_FILE
        rows.append(
            {
                "layer": layer.name,
                "notebook": notebook.read_text().strip() if notebook.is_file() else None,
                "bytes": size_of(layer),
                "packages": [
                    {"name": item.name, "version": item.version, "bytes": item.size}
                    for item in describe(layer)
                ],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"No packages are kept ({packages_root()} is empty).")
    for row in rows:
        print(f"{row['layer']}  {row['notebook'] or ''}  {_size(row['bytes'])}")
        for item in row["packages"]:
            print(f"    {item['name']} {item['version']}  {_size(item['bytes'])}")
    return 0


def _remove(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.notebook is None or bool(args.names) == bool(args.all):
        parser.error("packages remove: give the NOTEBOOK, then the packages or --all")
    layer = layer_for(args.notebook)
    if not layer.is_dir():
        print(f"rewyn-kernel packages: nothing is kept for {args.notebook}", file=sys.stderr)
        return 1
    if args.all:
        shutil.rmtree(layer)
        print(f"Removed every package kept for {args.notebook} ({layer}).")
        return 0
    missing = remove_packages(layer, list(args.names))
    for name in args.names:
        if name not in missing:
            print(f"Removed {name}.")
    if missing:
        print(f"rewyn-kernel packages: not kept there: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def _size(count: int) -> str:
    return f"{count / 1024:.0f} KiB" if count < 1 << 20 else f"{count / (1 << 20):.1f} MiB"
