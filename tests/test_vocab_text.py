
import pytest

import gzip

from elmo.data.vocab import Vocabulary, VocabError, read_words
from elmo.text.tokenize import english_tokenize, get_tokenizer


def test_build_orders_by_frequency_after_the_specials():
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "b", "a", "<S>"]])
    assert vocab.words == ["<S>", "</S>", "<UNK>", "b", "a", "c"]
    assert vocab.ids(["a", "zzz"]) == [4, vocab.unk]


def test_min_count_and_max_size():
    sentences = [["a"] * 5 + ["b"] * 3 + ["c"]]
    assert Vocabulary.build(sentences, min_count=2).words[3:] == ["a", "b"]
    assert Vocabulary.build(sentences, max_size=4).words == ["<S>", "</S>", "<UNK>", "a"]


def test_round_trip_and_duplicates_are_an_error(tmp_path):
    vocab = Vocabulary.build([["x", "y", "x"]])
    vocab.save(tmp_path / "v.txt")
    assert Vocabulary.load(tmp_path / "v.txt").words == vocab.words
    (tmp_path / "d.txt").write_text("<S>\n</S>\n<UNK>\nthe\na\nthe\n", encoding="utf-8")
    with pytest.raises(VocabError, match="line 6: 'the' repeats line 4"):
        Vocabulary.load(tmp_path / "d.txt")
    (tmp_path / "n.txt").write_text("the\na\n", encoding="utf-8")
    with pytest.raises(VocabError, match="lacks <S>"):
        Vocabulary.load(tmp_path / "n.txt")


def test_vocabulary_files_are_read_like_every_text_file(tmp_path):
    """gzip accepted, a bad byte named by its line (the file used to be decoded whole: no line, and a gzipped
    vocabulary was reported as not UTF-8)."""
    with gzip.open(tmp_path / "v.txt.gz", "wt", encoding="utf-8") as f:
        f.write("<S>\n</S>\n<UNK>\nbank\n")
    assert Vocabulary.load(tmp_path / "v.txt.gz").words == ["<S>", "</S>", "<UNK>", "bank"]
    (tmp_path / "bad.txt").write_bytes(b"<S>\n</S>\n<UNK>\nba\xffnk\n")
    with pytest.raises(VocabError, match="line 4: not valid UTF-8"):
        Vocabulary.load(tmp_path / "bad.txt")
    (tmp_path / "plain.txt").write_text("\ufeffthe\n\nbank\n", encoding="utf-8")
    assert read_words(tmp_path / "plain.txt", rows=False) == ["the", "bank"]  # a plain word list (--cache-vocab)
    with pytest.raises(VocabError, match="line 2: blank"):  # a vocabulary: line i is word i
        read_words(tmp_path / "plain.txt")
    (tmp_path / "crlf.txt").write_bytes(b"the\r\nbank\r\n")
    assert read_words(tmp_path / "crlf.txt") == ["the", "bank"]
    (tmp_path / "cr.txt").write_bytes(b"the\rbank\r")  # old Mac line endings: not one word "the\rbank"
    with pytest.raises(VocabError, match="line 1: a carriage return"):
        read_words(tmp_path / "cr.txt")


def test_english_tokenizer_ptb_style():
    assert english_tokenize("Don't stop.") == ["Do", "n't", "stop", "."]
    assert english_tokenize("It's 3.14, the U.S. said<br />yes!") == ["It", "'s", "3.14", ",", "the", "U.S.", "said",
                                                                         "yes", "!"]


def test_korean_default_is_eojeol():
    assert get_tokenizer("ko")("그녀는 돈을 인출하기 위해 은행에 갔다") == ["그녀는", "돈을", "인출하기", "위해", "은행에", "갔다"]
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("fr")


