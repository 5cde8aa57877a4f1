"""The downstream ``Elmo`` module: frozen biLM, scalar mixes, projection readout, boundaries, layer norm."""

import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.downstream import Elmo
from elmo.model.mix import ScalarMix
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config

BATCH = [["The", "bank", "closed"], ["A", "river"], []]


def test_mix_at_init_is_the_mean_of_the_layers_and_mask_has_no_boundaries():
    bilm = random_bilm(small_config())
    elmo = Elmo(bilm, num_output_representations=2, dropout=0.0)
    out = elmo(batch_to_ids(BATCH))
    assert len(out["elmo_representations"]) == 2
    assert out["mask"].sum(1).tolist() == [3, 2, 0]
    with torch.no_grad():
        layers = bilm(batch_to_ids(BATCH)).layers
    mean = torch.stack(layers).mean(0)[:, 1:-1] * out["mask"].unsqueeze(-1)
    assert torch.allclose(out["elmo_representations"][0], mean, atol=1e-6)


def test_bilm_frozen_by_default_and_mix_is_trainable():
    elmo = Elmo(random_bilm(small_config()), dropout=0.0)
    assert not any(p.requires_grad for p in elmo.bilm.parameters())
    loss = elmo(batch_to_ids(BATCH))["elmo_representations"][0].sum()
    loss.backward()
    mix = elmo.readouts[0]
    assert mix.weights.grad is not None and mix.gamma.grad is not None


def test_requires_grad_trains_the_bilm():
    elmo = Elmo(random_bilm(small_config()), requires_grad=True, dropout=0.0)
    elmo(batch_to_ids(BATCH))["elmo_representations"][0].sum().backward()
    assert elmo.bilm.forward_stack.layers[0].weight_hh.grad is not None


def test_fixed_scalar_mix_parameters_are_not_trainable():
    elmo = Elmo(random_bilm(small_config()), scalar_mix_parameters=[-9e10, 1, -9e10], dropout=0.0)
    assert not elmo.readouts[0].weights.requires_grad
    out = elmo(batch_to_ids(BATCH))
    with torch.no_grad():
        layer1 = elmo.bilm(batch_to_ids(BATCH)).layers[1][:, 1:-1] * out["mask"].unsqueeze(-1)
    assert torch.allclose(out["elmo_representations"][0], layer1, atol=1e-6)


def test_keep_sentence_boundaries():
    elmo = Elmo(random_bilm(small_config()), keep_sentence_boundaries=True, dropout=0.0)
    out = elmo(batch_to_ids(BATCH))
    assert out["elmo_representations"][0].shape[1] == 5 and out["mask"].sum(1).tolist() == [5, 4, 2]



@pytest.mark.parametrize("keep", [False, True])
def test_layer_norm_mix_padding_as_allennlp(keep):
    """AllenNLP returns a layer-normed mix with boundaries kept as it is: padding holds -mean/std of each layer
    (weighted), not zero; with the boundaries removed, the padding is zero."""
    bilm = random_bilm(small_config())
    elmo = Elmo(bilm, do_layer_norm=True, keep_sentence_boundaries=keep, dropout=0.0)
    ids = batch_to_ids(BATCH)
    out = elmo(ids)
    rep, mask = out["elmo_representations"][0], out["mask"]
    assert torch.equal(mask, torch.tensor([[1] * 5, [1] * 4 + [0], [1, 1, 0, 0, 0]]).bool()[:, : rep.shape[1]]
                       if keep else torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]]).bool())
    if not keep:
        assert torch.equal(rep[~mask], torch.zeros_like(rep[~mask]))
        return
    with torch.no_grad():
        o = bilm(ids)
    real = o.mask  # (B, T + 2)
    padding = sum(-layer[real].mean() / layer[real].var(unbiased=False).sqrt() for layer in o.layers) / 3
    assert torch.allclose(rep[~real], torch.full_like(rep[~real], float(padding)), atol=1e-5)
    assert float(padding) != 0.0


