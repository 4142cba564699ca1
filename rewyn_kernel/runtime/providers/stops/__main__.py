"""``python -m rewyn_kernel.runtime.providers.stops``: print the table, or one settled column."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rewyn_kernel.runtime.providers.stops import COLUMNS, Column, markdown, settle


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rewyn_kernel.runtime.providers.stops",
        description="Print what each provider stops, from the declared source.",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="the whole table, as README.md holds it"
    )
    parser.add_argument(
        "--here",
        choices=[column.name.lower() for column in COLUMNS],
        help="one provider's column, each condition settled on this host",
    )
    args = parser.parse_args(argv)
    if args.here:
        for each in settle(Column[args.here.upper()]):
            print(f"{each.row.concern}: {each.verdict.value}: {each.says}")
        return 0
    print(markdown(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
