"""The commands' malloc settings (elmo/memory.py), measured in fresh processes: each changes the whole process."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ROUNDS = r"""
import resource, sys
sys.path.insert(0, {root!r})
import torch
from elmo.memory import fix_mmap_threshold, keep_freed_memory
assert fix_mmap_threshold()  # first a known state that hands freed memory back (glibc's default varies with history)
if {keep!r}:
    assert keep_freed_memory()
faults = []
for _ in range(3):  # a training step's pattern: many blocks of a few MB, all freed at its end
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(1 << 18) for _ in range(40)]  # 40 x 1 MB, each written
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(faults[-1])
"""


def _faults_of_a_repeated_round(keep: bool) -> int:
    code = ROUNDS.format(root=str(ROOT), keep=keep)
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="the C library is not glibc: the commands leave malloc as it is")
def test_training_keeps_a_steps_freed_memory_where_embedding_hands_it_back():
    kept, embedding = _faults_of_a_repeated_round(True), _faults_of_a_repeated_round(False)
    print(f"\npage faults of a repeated round of 40 x 1 MB: kept {kept}, embed's setting {embedding}")
    assert embedding > 5_000  # 10,240 pages written, taken back one fault each
    assert kept < 500


def test_the_train_command_keeps_freed_memory_and_vocab_build_does_not(text_slices, tmp_path, monkeypatch):
    import elmo.cli.train
    from elmo.cli import main
    from tests.test_cli_training import _micro_toml

    calls = []
    monkeypatch.setattr(elmo.cli.train, "keep_freed_memory", lambda: calls.append(1) or True)
    train = text_slices[0]
    assert main(["vocab", "build", str(train), "-o", str(tmp_path / "vocab.txt"), "--min-count", "2"]) == 0
    assert calls == []
    assert main(["train", str(train), "--config", _micro_toml(tmp_path / "micro.toml"), "--vocab",
                 str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "run"), "--max-steps", "1", "--quiet"]) == 0
    assert calls == [1]