def test_projection_output_uses_the_five_components():
    bilm = random_bilm(small_config())
    elmo = Elmo(bilm, output="projection", projection_dim=12, dropout=0.0)
    out = elmo(batch_to_ids(BATCH))["elmo_representations"][0]
    assert out.shape == (3, 3, 12) and elmo.output_dim == 12
    projection = elmo.readouts[0].projection
    assert projection.weight.shape == (12, 5 * 8) and projection.weight.requires_grad
    with torch.no_grad():
        o = bilm(batch_to_ids(BATCH))
        parts = torch.cat([o.token_vectors, *o.forward_layers, *o.backward_layers], -1)[:, 1:-1]
        assert torch.allclose(out[0, :3], parts[0, :3] @ projection.weight.t(), atol=1e-6)


def test_layer_norm_uses_batch_global_statistics():
    mix = ScalarMix(2, do_layer_norm=True)
    a = torch.randn(2, 4, 3) * 5 + 2
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    out = mix([a, a], mask)
    values = a[mask]
    expected = (a - values.mean()) / values.var(unbiased=False).sqrt()
    assert torch.allclose(out[mask], expected[mask], atol=1e-5)


def test_dropout_only_in_training():
    elmo = Elmo(random_bilm(small_config()), dropout=0.5).eval()
    ids = batch_to_ids(BATCH)
    assert torch.equal(elmo(ids)["elmo_representations"][0], elmo(ids)["elmo_representations"][0])


def test_bad_output_kind_is_refused():
    with pytest.raises(ValueError, match="'mix' or 'projection'"):
        Elmo(random_bilm(small_config()), output="concat")


def test_unfreezing_the_parameters_after_construction_fine_tunes_the_bilm():
    """As with AllenNLP, the parameters' own flags decide: unfreeze them later and gradients reach the biLM."""
    elmo = Elmo(random_bilm(small_config()), dropout=0.0)
    out = elmo(batch_to_ids(BATCH))["elmo_representations"][0]
    assert not out.requires_grad or all(p.grad is None for p in elmo.bilm.parameters())
    for p in elmo.bilm.parameters():
        p.requires_grad_(True)
    elmo(batch_to_ids(BATCH))["elmo_representations"][0].sum().backward()
    with_grad = [p for p in elmo.bilm.parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    assert len(with_grad) > len(list(elmo.bilm.parameters())) // 2


def test_an_empty_batch_gives_empty_outputs():
    bilm = random_bilm(small_config())
    elmo = Elmo(bilm, num_output_representations=2, dropout=0.0)
    out = elmo(batch_to_ids([]))
    assert [r.shape[0] for r in out["elmo_representations"]] == [0, 0] and out["mask"].shape[0] == 0
    assert out["elmo_representations"][0].shape[-1] == elmo.output_dim
    layers = bilm(batch_to_ids([])).layers
    assert len(layers) == bilm.config.n_output_layers and all(layer.shape[0] == 0 for layer in layers)


def test_words_instead_of_character_ids_is_one_clear_error():
    elmo = Elmo(random_bilm(small_config()))
    with pytest.raises(TypeError, match="batch_to_ids"):
        elmo([["a", "b"]])
    with pytest.raises(TypeError, match="shape"):
        elmo(torch.zeros(2, 50, dtype=torch.long))


def test_allennlp_habits_work_or_say_what_to_write_instead():
    """What a user porting AllenNLP code does: int32 ids, (batch, choices, T, W) ids, get_output_dim, the mix's
    L2 penalty, and the AllenNLP constructor (a clear pointer to from_pretrained)."""
    elmo = Elmo(random_bilm(small_config()), num_output_representations=2, dropout=0.0)
    ids = batch_to_ids(BATCH)  # (3, T, W)
    plain = elmo(ids)
    assert torch.equal(elmo(ids.int())["elmo_representations"][0], plain["elmo_representations"][0])
    stacked = elmo(torch.stack([ids, ids.flip(0)]))  # (2, 3, T, W)
    assert stacked["mask"].shape == (2, *plain["mask"].shape)
    assert stacked["elmo_representations"][1].shape == (2, *plain["elmo_representations"][1].shape)
    assert torch.allclose(stacked["elmo_representations"][0][1], plain["elmo_representations"][0].flip(0), atol=1e-6)
    assert elmo.get_output_dim() == elmo.output_dim == plain["elmo_representations"][0].shape[-1]
    with torch.no_grad():
        elmo.readouts[0].weights.fill_(1.0)
    assert float(elmo.mix_penalty(0.5).detach()) == pytest.approx(0.5 * elmo.readouts[0].weights.numel())
    with pytest.raises(TypeError, match="from_pretrained"):
        Elmo("options.json", "weights.hdf5", 2)
    assert Elmo.from_pretrained(options=OPTIONS, weights=WEIGHTS, stateful=True).bilm.stateful  # AllenNLP's mode
    with pytest.raises(TypeError, match="integer character ids"):
        elmo(ids.float())


def test_vocab_to_cache_precomputes_those_words_and_changes_no_value():
    """AllenNLP's ``Elmo(..., vocab_to_cache=words)``: was Python's unexpected-keyword TypeError. The words' token
    vectors are computed once by the engine; every output is as without the cache."""
    from elmo.errors import ElmoError

    bilm = random_bilm(small_config())
    plain = Elmo(bilm, dropout=0.0)(batch_to_ids(BATCH))["elmo_representations"][0]
    cached = Elmo(bilm, dropout=0.0, vocab_to_cache=["bank", "river", "The"])
    out = cached(batch_to_ids(BATCH))["elmo_representations"][0]
    assert cached._engine.token_cache is not None and cached._engine.cache_words == ["bank", "river", "The"]
    assert torch.allclose(out, plain, atol=1e-6)
    with pytest.raises(ElmoError, match="list of words"):
        Elmo(bilm, vocab_to_cache="bank")  # a string: its letters would be cached


def test_layer_norm_in_half_precision_stays_finite():
    mix = ScalarMix(2, do_layer_norm=True)
    constant = torch.ones(1, 3, 4, dtype=torch.float16)
    out = mix([constant, constant], torch.ones(1, 3, dtype=torch.bool))
    assert torch.isfinite(out).all()


def test_no_grad_calls_see_the_weights_after_an_optimizer_step():
    """A fine-tuned biLM checked under torch.no_grad() (the inference engine) must not use a stale snapshot."""
    torch.manual_seed(0)
    elmo = Elmo(random_bilm(small_config()), requires_grad=True, dropout=0.0)
    ids = batch_to_ids([["the", "bank", "closed"], ["a", "river"]])
    with torch.no_grad():
        before = elmo(ids)["elmo_representations"][0]
    optimizer = torch.optim.SGD(elmo.bilm.parameters(), lr=0.1)
    elmo(ids)["elmo_representations"][0].pow(2).sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = elmo(ids)["elmo_representations"][0]
    fresh = elmo(ids)["elmo_representations"][0].detach()
    assert (after - before).abs().max() > 1e-3
    assert torch.allclose(after, fresh, atol=1e-5)


def test_left_padded_ids_are_refused_not_misread():
    from elmo.errors import ElmoError

    elmo = Elmo(random_bilm(small_config()), dropout=0.0)
    ids = batch_to_ids([["the", "bank"], ["a", "b"]])
    shifted = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :1]], dim=1)  # row 0: [pad, the]
    with pytest.raises(ElmoError, match="row 0 has padding at position 0"):
        elmo(shifted)


