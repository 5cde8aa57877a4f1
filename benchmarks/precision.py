"""How far the optional fast modes (bf16, int8) move a model's vectors from float32, on real sentences.

    python benchmarks/precision.py --models en,ko --sentences 200

Text: the first sentences of the 1B Word Benchmark held-out dev file (en) and of NSMC dev (ko), both in
$ELMO_DATA (default ../shared/data). Prints, per model and mode: the max abs difference over all layers and tokens, the mean |value| of
the float32 vectors (for scale) and the mean relative L2 error of the top layer per sentence.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA  # noqa: E402

from elmo.embed import Embedder  # noqa: E402
from elmo.tasks.readers import read_label_text_tsv  # noqa: E402

TEXT = {"en": lambda n: [line.split() for line in (DATA / "en/1b-heldout/dev.tokens").read_text(
            encoding="utf-8").split("\n")[:n] if line.strip()],
        "ko": lambda n: [item.text for item in read_label_text_tsv(DATA / "ko/nsmc/dev.tsv.gz")[:n]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="en,ko", help="shipped model names (en, ko)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | mode | sentences | max abs diff | mean abs value (fp32) | top-layer relative L2 |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        sentences = TEXT[name](args.sentences)
        reference = Embedder.from_pretrained(name).embed(sentences)
        scale = np.mean([np.abs(r).mean() for r in reference])
        for mode in ("bf16", "int8"):
            fast = Embedder.from_pretrained(name, precision=mode).embed(sentences)
            diff = max(float(np.abs(r - f).max()) for r, f in zip(reference, fast))
            rel = np.mean([np.linalg.norm(r[-1] - f[-1]) / np.linalg.norm(r[-1]) for r, f in zip(reference, fast)])
            print(f"| {name} | {mode} | {len(sentences)} | {diff:.3f} | {scale:.3f} | {rel:.4f} |")


if __name__ == "__main__":
    main()
