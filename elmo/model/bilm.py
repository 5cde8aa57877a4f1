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
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from elmo.config import ElmoConfig
from elmo.data.chars import add_sentence_boundaries, check_char_ids
from elmo.errors import UsageError
from elmo.model.char_cnn import CharEncoder, build_token_cache
from elmo.model.lstm import LSTMStack, build_lstm_stack
from elmo.model.state import BiState, StateCarrier, zero_state


@dataclass
class BiLMOutput:
    """Every layer of a batch, sentence boundaries included (position 0 = ``<S>``, position n + 1 = ``</S>``)."""

    layers: list[torch.Tensor]  # L + 1 tensors (B, T + 2, 2P): token layer [e, e], then LSTM layers [fwd, bwd]
    mask: torch.Tensor  # (B, T + 2) bool, True at <S>, the tokens and </S>
    token_vectors: torch.Tensor  # (B, T + 2, P) the token layer once (not duplicated)
    forward_layers: list[torch.Tensor]  # L tensors (B, T + 2, P)
    backward_layers: list[torch.Tensor]  # L tensors (B, T + 2, P)


class BiLM(nn.Module):
    """Character ids (B, T, W), without sentence boundaries, -> every layer of the biLM."""

    def __init__(self, config: ElmoConfig, char_encoder: CharEncoder, forward_stack: LSTMStack,
                 backward_stack: LSTMStack, stateful: bool = False) -> None:
        super().__init__()
        self.config = config
        self.char_encoder = char_encoder
        self.forward_stack = forward_stack
        self.backward_stack = backward_stack
        self.stateful = stateful
        self._carrier = StateCarrier()
        self.matmul_precision = "fp32"  # set_matmul_precision changes it
        # how the model's training text was split ("en", "ko", "ko-morph"; None: at whitespace). Loaders set it from
        # the model's files, savers write it back, and raw text given to the model goes through this tokenizer.
        self.tokenizer_name: str | None = None

    @classmethod
    def from_config(cls, config: ElmoConfig, stateful: bool = False) -> "BiLM":
        """A randomly initialised biLM of the given shape (load weights into it afterwards)."""
        l = config.lstm
        stack = lambda: build_lstm_stack(l.projection_dim, l.dim, l.projection_dim, l.n_layers, l.cell_clip,
                                         l.proj_clip, l.use_skip_connections)
        return cls(config, CharEncoder(config.char_cnn, l.projection_dim), stack(), stack(), stateful=stateful)

    def cache_tokens(self, words: Sequence[str] | None) -> None:
        """Precompute the token layer of ``words`` (a vocabulary) for frozen inference; other words still work.
        ``cache_tokens(None)`` drops the cache."""
        self.char_encoder.token_cache = None if words is None else build_token_cache(self.char_encoder, list(words))

    def set_matmul_precision(self, precision: str) -> None:
        """"fp32" (exact, the default), or a fast approximate mode: "bf16" (matrix products and convolutions in
        bfloat16; fast where the CPU has bf16 matrix units (AMX); about 1e-2 off) or "int8" (the LSTM products with
        int8 weights and dynamically quantised inputs, the token layer in float32; CPU only; a few 1e-2 off).
        LSTM states and gates stay float32 in every mode."""
        dtypes = {"fp32": (None, None), "bf16": (torch.bfloat16, torch.bfloat16), "int8": (None, torch.qint8)}
        if precision not in dtypes:
            raise UsageError(f"precision must be one of {', '.join(dtypes)}, got {precision!r}")
        self.char_encoder.matmul_dtype, lstm_dtype = dtypes[precision]
        self.matmul_precision = precision
        for stack in (self.forward_stack, self.backward_stack):
            for layer in stack.layers:
                layer.matmul_dtype = lstm_dtype

    def clear_caches(self) -> None:
        """Drop what inference derives from the weights (the remembered token vectors and the LSTMs' pre-packed
        matrices); both are rebuilt on the next call. They already follow every normal weight update (optimiser
        steps, fused ones included, ``load_state_dict``, in-place ops under ``no_grad``: ``weights_version``); call
        this after editing weights through ``.data``, which none of those sees."""
        self.char_encoder.forget_tokens()
        for stack in (self.forward_stack, self.backward_stack):
            for layer in stack.layers:
                layer.clear_cache()

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode); the next batch starts from zero."""
        self._carrier.reset()

    def forward(self, char_ids: torch.Tensor) -> BiLMOutput:
        check_char_ids(char_ids, self.config.char_cnn.n_characters)  # once per batch, where ids enter the model
        ids, lengths = add_sentence_boundaries(char_ids)  # (B, T+2, W), (B,)
        batch, steps = ids.shape[:2]
        mask = torch.arange(steps, device=ids.device) < lengths.unsqueeze(1)  # (B, T+2)
        tokens = self.embed_tokens(ids, mask)  # (B, T+2, P)
        if batch == 0:  # an empty batch: empty layers of the right widths (a stateful carrier is left as it was)
            per_layer = [tokens] * self.config.lstm.n_layers  # (0, T+2, P) each
            layers = [torch.cat([tokens, tokens], dim=-1)] * self.config.n_output_layers
            return BiLMOutput(layers, mask, tokens, per_layer, list(per_layer))

        # rows sorted longest first: at step t the running rows are a prefix of the batch
        order = torch.argsort(lengths, descending=True, stable=True)  # (B,)
        restore = torch.argsort(order)  # (B,)
        lengths_sorted = lengths[order]
        longest = int(lengths_sorted[0]) if batch else 0
        batch_sizes = (lengths_sorted.unsqueeze(0) > torch.arange(longest, device=ids.device).unsqueeze(1)
                       ).sum(1).tolist()
        x = tokens[order, :longest]  # (B, T', P)

        h0, c0 = self._initial_state(batch, tokens)  # (2, L, B, P), (2, L, B, C)
        h0, c0 = h0[:, :, order], c0[:, :, order]
        fwd, fwd_final = self.forward_stack(x, batch_sizes, [(h0[0, l], c0[0, l]) for l in range(h0.shape[1])])
        flip = reverse_index(lengths_sorted, longest)  # (B, T') reverses each row within its own length
        bwd, bwd_final = self.backward_stack(_gather_time(x, flip), batch_sizes,
                                             [(h0[1, l], c0[1, l]) for l in range(h0.shape[1])])
        bwd = [_gather_time(out, flip) for out in bwd]  # back to reading order

        pad = steps - longest
        fwd = [F.pad(out[restore], (0, 0, 0, pad)) for out in fwd]  # L x (B, T+2, P)
        bwd = [F.pad(out[restore], (0, 0, 0, pad)) for out in bwd]
        final = (torch.stack([torch.stack([h for h, _ in fwd_final]), torch.stack([h for h, _ in bwd_final])]),
                 torch.stack([torch.stack([c for _, c in fwd_final]), torch.stack([c for _, c in bwd_final])]))
        if self.stateful:
            self._carrier.update((final[0][:, :, restore], final[1][:, :, restore]))

        layers = [torch.cat([tokens, tokens], dim=-1)] + [torch.cat(pair, dim=-1) for pair in zip(fwd, bwd)]
        return BiLMOutput(layers, mask, tokens, fwd, bwd)

    def embed_tokens(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The token layer at every real slot, zeros elsewhere: ids (B, T, W), mask (B, T) -> (B, T, P)."""
        tokens = ids.new_zeros(*ids.shape[:2], self.char_encoder.output_dim, dtype=self._dtype())  # (B, T, P)
        tokens[mask] = self.char_encoder.encode(ids[mask]).to(tokens.dtype)  # real tokens, each distinct one once
        return tokens

    def _initial_state(self, batch: int, like: torch.Tensor) -> BiState:
        l = self.config.lstm
        if self.stateful:
            return self._carrier.initial(batch, l.projection_dim, l.dim, l.n_layers, like)
        return zero_state(l.n_layers, batch, l.projection_dim, l.dim, like)

    def _dtype(self) -> torch.dtype:
        return self.char_encoder.projection.weight.dtype


def reverse_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """Index (B, T) that reverses each row's first ``lengths[b]`` steps and leaves its padding in place."""
    t = torch.arange(steps, device=lengths.device).unsqueeze(0)  # (1, T)
    n = lengths.unsqueeze(1)  # (B, 1)
    return torch.where(t < n, n - 1 - t, t)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, T, D) reordered along time by index (B, T)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def remove_sentence_boundaries(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop ``<S>`` and ``</S>``: (B, T + 2, D) and mask (B, T + 2) -> (B, T, D) zero-padded and mask (B, T)."""
    new_mask = mask[:, 2:]  # position t + 2 is inside the row iff token t exists
    return tensor[:, 1:-1] * new_mask.unsqueeze(-1).to(tensor.dtype), new_mask
