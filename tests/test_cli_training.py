"""The training commands end to end through the CLI, on a micro config and a slice of real text."""

import json

import h5py

from elmo.cli import main
from tests.conftest import micro_train_config


def test_vocab_train_resume_perplexity_score_substitutes_export(text_slices, tmp_path, capsys):
    train, dev, _ = text_slices
    config = micro_train_config().to_dict()
    lines = ["[train]"] + [f"{k} = {json.dumps(v)}" for k, v in config["train"].items() if v is not None]
    for section in ("lstm", "char_cnn"):
        lines.append(f"[model.{section}]")
        for k, v in config["model"][section].items():
            if v is not None:
                lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else '{ dim = %d }' % v['dim']}")
    (tmp_path / "micro.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

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
    assert main(["train", str(tmp_path / "missing*.txt"), "--vocab", "nope.txt", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("nope.txt" in err or "missing" in err)
    assert main(["train", "x.txt", "--config", "no-such-preset", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no such file or preset (presets: " in err and "small-cpu" in err and "tiny" in err
