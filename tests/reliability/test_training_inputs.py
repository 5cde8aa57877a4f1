"""Hostile training inputs: config files, flags against them, vocabularies and language-model folders. Each is one
error line naming the file and what to do (exit 1; a wrong flag exits 2), never a traceback, a setting passed over
in silence, or a run that trains nothing and exits 0."""

import json
import shutil

import pytest

from elmo.cli import main
from elmo.errors import UsageError
from elmo.io.resolve import recorded_tokenizer
from elmo.training.softmax import check_softmax_size
from tests.conftest import micro_train_config
from tests.reliability.tiny import cli, one_error_line, text_file

MICRO_MODEL = micro_train_config().to_dict()["model"]  # [model.lstm] and [model.char_cnn] in full


def _json_config(path, train: dict | None = None, model: dict | None = None) -> str:
    """The micro training config as a JSON file, with some [train] keys changed."""
    data = micro_train_config().to_dict()
    path.write_text(json.dumps({"train": data["train"] | (train or {}), "model": model or MICRO_MODEL}),
                    encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """(training text, its vocabulary) in a folder of their own."""
    folder = tmp_path_factory.mktemp("texts")
    train = text_file(folder / "train.txt", 60)
    assert cli_quiet("vocab", "build", train, "-o", folder / "vocab.txt") == 0
    return train, folder / "vocab.txt"


@pytest.fixture(scope="module")
def en_run(tmp_path_factory, texts):
    """A one-step micro run whose config says tokenize = "en"."""
    train, vocab = texts
    folder = tmp_path_factory.mktemp("en_run")
    config = _json_config(folder / "en.json", {"tokenize": "en"})
    assert cli_quiet("train", train, "--config", config, "--vocab", vocab, "--out", folder / "run",
                     "--max-steps", "1", "--quiet") == 0
    assert recorded_tokenizer(folder / "run") == "en"
    return folder / "run"


def cli_quiet(*args) -> int:
    """``elmo ARGS`` in this process: the exit code (what it prints is not looked at)."""
    return main([str(a) for a in args])


def _train(capsys, texts, out, *args) -> tuple[int, str]:
    train, vocab = texts
    return cli(capsys, "train", train, "--vocab", vocab, "--out", out, "--max-steps", "1", "--quiet", *args)


@pytest.mark.parametrize("name, text, fragment", [
    ("number.toml", 'train = 5\n[model]\npreset = "tiny"\n', "[train] must be a table"),
    ("array.toml", '[[train]]\ndropout = 0.2\nseed = 3\n[model]\npreset = "tiny"\n', "[train] must be a table"),
    ("models.toml", '[[model]]\npreset = "tiny"\n', "[model] must be a table"),
    ("preset.toml", '[model]\npreset = ["tiny"]\n', "is not a model size"),
    ("list.json", "[1, 2]", "holds the tables [train] and [model]"),
    ("null.json", "null", "holds the tables [train] and [model]"),
])
def test_a_config_whose_tables_are_not_tables_is_one_line(tmp_path, capsys, texts, name, text, fragment):
    """``dict(5)`` was a traceback; ``[[train]]`` with two keys would pair them up as one setting."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    rc, err = _train(capsys, texts, tmp_path / "run", "--config", tmp_path / name)
    assert rc == 1
    one_error_line(err, name, fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key, value, fragment", [("dropout", 0.5, "move it to [train]"),
                                                  ("unroll_steps", 5, "move it to [train]"),
                                                  ("n_negative_samples_batch", 10, "not read there")])
def test_a_training_setting_in_the_model_table_is_refused(tmp_path, capsys, texts, key, value, fragment):
    """bilm-tf's options.json keeps dropout and unroll_steps beside the sizes: copied into [model], they were passed
    over and the run trained with dropout 0.1 and 20 steps."""
    config = _json_config(tmp_path / "c.json", model={**MICRO_MODEL, key: value})
    rc, err = _train(capsys, texts, tmp_path / "run", "--config", config)
    assert rc == 1
    one_error_line(err, "c.json", repr(key), fragment)


def test_a_key_given_twice_in_a_json_config_is_refused(tmp_path, capsys, texts):
    """json keeps the last of a repeated key: the first value was dropped without a word."""
    model = json.dumps(MICRO_MODEL)
    (tmp_path / "twice.json").write_text('{"train": {"dropout": 0.5, "dropout": 0.1}, "model": %s}' % model)
    rc, err = _train(capsys, texts, tmp_path / "run", "--config", tmp_path / "twice.json")
    assert rc == 1
    one_error_line(err, "twice.json", "'dropout' is given twice")


def test_max_steps_zero_in_a_config_is_refused_as_the_flag_is(tmp_path, capsys, texts):
    """It exited 0 ("nothing to train"), with no checkpoint: a script's `train && export` went on."""
    train, vocab = texts
    config = _json_config(tmp_path / "zero.json", {"max_steps": 0})
    rc, err = cli(capsys, "train", train, "--config", config, "--vocab", vocab, "--out", tmp_path / "run", "--quiet")
    assert rc == 1
    one_error_line(err, "zero.json", "'max_steps' must be at least 1")
    assert not (tmp_path / "run").exists()


def test_the_tokenize_flag_outranks_the_config_file(tmp_path, capsys, texts, en_run):
    """`--tokenize none` was dropped when the --config file said tokenize = "en" (on a new run and on --resume)."""
    config = _json_config(tmp_path / "en.json", {"tokenize": "en"})
    rc, err = _train(capsys, texts, tmp_path / "ws", "--config", config, "--tokenize", "none")
    assert rc == 0, err
    assert recorded_tokenizer(tmp_path / "ws") is None
    resumed = tmp_path / "resumed"
    shutil.copytree(en_run, resumed)
    rc, err = cli(capsys, "train", texts[0], "--out", resumed, "--resume", resumed, "--max-steps", "2", "--quiet",
                  "--tokenize", "whitespace")
    assert rc == 1
    one_error_line(err, "cannot change tokenize")
    rc, err = cli(capsys, "train", texts[0], "--out", tmp_path / "ws", "--resume", tmp_path / "ws", "--max-steps",
                  "2", "--quiet", "--tokenize", "whitespace")
    assert rc == 0, err  # the same splitting said two ways


@pytest.mark.parametrize("command", ["vocab", "train", "perplexity", "baselines"])
def test_an_unknown_tokenizer_is_a_usage_error(tmp_path, capsys, texts, command):
    train, vocab = texts
    args = {"vocab": ["vocab", "build", train, "-o", tmp_path / "v.txt"],
            "train": ["train", train, "--vocab", vocab, "--out", tmp_path / "run"],
            "perplexity": ["perplexity", tmp_path / "no-model", train],
            "baselines": ["baselines", vocab, "--train", train, "--eval", train]}[command]
    rc, err = cli(capsys, *args, "--tokenize", "bogus")
    assert rc == 2
    assert "invalid choice: 'bogus'" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "v.txt").exists()


