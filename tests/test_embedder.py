"""``Embedder.embed``: input forms, layer choices, pooling, order restored, batching invisible."""

import numpy as np
import pytest
import torch

from elmo.embed import Embedder
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config


@pytest.fixture(scope="module")
def embedder():
    return Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, max_tokens=20, max_batch_size=3)


def test_string_list_and_token_lists(embedder):
    one = embedder.embed("The bank closed .")
    assert isinstance(one, np.ndarray) and one.shape == (3, 4, 32) and one.dtype == np.float32
    many = embedder.embed(["The bank closed .", "A river"])
    tokens = embedder.embed([["The", "bank", "closed", "."], ["A", "river"]])
    assert [m.shape for m in many] == [(3, 4, 32), (3, 2, 32)]
    assert all(np.array_equal(a, b) for a, b in zip(many, tokens))
    assert np.abs(many[0] - one).max() <= 1e-5  # batch of 1 vs 2: float32 reordering only


def test_order_is_restored_and_batching_is_invisible(embedder):
    sentences = [" ".join(["w"] * n + [str(n)]) for n in (5, 1, 9, 3, 0, 7, 2)]
    batched = embedder.embed(sentences)
    for s, got in zip(sentences, batched):
        alone = embedder.embed(s)
        assert got.shape == alone.shape and np.abs(got - alone).max() <= 1e-5


def test_layer_choices(embedder):
    all_layers = embedder.embed("a b c")
    assert np.allclose(embedder.embed("a b c", layers="top"), all_layers[-1])
    assert np.allclose(embedder.embed("a b c", layers="average"), all_layers.mean(0), atol=1e-6)
    assert np.allclose(embedder.embed("a b c", layers=1), all_layers[1])
    assert np.allclose(embedder.embed("a b c", layers=-1), all_layers[-1])
    assert np.allclose(embedder.embed("a b c", layers="mix"), all_layers.mean(0), atol=1e-6)
    with pytest.raises(ValueError, match="layers 0..2"):
        embedder.embed("a", layers=3)


def test_mix_weights_and_gamma():
    embedder = Embedder(random_bilm(small_config()), mix_weights=[0.0, 0.0, 1e9], gamma=2.0)
    assert np.allclose(embedder.embed("a b", layers="mix"), 2 * embedder.embed("a b", layers="top"), atol=1e-5)


def test_pooling_ignores_padding(embedder):
    long, short = embedder.embed(["a b c d e f g", "x y"], layers="top", pooling="mean")
    tokens = embedder.embed("x y", layers="top")
    assert short.shape == (32,) and np.allclose(short, tokens.mean(0), atol=1e-6)
    maxed = embedder.embed(["a b c d e f g", "x y"], layers="all", pooling="max")[1]
    assert maxed.shape == (3, 32) and np.allclose(maxed, embedder.embed("x y").max(1), atol=1e-6)
    empty = embedder.embed([""], pooling="mean")[0]
    assert empty.shape == (3, 32) and not empty.any()


def test_empty_sentence_and_empty_list(embedder):
    assert embedder.embed("").shape == (3, 0, 32)
    assert embedder.embed([]) == []


def test_tokenizer_hook():
    embedder = Embedder(random_bilm(small_config()), tokenizer=lambda s: s.split(","))
    assert embedder.embed("a,b,c").shape[1] == 3


def test_embedder_refuses_a_stateful_model():
    with pytest.raises(ValueError, match="deterministic"):
        Embedder(random_bilm(small_config(), stateful=True))


def test_runs_on_its_engine_without_autograd(embedder, monkeypatch):
    """The embedder runs its inference engine, in inference mode, and never the trainable module's forward."""
    calls = []
    original = embedder.engine._stacks

    def spy(*a, **k):
        calls.append(torch.is_inference_mode_enabled())
        return original(*a, **k)

    monkeypatch.setattr(embedder.engine, "_stacks", spy)
    monkeypatch.setattr(embedder.bilm, "forward", lambda *a, **k: pytest.fail("the trainable module ran"))
    embedder.embed("a b")
    assert calls == [True]


def test_bad_inputs_are_clear_type_errors_and_numpy_layer_indices_work(embedder):
    with pytest.raises(TypeError, match="list of sentences"):
        embedder.embed(None)
    with pytest.raises(TypeError, match="sentence 1"):
        embedder.embed(["a b", None])
    assert np.array_equal(embedder.embed(["a b"], layers=np.int64(1))[0], embedder.embed(["a b"], layers=1)[0])
    from elmo.data.chars import batch_to_ids

    assert torch.equal(batch_to_ids([np.array(["a", "b"])]), batch_to_ids([["a", "b"]]))
    with pytest.raises(TypeError, match="token 1"):
        batch_to_ids([["a", None]])


def test_constructor_settings_are_checked_up_front():
    """Each of these used to be accepted and fail later: a str tokenizer at the first embed ('str' object is not
    callable), cuda on a CPU-only torch deep in .to() (AssertionError), a zero batch size in the batching loop."""
    named = Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, tokenizer="en")
    assert named.tokenize(["Don't stop."]) == [["Do", "n't", "stop", "."]]
    with pytest.raises(ValueError, match="unknown tokenizer"):
        Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, tokenizer="klingon")
    with pytest.raises(ValueError, match="max_batch_size"):
        Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, max_batch_size=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, device="cuda")
    with pytest.raises(ValueError, match="layers must be"):
        named.embed("a b", layers=True)


