"""The input contract (raw text, token lists, the refused ambiguous flat list), ``encode`` and ``embed_padded``
(arrays for the wider ecosystem, exactly ``embed``'s numbers), compact per-sentence arrays, the model's own
tokenizer by default, and what ``embed_file`` records about the run."""

import json

import h5py
import numpy as np
import pytest

import elmo.embed
from elmo.embed import Embedder, Padded
from elmo.embed_file import InputFileError, embed_file
from elmo.model.fingerprint import weights_sha256
from elmo.errors import InputTypeError, UsageError
from elmo.io.official import load_official
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config

WORDS = ["He", "went", "to", "the", "bank", "."]
SENTENCES = ["The bank closed .", "A river", "", "w w w w w w w w 8", "Money", "x y z"]
LAYER_CHOICES = ["average", "top", "all", 1, "mix"]


@pytest.fixture(scope="module")
def embedder():
    return Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS, max_tokens=20, max_batch_size=3)


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype
    return float(np.abs(a - b).max(initial=0))


# ---- one input contract ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["embed", "encode", "embed_padded"])
def test_a_flat_list_of_words_is_refused_with_the_way_out(embedder, method):
    with pytest.raises(UsageError) as caught:
        getattr(embedder, method)(WORDS)
    message = str(caught.value)
    assert "\n" not in message and "split_into_words=True" in message and "split_into_words=False" in message
    assert message == ("6 strings without spaces (['He', 'went', 'to', ...]): one tokenised sentence or 6 one-word "
                       "sentences? Pass one sentence as [['He', 'went', 'to', ...]] or with split_into_words=True; "
                       "6 one-word sentences with split_into_words=False")


def test_split_into_words_says_which(embedder):
    as_batch = embedder.embed([WORDS])
    one = embedder.embed(WORDS, split_into_words=True)  # a flat list of tokens is ONE sentence: one array
    assert isinstance(one, np.ndarray) and one.shape == (3, 6, 32) and _max_diff(one, as_batch[0]) == 0
    assert embedder.embed(tuple(WORDS), split_into_words=True).shape == (3, 6, 32)
    many = embedder.embed(WORDS, split_into_words=False)  # strings are raw sentences: six of one word
    assert isinstance(many, list) and [m.shape for m in many] == [(3, 1, 32)] * 6
    batch = embedder.embed([WORDS, ["A", "river"]], split_into_words=True)
    assert [b.shape for b in batch] == [(3, 6, 32), (3, 2, 32)]
    assert embedder.encode(WORDS, split_into_words=True).shape == (32,)
    assert embedder.embed_padded(WORDS, split_into_words=True).vectors.shape == (1, 6, 32)
    with pytest.raises(InputTypeError, match="takes tokens"):
        embedder.embed("He went", split_into_words=True)
    with pytest.raises(InputTypeError, match="sentence 1: a string among token lists"):
        embedder.embed([WORDS, "A river"], split_into_words=True)
    with pytest.raises(InputTypeError, match="split_into_words must be"):
        embedder.embed(WORDS, split_into_words="yes")


def test_unambiguous_inputs_need_no_flag(embedder):
    assert [a.shape[1] for a in embedder.embed(["Hello world", "Hi"])] == [2, 1]  # one has a space: raw sentences
    assert [a.shape[1] for a in embedder.embed(["bank"])] == [1]  # a single string in a list: one sentence
    assert [a.shape[1] for a in embedder.embed(["", ""])] == [0, 0]
    assert [a.shape[1] for a in embedder.embed(["a b", ["c"]])] == [2, 1]  # raw text beside a token list
    assert embedder.embed([]) == [] and embedder.embed([], split_into_words=True) == []  # an empty batch


def test_allennlp_names_keep_taking_token_lists(embedder):
    assert embedder.embed_sentence(WORDS).shape == (3, 6, 32)
    assert embedder.embed_sentence([]).shape == (3, 0, 32)
    assert [a.shape[1] for a in embedder.embed_batch(WORDS[:2])] == [1, 1]  # a batch: each string a sentence
    assert [a.shape[1] for a in embedder.embed_batch([WORDS, WORDS[:2]])] == [6, 2]
    assert [a.shape[1] for a in embedder.embed_sentences(iter([WORDS, "a b c"]))] == [6, 3]


