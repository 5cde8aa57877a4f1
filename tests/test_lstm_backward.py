"""The hand-written backward pass of a layer's time loop (``LayerSequence``, used when training) against autograd
through the plain per-step reference, with rows ending at different steps and both clips firing."""

from __future__ import annotations

import pytest
import torch

from elmo.model.lstm import ProjectedLSTMLayer, reference_layer_forward


def _layer(clip: float | None, dtype=torch.float64) -> ProjectedLSTMLayer:
    torch.manual_seed(0)
    layer = ProjectedLSTMLayer(5, 7, 3, cell_clip=clip, proj_clip=clip).to(dtype)
    with torch.no_grad():
        for weight in (layer.weight_ih, layer.weight_hh, layer.weight_proj):
            weight.mul_(4.0)  # large enough that tight clips fire
        layer.bias.uniform_(-1, 1)
    return layer


def _inputs(lengths: list[int], dtype=torch.float64):
    batch, steps = len(lengths), max(lengths)
    x = torch.randn(batch, steps, 5, dtype=dtype, requires_grad=True)
    h0 = torch.randn(batch, 3, dtype=dtype, requires_grad=True)
    c0 = torch.randn(batch, 7, dtype=dtype, requires_grad=True)
    sizes = [sum(length > t for length in lengths) for t in range(steps)]
    return x, h0, c0, sizes


def _loss_and_grads(layer, run, x, h0, c0):
    """A loss that reads the outputs and both final states, and its gradients for every input and weight."""
    out, (h, c) = run()
    torch.manual_seed(1)
    loss = (out * torch.randn_like(out)).sum() + (h * torch.randn_like(h)).sum() + (c * torch.randn_like(c)).sum()
    params = [x, h0, c0, layer.weight_ih, layer.weight_hh, layer.weight_proj, layer.bias]
    return out, h, c, torch.autograd.grad(loss, params)


@pytest.mark.parametrize("clip", [None, 0.7])
@pytest.mark.parametrize("lengths", [[4, 4, 4], [6, 4, 4, 1], [3, 0]])
def test_values_and_gradients_match_autograd_through_the_reference(clip, lengths):
    layer = _layer(clip)
    x, h0, c0, sizes = _inputs(lengths)
    ours = _loss_and_grads(layer, lambda: layer(x, sizes, (h0, c0)), x, h0, c0)
    plain = _loss_and_grads(layer, lambda: reference_layer_forward(layer, x, torch.tensor(lengths), (h0, c0)),
                            x, h0, c0)
    for a, b in zip(ours[:3], plain[:3]):
        assert torch.allclose(a, b, atol=1e-12)
    for name, a, b in zip(["x", "h0", "c0", "W_ih", "W_hh", "W_proj", "bias"], ours[3], plain[3]):
        assert torch.allclose(a, b, atol=1e-10), name
    if clip and max(lengths) >= 4:  # the clips really fired, so their masks were exercised
        assert float(ours[0].detach().abs().max()) == pytest.approx(clip)
        assert float(ours[2].detach().abs().max()) == pytest.approx(clip)


def test_gradcheck_in_float64():
    layer = _layer(0.9)
    x, h0, c0, sizes = _inputs([3, 2])
    assert torch.autograd.gradcheck(lambda x, h0, c0: layer(x, sizes, (h0, c0))[0], (x, h0, c0))


def test_float32_training_forward_equals_the_inference_path():
    """The training path computes the same outputs as the no-grad (packed, blocked) path, to float32 rounding."""
    layer = _layer(0.7, torch.float32)
    x, h0, c0, sizes = _inputs([5, 3, 3], torch.float32)
    trained = layer(x, sizes, (h0, c0))[0]
    with torch.no_grad():
        inferred = layer(x, sizes, (h0, c0))[0]
    assert torch.allclose(trained, inferred, atol=1e-6)
