"""``elmo cache``: the converted copies of official weights that elmo keeps for fast loading (``elmo.io.converted``)."""

from __future__ import annotations

import argparse

from elmo.io import converted


def cmd_cache(args: argparse.Namespace) -> None:
    if args.action == "clear":
        copies, leftovers, size = converted.clear()
        unfinished = f" and {leftovers} unfinished one(s) of interrupted loads" if leftovers else ""
        print(f"removed {copies} converted model(s){unfinished}, {size / 1e6:,.0f} MB, from {converted.root()}")
        return
    folder = converted.root()
    copies = converted.copies()
    for copy in copies:
        size = sum(p.stat().st_size for p in copy.rglob("*") if p.is_file())
        print(f"{copy}  {size / 1e6:,.0f} MB")
    print(f"{len(copies)} converted model(s) in {folder}" + ("" if converted.enabled() else
                                                               " (off: ELMO_CONVERT_CACHE=0)"))


def add_commands(sub) -> None:
    """``cache`` under ``sub``."""
    p = sub.add_parser("cache", help="official weights converted once for fast loading: list them or clear them")
    p.add_argument("action", choices=("list", "clear"),
                   help="list: the copies and their sizes; clear: delete them (the next load converts again)")
    p.set_defaults(func=cmd_cache)