def test_a_model_folder_or_checkpoint_without_its_vocabulary(tmp_path, capsys, texts, en_run):
    """It said only "vocab.txt: No such file or directory", not that the softmax's words are missing."""
    copy = tmp_path / "run"
    shutil.copytree(en_run, copy)
    checkpoint = next(copy.glob("step-*"))
    (checkpoint / "vocab.txt").unlink()
    rc, err = cli(capsys, "score", checkpoint, "w1 w2")
    assert rc == 1
    one_error_line(err, "vocab.txt: missing beside softmax.safetensors", "put back")
    rc, err = cli(capsys, "train", texts[0], "--out", copy, "--resume", copy, "--max-steps", "2", "--quiet")
    assert rc == 1
    one_error_line(err, "damaged checkpoint", "vocab.txt", "previous checkpoint")


def test_a_vocabulary_too_large_for_a_softmax_is_refused_before_it_is_allocated(tmp_path, capsys, texts,
                                                                                 monkeypatch):
    """250,003 words x 8,193 would be a softmax of 2 x 10^9 parameters (8 GB, and as much for Adagrad): the run
    drew them and failed inside torch, or was killed. The limit is lowered here so the run would be small."""
    with pytest.raises(UsageError, match=r"v\.txt: 250,003 words x 8193 .* --max-size 244110"):
        check_softmax_size(250_003, 8192, "v.txt")
    check_softmax_size(793_471, 512, "v.txt")  # bilm-tf's 1B Word vocabulary with the original model's projection
    monkeypatch.setattr("elmo.training.softmax.MAX_SOFTMAX_PARAMETERS", 100)
    rc, err = _train(capsys, texts, tmp_path / "run", "--config", _json_config(tmp_path / "c.json"))
    assert rc == 1
    one_error_line(err, "vocab.txt", "over the limit of 100", "--max-size")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--max-steps", "1"], "give the training text"),  # no files and no --resume
    (["TEXT", "--max-steps", "1"], "a vocabulary is needed: pass --vocab"),  # a new run without --vocab
])
def test_a_training_command_line_without_text_or_vocabulary_is_a_usage_error(tmp_path, capsys, args, fragment):
    """Both are a command line's mistakes (exit 2), found before the run folder is made."""
    (tmp_path / "t.txt").write_text("a b c\n", encoding="utf-8")
    args = [str(tmp_path / "t.txt") if a == "TEXT" else a for a in args]
    rc, err = cli(capsys, "train", *args, "--out", tmp_path / "run")
    assert rc == 2 and fragment in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_adagrads_accumulator_with_adam_is_refused(tmp_path, capsys, texts):
    """``initial_accumulator`` was left unused without a word when the file also chose Adam."""
    config = _json_config(tmp_path / "adam.json", {"optimizer": "adam", "initial_accumulator": 0.5})
    rc, err = _train(capsys, texts, tmp_path / "run", "--config", config)
    assert rc == 1
    one_error_line(err, "adam.json", "initial_accumulator is Adagrad's", 'optimizer = "adagrad"')
    assert not (tmp_path / "run").exists()


