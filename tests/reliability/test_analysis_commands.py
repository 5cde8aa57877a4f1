"""Hostile inputs to the analysis and model-management commands (`elmo similar`, `plot`, `cache`) and their Python
counterparts (`elmo.context`, `elmo.io.converted`): each gives a correct result or one error line, never a result
that is silently wrong, and the user's files in the cache stay as they were."""

import unicodedata

import pytest

from elmo import Embedder
from elmo.cli import main
from elmo.context import nearest, occurrences, plot_word, sense_separation
from elmo.errors import ElmoError
from elmo.io.native import save_model
from elmo.io.official import export_official
from tests.conftest import random_bilm, small_config
from tests.reliability.tiny import cli, one_error_line, tiny_model

BANK = "the bank of the river\nhe went to the bank\na bank is a bank\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _model_with_tokenizer(folder, name: str):
    bilm = random_bilm(small_config())
    bilm.tokenizer_name = name
    return save_model(bilm, folder)


def _sentences(tmp_path, text: str = BANK):
    path = tmp_path / "s.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_an_empty_query_is_refused_not_ignored(model, tmp_path, capsys):
    """`--query "$UNSET"` would otherwise rank every occurrence against every other, as if no query were given."""
    rc, err = cli(capsys, "similar", "bank", "--sentences", _sentences(tmp_path), "--model", model, "--query", "")
    assert rc == 2
    one_error_line(err, "--query", "does not occur")


def test_a_single_occurrence_is_refused_by_similar_and_plot(model, tmp_path, capsys):
    """One occurrence has no neighbour, and a plot of one point titles every layer "one vector for all"."""
    once = _sentences(tmp_path, "the bank of the river\nno word here\n")
    rc, err = cli(capsys, "similar", "bank", "--sentences", once, "--model", model)
    assert rc == 1
    one_error_line(err, "s.txt", "occurs once", "--query")
    rc, err = cli(capsys, "plot", "bank", "--sentences", once, "--model", model, "--out", tmp_path / "p.png")
    assert rc == 1
    one_error_line(err, "s.txt", "occurs once")
    assert not (tmp_path / "p.png").exists()
    capsys.readouterr()
    assert cli(capsys, "similar", "bank", "--sentences", once, "--model", model, "--query", "a bank")[0] == 0


def test_each_occurrence_in_one_sentence_is_named(model, tmp_path, capsys):
    """"a bank is a bank" holds the word twice: its two lines of output would otherwise read the same."""
    capsys.readouterr()
    assert main(["similar", "bank", "--sentences", str(_sentences(tmp_path)), "--model", str(model), "-k", "3"]) == 0
    out = capsys.readouterr().out
    queries = [line for line in out.splitlines() if line.startswith("[")]
    assert len(queries) == 4 and len(set(queries)) == 4, queries
    assert "[line 3] a bank is a bank  (occurrence 2 of 2)" in queries
    twice = [line for line in out.splitlines() if "a bank is a bank" in line]
    assert len(twice) == 8 and all(line.endswith(("(occurrence 1 of 2)", "(occurrence 2 of 2)")) for line in twice)
    assert "[line 1] the bank of the river  (" not in out  # a sentence holding the word once: no mark


def test_the_word_is_read_as_the_models_tokenizer_writes_it(tmp_path, capsys):
    """Hangul typed as separate jamo (NFD) is composed in the sentences by the ko tokenizer, and now in the word too;
    a word the tokenizer splits (don't -> do n't) is no single token: a usage line, not "does not occur"."""
    korean = _model_with_tokenizer(tmp_path / "ko", "ko")
    text = _sentences(tmp_path, "나는 은행에 갔다\n은행 나무가 노랗다\n")
    rc, err = cli(capsys, "similar", unicodedata.normalize("NFD", "은행"), "--sentences", text, "--model", korean)
    assert rc == 0 and not err.strip(), err
    english = _model_with_tokenizer(tmp_path / "en", "en")
    text = _sentences(tmp_path, "I don't know .\nWe don't go .\n")
    rc, err = cli(capsys, "similar", "don't", "--sentences", text, "--model", english)
    assert rc == 2
    one_error_line(err, "WORD", "2 tokens (do n't)")


def test_occurrences_in_another_unicode_form_are_named_in_a_warning(model, tmp_path, capsys):
    """An NFD "café" looks like the NFC word but is other characters: left out as before, now not in silence."""
    nfd = unicodedata.normalize("NFD", "café")
    text = _sentences(tmp_path, f"a café here\na {nfd} there\nthe café\n")
    capsys.readouterr()
    assert main(["similar", "café", "--sentences", str(text), "--model", str(model)]) == 0
    captured = capsys.readouterr()
    assert "a cafe" not in captured.out and "[line 2]" not in captured.out
    warning = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "1 token(s)" in warning[0] and "'cafe\\u0301'" in warning[0], captured.err


def test_a_cache_path_that_is_a_file_is_one_error_line(tmp_path, capsys, monkeypatch):
    """`elmo cache list` / `clear` would report an empty cache (and "removed 0") at a path that can hold none."""
    afile = tmp_path / "cachefile"
    afile.write_text("mine")
    for cache in (afile, afile / "sub"):
        monkeypatch.setenv("ELMO_CACHE", str(cache))
        for action in ("list", "clear"):
            rc, err = cli(capsys, "cache", action)
            assert rc == 1
            one_error_line(err, str(afile), "a file, where elmo's cache folder")
    assert afile.read_text() == "mine"


