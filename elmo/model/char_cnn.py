"""The context-independent token layer: characters -> CNN -> highway -> projection (docs/format.md §4.2)."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmo.config import CharCNNConfig


Linear = Callable[[torch.Tensor], torch.Tensor]  # x (n, in) -> x W^T + b (n, out)


class TokenLinears(NamedTuple):
    """The encoder's matrix layers as other callables than its own ``nn.Linear`` modules (inference runs them as
    ``elmo.model.packed.FrozenLinear``): each highway layer's (gate, transform), then the projection."""

    highways: list[tuple[Linear, Linear]]
    projection: Linear


class Highway(nn.Module):
    """``x = g * relu(transform(x)) + (1 - g) * x`` with ``g = sigmoid(gate(x))``.

    bilm-tf calls the gate ``W_carry``, although it weights the transformed path; we keep its meaning, not its name.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.gate = nn.Linear(size, size)
        self.transform = nn.Linear(size, size)

    def forward(self, x: torch.Tensor, linears: tuple[Linear, Linear] | None = None) -> torch.Tensor:
        """x (N, F) -> (N, F); ``linears``: (gate, transform) to use instead of this module's own layers."""
        gate, transform = linears or (self.gate, self.transform)
        g = torch.sigmoid(gate(x))  # (N, F)
        return g * F.relu(transform(x)) + (1.0 - g) * x


