"""Case 7 of "Nothing lost": one writer per run folder. Two `elmo train` into one --out, as two real processes:
the second gets one line naming the first's pid and writes nothing; the first's metrics.jsonl holds its own lines
only, one per step, in order. (Two `elmo embed` on one output: tests/reliability/test_verified_merge.py.)"""

import json
import time

from elmo.io.lock import InUseError, OutputLock
from tests.conftest import micro_train_config
from tests.reliability.tiny import elmo_process, one_error_line, text_file, waiting_for


def test_a_second_training_run_into_the_same_folder_is_refused(tmp_path):
    corpus = text_file(tmp_path / "train.txt", 2000)
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(97)),
                                        encoding="utf-8")
    run = tmp_path / "run"
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(micro_train_config().to_dict()), encoding="utf-8")
    args = ["train", corpus, "--vocab", tmp_path / "vocab.txt", "--out", run, "--quiet", "--batch-size", "4",
            "--max-steps", "30", "--checkpoint-every", "10", "--config", config]
    go = tmp_path / "go"  # the first run waits before its second step until the second run has tried
    first = elmo_process(*args, patch=waiting_for(go, "elmo.training.trainer", "Trainer.train_step")
                         .replace("m.Trainer.train_step = waiting", "m.Trainer.train_step = lambda self: "
                                  "original(self) if self.step == 0 else waiting(self)"))
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, first.stderr.read()
    second = elmo_process(*args)
    _, err = second.communicate(timeout=120)
    go.touch()
    assert second.returncode == 1
    one_error_line(err, f"{run}: in use by pid {first.pid}")
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert steps == list(range(1, 31))
    assert not (run / ".lock").exists()


def test_the_lock_is_reentrant_in_one_process_and_gone_after_release(tmp_path):
    lock = OutputLock(tmp_path / ".x.lock", "x").acquire()
    again = OutputLock(tmp_path / ".x.lock", "x").acquire()
    assert again is lock and (tmp_path / ".x.lock").read_text().strip().isdigit()
    again.release()
    assert (tmp_path / ".x.lock").exists()
    lock.release()
    assert not (tmp_path / ".x.lock").exists()


def test_a_lock_held_by_another_process_names_it(tmp_path):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(tmp_path / '.x.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode())\n"
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            OutputLock(tmp_path / ".x.lock", "x").acquire()
            raise AssertionError("the lock was taken twice")
        except InUseError as err:
            assert str(err).startswith(f"x: in use by pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    OutputLock(tmp_path / ".x.lock", "x").acquire().release()  # the kernel dropped the dead holder's lock


def test_a_users_file_by_the_locks_name_is_neither_emptied_nor_deleted(tmp_path):
    """A stale lock of a killed run (a process id) is taken over; a file of the user's named like the lock is
    refused and left as it was."""
    import pytest

    (tmp_path / ".x.lock").write_text("my notes\n")
    with pytest.raises(InUseError, match="in the way of the lock"):
        OutputLock(tmp_path / ".x.lock", "x").acquire()
    assert (tmp_path / ".x.lock").read_text() == "my notes\n"
    (tmp_path / ".x.lock").write_text("4242\n")  # left by a killed run
    OutputLock(tmp_path / ".x.lock", "x").acquire().release()
    assert not (tmp_path / ".x.lock").exists()
