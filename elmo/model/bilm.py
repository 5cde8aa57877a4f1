"""The bidirectional language model: token layer + a forward and a backward LSTM stack (docs/format.md §4).

Two run modes:

* **deterministic** (default): every sentence starts from the zero state, so a sentence's vectors never depend on
  which batch it was in, its row, or what ran before.
* **stateful** (``stateful=True``): AllenNLP's legacy behaviour, each batch row continuing from where that row
  ended in the previous call (``reset_states()`` returns to zero). This reproduces AllenNLP's and bilm-tf's numbers
  batch for batch, but the same sentence gets different vectors in different batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from elmo.config import ElmoConfig
from elmo.data.chars import add_sentence_boundaries, check_char_ids
from elmo.model.char_cnn import CharEncoder
from elmo.model.lstm import LSTMStack, State, build_lstm_stack
from elmo.model.state import StateCarrier, zero_state

StackResult = tuple[list[torch.Tensor], list[State]]  # every layer's output (B, T, P), every layer's final state


@dataclass
class BiLMOutput:
    """Every layer of a batch, sentence boundaries included (position 0 = ``<S>``, position n + 1 = ``</S>``)."""

    layers: list[torch.Tensor]  # L + 1 tensors (B, T + 2, 2P): token layer [e, e], then LSTM layers [fwd, bwd]
    mask: torch.Tensor  # (B, T + 2) bool, True at <S>, the tokens and </S>
    token_vectors: torch.Tensor  # (B, T + 2, P) the token layer once (not duplicated)
    forward_layers: list[torch.Tensor]  # L tensors (B, T + 2, P)
    backward_layers: list[torch.Tensor]  # L tensors (B, T + 2, P)


class Runner(NamedTuple):
    """What one forward pass runs: the trainable modules (``BiLM``) or an inference engine's frozen copies."""

    encode: Callable[[torch.Tensor], torch.Tensor]  # (N, W) ids of real tokens -> (N, P)
    # (x forward, x backward: (B, T, P) sorted longest first, batch_sizes, states forward, states backward)
    #   -> (layer outputs, final states) of the forward stack, then of the backward stack
    stacks: Callable[[torch.Tensor, torch.Tensor, list[int], list[State], list[State]],
                     tuple[StackResult, StackResult]]
    dtype: torch.dtype  # of the token layer


class BiLM(nn.Module):
    """Character ids (B, T, W), without sentence boundaries, -> every layer of the biLM.

    The trainable model: parameters and nothing derived from them. Fast frozen inference (pre-packed matrices,
    remembered token vectors, reduced precision) is an ``elmo.model.engine.InferenceEngine`` built from it.
    """

    def __init__(self, config: ElmoConfig, char_encoder: CharEncoder, forward_stack: LSTMStack,
                 backward_stack: LSTMStack, stateful: bool = False) -> None:
        super().__init__()
        self.config = config
        self.char_encoder = char_encoder
        self.forward_stack = forward_stack
        self.backward_stack = backward_stack
        self.stateful = stateful
        self._carrier = StateCarrier()
        # how the model's training text was split ("en", "ko", "ko-morph"; None: at whitespace). Loaders set it from
        # the model's files, savers write it back, and raw text given to the model goes through this tokenizer.
        self.tokenizer_name: str | None = None
        # words whose token vectors an inference engine precomputes by default (an NLPL model's vocabulary); None
        self.cache_words: list[str] | None = None
        # the files the loader read the weights from (none for a model made in memory): no output may replace one
        self.source_files: tuple[Path, ...] = ()
        # how many state dicts were loaded: an engine built earlier is out of date (PyTorch counts no change to
        # tensors made under torch.inference_mode())
        self.state_loads = 0

    @classmethod
    def from_config(cls, config: ElmoConfig, stateful: bool = False) -> "BiLM":
        """A randomly initialised biLM of the given shape (load weights into it afterwards)."""
        l = config.lstm
        stack = lambda: build_lstm_stack(l.projection_dim, l.dim, l.projection_dim, l.n_layers, l.cell_clip,
                                         l.proj_clip, l.use_skip_connections)
        return cls(config, CharEncoder(config.char_cnn, l.projection_dim), stack(), stack(), stateful=stateful)

    state_loads = 0  # for a biLM made without __init__ (BiLM.__new__)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        """Counted in ``state_loads``: a load into this biLM or into a module holding it, strict or not, before any
        tensor is copied (a strict load that then fails has changed the weights too)."""
        self.state_loads += 1
        super()._load_from_state_dict(*args, **kwargs)

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode); the next batch starts from zero."""
        self._carrier.reset()

    @property
    def state_carrier(self) -> StateCarrier:
        """The states stateful mode carries from batch to batch (``Elmo`` shares it with its inference engine)."""
        return self._carrier

    def forward(self, char_ids: torch.Tensor) -> BiLMOutput:
        stacks = lambda xf, xb, sizes, sf, sb: (self.forward_stack(xf, sizes, sf), self.backward_stack(xb, sizes, sb))
        runner = Runner(self.char_encoder.encode, stacks, self.char_encoder.projection.weight.dtype)
        return run_bilm(self.config, runner, char_ids, self._carrier if self.stateful else None)


