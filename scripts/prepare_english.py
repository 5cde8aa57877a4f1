"""Build the English pretraining text from the data folder (--data): one tokenised sentence per line, gzip.

    python scripts/prepare_english.py --out runs/data/en

Writes train.txt.gz (IMDB reviews incl. unlabelled, nlp-corpus lines 0-94,999, Brown without cl23 — it is
Senseval-3 text —, MASC) and heldout-nlp.txt (nlp-corpus lines 95,000-99,999, the in-domain slice left out of
training, without the sentences that occur verbatim in the training text), plus 1b-dev.txt and wikitext2-valid.txt (the perplexity sets, with WikiText's heading lines dropped).

Every input is checked before anything is read, and the four files are written only once all are made, each under a
temporary name renamed onto its own at the end: a missing or damaged input, a full disk or Ctrl-C leaves the --out
folder as it was (an earlier run's files whole, no new files beside old ones) and no folder made by this run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import zipfile
from pathlib import Path

from prepare_common import check_inputs, reading, write_outputs

from elmo.cli.messages import one_line
from elmo.errors import ElmoError
from elmo.io.atomic import output_folder, writable_file
from elmo.text.sentences import split_sentences
from elmo.text.tokenize import english_tokenize

DEFAULT_DATA = os.environ.get("ELMO_DATA") or str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
DATA = Path(DEFAULT_DATA) / "en"  # set from --data in main
HELD_OUT_FROM = 95_000
INPUTS = ("imdb/reviews.jsonl.gz", "nlp-corpus/sentences.txt.gz", "brown/brown.zip", "masc/masc_tagged.zip",
          "1b-heldout/dev.tokens", "wikitext-2/valid.txt.gz")  # under DATA
OUTPUTS = ("train.txt.gz", "heldout-nlp.txt", "1b-dev.txt", "wikitext2-valid.txt")


def imdb():
    path = DATA / "imdb" / "reviews.jsonl.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            for sentence in split_sentences(json.loads(line)["text"]):
                yield english_tokenize(sentence)


def nlp_corpus(held_out: bool):
    path = DATA / "nlp-corpus" / "sentences.txt.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f):
            if (number >= HELD_OUT_FROM) == held_out:
                yield english_tokenize(line.strip())


def tagged_zip(path: Path, separator: str, skip: set[str]):
    with reading(path), zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            if name.endswith("/") or Path(name).name in skip or Path(name).name in ("CONTENTS", "README", "cats.txt",
                                                                                 "categories.txt"):
                continue
            for line in z.read(name).decode("utf-8", errors="replace").split("\n"):
                tokens = [t.rsplit(separator, 1)[0] for t in line.split() if separator in t]
                if tokens:
                    yield tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/data/en")
    parser.add_argument("--data", default=DEFAULT_DATA, help="the data folder (default: $ELMO_DATA or ../shared/data)")
    args = parser.parse_args()
    global DATA
    DATA = Path(args.data) / "en"
    out = output_folder(args.out, "--out")
    for name in OUTPUTS:
        writable_file(out / name)  # a folder in a file's place: refused now, not after the reading
    check_inputs(DATA, INPUTS)
    sources = {"imdb": imdb(), "nlp-corpus": nlp_corpus(False),
               "brown": tagged_zip(DATA / "brown" / "brown.zip", "/", {"cl23"}),
               "masc": tagged_zip(DATA / "masc" / "masc_tagged.zip", "_", set())}
    sentences = []
    for name, sentences_of in sources.items():
        before = len(sentences)
        sentences += [" ".join(tokens) for tokens in sentences_of if tokens]
        print(f"{name}: {len(sentences) - before:,} sentences")
    random.Random(0).shuffle(sentences)  # mix the sources once, so any prefix of the file is representative
    # nlp-corpus also holds IMDB review sentences ("Highly recommended .", "9 / 10", ...): a held-out sentence that
    # occurs verbatim in the training text (1,639 of the 5,000) is dropped, so the slice is truly unseen
    seen = set(sentences)
    held_out = [s for s in (" ".join(t) for t in nlp_corpus(True) if t) if s not in seen]
    with reading(DATA / "1b-heldout" / "dev.tokens"):
        dev_1b = (DATA / "1b-heldout" / "dev.tokens").read_text(encoding="utf-8")
    path = DATA / "wikitext-2" / "valid.txt.gz"
    with reading(path), gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.strip().startswith("=")]
    write_outputs(out, {"train.txt.gz": "\n".join(sentences) + "\n", "heldout-nlp.txt": "\n".join(held_out) + "\n",
                        "1b-dev.txt": dev_1b, "wikitext2-valid.txt": "\n".join(lines) + "\n"})
    print(f"train.txt.gz: {len(sentences):,} sentences, {sum(len(s.split()) for s in sentences):,} tokens")
    print(f"heldout-nlp.txt: {len(held_out):,} sentences not in train.txt.gz")


if __name__ == "__main__":
    try:
        main()
    except (ElmoError, OSError) as err:
        sys.exit(f"prepare_english.py: error: {one_line(err)}")
