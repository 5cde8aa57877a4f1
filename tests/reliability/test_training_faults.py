"""Training that is killed, diverges, or runs out of disk loses at most one checkpoint interval."""

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from elmo.data.vocab import Vocabulary
from elmo.io.checkpoint import list_checkpoints
from elmo.training.checkpoint import load_checkpoint
from elmo.training.trainer import Trainer, TrainingDiverged
from tests.conftest import micro_train_config


def _config_file(tmp_path, **changes):
    config = micro_train_config(**changes).to_dict()
    (tmp_path / "micro.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path / "micro.json"


def _losses(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [record["step"] for record in records]
    assert len(steps) == len(set(steps)), steps  # a resumed run drops the killed run's lines of the steps it redoes
    return [record["loss"] for record in sorted(records, key=lambda r: r["step"])]


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_matches_an_uninterrupted_run(text_slices, tmp_path):
    train, _, vocab = text_slices
    config = _config_file(tmp_path, checkpoint_every=3, max_steps=60)
    base = [sys.executable, "-m", "elmo", "train", str(train), "--config", str(config), "--quiet"]
    subprocess.run(base + ["--vocab", str(vocab), "--out", str(tmp_path / "straight")], check=True, timeout=300)

    run = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    for attempt in range(6):
        args = base + (["--resume", str(run)] if list_checkpoints(run) else ["--vocab", str(vocab)]) + ["--out", str(run)]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = len(list_checkpoints(run)) and list_checkpoints(run)[-1].name
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            latest = list_checkpoints(run)
            if latest and latest[-1].name != before:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.05))  # a random moment shortly after a checkpoint was renamed into place
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
        if list_checkpoints(run) and load_checkpoint(list_checkpoints(run)[-1]).trainer["step"] == 60:
            break
    last = list_checkpoints(run)[-1]
    if load_checkpoint(last).trainer["step"] < 60:
        subprocess.run(base + ["--resume", str(run), "--out", str(run)], check=True, timeout=300)
    assert kills >= 2
    assert _losses(run) == _losses(tmp_path / "straight")
    a = load_checkpoint(tmp_path / "straight").bilm.state_dict()
    b = load_checkpoint(run).bilm.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_non_finite_loss_skips_the_batch_and_stops_after_k_in_a_row(text_slices, tmp_path, monkeypatch):
    train, _, vocab = text_slices
    trainer = Trainer(micro_train_config(max_steps=20, max_bad_steps=3), [train], tmp_path / "r",
                      vocab=Vocabulary.load(vocab), progress=False)
    trainer.train_step()
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    original = trainer.model.forward

    def poisoned(*args, **kwargs):
        losses, states = original(*args, **kwargs)
        return [losses[0] * float("nan"), losses[1]], states

    monkeypatch.setattr(trainer.model, "forward", poisoned)
    with pytest.warns(UserWarning, match="not finite; batch skipped"):
        metrics = trainer.train_step()
    assert metrics["skipped"] == 1.0
    assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in weights.items())
    assert all(torch.isfinite(h).all() for direction in trainer.states for h, _ in direction)
    with pytest.warns(UserWarning), pytest.raises(TrainingDiverged, match="3 batches in a row"):
        trainer.train_step()
        trainer.train_step()
    monkeypatch.setattr(trainer.model, "forward", original)


