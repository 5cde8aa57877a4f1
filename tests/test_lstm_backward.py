"""The hand-written backward pass of a layer's time loop (``LayerSequence``, used when training) against autograd
through the package's own step (``lstm_step``) and through the independent per-step reference, with rows ending at
different steps and both clips firing."""

from __future__ import annotations

import pytest
import torch

from elmo.model.cell import lstm_step
from elmo.model.lstm import ProjectedLSTMLayer
from elmo.model.lstm_sequence import LayerSequence
from tests.reference_engines import reference_layer_forward


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


def _autograd_sequence(x, weight_ih, bias, h0, c0, weight_hh, weight_proj, sizes, cell_clip, proj_clip):
    """LayerSequence's contract computed by autograd through ``lstm_step`` step by step (same packed layout)."""
    projected = x @ weight_ih.t() + bias  # (N, 4C)
    h, c, outputs, start = h0, c0, [], 0
    for n in sizes:
        z = projected[start : start + n] + h[:n] @ weight_hh.t()  # (n, 4C)
        r, c_new = lstm_step(z, c[:n], lambda m: m @ weight_proj.t(), cell_clip, proj_clip)
        outputs.append(r)
        h, c = torch.cat([r, h[n:]]), torch.cat([c_new, c[n:]])
        start += n
    return torch.cat(outputs), h, c


