"""The training commands end to end through the CLI, on a micro config and a slice of real text."""

import json

import h5py
import pytest
import torch

from elmo.cli import main
from elmo.io.resolve import recorded_tokenizer
from tests.conftest import micro_train_config


def _micro_toml(path, **train_changes):
    """The micro training config as a TOML file, with some [train] keys changed."""
    config = micro_train_config().to_dict()
    lines = ["[train]"] + [f"{k} = {json.dumps(v)}" for k, v in (config["train"] | train_changes).items()
                           if v is not None]
    for section in ("lstm", "char_cnn"):
        lines.append(f"[model.{section}]")
        for k, v in config["model"][section].items():
            if v is not None:
                lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else '{ dim = %d }' % v['dim']}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_vocab_train_resume_perplexity_score_substitutes_export(text_slices, tmp_path, capsys):
    train, dev, _ = text_slices
    _micro_toml(tmp_path / "micro.toml")

    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--min-count", "2"]) == 0
    run = str(tmp_path / "run")
    assert main(["train", str(train), "--config", str(tmp_path / "micro.toml"), "--vocab", str(tmp_path / "vocab.txt"),
                 "--out", run, "--max-steps", "3", "--quiet"]) == 0
    assert main(["train", str(train), "--out", run, "--resume", run, "--max-steps", "5", "--quiet"]) == 0
    assert (tmp_path / "run" / "step-00000005").is_dir()
    capsys.readouterr()
    assert main(["perplexity", run, str(dev), "--quiet", "--max-sentences", "50"]) == 0
    out = capsys.readouterr().out
    assert "forward" in out and "backward" in out and "mean" in out
    # in 4 rows the state carries from sentence to sentence; --zero-state starts each from zeros
    assert main(["perplexity", run, str(dev), "--quiet", "--max-sentences", "50", "--batch-size", "4"]) == 0
    carried = capsys.readouterr().out
    assert main(["perplexity", run, str(dev), "--quiet", "--max-sentences", "50", "--zero-state"]) == 0
    zero = capsys.readouterr().out
    figures = [dict(zip(text.split()[0::2], map(float, text.replace("%", "").split()[1::2])))
               for text in (out, carried, zero)]
    assert figures[2]["tokens"] == figures[0]["tokens"] == figures[1]["tokens"]
    assert abs(figures[2]["forward"] / figures[1]["forward"] - 1) > 1e-3
    assert main(["score", run, "the film was good .", "good was film the ."]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert main(["substitutes", run, "the film was good .", "3", "-k", "3"]) == 0
    assert "both" in capsys.readouterr().out
    assert main(["export", run, str(tmp_path / "exp")]) == 0
    assert main(["dump-token-embeddings", str(tmp_path / "vocab.txt"), str(tmp_path / "tok.hdf5"),
                 "--model", str(tmp_path / "exp")]) == 0
    with h5py.File(tmp_path / "tok.hdf5") as f:
        assert f["embedding"].shape[1] == 16
    assert main(["baselines", str(tmp_path / "vocab.txt"), "--train", str(train), "--eval", str(dev)]) == 0
    assert "kn-trigram" in capsys.readouterr().out


def test_training_errors_are_one_line(tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing*.txt"), "--vocab", "nope.txt", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("nope.txt" in err or "missing" in err)
    assert main(["train", "x.txt", "--config", "no-such-preset", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "no such file and not a preset (presets: " in err and "small-cpu" in err and "tiny" in err


def test_resume_takes_new_run_limits_and_refuses_settings_it_cannot_change(text_slices, tmp_path, capsys):
    train, _, _ = text_slices
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--min-count", "2"]) == 0
    run = tmp_path / "run"
    common = ["train", str(train), "--out", str(run), "--quiet"]
    assert main([*common, "--config", _micro_toml(tmp_path / "micro.toml"), "--vocab", str(tmp_path / "vocab.txt"),
                 "--max-steps", "2"]) == 0
    # a new stopping rule replaces the old one: --max-minutes alone must not stop at the first run's step 2
    assert main([*common, "--resume", str(run), "--max-minutes", "0.03", "--checkpoint-every", "1"]) == 0
    steps = sorted(int(p.name.split("-")[1]) for p in run.glob("step-*"))
    assert steps[-1] > 2 and steps[-1] - 1 in steps  # trained on, checkpointing every step as asked
    capsys.readouterr()
    for flags, key in ((["--seed", "9"], "seed"), (["--batch-size", "3"], "batch_size"),
                       (["--config", "tiny"], "model")):
        assert main([*common, "--resume", str(run), "--max-steps", "1000", *flags]) == 1
        err = capsys.readouterr().err
        assert "cannot change" in err and key in err and "--init-from" in err
    # a --config file that changes them is refused the same way (the flags not given do not hide the file's values)
    for changes, key in (({"batch_size": 3}, "batch_size"), ({"seed": 7}, "seed")):
        other = _micro_toml(tmp_path / "other.toml", **changes)
        assert main([*common, "--resume", str(run), "--max-steps", "1000", "--config", other]) == 1
        assert key in capsys.readouterr().err
    # the same --config as the run's own is accepted
    assert main([*common, "--resume", str(run), "--max-steps", str(steps[-1] + 1), "--config",
                 str(tmp_path / "micro.toml")]) == 0
    # zero-state sentence starts may change on a resume (a run from before the setting can take it up)
    assert main([*common, "--resume", str(run), "--max-steps", str(steps[-1] + 2), "--zero-state-share", "0.25"]) == 0
    newest = max(run.glob("step-*"))
    assert json.loads((newest / "train_config.json").read_text())["train"]["zero_state_share"] == 0.25


def test_bad_training_settings_are_one_line(text_slices, tmp_path, capsys):
    train, _, _ = text_slices
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt")]) == 0
    capsys.readouterr()
    base = ["train", str(train), "--vocab", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "r"), "--quiet"]
    for changes, key in (({"checkpoint_every": 0}, "checkpoint_every"), ({"log_every": 0}, "log_every"),
                         ({"unroll_steps": 0}, "unroll_steps"), ({"learning_rate": "0.1"}, "learning_rate"),
                         ({"dropout": 1.5}, "dropout"), ({"zero_state_share": 1.5}, "zero_state_share"),
                         ({"zero_state_share": "0.5"}, "zero_state_share")):
        assert main([*base, "--config", _micro_toml(tmp_path / "bad.toml", **changes)]) == 1
        err = capsys.readouterr().err
        assert key in err and len(err.strip().splitlines()) == 1, err
    assert main([*base, "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert main([*base, "--zero-state-share", "2"]) == 2  # a flag's number: checked as it is parsed
    assert "--zero-state-share: must be from 0 to 1" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    assert main(["baselines", str(tmp_path / "vocab.txt"), "--train", str(tmp_path / "empty.txt"), "--eval",
                 str(train)]) == 1
    assert "empty.txt: no words" in capsys.readouterr().err
    assert main(["baselines", str(tmp_path / "vocab.txt"), "--train", str(train), "--eval",
                 str(tmp_path / "empty.txt")]) == 1
    assert "empty.txt: no words" in capsys.readouterr().err
    (tmp_path / "specials.txt").write_text("<S>\n</S>\n<UNK>\n", encoding="utf-8")  # every word is <UNK>
    assert main(["baselines", str(tmp_path / "specials.txt"), "--train", str(train), "--eval", str(train)]) == 0
    assert "100% of the words are not in the vocabulary" in capsys.readouterr().err


def test_resume_and_adapt_mistakes_are_refused_with_what_to_do(text_slices, tmp_path, capsys):
    """Each of these used to be accepted and run something else than asked."""
    import shutil

    train, _, _ = text_slices
    toml = _micro_toml(tmp_path / "micro.toml", checkpoint_every=2)
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--min-count", "2"]) == 0
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "other.txt"), "--max-size", "50"]) == 0
    run = tmp_path / "run"
    base = ["train", str(train), "--quiet"]
    assert main([*base, "--config", toml, "--vocab", str(tmp_path / "vocab.txt"), "--out", str(run),
                 "--max-steps", "4"]) == 0
    capsys.readouterr()

    def refused(*flags: str, code: int = 1) -> str:  # 2: options that do not go together, whatever the files
        assert main([*base, *flags]) == code
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    # going back to an older checkpoint in the same folder: "newest" would mean the abandoned branch
    assert "newer than step-00000002" in refused("--out", str(run), "--resume", str(run / "step-00000002"))
    assert "not both" in refused("--out", str(tmp_path / "b"), "--resume", str(run), "--init-from", str(run), code=2)
    assert "leave out --vocab" in refused("--out", str(tmp_path / "c"), "--init-from", str(run),
                                          "--vocab", str(tmp_path / "other.txt"))
    assert main([*base, "--out", str(run), "--resume", str(run), "--max-steps", "4"]) == 0
    assert "nothing to train" in capsys.readouterr().err
    # other model sizes in --config than the source's: said, not silently dropped
    assert main([*base, "--out", str(tmp_path / "d"), "--init-from", str(run), "--config", "small-cpu",
                 "--max-steps", "1"]) == 0
    assert "the model sizes of --config are not used" in capsys.readouterr().err
    shutil.copytree(run / "step-00000004", tmp_path / "slim" / "step-00000004")
    (tmp_path / "slim" / "step-00000004" / "optimizer.safetensors").unlink()
    assert "--init-from" in refused("--out", str(tmp_path / "slim"), "--resume", str(tmp_path / "slim"))
    (run / "step-00000004" / "trainer.json").write_text('{"tokens_seen": 1', encoding="utf-8")
    assert "trainer.json is not valid JSON" in refused("--out", str(run), "--resume", str(run))


def test_config_file_typos_are_errors(tmp_path, capsys):
    good = (tmp_path / "micro.toml")
    _micro_toml(good)
    text = good.read_text(encoding="utf-8")
    for name, broken, message in (("table", text.replace("[train]", "[trian]"), "unknown table [trian]"),
                                  ("skip", text.replace("use_skip_connections", "use_skip_conections"),
                                   "unknown key lstm.use_skip_conections")):
        (tmp_path / f"{name}.toml").write_text(broken, encoding="utf-8")
        assert main(["train", "x.txt", "--config", str(tmp_path / f"{name}.toml"), "--out", str(tmp_path / "r")]) == 1
        assert message in capsys.readouterr().err


def test_the_training_tokenizer_is_recorded_kept_on_resume_and_used_by_perplexity_and_embed(text_slices, tmp_path,
                                                                                           capsys):
    from elmo.embed import Embedder

    train, dev, _ = text_slices
    toml = _micro_toml(tmp_path / "micro.toml")
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--tokenize", "en"]) == 0
    run = str(tmp_path / "run")
    assert main(["train", str(train), "--config", toml, "--vocab", str(tmp_path / "vocab.txt"), "--out", run,
                 "--max-steps", "2", "--tokenize", "en", "--quiet"]) == 0
    assert recorded_tokenizer(run) == "en"
    capsys.readouterr()
    assert main(["train", str(train), "--out", run, "--resume", run, "--max-steps", "3", "--tokenize", "ko",
                 "--quiet"]) == 1
    assert "cannot change tokenize" in capsys.readouterr().err
    assert main(["train", str(train), "--out", run, "--resume", run, "--max-steps", "3", "--quiet"]) == 0
    (tmp_path / "raw.txt").write_text("It wasn't bad, was it?\n", encoding="utf-8")
    assert main(["perplexity", run, str(tmp_path / "raw.txt"), "--quiet"]) == 0
    assert capsys.readouterr().out.split()[1] == "9"  # It was n't bad , was it ? + </S>: split as in training
    assert main(["export", run, str(tmp_path / "exp")]) == 0
    assert Embedder.from_pretrained(str(tmp_path / "exp")).tokenize(["It wasn't bad."]) == [
        ["It", "was", "n't", "bad", "."]]


def test_adapting_the_shipped_english_model_to_new_text(text_slices, tmp_path, capsys):
    """`--init-from en`: the shipped biLM (sizes and tokenizer included) with a new softmax over --vocab."""
    from elmo.training.checkpoint import load_checkpoint
    from elmo.io.load import load_bilm

    _, dev, vocab = text_slices
    run = tmp_path / "en-domain"
    assert main(["train", str(dev), "--init-from", "en", "--out", str(run), "--quiet"]) == 1
    assert "--vocab" in capsys.readouterr().err
    assert main(["train", str(dev), "--init-from", "en", "--vocab", str(vocab), "--out", str(run), "--max-steps", "2",
                 "--batch-size", "2", "--freeze-bilm-steps", "1", "--quiet"]) == 0
    checkpoint = load_checkpoint(run)
    assert recorded_tokenizer(str(run)) == "en"
    assert checkpoint.train_config["train"]["freeze_bilm_steps"] == 1
    shipped = load_bilm("en")
    assert checkpoint.bilm.config == shipped.config
    changed = [k for k, v in shipped.state_dict().items() if not torch.equal(v, checkpoint.bilm.state_dict()[k])]
    assert changed  # step 2 trained the biLM
    assert main(["train", str(dev), "--init-from", "en", "--vocab", str(vocab), "--out", str(tmp_path / "ws"),
                 "--max-steps", "1", "--batch-size", "2", "--tokenize", "whitespace", "--quiet"]) == 0
    assert recorded_tokenizer(str(tmp_path / "ws")) is None  # said on the command line: over the source's


def test_text_the_vocabulary_barely_covers_is_reported_by_train_and_perplexity(text_slices, tmp_path, capsys):
    """A vocabulary of another language or tokenizer trains a model that predicts <UNK> well: its low perplexity
    looks like success unless the unknown share is shown."""
    train, _, _ = text_slices
    (tmp_path / "other.txt").write_text("전혀 다른 언어 의 문장 입니다 .\n" * 50, encoding="utf-8")
    assert main(["vocab", "build", str(tmp_path / "other.txt"), "-o", str(tmp_path / "vocab.txt")]) == 0
    run = str(tmp_path / "run")
    assert main(["train", str(train), "--config", _micro_toml(tmp_path / "micro.toml"), "--vocab",
                 str(tmp_path / "vocab.txt"), "--out", run, "--max-steps", "1", "--quiet"]) == 0
    assert "not in the vocabulary" in capsys.readouterr().err
    assert main(["perplexity", run, str(train), "--max-sentences", "20", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert float(captured.out.split("unknown ")[1].rstrip("%\n")) > 90 and "flatters" in captured.err


def test_small_training_command_mistakes(text_slices, tmp_path, capsys):
    train, _, _ = text_slices
    (tmp_path / "corpus").mkdir()
    assert main(["vocab", "build", str(tmp_path / "corpus"), "-o", str(tmp_path / "v.txt")]) == 1
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    assert main(["vocab", "build", str(tmp_path / "empty.txt"), "-o", str(tmp_path / "v.txt")]) == 1
    assert "no words found" in capsys.readouterr().err and not (tmp_path / "v.txt").exists()
    # --nproc: a bad setting is one line from this process, before any worker starts
    assert main(["train", str(train), "--vocab", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "r"),
                 "--nproc", "2"]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # a run that fails after making its --out leaves none of the folders it made
    vocab = tmp_path / "vocab.txt"
    assert main(["vocab", "build", str(train), "-o", str(vocab)]) == 0
    assert main(["train", str(tmp_path / "missing-text.txt"), "--vocab", str(vocab), "--out",
                 str(tmp_path / "new" / "q" / "r"), "--config", _micro_toml(tmp_path / "micro.toml")]) == 1
    assert "missing-text.txt: no such file" in capsys.readouterr().err and not (tmp_path / "new").exists()
    # a time limit that runs out before the first step says so, and fails: nothing the run was for was done
    assert main(["train", str(train), "--vocab", str(vocab), "--out", str(tmp_path / "t"), "--max-minutes", "1e-9",
                 "--config", _micro_toml(tmp_path / "micro.toml"), "--quiet"]) == 1
    assert "nothing trained: the time limit" in capsys.readouterr().err


def test_run_folders_official_pairs_and_wrong_kinds_of_path(text_slices, tmp_path, capsys):
    train, _, _ = text_slices
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--min-count", "2"]) == 0
    run = tmp_path / "run"
    assert main(["train", str(train), "--config", _micro_toml(tmp_path / "micro.toml"), "--vocab",
                 str(tmp_path / "vocab.txt"), "--out", str(run), "--max-steps", "2", "--quiet"]) == 0
    assert main(["show", "the film", "--model", str(run)]) == 0  # a run folder: its newest checkpoint
    assert main(["export", str(run), str(tmp_path / "exp")]) == 0
    official = tmp_path / "official"
    official.mkdir()
    for name in ("options.json", "weights.hdf5"):
        (official / name).write_bytes((tmp_path / "exp" / name).read_bytes())
    capsys.readouterr()
    assert main(["perplexity", str(official), str(train)]) == 1
    assert "hold no softmax" in capsys.readouterr().err
    assert main(["baselines", str(run), "--train", str(train), "--eval", str(train)]) == 1
    assert "is a folder, where a vocabulary file" in capsys.readouterr().err
    (tmp_path / "file.json").write_text("{}", encoding="utf-8")
    assert main(["export", str(run), str(tmp_path / "file.json")]) == 2  # a wrong output, as `convert` says it
    assert "give a folder" in capsys.readouterr().err
    assert main(["convert", "--model", str(run), "--to", "ours", str(tmp_path / "file.json")]) == 2
    assert "give a folder" in capsys.readouterr().err
    assert main(["export", str(run), str(official)]) == 2  # not an earlier export: refused as by `convert`
    assert "is not an earlier output" in capsys.readouterr().err


def test_a_run_started_with_relative_names_resumes_from_any_folder(tmp_path, monkeypatch, capsys):
    """The run recorded "short.txt" as given; from another folder `--resume RUN` alone failed ("short.txt: no such
    file"), and the same file named by its absolute path was refused as other training files."""
    from pathlib import Path

    from tests.reliability.tiny import micro_run

    monkeypatch.chdir(tmp_path)
    run = micro_run(Path("."))  # short.txt, vocab.txt, micro.json and run/, all given by relative names
    assert json.loads(next(run.glob("step-*/trainer.json")).read_text())["files"] == ["short.txt"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    absolute = tmp_path / run
    assert main(["train", "--resume", str(absolute), "--out", str(absolute), "--max-steps", "2", "--quiet"]) == 0
    assert main(["train", str(tmp_path / "short.txt"), "--resume", str(absolute), "--out", str(absolute),
                 "--max-steps", "3", "--quiet"]) == 0
    (elsewhere / "short.txt").write_text("other text\n")  # the same relative name, another file: still refused
    assert main(["train", "short.txt", "--resume", str(absolute), "--out", str(absolute), "--max-steps", "4"]) == 1
    assert "its data position refers to" in capsys.readouterr().err
