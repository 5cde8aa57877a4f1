"""What embedding writes and returns: an output named through a symbolic link, errors of the lazy
``embed_sentences`` naming the sentence by its place in the whole input, and a failed ``Embedder.embed_file`` of an
open file leaving no parts that no run could ever resume from, and an output folder that takes no files."""

import os

import h5py
import pytest

import elmo.io.lock
from elmo import Embedder
from elmo.errors import ElmoError
from tests.conftest import OPTIONS, WEIGHTS
from tests.reliability.tiny import cli, interrupt_after_chunks, litter, one_error_line, text_file, tiny_model

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("target_exists", [True, False])
def test_an_output_through_a_symbolic_link_writes_its_target_and_keeps_the_link(model, tmp_path, capsys,
                                                                                 target_exists):
    text = text_file(tmp_path / "in.txt", 3)
    (tmp_path / "data").mkdir()
    target, link = tmp_path / "data" / "vectors.hdf5", tmp_path / "out.hdf5"
    if target_exists:
        target.write_bytes(b"an earlier output")
    os.symlink(os.path.join("data", "vectors.hdf5"), link)
    rc, err = cli(capsys, "embed", text, link, "--top", "--model", model, "--quiet")
    assert rc == 0, err
    assert link.is_symlink() and link.resolve() == target.resolve()  # the link is still a link, to the same file
    with h5py.File(target, "r") as f:
        assert sorted(f) == ["0", "1", "2", "sentence_to_index"]
    assert litter(tmp_path) == ["data", "in.txt", "out.hdf5"] and litter(tmp_path / "data") == ["vectors.hdf5"]


def test_embed_sentences_names_a_bad_sentence_by_its_place_in_the_whole_input(model):
    embedder = Embedder.from_pretrained(model)
    with pytest.raises(ElmoError, match=r"^sentence 3: expected a string or a list of tokens"):
        list(embedder.embed_sentences([["a"], ["b"], ["c"], None], batch_size=2))
    with pytest.raises(ElmoError, match=r"^sentence 5: 100,001 tokens"):
        list(embedder.embed_sentences([["a"]] * 5 + [["w"] * 100_001], batch_size=2))


@pytest.mark.parametrize("mode", ["r", "rb"])
def test_a_failed_embed_file_of_an_open_file_leaves_no_parts(model, tmp_path, monkeypatch, mode):
    """The open file is read from a temporary copy, gone when the call ends: its parts could never be resumed."""
    text = text_file(tmp_path / "in.txt", 1100)  # two chunks of 1,024 lines: the first is finished, then Ctrl-C
    interrupt_after_chunks(monkeypatch, 1)
    with open(text, mode) as handle, pytest.raises(KeyboardInterrupt):
        Embedder.from_pretrained(model).embed_file(handle, tmp_path / "out.hdf5", progress=False)
    assert litter(tmp_path) == ["in.txt"]
    monkeypatch.undo()
    with open(text, mode) as handle:
        assert Embedder.from_pretrained(model).embed_file(handle, tmp_path / "out.hdf5", progress=False) == 1100
    assert litter(tmp_path) == ["in.txt", "out.hdf5"]


class _ReadOnlyFolderOs:
    """``os`` as elmo.io.lock sees it in a folder that takes no new files (a read-only mount: root is refused too)."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def open(path, flags, mode=0o777):
        if flags & os.O_CREAT and not os.path.exists(path):
            raise PermissionError(13, "Read-only file system", str(path))
        return os.open(path, flags, mode)


def test_an_output_in_a_folder_that_takes_no_files_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    """The lock is the first file elmo makes beside the output: its error names the output and what to do, not
    elmo's hidden lock file."""
    (tmp_path / "in.txt").write_text("the bank\n", encoding="utf-8")
    monkeypatch.setattr(elmo.io.lock, "os", _ReadOnlyFolderOs())
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--quiet", *MODEL)
    assert rc == 1
    line = one_error_line(err, f"{tmp_path / 'out.hdf5'}: cannot write in {tmp_path}", "a folder you can write to")
    assert ".lock" not in line
