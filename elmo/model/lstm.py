"""LSTM with a projected, clipped state (bilm-tf's ``LSTMCell(num_proj=...)``), the stack of such layers, and the
one time loop every path runs.

One step (docs/format.md §4.3): z = x W_ih^T + r W_hh^T + bias (4C), then ``elmo.model.cell.lstm_step`` (the gates,
the clipped memory c and the clipped projection r), the one place the step's arithmetic is written.

``torch.nn.LSTM`` cannot clip, so the time loop is ours (``run_layer``). Rows come sorted longest first, so at each
step the running rows are a prefix of the batch: padding costs nothing and nothing is masked. The input projections
of the real positions (not the padding) are computed together, up to PROJECTION_BLOCK_BYTES per matmul.

The modules here are the trainable model: plain parameters, no caches. Frozen inference runs the same loop with
pre-packed matrices held by an ``elmo.model.engine.InferenceEngine``.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from elmo.model.cell import lstm_step
from elmo.model.lstm_sequence import LayerSequence
from elmo.model.packed import AutogradRightMultiplier

State = tuple[torch.Tensor, torch.Tensor]  # (h (B, P), c (B, C)) of one layer
PROJECTION_BLOCK_BYTES = 64 << 20  # input projections computed in one matmul: up to this many bytes of output


class Multiplier(Protocol):
    """``(x (n, in), add, out) -> x W^T + add`` for one fixed matrix W (``elmo.model.packed``)."""

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor: ...


class ProjectedLSTMLayer(nn.Module):
    """The parameters of one LSTM-with-projection layer; ``forward`` trains (or runs without packing)."""

    def __init__(self, input_size: int, cell_size: int, proj_size: int,
                 cell_clip: float | None, proj_clip: float | None) -> None:
        super().__init__()
        self.input_size, self.cell_size, self.proj_size = input_size, cell_size, proj_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.weight_ih = nn.Parameter(torch.empty(4 * cell_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * cell_size, proj_size))
        self.bias = nn.Parameter(torch.empty(4 * cell_size))
        self.weight_proj = nn.Parameter(torch.empty(proj_size, cell_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """bilm-tf's initialisation (docs/training.md): kernels Glorot-uniform, biases 0 with TensorFlow's constant
        +1 on the forget gate folded in. Nothing to do on the meta device (a model whose weights come from a file)."""
        if self.weight_ih.is_meta:
            return
        with torch.no_grad():
            # TF's kernel is one (In + P, 4C) matrix: the Glorot bound uses its fan-in and fan-out
            bound = math.sqrt(6.0 / (self.input_size + self.proj_size + 4 * self.cell_size))
            self.weight_ih.uniform_(-bound, bound)
            self.weight_hh.uniform_(-bound, bound)
            proj_bound = math.sqrt(6.0 / (self.cell_size + self.proj_size))
            self.weight_proj.uniform_(-proj_bound, proj_bound)
            self.bias.zero_()
            self.bias[self.cell_size : 2 * self.cell_size] = 1.0  # TensorFlow's constant forget bias

    def _hand_written_backward(self, x: torch.Tensor) -> bool:
        """Training in full precision: the time loop runs as one ``LayerSequence`` (same values, faster backward).
        Under autocast (mixed-precision GPU training) the step-by-step autograd path is kept."""
        return (torch.is_grad_enabled() and (x.requires_grad or self.weight_hh.requires_grad)
                and not torch.is_autocast_enabled(x.device.type))

    def forward(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        """Run over rows sorted longest first.

        x: (B, T, In); batch_sizes[t] = rows still running at step t (non-increasing); state (h (B, P), c (B, C)).
        Returns the outputs (B, T, P), zero where a row has ended, and each row's state after its last step.
        """
        if self._hand_written_backward(x) and batch_sizes:
            packed = packed_positions(x, batch_sizes)  # (N, In)
            out, (h, c) = LayersSideBySide([self])(packed[None], batch_sizes, (state[0][None], state[1][None]))
            return pad_steps(list(out[0].split(batch_sizes)), x.shape[0], x.shape[1]), (h[0], c[0])
        products = tuple(AutogradRightMultiplier(p) for p in (self.weight_ih, self.weight_hh, self.weight_proj))
        return run_layer(x, batch_sizes, state, products, self.bias, self.cell_clip, self.proj_clip)


class LayersSideBySide:
    """The same layer of several stacks (one per direction) run as one, in the packed layout: a layer of
    ``run_stack`` for training, where both directions' windows have the same shape.

    ``(x (D, N, In), batch_sizes, (h (D, B, P), c (D, B, C))) -> (outputs (D, N, P), (h, c))``, where ``x[d]`` is
    direction d's positions time-major (step t's rows a contiguous slice of ``batch_sizes[t]`` rows): one
    ``LayerSequence`` over the D layers (the input products of all steps in one batched product, then the time loop).
    Under autocast (mixed-precision training) each layer runs its own step-by-step autograd path instead.
    """

    def __init__(self, layers: Sequence[ProjectedLSTMLayer]) -> None:
        self.layers = list(layers)

    def __call__(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        if torch.is_autocast_enabled(x.device.type):
            return self._one_by_one(x, batch_sizes, state)
        first = self.layers[0]
        ih, bias, hh, proj = (self._stacked(name) for name in ("weight_ih", "bias", "weight_hh", "weight_proj"))
        out, h, c = LayerSequence.apply(x, ih, bias, *state, hh, proj, batch_sizes, first.cell_clip, first.proj_clip)
        return out, (h, c)

    def _stacked(self, name: str) -> torch.Tensor:
        """One parameter of every layer along a new first axis (a view for a single layer, not a copy)."""
        tensors = [getattr(layer, name) for layer in self.layers]
        return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)

    def _one_by_one(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        """Each layer on its own (B, T, In) view of full windows (every step runs all B rows)."""
        batch, steps = batch_sizes[0], len(batch_sizes)
        if any(n != batch for n in batch_sizes):
            raise ValueError("layers side by side under autocast need full windows (every step runs every row)")
        outs, hs, cs = [], [], []
        for d, layer in enumerate(self.layers):
            out, (h, c) = layer(x[d].view(steps, batch, -1).transpose(0, 1), batch_sizes, (state[0][d], state[1][d]))
            outs.append(out.transpose(0, 1).reshape(steps * batch, -1))  # (N, P) time-major
            hs.append(h)
            cs.append(c)
        return torch.stack(outs), (torch.stack(hs), torch.stack(cs))


def packed_positions(x: torch.Tensor, batch_sizes: list[int]) -> torch.Tensor:
    """The real positions of x (B, T, D), time-major: (N, D), step t's rows a contiguous slice of n_t rows."""
    running = torch.tensor(batch_sizes, dtype=torch.long)  # (T,) rows still running at each step
    lengths = (running.unsqueeze(0) > torch.arange(batch_sizes[0] if batch_sizes else 0).unsqueeze(1)).sum(1)
    return pack_padded_sequence(x[: len(lengths)], lengths, batch_first=True, enforce_sorted=True).data


