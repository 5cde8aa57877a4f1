"""``elmo cache``: what elmo keeps to load models fast, and can make again: the converted copies of official weights
(``elmo.io.converted``), the unpacked NLPL zips (``elmo.io.nlpl``) and the features ``elmo task`` and ``elmo probe``
cache without ``--cache`` (``elmo.tasks.features``). Downloaded models are not touched."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elmo.errors import UsageError
from elmo.io import converted, nlpl
from elmo.io.atomic import folder_bytes
from elmo.tasks import features


def cmd_cache(args: argparse.Namespace) -> None:
    """List or clear both halves of the cache; one half that cannot be read or removed (another user's folder) does
    not hide the other: what was done is said, then one line names the path that stopped it (exit 1)."""
    problems: list[OSError] = []
    if args.action == "clear":
        with _noted(problems):
            copies, leftovers, size = converted.clear()
            unfinished = f" and {leftovers} unfinished one(s) of interrupted loads" if leftovers else ""
            print(f"removed {copies} converted model(s){unfinished}, {size / 1e6:,.0f} MB, from {converted.root()}")
        with _noted(problems):
            unpacked, unpacked_size = nlpl.clear_unpacked()
            print(f"removed {unpacked} unpacked NLPL zip(s), {unpacked_size / 1e6:,.0f} MB, from "
                  f"{nlpl.unpacked_root()}")
        with _noted(problems):
            files, size = features.clear_feature_files()
            print(f"removed {files} feature cache(s), {size / 1e6:,.0f} MB, from {features.default_feature_folder()}")
    else:
        with _noted(problems):
            copies = converted.copies()
            _list(copies)
            print(f"{len(copies)} converted model(s) in {converted.root()}" + ("" if converted.enabled() else
                                                                                 " (off: ELMO_CONVERT_CACHE=0)"))
        with _noted(problems):
            unpacked = nlpl.unpacked_copies()
            _list(unpacked)
            print(f"{len(unpacked)} unpacked NLPL zip(s) in {nlpl.unpacked_root()}")
        with _noted(problems):
            cached = features.feature_files()
            _list(cached)
            print(f"{len(cached)} feature cache(s) of `elmo task` and `elmo probe` in "
                  f"{features.default_feature_folder()}")
    if problems:
        err = problems[0]
        raise UsageError(f"{err.filename or 'the cache'}: {err.strerror or err}; the cache folder holds what this user "
                         f"may not read or remove (another user's?): ask its owner, or point ELMO_CACHE elsewhere")


@contextmanager
def _noted(problems: list[OSError]) -> Iterator[None]:
    try:
        yield
    except OSError as err:
        problems.append(err)


def _list(paths: list[Path]) -> None:
    """Each cached folder or file with its size."""
    for path in paths:
        print(f"{path}  {(path.stat().st_size if path.is_file() else folder_bytes(path)) / 1e6:,.0f} MB")


def add_commands(sub) -> None:
    """``cache`` under ``sub``."""
    p = sub.add_parser("cache", help="official weights converted once, NLPL zips unpacked once, for fast loading, "
                                     "and the features of task and probe runs: list them or clear them")
    p.add_argument("action", choices=("list", "clear"),
                   help="list: the copies and their sizes; clear: delete them (the next load converts or unpacks "
                        "again, the next task run embeds its data again; downloaded models stay)")
    p.set_defaults(func=cmd_cache)
