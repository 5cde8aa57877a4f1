"""Build the Korean pretraining text from the data folder (--data): one tokenised sentence per line, gzip.

    python scripts/prepare_korean.py --out runs/data/ko

Tokens are eojeol with punctuation split off (``elmo.text.tokenize.korean_tokenize``, the ``--tokenize ko`` of the
CLI), after Unicode NFC of the whole text (``_tokens``): the shipped model's training text was made so. Writes
train.txt.gz (the NSMC raw crawl without the NSMC-rebuilt dev texts, the Blue House petitions split into
sentences, the KorQuAD dev paragraphs split into sentences) and heldout-nsmc.txt (the 10,000 NSMC-rebuilt dev
reviews: held-out NSMC text never seen in training; the withheld test reviews are not in the crawl at all).

Every input is checked before anything is read, and both files are written only once both are made, each under a
temporary name renamed onto its own at the end: a missing or damaged input, a full disk or Ctrl-C leaves the --out
folder as it was (an earlier run's files whole, no new file beside an old one) and no folder made by this run.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import re
import sys
import unicodedata
from pathlib import Path

from prepare_common import DataFolderError, check_inputs, reading, write_outputs

from elmo.cli.messages import one_line
from elmo.errors import ElmoError
from elmo.io.atomic import output_folder, writable_file
from elmo.text.tokenize import korean_tokenize

DEFAULT_DATA = os.environ.get("ELMO_DATA") or str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
DATA = Path(DEFAULT_DATA) / "ko"  # set from --data in main
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
csv.field_size_limit(sys.maxsize)
INPUTS = ("nsmc/dev.tsv.gz", "nsmc/reviews.tsv.gz", "korquad-dev/korquad_v1.0_dev.json.gz")  # under DATA
OUTPUTS = ("train.txt.gz", "heldout-nsmc.txt")


def _tokens(text: str) -> list[str]:
    """The ``ko`` tokens of a text after NFC of the whole text. The tokenizer itself composes only Hangul jamo (a
    user's other characters stay as written); this preparation also unifies compatibility forms, as the text of the
    shipped model was prepared."""
    return korean_tokenize(unicodedata.normalize("NFC", text))


def _key(text: str) -> str:
    return "".join(text.split())


def nsmc_dev_texts() -> list[str]:
    path = DATA / "nsmc" / "dev.tsv.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        return [row["text"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def nsmc_reviews(skip: set[str]):
    path = DATA / "nsmc" / "reviews.tsv.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if _key(row["text"]) not in skip:
                yield _tokens(row["text"])


def petitions():
    for path in sorted((DATA / "petitions").glob("*.jsonl.gz")):
        with reading(path), gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                for sentence in _SENTENCE_END.split(record["title"] + "\n" + record["content"]):
                    yield _tokens(sentence)


def korquad():
    path = DATA / "korquad-dev" / "korquad_v1.0_dev.json.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8") as f:
        for article in json.load(f)["data"]:
            for paragraph in article["paragraphs"]:
                for sentence in _SENTENCE_END.split(paragraph["context"]):
                    yield _tokens(sentence)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/data/ko")
    parser.add_argument("--data", default=DEFAULT_DATA, help="the data folder (default: $ELMO_DATA or ../shared/data)")
    args = parser.parse_args()
    global DATA
    DATA = Path(args.data) / "ko"
    out = output_folder(args.out, "--out")
    for name in OUTPUTS:
        writable_file(out / name)  # a folder in a file's place: refused now, not after the reading
    check_inputs(DATA, INPUTS)
    if not any((DATA / "petitions").glob("*.jsonl.gz")):
        raise DataFolderError(f"{DATA / 'petitions'}: no *.jsonl.gz files; check --data (the data folder, which holds "
                              f"ko/petitions/ and the other inputs)")
    dev = nsmc_dev_texts()
    sources = {"nsmc": nsmc_reviews({_key(t) for t in dev}), "petitions": petitions(), "korquad": korquad()}
    sentences = []
    for name, sentences_of in sources.items():
        before = len(sentences)
        sentences += [" ".join(tokens) for tokens in sentences_of if tokens]
        print(f"{name}: {len(sentences) - before:,} sentences")
    random.Random(0).shuffle(sentences)
    held_out = [" ".join(_tokens(t)) for t in dev]
    write_outputs(out, {"train.txt.gz": "\n".join(sentences) + "\n",
                        "heldout-nsmc.txt": "\n".join(s for s in held_out if s) + "\n"})
    print(f"train.txt.gz: {len(sentences):,} sentences, {sum(len(s.split()) for s in sentences):,} tokens")


if __name__ == "__main__":
    try:
        main()
    except (ElmoError, OSError) as err:
        sys.exit(f"prepare_korean.py: error: {one_line(err)}")
