"""How well each layer of a model separates senses of a word in sense-annotated text (SemCor by default): for every
layer, the mean cosine of same-sense pairs (per sense) and of pairs across senses, the share of (anchor, same-sense,
other-sense) triples where the same-sense occurrence is the closer one, and leave-one-out 1-nearest-neighbour
accuracy. A check of a model on sentences nobody chose for it (the labels are SemCor's annotators').

    python scripts/sense_separation.py en bank%1:14:00::=money bank%1:17:01::=river

A table needs two senses (two labels) with two occurrences each or more: a sense key that matches nothing (a
mistyped key, a --form written otherwise in the text) is an error, not an empty table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from elmo.cli.messages import one_line
from elmo.context import annotated_occurrences, separation_report
from elmo.embed import Embedder
from elmo.errors import ElmoError, UsageError
from elmo.tasks.readers import read_wsd_xml

DATA = os.environ.get("ELMO_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"  # the default folder
SEMCOR = Path(DATA) / "en" / "wsd" / "semcor"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a shipped name (en), a model folder or a checkpoint")
    parser.add_argument("senses", nargs="+", help="KEY=LABEL, a WordNet sense key and a short name for it")
    parser.add_argument("--form", help="only occurrences written exactly so (bank, not banks or Bank)")
    parser.add_argument("--xml", default=str(SEMCOR / "semcor.data.xml.gz"))
    parser.add_argument("--keys", default=str(SEMCOR / "semcor.gold.key.txt.gz"))
    args = parser.parse_args()
    senses = dict(item.rsplit("=", 1) if "=" in item else (item, item) for item in args.senses)
    if len(set(senses.values())) < 2:
        parser.error("give two senses or more with different labels (KEY=LABEL ...): a table compares senses")
    for option, path in (("--xml", args.xml), ("--keys", args.keys)):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file; give {option} (SemCor's by default, from $ELMO_DATA or "
                             f"../shared/data)")
    sentences = read_wsd_xml(args.xml, args.keys)
    found = annotated_occurrences(Embedder.from_pretrained(args.model), sentences, senses, args.form)
    counts = {label: sum(o.label == label for o in found) for label in senses.values()}
    few = [f"{label} ({key}): {counts[label]}" for key, label in senses.items() if counts[label] < 2]
    if few:  # a mistyped key or --form: no table, and not an empty one with exit status 0
        written = f" written {args.form!r}" if args.form else ""
        raise UsageError(f"{args.xml}: {', '.join(few)} occurrence(s){written}, and a table needs 2 or more of each "
                         f"sense; check the sense keys (as in --keys, e.g. bank%1:14:00::) and --form")
    print(f"{args.model}: {', '.join(f'{n} {label}' for label, n in counts.items())} occurrences")
    print("\n".join(separation_report(found)))


if __name__ == "__main__":
    try:
        main()
    except (ElmoError, OSError) as err:
        sys.exit(f"sense_separation.py: error: {one_line(err)}")
