"""LSTM with a projected, clipped state (bilm-tf's ``LSTMCell(num_proj=...)``), and the stack of such layers.

One step (docs/format.md §4.3): z = x W_ih^T + r W_hh^T + bias (4C), then ``elmo.model.cell.lstm_step`` (the gates,
the clipped memory c and the clipped projection r), the one place the step's arithmetic is written.

``torch.nn.LSTM`` cannot clip, so the time loop is ours. The fast path sorts rows longest first, so at each step
the running rows are a prefix of the batch: padding costs nothing and nothing is masked. The input projections of
the real positions (not the padding) are computed together, a whole layer per matmul up to PROJECTION_BLOCK_BYTES,
into a buffer each thread reuses.
"""

from __future__ import annotations

import math
import threading

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from elmo.model.cell import lstm_step
from elmo.model.lstm_sequence import LayerSequence
from elmo.model.packed import AutogradRightMultiplier, Int8RightMultiplier, RightMultiplier, right_multiplier
from elmo.model.weight_updates import weights_version

State = tuple[torch.Tensor, torch.Tensor]  # (h (B, P), c (B, C)) of one layer
Multiplier = RightMultiplier | Int8RightMultiplier | AutogradRightMultiplier
PROJECTION_BLOCK_BYTES = 64 << 20  # input projections computed in one matmul: up to this many bytes of output
# (1,024 positions of the original model: a batch of 32 sentences of 30 tokens in one block). Computing a whole layer's
# projections before its time loop, rather than a block every 8 steps, keeps the loop's weights in the cache, and a
# reused output buffer spares a fresh allocation per block: together 1,100-1,150 -> 1,315-1,343 tokens/s at batch 32
# (original size, 2 threads, same run; 256-row packed blocks before)


