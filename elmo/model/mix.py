"""Ways a downstream task reads the biLM's layers (FORMAT.md §4.6 and the paper's projection variant)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from elmo.errors import UsageError


class ScalarMix(nn.Module):
    """``gamma * sum_k softmax(w)_k * layer_k``; at initialisation (w = 0, gamma = 1) the plain mean of the layers.

    With ``do_layer_norm`` each layer is first normalised by one mean and one variance over all unmasked elements
    of that layer in the batch, as AllenNLP does (so it depends on the batch composition).
    """

    def __init__(self, n_layers: int, do_layer_norm: bool = False, initial_weights: Sequence[float] | None = None,
                 initial_gamma: float = 1.0, trainable: bool = True, eps: float = 1e-13) -> None:
        super().__init__()
        weights = torch.zeros(n_layers) if initial_weights is None else torch.tensor(list(initial_weights), dtype=torch.float)
        if weights.shape != (n_layers,):
            raise UsageError(f"ScalarMix: {len(weights)} initial weights given for {n_layers} layers")
        self.weights = nn.Parameter(weights, requires_grad=trainable)  # (L+1,) pre-softmax
        self.gamma = nn.Parameter(torch.tensor([float(initial_gamma)]), requires_grad=trainable)
        self.do_layer_norm = do_layer_norm
        self.eps = eps

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        """L + 1 tensors (B, T, D) -> (B, T, D). ``mask`` (B, T) is needed only with layer norm."""
        if len(layers) != len(self.weights):
            raise UsageError(f"ScalarMix: got {len(layers)} layers, built for {len(self.weights)}")
        s = torch.softmax(self.weights, dim=0)  # (L+1,)
        if self.do_layer_norm:
            if mask is None:
                raise UsageError("ScalarMix with layer norm needs the mask")
            # as AllenNLP: 1e-13 vanishes in float16 / bfloat16, where a constant layer would then give NaN
            eps = self.eps if layers[0].dtype in (torch.float32, torch.float64) else max(self.eps, 1e-4)
            layers = [_masked_layer_norm(layer, mask, eps) for layer in layers]
        return self.gamma * sum(weight * layer for weight, layer in zip(s, layers))


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(layer.dtype)  # (B, T, 1)
    count = m.sum() * layer.shape[-1]
    mean = (layer * m).sum() / count
    variance = (((layer * m - mean) * m) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + eps)


class ComponentProjection(nn.Module):
    """The seed document's alternative to the scalar mix: the 1 + 2L components (token layer, every forward layer,
    every backward layer), concatenated and multiplied by one trainable matrix to ``projection_dim`` per token."""

    def __init__(self, component_dim: int, n_lstm_layers: int, projection_dim: int = 512) -> None:
        super().__init__()
        self.n_components = 1 + 2 * n_lstm_layers
        self.projection = nn.Linear(self.n_components * component_dim, projection_dim, bias=False)

    def forward(self, token: torch.Tensor, forward_layers: Sequence[torch.Tensor],
                backward_layers: Sequence[torch.Tensor]) -> torch.Tensor:
        """token (B, T, P), L forward and L backward (B, T, P) -> (B, T, projection_dim)."""
        parts = [token, *forward_layers, *backward_layers]
        if len(parts) != self.n_components:
            raise UsageError(f"ComponentProjection: got {len(parts)} components, built for {self.n_components}")
        return self.projection(torch.cat(parts, dim=-1))  # (B, T, 5P) @ (5P, D)
