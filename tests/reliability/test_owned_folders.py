"""Case 2 of "Nothing lost": elmo deletes or reuses only work folders it wrote (their manifest says so).

A folder named OUTPUT.parts that the user made is refused in one line, untouched; an input inside the parts folder
is refused before anything is read or deleted; a file the user put into elmo's own folder survives the run.
"""

import functools
import json

import elmo.cli.embed as cli_embed
import elmo.embed_file as embed_file_module
from tests.reliability.tiny import cli, interrupt_after_chunks, litter, one_error_line, text_file, tiny_model


def test_a_users_folder_named_like_the_parts_folder_is_refused_untouched(tmp_path, capsys):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 5)
    theirs = tmp_path / "out.hdf5.parts"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work", encoding="utf-8")
    (theirs / "manifest.json").write_text(json.dumps({"mine": True}), encoding="utf-8")  # not elmo's manifest
    for flags in ([], ["--resume"]):
        rc, err = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet", *flags)
        assert rc == 1
        one_error_line(err, "out.hdf5.parts: exists and is not a folder", "will not delete or reuse it")
        assert sorted(p.name for p in theirs.iterdir()) == ["manifest.json", "thesis.tex"]
        assert (theirs / "thesis.tex").read_text(encoding="utf-8") == "years of work"
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5.parts"]


def test_an_input_inside_the_parts_folder_is_refused_before_it_is_read(tmp_path, capsys):
    model = tiny_model(tmp_path / "model")
    (tmp_path / "out.hdf5.parts").mkdir()
    source = text_file(tmp_path / "out.hdf5.parts" / "in.txt", 5)
    rc, err = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 1 and source.is_file() and source.stat().st_size > 0
    one_error_line(err, "is inside", "out.hdf5.parts")


def test_a_file_the_user_put_into_elmos_folder_survives(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 150)
    monkeypatch.setattr(cli_embed, "embed_file", functools.partial(embed_file_module.embed_file, chunk_size=50))
    interrupt_after_chunks(monkeypatch, 1)
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    assert cli(capsys, *args)[0] == 130
    assert (tmp_path / "out.hdf5.parts" / "manifest.json").is_file()  # elmo's, kept for --resume (a part is done)
    (tmp_path / "out.hdf5.parts" / "notes.txt").write_text("mine", encoding="utf-8")
    (tmp_path / "out.hdf5.parts" / ".my-notes.tmp").write_text("mine too", encoding="utf-8")  # was taken for elmo's
    monkeypatch.undo()
    rc, err = cli(capsys, *args)  # without --resume: elmo clears what it wrote, and only that
    assert rc == 0
    assert (tmp_path / "out.hdf5.parts" / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in (tmp_path / "out.hdf5.parts").iterdir()) == [".my-notes.tmp", "notes.txt"]


def test_records_reach_no_file_outside_the_folder(tmp_path, capsys):
    """What elmo deletes in its folder comes from the records beside its pieces, named by their file names: a
    manifest listing a path outside the folder deletes nothing there."""
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 5)
    parts = tmp_path / "out.hdf5.parts"
    parts.mkdir()
    (tmp_path / "precious.txt").write_text("keep", encoding="utf-8")
    (parts / "manifest.json").write_text(json.dumps({"owner": "elmo", "kind": "embedding parts", "identity": {},
                                                     "files": {"../precious.txt": {"size": 4}}}), encoding="utf-8")
    (parts / "..%2Fprecious.txt.record.json").write_text(json.dumps({"size": 4, "sha256": "x"}), encoding="utf-8")
    rc, _ = cli(capsys, "embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 0 and (tmp_path / "precious.txt").read_text(encoding="utf-8") == "keep"
    assert litter(parts) == ["..%2Fprecious.txt.record.json"]  # not elmo's naming: kept, and the folder with it
