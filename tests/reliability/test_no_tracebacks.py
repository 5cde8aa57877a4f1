"""Case 6 of "Nothing lost": hostile files and flags that used to end in a traceback end in one line.

A 100,000-deep nested options.json, dims of 1e30, a string-typed dataset of the right shape, a tampered checkpoint
(trainer.json without `data`, `step: "ten"`, optimizer `lr: "fast"`, a data position of the wrong shape), and
`--device meta`.
"""

import json

import h5py
import pytest

from elmo.data.vocab import Vocabulary
from elmo.io.native import load_model
from elmo.io.official import export_official
from elmo.training.trainer import Trainer
from tests.conftest import micro_train_config
from tests.reliability.tiny import cli, one_error_line, text_file, tiny_model


@pytest.fixture
def official(tmp_path):
    return export_official(load_model(tiny_model(tmp_path / "model")), tmp_path / "official")


def test_a_deeply_nested_options_file(official, capsys):
    options, weights = official
    options.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    one_error_line(err, "options.json: nested too deeply")


def test_a_deeply_nested_config_json(tmp_path, capsys):
    model = tiny_model(tmp_path / "model")
    (model / "config.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000, encoding="utf-8")
    rc, err = cli(capsys, "info", "--model", model)
    assert rc == 1
    one_error_line(err, "config.json: nested too deeply")


def test_dims_of_1e30(official, capsys):
    options, weights = official
    data = json.loads(options.read_text(encoding="utf-8"))
    data["char_cnn"]["embedding"]["dim"] = 1e30
    options.write_text(json.dumps(data), encoding="utf-8")
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    one_error_line(err, "char_cnn.embedding.dim is 1,000,000,000,000,000,019,884,624,838,656, above the limit")


def test_a_string_dataset_of_the_right_shape(official, capsys):
    options, weights = official
    with h5py.File(weights, "a") as f:
        shape = f["CNN/b_cnn_0"].shape
        del f["CNN/b_cnn_0"]
        f.create_dataset("CNN/b_cnn_0", data=[b"x"] * shape[0], dtype=h5py.string_dtype())
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    one_error_line(err, "dataset 'CNN/b_cnn_0' holds object values where floating-point numbers are expected")


@pytest.fixture(scope="module")
def checkpoint_run(tmp_path_factory):
    """A run folder with one checkpoint of a micro model on a synthetic corpus (seconds)."""
    root = tmp_path_factory.mktemp("run")
    corpus = text_file(root / "train.txt", 300)
    vocab = Vocabulary.build(line.split() for line in corpus.read_text(encoding="utf-8").splitlines())
    vocab.save(root / "vocab.txt")
    (root / "micro.json").write_text(json.dumps(micro_train_config(max_steps=2).to_dict()), encoding="utf-8")
    trainer = Trainer(micro_train_config(max_steps=2), [corpus], root / "run", vocab=vocab, progress=False)
    trainer.train()
    return root


TAMPERED = {
    "trainer.json without data": ("trainer.json", lambda d: d.pop("data"), "trainer.json: data must be a list"),
    "step: \"ten\"": ("trainer.json", lambda d: d.update(step="ten"), "trainer.json: step must be a whole number"),
    "elapsed: NaN": ("trainer.json", lambda d: d.update(elapsed=float("nan")), "elapsed must be a finite number"),
    "a data position of the wrong kind": ("trainer.json", lambda d: d["data"][0][1].update(left=[[1]]),
                                          "data[0][1].left[0] must be a whole number"),
    "optimizer lr: \"fast\"": ("optimizer.json", lambda d: d["param_groups"][0].update(lr="fast"),
                               "optimizer.json: param_groups[0].lr must be a finite number"),
    "optimizer params not indices": ("optimizer.json", lambda d: d["param_groups"][0].update(params="all"),
                                     "param_groups[0].params must be a list of parameter indices"),
    # loading the state took these over the config's without a word (gradient ascent for maximize), and the next
    # checkpoint recorded the config's settings, never used
    "optimizer lr other than the config's": ("optimizer.json", lambda d: d["param_groups"][0].update(lr=0.9),
                                             "optimizer.json: group 0's lr is 0.9 where train_config.json gives"),
    "optimizer maximize": ("optimizer.json", lambda d: d["param_groups"][0].update(maximize=True),
                           "group 0's maximize is True where train_config.json gives False"),
    "optimizer weight decay": ("optimizer.json", lambda d: d["param_groups"][0].update(weight_decay=5),
                               "group 0's weight_decay is 5"),
    "a data position of another batch": ("trainer.json", lambda d: d["data"][0][0].update(current=[[]] * 99),
                                         "do not fit this run"),
    "a row's count of words left edited": ("trainer.json", lambda d: d["data"][0][0]["left"].__setitem__(
        0, len(d["data"][0][0]["current"][0]) + 5), "do not fit this run (ValueError: batcher row 0: left is"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_checkpoint_is_one_line(checkpoint_run, tmp_path, capsys, case):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(checkpoint_run / "run", run)
    name, change, expected = TAMPERED[case]
    step = sorted(run.glob("step-*"))[-1]
    data = json.loads((step / name).read_text(encoding="utf-8"))
    change(data)
    (step / name).write_text(json.dumps(data), encoding="utf-8")
    rc, err = cli(capsys, "train", checkpoint_run / "train.txt", "--resume", run, "--out", run, "--max-steps", "4",
                  "--quiet")
    assert rc == 1
    one_error_line(err, expected)


@pytest.mark.parametrize("command", [["perplexity", "model", "IN"], ["embed", "IN", "OUT", "--top"],
                                     ["train", "IN", "--out", "OUT"]])
def test_device_meta(tmp_path, capsys, command):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "IN", 3)
    args = [str(tmp_path / a) if a in ("IN", "OUT", "model") else a for a in command]
    if command[0] == "embed":
        args += ["--model", str(model)]
    rc, err = cli(capsys, *args, "--device", "meta")
    assert rc in (1, 2)
    one_error_line(err, "--device meta: not a device elmo runs on")
    assert not (tmp_path / "OUT").exists()


CTRL_C_WHILE_LOADING = r"""
import os, signal, sys, time
sys.argv = ["elmo", "show", "a b"]

class Interrupting:  # Ctrl-C arrives while the command line is being loaded (about a second: torch's import)
    def find_spec(self, name, path=None, target=None):
        if name == "elmo.cli":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        return None

sys.meta_path.insert(0, Interrupting())
from elmo.launch import run
run()
"""


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_130():
    """It was a traceback from inside the import, or an abort from inside torch's C++ code (exit -6)."""
    import subprocess
    import sys

    from tests.reliability.tiny import ROOT

    done = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_LOADING], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, "elmo show: interrupted\n")
