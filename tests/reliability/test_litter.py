"""Case 9 of "Nothing lost": no litter, and bad input found before any work.

A run that fails before its first part leaves nothing (no parts folder, no lock, no temporary file); a run killed
during the merge leaves its temporary file inside the parts folder, where the next run removes it; a bad byte at
line 5,000 is reported before the first chunk is embedded.
"""

import functools
import time

import pytest

import elmo.cli.embed as cli_embed
import elmo.embed_file as embed_file_module
import elmo.io.parts as parts_module
from tests.reliability.tiny import cli, litter, one_error_line, text_file, tiny_model


def test_a_bad_byte_at_line_5000_fails_before_any_chunk(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "good.txt", 4999)
    (tmp_path / "in.txt").write_bytes((tmp_path / "good.txt").read_bytes() + b"bad \xff byte\nmore\n")
    (tmp_path / "good.txt").unlink()
    monkeypatch.setattr(embed_file_module, "_embed_chunk", lambda *a, **k: pytest.fail("a chunk was embedded"))
    start = time.monotonic()
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 1 and time.monotonic() - start < 30
    one_error_line(err, "in.txt, line 5000: invalid UTF-8", "--errors replace")
    assert litter(tmp_path) == ["in.txt", "model"]


@pytest.mark.parametrize("fault", [ValueError, OSError])
def test_a_run_failing_before_its_first_part_leaves_nothing(tmp_path, capsys, monkeypatch, fault):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "in.txt", 20)

    def failing(*args, **kwargs):
        raise fault("no")  # a bug or an I/O error inside the first chunk

    monkeypatch.setattr(embed_file_module, "_embed_chunk", failing)
    try:
        cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    except fault:
        pass
    assert litter(tmp_path) == ["in.txt", "model"]


def test_a_kill_during_the_merge_leaves_nothing_that_resume_keeps(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "in.txt", 30)
    original = parts_module._write_hdf5

    def killed(path, arrays, *rest):
        original(path, list(arrays)[:5], *rest)
        raise KeyboardInterrupt  # as if killed halfway through the merge

    monkeypatch.setattr(parts_module, "_write_hdf5", killed)
    args = ["embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    assert cli(capsys, *args)[0] == 130
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5.parts"]  # kept for --resume, nothing hidden beside
    (tmp_path / "out.hdf5.parts" / ".merged.tmp").write_bytes(b"half a file")  # what a SIGKILL would leave
    monkeypatch.undo()
    rc, err = cli(capsys, *args, "--resume")
    assert rc == 0 and "wrote 30 sentences" in err
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


def _chunks_of_50_failing_at(monkeypatch, call: int, error: BaseException) -> list:
    """``elmo embed`` in chunks of 50 lines, the ``call``-th chunk raising ``error``: the list of calls made."""
    monkeypatch.setattr(cli_embed, "embed_file", functools.partial(embed_file_module.embed_file, chunk_size=50))
    original, calls = embed_file_module._embed_chunk, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(embed_file_module, "_embed_chunk", failing)
    return calls


def test_an_error_after_some_parts_keeps_them_for_resume(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "in.txt", 150)
    original = embed_file_module._embed_chunk
    calls = _chunks_of_50_failing_at(monkeypatch, 3, OSError(5, "Input/output error", "somewhere"))
    args = ["embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    rc, err = cli(capsys, *args)
    assert rc == 1
    one_error_line(err, "somewhere: Input/output error")
    assert litter(tmp_path / "out.hdf5.parts") == ["manifest.json", "part-00000000.h5", "part-00000000.h5.record.json",
                                                        "part-00000001.h5", "part-00000001.h5.record.json"]
    monkeypatch.setattr(embed_file_module, "_embed_chunk", original)
    assert cli(capsys, *args, "--resume")[0] == 0 and len(calls) == 3
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


@pytest.mark.parametrize("at_call", [1, 3])
def test_an_interrupt_keeps_finished_parts_says_so_even_quiet_and_leaves_nothing_else(tmp_path, capsys, monkeypatch,
                                                                                        at_call):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "in.txt", 150)
    _chunks_of_50_failing_at(monkeypatch, at_call, KeyboardInterrupt())
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 130 and "interrupted" in err
    if at_call == 1:  # before the first part: nothing behind
        assert litter(tmp_path) == ["in.txt", "model"] and "--resume" not in err
    else:
        assert litter(tmp_path) == ["in.txt", "model", "out.hdf5.parts"] and "--resume continues" in err


@pytest.mark.parametrize("to, first", [("ours", "model.safetensors"), ("official", "weights.hdf5")])
def test_an_interrupted_convert_leaves_the_earlier_conversion_whole(tmp_path, capsys, monkeypatch, to, first):
    """`elmo convert` wrote its weights into place, then its config: a Ctrl-C between the two left one model's
    weights beside another model's config (which loaded without a word), or half a new folder."""
    import elmo.io.native as native_module
    import elmo.io.official as official_module

    earlier, other = tiny_model(tmp_path / "earlier"), tiny_model(tmp_path / "other", dim=32)
    assert cli(capsys, "convert", "--model", earlier, "--to", to, tmp_path / "out")[0] == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}

    def interrupted_after_weights(*args, **kwargs):
        assert (next((tmp_path).glob(".out.*.tmp")) / first).is_file()  # the weights are written, the config not
        raise KeyboardInterrupt

    module = native_module if to == "ours" else official_module
    monkeypatch.setattr(module.json, "dumps", interrupted_after_weights)
    rc, err = cli(capsys, "convert", "--model", other, "--to", to, tmp_path / "out")
    monkeypatch.undo()
    assert rc == 130
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert litter(tmp_path) == ["earlier", "other", "out"]
    rc, err = cli(capsys, "convert", "--model", other, "--to", to, tmp_path / "new")
    assert rc == 0 and sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(before)