@pytest.mark.parametrize("width", [4, 8, 60])
def test_ids_of_another_width_than_the_models_are_refused(width):
    """Ids of 8 or 60 characters per token gave other vectors (by up to 0.3), 4 a shape error inside the CNN."""
    from elmo.errors import ElmoError

    elmo = Elmo(random_bilm(small_config()), dropout=0.0)
    with pytest.raises(ElmoError, match=rf"shape \(1, 2, {width}\): this model takes \(sentences, tokens, 50\)"):
        elmo(batch_to_ids([["the", "bank"]], width=width))


@pytest.mark.parametrize("kwargs", [{"num_output_representations": -1}, {"num_output_representations": 0},
                                    {"dropout": 1.5}, {"dropout": float("nan")},
                                    {"scalar_mix_parameters": [float("nan")] * 3},
                                    {"output": "projection", "projection_dim": 0},
                                    {"output": "projection", "projection_dim": -3}])
def test_bad_constructor_arguments_are_one_clear_error(kwargs):
    from elmo.errors import ElmoError

    with pytest.raises(ElmoError, match="Elmo: |ScalarMix: |ComponentProjection: "):
        Elmo(random_bilm(small_config()), **kwargs)


def test_a_bilm_made_under_inference_mode_runs_frozen():
    with torch.inference_mode():
        bilm = random_bilm(small_config())
    out = Elmo(bilm, dropout=0.0)(batch_to_ids([["a", "b"]]))
    assert out["elmo_representations"][0].shape[:2] == (1, 2)
