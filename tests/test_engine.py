"""The frozen inference engine apart from the trainable model: it equals the model's own forward pass, never changes
the model, is a snapshot of the weights it was built from, and is rebuilt (not invalidated) when they change."""

import copy

import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.downstream import Elmo
from elmo.embed import Embedder
from elmo.errors import UsageError
from elmo.model.engine import InferenceEngine
from tests.conftest import random_bilm, small_config

BATCH = [["The", "bank", "closed"], ["A", "river", "bank", "flooded", "."], []]
BIG = dict(dim=2048, projection_dim=512)  # large enough for the LSTM matrices to be pre-packed


def _snapshot(module: torch.nn.Module) -> tuple:
    """Everything an engine might change in a module: values, versions, devices, modes, attributes."""
    return ({k: v.clone() for k, v in module.state_dict().items()},
            [(p._version, p.device, p.dtype, p.requires_grad) for p in module.parameters()],
            [(m.training, sorted(vars(m))) for m in module.modules()])


def _same(a: tuple, b: tuple) -> bool:
    return (a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
            and a[1] == b[1] and a[2] == b[2])


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_building_and_running_an_engine_changes_nothing_in_the_model(precision):
    bilm = random_bilm(small_config(**BIG), seed=2).train()  # a model in training mode stays so
    before = _snapshot(bilm)
    engine = InferenceEngine.build(bilm, precision, cache_words=["The", "bank"])
    engine(batch_to_ids(BATCH))
    Embedder(bilm, precision=precision).embed(BATCH)
    assert _same(before, _snapshot(bilm))


def test_the_engine_equals_the_model_forward_in_both_modes():
    for stateful in (False, True):
        bilm = random_bilm(small_config(), seed=3, stateful=stateful)
        engine = InferenceEngine.build(bilm)
        for batch in (BATCH, BATCH[:2], BATCH[1:] * 2):  # changing sizes: a stateful carrier keeps and grows rows
            ids = batch_to_ids(batch)
            with torch.no_grad():
                expected = bilm(ids)
            got = engine(ids)
            for a, b in zip(expected.layers, got.layers):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_an_engine_is_a_snapshot_and_rebuild_reads_the_new_weights():
    """Fused optimisers update weights without bumping PyTorch's version counter, and edits through ``.data`` are
    invisible to it: the engine watches neither; it keeps the weights it was built from until ``rebuild()``."""
    bilm = random_bilm(small_config(), seed=4)
    ids = batch_to_ids(BATCH)
    engine = InferenceEngine.build(bilm, cache_words=["The", "bank", "river"])
    before = [t.clone() for t in engine(ids).layers]
    optimizer = torch.optim.Adagrad(bilm.parameters(), lr=0.5, fused=True)
    bilm(ids).layers[-1].pow(2).mean().backward()
    optimizer.step()
    bilm.forward_stack.layers[0].weight_hh.data.mul_(0.5)
    stale = engine(ids).layers
    assert all(torch.equal(a, b) for a, b in zip(before[1:], stale[1:]))  # the LSTM layers: the old weights
    engine.rebuild()
    with torch.no_grad():
        expected = bilm(ids).layers
    got = engine(ids).layers
    assert not torch.allclose(before[-1], expected[-1], atol=1e-3)  # the step did change the model
    for a, b in zip(expected, got):  # values reach ~100 after the step: float32 rounding is relative
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)


def test_a_closed_engine_holds_nothing_and_says_so():
    engine = InferenceEngine.build(random_bilm(small_config()))
    engine(batch_to_ids(BATCH))
    engine.close()
    assert engine.memo is None and engine.scratch is None and engine.layers == [[], []]
    with pytest.raises(UsageError, match="closed"):
        engine(batch_to_ids(BATCH))
    engine.rebuild()
    assert engine(batch_to_ids(BATCH)).layers[0].shape[0] == 3


def test_elmo_frozen_rebuilds_its_engine_after_new_weights():
    """A frozen Elmo runs an engine; ``load_state_dict`` and ``.eval()`` (after fine-tuning) build it again."""
    bilm = random_bilm(small_config(), seed=5)
    elmo = Elmo(bilm, dropout=0.0)
    ids = batch_to_ids(BATCH)
    first = elmo(ids)["elmo_representations"][0].detach()
    other = Elmo(random_bilm(small_config(), seed=6), dropout=0.0)
    elmo.load_state_dict(other.state_dict())
    torch.testing.assert_close(elmo(ids)["elmo_representations"][0], other(ids)["elmo_representations"][0],
                               rtol=0, atol=1e-6)
    tuned = Elmo(random_bilm(small_config(), seed=5), requires_grad=True, dropout=0.0)
    torch.testing.assert_close(tuned(ids)["elmo_representations"][0].detach(), first, rtol=0, atol=1e-6)
    optimizer = torch.optim.SGD(tuned.parameters(), lr=1.0)
    tuned(ids)["elmo_representations"][0].pow(2).sum().backward()
    optimizer.step()
    for p in tuned.bilm.parameters():
        p.requires_grad_(False)
    tuned.eval()
    with torch.no_grad():
        expected = tuned.bilm(ids).layers
    frozen = tuned(ids)["elmo_representations"][0]  # through a new engine: the tuned weights
    assert not torch.allclose(frozen, first, atol=1e-3)
    with torch.no_grad():
        expected = tuned.readouts[0](expected, tuned.bilm(ids).mask)[:, 1:-1]  # the mix over the model's own layers
    torch.testing.assert_close(frozen, expected * (frozen != 0), rtol=0, atol=1e-5)


def test_the_frozen_elmo_output_trains_a_head():
    """The engine's outputs come from inference mode; the mix and a head over them must still get gradients."""
    elmo = Elmo(random_bilm(small_config()), dropout=0.0)
    out = elmo(batch_to_ids(BATCH))["elmo_representations"][0]
    out.sum().backward()
    assert elmo.readouts[0].weights.grad is not None


def test_an_elmo_module_copies_after_use_without_its_engine():
    elmo = Elmo(random_bilm(small_config(), seed=4), 1).eval()
    ids = batch_to_ids(BATCH)
    first = elmo(ids)["elmo_representations"][0]
    twin = copy.deepcopy(elmo)
    assert twin._engine is None and elmo._engine is not None
    assert torch.equal(twin(ids)["elmo_representations"][0], first)
