"""A model carries its tokenizer through every copy (save_model, convert, export), and the English tokenizer is
idempotent on text already tokenised as the 1B Word Benchmark is."""

import json
import warnings

import numpy as np
import pytest

from elmo.cli import main
from elmo.config import ConfigError, ElmoConfig
from elmo.embed import Embedder
from elmo.io.resolve import recorded_tokenizer
from elmo.io.load import load_bilm
from elmo.io.native import load_model, save_model
from elmo.io.official import export_official, load_official
from elmo.text.tokenize import english_tokenize, get_tokenizer
from tests.conftest import data_path, micro_train_config, random_bilm, small_config

SENTENCES = {"en": ["Don't stop.", "Mr. Smith went to Washington."], "ko": ["나는 은행에서 돈을 찾았다."]}


# ---- the English tokenizer ---------------------------------------------------------------------------------------
def test_raw_english_is_split_ptb_style():
    assert english_tokenize("Don't stop.") == ["Do", "n't", "stop", "."]
    assert english_tokenize("I can't.") == ["I", "ca", "n't", "."]
    assert english_tokenize("Mr. Smith went to Washington.") == ["Mr.", "Smith", "went", "to", "Washington", "."]
    assert english_tokenize("I came. I saw. No. 5 won.") == ["I", "came", ".", "I", "saw", ".", "No.", "5", "won", "."]
    assert english_tokenize("Say No. Apple Inc. said so.") == ["Say", "No", ".", "Apple", "Inc.", "said", "so", "."]
    assert english_tokenize("He said 'no' twice.") == ["He", "said", "'", "no", "'", "twice", "."]
    assert english_tokenize("Wait... the 1990s, 18-year-old U.S.-led guardian.co.uk.") == [
        "Wait", "...", "the", "1990s", ",", "18-year-old", "U.S.-led", "guardian.co.uk."]


def test_english_text_already_tokenised_comes_back_unchanged():
    for line in ("they didn 't say , but won 't go", "O 'Neal and Shi 'ite , y 'all", "Mr. Smith of No. 10 said .",
                 "J. R. R. Tolkien 's U.S. book -- 1990s", "needs--and mid- and -5 and .07 , 3.14 1,000ft", "it ' s"):
        assert english_tokenize(line) == line.split()
    for text in ("Don't stop.", "Mr. Smith went to Washington.", "He said 'no' twice.", "I can't."):
        once = english_tokenize(text)
        assert english_tokenize(" ".join(once)) == once


def test_every_line_of_the_1b_word_dev_set_is_kept_as_it_is():
    """ELMo's training text is the 1B Word Benchmark's, tokenised already: the tokenizer must not split it again."""
    lines = [line for line in data_path("en/1b-heldout/dev.tokens").read_text(encoding="utf-8").split("\n") if line.strip()]
    changed = [line for line in lines if english_tokenize(line) != line.split()]
    assert len(lines) > 12_000
    assert not changed, f"{len(changed)} of {len(lines)} lines re-split, e.g. {changed[0]!r}"


# ---- the tokenizer travels with the model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    """Each shipped model's Embedder (loaded once), with its tokens and fp32 vectors of SENTENCES."""
    found = {}
    for name, sentences in SENTENCES.items():
        embedder = Embedder.from_pretrained(name)
        found[name] = embedder, embedder.tokenize(sentences), embedder.embed(sentences)
    return found


def _same_embeddings(reference: tuple, copy: Embedder, sentences: list[str]) -> None:
    """Same tokenizer, same tokens of raw text, vectors equal to the last bit."""
    original, tokens, vectors = reference
    assert copy.bilm.tokenizer_name == original.bilm.tokenizer_name
    assert copy.tokenize(sentences) == tokens
    for x, y in zip(vectors, copy.embed(sentences)):
        assert x.dtype == y.dtype == np.float32 and x.shape == y.shape and np.abs(x - y).max() == 0


@pytest.mark.parametrize("name", ["en", "ko"])
def test_a_shipped_model_saved_and_loaded_keeps_its_tokenizer(name, shipped, tmp_path):
    original = shipped[name][0]
    assert original.bilm.tokenizer_name == name
    save_model(original.bilm, tmp_path / "copy")
    assert json.loads((tmp_path / "copy" / "config.json").read_text(encoding="utf-8"))["tokenizer"] == name
    copy = Embedder.from_pretrained(str(tmp_path / "copy"))
    _same_embeddings(shipped[name], copy, SENTENCES[name])
    if name == "en":
        assert copy.tokenize(["Don't stop."]) == [["Do", "n't", "stop", "."]]  # 4 tokens, not ["Don't", "stop."]