def test_full_disk_keeps_the_previous_checkpoint(text_slices, tmp_path, monkeypatch):
    import elmo.training.checkpoint as checkpoint_module

    train, _, vocab = text_slices
    trainer = Trainer(micro_train_config(max_steps=10, checkpoint_every=2), [train], tmp_path / "r",
                      vocab=Vocabulary.load(vocab), progress=False)
    for _ in range(2):
        trainer.train_step()
    trainer.save()
    good = list_checkpoints(tmp_path / "r")[-1]

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    trainer.train_step()
    with pytest.raises(OSError, match=f"No space left on device.*{good.name} is intact"):
        trainer.save()
    assert list_checkpoints(tmp_path / "r") == [good] and not list((tmp_path / "r").glob(".step-*"))
    assert load_checkpoint(good).trainer["step"] == 2


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_or_ctrl_c_stops_after_the_step_with_a_checkpoint(text_slices, tmp_path, sig, code):
    """A scheduler's SIGTERM (or Ctrl-C) before the next checkpoint: the run ends at its step boundary as at its step
    limit, with a checkpoint of that step, and exits non-zero; --resume goes on from there."""
    train, _, vocab = text_slices
    config = _config_file(tmp_path, checkpoint_every=10_000, max_steps=100_000)
    run = tmp_path / "run"
    base = [sys.executable, "-m", "elmo", "train", str(train), "--config", str(config), "--quiet", "--out", str(run)]
    process = subprocess.Popen(base + ["--vocab", str(vocab)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    assert process.returncode == code, err
    assert "Traceback" not in err and f"stopped ({sig.name}) at step" in err and "--resume" in err, err
    step = load_checkpoint(list_checkpoints(run)[-1]).trainer["step"]
    assert step >= 3 and len((run / "metrics.jsonl").read_text().splitlines()) == step
    resumed = subprocess.run(base + ["--resume", str(run), "--max-steps", str(step + 2)], capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(list_checkpoints(run)[-1]).trainer["step"] == step + 2


@pytest.mark.slow
def test_sigterm_to_a_run_of_several_processes_stops_them_all_at_one_step_with_a_checkpoint(text_slices, tmp_path):
    """`elmo train --nproc 2` passes the request to its workers through the run folder's .stop file (a signal would
    make torchrun end them and print its own traceback); they stop together, save, and the command exits 143."""
    train, _, vocab = text_slices
    config = _config_file(tmp_path, checkpoint_every=10_000, max_steps=100_000)
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "elmo", "train", str(train), "--config", str(config), "--quiet",
                                "--vocab", str(vocab), "--out", str(run), "--nproc", "2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        if (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # to the launching process alone, as `kill PID` or a scheduler sends it
    _, err = process.communicate(timeout=180)
    assert process.returncode == 143, err
    assert "Traceback" not in err and "stopped (SIGTERM) at step" in err, err
    step = load_checkpoint(list_checkpoints(run)[-1]).trainer["step"]
    assert step >= 2 and not (run / ".stop").exists()


@pytest.mark.parametrize("sig, raised", [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_second_signal_later_stops_at_once_as_that_signal(monkeypatch, sig, raised):
    """A second SIGTERM more than REPEAT_SECONDS after the first (a scheduler's reminder before its kill) stopped the
    run at once as Ctrl-C does: the command said "interrupted" and exited 130 instead of 143."""
    import elmo.cli.graceful_stop as graceful_stop

    class Run:
        stop_requested = None

        def request_stop(self, reason):
            self.stop_requested = reason

    monkeypatch.setattr(graceful_stop, "REPEAT_SECONDS", 0.0)
    run = Run()
    with pytest.raises(KeyboardInterrupt) as stopped:
        with graceful_stop.stop_after_step_on_signals(run, announce=False):
            signal.raise_signal(sig)
            assert run.stop_requested == sig.name  # the first: stop after the step
            time.sleep(0.01)
            signal.raise_signal(sig)
    assert type(stopped.value).__name__ == raised


def test_a_second_sigterm_to_elmo_train_nproc_stops_the_workers_at_once(tmp_path, monkeypatch):
    """`elmo train --nproc N` passed a first SIGTERM on as the .stop file, and ignored a second one (only a second
    Ctrl-C stopped the workers at once): a scheduler's reminder before its kill went unheard."""
    import threading

    import elmo.cli.graceful_stop as graceful_stop

    monkeypatch.setattr(graceful_stop, "REPEAT_SECONDS", 0.1)
    stop_file = tmp_path / ".stop"
    for delay in (0.3, 0.8):
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()
    start = time.monotonic()
    code = graceful_stop.wait_passing_signals([sys.executable, "-c", "import time; time.sleep(20)"], stop_file)
    assert code == 143 and time.monotonic() - start < 10
    assert not stop_file.exists()  # the request file is the launcher's to remove
