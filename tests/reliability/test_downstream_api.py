"""Hostile use of the downstream Python API (``Elmo``, ``ScalarMix``, ``batch_to_ids``) inside a user's model and
training loop: every argument is honoured or refused in one ``ElmoError`` line, never ignored, misread or left to
fail deep inside torch."""

import numpy as np
import pytest
import torch

from elmo import Elmo, batch_to_ids
from elmo.errors import ElmoError
from elmo.model.engine import InferenceEngine
from elmo.model.mix import ScalarMix
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config

BATCH = [["The", "bank", "closed"], ["A", "river"], []]


def _elmo(**kwargs) -> Elmo:
    return Elmo(random_bilm(small_config(), stateful=kwargs.pop("stateful", False)), dropout=0.0, **kwargs)


@pytest.mark.parametrize("name", ["requires_grad", "do_layer_norm", "keep_sentence_boundaries"])
@pytest.mark.parametrize("value", ["false", None])
def test_elmo_flags_are_true_or_false(name, value):
    """"false" from a settings file is truthy: it switched layer norm or the boundaries on without a word; None made
    torch's requires_grad_ fail with a TypeError from inside the constructor."""
    with pytest.raises(ElmoError, match=f"Elmo: {name} must be True or False, got {value!r}"):
        _elmo(**{name: value})
    assert _elmo(**{name: np.bool_(True)})  # a NumPy bool is a bool


@pytest.mark.parametrize("name", ["do_layer_norm", "trainable"])
def test_scalar_mix_flags_are_true_or_false(name):
    with pytest.raises(ElmoError, match=f"ScalarMix: {name} must be True or False, got 'no'"):
        ScalarMix(3, **{name: "no"})


@pytest.mark.parametrize("kwargs, name", [({"output": "projection", "do_layer_norm": True}, "do_layer_norm"),
                                          ({"output": "projection", "scalar_mix_parameters": [0, 1, 0]},
                                           "scalar_mix_parameters"),
                                          ({"projection_dim": 12}, "projection_dim=12")])
def test_an_option_of_the_other_readout_is_refused_not_ignored(kwargs, name):
    """A projection has no layer weights to norm or fix, and a mix is as wide as the biLM: these were dropped."""
    with pytest.raises(ElmoError, match=f"Elmo: {name} applies to output="):
        _elmo(**kwargs)
    assert _elmo(output="projection").output_dim == 512  # the default width of a projection
    assert _elmo(output="projection", projection_dim=12).output_dim == 12


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.complex64])
def test_id_types_that_cannot_hold_the_ids_are_refused(dtype):
    """uint8 / int8 ids have wrapped (the word marks 259..261 became 3..5) and embedded other characters; complex
    ids were cast to integers with only a warning."""
    elmo = _elmo()
    ids = batch_to_ids(BATCH)
    with pytest.raises(ElmoError, match="cannot hold this model's ids 0..261|integer character ids"):
        elmo(ids.to(dtype))
    expected = elmo(ids)["elmo_representations"][0]
    assert torch.equal(elmo(ids.to(torch.int16))["elmo_representations"][0], expected)


@pytest.mark.parametrize("kwargs", [{"initial_weights": [10**400, 0, 0]}, {"initial_gamma": 10**400}])
def test_mix_numbers_beyond_float_are_one_error(kwargs):
    """An int of 400 digits raised a bare OverflowError from torch.tensor or math.isfinite."""
    with pytest.raises(ElmoError, match="ScalarMix: the weights and gamma must be finite numbers"):
        ScalarMix(3, **kwargs)


def test_scalar_mix_checks_the_shapes_of_its_layers_and_mask():
    """A (T,) mask broadcast over the batch: layer norm counted one row's elements for all of them, a silently
    wrong mean and variance; layers of different shapes failed inside torch's broadcasting."""
    mix = ScalarMix(2, do_layer_norm=True)
    layers = [torch.randn(2, 3, 4), torch.randn(2, 3, 4)]
    with pytest.raises(ElmoError, match=r"the mask has shape \(3,\), the layers \(2, 3, 4\)"):
        mix(layers, torch.ones(3, dtype=torch.bool))
    with pytest.raises(ElmoError, match=r"layer 1 has shape \(2, 3, 5\)"):
        ScalarMix(2)([torch.randn(2, 3, 4), torch.randn(2, 3, 5)])
    assert mix(layers, torch.ones(2, 3, dtype=torch.bool)).shape == (2, 3, 4)


