"""What embedding writes and returns: an output named through a symbolic link, errors of the lazy
``embed_sentences`` naming the sentence by its place in the whole input, and a failed ``Embedder.embed_file`` of an
open file leaving no parts that no run could ever resume from, and an output folder that takes no files."""

import os

import h5py
import numpy as np
import torch
import pytest

import elmo.io.lock
from elmo import BiLM, Embedder
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


def test_a_carriage_return_in_an_open_text_file_is_refused_as_in_a_named_one(model, tmp_path):
    """Text mode turns a lone \\r into a line break: the open file gave 3 datasets for 2 lines, so dataset 1 held the
    file's third line's text (a path was refused)."""
    (tmp_path / "in.txt").write_bytes(b"a b\rc d\ne f\n")
    embedder = Embedder.from_pretrained(model)
    with open(tmp_path / "in.txt", encoding="utf-8") as handle:
        with pytest.raises(ElmoError, match=r"in.txt: a carriage return \(\\r\) inside a line"):
            embedder.embed_file(handle, tmp_path / "out.hdf5", progress=False)
    assert litter(tmp_path, {"in.txt"}) == []
    (tmp_path / "crlf.txt").write_bytes(b"a b\r\ne f\r\n")  # Windows line ends are line ends
    with open(tmp_path / "crlf.txt", encoding="utf-8") as handle:
        assert embedder.embed_file(handle, tmp_path / "out.hdf5", progress=False) == 2


@pytest.mark.parametrize("given", ["batch", "sentence"])
@pytest.mark.parametrize("method", ["embed", "encode", "embed_batch", "embed_sentences"])
def test_a_set_is_refused_as_the_batch_or_a_sentence(model, given, method):
    """A set is iterated in hash order, which changes from run to run: its tokens were embedded in that order, its
    sentences returned in it."""
    embedder = Embedder.from_pretrained(model)
    batch = {"the cat sat", "a dog ran far"} if given == "batch" else [["a"], {"the", "cat", "sat"}]
    with pytest.raises(ElmoError, match="(has|have) no order.*; pass a list$"):
        result = getattr(embedder, method)(batch)
        list(result) if method == "embed_sentences" else result


def test_flags_that_are_not_true_or_false_are_refused(model, tmp_path):
    """A string such as "no" is truthy: it switched sentence keys on, dropped sentence_to_index, normalised the
    vectors, or kept NaN vectors."""
    embedder = Embedder.from_pretrained(model)
    text = text_file(tmp_path / "in.txt", 2)
    calls = [lambda: embedder.embed_file(text, tmp_path / "out.hdf5", use_sentence_keys="no", progress=False),
             lambda: embedder.embed_file(text, tmp_path / "out.hdf5", forget_sentences="false", progress=False),
             lambda: embedder.encode(["a b"], normalize="no"),
             lambda: Embedder(embedder.bilm, allow_non_finite="no")]
    for index, call in enumerate(calls):
        with pytest.raises(ElmoError, match="must be True or False"):
            call()
            pytest.fail(f"call {index} was taken")
    assert litter(tmp_path, {"in.txt"}) == []


def _overflowing(model) -> BiLM:
    """An embedder whose model gives infinite vectors for any word with a 'z'."""
    bilm = Embedder.from_pretrained(model).bilm
    with torch.no_grad():
        bilm.char_encoder.char_embedding.weight[ord("z") + 1].fill_(float("inf"))
    return bilm


def test_embed_tokens_checks_vectors_and_embed_file_honours_allow_non_finite(model, tmp_path, caplog):
    """``embed_tokens`` returned NaN vectors without a word; ``Embedder(allow_non_finite=True).embed_file`` raised
    anyway, naming a command-line flag."""
    bilm = _overflowing(model)
    with pytest.raises(ElmoError, match="sentence 1: NaN or infinite vectors"):
        Embedder(bilm).embed_tokens([["a", "b"], ["zz", "top"]])
    (tmp_path / "in.txt").write_text("a b\nzz top\n", encoding="utf-8")
    assert Embedder(bilm, allow_non_finite=True).embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5",
                                                            progress=False) == 2
    assert "NaN or infinite" in caplog.text
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert not np.isfinite(f["1"][()]).all()


def test_numpy_values_are_taken_like_python_ones_and_leave_nothing_behind(model, tmp_path):
    """``batch_size=np.int64(2)`` failed in the JSON of the run's record after the parts folder was made, and that
    empty folder refused every later run; ``output_format=np.str_("top")`` failed at the merge; ``gamma`` as a NumPy
    float was 'not a number'."""
    embedder = Embedder.from_pretrained(model)
    text = text_file(tmp_path / "in.txt", 3)
    assert embedder.embed_file(text, tmp_path / "a.hdf5", batch_size=np.int64(2), output_format=np.str_("top"),
                               use_sentence_keys=np.False_, progress=False) == 3
    assert embedder.embed_file(text, tmp_path / "b.hdf5", batch_size=2, output_format="top", progress=False) == 3
    with h5py.File(tmp_path / "a.hdf5") as a, h5py.File(tmp_path / "b.hdf5") as b:
        assert np.array_equal(a["0"][()], b["0"][()]) and a.attrs["layers"] == "top"
    assert litter(tmp_path, {"in.txt", "a.hdf5", "b.hdf5"}) == []
    mix = Embedder(embedder.bilm, gamma=np.float32(0.5), mix_weights=[0, 0, 0]).mix  # (L+1,)
    assert torch.allclose(mix, torch.full((3,), 0.5 / 3))


def test_unusable_inputs_are_one_line(model, tmp_path):
    """A 0-d array, a closed file and a file open for writing were TypeError / ValueError tracebacks."""
    embedder = Embedder.from_pretrained(model)
    with pytest.raises(ElmoError, match="expected a list of sentences"):
        embedder.embed(np.array("a b"))
    closed = open(text_file(tmp_path / "in.txt", 2), encoding="utf-8")
    closed.close()
    with pytest.raises(ElmoError, match="in.txt: cannot be read"):
        embedder.embed_file(closed, tmp_path / "out.hdf5", progress=False)
    (tmp_path / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    with open(tmp_path / "latin1.txt", encoding="utf-8") as handle:  # decoding fails in the handle's own read
        with pytest.raises(ElmoError, match="latin1.txt: not text in the encoding it was opened with"):
            embedder.embed_file(handle, tmp_path / "out.hdf5", progress=False)
    with open(tmp_path / "w.txt", "w", encoding="utf-8") as handle:
        with pytest.raises(ElmoError, match="w.txt: cannot be read"):
            embedder.embed_file(handle, tmp_path / "out.hdf5", progress=False)


def test_a_work_folder_whose_record_cannot_be_written_is_not_made(tmp_path):
    """The folder was made before its manifest's JSON failed: an empty folder without elmo's manifest, which every
    later run then refused as not elmo's."""
    from elmo.io.work_folder import WorkFolder

    with pytest.raises(TypeError):
        WorkFolder(tmp_path / "out.hdf5.parts", "embedding parts", {"batch_size": object()}, resume=False)
    assert litter(tmp_path, set()) == []
