"""DistributedDataParallel on 2 CPU processes (gloo): identical weights on both ranks, and the same losses as one
process holding the same global batch (dropout off, full softmax); each rank draws its own sampled negatives."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.mark.slow
def test_two_processes_match_one(text_slices, tmp_path, report):
    """With the full softmax (no sampled negatives: each process draws its own, as bilm-tf's towers do), two
    processes of 3 rows train exactly as one of 6, including which rows start a sentence from the zero state and
    the first steps with the biLM frozen (its weights get no gradient there, which DDP must be told)."""
    train, _, vocab = text_slices
    steps = 10
    two, one = tmp_path / "two", tmp_path / "one"
    two.mkdir(), one.mkdir()
    full = {**os.environ, "NEGATIVES": "1000000", "ZERO_SHARE": "0.5", "FREEZE": "3"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(WORKER), str(train), str(vocab), str(two), "3", str(steps)], check=True, timeout=300,
                   capture_output=True, env=full)
    subprocess.run([sys.executable, str(WORKER), str(train), str(vocab), str(one), "6", str(steps)], check=True,
                   timeout=300, capture_output=True, env=full)
    rank0, rank1 = load_file(str(two / "rank0.safetensors")), load_file(str(two / "rank1.safetensors"))
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    single = load_file(str(one / "rank0.safetensors"))
    weight_diff = max(float((rank0[k] - single[k]).abs().max()) for k in rank0)
    losses = [json.loads((two / f"rank{r}.json").read_text()) for r in range(2)]
    assert losses[0] == losses[1]  # each process reports the whole global batch's loss
    assert [(two / f"rank{r}.group").read_text() for r in range(2)] == ["False", "False"]  # train() closed it
    alone = json.loads((one / "rank0.json").read_text())
    loss_diff = max(abs(a - b) for a, b in zip(losses[0], alone))
    report("DDP 2x3 rows vs 1x6 rows: max loss diff", loss_diff)
    report("DDP 2x3 rows vs 1x6 rows: max weight diff", weight_diff)
    assert loss_diff <= 1e-4 and weight_diff <= 1e-4
    assert (two / "run" / "step-00000010" / "trainer.json").is_file()
    assert len(json.loads((two / "run" / "step-00000010" / "trainer.json").read_text())["data"]) == 2


@pytest.mark.slow
def test_processes_stop_together_on_max_minutes_even_when_one_starts_late(text_slices, tmp_path):
    """Each process used to read its own clock: the first to run out went to checkpoint while the other was still
    in a training step, and both waited for each other forever."""
    train, _, vocab = text_slices
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(WORKER), str(train), str(vocab), str(tmp_path), "3", "0", "0.02", "1.0"], check=True,
                   timeout=120, capture_output=True)
    steps = [len(json.loads((tmp_path / f"rank{r}.json").read_text())) for r in range(2)]
    assert steps[0] == steps[1] > 0
    assert list((tmp_path / "run").glob("step-*/trainer.json"))
    # sampled softmax here: each rank drew its own negatives (as each bilm-tf tower), and saved its own generator
    state = load_file(str(next((tmp_path / "run").glob("step-*/state.safetensors"))))
    assert not torch.equal(state["r0.sampler_rng"], state["r1.sampler_rng"])


@pytest.mark.slow
def test_two_trainers_in_turn_in_the_same_processes_resume_together(text_slices, tmp_path):
    """A script under torchrun that trains, then builds a second Trainer resuming the run: the first one closed
    the process group it made, the second makes a new one, and both ranks go on from the same checkpoint to the
    same weights."""
    train, _, vocab = text_slices
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(WORKER), str(train), str(vocab), str(tmp_path), "3", "4"], check=True, timeout=300,
                   capture_output=True, env={**os.environ, "AGAIN": "3"})
    losses = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(losses[0]) == 7 and losses[0] == losses[1]
    rank0, rank1 = load_file(str(tmp_path / "rank0.safetensors")), load_file(str(tmp_path / "rank1.safetensors"))
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert [(tmp_path / f"rank{r}.group").read_text() for r in range(2)] == ["False", "False"]
    assert json.loads((tmp_path / "run" / "step-00000007" / "trainer.json").read_text())["step"] == 7