@pytest.mark.parametrize("coef", [float("nan"), float("inf"), -0.001, "0.001", None])
def test_mix_penalty_takes_a_finite_coefficient(coef):
    """NaN poisoned the loss (and every weight after the step), a negative one rewarded large mix weights."""
    elmo = _elmo()
    with pytest.raises(ElmoError, match="mix_penalty: coef must be a finite number"):
        elmo.mix_penalty(coef)
    assert float(elmo.mix_penalty(np.float32(0.5)).detach()) == 0.0  # zero weights at initialisation


def _reference_mix(batches: list[torch.Tensor]) -> list[torch.Tensor]:
    """The mean of the layers of a stateful biLM run on ``batches`` in order, without any reset."""
    engine = InferenceEngine.build(random_bilm(small_config(), stateful=True))
    outs = []
    for ids in batches:
        mean = torch.stack(engine(ids).layers).mean(0)[:, 1:-1]  # (B, T, 2P)
        outs.append(mean * (ids > 0).any(-1).unsqueeze(-1))
    return outs


@pytest.mark.parametrize("change", ["eval", "unfreeze"])
def test_a_stateful_elmo_keeps_its_states_across_eval_and_fine_tuning(change):
    """AllenNLP carries the states through model.eval() and fine-tuning; the engine's own carrier was dropped with
    the engine (.eval(), a changed weight) or differed from the biLM's: 0.45 off on the next batch."""
    batches = [batch_to_ids(b) for b in ([["a", "b", "c"], ["d"]], [["e", "f"], ["g", "h", "i"]], [["the"], ["x"]])]
    expected = _reference_mix(batches)
    elmo = _elmo(stateful=True)
    for index, (ids, reference) in enumerate(zip(batches, expected)):
        if index == 2 and change == "eval":
            elmo.eval()
        if index == 2 and change == "unfreeze":
            elmo.bilm.requires_grad_(True)
        out = elmo(ids)["elmo_representations"][0].detach()
        assert torch.allclose(out, reference, atol=1e-5), f"batch {index}"


@pytest.mark.parametrize("words", ["bank", ["bank", None]])
def test_cache_words_set_on_the_bilm_are_checked(words):
    """``elmo.bilm.cache_words = ...`` (the documented vocab_to_cache): a string cached its letters, a None failed
    with an AttributeError inside the first forward pass."""
    elmo = _elmo()
    elmo.bilm.cache_words = words
    with pytest.raises(ElmoError, match="cache_words must be a list of words"):
        elmo(batch_to_ids(BATCH))


def test_cache_words_with_repeats_and_empty_strings_give_the_same_vectors():
    elmo = _elmo()
    ids = batch_to_ids([["The", "bank", ""], ["A", "river"]])
    with torch.no_grad():
        plain = elmo(ids)["elmo_representations"][0]
        elmo.bilm.cache_words = ["bank", "bank", "", "The"]
        elmo.drop_engine()
        cached = elmo(ids)["elmo_representations"][0]
    assert len(elmo._engine.token_cache) == 3 and torch.allclose(cached, plain, atol=1e-6)


def test_allennlps_positional_from_pretrained_says_which_keywords_to_write():
    """The resolver's message named the command line's --options and --weights to a Python caller."""
    with pytest.raises(ElmoError, match=r"Elmo.from_pretrained: .*options=options_file, weights=weight_file"):
        Elmo.from_pretrained(str(OPTIONS), str(WEIGHTS))


def test_batch_to_ids_refuses_sets():
    """A set's order is the strings' hash order, which changes from run to run: tokens or rows were shuffled."""
    with pytest.raises(ElmoError, match="sentence 0 is a set"):
        batch_to_ids([{"the", "bank", "closed"}])
    with pytest.raises(ElmoError, match="a set of sentences has no order"):
        batch_to_ids({("the", "bank"), ("a", "river")})