def test_english_tokenizer_curly_apostrophes_and_attached_marks():
    assert english_tokenize("don’t, John’s") == ["do", "n’t", ",", "John", "’s"]
    assert english_tokenize("cafe\u0301. हिन्दी 👍🏽! 👨\u200d👩\u200d👧") == [
        "cafe\u0301", ".", "हिन्दी", "👍🏽", "!", "👨\u200d👩\u200d👧"]
    # a flag is two regional indicators; a third starts the next flag
    assert english_tokenize("🇰🇷🇺🇸 and 🇫🇷🇰!") == ["🇰🇷", "🇺🇸", "and", "🇫🇷", "🇰", "!"]
    # an apostrophe inside a name splits it, as in the shipped model's training text; "1990s" is one token, as the
    # 1B Word Benchmark writes it (it was "1990 s" before the tokenizer became idempotent on 1B text)
    assert english_tokenize("1990s O'Neil") == ["1990s", "O", "'", "Neil"]


def test_a_vocabulary_file_saved_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("\ufeff<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    assert Vocabulary.load(path).words[:4] == ["<S>", "</S>", "<UNK>", "the"]


def test_korean_tokenizer_composes_jamo_and_ends_an_emoji_at_its_variation_selector():
    import unicodedata

    from elmo.text.tokenize import korean_tokenize

    text = "나는 은행에서 돈을 찾았다."
    assert korean_tokenize(unicodedata.normalize("NFD", text)) == korean_tokenize(text)
    assert korean_tokenize("❤️사랑해요 ✔️확인") == ["❤️", "사랑해요", "✔️", "확인"]
    assert english_tokenize("❤️love it") == ["❤️", "love", "it"]


def test_a_vocabulary_without_its_special_words_names_the_file_and_spots_counts(tmp_path):
    (tmp_path / "words.txt").write_text("the\ncat\n")
    with pytest.raises(VocabError, match=r"words.txt: the vocabulary lacks <S>"):
        Vocabulary.load(tmp_path / "words.txt")
    (tmp_path / "counts.txt").write_text("<S>\n</S>\n<UNK>\nthe 12\n")  # a word that text split at whitespace never has
    with pytest.raises(VocabError, match=r"counts.txt, line 4: 'the 12' holds a space .*counts beside the words"):
        Vocabulary.load(tmp_path / "counts.txt")


def test_a_vocabulary_given_as_a_model_is_called_a_vocabulary(tmp_path):
    """``<S>`` on the first line looked like markup: the file was called an HTML page."""
    from elmo.io.file_kinds import describe_file

    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    (tmp_path / "page.html").write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    assert describe_file(tmp_path / "vocab.txt") == "a vocabulary (one word per line)"
    assert describe_file(tmp_path / "page.html").startswith("an HTML/XML page")


def test_a_text_file_given_as_weights_is_called_what_it_is(tmp_path):
    from elmo.io.official import WeightFileError, load_official
    from tests.conftest import OPTIONS

    (tmp_path / "w.hdf5").write_text("not hdf5 at all")
    with pytest.raises(WeightFileError, match=r"w.hdf5: not an HDF5 weight file but a file of another kind "
                                              r"\(it begins with b'not hdf5'\)"):
        load_official(OPTIONS, tmp_path / "w.hdf5")


def test_a_vocabulary_saved_under_a_gz_name_is_gzip_and_reads_back(tmp_path):
    """`vocab build -o v.txt.gz` wrote plain text under the .gz name: zcat failed on it, and so did every reader
    here (they read a .gz name as gzip), on elmo's own output."""
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "bank", "은행"])
    vocab.save(tmp_path / "v.txt.gz")
    assert gzip.decompress((tmp_path / "v.txt.gz").read_bytes()).decode("utf-8").split("\n")[3:5] == ["bank", "은행"]
    assert Vocabulary.load(tmp_path / "v.txt.gz").words == vocab.words
    vocab.save(tmp_path / "v.txt")
    assert (tmp_path / "v.txt").read_text(encoding="utf-8").startswith("<S>\n")