@pytest.mark.parametrize("clip", [None, 0.7])
def test_hand_written_backward_equals_autograd_through_the_step(clip):
    """The same step function, differentiated by hand (LayerSequence) and by autograd: outputs and every gradient."""
    torch.manual_seed(2)
    sizes, cells, proj, width = [4, 3, 3, 1], 6, 3, 5
    x = torch.randn(sum(sizes), width, dtype=torch.float64, requires_grad=True)
    weight_ih = (2 * torch.randn(4 * cells, width, dtype=torch.float64)).requires_grad_()
    bias = torch.randn(4 * cells, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, proj, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(4, cells, dtype=torch.float64, requires_grad=True)
    weight_hh = (2 * torch.randn(4 * cells, proj, dtype=torch.float64)).requires_grad_()
    weight_proj = (2 * torch.randn(proj, cells, dtype=torch.float64)).requires_grad_()
    inputs = (x, weight_ih, bias, h0, c0, weight_hh, weight_proj)
    ours = _one_layer(*inputs, sizes, clip, clip)
    plain = _autograd_sequence(*inputs, sizes, clip, clip)
    weights = [torch.randn_like(t) for t in plain]
    grads = [torch.autograd.grad(sum((w * t).sum() for w, t in zip(weights, run)), inputs) for run in (ours, plain)]
    for a, b in zip(ours, plain):
        assert torch.allclose(a, b, atol=1e-13)
    for name, a, b in zip(["x", "W_ih", "bias", "h0", "c0", "W_hh", "W_proj"], *grads):
        assert torch.allclose(a, b, atol=1e-12), name
    if clip:
        assert float(ours[0].detach().abs().max()) == pytest.approx(clip)
        assert float(ours[2].detach().abs().max()) == pytest.approx(clip)
    assert torch.autograd.gradcheck(lambda *args: _one_layer(*args, sizes, clip, clip), inputs)


def _one_layer(x, weight_ih, bias, h0, c0, weight_hh, weight_proj, sizes, cell_clip, proj_clip):
    """LayerSequence over one layer (D = 1)."""
    out, h, c = LayerSequence.apply(*(t[None] for t in (x, weight_ih, bias, h0, c0, weight_hh, weight_proj)), sizes,
                                    cell_clip, proj_clip)
    return out[0], h[0], c[0]


@pytest.mark.parametrize("sizes", [[4, 4, 4], [4, 3, 3, 1]])
def test_layers_side_by_side_equal_each_layer_alone(sizes):
    """Two layers with their own weights and inputs in one LayerSequence (D = 2, as training runs the two
    directions) give each layer's values and gradients of running it alone."""
    torch.manual_seed(5)
    cells, proj = 6, 3
    pairs = [[(s * torch.randn(*shape, dtype=torch.float64)).requires_grad_() for _ in range(2)]
             for s, shape in ((1, (sum(sizes), 5)), (2, (4 * cells, 5)), (1, (4 * cells,)), (1, (4, proj)),
                              (1, (4, cells)), (2, (4 * cells, proj)), (2, (proj, cells)))]
    together = LayerSequence.apply(*(torch.stack(pair) for pair in pairs), sizes, 0.7, 0.7)
    weights = [torch.randn_like(t) for t in together]
    grads = torch.autograd.grad(sum((w * t).sum() for w, t in zip(weights, together)), [t for p in pairs for t in p])
    for d in range(2):
        alone = _one_layer(*(pair[d] for pair in pairs), sizes, 0.7, 0.7)
        for a, b in zip(together, alone):
            assert torch.allclose(a[d], b, atol=1e-13)
        alone_grads = torch.autograd.grad(sum((w[d] * t).sum() for w, t in zip(weights, alone)),
                                          [pair[d] for pair in pairs])
        for a, b in zip(grads[d::2], alone_grads):
            assert torch.allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("clip", [None, 0.7])
def test_gradcheck_of_the_step_in_float64(clip):
    torch.manual_seed(3)
    z = (3 * torch.randn(3, 4 * 5, dtype=torch.float64)).requires_grad_()
    c_prev = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    weight_proj = (2 * torch.randn(2, 5, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda z, c_prev, w: lstm_step(z, c_prev, lambda m: m @ w.t(), clip, clip), (z, c_prev, weight_proj))


def test_in_place_step_equals_the_autograd_step():
    torch.manual_seed(4)
    z, c_prev, weight_proj = 3 * torch.randn(5, 4 * 6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64), \
        torch.randn(2, 6, dtype=torch.float64)
    plain = lstm_step(z, c_prev, lambda m: m @ weight_proj.t(), 0.8, 0.5)
    in_place = lstm_step(z.clone(), c_prev, lambda m: m @ weight_proj.t(), 0.8, 0.5, in_place=True)
    for a, b in zip(plain, in_place):
        assert torch.allclose(a, b, atol=1e-15)


def test_layers_side_by_side_one_by_one_path_equals_the_joint_path():
    """``LayersSideBySide`` (training's layers, positions time-major (D, N, ·)) runs one LayerSequence over both
    directions; under autocast it runs each layer on its own (B, T, ·) view instead: same outputs, states and
    gradients."""
    from elmo.model.lstm import LayersSideBySide

    torch.manual_seed(7)
    layers = [_layer(0.7) for _ in range(2)]
    with torch.no_grad():
        layers[1].weight_hh.mul_(-0.5)  # two different layers
    batch, steps = 3, 4
    x = torch.randn(2, steps * batch, 5, dtype=torch.float64, requires_grad=True)
    state = (torch.randn(2, batch, 3, dtype=torch.float64), torch.randn(2, batch, 7, dtype=torch.float64))
    side_by_side = LayersSideBySide(layers)
    runs = [side_by_side(x, [batch] * steps, state), side_by_side._one_by_one(x, [batch] * steps, state)]
    weights = [torch.randn_like(t) for t in (runs[0][0], *runs[0][1])]
    params = [x] + [p for layer in layers for p in layer.parameters()]
    grads = [torch.autograd.grad(sum((w * t).sum() for w, t in zip(weights, (out, *final))), params)
             for out, final in runs]
    for a, b in zip((runs[0][0], *runs[0][1]), (runs[1][0], *runs[1][1])):
        assert torch.allclose(a, b, atol=1e-12)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_dropout_keeps_one_minus_p_scaled_and_passes_the_gradient_where_kept(dtype):
    """Each value is kept with probability 1 - p (here within 5 standard deviations over 200,000 draws) and then
    equals x / (1 - p); dropped values are 0; the gradient is the same mask and scale; the draws follow the seed."""
    from elmo.model.lstm import training_dropout

    p, count = 0.3, 200_000
    x = (torch.rand(count, dtype=dtype) + 1.0).requires_grad_()  # no zeros: a 0 output means dropped
    torch.manual_seed(5)
    out = training_dropout(x, p)
    kept = out.detach() != 0
    assert out.dtype == dtype and out.shape == x.shape
    assert abs(kept.double().mean().item() - (1 - p)) < 5 * ((p * (1 - p) / count) ** 0.5)
    torch.testing.assert_close(out.detach()[kept], x.detach()[kept] / (1 - p), rtol=1e-6, atol=0)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, kept.to(dtype) / (1 - p), rtol=1e-6, atol=0)
    torch.manual_seed(5)
    assert torch.equal(training_dropout(x.detach(), p) != 0, kept)


@pytest.mark.parametrize("clip", [None, 0.7])
def test_recorded_step_equals_lstm_step_and_records_its_intermediates(clip):
    """``recorded_step`` (gates in the order o, i, f, g, results written into a record's views) against
    ``lstm_step`` (PyTorch's order i, f, g, o): the same r and c, and the recorded tanh(c), m and values before each
    clip, with clips that fire."""
    from elmo.model.cell import StepRecord, recorded_step

    torch.manual_seed(4)
    rows, cells, proj = 5, 6, 3
    z = 2 * torch.randn(rows, 4 * cells, dtype=torch.float64)  # i, f, g, o
    c_prev = 2 * torch.randn(rows, cells, dtype=torch.float64)
    weight_proj = 2 * torch.randn(proj, cells, dtype=torch.float64)
    r, c = lstm_step(z.clone(), c_prev, lambda m: m @ weight_proj.t(), clip, clip)
    gates = torch.roll(z, cells, dims=1)  # o, i, f, g
    o, i, f, g = gates.chunk(4, dim=1)
    new = lambda width: torch.full((rows, width), float("nan"), dtype=torch.float64)  # noqa: E731
    record = StepRecord(gates, gates[:, : 3 * cells], o, i, f, g, new(cells) if clip else None, new(cells),
                        new(cells), new(cells), new(proj) if clip else None, new(proj))
    recorded_step(record, c_prev, lambda m, out: torch.mm(m, weight_proj.t(), out=out), clip, clip)
    torch.testing.assert_close(record.output, r, rtol=0, atol=1e-14)
    torch.testing.assert_close(record.memory, c, rtol=0, atol=1e-14)
    torch.testing.assert_close(record.tanh_memory, torch.tanh(c), rtol=0, atol=1e-14)
    torch.testing.assert_close(record.hidden, torch.sigmoid(z[:, 3 * cells :]) * torch.tanh(c), rtol=0, atol=1e-14)
    if clip:
        assert float(record.memory_raw.abs().max()) > clip and float(record.output_raw.abs().max()) > clip
        assert torch.equal(record.memory_raw.clamp(-clip, clip), record.memory)
        assert torch.equal(record.output_raw.clamp(-clip, clip), record.output)