def test_convert_to_ours_and_to_official_and_back_keeps_the_tokenizer(shipped, tmp_path):
    assert main(["convert", "--model", "en", str(tmp_path / "ours"), "--to", "ours"]) == 0
    _same_embeddings(shipped["en"], Embedder.from_pretrained(str(tmp_path / "ours")), SENTENCES["en"])
    assert main(["convert", "--model", "en", str(tmp_path / "official"), "--to", "official"]) == 0
    assert json.loads((tmp_path / "official" / "options.json").read_text(encoding="utf-8"))["tokenizer"] == "en"
    assert main(["convert", "--model", str(tmp_path / "official"), str(tmp_path / "back"), "--to", "ours"]) == 0
    assert recorded_tokenizer(tmp_path / "official") == recorded_tokenizer(tmp_path / "back") == "en"
    _same_embeddings(shipped["en"], Embedder.from_pretrained(str(tmp_path / "back")), SENTENCES["en"])


def test_a_whitespace_model_writes_no_tokenizer_key_into_options_json(tmp_path):
    """Files for bilm-tf and AllenNLP stay as theirs when there is nothing to say; a null in config.json."""
    bilm = random_bilm(small_config())
    options, weights = export_official(bilm, tmp_path / "official")
    assert "tokenizer" not in json.loads(options.read_text(encoding="utf-8"))
    assert load_official(options, weights).tokenizer_name is None
    save_model(bilm, tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "config.json").read_text(encoding="utf-8"))["tokenizer"] is None
    assert load_model(tmp_path / "ours").tokenizer_name is None


def test_elmo_export_of_a_trained_checkpoint_keeps_the_tokenizer(tmp_path):
    from elmo.data.vocab import Vocabulary
    from elmo.training.trainer import Trainer

    raw = ["Don't stop the music.", "Mr. Smith went to Washington.", "It wasn't bad, was it?", "She can't come."] * 30
    (tmp_path / "train.txt").write_text("\n".join(raw) + "\n", encoding="utf-8")
    vocab = Vocabulary.build(english_tokenize(line) for line in raw)
    run = tmp_path / "run"
    Trainer(micro_train_config(max_steps=1, tokenize="en"), [tmp_path / "train.txt"], run, vocab=vocab,
            progress=False).train()
    assert recorded_tokenizer(run) == "en" and load_bilm(str(run)).tokenizer_name == "en"
    assert main(["export", str(run), str(tmp_path / "exp")]) == 0
    assert not (tmp_path / "exp" / "tokenizer.json").exists()  # one place: config.json (and options.json)
    assert load_model(tmp_path / "exp").tokenizer_name == "en"
    assert load_official(tmp_path / "exp" / "options.json", tmp_path / "exp" / "weights.hdf5").tokenizer_name == "en"
    trained = Embedder.from_pretrained(str(run))
    exported = Embedder.from_pretrained(str(tmp_path / "exp"))
    _same_embeddings((trained, trained.tokenize(SENTENCES["en"]), trained.embed(SENTENCES["en"])), exported,
                     SENTENCES["en"])
    assert exported.tokenize(["Don't stop."]) == [get_tokenizer("en")("Don't stop.")]


# ---- how the key is read -----------------------------------------------------------------------------------------
def test_a_folder_saved_before_config_json_named_the_tokenizer_reads_its_tokenizer_json(tmp_path):
    folder = save_model(random_bilm(small_config()), tmp_path / "old")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["tokenizer"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert load_model(folder).tokenizer_name is None
    (folder / "tokenizer.json").write_text('{"tokenize": "ko"}', encoding="utf-8")
    assert load_model(folder).tokenizer_name == "ko" and recorded_tokenizer(folder) == "ko"


def test_an_unknown_tokenizer_name_is_one_line_naming_the_file(tmp_path):
    folder = save_model(random_bilm(small_config()), tmp_path / "m")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "tokenizer": "fr"}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config\.json: tokenizer must be one of whitespace, en, ko, ko-morph") as err:
        load_model(folder)
    assert "\n" not in str(err.value)


def test_the_tokenizer_key_is_no_unknown_key_of_an_options_file_but_is_one_in_a_training_config():
    options = {**small_config().to_options(), "tokenizer": "en", "format_version": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ElmoConfig.from_options(options) == small_config()
    with pytest.raises(ConfigError, match="unknown key tokenizer"):
        ElmoConfig.from_options(options, strict=True)
