"""Ways to read the biLM's layers: the one place that names them ("all", "top", "average", "mix", an index),
checks them and selects them (``Embedder``, ``embed_file``), and the learned readouts a downstream task holds
(``ScalarMix``, ``ComponentProjection``: docs/format.md §4.6 and the paper's projection variant). A fixed "mix" and
``ScalarMix`` are the same arithmetic (``scalar_weights``)."""

from __future__ import annotations

import math
from numbers import Real
from typing import Sequence, Union

import numpy as np
import torch
from torch import nn

from elmo.errors import UsageError
from elmo.limits import MAX_MIX_LAYERS, MAX_READOUT_DIM, MODEL_LIMITS, is_whole

Layers = Union[str, int]
LAYER_NAMES = ("all", "top", "average", "mix")


def check_layers(layers: Layers, n_layers: int, names: Sequence[str] = LAYER_NAMES, index: bool = True) -> Layers:
    """``layers`` as a valid choice among ``names`` (or a layer index, -n_layers..n_layers-1, when ``index``);
    a numpy integer becomes an int. Anything else is a one-line UsageError."""
    if isinstance(layers, np.integer):
        layers = int(layers)
    quoted = [repr(name) for name in names] + (["an int"] if index else [])
    choices = ", ".join(quoted[:-1]) + " or " + quoted[-1]
    if isinstance(layers, str):
        if layers not in names:
            raise UsageError(f"layers must be {choices}, got {layers!r}")
    elif isinstance(layers, bool) or not isinstance(layers, int) or not index:  # layers=True means nothing
        raise UsageError(f"layers must be {choices}, got {layers!r}")
    elif not -n_layers <= layers < n_layers:
        raise UsageError(f"layers={layers!r}: this model has layers 0..{n_layers - 1}")
    return layers


def check_flag(value: object, name: str, who: str) -> bool:
    """``value`` as a bool, refused in one line unless it is True or False (a NumPy bool too): a string such as
    "false" from a settings file is truthy and would silently switch the option on; None would fail inside torch."""
    if not isinstance(value, (bool, np.bool_)):
        raise UsageError(f"{who}: {name} must be True or False, got {value!r}")
    return bool(value)


