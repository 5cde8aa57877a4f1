"""Case 1 of "Nothing lost": two runs writing one output, a part deleted while a run works, and the count printed.

The merge checks every expected part (its checksum and line range) and counts what it wrote: a gap is an error
naming the part, the output is not created, and `--resume` finishes the file; the count printed is the count written.
"""

import functools
import time

import h5py
import pytest

import elmo.cli.embed as cli_embed
import elmo.embed_file as embed_file_module
from tests.reliability.tiny import (cli, elmo_process, interrupt_after_chunks, litter, one_error_line, text_file,
                                    tiny_model, waiting_for)


@pytest.fixture
def small_chunks(monkeypatch):
    """`elmo embed` saving a part every 50 lines (1,024 by default), so that a short file has many parts."""
    monkeypatch.setattr(cli_embed, "embed_file", functools.partial(embed_file_module.embed_file, chunk_size=50))


def _datasets(path):
    with h5py.File(path) as f:
        return sorted((k for k in f.keys() if k != "sentence_to_index"), key=int)


def test_a_second_run_on_the_same_output_is_refused_while_the_first_finishes(tmp_path):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 1000)
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet", "--batch-size", "8"]
    go = tmp_path / "go"  # the first run waits inside its first chunk until the second has tried
    first = elmo_process(*args, patch=waiting_for(go, "elmo.embed_file", "_embed_chunk"))
    deadline = time.monotonic() + 120
    while not (tmp_path / "out.hdf5.parts" / "manifest.json").exists() and first.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.poll() is None, first.stderr.read()
    second = elmo_process(*args)
    _, err = second.communicate(timeout=120)
    go.touch()
    assert second.returncode == 1
    one_error_line(err, "out.hdf5: in use by pid", str(first.pid))
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0 and "wrote 1000 sentences" in err
    assert _datasets(tmp_path / "out.hdf5") == [str(i) for i in range(1000)]
    assert litter(tmp_path) == ["go", "in.txt", "model", "out.hdf5"]


def test_a_part_deleted_while_the_run_works_is_an_error_and_resume_completes(tmp_path, capsys, monkeypatch,
                                                                             small_chunks):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 300)
    original, calls = embed_file_module._embed_chunk, []

    def deleting(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # while the fourth chunk runs, someone deletes the second part
            (tmp_path / "out.hdf5.parts" / "part-00000001.h5").unlink()
        return original(*args, **kwargs)

    monkeypatch.setattr(embed_file_module, "_embed_chunk", deleting)
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet", "--batch-size", "64"]
    rc, err = cli(capsys, *args)
    assert rc == 1 and not (tmp_path / "out.hdf5").exists()
    one_error_line(err, "part-00000001.h5: missing (1 of 6 parts verified)", "--resume")
    monkeypatch.setattr(embed_file_module, "_embed_chunk", original)
    rc, err = cli(capsys, *args, "--resume")
    assert rc == 0 and "wrote 300 sentences" in err
    assert _datasets(tmp_path / "out.hdf5") == [str(i) for i in range(300)]
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


def test_a_damaged_part_is_redone_on_resume(tmp_path, capsys, monkeypatch, small_chunks):
    """A part whose bytes changed after it was listed fails its checksum: resume redoes it and those after it."""
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 150)
    original, calls = interrupt_after_chunks(monkeypatch, 2), []
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    assert cli(capsys, *args)[0] == 130
    part = tmp_path / "out.hdf5.parts" / "part-00000000.h5"
    data = bytearray(part.read_bytes())
    data[-100] ^= 0xFF
    part.write_bytes(bytes(data))
    monkeypatch.setattr(embed_file_module, "_embed_chunk", lambda *a, **k: calls.append(1) or original(*a, **k))
    rc, err = cli(capsys, *args, "--resume")
    assert rc == 0 and len(calls) == 3 and "wrote 150 sentences" in err
    assert _datasets(tmp_path / "out.hdf5") == [str(i) for i in range(150)]


def test_the_count_printed_is_the_count_written(tmp_path, capsys):
    model = tiny_model(tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b\n\nc\nd e f", encoding="utf-8")  # a blank line, no final newline
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.npz", "--all", "--model", model, "--quiet")
    assert rc == 0 and "wrote 4 sentences" in err


@pytest.mark.parametrize("where", ["sync", "remove"])
def test_an_interrupt_after_the_merged_files_rename_finishes_the_run(tmp_path, capsys, monkeypatch, where):
    """Ctrl-C (or SIGTERM) just after the merged file replaced the output, while the rename was synced or the parts
    were removed: the command said "interrupted" (exit 130) and left the parts beside a complete output, with a
    hint to --resume what was done. It finishes now: exit 0, the parts removed."""
    import elmo.io.parts as parts_module

    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 120)
    real = {"sync": parts_module.sync_folder, "remove": parts_module.WorkFolder.remove}[where]
    calls = []

    def interrupted_once(*args, **kwargs):
        if not calls and (where == "remove" or (tmp_path / "out.hdf5").exists()):
            calls.append(1)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    if where == "sync":
        monkeypatch.setattr(parts_module, "sync_folder", interrupted_once)
    else:
        monkeypatch.setattr(parts_module.WorkFolder, "remove", interrupted_once)
    rc, err = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert calls and rc == 0 and "wrote 120 sentences" in err, err
    assert _datasets(tmp_path / "out.hdf5") == [str(i) for i in range(120)]
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


@pytest.mark.parametrize("where", ["new_file_mode", "_write_hdf5"])
def test_an_interrupt_before_the_rename_still_stops_the_merge(tmp_path, capsys, monkeypatch, where):
    """Before the merged file replaced the output (just before its rename, or before the merged file existed at
    all), an interrupt stops the merge: no output, the parts kept for --resume, which finishes the file."""
    import elmo.io.parts as parts_module

    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 120)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parts_module, where, interrupted)
    rc, err = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 130 and not (tmp_path / "out.hdf5").exists()
    assert "--resume continues" in err and (tmp_path / "out.hdf5.parts").is_dir()
    monkeypatch.undo()
    rc, err = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet", "--resume")
    assert rc == 0 and _datasets(tmp_path / "out.hdf5") == [str(i) for i in range(120)]
