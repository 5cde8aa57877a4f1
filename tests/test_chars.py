import tracemalloc

import pytest
import torch

from elmo.data.chars import (BOS_IDS, EOS_IDS, add_sentence_boundaries, batch_to_ids, word_to_char_bytes,
                             word_to_char_ids)


def test_examples_from_the_spec():
    assert word_to_char_ids("<S>") == (259, 257, 260) + (261,) * 47
    assert word_to_char_ids("</S>") == (259, 258, 260) + (261,) * 47
    assert word_to_char_ids("a") == (259, 98, 260) + (261,) * 47
    assert tuple(BOS_IDS.tolist()) == word_to_char_ids("<S>")
    assert tuple(EOS_IDS.tolist()) == word_to_char_ids("</S>")


def test_utf8_bytes_and_truncation_inside_a_character():
    ids = word_to_char_ids("은행")  # 6 bytes
    assert ids[:8] == (259, *(b + 1 for b in "은행".encode()), 260)
    long = "é" * 30  # 60 bytes: cut after 48, which falls on a character boundary here
    ids = word_to_char_ids(long)
    assert len(ids) == 50 and ids[0] == 259 and ids[-1] == 260
    odd = "a" + "é" * 30  # the 48-byte cut falls inside the 24th é
    ids = word_to_char_ids(odd)
    assert ids[1:49] == tuple(b + 1 for b in odd.encode()[:48]) and ids[49] == 260


def test_lone_surrogates_are_refused_not_dropped():
    """AllenNLP drops what UTF-8 cannot encode: "caf\\udce9" (Latin-1 bytes read with surrogateescape) was
    embedded as "caf" without a word."""
    from elmo.errors import UsageError

    with pytest.raises(UsageError, match="lone surrogate"):
        word_to_char_ids("a\ud800b")
    with pytest.raises(UsageError, match="lone surrogate"):
        batch_to_ids([["fine", "caf\udce9"]])


def test_batch_to_ids_pads_with_zero_slots():
    ids = batch_to_ids([["a", "bc"], ["d"], []])
    assert ids.shape == (3, 2, 50) and ids.dtype == torch.long
    assert ids[1, 1].eq(0).all() and ids[2].eq(0).all()
    assert tuple(ids[0, 1].tolist()) == word_to_char_ids("bc")


def test_boundaries_are_added_per_row_length():
    ids, lengths = add_sentence_boundaries(batch_to_ids([["a", "b"], ["c"], []]))
    assert lengths.tolist() == [4, 3, 2]
    assert torch.equal(ids[:, 0], BOS_IDS.expand(3, -1))
    assert torch.equal(ids[0, 3], EOS_IDS) and torch.equal(ids[1, 2], EOS_IDS) and torch.equal(ids[2, 1], EOS_IDS)
    assert ids[1, 3].eq(0).all() and ids[2, 2:].eq(0).all()


def test_char_bytes_are_the_char_ids_as_int16():
    """The batcher builds its table from ``word_to_char_bytes``: the same ids as ``word_to_char_ids``."""
    for word in ("bank", "은행", "<S>", "</S>", "x" * 70, ""):
        for width in (50, 10):
            table = torch.frombuffer(bytearray(word_to_char_bytes(word, width)), dtype=torch.int16)
            assert table.tolist() == list(word_to_char_ids(word, width))


def test_remembered_rows_share_their_ids():
    """word_to_char_ids remembers up to 200,000 words' rows: each row must reference shared ints, not hold a new int
    object for every id above 256 (the marks and each padding slot: ~1.7 KB a word instead of ~0.5 KB)."""
    word_to_char_ids.cache_clear()
    tracemalloc.start()
    try:
        rows = [word_to_char_ids(f"w{i}x") for i in range(20_000)]
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        word_to_char_ids.cache_clear()
    assert rows[0][:6] == (259, 120, 49, 121, 260, 261)  # <w, "w0x", w>, padding (ids shifted by one)
    assert used < 20_000 * 800, used  # shared ints: ~540 bytes a word; a new int per id: ~1,900
