"""A cache of token-layer vectors for known words, with the character CNN as the fallback for the rest.

The token layer depends only on the word's characters, so its vectors can be computed once per vocabulary word
(or read from bilm-tf's ``dump_token_embeddings`` file) and looked up instead of recomputed. Words missing from the
cache still go through the CNN, so any input works. Both the cache and the memo belong to an inference engine
(``elmo.model.engine``), a snapshot of frozen weights: they are never consulted by the trainable model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
import torch

from elmo.data.chars import word_to_char_ids


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


class TokenMemo:
    """The token vectors of the most recently seen words, at most ``capacity`` of them (least recently used out).

    Frozen inference computes each word's token layer once while it stays in the memo: running text is Zipfian,
    so after the first few batches most tokens are words already seen. Keyed by the character-id row; an engine
    holds one for the weights it was built from. Memory is bounded: ``capacity`` x P floats. One call at a time
    (a lock): two threads would otherwise take the same free slot, or read a slot another one is refilling, and get
    other words' vectors.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.slots: OrderedDict[bytes, int] = OrderedDict()  # key -> row of ``vectors``, oldest first
        self.vectors: torch.Tensor | None = None  # (capacity, P), allocated on first use
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.slots)

    def encode(self, char_ids: torch.Tensor, compute: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Distinct rows (U, W) -> (U, P): remembered rows looked up, the others computed by ``compute`` and kept."""
        with self.lock:
            return self._encode(char_ids, compute)

    def _encode(self, char_ids: torch.Tensor, compute: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        keys = [row.tobytes() for row in char_ids.to(torch.int16).cpu().numpy()]
        slots = [self.slots.get(k, -1) for k in keys]
        missing = [i for i, slot in enumerate(slots) if slot < 0]
        if len(missing) == len(keys):
            computed = compute(char_ids)  # (U, P)
            self._remember(keys, computed)
            return computed
        for k, slot in zip(keys, slots):
            if slot >= 0:
                self.slots.move_to_end(k)
        hit = torch.tensor([slot for slot in slots if slot >= 0], device=self.vectors.device)
        found = torch.tensor([slot >= 0 for slot in slots], device=char_ids.device)
        out = self.vectors.new_empty(len(keys), self.vectors.shape[1])  # (U, P)
        out[found] = self.vectors[hit]
        if missing:
            computed = compute(char_ids[~found])  # (M, P)
            out[~found] = computed
            self._remember([keys[i] for i in missing], computed)
        return out

    def _remember(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        if self.capacity <= 0 or not keys:
            return
        if self.vectors is None or self.vectors.dtype != vectors.dtype or self.vectors.device != vectors.device:
            self.slots.clear()
            with torch.inference_mode(False):  # a normal tensor: writable under no_grad and inference_mode alike
                self.vectors = vectors.new_empty(self.capacity, vectors.shape[1])
        keys, vectors = keys[-self.capacity :], vectors[-self.capacity :]
        slots = []
        for k in keys:
            if len(self.slots) < self.capacity:
                slot = len(self.slots)
            else:  # evict the least recently used
                _, slot = self.slots.popitem(last=False)
            self.slots[k] = slot
            slots.append(slot)
        self.vectors[torch.tensor(slots, device=vectors.device)] = vectors


def build_token_cache(compute: Callable[[torch.Tensor], torch.Tensor], words: Sequence[str], width: int,
                      device: torch.device, batch_size: int = 1024) -> TokenCache:
    """Run ``compute`` ((N, W) ids -> (N, P) token vectors) over ``words`` once and cache the results.

    Batch by batch into arrays of the final size: a bilm-tf vocabulary (793,471 words) would otherwise hold every
    word's ids as Python tuples (1.7 KB each), then the vectors three times over (parts, joined, copied). The ids
    are made without ``word_to_char_ids``' memo, which would keep 200,000 of these words' tuples for good."""
    if not words:
        raise ValueError("token cache: no words given")
    char_ids = word_to_char_ids.__wrapped__  # the function itself, not its memo
    rows = torch.empty(len(words), width, dtype=torch.int16)  # (V, W)
    vectors: torch.Tensor | None = None  # (V, P), a normal tensor, made at the first batch (P and dtype from it)
    with torch.inference_mode():
        for start in range(0, len(words), batch_size):
            batch = torch.tensor([char_ids(w, width) for w in words[start : start + batch_size]])  # (b, W)
            rows[start : start + batch.shape[0]] = batch
            out = compute(batch.to(device))  # (b, P)
            if vectors is None:
                with torch.inference_mode(False):
                    vectors = out.new_empty(len(words), out.shape[1])
            vectors[start : start + batch.shape[0]] = out
    return TokenCache(rows, vectors)