def initial_mix(n_layers: int, weights: Sequence[float] | None, gamma: float, who: str) -> torch.Tensor:
    """The (L+1,) pre-softmax weights of a mix as given (zeros: equal weights), checked: one per layer, and they
    and ``gamma`` finite numbers (NaN would make every output NaN; an int of 400 digits overflows float)."""
    if not is_whole(n_layers, 1, MAX_MIX_LAYERS):
        raise UsageError(f"{who}: the number of layers must be a whole number from 1 to {MAX_MIX_LAYERS}, "
                         f"got {n_layers!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, Real):  # NumPy's numbers too
        raise UsageError(f"{who}: gamma must be a number, got {gamma!r}")
    try:
        mix = torch.zeros(n_layers) if weights is None else torch.tensor(list(weights), dtype=torch.float)
        finite_gamma = math.isfinite(gamma)
    except OverflowError:
        raise UsageError(f"{who}: the weights and gamma must be finite numbers, got an integer beyond float's "
                         "range (about 1.8e308) among them") from None
    except (TypeError, ValueError, RuntimeError):
        raise UsageError(f"{who}: the initial weights must be numbers, one per layer, got {weights!r}") from None
    if mix.shape != (n_layers,):
        raise UsageError(f"{who}: {len(mix)} initial weights given for {n_layers} layers (one per layer)")
    if not bool(torch.isfinite(mix).all()) or not finite_gamma:
        raise UsageError(f"{who}: the weights and gamma must be finite numbers, got {mix.tolist()} and {gamma}")
    return mix


def scalar_weights(weights: torch.Tensor, gamma: torch.Tensor | float) -> torch.Tensor:
    """(L+1,) pre-softmax weights -> what each layer is multiplied by: ``gamma * softmax(w)``."""
    return gamma * torch.softmax(weights, dim=0)


def select_layers(layers: torch.Tensor, which: Layers, mix: torch.Tensor) -> torch.Tensor:
    """(B, L+1, T, D) -> the requested view: "all" keeps the layer axis, anything else removes it; "mix" weighs
    the layers by ``mix`` (L+1,), from ``scalar_weights``."""
    if which == "all":
        return layers
    if which == "top":
        return layers[:, -1]
    if which == "average":
        return layers.mean(1)
    if which == "mix":
        return (layers * mix.view(1, -1, 1, 1)).sum(1)
    return layers[:, int(which)]


class ScalarMix(nn.Module):
    """``gamma * sum_k softmax(w)_k * layer_k``; at initialisation (w = 0, gamma = 1) the plain mean of the layers.

    With ``do_layer_norm`` each layer is first normalised by one mean and one variance over all unmasked elements
    of that layer in the batch, as AllenNLP does (so it depends on the batch composition).
    """

    def __init__(self, n_layers: int, do_layer_norm: bool = False, initial_weights: Sequence[float] | None = None,
                 initial_gamma: float = 1.0, trainable: bool = True, eps: float = 1e-13) -> None:
        super().__init__()
        weights = initial_mix(n_layers, initial_weights, initial_gamma, "ScalarMix")
        trainable = check_flag(trainable, "trainable", "ScalarMix")
        self.weights = nn.Parameter(weights, requires_grad=trainable)  # (L+1,) pre-softmax
        self.gamma = nn.Parameter(torch.tensor([float(initial_gamma)]), requires_grad=trainable)
        self.do_layer_norm = check_flag(do_layer_norm, "do_layer_norm", "ScalarMix")
        self.eps = eps

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        """L + 1 tensors (B, T, D) -> (B, T, D). ``mask`` (B, T) is needed only with layer norm."""
        if len(layers) != len(self.weights):
            raise UsageError(f"ScalarMix: got {len(layers)} layers, built for {len(self.weights)}")
        _check_shapes(layers, mask)
        s = scalar_weights(self.weights, self.gamma)  # (L+1,)
        if self.do_layer_norm:
            if mask is None:
                raise UsageError("ScalarMix with layer norm needs the mask")
            # as AllenNLP: 1e-13 vanishes in float16 / bfloat16, where a constant layer would then give NaN
            eps = self.eps if layers[0].dtype in (torch.float32, torch.float64) else max(self.eps, 1e-4)
            layers = [_masked_layer_norm(layer, mask, eps) for layer in layers]
        return sum(weight * layer for weight, layer in zip(s, layers))


def _check_shapes(layers: Sequence[torch.Tensor], mask: torch.Tensor | None) -> None:
    """Refuse layers of different shapes (a broadcasting error inside torch) and a mask that is not (B, T) of the
    layers' (B, T, D): a (T,) mask would broadcast over the batch and give layer norm a wrong count, silently."""
    shape = tuple(layers[0].shape)
    other = next((i for i, layer in enumerate(layers) if tuple(layer.shape) != shape), None)
    if other is not None:
        raise UsageError(f"ScalarMix: layer {other} has shape {tuple(layers[other].shape)}, layer 0 {shape}; "
                         "every layer must have the same shape")
    if mask is not None and tuple(mask.shape) != shape[:-1]:
        raise UsageError(f"ScalarMix: the mask has shape {tuple(mask.shape)}, the layers {shape}; pass a mask of "
                         f"shape {shape[:-1]} (True at real tokens)")


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
        for name, value, most in (("component_dim", component_dim, MAX_READOUT_DIM),
                                  ("n_lstm_layers", n_lstm_layers, MODEL_LIMITS["lstm.n_layers"]),
                                  ("projection_dim", projection_dim, MAX_READOUT_DIM)):
            if not is_whole(value, 1, most):
                raise UsageError(f"ComponentProjection: {name} must be a whole number from 1 to {most:,}, "
                                 f"got {value!r}")
        self.n_components = 1 + 2 * n_lstm_layers
        self.projection = nn.Linear(self.n_components * component_dim, projection_dim, bias=False)

    def forward(self, token: torch.Tensor, forward_layers: Sequence[torch.Tensor],
                backward_layers: Sequence[torch.Tensor]) -> torch.Tensor:
        """token (B, T, P), L forward and L backward (B, T, P) -> (B, T, projection_dim)."""
        parts = [token, *forward_layers, *backward_layers]
        if len(parts) != self.n_components:
            raise UsageError(f"ComponentProjection: got {len(parts)} components, built for {self.n_components}")
        return self.projection(torch.cat(parts, dim=-1))  # (B, T, 5P) @ (5P, D)
