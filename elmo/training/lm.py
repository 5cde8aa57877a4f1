"""The biLM as a language model: the BiLM's encoder and both directions' stacks side by side, plus the softmax."""

from __future__ import annotations

from contextlib import nullcontext
from numbers import Real
from typing import Sequence

import torch
from torch import nn

from elmo.config import ElmoConfig
from elmo.errors import InputTypeError, UsageError
from elmo.limits import is_whole
from elmo.model.bilm import BiLM, token_layer
from elmo.model.lstm import LayersSideBySide, State, run_stack, training_dropout
from elmo.training.softmax import LMSoftmax, LogUniformSampler, check_softmax_size


class LanguageModel(nn.Module):
    """``bilm`` (exported as ELMo) + one softmax shared by the forward and the backward LM."""

    def __init__(self, bilm: BiLM, softmax: LMSoftmax, dropout: float = 0.0) -> None:
        """``dropout`` from 0 to below 1, checked here: torch refuses 1.5 only at the first training step, and takes
        NaN, -0.1 or 1 (every input zero) without a word."""
        if isinstance(dropout, bool) or not isinstance(dropout, Real) or not 0 <= dropout < 1:
            raise UsageError(f"LanguageModel: dropout must be a number from 0 to below 1, got {dropout!r}")
        super().__init__()
        self.bilm = bilm
        self.softmax = softmax
        self.dropout = dropout

    @classmethod
    def from_config(cls, config: ElmoConfig, vocab_size: int, dropout: float = 0.1) -> "LanguageModel":
        """A new model, initialised as bilm-tf initialises it (docs/training.md §3; the modules' own
        ``reset_parameters``)."""
        if not isinstance(config, ElmoConfig):
            raise InputTypeError(f"LanguageModel.from_config takes an ElmoConfig (e.g. elmo.config.PRESETS['tiny']), "
                                 f"got {type(config).__name__}")
        if not is_whole(vocab_size, 1):  # 0 gives a softmax of no rows, -1 or 3.0 an error inside torch
            raise UsageError(f"LanguageModel: vocab_size must be a whole number of at least 1, got {vocab_size!r}")
        check_softmax_size(vocab_size, config.lstm.projection_dim, f"a vocabulary of {vocab_size:,} words")
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
        batch, steps = f_ids.shape[:2]
        # both directions side by side, positions time-major: (2, N) with N = T x B, step t's rows contiguous
        with torch.no_grad() if freeze_bilm else nullcontext():
            ids = torch.stack([f_ids, b_ids]).transpose(1, 2)  # (2, T, B, W)
            tokens = self.encode_tokens(ids.reshape(2 * steps, batch, -1))  # (2T, B, P)
            x = tokens.view(2, steps * batch, -1)  # (2, N, P)
            paired = [tuple(torch.stack(pair) for pair in zip(*layer)) for layer in zip(*states)]  # [(h, c) (2, B, ·)]
            outputs, finals = run_stack(self.layers_side_by_side(), x, [batch] * steps, paired,
                                        self.bilm.config.lstm.use_skip_connections,
                                        self.dropout if self.training else 0.0)
            top = outputs[-1]  # (2, N, P)
            if self.training and self.dropout > 0:
                top = training_dropout(top, self.dropout)
        new_states = [[(h[d], c[d]) for h, c in finals] for d in range(2)]
        hidden_all = top.reshape(2 * steps * batch, -1).to(self.softmax.weight.dtype)  # (2N, P); float32 under autocast
        targets = torch.stack([f_targets, b_targets]).transpose(1, 2).reshape(-1)  # (2N,) in the same order
        with torch.autocast(hidden_all.device.type, enabled=False):  # the softmax in float32 under mixed precision
            if samples is None:
                per_position = self.softmax.full_loss(hidden_all, targets, reduction="none")  # (2N,)
            else:
                streams = targets.view(2, -1)  # (2, N)
                candidates = torch.stack([drawn for drawn, _ in samples]).to(targets.device)  # (2, S)
                per_position = self.softmax.sampled_loss(
                    hidden_all.view(2, -1, hidden_all.shape[1]), streams, candidates,
                    *log_expected_counts(sampler, streams, samples, hidden_all.device), reduction="none").view(-1)
        valid = targets.ge(0).float()
        halves = per_position.mul(valid).view(2, -1).sum(1) / valid.view(2, -1).sum(1).clamp(min=1)
        return [halves[0], halves[1]], new_states

    def layers_side_by_side(self) -> list[LayersSideBySide]:
        """Layer l of the forward and the backward stack, run together (``run_stack``'s layers)."""
        return [LayersSideBySide(pair) for pair in zip(self.bilm.forward_stack.layers, self.bilm.backward_stack.layers)]

    def encode_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token vectors of (B, T, W) ids -> (B, T, P); all-zero padding slots (one-pass evaluation) stay zero."""
        real = char_ids.gt(0).any(-1)  # (B, T)
        return token_layer(self.bilm.char_encoder.encode, char_ids, real, self.bilm.config.lstm.projection_dim,
                           self.softmax.weight.dtype)

    def zero_states(self, batch: int, device: torch.device | str = "cpu") -> list[list[State]]:
        """[direction][layer] -> (h (B, P), c (B, C)) zeros."""
        l = self.bilm.config.lstm
        return [[(torch.zeros(batch, l.projection_dim, device=device), torch.zeros(batch, l.dim, device=device))
                 for _ in range(l.n_layers)] for _ in range(2)]


def log_expected_counts(sampler: LogUniformSampler, targets: torch.Tensor, samples: Sequence[tuple[torch.Tensor, int]],
                        device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each stream's log expected counts under its own draw (bilm-tf draws each direction's negatives separately):
    of its targets (D, N) and of its candidates (D, S). Negative targets (masked later) count as id 0."""
    pairs = [(sampler.log_expected_count(t.clamp(min=0).cpu(), tries, len(drawn)),
              sampler.log_expected_count(drawn, tries, len(drawn))) for t, (drawn, tries) in zip(targets, samples)]
    return tuple(torch.stack(side).to(device) for side in zip(*pairs))
