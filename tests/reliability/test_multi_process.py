"""``elmo train --nproc N`` and a user's own ``torchrun -m elmo train``: a mistake ends in one line and its exit
code, as in one process (not torchrun's traceback, nor a line per process); a number of processes that the run
would not get is refused; a resumed run goes on with its own files."""

from __future__ import annotations

import json

import pytest
import torch

from elmo.io.checkpoint import list_checkpoints
from tests.conftest import micro_train_config
from tests.reliability.tiny import cli, elmo_process, one_error_line, text_file


def _run_inputs(tmp_path):
    """A corpus, its vocabulary and a micro config: the arguments of a new run before ``--out``."""
    corpus = text_file(tmp_path / "train.txt", 400)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(97)), encoding="utf-8")
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(micro_train_config().to_dict()), encoding="utf-8")
    return ["train", corpus, "--vocab", vocab, "--config", config, "--quiet"]


@pytest.mark.slow
def test_an_error_under_nproc_is_one_line_not_torchruns_traceback(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    rc, err = cli(capsys, *_run_inputs(tmp_path), "--out", run, "--max-steps", "2")
    assert rc == 0, err
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # torchrun left a torchelastic_* folder there every run
    process = elmo_process("train", "--resume", run, "--out", run, "--max-steps", "4", "--quiet", "--nproc", "2")
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1
    one_error_line(err, "written by 1 processes", "got 2")
    assert [c.name for c in list_checkpoints(run)] == ["step-00000002"]
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # no .lock, no .stop
    assert list((tmp_path / "tmp").iterdir()) == []


def test_nproc_0_is_refused(tmp_path, capsys):
    rc, err = cli(capsys, *_run_inputs(tmp_path), "--out", tmp_path / "run", "--max-steps", "2", "--nproc", "0")
    assert rc == 2 and "--nproc: must be at least 1" in err
    assert not (tmp_path / "run").exists()


def test_nproc_other_than_torchruns_processes_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc_per_node 1
    rc, err = cli(capsys, *_run_inputs(tmp_path), "--out", tmp_path / "run", "--max-steps", "2", "--nproc", "2")
    assert rc == 2
    one_error_line(err, "--nproc 2 given, but torchrun started 1 processes")
    assert not (tmp_path / "run").exists()


def test_resume_without_files_goes_on_with_the_runs_own(tmp_path, capsys):
    run = tmp_path / "run"
    rc, err = cli(capsys, *_run_inputs(tmp_path), "--out", run, "--max-steps", "2")
    assert rc == 0, err
    rc, err = cli(capsys, "train", "--resume", run, "--out", run, "--max-steps", "3", "--quiet")
    assert rc == 0, err
    assert [c.name for c in list_checkpoints(run)][-1] == "step-00000003"


@pytest.mark.parametrize("environment, fragment", [
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number"),
    ({"WORLD_SIZE": "\u00b2"}, "WORLD_SIZE='\u00b2' is not a whole number"),  # a digit to isdigit(), not to int()
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is not a whole number"),
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 of WORLD_SIZE=2 processes"),
    ({"RANK": "1"}, "RANK=1 of WORLD_SIZE=1 processes"),
])
def test_a_stray_torchrun_environment_is_one_line(tmp_path, capsys, monkeypatch, environment, fragment):
    """``int("two")`` was a traceback; a rank beyond the count printed nothing at all (only "the first process"
    says an error under torchrun) and would have waited for processes that never come."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    rc, err = cli(capsys, *_run_inputs(tmp_path), "--out", tmp_path / "run", "--max-steps", "2")
    assert rc == 1
    one_error_line(err, fragment, "unset")
    assert not (tmp_path / "run").exists()


def test_another_process_error_waits_for_the_first_then_names_itself(monkeypatch, capsys):
    """Under --nproc a second process that failed first was silent, and torchrun then stopped the first, whose only
    line was "terminated" (the real error lost). It now waits for the first's line (torchrun stops it when the first
    fails alike) and otherwise says its own, naming the process."""
    import elmo.cli as cli_module

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    waited = []
    monkeypatch.setattr(cli_module.time, "sleep", waited.append)
    cli_module._say_error("elmo train: error: something only process 1 met")
    assert waited == [cli_module.FIRST_PROCESS_GRACE_S]
    assert capsys.readouterr().err == "elmo train: error: something only process 1 met (process 1)\n"
    cli_module._say_error("elmo train: terminated", failure=False)  # a stop: the first process says it, once
    assert capsys.readouterr().err == "" and len(waited) == 1


@pytest.mark.slow
def test_two_processes_resumed_match_two_uninterrupted_and_rank_0_alone_saves_the_shared_sentences(tmp_path):
    """8 steps straight against 4, then a resume to 8, both under --nproc 2: the same weights. Only rank 0's data
    position holds the sentences waiting (one sequence, the same on every rank)."""
    from safetensors.torch import load_file

    inputs = _run_inputs(tmp_path)
    inputs[5].write_text(json.dumps(micro_train_config(checkpoint_every=4).to_dict()), encoding="utf-8")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for run, steps in ((straight, 8), (resumed, 4)):
        process = elmo_process(*inputs, "--out", run, "--max-steps", steps, "--nproc", "2")
        assert process.wait(timeout=300) == 0, process.stderr.read()
    process = elmo_process("train", "--resume", resumed, "--out", resumed, "--max-steps", "8", "--quiet",
                           "--nproc", "2")
    assert process.wait(timeout=300) == 0, process.stderr.read()
    data = json.loads((resumed / "step-00000004" / "trainer.json").read_text())["data"]
    assert all("pending" in d for d in data[0]) and not any("pending" in d for d in data[1])
    assert data[0][0]["pending"]  # a sequence is waiting: rank 1 leaves a real one to rank 0
    ours, theirs = (load_file(str(list_checkpoints(run)[-1] / "model.safetensors")) for run in (straight, resumed))
    assert list_checkpoints(resumed)[-1].name == "step-00000008" and ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
