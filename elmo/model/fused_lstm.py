"""``torch.nn.LSTM(proj_size=...)`` as an optional engine for models whose clips are off.

PyTorch's LSTM cannot clip the cell or the projection, so it computes ELMo exactly only when ``cell_clip`` and
``proj_clip`` are null (or never reached). Where that holds it moves the time loop into C++; ``use_fused_lstm``
refuses a model with clips unless ``allow_clips=True`` (then results differ wherever a clip would have fired).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmo.errors import UsageError
from elmo.model.bilm import BiLM
from elmo.model.lstm import ProjectedLSTMLayer, State


class FusedLayer(nn.Module):
    """A ProjectedLSTMLayer's weights inside ``nn.LSTM``; same call signature as the layer."""

    def __init__(self, layer: ProjectedLSTMLayer) -> None:
        super().__init__()
        self.proj_size = layer.proj_size
        self.lstm = nn.LSTM(layer.input_size, layer.cell_size, proj_size=layer.proj_size, batch_first=True)
        with torch.no_grad():
            self.lstm.weight_ih_l0.copy_(layer.weight_ih)
            self.lstm.weight_hh_l0.copy_(layer.weight_hh)
            self.lstm.bias_ih_l0.copy_(layer.bias)  # forget bias already folded in
            self.lstm.bias_hh_l0.zero_()
            self.lstm.weight_hr_l0.copy_(layer.weight_proj)
        self.lstm.to(layer.weight_ih.dtype)

    def clear_cache(self) -> None:
        """Nothing to drop: ``nn.LSTM`` reads its own weights on every call (``BiLM.clear_caches`` calls this)."""

    def forward(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        h, c = state
        running = torch.tensor(batch_sizes, dtype=torch.long)  # (T,) rows still running at each step
        lengths = (running.unsqueeze(0) > torch.arange(x.shape[0]).unsqueeze(1)).sum(1)  # (B,)
        steps = len(batch_sizes)
        packed = pack_padded_sequence(x[:, :steps], lengths, batch_first=True, enforce_sorted=True)
        out, (h_n, c_n) = self.lstm(packed, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # (B, T, P), zeros past ends
        return out, (h_n[0], c_n[0])


def use_fused_lstm(bilm: BiLM, allow_clips: bool = False) -> None:
    """Replace every layer of ``bilm``'s stacks by a FusedLayer (inference only; weights are copied)."""
    lstm = bilm.config.lstm
    if (lstm.cell_clip or lstm.proj_clip) and not allow_clips:
        raise UsageError("this model clips its LSTM (cell_clip/proj_clip), which nn.LSTM cannot do: results would "
                         "differ; pass allow_clips=True to accept that")
    if lstm.cell_clip or lstm.proj_clip:
        warnings.warn("fused nn.LSTM ignores the cell and projection clips: outputs differ where they would fire")
    for stack in (bilm.forward_stack, bilm.backward_stack):
        stack.layers = nn.ModuleList(FusedLayer(layer) if isinstance(layer, ProjectedLSTMLayer) else layer
                                     for layer in stack.layers)
