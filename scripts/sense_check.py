"""The sense check of the shipped models: does the top layer put two contexts of one sense of a word closer than a
context of that sense and one of another? An evaluation, not a test: it prints figures and never fails on them.

Two checks per model:

* example sentences (docs/examples/bank-en.tsv for ``en``, docs/examples/eunhaeng-ko.tsv for ``ko``, four
  sentences per sense): the mean top-layer cosine of the pairs within each sense and across the senses, and the
  strict check (the first pair of the main sense above the first pair across, and the main sense's mean above the
  mean across);
* for ``en``, when the data folder is there: SemCor's occurrences of "bank" written ``bank``, annotated
  ``bank%1:14:00::`` (money) or ``bank%1:17:01::`` (river), per layer (the table of scripts/sense_separation.py).
  Without SemCor in the default data folder this check is skipped (said in one line); a --data folder given that
  does not hold SemCor is an error, found before any model runs.

    python scripts/sense_check.py                    # both shipped models; SemCor from $ELMO_DATA or ../shared/data
    python scripts/sense_check.py --model en --data /path/to/data
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np

from elmo.cli.messages import one_line
from elmo.context import annotated_occurrences, cosine, occurrences, read_labelled_sentences, separation_report
from elmo.embed import Embedder
from elmo.errors import ElmoError, UsageError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("ELMO_DATA") or ROOT.parent / "shared" / "data")
# model -> (word, examples, the main sense, the other sense)
CASES = {"en": ("bank", "bank-en.tsv", "money", "river"), "ko": ("은행", "eunhaeng-ko.tsv", "bank", "ginkgo")}
SEMCOR_SENSES = {"bank%1:14:00::": "money", "bank%1:17:01::": "river"}


def example_check(embedder: Embedder, model: str) -> list[str]:
    """The example-sentence check of one model, as lines of text."""
    word, examples, sense, other = CASES[model]
    sentences, labels = read_labelled_sentences(ROOT / "docs" / "examples" / examples)
    found = occurrences(embedder, word, sentences, labels)
    pairs: dict[tuple[str, str], list[float]] = {}
    for a, b in itertools.combinations(found, 2):
        pairs.setdefault(tuple(sorted((a.label, b.label))), []).append(cosine(a.vectors[-1], b.vectors[-1]))
    main, minor, across = pairs[(sense, sense)], pairs[(other, other)], pairs[tuple(sorted((sense, other)))]
    strict = main[0] > across[0] and np.mean(main) > np.mean(across)
    return [f"{model}: {word!r} in docs/examples/{examples} ({len(found)} occurrences), top-layer cosine",
            f"  {sense}-{sense} {np.mean(main):.3f}   {other}-{other} {np.mean(minor):.3f}   "
            f"same-sense pairs {np.mean(main + minor):.3f}   across {np.mean(across):.3f}",
            f"  first pairs: {sense}-{sense} {main[0]:.3f}, {sense}-{other} {across[0]:.3f}",
            f"  strict check ({sense}-{sense} above {sense}-{other}, first pair and mean): "
            f"{'passes' if strict else 'fails'}"]


def semcor_missing(data: Path) -> Path | None:
    """What of SemCor the data folder lacks (its folder, or one of its two files); None when all is there."""
    folder = data / "en" / "wsd" / "semcor"
    if not folder.is_dir():
        return folder
    return next((f for f in (folder / "semcor.data.xml.gz", folder / "semcor.gold.key.txt.gz") if not f.is_file()),
                None)


def semcor_check(embedder: Embedder, data: Path) -> list[str]:
    """SemCor's 'bank' (money vs river), per layer; one line saying why when the files are not there."""
    from elmo.tasks.readers import read_wsd_xml

    if missing := semcor_missing(data):
        return [f"en: SemCor check skipped: no {missing}"]
    folder = data / "en" / "wsd" / "semcor"
    sentences = read_wsd_xml(folder / "semcor.data.xml.gz", folder / "semcor.gold.key.txt.gz")
    found = annotated_occurrences(embedder, sentences, SEMCOR_SENSES, form="bank")
    counts = {label: sum(o.label == label for o in found) for label in SEMCOR_SENSES.values()}
    return [f"en: SemCor 'bank' written bank ({counts['money']} money, {counts['river']} river), per layer",
            *("  " + line for line in separation_report(found))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(CASES), action="append", help="default: both shipped models")
    parser.add_argument("--data", type=Path, help=f"the data folder (for SemCor; default {DEFAULT_DATA}, skipped "
                                                  f"when it lacks SemCor)")
    args = parser.parse_args()
    models = args.model or sorted(CASES)
    if args.data is not None and "en" in models and (missing := semcor_missing(args.data)):
        # only the default folder may lack SemCor: a folder typed on the command line is meant to be used
        raise UsageError(f"{missing}: not found; check --data (the data folder, which holds en/wsd/semcor/ for the "
                         f"SemCor check)")
    for model in models:
        embedder = Embedder.from_pretrained(model)
        print("\n".join(example_check(embedder, model)))
        if model == "en":
            print("\n".join(semcor_check(embedder, args.data or DEFAULT_DATA)))


if __name__ == "__main__":
    try:
        main()
    except (ElmoError, OSError) as err:
        sys.exit(f"sense_check.py: error: {one_line(err)}")
