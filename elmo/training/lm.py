"""The biLM as a language model: the BiLM's encoder and stacks run one direction at a time, plus the softmax."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Sequence

import torch
from torch import nn

from elmo.config import ElmoConfig
from elmo.model.bilm import BiLM, token_layer
from elmo.model.lstm import LSTMStack, State
from elmo.training.softmax import LMSoftmax, LogUniformSampler


class LanguageModel(nn.Module):
    """``bilm`` (exported as ELMo) + one softmax shared by the forward and the backward LM."""

    def __init__(self, bilm: BiLM, softmax: LMSoftmax, dropout: float = 0.0) -> None:
        super().__init__()
        self.bilm = bilm
        self.softmax = softmax
        self.dropout = dropout
        for stack in (bilm.forward_stack, bilm.backward_stack):
            stack.dropout = dropout

    @classmethod
    def from_config(cls, config: ElmoConfig, vocab_size: int, dropout: float = 0.1) -> "LanguageModel":
        """A new model, initialised as bilm-tf initialises it (docs/training.md §3; the modules' own
        ``reset_parameters``)."""
        return cls(BiLM.from_config(config), LMSoftmax(vocab_size, config.lstm.projection_dim), dropout)

    def forward(self, forward: tuple[torch.Tensor, torch.Tensor], backward: tuple[torch.Tensor, torch.Tensor],
                states: list[list[State]], samples: Sequence[tuple[torch.Tensor, int]] | None,
                sampler: LogUniformSampler | None = None, freeze_bilm: bool = False,
                ) -> tuple[list[torch.Tensor], list[list[State]]]:
        """Each direction's mean loss and final states.

        forward / backward: (char ids (B, T, W), targets (B, T)) of the two streams; states [direction][layer].
        ``samples`` = one (candidates, draws) from ``sampler`` per direction for the sampled softmax (bilm-tf draws
        each direction's negatives separately), or None for the full softmax. Both directions share one
        character-encoder call and the softmax weights. ``freeze_bilm``: the biLM runs without gradients (only the
        softmax learns).
        """
        (f_ids, f_targets), (b_ids, b_targets) = forward, backward
        batch = f_ids.shape[0]
        hidden, new_states = [], []
        with torch.no_grad() if freeze_bilm else nullcontext():
            tokens = self.encode_tokens(torch.cat([f_ids, b_ids]))  # (2B, T, P)
            for direction, x in enumerate((tokens[:batch], tokens[batch:])):
                top, finals = self.run_stack(x, direction, states[direction])  # (B, T, P)
                hidden.append(top.reshape(-1, top.shape[-1]))
                new_states.append(finals)
        hidden_all = torch.cat(hidden).float()  # (2N, P)
        targets = torch.cat([f_targets.reshape(-1), b_targets.reshape(-1)])  # (2N,)
        with torch.autocast(hidden_all.device.type, enabled=False):  # the softmax in float32 under mixed precision
            if samples is None:
                per_position = self.softmax.full_loss(hidden_all, targets, reduction="none")  # (2N,)
            else:
                directions = targets.chunk(2)
                candidates = [c.to(targets.device) for c, _ in samples]
                # every softmax row the step needs (both directions' targets and negatives) in one gather
                rows = self.softmax.gather([ids for t, c in zip(directions, candidates) for ids in (t, c)])
                per_position = torch.cat([self._sampled(h, t, c, sample, sampler, rows[2 * d : 2 * d + 2])  # (N,)
                                          for d, (h, t, c, sample) in enumerate(zip(hidden_all.chunk(2), directions,
                                                                                    candidates, samples))])
        valid = targets.ge(0).float()
        halves = per_position.mul(valid).view(2, -1).sum(1) / valid.view(2, -1).sum(1).clamp(min=1)
        return [halves[0], halves[1]], new_states

    def _sampled(self, hidden: torch.Tensor, targets: torch.Tensor, candidates: torch.Tensor,
                 sample: tuple[torch.Tensor, int], sampler: LogUniformSampler,
                 rows: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Per-position sampled-softmax loss (N,) of one direction's hidden states (N, P) against its negatives
        (``candidates``: the sample's ids on the hidden states' device; ``rows``: the softmax rows of its targets and
        negatives, ``LMSoftmax.gather``)."""
        drawn, tries = sample  # the sampler's own (CPU) copy of the ids
        n = len(drawn)
        return self.softmax.sampled_loss(
            hidden, targets, candidates,
            sampler.log_expected_count(targets.clamp(min=0).cpu(), tries, n).to(hidden.device),  # -1: masked later
            sampler.log_expected_count(drawn, tries, n).to(hidden.device), reduction="none", rows=rows)

    def stack(self, direction: int) -> LSTMStack:
        """The LSTM stack of one direction (0 forward, 1 backward)."""
        return self.bilm.forward_stack if direction == 0 else self.bilm.backward_stack

    def encode_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token vectors of (B, T, W) ids -> (B, T, P); all-zero padding slots (one-pass evaluation) stay zero."""
        real = char_ids.gt(0).any(-1)  # (B, T)
        return token_layer(self.bilm.char_encoder.encode, char_ids, real, self.bilm.config.lstm.projection_dim,
                           self.softmax.weight.dtype)

    def run_stack(self, tokens: torch.Tensor, direction: int,
                  states: list[State]) -> tuple[torch.Tensor, list[State]]:
        """One direction's top-layer outputs over fully packed windows: (B, T, P) -> (B, T, P), final states."""
        batch, steps = tokens.shape[:2]
        outputs, finals = self.stack(direction)(tokens, [batch] * steps, states)
        top = outputs[-1]
        if self.training and self.dropout > 0:
            top = nn.functional.dropout(top, self.dropout, training=True)
        return top, finals

    def hidden(self, char_ids: torch.Tensor, direction: int, states: list[State]) -> tuple[torch.Tensor, list[State]]:
        """Top-layer outputs of one direction: (B, T, W) ids -> (B, T, P), final states."""
        return self.run_stack(self.encode_tokens(char_ids), direction, states)

    def zero_states(self, batch: int, device: torch.device | str = "cpu") -> list[list[State]]:
        """[direction][layer] -> (h (B, P), c (B, C)) zeros."""
        l = self.bilm.config.lstm
        return [[(torch.zeros(batch, l.projection_dim, device=device), torch.zeros(batch, l.dim, device=device))
                 for _ in range(l.n_layers)] for _ in range(2)]
