"""The context-independent token layer: characters -> CNN -> highway -> projection (docs/format.md §4.2)."""

from __future__ import annotations

import warnings
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from elmo.config import CharCNNConfig
from elmo.data.chars import word_to_char_ids
from elmo.model.token_cache import TokenCache, TokenMemo
from elmo.model.weight_updates import weights_version

MEMO_WORDS = 32_768  # words whose token vectors inference remembers (P floats each: 64 MB at P = 512)


class Highway(nn.Module):
    """``x = g * relu(transform(x)) + (1 - g) * x`` with ``g = sigmoid(gate(x))``.

    bilm-tf calls the gate ``W_carry``, although it weights the transformed path; we keep its meaning, not its name.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.gate = nn.Linear(size, size)
        self.transform = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.gate(x))  # (N, F)
        return g * F.relu(self.transform(x)) + (1.0 - g) * x


class CharEncoder(nn.Module):
    """Maps tokens given as W shifted character ids to ``P``-wide token vectors."""

    def __init__(self, config: CharCNNConfig, output_dim: int) -> None:
        super().__init__()
        self.config = config
        # row 0 is the "no character" id: zero, and kept zero in training (padding_idx)
        self.char_embedding = nn.Embedding(config.n_characters, config.embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(nn.Conv1d(config.embedding_dim, num, width) for width, num in config.filters)
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.n_filters, output_dim)
        self._activation = torch.tanh if config.activation == "tanh" else F.relu
        self.token_cache: TokenCache | None = None  # for frozen inference (build_token_cache)
        self.memo_words = MEMO_WORDS  # 0: no memo
        self._memos: dict = {}  # matmul dtype -> TokenMemo of recently seen words (frozen inference only, exact)
        self._memo_weights: tuple | None = None
        self.matmul_dtype: torch.dtype | None = None  # torch.bfloat16: convolutions and matmuls in bf16

    @property
    def output_dim(self) -> int:
        return self.projection.out_features

    def encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Like ``forward``, but each distinct token is encoded once: (N, W) -> (N, P).

        Running text repeats itself (about half the tokens of a batch are repeats), and the encoder is context-free,
        so this is exact and saves that share of the CNN's work, forward and backward.
        """
        if char_ids.shape[0] < 2 and self.token_cache is None:
            return self(char_ids)
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)  # (U, W), (N,)
        return self._encode_distinct(unique)[inverse]  # (N, P)

    def _encode_distinct(self, unique: torch.Tensor) -> torch.Tensor:
        """Distinct tokens (U, W) -> (U, P): cached or remembered words looked up, the others through the CNN."""
        if torch.is_grad_enabled():
            return self(unique)
        weights = self.weights_key()
        memo = self._memo(weights)
        if self.token_cache is not None and self.token_cache.weights_key not in (None, weights):
            warnings.warn("the token cache was computed with weights that have changed since (training?): dropped, "
                          "the character CNN is used instead; call bilm.cache_tokens(words) again to rebuild it")
            self.token_cache = None
        if self.token_cache is None:
            return memo.encode(unique, self)
        found, index = self.token_cache.lookup(unique)
        if bool(found.all()):
            return self.token_cache.vectors.to(unique.device)[index]
        out = unique.new_empty(unique.shape[0], self.output_dim, dtype=self.projection.weight.dtype)
        out[found] = self.token_cache.vectors.to(unique.device)[index[found]].to(out.dtype)
        out[~found] = memo.encode(unique[~found], self)
        return out

    def forget_tokens(self) -> None:
        """Empty the memo of recently seen words (it also empties itself whenever the weights change)."""
        self._memos = {}

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.half()`` ...: moved or cast weights are the same weights; a fresh token cache stays valid."""
        fresh = self.token_cache is not None and self.token_cache.weights_key == self.weights_key()
        module = super()._apply(fn, *args, **kwargs)
        if fresh:
            self.token_cache.weights_key = self.weights_key()
        return module

    def weights_key(self) -> tuple:
        """Changes whenever a parameter is replaced, updated in place or stepped by an optimiser (fused ones too)."""
        return tuple(weights_version(p) for p in self.parameters())

    def _memo(self, key: tuple) -> TokenMemo:
        """The memo for the weights ``key`` (``weights_key()``) and matmul precision (one per precision, so switching
        back and forth gives the same numbers as before)."""
        if self._memo_weights != key:  # new weights: forget what was computed with the old ones
            self._memos, self._memo_weights = {}, key
        if self.matmul_dtype not in self._memos:
            self._memos[self.matmul_dtype] = TokenMemo(self.memo_words)
        return self._memos[self.matmul_dtype]

    def forward(self, char_ids: torch.Tensor, trim: bool = True) -> torch.Tensor:
        """(N, W) ids of N real tokens -> (N, P) token vectors (``trim=False``: all W slots, the slow reference)."""
        if self.matmul_dtype is not None and char_ids.device.type == "cpu":
            with torch.autocast("cpu", dtype=self.matmul_dtype):
                return self._forward(char_ids, trim).float()
        return self._forward(char_ids, trim)

    def _forward(self, char_ids: torch.Tensor, trim: bool) -> torch.Tensor:
        if not trim:
            features = self._max_pooled(char_ids)
        else:  # short words are most words: each length group runs over its own trimmed character axis
            groups = length_groups(char_ids, self.config.max_filter_width)
            if len(groups) == 1:
                features = self._max_pooled(char_ids[:, : groups[0][1]])
            else:
                order = torch.cat([rows for rows, _ in groups])  # (N,) tokens grouped by length
                parts = [self._max_pooled(char_ids[rows, :width]) for rows, width in groups]
                features = torch.cat(parts)[torch.argsort(order)]  # (N, F) back in the callers' order
        x = self._activation(features)  # (N, F)
        for highway in self.highways:
            x = highway(x)  # (N, F)
        return self.projection(x)  # (N, P)

    def _max_pooled(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(N, W') ids -> (N, F) convolution features, max-pooled over positions (before the activation: the two
        commute because the activation is monotone)."""
        x = self.char_embedding(char_ids).transpose(1, 2)  # (N, E, W')
        # max, not amax: its backward scatters into the arg-max slots instead of comparing whole conv outputs
        return torch.cat([conv(x).max(dim=-1).values for conv in self.convolutions], dim=-1)  # (N, F)