def test_a_run_with_adam_still_resumes(tmp_path, capsys, texts):
    """A checkpoint records every key, Adagrad's accumulator too: resuming an Adam run is not refused for it."""
    data = micro_train_config().to_dict()
    data["train"] = {k: v for k, v in data["train"].items() if k != "initial_accumulator"} | {"optimizer": "adam"}
    (tmp_path / "adam.json").write_text(json.dumps(data), encoding="utf-8")
    run = tmp_path / "run"
    rc, err = _train(capsys, texts, run, "--config", tmp_path / "adam.json")
    assert rc == 0, err
    rc, err = cli(capsys, "train", "--resume", run, "--out", run, "--max-steps", "2", "--quiet")
    assert rc == 0, err


@pytest.mark.parametrize("zero_state", [False, True])
def test_perplexity_of_empty_text_names_the_file(tmp_path, capsys, en_run, zero_state):
    """It said "the files hold no non-empty line", naming none of them."""
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    rc, err = cli(capsys, "perplexity", en_run, tmp_path / "empty.txt", "--quiet", *(["--zero-state"] * zero_state))
    assert rc == 1
    one_error_line(err, "empty.txt: no text to evaluate")


def test_the_baselines_usage_line_works_as_printed(capsys, texts):
    """argparse printed `--train ... --eval EVAL [EVAL ...] vocab`; followed as printed, --eval took the vocabulary for
    one more held-out file and the command said "required: vocab"."""
    train, vocab = texts
    rc, err = cli(capsys, "baselines", "--train", train, "--eval", train, vocab)
    one_error_line(err, "elmo baselines: error:", "required: vocab", "(usage: elmo baselines --help)")
    rc, err = cli(capsys, "baselines", vocab, "--train", train, "--eval", train)  # the order the usage line shows
    assert rc == 0, err


def test_score_and_substitutes_split_as_the_models_text_was(capsys, texts, en_run):
    """They split at whitespace whatever the model's tokenizer: `"w1, w2."` was scored as `<UNK> <UNK>` (the
    model's "en" text never held "w1,"), with no word of it. Tokens scored as <UNK> are named now."""
    assert main(["score", str(en_run), "w1, w2."]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip().endswith("w1 , w2 .")  # the vocabulary has no punctuation: those two are said
    assert "warning: 2 of 4 tokens" in err and "<UNK>: ',', '.'" in err
    assert main(["score", str(en_run), "w1, w2.", "--tokenize", "whitespace"]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip().endswith("w1, w2.")
    assert "warning: 2 of 2 tokens" in err and "<UNK>: 'w1,', 'w2.'" in err and "--tokenize" in err
    assert main(["substitutes", str(en_run), "w1, w2.", "1", "-k", "2"]) == 0
    assert capsys.readouterr().out.startswith("position 1: ',' in 'w1 , w2 .'")
    assert main(["substitutes", str(en_run), "w1, w2.", "3", "-k", "1"]) == 0  # 4 tokens: 0..3
    assert main(["substitutes", str(en_run), "w1, w2.", "4"]) == 2
    assert "0..3: 4 tokens: w1 , w2 ." in capsys.readouterr().err


@pytest.mark.parametrize("lines, blank", [(["a", "b", "", "c"], 3), (["", "a", "b"], 1)])
def test_a_blank_line_among_the_words_of_a_vocabulary_is_refused_naming_it(tmp_path, capsys, lines, blank):
    """Line i is word i: `dump-token-embeddings` skipped a blank line and wrote 3 rows, the third the vector of line
    4's word (a softmax vocabulary shifts alike). Blank lines after the last word stay harmless."""
    from tests.reliability.tiny import tiny_model

    model = tiny_model(tmp_path / "model")
    (tmp_path / "v.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc, err = cli(capsys, "dump-token-embeddings", tmp_path / "v.txt", tmp_path / "out.hdf5", "--model", model)
    assert rc == 1 and not (tmp_path / "out.hdf5").exists()
    one_error_line(err, f"v.txt, line {blank}: blank")
    (tmp_path / "v.txt").write_text("a\nb\nc\n\n\n", encoding="utf-8")
    rc, err = cli(capsys, "dump-token-embeddings", tmp_path / "v.txt", tmp_path / "out.hdf5", "--model", model)
    assert rc == 0, err


def test_a_batch_of_more_tokens_than_any_machine_holds_is_refused_before_training(tmp_path, capsys, texts):
    """batch_size 4096 and unroll_steps 20,000 are each within their limits; together the character ids alone are
    66 GB: a MemoryError traceback (and a lock left behind) after the run had started."""
    from elmo.config import ConfigError

    with pytest.raises(ConfigError, match="batch_size x unroll_steps is 81,920,000 tokens"):
        micro_train_config(batch_size=4096, unroll_steps=20_000).check()
    data = micro_train_config(unroll_steps=20_000).to_dict()
    data["train"]["batch_size"] = 4096
    config = tmp_path / "big.json"
    config.write_text(json.dumps(data), encoding="utf-8")
    train, vocab = texts
    rc, err = cli(capsys, "train", train, "--vocab", vocab, "--config", config, "--out", tmp_path / "run")
    assert rc == 1 and not (tmp_path / "run").exists()
    one_error_line(err, "big.json", "above the limit of 1,000,000")
