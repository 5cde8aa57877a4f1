"""Property-based tests (hypothesis): character ids of any text, batching invariance, readers on any bytes."""

import string

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elmo.config import ConfigError, ElmoConfig
from elmo.data.chars import batch_to_ids, word_to_char_ids
from elmo.data.vocab import Vocabulary, VocabError
from elmo.embed_file import InputFileError, read_lines
from elmo.io.text_lines import wide_encoding


@given(st.text(min_size=1, max_size=80))
def test_character_ids_of_any_unicode(word):
    ids = word_to_char_ids(word)
    assert len(ids) == 50 and all(1 <= i <= 261 for i in ids)
    data = word.encode("utf-8", errors="ignore")[:48]
    if word not in ("<S>", "</S>"):
        assert ids[0] == 259 and ids[1 : 1 + len(data)] == tuple(b + 1 for b in data) and ids[1 + len(data)] == 260


words = st.text(alphabet=string.ascii_letters + "éü은행😀.,'", min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(words, min_size=0, max_size=8), min_size=1, max_size=6), st.randoms())
def test_deterministic_mode_ignores_batch_composition_and_order(fixture_model, sentences, rng):
    order = list(range(len(sentences)))
    rng.shuffle(order)
    with torch.no_grad():
        together = fixture_model(batch_to_ids([sentences[i] for i in order]))
        for row, i in enumerate(order):
            alone = fixture_model(batch_to_ids([sentences[i]]))
            n = len(sentences[i])
            for a, b in zip(together.layers, alone.layers):
                assert torch.allclose(a[row, : n + 2], b[0, : n + 2], atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_readers_never_crash_on_arbitrary_bytes(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("bytes")
    path = root / "f"
    path.write_bytes(data)
    for reader, errors in ((lambda: list(read_lines(path)), (InputFileError,)),
                           # --errors replace gets past any bytes, except a gzip header over damaged data and
                           # UTF-16 or UTF-32 text (which it would turn into garbage)
                           (lambda: list(read_lines(path, errors="replace")),
                            (InputFileError,) if data.startswith(b"\x1f\x8b")
                            or wide_encoding(data.partition(b"\n")[0]) else ()),
                           (lambda: Vocabulary.load(path), (VocabError,)),
                           (lambda: ElmoConfig.from_file(path), (ConfigError,))):
        try:
            reader()
        except errors:
            pass


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=400))
def test_weight_readers_error_cleanly_on_arbitrary_bytes(tmp_path_factory, data):
    from elmo.io.native import ModelFileError, load_model
    from elmo.io.official import WeightFileError, load_official
    from tests.conftest import OPTIONS

    root = tmp_path_factory.mktemp("weights")
    (root / "w.hdf5").write_bytes(data)
    with pytest.raises(WeightFileError):
        load_official(OPTIONS, root / "w.hdf5")
    (root / "m").mkdir()
    (root / "m" / "config.json").write_text(OPTIONS.read_text())
    (root / "m" / "model.safetensors").write_bytes(data)
    with pytest.raises(ModelFileError):
        load_model(root / "m")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400) | st.text(max_size=300).map(lambda t: t.encode("utf-8")))
def test_dataset_readers_error_cleanly_on_arbitrary_bytes(tmp_path_factory, data):
    """Every downstream reader returns items or raises DataFormatError (file:line) — never another exception.
    Invalid UTF-8 is also a clean error: UnicodeDecodeError is a ValueError, reported in one line by the CLI."""
    from elmo.tasks import readers

    path = tmp_path_factory.mktemp("dataset") / "f"
    path.write_bytes(data)
    for read in (readers.read_conll2003, readers.read_wnut17, readers.read_conllu, readers.read_sst_trees,
                 readers.read_stsa, readers.read_label_text_tsv, readers.read_kmou_ner,
                 readers.read_wordnet_index_sense, lambda p: readers.read_wsd_xml(p, None)):
        try:
            read(path)
        except (readers.DataFormatError, UnicodeDecodeError):
            pass