# ---- the model's own tokenizer for raw text ----------------------------------------------------------------------
def test_raw_text_goes_through_the_models_tokenizer_by_default(monkeypatch):
    bilm = random_bilm(small_config())
    assert Embedder(bilm).tokenize(["Don't stop."]) == [["Don't", "stop."]]  # no tokenizer_name: whitespace
    bilm.tokenizer_name = "en"
    assert Embedder(bilm).tokenize(["Don't stop."]) == [["Do", "n't", "stop", "."]]
    assert Embedder(bilm, tokenizer="whitespace").tokenize(["Don't stop."]) == [["Don't", "stop."]]

    monkeypatch.setattr(elmo.embed, "load_bilm", lambda *args, **kwargs: bilm)
    loaded = Embedder.from_pretrained("some/model")
    assert loaded.tokenize(["Don't stop."]) == [["Do", "n't", "stop", "."]]
    assert loaded.model_name.endswith("some/model")
    assert Embedder.from_pretrained("some/model", tokenizer="whitespace").tokenize(["Don't"]) == [["Don't"]]


# ---- encode ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", LAYER_CHOICES)
@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_encode_is_exactly_embeds_pooled_vectors(embedder, layers, pooling):
    for batch_size in (None, 1, 2, 4, 100):
        encoded = embedder.encode(SENTENCES, layers, pooling, batch_size=batch_size)
        pooled = embedder.embed(SENTENCES, layers, pooling, batch_size=batch_size)
        assert encoded.dtype == np.float32 and encoded.flags.c_contiguous
        assert encoded.shape == ((6, 3, 32) if layers == "all" else (6, 32))
        assert _max_diff(encoded, np.stack(pooled)) == 0, batch_size
        # another grouping changes float32 rounding only
        assert _max_diff(encoded, embedder.encode(SENTENCES, layers, pooling, batch_size=3)) <= 1e-5
    assert not embedder.encode(SENTENCES, layers, pooling)[2].any()  # the empty sentence pools to zeros


def test_encode_defaults_shapes_and_checks(embedder):
    default = embedder.encode(SENTENCES)
    assert _max_diff(default, np.stack(embedder.embed(SENTENCES, "average", "mean"))) == 0  # average, mean
    assert _max_diff(embedder.encode("x y z"), default[5]) <= 1e-5 and embedder.encode("x y z").shape == (32,)
    assert embedder.encode([]).shape == (0, 32) and embedder.encode([], "all").shape == (0, 3, 32)
    with pytest.raises(UsageError, match="pooling must be 'mean' or 'max'"):
        embedder.encode(SENTENCES, pooling=None)
    with pytest.raises(UsageError, match="batch_size"):
        embedder.encode(SENTENCES, batch_size=0)
    with pytest.raises(UsageError, match="layers 0..2"):
        embedder.encode(SENTENCES, layers=3)


@pytest.mark.parametrize("layers", ["average", "all"])
def test_encode_normalize_gives_unit_rows_and_keeps_zero_rows(embedder, layers):
    raw = embedder.encode(SENTENCES, layers)
    unit = embedder.encode(SENTENCES, layers, normalize=True)
    norms = np.linalg.norm(unit, axis=-1)  # (N,) or (N, L+1)
    assert unit.dtype == np.float32 and np.allclose(np.delete(norms, 2, axis=0), 1, atol=1e-6)
    assert not unit[2].any() and not np.isnan(unit).any()  # the empty sentence stays zero
    assert np.allclose(unit[0] * np.linalg.norm(raw[0], axis=-1, keepdims=True), raw[0], atol=1e-6)


# ---- embed_padded ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", LAYER_CHOICES)
def test_embed_padded_is_exactly_embeds_arrays(embedder, layers):
    for batch_size in (None, 1, 5):
        padded = embedder.embed_padded(SENTENCES, layers, batch_size=batch_size)
        arrays = embedder.embed(SENTENCES, layers, batch_size=batch_size)
        assert isinstance(padded, Padded)
        vectors, lengths = padded
        assert vectors.dtype == np.float32 and lengths.dtype == np.int64
        assert lengths.tolist() == [a.shape[-2] for a in arrays] == [4, 2, 0, 9, 1, 3]
        assert vectors.shape == ((6, 3, 9, 32) if layers == "all" else (6, 9, 32))
        for row, (array, n) in enumerate(zip(arrays, lengths)):
            assert _max_diff(vectors[row, ..., :n, :], array) == 0
            assert not vectors[row, ..., n:, :].any()  # zeros past each length


def test_embed_padded_edges(embedder):
    vectors, lengths = embedder.embed_padded("x y z")  # a single sentence is a batch of one
    assert vectors.shape == (1, 3, 32) and lengths.tolist() == [3]
    vectors, lengths = embedder.embed_padded([])
    assert vectors.shape == (0, 0, 32) and lengths.shape == (0,) and lengths.dtype == np.int64
    vectors, lengths = embedder.embed_padded(["", ""], "all")
    assert vectors.shape == (2, 3, 0, 32) and lengths.tolist() == [0, 0]


# ---- compact arrays ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layers,pooling", [("all", None), ("top", None), (1, None), ("average", "mean"),
                                            ("all", "max")])
