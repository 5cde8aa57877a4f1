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


def _fresh_mix(bilm, ids) -> torch.Tensor:
    """What a new frozen Elmo over the same biLM weights gives: no engine built before."""
    copy = random_bilm(small_config())
    copy.load_state_dict({k: v.clone().float() for k, v in bilm.state_dict().items()})
    with torch.no_grad():
        return Elmo(copy, dropout=0.0)(ids)["elmo_representations"][0]


@pytest.mark.parametrize("change", ["fused AdamW", "vector_to_parameters"])
def test_a_tuned_bilm_under_no_grad_runs_on_its_current_weights(change):
    """A fused optimizer step and ``vector_to_parameters`` change the weights without PyTorch counting it: under
    ``torch.no_grad()`` Elmo ran an engine built from the weights before them (2.4 off)."""
    elmo = _elmo(requires_grad=True)
    ids = batch_to_ids(BATCH)
    with torch.no_grad():
        before = elmo(ids)["elmo_representations"][0]
    if change == "fused AdamW":
        optimizer = torch.optim.AdamW(elmo.bilm.parameters(), lr=0.05, fused=True)
        elmo(ids)["elmo_representations"][0].pow(2).sum().backward()
        optimizer.step()
    else:
        vector = torch.nn.utils.parameters_to_vector(elmo.bilm.parameters())
        torch.nn.utils.vector_to_parameters(vector * 1.5, elmo.bilm.parameters())
    with torch.no_grad():
        after = elmo(ids)["elmo_representations"][0]
    assert (after - before).abs().max() > 1e-3
    assert torch.allclose(after, _fresh_mix(elmo.bilm, ids), atol=1e-5)


def test_new_parameter_storage_or_type_is_seen_by_a_frozen_elmo():
    """``elmo.bilm.double()`` (the biLM's own cast, not Elmo's) kept running the float32 engine built before."""
    elmo = _elmo()
    ids = batch_to_ids(BATCH)
    with torch.no_grad():
        elmo(ids)
        elmo.bilm.double()
        out = elmo(ids)["elmo_representations"][0]
    assert out.dtype == torch.float64


def test_a_bilm_made_under_inference_mode_sees_a_loaded_state_dict():
    """Tensors made under ``torch.inference_mode()`` count no in-place change: ``bilm.load_state_dict`` of other
    weights went unseen and the engine of the first weights ran on."""
    other = random_bilm(small_config(), seed=7)
    ids = batch_to_ids(BATCH)
    with torch.inference_mode():
        elmo = Elmo(random_bilm(small_config()), dropout=0.0)
        before = elmo(ids)["elmo_representations"][0].clone()
        elmo.bilm.load_state_dict(other.state_dict())
        after = elmo(ids)["elmo_representations"][0].clone()
    assert (after - before).abs().max() > 1e-3
    assert torch.allclose(after, _fresh_mix(other, ids), atol=1e-5)


def test_eval_keeps_the_engine_of_unchanged_weights():
    """``.eval()`` dropped the engine each time: every evaluation encoded the whole ``vocab_to_cache`` again."""
    elmo = _elmo(vocab_to_cache=["bank", "river"])
    ids = batch_to_ids(BATCH)
    with torch.no_grad():
        elmo(ids)
        engine = elmo._engine
        elmo.train()
        elmo.eval()
        elmo(ids)
    assert elmo._engine is engine


def test_padding_that_is_not_finite_stays_out_of_the_unpadded_tensor():
    """AllenNLP copies the real positions into zeros; multiplying by the mask turned NaN or -inf padding into NaN."""
    from elmo import remove_sentence_boundaries

    tensor = torch.full((2, 5, 3), float("nan"))
    tensor[0] = 1.0
    tensor[1, :3] = 2.0
    tensor[1, 3:] = float("-inf")
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # AllenNLP's long masks
    out, new_mask = remove_sentence_boundaries(tensor, mask)
    assert torch.isfinite(out).all() and out[1, 1:].abs().sum() == 0 and (out[1, 0] == 2.0).all()
    assert new_mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_allennlps_forward_arguments_are_taken_or_refused_in_one_line():
    """``elmo(inputs=ids)`` (AllenNLP's keyword) and ``elmo(ids, word_inputs)`` were TypeError tracebacks."""
    elmo = _elmo()
    ids = batch_to_ids(BATCH)
    with torch.no_grad():
        assert torch.equal(elmo(inputs=ids)["elmo_representations"][0], elmo(ids)["elmo_representations"][0])
    with pytest.raises(ElmoError, match="not AllenNLP's word_inputs"):
        elmo(ids, torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ElmoError, match="not both"):
        elmo(ids, inputs=ids)


def test_from_pretrained_names_an_argument_it_does_not_take():
    with pytest.raises(ElmoError, match="Elmo.from_pretrained: no argument 'module'"):
        Elmo.from_pretrained(options=OPTIONS, weights=WEIGHTS, module=None)


def test_numpy_dropout_is_a_number():
    """``dropout=np.float32(0.5)`` was refused as 'must be a number in [0, 1)'."""
    assert Elmo(random_bilm(small_config()), dropout=np.float32(0.5)).dropout.p == 0.5


def test_storage_replaced_twice_is_seen_though_its_address_may_come_back():
    """``p.data = p.data * 1.5`` twice: the second tensor could take the first one's freed address, so a key of
    storage addresses alone matched the engine's weights (4 of 29 parameters ran a stale engine, up to 1.89 off)."""
    ids = batch_to_ids(BATCH)
    names = [name for name, _ in random_bilm(small_config()).named_parameters()]
    for name in names:
        elmo = _elmo()
        p = dict(elmo.bilm.named_parameters())[name]
        with torch.no_grad():
            elmo(ids)
            p.data = p.data * 1.5
            p.data = p.data * 1.5
            out = elmo(ids)["elmo_representations"][0]
        assert torch.allclose(out, _fresh_mix(elmo.bilm, ids), atol=1e-5), name


def test_a_load_into_a_model_holding_the_bilm_is_seen_under_inference_mode():
    """A user's model restored as a whole never calls ``BiLM.load_state_dict`` (PyTorch recurses below it), and a
    strict load copies the matching tensors before it fails: both left the engine of the old weights running."""
    other = random_bilm(small_config(), seed=7)
    ids = batch_to_ids(BATCH)
    with torch.inference_mode():
        holder = torch.nn.Module()
        holder.elmo = _elmo()
        holder.elmo(ids)
        holder.load_state_dict({f"elmo.bilm.{k}": v for k, v in other.state_dict().items()}, strict=False)
        whole = holder.elmo(ids)["elmo_representations"][0].clone()
        elmo = _elmo()
        elmo(ids)
        with pytest.raises(RuntimeError):
            elmo.bilm.load_state_dict({**other.state_dict(), "bogus": torch.zeros(1)})
        partial = elmo(ids)["elmo_representations"][0].clone()
    assert torch.allclose(whole, _fresh_mix(other, ids), atol=1e-5)
    assert torch.allclose(partial, _fresh_mix(other, ids), atol=1e-5)


def test_a_subclass_from_pretrained_takes_its_own_and_elmos_arguments():
    """The check of unknown arguments read a subclass's ``(bilm, *args, pool=False, **kwargs)`` and refused
    ``dropout``."""
    class Pooled(Elmo):
        def __init__(self, bilm, *args, pool: bool = False, **kwargs):
            super().__init__(bilm, *args, **kwargs)
            self.pool = pool

    model = Pooled.from_pretrained(options=OPTIONS, weights=WEIGHTS, dropout=0.0, pool=True)
    assert model.pool and model.dropout.p == 0.0