def run_bilm(config: ElmoConfig, runner: Runner, char_ids: torch.Tensor, carrier: StateCarrier | None) -> BiLMOutput:
    """The forward pass (the one driver): char ids (B, T, W) -> every layer. ``carrier``: stateful mode's states,
    read at the start and updated at the end; None: every sentence from the zero state."""
    check_char_ids(char_ids, config.char_cnn.n_characters,  # once per batch, where ids enter the model
                   config.char_cnn.max_characters_per_token)
    ids, lengths = add_sentence_boundaries(char_ids)  # (B, T+2, W), (B,)
    batch, steps = ids.shape[:2]
    mask = torch.arange(steps, device=ids.device) < lengths.unsqueeze(1)  # (B, T+2)
    tokens = token_layer(runner.encode, ids, mask, config.lstm.projection_dim, runner.dtype)  # (B, T+2, P)
    if batch == 0:  # an empty batch: empty layers of the right widths (a stateful carrier is left as it was)
        per_layer = [tokens] * config.lstm.n_layers  # (0, T+2, P) each
        layers = [torch.cat([tokens, tokens], dim=-1)] * config.n_output_layers
        return BiLMOutput(layers, mask, tokens, per_layer, list(per_layer))

    # rows sorted longest first: at step t the running rows are a prefix of the batch
    order = torch.argsort(lengths, descending=True, stable=True)  # (B,)
    restore = torch.argsort(order)  # (B,)
    lengths_sorted = lengths[order]
    longest = int(lengths_sorted[0])
    batch_sizes = (lengths_sorted.unsqueeze(0) > torch.arange(longest, device=ids.device).unsqueeze(1)).sum(1).tolist()
    x = tokens[order, :longest]  # (B, T', P)

    l = config.lstm
    h0, c0 = (carrier.initial(batch, l.projection_dim, l.dim, l.n_layers, tokens) if carrier is not None
              else zero_state(l.n_layers, batch, l.projection_dim, l.dim, tokens))  # (2, L, B, P), (2, L, B, C)
    h0, c0 = h0[:, :, order], c0[:, :, order]
    flip = reverse_index(lengths_sorted, longest)  # (B, T') reverses each row within its own length
    (fwd, fwd_final), (bwd, bwd_final) = runner.stacks(
        x, _gather_time(x, flip), batch_sizes, [(h0[0, i], c0[0, i]) for i in range(l.n_layers)],
        [(h0[1, i], c0[1, i]) for i in range(l.n_layers)])
    bwd = [_gather_time(out, flip) for out in bwd]  # back to reading order

    pad = steps - longest
    fwd = [F.pad(out[restore], (0, 0, 0, pad)) for out in fwd]  # L x (B, T+2, P)
    bwd = [F.pad(out[restore], (0, 0, 0, pad)) for out in bwd]
    if carrier is not None:
        final_h = torch.stack([torch.stack([h for h, _ in fwd_final]), torch.stack([h for h, _ in bwd_final])])
        final_c = torch.stack([torch.stack([c for _, c in fwd_final]), torch.stack([c for _, c in bwd_final])])
        carrier.update((final_h[:, :, restore], final_c[:, :, restore]))  # (2, L, B, P), (2, L, B, C)

    layers = [torch.cat([tokens, tokens], dim=-1)] + [torch.cat(pair, dim=-1) for pair in zip(fwd, bwd)]
    return BiLMOutput(layers, mask, tokens, fwd, bwd)


def token_layer(encode: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, real: torch.Tensor, dim: int,
                dtype: torch.dtype) -> torch.Tensor:
    """The token layer: ids (B, T, W), real (B, T) bool -> (B, T, P), ``encode`` at the real slots, zeros elsewhere
    (training's windows and the biLM's padded batches alike)."""
    batch, steps, width = ids.shape
    if bool(real.all()):
        return encode(ids.reshape(batch * steps, width)).to(dtype).view(batch, steps, dim)
    tokens = ids.new_zeros(batch, steps, dim, dtype=dtype)  # (B, T, P)
    tokens[real] = encode(ids[real]).to(dtype)
    return tokens


def reverse_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """Index (B, T) that reverses each row's first ``lengths[b]`` steps and leaves its padding in place."""
    t = torch.arange(steps, device=lengths.device).unsqueeze(0)  # (1, T)
    n = lengths.unsqueeze(1)  # (B, 1)
    return torch.where(t < n, n - 1 - t, t)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, T, D) reordered along time by index (B, T)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def remove_sentence_boundaries(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop ``<S>`` and ``</S>``: (B, T + 2, D) and mask (B, T + 2) -> (B, T, D) zero-padded and mask (B, T).
    The padding is set to zero, not multiplied by it: a NaN or infinity there (a caller's own tensor) stays out."""
    new_mask = mask[:, 2:]  # position t + 2 is inside the row iff token t exists
    return tensor[:, 1:-1].masked_fill(~new_mask.bool().unsqueeze(-1), 0), new_mask  # (B, T, D)