def test_per_sentence_arrays_own_their_memory(embedder, layers, pooling):
    arrays = embedder.embed(SENTENCES, layers, pooling)
    for array in arrays:
        assert array.base is None and array.flags.owndata and array.flags.c_contiguous
        assert array.nbytes == array.size * 4  # no hidden batch buffer behind it
    assert embedder.embed("a b", layers, pooling).flags.owndata


# ---- files -------------------------------------------------------------------------------------------------------
def _lines(path):
    with h5py.File(path) as f:
        return {key: f[key].shape for key in f if key != "sentence_to_index"}, dict(f.attrs)


def test_embed_file_splits_on_whitespace_unless_asked(tmp_path):
    bilm = random_bilm(small_config())
    bilm.tokenizer_name = "en"
    embedder = Embedder(bilm)  # raw strings given to embed go through "en" ...
    assert embedder.embed("Don't stop.").shape[1] == 4
    (tmp_path / "in.txt").write_text("Don't stop.\nA b\n", encoding="utf-8")
    assert embedder.embed_file(tmp_path / "in.txt", tmp_path / "ws.hdf5", "top", progress=False) == 2
    shapes, attrs = _lines(tmp_path / "ws.hdf5")  # ... but a file's lines are split on whitespace
    assert shapes["0"] == (2, 16) and attrs["tokenizer"] == "whitespace"
    for tokenize, name in [("model", "en"), ("en", "en"), (embedder.tokenizer, "en")]:
        embedder.embed_file(tmp_path / "in.txt", tmp_path / "t.hdf5", "top", progress=False, tokenize=tokenize)
        shapes, attrs = _lines(tmp_path / "t.hdf5")
        assert shapes == {"0": (4, 16), "1": (2, 16)} and attrs["tokenizer"] == name
    embedder.embed_file(tmp_path / "in.txt", tmp_path / "c.hdf5", "top", progress=False,
                        tokenize=lambda line: line.split("'"))
    assert _lines(tmp_path / "c.hdf5")[0]["0"] == (2, 16)
    with pytest.raises(UsageError, match="unknown tokenizer"):
        embedder.embed_file(tmp_path / "in.txt", tmp_path / "k.hdf5", progress=False, tokenize="klingon")


def test_embed_file_records_model_weights_layers_and_tokenizer(embedder, tmp_path):
    (tmp_path / "in.txt").write_text("The bank closed .\nA river\n", encoding="utf-8")
    embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", "average", progress=False)
    fingerprint = weights_sha256(embedder.bilm)
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert dict(f.attrs) == {"model": f"{OPTIONS.resolve()} + {WEIGHTS.resolve()}",
                                 "weights_sha256": fingerprint, "layers": "average", "tokenizer": "whitespace"}
        assert sorted(f.keys()) == ["0", "1", "sentence_to_index"]  # AllenNLP's layout is unchanged
    embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.npz", "top", progress=False)
    with np.load(tmp_path / "out.npz") as archive:
        meta = json.loads(str(archive["__meta__"]))
        assert meta == {"model": f"{OPTIONS.resolve()} + {WEIGHTS.resolve()}", "weights_sha256": fingerprint,
                        "layers": "top", "tokenizer": "whitespace"}
        assert archive["0"].shape == (4, 32)
    # the function, given a bare biLM: no model name, the rest as above; a tokenizer function is named by its own name
    from elmo.text.tokenize import english_tokenize

    embed_file(embedder.bilm, tmp_path / "in.txt", tmp_path / "bare.hdf5", "all", progress=False,
               tokenize=english_tokenize)
    with h5py.File(tmp_path / "bare.hdf5") as f:
        assert dict(f.attrs) == {"weights_sha256": fingerprint, "layers": "all", "tokenizer": "en"}
    embed_file(embedder.bilm, tmp_path / "in.txt", tmp_path / "named.hdf5", progress=False, model_name="en")
    with h5py.File(tmp_path / "named.hdf5") as f:
        assert f.attrs["model"] == "en"


def test_weights_fingerprint_follows_the_weights_only():
    import torch

    a, b = load_official(OPTIONS, WEIGHTS), load_official(OPTIONS, WEIGHTS)
    assert weights_sha256(a) == weights_sha256(b) and len(weights_sha256(a)) == 64
    b.train()  # a mode, not the weights
    assert weights_sha256(a) == weights_sha256(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-6
    assert weights_sha256(a) != weights_sha256(b)


def test_npz_refuses_a_sentence_key_it_keeps_for_itself(embedder, tmp_path):
    (tmp_path / "in.txt").write_text("a b\n__meta__\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="keeps for itself"):
        embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.npz", progress=False, use_sentence_keys=True)
    embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", progress=False, use_sentence_keys=True)
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert sorted(f.keys()) == ["__meta__", "a b"]
