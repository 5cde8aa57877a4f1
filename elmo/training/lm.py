"""The biLM as a language model: the BiLM's encoder and stacks run one direction at a time, plus the softmax."""

from __future__ import annotations

import math

import torch
from torch import nn

from elmo.config import ElmoConfig
from elmo.model.bilm import BiLM
from elmo.model.lstm import State
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
        """A new model, initialised as bilm-tf initialises it (TRAINING.md, "Model and loss")."""
        model = cls(BiLM.from_config(config), LMSoftmax(vocab_size, config.lstm.projection_dim), dropout)
        init_like_bilm_tf(model.bilm)
        return model

    def forward(self, forward: tuple[torch.Tensor, torch.Tensor], backward: tuple[torch.Tensor, torch.Tensor],
                states: list[list[State]], sample: tuple[torch.Tensor, int] | None,
                sampler: LogUniformSampler | None = None) -> tuple[list[torch.Tensor], list[list[State]]]:
        """Each direction's mean loss and final states.

        forward / backward: (char ids (B, T, W), targets (B, T)) of the two streams; states [direction][layer].
        ``sample`` = (candidates, draws) from ``sampler`` for the sampled softmax, or None for the full softmax.
        """
        losses, new_states = [], []
        for direction, (ids, targets) in enumerate((forward, backward)):
            hidden, finals = self.hidden(ids, direction, states[direction])  # (B, T, P)
            hidden, targets = hidden.reshape(-1, hidden.shape[-1]).float(), targets.reshape(-1)  # (N, P), (N,)
            if sample is None:
                loss = self.softmax.full_loss(hidden, targets) / targets.ge(0).sum().clamp(min=1)
            else:
                candidates, tries = sample
                candidates = candidates.to(hidden.device)
                loss = self.softmax.sampled_loss(
                    hidden, targets, candidates,
                    sampler.log_expected_count(targets.cpu(), tries).to(hidden.device),
                    sampler.log_expected_count(candidates.cpu(), tries).to(hidden.device))
            losses.append(loss)
            new_states.append(finals)
        return losses, new_states

    def stack(self, direction: int):
        return self.bilm.forward_stack if direction == 0 else self.bilm.backward_stack

    def hidden(self, char_ids: torch.Tensor, direction: int, states: list[State]) -> tuple[torch.Tensor, list[State]]:
        """Top-layer outputs of one direction over fully packed windows: (B, T, W) -> (B, T, P), final states."""
        batch, steps, width = char_ids.shape
        flat = char_ids.reshape(batch * steps, width)  # (B*T, W)
        real = flat.gt(0).any(-1)  # padding slots only where a one-pass evaluation ran out of text
        tokens = flat.new_zeros(batch * steps, self.bilm.config.lstm.projection_dim, dtype=self.softmax.weight.dtype)
        tokens[real] = self.bilm.char_encoder(flat[real])
        x = tokens.view(batch, steps, -1)  # (B, T, P)
        outputs, finals = self.stack(direction)(x, [batch] * steps, states)
        top = outputs[-1]
        if self.training and self.dropout > 0:
            top = nn.functional.dropout(top, self.dropout, training=True)
        return top, finals

    def zero_states(self, batch: int, device: torch.device | str = "cpu") -> list[list[State]]:
        """[direction][layer] -> (h (B, P), c (B, C)) zeros."""
        l = self.bilm.config.lstm
        return [[(torch.zeros(batch, l.projection_dim, device=device), torch.zeros(batch, l.dim, device=device))
                 for _ in range(l.n_layers)] for _ in range(2)]


def init_like_bilm_tf(bilm: BiLM) -> None:
    """Character embeddings U(-1, 1); CNN kernels U(-0.05, 0.05); highway and projection N(0, sqrt(1/F)) with the
    highway gate bias -2; LSTM kernels Glorot-uniform, biases 0 (+1 on the forget gate, TF's constant)."""
    encoder = bilm.char_encoder
    n_filters = encoder.config.n_filters
    with torch.no_grad():
        encoder.char_embedding.weight.uniform_(-1.0, 1.0)
        encoder.char_embedding.weight[0].zero_()
        for conv in encoder.convolutions:
            conv.weight.uniform_(-0.05, 0.05)
            conv.bias.zero_()
        for highway in encoder.highways:
            for linear in (highway.gate, highway.transform):
                linear.weight.normal_(0.0, math.sqrt(1.0 / n_filters))
            highway.gate.bias.fill_(-2.0)
            highway.transform.bias.zero_()
        encoder.projection.weight.normal_(0.0, math.sqrt(1.0 / n_filters))
        encoder.projection.bias.zero_()
        for stack in (bilm.forward_stack, bilm.backward_stack):
            for layer in stack.layers:
                # TF's kernel is one (In + P, 4C) matrix: Glorot bounds use its fan-in and fan-out
                fan_in, fan_out = layer.input_size + layer.proj_size, 4 * layer.cell_size
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                layer.weight_ih.uniform_(-bound, bound)
                layer.weight_hh.uniform_(-bound, bound)
                proj_bound = math.sqrt(6.0 / (layer.cell_size + layer.proj_size))
                layer.weight_proj.uniform_(-proj_bound, proj_bound)
                layer.bias.zero_()
                layer.bias[layer.cell_size : 2 * layer.cell_size] = 1.0