def test_allennlp_elmo_embedder_names(embedder, tmp_path):
    """embed_sentence / embed_batch / embed_sentences / embed_file, as AllenNLP's ElmoEmbedder names them."""
    import h5py

    sentences = [["The", "bank", "closed", "."], ["A", "river"], [], ["x"] * 9, ["Money"]]
    expected = embedder.embed(sentences)

    def close(a, b):  # batches of other sizes: float32 reordering only
        return a.shape == b.shape and np.abs(a - b).max(initial=0) <= 1e-5

    assert close(embedder.embed_sentence(sentences[0]), expected[0])
    assert close(embedder.embed_sentence("The bank closed ."), expected[0])
    assert all(np.array_equal(a, b) for a, b in zip(embedder.embed_batch(sentences), expected))
    lazy = embedder.embed_sentences(iter(sentences), batch_size=2)
    assert not isinstance(lazy, list)
    got = list(lazy)
    assert len(got) == 5 and all(close(a, b) for a, b in zip(got, expected))
    (tmp_path / "in.txt").write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    assert embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", "top", progress=False) == 5
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert all(close(f[str(i)][()], e[-1]) for i, e in enumerate(expected))
    with open(tmp_path / "in.txt", encoding="utf-8") as handle:  # AllenNLP passes an open file
        assert embedder.embed_file(handle, tmp_path / "h.hdf5", "top", progress=False) == 5
    with h5py.File(tmp_path / "out.hdf5") as a, h5py.File(tmp_path / "h.hdf5") as b:
        assert all(np.array_equal(a[str(i)][()], b[str(i)][()]) for i in range(5))
    with pytest.raises(ValueError, match="batch_size"):
        next(embedder.embed_sentences(sentences, batch_size=0))


@pytest.mark.parametrize("kwargs", [{"mix_weights": [float("nan")] * 3}, {"gamma": float("inf")}])
def test_non_finite_mix_settings_are_refused_when_made(kwargs):
    from elmo.errors import ElmoError

    with pytest.raises(ElmoError, match="must be finite"):
        Embedder(random_bilm(small_config()), **kwargs)


def test_an_embedder_can_be_copied_and_pickled():
    import copy
    import pickle

    embedder = Embedder(random_bilm(small_config()))
    want = embedder.embed([["the", "bank"]])[0]
    for other in (copy.deepcopy(embedder), pickle.loads(pickle.dumps(embedder))):
        assert other.engine is not embedder.engine
        assert np.array_equal(other.embed([["the", "bank"]])[0], want)


def test_an_error_about_an_open_file_names_it_not_a_temporary_copy(tmp_path):
    import io

    from elmo.errors import ElmoError

    embedder = Embedder(random_bilm(small_config()))
    with pytest.raises(ElmoError) as caught:
        embedder.embed_file(io.StringIO("same\nsame\n"), tmp_path / "out.hdf5", use_sentence_keys=True,
                            progress=False)
    assert "the open file, line 2" in str(caught.value) and "input.txt" not in str(caught.value)


def _generator():
    yield ["a", "b"]


@pytest.mark.parametrize("call, problem", [
    (lambda e: list(e.embed_sentences("hello world")), "for one string use embed_sentence"),
    (lambda e: list(e.embed_sentences(None)), "takes an iterable of sentences"),
    (lambda e: list(e.embed_sentences([["a"]], batch_size=1.5)), "batch_size must be a whole number"),
    (lambda e: Embedder(e.bilm, cache_words="hello"), "got one string"),
    (lambda e: Embedder(e.bilm, cache_words=[1]), "a list holding other things"),
    (lambda e: e.embed_sentence(None), "sentence 0: expected a string or a list of tokens"),
    (lambda e: e.embed_batch(None), "expected a list of sentences"),
    (lambda e: e.embed_batch([None]), "sentence 0: expected a string or a list of tokens"),
    (lambda e: e.embed_file(None, "out.hdf5"), "the input must be a path"),
    (lambda e: e.embed_file("in.txt", "out.hdf5", batch_size="2"), "batch size must be a whole number"),
    (lambda e: Embedder(e.bilm, tokenizer=lambda s: None).embed(["a b"]), "the tokenizer returned NoneType"),
])
def test_odd_arguments_are_one_clear_error(embedder, call, problem):
    """A string iterated letter by letter (11 one-letter sentences), None, a float batch size or a tokenizer that
    returns None gave wrong results or errors from deep inside; each is now an ElmoError saying what to pass."""
    from elmo.errors import ElmoError

    with pytest.raises(ElmoError, match=problem):
        call(embedder)


def test_batch_to_ids_takes_a_generator_and_refuses_none():
    from elmo.data.chars import batch_to_ids
    from elmo.errors import ElmoError

    assert batch_to_ids(_generator()).shape == (1, 2, 50)
    for bad, problem in ((None, "not NoneType"), ([None], "sentence 0 is NoneType")):
        with pytest.raises(ElmoError, match=problem):
            batch_to_ids(bad)


def test_embed_file_reads_bad_bytes_when_asked_and_says_how_when_not(embedder, tmp_path):
    from elmo.errors import ElmoError

    (tmp_path / "in.txt").write_bytes(b"The bank \xff closed .\n")
    with pytest.raises(ElmoError, match=r"line 1: invalid UTF-8 .*errors='replace'"):
        embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", progress=False)
    assert embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", progress=False, errors="replace") == 1
