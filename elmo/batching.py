"""Batching for inference: sentences grouped by length under a token budget, one forward pass per group, and
the layer reading each caller asks for (``elmo.model.mix.select_layers``). ``Embedder`` and ``embed_file`` share it, so both give the same numbers."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch

from elmo.data.chars import batch_to_ids
from elmo.model.bilm import remove_sentence_boundaries
from elmo.model.engine import InferenceEngine
from elmo.model.mix import Layers, select_layers


def length_batches(lengths: Sequence[int], max_batch_size: int, max_tokens: int) -> Iterator[list[int]]:
    """Indices sorted longest first, grouped so that rows x longest row <= ``max_tokens`` (a longer sentence goes
    alone) and rows <= ``max_batch_size``: padding stays small and memory is bounded by the budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        longest = lengths[batch[0]] if batch else lengths[i]
        if batch and (len(batch) >= max_batch_size or (len(batch) + 1) * max(longest, 1) > max_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


@torch.inference_mode()
def run_batch(engine: InferenceEngine, batch: Sequence[Sequence[str]], layers: Layers = "all", pooling: str | None = None,
              mix: torch.Tensor | None = None) -> list[np.ndarray]:
    """One forward pass of ``engine`` over ``batch`` in the given row order; one float32 array per sentence.

    In stateful mode the row order matters: row b continues from row b of the previous call.
    """
    ids = batch_to_ids(batch, engine.config.char_cnn.max_characters_per_token)  # (B, T, W)
    out = engine(ids)
    mask = out.mask[:, 2:]  # (B, T) real tokens, boundaries dropped
    stacked = torch.stack([remove_sentence_boundaries(layer, out.mask)[0] for layer in out.layers], 1)
    if mix is None:
        mix = torch.full((stacked.shape[1],), 1.0 / stacked.shape[1])
    selected = select_layers(stacked, layers, mix.to(stacked.device))  # (B, L+1, T, 2P) or (B, T, 2P)
    arrays = []
    for row, n in enumerate(mask.sum(1).tolist()):
        vectors = selected[row, ..., :n, :]  # (..., n, 2P)
        if pooling == "mean":
            vectors = vectors.sum(-2) / max(n, 1)
        elif pooling == "max":
            vectors = vectors.amax(-2) if n else vectors.sum(-2)
        # a compact copy that owns its memory, not a view that would keep the whole batch's buffer alive
        arrays.append(np.array(vectors.float().cpu().numpy(), copy=True))  # (..., n, 2P) or pooled (..., 2P)
    return arrays
