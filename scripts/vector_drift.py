"""How far a model's vectors have moved from another's (an adapted model from its source): the mean per-token cosine
of each layer's vectors for the same sentences. Both models must have the same sizes (the vectors share coordinates
only when one model's weights started from the other's).

    python scripts/vector_drift.py en runs/data/en/1b-dev.txt runs/en-adapted/step-00004000 --sentences 200

Models of different sizes, an empty sentence file or --sentences below 1 are refused in one line.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from elmo.cli.messages import one_line
from elmo.embed import Embedder
from elmo.errors import ElmoError, UsageError


def mean_cosines(source: list[np.ndarray], other: list[np.ndarray]) -> list[float]:
    """Per layer, the mean over tokens of cos(source vector, other vector); arrays are (layers, T, D) per sentence."""
    per_layer: list[list[np.ndarray]] = [[] for _ in range(source[0].shape[0])]
    for a, b in zip(source, other):
        dot = (a * b).sum(-1)  # (layers, T)
        norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
        for layer, cosines in enumerate(dot / np.maximum(norms, 1e-12)):
            per_layer[layer].append(cosines)
    return [float(np.concatenate(c).mean()) for c in per_layer]


def size(embedder: Embedder) -> str:
    """A model's sizes as one phrase: its layers and the width of their vectors."""
    return f"{embedder.bilm.config.n_output_layers} layers of {embedder.dim}-dimensional vectors"


def read_sentences(path: str, limit: int) -> list[list[str]]:
    """The non-empty lines among the first ``limit`` of ``path``, split on whitespace; none is an error."""
    try:
        with open(path, encoding="utf-8") as f:
            sentences = [line.split() for line, _ in zip(f, range(limit)) if line.strip()]
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text; give a text file, one whitespace-tokenised sentence per "
                         f"line") from None
    if not sentences:
        raise UsageError(f"{path}: no sentences in the first {limit:,} lines; give a file of one whitespace-tokenised "
                         f"sentence per line")
    return sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("text", help="one whitespace-tokenised sentence per line")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sentences", type=int, default=200)
    args = parser.parse_args()
    if args.sentences < 1:
        parser.error(f"--sentences must be at least 1, got {args.sentences}")
    sentences = read_sentences(args.text, args.sentences)
    source_embedder = Embedder.from_pretrained(args.source)
    source = source_embedder.embed(sentences)
    for model in args.models:
        embedder = Embedder.from_pretrained(model)
        if size(embedder) != size(source_embedder):  # the vectors of different sizes share no coordinates
            raise UsageError(f"{model}: {size(embedder)}, and {args.source}: {size(source_embedder)}; the models must "
                             f"have the same sizes (compare a model with the one its weights started from)")
        cosines = mean_cosines(source, embedder.embed(sentences))
        print(f"{model}: " + "  ".join(f"layer {i} {c:.3f}" for i, c in enumerate(cosines)))


if __name__ == "__main__":
    try:
        main()
    except (ElmoError, OSError) as err:
        sys.exit(f"vector_drift.py: error: {one_line(err)}")