class CharEncoder(nn.Module):
    """Maps tokens given as W shifted character ids to ``P``-wide token vectors."""

    def __init__(self, config: CharCNNConfig, output_dim: int) -> None:
        super().__init__()
        self.config = config
        # row 0 is the "no character" id: zero, and kept zero in training (padding_idx)
        # its values are set by reset_parameters below (torch's own N(0, 1) start would be overwritten anyway, and on
        # the meta device its normal_ alone imports torch._dynamo: over a second of start-up)
        self.char_embedding = nn.Embedding(config.n_characters, config.embedding_dim, padding_idx=0,
                                           _weight=torch.empty(config.n_characters, config.embedding_dim))
        self.convolutions = nn.ModuleList(nn.Conv1d(config.embedding_dim, num, width) for width, num in config.filters)
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection = nn.Linear(config.n_filters, output_dim)
        self._activation = torch.tanh if config.activation == "tanh" else F.relu
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """bilm-tf's initialisation: character embeddings U(-1, 1) (the padding row 0), CNN kernels U(-0.05, 0.05),
        highway and projection weights N(0, sqrt(1 / F)) with the highway gate's bias -2, other biases 0."""
        if self.projection.weight.is_meta:  # a model whose weights come from a file: nothing to initialise
            return
        n_filters = self.config.n_filters
        with torch.no_grad():
            self.char_embedding.weight.uniform_(-1.0, 1.0)
            self.char_embedding.weight[0].zero_()
            for conv in self.convolutions:
                conv.weight.uniform_(-0.05, 0.05)
                conv.bias.zero_()
            for highway in self.highways:
                for linear in (highway.gate, highway.transform):
                    linear.weight.normal_(0.0, math.sqrt(1.0 / n_filters))
                highway.gate.bias.fill_(-2.0)
                highway.transform.bias.zero_()
            self.projection.weight.normal_(0.0, math.sqrt(1.0 / n_filters))
            self.projection.bias.zero_()

    @property
    def output_dim(self) -> int:
        return self.projection.out_features

    def encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Like ``forward``, but each distinct token is encoded once: (N, W) -> (N, P).

        Running text repeats itself (about half the tokens of a batch are repeats), and the encoder is context-free,
        so this is exact and saves that share of the CNN's work, forward and backward.
        """
        if char_ids.shape[0] < 2:
            return self(char_ids)
        unique, inverse = unique_rows(char_ids)  # (U, W), (N,)
        return _take_rows(self(unique), inverse)  # (N, P)

    def forward(self, char_ids: torch.Tensor, linears: TokenLinears | None = None) -> torch.Tensor:
        """(N, W) ids of N real tokens -> (N, P) token vectors; ``linears``: the highway and projection layers to run
        instead of this module's own (the inference engine's packed copies).

        Short words are most words: tokens are grouped by length, and each group runs over its own trimmed
        character axis (``length_groups``), with the same values as over all W slots.
        """
        kernel, bias = self._kernel()
        groups = length_groups(char_ids, self.config.max_filter_width)
        if len(groups) == 1:
            features = self._max_pooled(char_ids[:, : groups[0][1]], kernel, bias)  # (N, F)
        else:
            order = torch.cat([rows for rows, _ in groups])  # (N,) tokens grouped by length
            parts = [self._max_pooled(char_ids[rows, :width], kernel, bias) for rows, width in groups]
            features = _take_rows(torch.cat(parts), torch.argsort(order))  # (N, F) back in the callers' order
        x = self._activation(features)  # (N, F)
        for index, highway in enumerate(self.highways):
            x = highway(x, linears.highways[index] if linears else None)  # (N, F)
        return (linears.projection if linears else self.projection)(x)  # (N, P)

    def _kernel(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All convolutions as one matrix over a window of the widest filter's width: (K E, F) and the biases (F,).

        Window slot k, embedding component e is row k E + e; a filter narrower than K has zero rows past its width.
        """
        widest = self.config.max_filter_width
        columns = [F.pad(conv.weight.permute(2, 1, 0).reshape(-1, conv.out_channels),  # (w E, n) -> (K E, n)
                         (0, 0, 0, (widest - conv.kernel_size[0]) * conv.in_channels))
                   for conv in self.convolutions]
        return torch.cat(columns, dim=1), torch.cat([conv.bias for conv in self.convolutions])

    def _max_pooled(self, char_ids: torch.Tensor, kernel: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """(N, W') ids -> (N, F) convolution features, max-pooled over positions (before the activation: the two
        commute because the activation is monotone).

        Every convolution is one matrix product over all windows of the widest filter's width K. A filter of width w
        also has windows at the last K - w positions; when every token ends in at least K slots of padding (what
        ``length_groups`` keeps, unless a token fills all W slots) those windows lie wholly in the padding, whose
        value an earlier window already gives, so they are left out. Otherwise the axis is extended by K - 1 zero
        slots and each filter's windows past its own last position are masked out of the max.
        """
        widest = self.config.max_filter_width
        x = self.char_embedding(char_ids)  # (N, W', E)
        width = x.shape[1]
        exact_tail = width == self.config.max_characters_per_token  # a token may end without K slots of padding
        if exact_tail:
            x = F.pad(x, (0, 0, 0, widest - 1))  # (N, W' + K - 1, E)
        windows = x.unfold(1, widest, 1).transpose(2, 3)  # (N, positions, K, E)
        positions = windows.shape[1]
        out = torch.addmm(bias, windows.reshape(-1, kernel.shape[0]), kernel).view(-1, positions, kernel.shape[1])
        if exact_tail:  # (N, W', F): filter j's position p exists iff p + width_j <= W'
            last = torch.cat([torch.full((conv.out_channels,), width - conv.kernel_size[0])
                              for conv in self.convolutions]).to(out.device)  # (F,)
            outside = torch.arange(positions, device=out.device).unsqueeze(1) > last  # (W', F)
            out = out.masked_fill(outside, float("-inf"))
        return max_over_positions(out)  # (N, F)


def _take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index] along the first axis. On the CPU by ``index_select``, whose backward adds the rows (``index_add_``:
    3x faster there than indexing's ``index_put``); elsewhere by indexing, whose backward sorts first and so gives
    the same sums every run (CUDA's ``index_add_`` adds with atomics, in no fixed order)."""
    return x.index_select(0, index) if x.device.type == "cpu" else x[index]


def max_over_positions(out: torch.Tensor) -> torch.Tensor:
    """(N, positions, F) -> (N, F), the largest value of every feature over the positions.

    ``max(dim=1)`` finds its arg-max indices with scalar code (1.1 ms for a (369, 9, 256) batch on a Xeon with
    AVX-512), ``amax`` is vectorised (0.05 ms) but its backward compares whole outputs. Without gradients this is
    ``amax``; with them ``MaxOverPositions`` (0.09 ms), whose backward sends each gradient to the first arg-max slot
    as ``max(dim=1)``'s does: the same values and gradients.
    """
    if not torch.is_grad_enabled() or not out.requires_grad:
        return out.amax(dim=1)
    return MaxOverPositions.apply(out)


class MaxOverPositions(torch.autograd.Function):
    """The max over positions as a max-pool over a channels-last view of the same memory ((N, F, 1, positions)
    logically, vectorised over the features); the backward scatters into the arg-max slots directly (the pool's own
    backward takes 1.5x as long)."""

    @staticmethod
    def forward(ctx, out: torch.Tensor) -> torch.Tensor:
        rows, positions, features = out.shape
        pooled, where = F.max_pool2d_with_indices(out.permute(0, 2, 1).unsqueeze(2), (1, positions))  # (N, F, 1, 1)
        ctx.save_for_backward(where.view(rows, 1, features))  # (N, 1, F) the arg-max position of each feature
        ctx.shape = out.shape
        return pooled.view(rows, features)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (where,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter_(1, where, grad.unsqueeze(1))  # (N, positions, F)


def unique_rows(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of a (N, W) id matrix and where each row went: (U, W), inverse (N,) with
    ``unique[inverse] == ids``. On the CPU the rows are compared as bytes by NumPy (``torch.unique(dim=0)`` compares
    them row by row, several times slower), as int16 when every id fits (0.47 -> 0.26 ms for 1,280 tokens);
    elsewhere ``torch.unique``."""
    if ids.device.type != "cpu" or ids.shape[0] == 0:
        return torch.unique(ids, dim=0, return_inverse=True)
    rows = ids.numpy()
    low, high = ids.aminmax() if ids.numel() else (0, 0)
    if -(1 << 15) <= int(low) and int(high) < 1 << 15:  # character ids (0..261): int16 keys, a quarter as long
        rows = rows.astype(np.int16)
    rows = np.ascontiguousarray(rows)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()  # one opaque key per row
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return ids[torch.from_numpy(first)], torch.from_numpy(inverse.reshape(-1))


LENGTH_GROUP_STEP = 4  # character slots: tokens whose trimmed widths round up to the same multiple share a group
MIN_GROUP_ROWS = 16  # a smaller group joins the next wider one: one more product costs more than its padding


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
    order = torch.argsort(keys, stable=True)  # (N,) tokens by group
    counts = torch.unique_consecutive(keys[order], return_counts=True)[1]
    groups, start, pending = [], 0, 0
    for count in counts.tolist():  # narrowest first; a small group waits for the next, wider one
        pending += count
        if pending >= MIN_GROUP_ROWS or start + pending == n:
            rows = order[start : start + pending]
            groups.append((rows, int(needed[rows].max())))
            start, pending = start + pending, 0
    return groups
