"""The user's text is read, split and shown as written: no encoding guessed into garbage, no character changed by a
tokenizer beyond what it documents, no byte of a command line dropped, no token shown cut without a mark."""

import gzip
import unicodedata

import pytest

from elmo.cli import main
from elmo.text.tokenize import korean_tokenize
from tests.conftest import OPTIONS, WEIGHTS
from tests.reliability.tiny import cli, litter, one_error_line

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]
TEXT = "The bank closed .\nA river bank\n"


@pytest.mark.parametrize("name, data, encoding", [
    ("utf16.txt", TEXT.encode("utf-16"), "UTF-16LE text"),  # Python writes a byte-order mark
    ("utf16be.txt", b"\xfe\xff" + TEXT.encode("utf-16-be"), "UTF-16BE text"),
    ("utf32.txt", TEXT.encode("utf-32"), "UTF-32LE text"),
    ("nobom.txt", TEXT.encode("utf-16-le"), "UTF-16LE (no byte-order mark)"),  # valid UTF-8, a NUL by each letter
    ("utf16.txt.gz", gzip.compress(TEXT.encode("utf-16")), "UTF-16LE text"),
    ("short.txt", "1\nThe bank closed .\n".encode("utf-16-le"), "UTF-16LE (no byte-order mark)"),  # b"1\x00\n"
], ids=["utf16", "utf16be", "utf32", "utf16-without-bom", "utf16-gzip", "utf16-one-character-first-line"])
@pytest.mark.parametrize("errors", ["strict", "replace"])
def test_a_utf16_or_utf32_file_is_refused_not_embedded_as_garbage(tmp_path, capsys, name, data, encoding, errors):
    (tmp_path / name).write_bytes(data)
    rc, err = cli(capsys, "embed", tmp_path / name, tmp_path / "out.hdf5", "--top", "--quiet", "--errors", errors,
                  *MODEL)
    assert rc == 1
    one_error_line(err, f"{name}, line 1: {encoding}", "save the file as UTF-8", "iconv -f UTF-")
    assert litter(tmp_path, {name}) == []


def test_utf8_text_with_nul_bytes_is_still_embedded(tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"a\x00b c\x00d\nx\x00\x00y\n")
    rc, _ = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--quiet", *MODEL)
    assert rc == 0


def test_the_korean_tokenizer_composes_jamo_and_changes_no_other_character():
    # NFC would change the compatibility Hanja (Korean readings of 樂), U+037E, the ohm sign and the accent
    kept = ["\uf914\uf95c", "τι", "\u037e", "\u2126", "cafe\u0301", "ＡＢＣ", "\u00c5"]
    assert korean_tokenize(" ".join(kept)) == kept
    text = "나는 은행에서 돈을 찾았다"
    assert korean_tokenize(unicodedata.normalize("NFD", text) + " \uf914") == text.split() + ["\uf914"]
    assert korean_tokenize("\uac00\u11a8") == ["\uac01"]  # a final consonant typed apart joins its syllable


@pytest.mark.parametrize("args, name", [
    (["show", "caf\udce9 ok", *MODEL], "SENTENCE"),
    (["similar", "ba\udcffnk", "--sentences", "S", *MODEL], "WORD"),
    (["similar", "bank", "--sentences", "S", "--query", "the \udcc3 bank", *MODEL], "--query"),
    (["plot", "bank", "--sentences", "S", "--out", "p.png", "--title", "\udce9", *MODEL], "--title"),
    (["score", "S", "a b", "caf\udce9"], "SENTENCES"),  # refused before the model is read
    (["substitutes", "S", "caf\udce9 ok", "0"], "SENTENCE"),
], ids=["show", "similar-word", "similar-query", "plot-title", "score", "substitutes"])
def test_command_line_words_that_are_not_utf8_are_refused(tmp_path, capsys, args, name):
    """Python keeps such bytes as lone surrogates, which character ids drop: "caf" and an empty token."""
    (tmp_path / "s.txt").write_text("the bank closed\n", encoding="utf-8")
    args = [str(tmp_path / "s.txt") if a == "S" else str(tmp_path / a) if a == "p.png" else a for a in args]
    rc, err = cli(capsys, *args)
    assert rc == 2
    one_error_line(err, f"{name}: not UTF-8 text (the byte 0x", "give it in UTF-8")
    assert litter(tmp_path, {"s.txt"}) == []


def test_show_marks_a_token_it_cuts_to_its_column(capsys):
    """A long Korean eojeol shown cut without a mark reads as a token the tokenizer made."""
    assert main(["show", "x" * 30 + " 국제연합안전보장이사회에서 ok", *MODEL]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows[0].startswith("x" * 14 + "… ") and rows[1].startswith("국제연합안전보… ")
    assert rows[2].startswith("ok ")


def test_the_python_api_refuses_lone_surrogates_instead_of_dropping_them(tmp_path):
    """`Embedder.embed([["caf\\udce9"]])` gave the vectors of "caf" (AllenNLP drops what UTF-8 cannot encode), and
    `embed_file` of an open text holding one was a UnicodeEncodeError traceback."""
    import io

    from elmo import Embedder
    from elmo.errors import ElmoError
    from tests.conftest import OPTIONS, WEIGHTS

    embedder = Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS)
    with pytest.raises(ElmoError, match=r"'caf\\udce9'.*lone surrogate"):
        embedder.embed([["caf\udce9"]], split_into_words=False)
    with pytest.raises(ElmoError, match="lone surrogate"):
        embedder.embed_file(io.StringIO("caf\udce9 x\n"), tmp_path / "s.hdf5", progress=False)
    assert not any(tmp_path.iterdir())
    assert len(embedder.embed([["café"]], split_into_words=False)) == 1  # UTF-8 text itself is fine