class _ProjectionScratch(threading.local):
    """One reusable output buffer per thread for the input projections; layers run one after another, and no view
    of a block outlives its layer's time loop."""

    buffer: torch.Tensor | None = None

    def take(self, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
        """A (rows, cols) buffer with ``like``'s dtype and device, contents undefined."""
        old = self.buffer
        same_kind = old is not None and (old.shape[1], old.dtype, old.device) == (cols, like.dtype, like.device)
        if not same_kind or old.shape[0] < rows:
            # grows by doubling up to one block (a rare longer step gets exactly what it needs)
            block = PROJECTION_BLOCK_BYTES // (cols * like.element_size())
            capacity = max(rows, min(2 * old.shape[0] if same_kind else 0, block))
            self.buffer = None  # free the old buffer before making the new one
            with torch.inference_mode(False):  # a normal tensor: writable in and outside inference mode
                self.buffer = torch.empty(capacity, cols, dtype=like.dtype, device=like.device)
        return self.buffer[:rows]


_scratch = _ProjectionScratch()


class ProjectedLSTMLayer(nn.Module):
    """The parameters and step arithmetic of one LSTM-with-projection layer."""

    def __init__(self, input_size: int, cell_size: int, proj_size: int,
                 cell_clip: float | None, proj_clip: float | None) -> None:
        super().__init__()
        self.input_size, self.cell_size, self.proj_size = input_size, cell_size, proj_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.weight_ih = nn.Parameter(torch.empty(4 * cell_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * cell_size, proj_size))
        self.bias = nn.Parameter(torch.empty(4 * cell_size))
        self.weight_proj = nn.Parameter(torch.empty(proj_size, cell_size))
        self.matmul_dtype: torch.dtype | None = None  # None: the weights' dtype; bfloat16 / qint8: fast modes
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.cell_size)
        for weight in (self.weight_ih, self.weight_hh, self.weight_proj):
            nn.init.uniform_(weight, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[self.cell_size : 2 * self.cell_size] = 1.0  # TensorFlow's constant forget bias

    def right_multipliers(self) -> tuple[Multiplier, Multiplier, Multiplier]:
        """The products by W_ih^T (In -> 4C), W_hh^T (P -> 4C) and W_proj^T (C -> P), each ``(x, add) -> x W^T + add``.

        At inference they hold the weights pre-packed for BLAS (``elmo.model.packed``), cached until the weights
        change; under autograd they are made per call.
        """
        params = (self.weight_ih, self.weight_hh, self.weight_proj)
        if torch.is_grad_enabled():
            return tuple(AutogradRightMultiplier(p) for p in params)  # type: ignore[return-value]
        key = tuple((*weights_version(p), p.dtype, p.device) for p in params) + (self.matmul_dtype,)
        if getattr(self, "_cache_key", None) != key:
            self._cached = None  # free the old copies before making new ones
            with torch.no_grad():
                # W_ih multiplies a whole layer's positions at once: unpacked, so it can write into the scratch
                self._cached = tuple(right_multiplier(p, self.matmul_dtype, pack=p is not self.weight_ih)
                                     for p in params)
            self._cache_key = key
        return self._cached

    def clear_cache(self) -> None:
        """Forget the pre-packed weights (rebuilt on the next inference call)."""
        self._cached, self._cache_key = None, None

    def __getstate__(self) -> dict:
        """Copies and pickles leave the pre-packed weights behind: they are opaque BLAS buffers (``deepcopy`` of
        them fails) and are rebuilt from the parameters on the next inference call."""
        state = dict(super().__getstate__())
        state.pop("_cached", None)
        state.pop("_cache_key", None)
        return state

    def _hand_written_backward(self, x: torch.Tensor) -> bool:
        """Training in full precision: the time loop runs as one ``LayerSequence`` (same values, faster backward).
        Under autocast (mixed-precision GPU training) the step-by-step autograd path is kept."""
        return (torch.is_grad_enabled() and self.matmul_dtype is None
                and (x.requires_grad or self.weight_hh.requires_grad)
                and not torch.is_autocast_enabled(x.device.type))

    def forward(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        """Run over rows sorted longest first.

        x: (B, T, In); batch_sizes[t] = rows still running at step t (non-increasing); state (h (B, P), c (B, C)).
        Returns the outputs (B, T, P), zero where a row has ended, and each row's state after its last step.
        """
        h, c = state
        # the real positions only, time-major: step t's rows are the contiguous slice offsets[t] : offsets[t] + n_t
        running = torch.tensor(batch_sizes, dtype=torch.long)  # (T,) rows still running at each step
        lengths = (running.unsqueeze(0) > torch.arange(batch_sizes[0] if batch_sizes else 0).unsqueeze(1)).sum(1)
        packed = pack_padded_sequence(x[: len(lengths)], lengths, batch_first=True, enforce_sorted=True)
        if self._hand_written_backward(x) and batch_sizes:
            projected = torch.addmm(self.bias, packed.data, self.weight_ih.t())  # (N, 4C) all steps at once
            out, h, c = LayerSequence.apply(projected, h, c, self.weight_hh, self.weight_proj, batch_sizes,
                                            self.cell_clip, self.proj_clip)
            return _pad_steps(list(out.split(batch_sizes)), x.shape[0], x.shape[1]), (h, c)
        input_product, recurrent_product, projection = self.right_multipliers()
        offsets = [0]
        for n in batch_sizes:
            offsets.append(offsets[-1] + n)
        steps, per_step, block_start = [], [], 0
        zero_start = not bool(h.any())
        block_rows = max(1, PROJECTION_BLOCK_BYTES // (4 * self.cell_size * x.element_size()))
        inference = not torch.is_grad_enabled()
        reuse = inference and self.matmul_dtype is None  # fp32 inference: projections into the thread's scratch
        for t, n in enumerate(batch_sizes):
            if t == block_start + len(per_step):
                # input projections of a block of steps in one matmul; one view per step, since slicing inside
                # autograd would build a whole-block gradient per step
                block_start, block_end = t, t + 1
                while block_end < len(batch_sizes) and offsets[block_end + 1] - offsets[t] <= block_rows:
                    block_end += 1
                rows = packed.data[offsets[t] : offsets[block_end]]  # (rows, In)
                buffer = _scratch.take(rows.shape[0], 4 * self.cell_size, rows) if reuse else None
                block = input_product(rows, self.bias, out=buffer)  # (rows, 4C)
                per_step = block.split(batch_sizes[t:block_end])  # each (n_t, 4C)
            projected = per_step[t - block_start]
            # from a zero state (deterministic mode) step 0's recurrent product is exactly zero: skip it
            z = projected if t == 0 and zero_start else recurrent_product(h[:n], projected)  # (n, 4C)
            r, c_new = lstm_step(z, c[:n], projection, self.cell_clip, self.proj_clip, in_place=inference)
            steps.append(r)
            if n == h.shape[0]:
                h, c = r, c_new
            else:  # rows n.. have finished: their state is final, keep it
                h, c = torch.cat([r, h[n:]]), torch.cat([c_new, c[n:]])
        return _pad_steps(steps, x.shape[0], x.shape[1]), (h, c)


def _pad_steps(steps: list[torch.Tensor], batch: int, length: int) -> torch.Tensor:
    """Per-step outputs (n_t, P), n_t non-increasing -> (B, T, P), zeros where a row had ended.

    Stacking is one copy (and autograd-friendly); writing step by step into a buffer would make autograd copy
    the whole buffer once per step in the backward pass.
    """
    if steps and all(s.shape[0] == batch for s in steps) and len(steps) == length:
        return torch.stack(steps, dim=1)
    out = steps[0].new_zeros(batch, length, steps[0].shape[-1]) if steps else None
    for t, r in enumerate(steps):
        out[: r.shape[0], t] = r
    return out


class LSTMStack(nn.Module):
    """One direction: layers fed bottom to top, with residual connections around every layer but the first."""

    def __init__(self, layers: list[ProjectedLSTMLayer], use_skip_connections: bool, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.use_skip_connections = use_skip_connections
        self.dropout = dropout  # training only: on every layer's input; the residual adds the dropped-out input

    def forward(self, x: torch.Tensor, batch_sizes: list[int],
                states: list[State]) -> tuple[list[torch.Tensor], list[State]]:
        """x (B, T, P) sorted longest first -> every layer's output (B, T, P) and final state."""
        outputs, finals = [], []
        for index, (layer, state) in enumerate(zip(self.layers, states)):
            if self.training and self.dropout > 0:
                x = nn.functional.dropout(x, self.dropout, training=True)
            out, final = layer(x, batch_sizes, state)  # (B, T, P)
            if self.use_skip_connections and index > 0:
                out = out + x  # the residual is not part of the carried state
            outputs.append(out)
            finals.append(final)
            x = out
        return outputs, finals


def build_lstm_stack(input_size: int, cell_size: int, proj_size: int, n_layers: int, cell_clip: float | None,
                     proj_clip: float | None, use_skip_connections: bool) -> LSTMStack:
    """A stack of ``n_layers`` layers; every layer above the first reads the ``proj_size``-wide layer below."""
    layers = [ProjectedLSTMLayer(input_size if i == 0 else proj_size, cell_size, proj_size, cell_clip, proj_clip)
              for i in range(n_layers)]
    return LSTMStack(layers, use_skip_connections)