LENGTH_GROUP_STEP = 4  # character slots: tokens whose trimmed widths round up to the same multiple share a group


def length_groups(char_ids: torch.Tensor, max_filter_width: int) -> list[tuple[torch.Tensor, int]]:
    """(rows, width) groups of the tokens, each to be encoded over its first ``width`` character slots only.

    Past a token's end-of-word mark every slot holds the same padding character, so every convolution window that
    lies wholly in that padding gives one and the same value. Keeping a group's longest token plus one widest
    window of padding keeps at least one such window for every token that had one, so no max-pooled feature
    changes (docs/format.md §4.2). Widths are grouped in steps of LENGTH_GROUP_STEP, so a batch makes few groups.
    """
    n, width = char_ids.shape
    if n == 0:
        return [(torch.arange(0), width)]
    real = char_ids != char_ids[:, -1:]  # (N, W) slots not yet padding (the last slot is padding unless full)
    slots = torch.arange(1, width + 1, device=char_ids.device)
    needed = ((real * slots).amax(dim=1) + max_filter_width).clamp(max=width)  # (N,) each token's own width
    if int(needed.max()) - int(needed.min()) < LENGTH_GROUP_STEP:
        return [(torch.arange(n, device=char_ids.device), int(needed.max()))]
    keys = torch.div(needed + LENGTH_GROUP_STEP - 1, LENGTH_GROUP_STEP, rounding_mode="floor")  # (N,)
    groups = []
    for key in torch.unique(keys).tolist():
        rows = torch.nonzero(keys == key).squeeze(1)
        groups.append((rows, int(needed[rows].max())))
    return groups


def build_token_cache(encoder: CharEncoder, words: Sequence[str], batch_size: int = 1024) -> TokenCache:
    """Run ``encoder`` (a CharEncoder) over ``words`` once and cache the results."""
    width = encoder.config.max_characters_per_token
    rows = torch.tensor([word_to_char_ids(w, width) for w in words], dtype=torch.long).view(-1, width)  # (V, W)
    device = encoder.projection.weight.device
    with torch.inference_mode():
        vectors = torch.cat([encoder(rows[i : i + batch_size].to(device)) for i in range(0, len(rows), batch_size)]) \
            if len(rows) else torch.zeros(0, encoder.output_dim, device=device)
    cache = TokenCache(rows, vectors.clone())
    cache.weights_key = encoder.weights_key()
    return cache
