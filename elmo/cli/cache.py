"""``elmo cache``: what elmo keeps to load models fast, and can make again: the converted copies of official weights
(``elmo.io.converted``) and the unpacked NLPL zips (``elmo.io.nlpl``). Downloaded models are not touched."""

from __future__ import annotations

import argparse

from elmo.io import converted, nlpl


def cmd_cache(args: argparse.Namespace) -> None:
    if args.action == "clear":
        copies, leftovers, size = converted.clear()
        unpacked, unpacked_size = nlpl.clear_unpacked()
        unfinished = f" and {leftovers} unfinished one(s) of interrupted loads" if leftovers else ""
        print(f"removed {copies} converted model(s){unfinished}, {size / 1e6:,.0f} MB, from {converted.root()}")
        print(f"removed {unpacked} unpacked NLPL zip(s), {unpacked_size / 1e6:,.0f} MB, from {nlpl.unpacked_root()}")
        return
    copies, unpacked = converted.copies(), nlpl.unpacked_copies()
    for copy in copies + unpacked:
        size = sum(p.stat().st_size for p in copy.rglob("*") if p.is_file())
        print(f"{copy}  {size / 1e6:,.0f} MB")
    print(f"{len(copies)} converted model(s) in {converted.root()}" + ("" if converted.enabled() else
                                                                         " (off: ELMO_CONVERT_CACHE=0)"))
    print(f"{len(unpacked)} unpacked NLPL zip(s) in {nlpl.unpacked_root()}")


def add_commands(sub) -> None:
    """``cache`` under ``sub``."""
    p = sub.add_parser("cache", help="official weights converted once, and NLPL zips unpacked once, for fast "
                                     "loading: list them or clear them")
    p.add_argument("action", choices=("list", "clear"),
                   help="list: the copies and their sizes; clear: delete them (the next load converts or unpacks "
                        "again; downloaded models stay)")
    p.set_defaults(func=cmd_cache)
