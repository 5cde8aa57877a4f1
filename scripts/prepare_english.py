"""Build the English pretraining text from the data folder (--data): one tokenised sentence per line, gzip.

    python scripts/prepare_english.py --out runs/data/en

Writes train.txt.gz (IMDB reviews incl. unlabelled, nlp-corpus lines 0-94,999, Brown without cl23 — it is
Senseval-3 text —, MASC) and heldout-nlp.txt (nlp-corpus lines 95,000-99,999, the in-domain slice left out of
training, without the sentences that occur verbatim in the training text), plus 1b-dev.txt and wikitext2-valid.txt (the perplexity sets, with WikiText's heading lines dropped).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import zipfile
from pathlib import Path

from elmo.text.sentences import split_sentences
from elmo.text.tokenize import english_tokenize

DEFAULT_DATA = os.environ.get("ELMO_DATA") or str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
DATA = Path(DEFAULT_DATA) / "en"  # set from --data in main
HELD_OUT_FROM = 95_000


def imdb():
    with gzip.open(DATA / "imdb" / "reviews.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            for sentence in split_sentences(json.loads(line)["text"]):
                yield english_tokenize(sentence)


def nlp_corpus(held_out: bool):
    with gzip.open(DATA / "nlp-corpus" / "sentences.txt.gz", "rt", encoding="utf-8") as f:
        for number, line in enumerate(f):
            if (number >= HELD_OUT_FROM) == held_out:
                yield english_tokenize(line.strip())


def tagged_zip(path: Path, separator: str, skip: set[str]):
    with zipfile.ZipFile(path) as z:
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = {"imdb": imdb(), "nlp-corpus": nlp_corpus(False),
               "brown": tagged_zip(DATA / "brown" / "brown.zip", "/", {"cl23"}),
               "masc": tagged_zip(DATA / "masc" / "masc_tagged.zip", "_", set())}
    sentences = []
    for name, sentences_of in sources.items():
        before = len(sentences)
        sentences += [" ".join(tokens) for tokens in sentences_of if tokens]
        print(f"{name}: {len(sentences) - before:,} sentences")
    random.Random(0).shuffle(sentences)  # mix the sources once, so any prefix of the file is representative
    with gzip.open(out / "train.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    print(f"train.txt.gz: {len(sentences):,} sentences, {sum(len(s.split()) for s in sentences):,} tokens")
    # nlp-corpus also holds IMDB review sentences ("Highly recommended .", "9 / 10", ...): a held-out sentence that
    # occurs verbatim in the training text (1,639 of the 5,000) is dropped, so the slice is truly unseen
    seen = set(sentences)
    held_out = [s for s in (" ".join(t) for t in nlp_corpus(True) if t) if s not in seen]
    (out / "heldout-nlp.txt").write_text("\n".join(held_out) + "\n", encoding="utf-8")
    print(f"heldout-nlp.txt: {len(held_out):,} sentences not in train.txt.gz")
    (out / "1b-dev.txt").write_text((DATA / "1b-heldout" / "dev.tokens").read_text(encoding="utf-8"),
                                    encoding="utf-8")
    with gzip.open(DATA / "wikitext-2" / "valid.txt.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.strip().startswith("=")]
    (out / "wikitext2-valid.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
