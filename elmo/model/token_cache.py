"""A cache of token-layer vectors for known words, with the character CNN as the fallback for the rest.

The token layer depends only on the word's characters, so its vectors can be computed once per vocabulary word
(or read from bilm-tf's ``dump_token_embeddings`` file) and looked up instead of recomputed. Words missing from the
cache still go through the CNN, so any input works. Only for frozen weights: the cache does not follow training.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


class TokenCache:
    """Vectors (V, P) keyed by each word's character-id row."""

    def __init__(self, char_rows: torch.Tensor, vectors: torch.Tensor) -> None:
        """char_rows: (V, W) shifted character ids; vectors: (V, P) their token-layer vectors."""
        if char_rows.shape[0] != vectors.shape[0]:
            raise ValueError(f"token cache: {char_rows.shape[0]} character rows for {vectors.shape[0]} vectors")
        self.vectors = vectors
        rows = char_rows.to(torch.int16).cpu().numpy()
        self.index = {row.tobytes(): i for i, row in enumerate(rows)}
        self.width = char_rows.shape[1]

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, W) rows -> (found (N,) bool, index (N,) into ``vectors``, 0 where not found)."""
        rows = char_ids.to(torch.int16).cpu().numpy()
        idx = np.array([self.index.get(row.tobytes(), -1) for row in rows], dtype=np.int64)
        found = torch.from_numpy(idx >= 0)
        return found.to(char_ids.device), torch.from_numpy(np.maximum(idx, 0)).to(char_ids.device)


def build_token_cache(encoder, words: Sequence[str], batch_size: int = 1024) -> TokenCache:
    """Run ``encoder`` (a CharEncoder) over ``words`` once and cache the results."""
    from elmo.data.chars import word_to_char_ids

    width = encoder.config.max_characters_per_token
    rows = torch.tensor([word_to_char_ids(w, width) for w in words], dtype=torch.long).view(-1, width)  # (V, W)
    with torch.inference_mode():
        vectors = torch.cat([encoder(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]) \
            if len(rows) else torch.zeros(0, encoder.output_dim)
    return TokenCache(rows, vectors.clone())
