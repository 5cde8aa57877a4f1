"""Hostile arguments to training and evaluation driven from Python (``Trainer``, ``TrainConfig.replace``,
``LanguageModel``, ``perplexity`` / ``score`` / ``substitutes``, ``dump_token_embeddings``, ``Vocabulary``): each is
one ``ElmoError`` line saying what to pass, before any work, never a traceback from inside torch, a NaN, a run that
trains otherwise than asked, or a file written over."""

import dataclasses
import math
import warnings

import pytest

from elmo.config import ConfigError
from elmo.data.corpus import expand_files
from elmo.data.vocab import Vocabulary
from elmo.errors import ElmoError, InputTypeError
from elmo.training.checkpoint import load_language_model
from elmo.training.evaluate import perplexity, score, substitutes, zero_state_perplexity
from elmo.training.export import dump_token_embeddings
from elmo.training.config import TrainConfig
from elmo.training.lm import LanguageModel
from elmo.training.trainer import Trainer
from tests.conftest import micro_train_config
from tests.reliability.tiny import text_file


def one_line(err: pytest.ExceptionInfo, *fragments: str) -> str:
    """The error's message: one line holding every fragment."""
    message = str(err.value)
    assert isinstance(err.value, ElmoError) and "\n" not in message, message
    assert all(f in message for f in fragments), message
    return message


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """(training text, its vocabulary)."""
    folder = tmp_path_factory.mktemp("texts")
    train = text_file(folder / "train.txt", 40)
    return train, Vocabulary.build(line.split() for line in train.read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def trained(tmp_path_factory, texts):
    """(biLM, softmax, vocabulary, run folder) of a one-step micro run."""
    train, vocab = texts
    run = tmp_path_factory.mktemp("run") / "r"
    Trainer(micro_train_config(max_steps=1), [train], run, vocab=vocab, progress=False).train()
    return (*load_language_model(run), run)


@pytest.mark.parametrize("changes, key", [
    ({"bogus": 3}, "bogus"), ({"batch_size": -1}, "batch_size"), ({"batch_size": 4.0}, "batch_size"),
    ({"dropout": 1.5}, "dropout"), ({"learning_rate": math.nan}, "learning_rate"), ({"max_steps": 0}, "max_steps"),
    ({"optimizer": "sgd"}, "optimizer"), ({"model": "tiny"}, "model"),
])
def test_replace_checks_what_it_changes(changes, key):
    """Unchecked, these failed inside torch at the first step, ran nothing, or (``sgd``) trained with Adagrad."""
    with pytest.raises(ConfigError) as err:
        micro_train_config().replace(**changes)
    one_line(err, key)


@pytest.mark.parametrize("name", [None, "", 5])
def test_load_needs_a_name(name):
    """None: a TypeError from pathlib; "": "." read as a folder named like a config."""
    with pytest.raises(ElmoError) as err:
        TrainConfig.load(name)
    one_line(err, "TrainConfig.load")


def test_trainer_checks_its_arguments(texts, tmp_path):
    """A config built without ``replace``, a dict, a list of words, a file or "" as out_dir, a device elmo does not
    run on: one line, and the run folder is not left behind."""
    train, vocab = texts
    cases = [({"config": dataclasses.replace(micro_train_config(), batch_size=-1)}, "batch_size"),
             ({"config": {"batch_size": 4}}, "TrainConfig"), ({"vocab": ["<S>", "</S>", "<UNK>"]}, "Vocabulary"),
             ({"device": "meta"}, "meta"), ({"device": "bogus"}, "bogus")]
    for changes, fragment in cases:
        arguments = {"config": micro_train_config(max_steps=1), "vocab": vocab} | changes
        with pytest.raises(ElmoError) as err:
            Trainer(arguments["config"], [train], tmp_path / "out", vocab=arguments["vocab"],
                    device=changes.get("device"), progress=False)
        one_line(err, fragment)
        assert not (tmp_path / "out").exists()
    (tmp_path / "notes").write_text("mine", encoding="utf-8")
    for out in (tmp_path / "notes", tmp_path / "notes" / "run", ""):
        with pytest.raises(ElmoError) as err:
            Trainer(micro_train_config(max_steps=1), [train], out, vocab=vocab, progress=False)
        one_line(err)
    assert (tmp_path / "notes").read_text(encoding="utf-8") == "mine"


def test_one_file_name_is_not_a_list_of_letters(texts, trained, tmp_path):
    """``"train.txt"`` iterated is "t", "r", ...: refused, naming the list to pass."""
    train, vocab = texts
    bilm, softmax, own_vocab, _ = trained
    with pytest.raises(InputTypeError) as err:
        Trainer(micro_train_config(max_steps=1), str(train), tmp_path / "out", vocab=vocab, progress=False)
    one_line(err, f"[{str(train)!r}]")
    with pytest.raises(InputTypeError):
        expand_files(train)  # a Path: "not iterable" from inside the loop
    with pytest.raises(InputTypeError):
        perplexity(LanguageModel(bilm, softmax), own_vocab, str(train))


def test_a_tokenizer_that_returns_a_string(texts, tmp_path):
    """Its letters would train as the words (with only a warning about <UNK>)."""
    train, vocab = texts
    with pytest.raises(ElmoError) as err:
        Trainer(micro_train_config(max_steps=1), [train], tmp_path / "out", vocab=vocab, tokenizer=lambda line: line,
                progress=False).train()
    one_line(err, "line 1", "list of strings")


def test_vocabulary_arguments():
    """A repeated word (the second id takes its predictions, the first row never trains), a string as the words,
    an empty or spaced word (saved, the file would not load again), strings as sentences, a float size."""
    specials = ["<S>", "</S>", "<UNK>"]
    for words, fragment in [([*specials, "a", "a"], "'a'"), ("<S></S><UNK>", "not one string"),
                            ([*specials, ""], "empty"), ([*specials, "b c"], "whitespace"), ([*specials, 5], "int")]:
        with pytest.raises(ElmoError) as err:
            Vocabulary(words)
        one_line(err, fragment)
    for call, fragment in [(lambda: Vocabulary.build(["the cat", "a dog"]), "sentence 0"),
                           (lambda: Vocabulary.build("the cat"), "one string"),
                           (lambda: Vocabulary.build([["a", "b"]], max_size=4.5), "max_size"),
                           (lambda: Vocabulary.build([["a"]], min_count=0), "min_count"),
                           (lambda: Vocabulary.build([["a", ""]]), "empty")]:
        with pytest.raises(ElmoError) as err:
            call()
        one_line(err, fragment)


def test_evaluation_with_another_models_vocabulary(trained, texts):
    """Each id would name another word's softmax row: a wrong figure without an error, or an IndexError in torch."""
    bilm, softmax, vocab, _ = trained
    train, _ = texts
    larger = Vocabulary(vocab.words + ["extra"])
    smaller = Vocabulary(vocab.words[:5])
    model = LanguageModel(bilm, softmax)
    for other in (larger, smaller):
        for call in (lambda: perplexity(model, other, [train], batch_size=4),
                     lambda: zero_state_perplexity(model, other, [train]),
                     lambda: score(bilm, softmax, other, [["w1", "extra"]]),
                     lambda: substitutes(bilm, softmax, other, ["w1", "w2"], 0)):
            with pytest.raises(ElmoError) as err:
                call()
            one_line(err, f"{len(other)} words", f"{len(vocab)} rows")


def test_evaluation_arguments(trained, texts):
    """Counts of 0 read nothing and were reported as an empty file; -1 failed inside torch; strings were scored
    letter by letter; a position of 1.5 failed in torch and True was read as 1; k = -1 failed in topk."""
    bilm, softmax, vocab, _ = trained
    train, _ = texts
    model = LanguageModel(bilm, softmax)
    for counts, name in [({"batch_size": 0}, "batch_size"), ({"batch_size": -1}, "batch_size"),
                         ({"unroll_steps": 0}, "unroll_steps"), ({"max_sentences": 0}, "max_sentences")]:
        with pytest.raises(ElmoError) as err:
            perplexity(model, vocab, [train], **counts)
        one_line(err, name)
    for call, fragment in [(lambda: score(bilm, softmax, vocab, ["w1 w2"]), "sentence 0 is a string"),
                           (lambda: score(bilm, softmax, vocab, "w1 w2"), "one string"),
                           (lambda: score(model, softmax, vocab, [["w1"]]), ".bilm"),
                           (lambda: perplexity(bilm, vocab, [train]), "LanguageModel"),
                           (lambda: substitutes(bilm, softmax, vocab, "w1 w2 w3", 1), "is a string"),
                           (lambda: substitutes(bilm, softmax, vocab, ["w1", "w2"], 1.5), "1.5"),
                           (lambda: substitutes(bilm, softmax, vocab, ["w1", "w2"], True), "True"),
                           (lambda: substitutes(bilm, softmax, vocab, ["w1", "w2"], 0, k=-1), "-1"),
                           (lambda: substitutes(bilm, softmax, vocab, ["w1", "w2"], 0, k=0), "k 0")]:
        with pytest.raises(ElmoError) as err:
            call()
        one_line(err, fragment)
    assert score(bilm, softmax, vocab, []) == []


def test_a_sentence_over_the_token_limit_is_refused_before_it_runs(trained, texts, tmp_path, monkeypatch):
    """``embed`` refuses a line of over MAX_TOKENS_PER_LINE tokens; ``score``, ``substitutes`` and the zero-state
    perplexity ran it whole (a 64 MiB line of one-letter words is 32 M tokens: tens of GB of activations)."""
    from elmo.training import evaluate
    bilm, softmax, vocab, _ = trained
    model = LanguageModel(bilm, softmax)
    monkeypatch.setattr(evaluate, "MAX_TOKENS_PER_LINE", 5)
    long = ["w1"] * 6
    for call in (lambda: score(bilm, softmax, vocab, [["w1"], long]),
                 lambda: substitutes(bilm, softmax, vocab, long, 0)):
        with pytest.raises(ElmoError) as err:
            call()
        one_line(err, "sentence", "6 tokens", "limit of 5")
    text = tmp_path / "long.txt"
    text.write_text("w1 w2\n" + " ".join(long) + "\n", encoding="utf-8")
    with pytest.raises(ElmoError) as err:
        zero_state_perplexity(model, vocab, [text])
    one_line(err, f"{text}, line 2", "6 tokens", "limit of 5")
    assert score(bilm, softmax, vocab, [long[:5]])  # at the limit: scored
    # a generator is read once (the check had emptied it: no scores), token iterators are sentences too
    assert score(bilm, softmax, vocab, (iter(s) for s in [["w1"], ["w2", "w1"]])) == score(
        bilm, softmax, vocab, [["w1"], ["w2", "w1"]])
    assert perplexity(model, vocab, [text]).tokens == 10  # carried state: a long line is a stream, as in training


def test_dump_token_embeddings_never_writes_over_its_vocabulary(trained, tmp_path):
    bilm, _, vocab, _ = trained
    vocab_file = tmp_path / "vocab.txt"
    vocab.save(vocab_file)
    (tmp_path / "link.txt").symlink_to(vocab_file)
    before = vocab_file.read_bytes()
    for out in (vocab_file, tmp_path / "link.txt"):
        with pytest.raises(ElmoError) as err:
            dump_token_embeddings(bilm, vocab_file, out)
        one_line(err, "vocabulary file it reads")
    with pytest.raises(InputTypeError):
        dump_token_embeddings(None, vocab_file, tmp_path / "tokens.hdf5")
    assert vocab_file.read_bytes() == before and not (tmp_path / "tokens.hdf5").exists()


@pytest.mark.parametrize("dropout", [1.5, math.nan, -0.1, 1.0])
def test_language_model_dropout(dropout):
    """1.5 failed at the first training step inside torch; NaN, -0.1 and 1 (every input zero) trained."""
    with pytest.raises(ElmoError) as err:
        LanguageModel.from_config(micro_train_config().model, 40, dropout=dropout)
    one_line(err, "dropout")


@pytest.mark.parametrize("size", [0, -1, 3.0, 10**12])
def test_language_model_vocab_size(size):
    """0: a softmax of no rows; -1 and 3.0: errors inside torch; 10^12: an allocation of 64 TB."""
    with pytest.raises(ElmoError) as err:
        LanguageModel.from_config(micro_train_config().model, size)
    one_line(err)


def test_a_closed_trainer_writes_nothing_more(texts, tmp_path):
    """After ``train()`` gave the run folder's lock back, ``train()``, ``train_step()`` and ``save()`` went on and
    wrote checkpoints into a folder another run may hold by then: refused in one line, nothing written."""
    train, vocab = texts
    run = tmp_path / "run"
    trainer = Trainer(micro_train_config(max_steps=1), [train], run, vocab=vocab, progress=False)
    trainer.train()
    written = sorted(p.name for p in run.rglob("*"))
    for call in (trainer.train, trainer.train_step, trainer.save):
        with pytest.raises(ElmoError) as err:
            call()
        one_line(err, "closed", "resume=")
    assert sorted(p.name for p in run.rglob("*")) == written
    Trainer(micro_train_config(max_steps=2), [train], run, vocab=vocab, resume=run, progress=False).train()


def test_a_resumed_trainer_applies_or_refuses_the_settings_its_config_sets(texts, tmp_path):
    """``Trainer(config, resume=RUN)`` kept only ``config``'s stopping limits: a new seed or batch size was dropped
    without a word (the command line refuses them) and a new checkpoint interval was not applied (the command line
    applies it)."""
    train, vocab = texts
    run = tmp_path / "run"
    config = micro_train_config(max_steps=1)
    Trainer(config, [train], run, vocab=vocab, progress=False).train()
    for change in ({"seed": config.seed + 9}, {"batch_size": config.batch_size + 1}):
        with pytest.raises(ElmoError) as err:
            Trainer(config.replace(max_steps=2, **change), [train], run, resume=run, progress=False)
        one_line(err, f"cannot change {next(iter(change))} when resuming")
    resumed = Trainer(config.replace(max_steps=2, checkpoint_every=7), [train], run, resume=run, progress=False)
    assert resumed.config.checkpoint_every == 7 and resumed.config.max_steps == 2
    resumed.close()


def test_a_resumed_trainer_says_which_default_values_of_its_config_it_does_not_apply(texts, tmp_path):
    """A config cannot say which of its default values were meant: ``TrainConfig(max_steps=2)`` resuming a run of
    other sizes and batches kept the run's without a word. The run still continues exactly as it trained, and a
    warning names what the config held otherwise; model sizes that are neither the run's nor the default are refused
    (they were dropped silently)."""
    train, vocab = texts
    run = tmp_path / "run"
    config = micro_train_config(max_steps=1)
    Trainer(config, [train], run, vocab=vocab, progress=False).train()
    with pytest.warns(UserWarning) as caught:
        resumed = Trainer(TrainConfig(max_steps=2), [train], run, resume=run, progress=False)
    message = " ".join(str(w.message) for w in caught)
    assert "batch_size 4 (the config has 128, the default)" in message and "model sizes" in message, message
    assert resumed.config.batch_size == config.batch_size and resumed.config.model == config.model
    resumed.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the run's own settings given: nothing to say
        Trainer(config.replace(max_steps=2), [train], run, resume=run, progress=False).close()
    other = dataclasses.replace(config.model, lstm=dataclasses.replace(config.model.lstm, dim=64))
    with pytest.raises(ElmoError) as err:
        Trainer(config.replace(max_steps=2, model=other), [train], run, resume=run, progress=False)
    one_line(err, "model sizes differ from the run's", "init_from=")


def test_a_run_split_by_a_tokenizer_function_resumes_only_with_one(texts, tmp_path, recwarn):
    """A function given as the tokenizer is not recorded: a resume without it split the rest of the text another
    way (0.83 of the targets <UNK> after it) with no word."""
    train, vocab = texts
    run = tmp_path / "run"
    config = micro_train_config(max_steps=1)
    Trainer(config, [train], run, vocab=vocab, tokenizer=str.split, progress=False).train()
    assert any("tokenizer function is not recorded" in str(w.message) for w in recwarn)
    with pytest.raises(ElmoError) as err:
        Trainer(config.replace(max_steps=2), [train], run, resume=run, progress=False)
    one_line(err, "split by a function given as Trainer(tokenizer=...); give it again to resume")
    Trainer(config.replace(max_steps=2), [train], run, resume=run, tokenizer=str.split, progress=False).train()


def test_a_new_run_from_a_run_split_by_a_tokenizer_function_is_warned_without_one(texts, tmp_path):
    """--init-from such a run (a checkpoint or its folder) split the new text by whitespace with no word, though the
    source's text had been split by the function."""
    train, vocab = texts
    run = tmp_path / "run"
    config = micro_train_config(max_steps=1)
    Trainer(config, [train], run, vocab=vocab, tokenizer=str.split, progress=False).train()
    for source in (run, next(run.glob("step-*"))):
        with pytest.warns(UserWarning, match="split by a function given as Trainer.*this run splits its text by "
                                             "whitespace"):
            Trainer(config, [train], tmp_path / f"new-{source.name}", init_from=source, progress=False).close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(config, [train], tmp_path / "given", init_from=run, tokenizer=str.split, progress=False).close()
    assert not [w for w in caught if "this run splits its text by" in str(w.message)]


@pytest.mark.parametrize("argument", ["resume", "init_from"])
def test_an_empty_path_to_resume_or_start_from_is_one_line_not_a_new_random_run(texts, tmp_path, argument):
    """``resume=""`` (an unset variable) was read as "not given": a fresh random run started without a word, where
    the command line refuses ``--resume ""``."""
    train, vocab = texts
    with pytest.raises(ElmoError) as err:
        Trainer(micro_train_config(max_steps=1), [train], tmp_path / "run", vocab=vocab, progress=False,
                **{argument: ""})
    one_line(err, f"Trainer {argument}: an empty path")
    assert not (tmp_path / "run").exists()


def test_export_checkpoint_to_an_empty_path_is_one_line_not_the_current_folder(texts, tmp_path, monkeypatch):
    from elmo.training.export import export_checkpoint

    train, vocab = texts
    Trainer(micro_train_config(max_steps=1), [train], tmp_path / "run", vocab=vocab, progress=False).train()
    monkeypatch.chdir(tmp_path)
    for out, fragment in (("", "an empty path"), (5, "must be a path")):
        with pytest.raises(ElmoError) as err:
            export_checkpoint(tmp_path / "run", out)
        one_line(err, "export_checkpoint out_dir", fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("change, fragment", [
    ({"files": [5]}, "a training file of Trainer must be a path"), ({"files": [None]}, "must be a path"),
    ({"resume": 5}, "Trainer resume must be a path"),
    ({"given": "x"}, "given must be a dict"), ({"given": {"bogus": 1}}, "given names no setting 'bogus'"),
])
def test_wrong_kinds_of_trainer_arguments_are_one_line(texts, tmp_path, change, fragment):
    """Each ended in a TypeError or AttributeError inside pathlib or the config (or, for a new run, ``given`` of
    unknown settings was ignored without a word)."""
    train, vocab = texts
    arguments = {"files": [train], "vocab": vocab, "progress": False} | change
    with pytest.raises(ElmoError) as err:
        Trainer(micro_train_config(max_steps=1), arguments.pop("files"), tmp_path / "run", **arguments)
    one_line(err, fragment)
    assert not (tmp_path / "run").exists()


def test_a_language_model_from_no_config_is_one_line():
    with pytest.raises(ElmoError) as err:
        LanguageModel.from_config(None, 10)
    one_line(err, "takes an ElmoConfig")


def test_perplexity_runs_the_full_softmax_in_bounded_blocks(trained, texts, monkeypatch):
    """All R x T positions of a batch went through the softmax at once: 16 GB of logits at --batch-size 4096 with a
    50,000-word vocabulary. Now at most SCORE_POSITIONS at a time, the same perplexity."""
    import elmo.training.evaluate as evaluate

    bilm, softmax, vocab, _ = trained
    train, _ = texts
    model = LanguageModel(bilm, softmax)
    whole = perplexity(model, vocab, [train], batch_size=16)
    seen = []
    full_loss = type(softmax).full_loss
    monkeypatch.setattr(type(softmax), "full_loss", lambda self, hidden, *a, **k: seen.append(len(hidden)) or
                        full_loss(self, hidden, *a, **k))
    monkeypatch.setattr(evaluate, "SCORE_POSITIONS", 7)
    blocked = perplexity(model, vocab, [train], batch_size=16)
    assert seen and max(seen) <= 7 and sum(seen) == 2 * blocked.tokens
    assert blocked.forward == pytest.approx(whole.forward, rel=1e-6)
    assert blocked.backward == pytest.approx(whole.backward, rel=1e-6)
