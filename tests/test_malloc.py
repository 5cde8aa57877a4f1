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
from elmo.memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, _mallopt, keep_freed_memory
# first a known state that hands freed memory back (glibc's default varies with history): 128 KB thresholds, pinned
assert _mallopt((M_MMAP_THRESHOLD, 128 << 10), (M_TRIM_THRESHOLD, 128 << 10))
if {keep!r}:
    assert keep_freed_memory()
faults = []
for _ in range(6):  # a training step's pattern: many blocks of a few MB, all freed at its end
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(1 << 18) for _ in range(40)]  # 40 x 1 MB, each written
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(faults[1:]))  # the steady state: the best repeated round (one may place a block anew, or meet the
# kernel reclaiming idle pages: seen as 256-1,280 faults once in a while, against 10,240 when memory is handed back)
"""


def _faults_of_a_repeated_round(keep: bool) -> int:
    code = ROUNDS.format(root=str(ROOT), keep=keep)
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="the C library is not glibc: the commands leave malloc as it is")
def test_the_commands_setting_keeps_freed_memory_where_pinned_128_kb_thresholds_hand_it_back():
    kept, handed_back = _faults_of_a_repeated_round(True), _faults_of_a_repeated_round(False)
    print(f"\npage faults of a repeated round of 40 x 1 MB: kept {kept}, handed back {handed_back}")
    assert handed_back > 5_000  # 10,240 pages written, taken back one fault each
    assert kept < 500


def test_the_embed_command_keeps_freed_memory(tmp_path, monkeypatch):
    import elmo.cli.embed
    from elmo.cli import main
    from tests.conftest import OPTIONS, WEIGHTS

    calls = []
    monkeypatch.setattr(elmo.cli.embed, "keep_freed_memory", lambda: calls.append(1) or True)
    (tmp_path / "in.txt").write_text("the bank closed .\n", encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--options", str(OPTIONS),
                 "--weights", str(WEIGHTS), "--top", "--quiet"]) == 0
    assert calls == [1]


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