def run_layer(x: torch.Tensor, batch_sizes: list[int], state: State,
              products: tuple[Multiplier, Multiplier, Multiplier], bias: torch.Tensor,
              cell_clip: float | None, proj_clip: float | None,
              buffer: Callable[[int, int, torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, State]:
    """One layer's time loop, step by step: the autograd path and frozen inference both run it.

    ``products``: the multipliers by W_ih^T (In -> 4C), W_hh^T (P -> 4C) and W_proj^T (C -> P). ``buffer(rows,
    cols, like)``: a reusable output buffer for the input projections (inference), or None for fresh tensors.
    Without gradients the steps run in place (``lstm_step(in_place=True)``).
    """
    input_product, recurrent_product, projection = products
    h, c = state
    if not batch_sizes:
        return x.new_zeros(*x.shape[:2], *h.shape[1:]), (h, c)
    packed = packed_positions(x, batch_sizes)  # (N, In)
    offsets = [0]
    for n in batch_sizes:
        offsets.append(offsets[-1] + n)
    steps, per_step, block_start = [], [], 0
    zero_start = not bool(h.any())
    cells = c.shape[-1]
    block_rows = max(1, PROJECTION_BLOCK_BYTES // (4 * cells * x.element_size()))
    inference = not torch.is_grad_enabled()
    for t, n in enumerate(batch_sizes):
        if t == block_start + len(per_step):
            # input projections of a block of steps in one matmul; one view per step, since slicing inside
            # autograd would build a whole-block gradient per step
            block_start, block_end = t, t + 1
            while block_end < len(batch_sizes) and offsets[block_end + 1] - offsets[t] <= block_rows:
                block_end += 1
            rows = packed[offsets[t] : offsets[block_end]]  # (rows, In)
            out = buffer(rows.shape[0], 4 * cells, rows) if buffer is not None else None
            per_step = input_product(rows, bias, out=out).split(batch_sizes[t:block_end])  # each (n_t, 4C)
        projected = per_step[t - block_start]
        # from a zero state (deterministic mode) step 0's recurrent product is exactly zero: skip it
        z = projected if t == 0 and zero_start else recurrent_product(h[:n], projected)  # (n, 4C)
        r, c_new = lstm_step(z, c[:n], projection, cell_clip, proj_clip, in_place=inference)
        steps.append(r)
        if n == h.shape[0]:
            h, c = r, c_new
        else:  # rows n.. have finished: their state is final, keep it
            h, c = torch.cat([r, h[n:]]), torch.cat([c_new, c[n:]])
    return pad_steps(steps, x.shape[0], x.shape[1]), (h, c)


def pad_steps(steps: list[torch.Tensor], batch: int, length: int) -> torch.Tensor:
    """Per-step outputs (n_t, P), n_t non-increasing -> (B, T, P), zeros where a row had ended.

    Stacking is one copy (and autograd-friendly); writing step by step into a buffer would make autograd copy
    the whole buffer once per step in the backward pass.
    """
    if steps and all(s.shape[0] == batch for s in steps) and len(steps) == length:
        return torch.stack(steps, dim=1)
    out = steps[0].new_zeros(batch, length, *steps[0].shape[1:]) if steps else None
    for t, r in enumerate(steps):
        out[: r.shape[0], t] = r
    return out


LayerRun = Callable[[torch.Tensor, list[int], State], tuple[torch.Tensor, State]]


def training_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout while training: each value kept with probability 1 - p and scaled by 1 / (1 - p).

    On the CPU the mask comes from ``torch.rand`` (u >= p), vectorised: ``nn.functional.dropout``'s ``bernoulli_``
    draws one number at a time (forward and backward of a (2, 640, 64) batch: 0.48 ms against 0.28 ms on a Xeon).
    The draw is in float32 whatever x's dtype (p kept to 2^-24), the scale in x's dtype. Elsewhere
    ``nn.functional.dropout``.
    """
    if x.device.type != "cpu":
        return nn.functional.dropout(x, p, training=True)
    keep = torch.rand(x.shape, dtype=torch.float32, device=x.device).ge_(p)  # 1.0 where kept, 0.0 where dropped
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


def run_stack(layers: Sequence[LayerRun], x: torch.Tensor, batch_sizes: list[int], states: list[State],
              use_skip_connections: bool, dropout: float = 0.0) -> tuple[list[torch.Tensor], list[State]]:
    """One direction: x (B, T, P) sorted longest first through ``layers`` bottom to top, with residual connections
    around every layer but the first -> every layer's output (B, T, P) and final state. ``dropout`` (training only)
    applies to every layer's input; the residual adds the dropped-out input."""
    outputs, finals = [], []
    for index, (layer, state) in enumerate(zip(layers, states)):
        if dropout > 0:
            x = training_dropout(x, dropout)
        out, final = layer(x, batch_sizes, state)  # (B, T, P)
        if use_skip_connections and index > 0:
            out = out + x  # the residual is not part of the carried state
        outputs.append(out)
        finals.append(final)
        x = out
    return outputs, finals


class LSTMStack(nn.Module):
    """One direction's layers (``run_stack`` runs them)."""

    def __init__(self, layers: list[ProjectedLSTMLayer], use_skip_connections: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.use_skip_connections = use_skip_connections

    def forward(self, x: torch.Tensor, batch_sizes: list[int],
                states: list[State]) -> tuple[list[torch.Tensor], list[State]]:
        """x (B, T, P) sorted longest first -> every layer's output (B, T, P) and final state. (Language-model
        training, with its dropout, runs both directions' layers side by side: ``LayersSideBySide``.)"""
        return run_stack(list(self.layers), x, batch_sizes, states, self.use_skip_connections)


def build_lstm_stack(input_size: int, cell_size: int, proj_size: int, n_layers: int, cell_clip: float | None,
                     proj_clip: float | None, use_skip_connections: bool) -> LSTMStack:
    """A stack of ``n_layers`` layers; every layer above the first reads the ``proj_size``-wide layer below."""
    layers = [ProjectedLSTMLayer(input_size if i == 0 else proj_size, cell_size, proj_size, cell_clip, proj_clip)
              for i in range(n_layers)]
    return LSTMStack(layers, use_skip_connections)
