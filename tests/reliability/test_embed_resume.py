"""`elmo embed --resume`: a killed run continues after its last finished chunk and gives the same file."""

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import elmo.embed_file as embed_file_module
from elmo.model.engine import InferenceEngine
from elmo.embed_file import embed_file
from elmo.io.official import load_official
from elmo.io.work_folder import WorkFolderError
from tests.conftest import OPTIONS, WEIGHTS
from tests.reliability.tiny import interrupt_after_chunks

LINES = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(1 + i % 9)) for i in range(40)] + [""]


def _read(path):
    with h5py.File(path) as f:
        return {k: f[k][()] for k in f.keys()}


@pytest.mark.parametrize("stateful", [False, True])
def test_interrupted_run_resumes_without_redoing_chunks(tmp_path, monkeypatch, stateful):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    embed_file(load_official(OPTIONS, WEIGHTS, stateful=stateful), tmp_path / "in.txt", tmp_path / "whole.hdf5",
               batch_size=4, progress=False, chunk_size=4)
    original = interrupt_after_chunks(monkeypatch, 3)  # as if killed during the fourth chunk
    calls = []
    with pytest.raises(KeyboardInterrupt):
        embed_file(load_official(OPTIONS, WEIGHTS, stateful=stateful), tmp_path / "in.txt", tmp_path / "out.hdf5",
                   batch_size=4, progress=False, chunk_size=4)
    assert not (tmp_path / "out.hdf5").exists() and (tmp_path / "out.hdf5.parts").is_dir()
    calls.clear()
    monkeypatch.setattr(embed_file_module, "_embed_chunk", lambda *a, **k: calls.append(1) or original(*a, **k))
    embed_file(load_official(OPTIONS, WEIGHTS, stateful=stateful), tmp_path / "in.txt", tmp_path / "out.hdf5",
               batch_size=4, progress=False, resume=True, chunk_size=4)
    assert len(calls) == 11 - 3  # 41 lines in chunks of 4: 3 were finished before the "kill"
    whole, resumed = _read(tmp_path / "whole.hdf5"), _read(tmp_path / "out.hdf5")
    assert whole.keys() == resumed.keys()
    for key in whole:
        if key != "sentence_to_index":
            assert np.array_equal(whole[key], resumed[key]), key
    assert not (tmp_path / "out.hdf5.parts").exists()


def test_resume_refuses_changed_settings(tmp_path):
    from elmo.io.parts import PartStore
    from elmo.io.work_folder import WorkFolderError

    store = PartStore(tmp_path / "o.parts", {"batch_size": 4}, resume=False)
    store.write(0, ["0"], [np.zeros((1, 2), np.float32)], None)
    with pytest.raises(WorkFolderError, match="differs in batch_size"):
        PartStore(tmp_path / "o.parts", {"batch_size": 8}, resume=True)


CACHED = ["w1", "w2", "w3"]


@pytest.mark.parametrize("first, second, changed", [
    ({}, {"chunk_size": 8}, "chunk_size"), ({}, {"precision": "int8"}, "precision"),
    ({}, {"cache_words": CACHED}, "cache_words_sha256"), ({"cache_words": CACHED}, {}, "cache_words_sha256"),
    ({"cache_words": CACHED}, {"cache_words": CACHED[:2]}, "cache_words_sha256")])
