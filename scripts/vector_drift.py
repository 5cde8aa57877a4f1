"""How far a model's vectors have moved from another's (an adapted model from its source): the mean per-token cosine
of each layer's vectors for the same sentences. Both models must have the same sizes (the vectors share coordinates
only when one model's weights started from the other's).

    python scripts/vector_drift.py en runs/data/en/1b-dev.txt runs/en-adapted/step-00004000 --sentences 200
"""

from __future__ import annotations

import argparse

import numpy as np

from elmo.embed import Embedder


def mean_cosines(source: list[np.ndarray], other: list[np.ndarray]) -> list[float]:
    """Per layer, the mean over tokens of cos(source vector, other vector); arrays are (layers, T, D) per sentence."""
    per_layer: list[list[np.ndarray]] = [[] for _ in range(source[0].shape[0])]
    for a, b in zip(source, other):
        dot = (a * b).sum(-1)  # (layers, T)
        norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
        for layer, cosines in enumerate(dot / np.maximum(norms, 1e-12)):
            per_layer[layer].append(cosines)
    return [float(np.concatenate(c).mean()) for c in per_layer]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("text", help="one whitespace-tokenised sentence per line")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sentences", type=int, default=200)
    args = parser.parse_args()
    with open(args.text, encoding="utf-8") as f:
        sentences = [line.split() for line, _ in zip(f, range(args.sentences)) if line.strip()]
    source = Embedder.from_pretrained(args.source).embed(sentences)
    for model in args.models:
        cosines = mean_cosines(source, Embedder.from_pretrained(model).embed(sentences))
        print(f"{model}: " + "  ".join(f"layer {i} {c:.3f}" for i, c in enumerate(cosines)))


if __name__ == "__main__":
    main()