@pytest.mark.parametrize("kind", ["file", "link", "folder"])
def test_a_users_index_json_in_the_cache_is_neither_replaced_nor_deleted(tmp_path, capsys, monkeypatch, kind):
    """elmo's hash index is `converted/index.json`; a file of that name that is not elmo's index (a user's file, a
    link, whose target lies outside the cache, or a folder) was overwritten by a load and deleted by `cache clear`
    (a folder made `clear` fail after deleting the copies)."""
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMO_CONVERT_CACHE", raising=False)
    folder = tmp_path / "cache" / "converted"
    folder.mkdir(parents=True)
    mine = tmp_path / "mine.txt"
    mine.write_text("my own notes")
    index = folder / "index.json"
    if kind == "file":
        index.write_text("my own notes")
    elif kind == "link":
        index.symlink_to(mine)
    else:
        index.mkdir()
    options, weights = export_official(random_bilm(small_config()), tmp_path / "pair")
    for _ in range(2):  # the first load converts, the second reads the copy
        rc, err = cli(capsys, "show", "a b", "--options", options, "--weights", weights)
        assert rc == 0, err
    rc, err = cli(capsys, "cache", "clear")
    assert rc == 0 and "not elmo's hash index" in err, err
    assert not [p for p in folder.iterdir() if p.name != "index.json"]  # the copy itself is gone
    assert mine.read_text() == "my own notes"
    assert index.is_symlink() if kind == "link" else index.is_dir() if kind == "folder" else \
        index.read_text() == "my own notes"


def test_the_python_api_refuses_arguments_that_would_give_a_wrong_result(model):
    """A string as the sentences would be read letter by letter (no occurrence); labels of another length would
    fail deep inside or be dropped; k=-1 would drop the last neighbour; a layer out of range is numpy's IndexError;
    a plot of no point or one point would fail or title every layer "one vector for all"."""
    embedder = Embedder.from_pretrained(model)
    found = occurrences(embedder, "bank", ["a bank", "the bank here", "bank it", "my bank"], ["x", "x", "y", "y"])
    assert len(found) == 4
    calls = [lambda: occurrences(embedder, "bank", "a bank"), lambda: occurrences(embedder, None, ["a bank"]),
             lambda: occurrences(embedder, "bank", ["a bank", "b bank"], ["x"]),
             lambda: nearest(found[0], found, k=-1), lambda: nearest(found[0], found, k=True),
             lambda: nearest(found[0], found, layer=9), lambda: nearest(found[0], found, layer=-4),
             lambda: sense_separation(found, layer=9),
             lambda: plot_word([], "bank", "x.png"), lambda: plot_word(found[:1], "bank", "x.png")]
    for call in calls:
        with pytest.raises(ElmoError):
            call()
    top = nearest(found[0], found, layer=-1, k=2)
    assert [o.sentence for _, o in top] == [o.sentence for _, o in nearest(found[0], found, layer=2, k=2)]
    assert sense_separation(found, layer=-1) == sense_separation(found, layer=2)


def _through_a_fifo(folder, name: str, text: str):
    """A named pipe that a thread fills with ``text`` once a reader opens it (as `<(cat file)` or `/dev/stdin`)."""
    import os
    import threading

    fifo = folder / name
    os.mkfifo(fifo)

    def write():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(text)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return fifo, thread


def test_a_pipe_is_read_whole_by_the_commands_that_read_their_text_once(model, tmp_path, capsys):
    """`similar --sentences <(cat s.txt)` and `dump-token-embeddings <(cat v.txt)` lost the first 4 KiB (the gzip
    check's look, then a second open), exit 0 with other rows and line numbers; a named FIFO hung for ever."""
    import h5py
    import numpy as np

    sentences = "the bank one\n" + "filler words here\n" * 400 + "the bank two\na bank three\n"  # 7 KB
    (tmp_path / "s.txt").write_text(sentences, encoding="utf-8")
    outputs = []
    for source in (tmp_path / "s.txt", None):
        fifo, thread = (source, None) if source else _through_a_fifo(tmp_path, "s.fifo", sentences)
        capsys.readouterr()
        rc = main(["similar", "bank", "--sentences", str(fifo), "--model", str(model), "-k", "1"])
        outputs.append(capsys.readouterr().out)
        assert rc == 0
        if thread is not None:
            thread.join(10)
    assert outputs[0] == outputs[1] and "[line 403] a bank three" in outputs[0], outputs
    words = "".join(f"word{i}\n" for i in range(3000))  # 26 KB
    (tmp_path / "v.txt").write_text(words, encoding="utf-8")
    fifo, thread = _through_a_fifo(tmp_path, "v.fifo", words)
    for source, out in ((tmp_path / "v.txt", "file.hdf5"), (fifo, "pipe.hdf5")):
        rc, err = cli(capsys, "dump-token-embeddings", source, tmp_path / out, "--model", model)
        assert rc == 0, err
    with h5py.File(tmp_path / "file.hdf5") as a, h5py.File(tmp_path / "pipe.hdf5") as b:
        assert a["embedding"].shape == b["embedding"].shape == (3000, a["embedding"].shape[1])
        assert np.array_equal(a["embedding"][()], b["embedding"][()])