def test_resume_refuses_another_chunk_size_precision_or_word_cache(tmp_path, monkeypatch, first, second, changed):
    """Parts are numbered by chunk and computed with one arithmetic: resuming with either changed would drop lines
    or mix two computations in one file (a precision, or the token layer of cached words, which is a little off the
    computed one: `embed --resume --cache-vocab` was taken), so it is refused."""
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    original = interrupt_after_chunks(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        embed_file(InferenceEngine.build(load_official(OPTIONS, WEIGHTS), cache_words=first.get("cache_words")),
                   tmp_path / "in.txt", tmp_path / "out.hdf5", batch_size=4, progress=False, chunk_size=4)
    monkeypatch.setattr(embed_file_module, "_embed_chunk", original)
    model = InferenceEngine.build(load_official(OPTIONS, WEIGHTS), second.get("precision", "fp32"),
                                  cache_words=second.get("cache_words"))
    with pytest.raises(WorkFolderError, match=f"differs in {changed}"):
        embed_file(model, tmp_path / "in.txt", tmp_path / "out.hdf5", batch_size=4, progress=False,
                   resume=True, chunk_size=second.get("chunk_size", 4))


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path):
    lines = [" ".join(f"w{(i * 7 + j) % 97}" for j in range(1 + i % 13)) for i in range(2500)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = [sys.executable, "-m", "elmo", "embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--top",
            "--options", str(OPTIONS), "--weights", str(WEIGHTS), "--batch-size", "8", "--quiet"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = tmp_path / "out.hdf5.parts"
    deadline = time.monotonic() + 120
    # a part counts once its record is written (a part renamed but not yet recorded is redone, not kept)
    while time.monotonic() < deadline and not list(parts.glob("part-*.h5.record.json")) and process.poll() is None:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(list(parts.glob("part-*.h5")))
    assert done_before >= 1 and not (tmp_path / "out.hdf5").exists()
    subprocess.run(args + ["--resume"], check=True, timeout=300)
    embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", tmp_path / "whole.hdf5", layers="top",
               batch_size=8, progress=False)
    whole, resumed = _read(tmp_path / "whole.hdf5"), _read(tmp_path / "out.hdf5")
    assert len(resumed) == 2501 and all(np.array_equal(whole[k], resumed[k]) for k in whole if k != "sentence_to_index")


def test_a_resume_on_text_changed_in_place_is_refused_even_with_the_same_size_and_time(tmp_path, monkeypatch):
    """Two lines swapped keep the file's size, and its time can be put back: the parts would file vectors under
    the other line's key. The run's text is compared by its hash."""
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    interrupt_after_chunks(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        embed_file(load_official(OPTIONS, WEIGHTS), path, tmp_path / "out.hdf5", batch_size=4, progress=False,
                   chunk_size=4)
    monkeypatch.undo()
    times = os.stat(path)
    swapped = [LINES[1], LINES[0], *LINES[2:]]
    path.write_text("\n".join(swapped) + "\n", encoding="utf-8")
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    with pytest.raises(WorkFolderError, match="input_sha256"):
        embed_file(load_official(OPTIONS, WEIGHTS), path, tmp_path / "out.hdf5", batch_size=4, progress=False,
                   resume=True, chunk_size=4)


def test_an_interrupted_run_on_standard_input_keeps_no_parts(tmp_path, monkeypatch, capsys):
    """Standard input cannot be read again, so parts kept for --resume could never be used: none are kept, and no
    --resume hint is given."""
    import io

    from elmo.cli import main

    text = "\n".join(LINES * 30) + "\n"  # 1,230 lines: two chunks of 1,024 at most
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
    interrupt_after_chunks(monkeypatch, 1)  # the first chunk's part is written, then Ctrl-C
    rc = main(["embed", "-", str(tmp_path / "out.hdf5"), "--top", "--options", str(OPTIONS), "--weights",
               str(WEIGHTS), "--batch-size", "2", "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0 and "--resume" not in err
    assert not (tmp_path / "out.hdf5").exists() and not (tmp_path / "out.hdf5.parts").exists()


def test_sigterm_keeps_the_finished_parts_and_says_how_to_resume(tmp_path):
    """SIGTERM (`kill`, a scheduler) is met as Ctrl-C is: the finished parts stay, the run says --resume continues
    from them, and the command exits 143, without a traceback."""
    lines = [" ".join(f"w{(i * 7 + j) % 97}" for j in range(1 + i % 13)) for i in range(2500)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = [sys.executable, "-m", "elmo", "embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--top",
            "--options", str(OPTIONS), "--weights", str(WEIGHTS), "--batch-size", "8", "--quiet"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parts = tmp_path / "out.hdf5.parts"
    deadline = time.monotonic() + 120
    # a part counts once its record is written (a part renamed but not yet recorded is redone, not kept)
    while time.monotonic() < deadline and not list(parts.glob("part-*.h5.record.json")) and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "Traceback" not in err and "terminated" in err and "--resume continues" in err, err
    assert list(parts.glob("part-*.h5")) and not (tmp_path / "out.hdf5").exists()


def test_parts_cut_by_lines_alone_resume_as_they_were_cut(tmp_path, monkeypatch):
    """Parts written before chunks were also bounded in bytes have no chunk_tokens in their manifest: a resume goes
    on cutting by lines (refusing them would throw away hours of work for a flag the user cannot give)."""
    import json

    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", tmp_path / "whole.hdf5", batch_size=4,
               progress=False, chunk_size=4)
    original = interrupt_after_chunks(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", tmp_path / "out.hdf5", batch_size=4,
                   progress=False, chunk_size=4)
    manifest = tmp_path / "out.hdf5.parts" / "manifest.json"
    record = json.loads(manifest.read_text())
    del record["identity"]["chunk_tokens"]  # as an older elmo wrote it
    manifest.write_text(json.dumps(record))
    monkeypatch.setattr(embed_file_module, "_embed_chunk", original)
    embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", tmp_path / "out.hdf5", batch_size=4,
               progress=False, resume=True, chunk_size=4)
    whole, resumed = _read(tmp_path / "whole.hdf5"), _read(tmp_path / "out.hdf5")
    assert all(np.array_equal(whole[k], resumed[k]) for k in whole if k != "sentence_to_index")
