"""The LM batcher: streams, targets, reversal, row dealing across ranks, resumable position."""

import gzip
import os

import pytest

from elmo.data.chars import word_to_char_ids
from elmo.data.corpus import CorpusError, LMBatcher, SentenceSource, expand_files
from elmo.data.vocab import Vocabulary

SENTENCES = ["a b c", "d e", "f g h i", "j", "k l m"]


def _setup(tmp_path, rows=1, steps=4, reverse=False, subset=None, shuffle=False, lines=SENTENCES):
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = Vocabulary.build([s.split() for s in lines])
    source = SentenceSource([tmp_path / "t.txt"], shuffle=shuffle, chunk_size=2)
    return LMBatcher(source, vocab, rows, steps, subset, reverse=reverse), vocab


def _words(batch, vocab):
    inputs = [[next(w for w in vocab.words + ["a", "b"] if word_to_char_ids(w) == tuple(ids.tolist()))
               for ids in row] for row in batch.char_ids]
    targets = [[vocab.words[t] for t in row] for row in batch.targets.tolist()]
    return inputs, targets


def test_one_row_stream_targets_are_the_next_token(tmp_path):
    batcher, vocab = _setup(tmp_path)
    first, second = batcher.next_batch(), batcher.next_batch()
    assert _words(first, vocab) == ([["<S>", "a", "b", "c"]], [["a", "b", "c", "</S>"]])
    # </S> is never an input: the next sentence starts with <S>
    assert _words(second, vocab) == ([["<S>", "d", "e", "<S>"]], [["d", "e", "</S>", "f"]])
    assert first.tokens == 4


def test_each_batch_marks_the_rows_whose_window_begins_a_sentence(tmp_path):
    """The trainer starts some of those rows from the zero state, as inference starts every sentence."""
    for reverse, first_input in ((False, "<S>"), (True, "</S>")):
        batcher, vocab = _setup(tmp_path, reverse=reverse)
        batches = [batcher.next_batch() for _ in range(4)]
        # windows: <S> a b c | <S> d e <S> | f g h i | <S> j <S> k (reversed: </S> c b a | ...)
        assert [bool(b.starts[0]) for b in batches] == [True, True, False, True]
        assert all(_words(b, vocab)[0][0][0] == first_input for b in batches if b.starts[0])
    (tmp_path / "t.txt").write_text("a b c d e f\n", encoding="utf-8")  # a one-pass row that runs dry
    batcher = LMBatcher(SentenceSource([tmp_path / "t.txt"], shuffle=False, loop=False), vocab, 2, 4)
    assert batcher.next_batch().starts.tolist() == [True, False]  # row 1 has no text at all
    assert batcher.next_batch().starts.tolist() == [False, False]


def test_backward_stream_reads_sentences_reversed(tmp_path):
    batcher, vocab = _setup(tmp_path, reverse=True)
    assert _words(batcher.next_batch(), vocab) == ([["</S>", "c", "b", "a"]], [["c", "b", "a", "<S>"]])


def test_rows_of_a_rank_equal_the_same_rows_of_the_global_batch(tmp_path):
    lines = [f"w{i} x{i} y{i}" for i in range(40)]
    full, _ = _setup(tmp_path, rows=4, steps=5, lines=lines, shuffle=True)
    halves = [_setup(tmp_path, rows=4, steps=5, subset=s, lines=lines, shuffle=True)[0] for s in ((0, 2), (2, 4))]
    for _ in range(6):
        whole = full.next_batch()
        parts = [h.next_batch() for h in halves]
        assert (whole.char_ids[:2] == parts[0].char_ids).all() and (whole.char_ids[2:] == parts[1].char_ids).all()
        assert (whole.targets[2:] == parts[1].targets).all()


def test_state_dict_resumes_the_same_stream(tmp_path):
    lines = [f"w{i} x{i}" for i in range(30)]
    a, _ = _setup(tmp_path, rows=3, steps=4, lines=lines, shuffle=True)
    for _ in range(3):
        a.next_batch()
    state = a.state_dict()
    expected = [a.next_batch() for _ in range(8)]
    b, _ = _setup(tmp_path, rows=3, steps=4, lines=lines, shuffle=True)
    b.load_state_dict(state)
    for want in expected:
        got = b.next_batch()
        assert (got.char_ids == want.char_ids).all() and (got.targets == want.targets).all()


def test_one_pass_source_ends_and_pads(tmp_path):
    (tmp_path / "t.txt").write_text("a b\n\nc\n", encoding="utf-8")
    vocab = Vocabulary.build([["a", "b", "c"]])
    batcher = LMBatcher(SentenceSource([tmp_path / "t.txt"], shuffle=False, loop=False), vocab, 2, 4)
    # row 0 takes "a b" (3 predictions) and the start of "c" (2): rows take the next sentence when they need one,
    # so row 1 finds none left; the blank line is skipped
    first, second = batcher.next_batch(), batcher.next_batch()
    assert first.tokens == 4 and first.targets[1].eq(-1).all() and first.char_ids[1].eq(0).all()
    assert second.tokens == 1 and second.targets[0].tolist()[1] == -1 and second.char_ids[0, 1].eq(0).all()
    assert batcher.next_batch() is None


def test_gzip_and_globs(tmp_path):
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write("x y\n")
    (tmp_path / "b.txt").write_text("z\n", encoding="utf-8")
    files = expand_files([str(tmp_path / "*.txt*")])
    source = SentenceSource(files, shuffle=False, loop=False)
    assert source.next_chunk() == [["x", "y"], ["z"]]


def test_a_file_name_with_glob_characters_is_taken_literally(tmp_path):
    (tmp_path / "corpus[1].txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "corpus1.txt").write_text("x y\n", encoding="utf-8")  # what the name matches as a pattern
    assert expand_files([str(tmp_path / "corpus[1].txt")]) == [tmp_path / "corpus[1].txt"]
    assert expand_files([str(tmp_path / "corpus[0-9].txt")]) == [tmp_path / "corpus1.txt"]


def test_each_epoch_reads_the_files_in_its_own_order_and_resumes_there(tmp_path):
    """As bilm-tf picks shards at random per epoch and per direction: every file once per epoch, orders differing
    between epochs and between seeds (the two directions), and a saved position resumes inside the same order."""
    files = []
    for name in "ABCDEF":
        files.append(tmp_path / f"{name}.txt")
        files[-1].write_text("\n".join(f"{name}{i} w" for i in range(4)) + "\n", encoding="utf-8")

    def files_read(source, n_chunks):  # chunk_size 4 = one whole file per chunk
        return [source.next_chunk()[0][0][0] for _ in range(n_chunks)]

    forward = SentenceSource(files, seed=0, chunk_size=4)
    epochs = files_read(forward, 18)
    assert all(sorted(epochs[k : k + 6]) == list("ABCDEF") for k in (0, 6, 12))
    assert len({"".join(epochs[k : k + 6]) for k in (0, 6, 12)}) == 3
    assert files_read(SentenceSource(files, seed=7919, chunk_size=4), 6) != epochs[:6]
    assert files_read(SentenceSource(files, shuffle=False, chunk_size=4), 6) == list("ABCDEF")
    again = SentenceSource(files, seed=0, chunk_size=4)
    files_read(again, 8)
    resumed = SentenceSource(files, seed=0, chunk_size=4)
    resumed.load_state_dict(again.state_dict())
    assert files_read(resumed, 10) == epochs[8:18]
    legacy = SentenceSource(files, seed=0, chunk_size=4)  # a position saved before orders were shuffled
    old_position = {k: v for k, v in again.state_dict().items() if k != "file_order"}
    legacy.load_state_dict(old_position | {"epoch": 1, "file_index": 2, "line": 0})
    assert files_read(legacy, 4) == list("CDEF")


def test_a_chunk_ends_with_the_pass_and_at_its_token_budget(tmp_path):
    """A short corpus is not repeated inside one chunk (a one-line file of 1,000 tokens once filled a chunk of
    20,000 copies: gigabytes, and a checkpoint queue of hundreds of MB), and long lines end a chunk early; the
    sentences keep coming, pass after pass."""
    (tmp_path / "one.txt").write_text(" ".join(f"w{i}" for i in range(1_000)) + "\n")
    source = SentenceSource([tmp_path / "one.txt"], shuffle=False)
    assert [len(source.next_chunk()) for _ in range(3)] == [1, 1, 1]
    (tmp_path / "long.txt").write_text("".join(" ".join(["x"] * 300) + "\n" for _ in range(10)))
    source = SentenceSource([tmp_path / "long.txt"], shuffle=False, chunk_tokens=1_000)
    assert [len(source.next_chunk()) for _ in range(4)] == [4, 4, 2, 4]  # 4 x 300 tokens reach 1,000; the pass ends


def test_named_text_that_is_not_a_file_is_refused_by_name(tmp_path):
    """A broken link, a pipe or a pattern matching only folders was skipped in silence (a perplexity without the
    text named, exit 0); now each is an error naming it. Folders a pattern also matches are left out."""
    (tmp_path / "a.txt").write_text("a b\n")
    (tmp_path / "broken.txt").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    with pytest.raises(CorpusError, match="broken.txt: a symbolic link to nothing"):
        expand_files([tmp_path / "a.txt", tmp_path / "broken.txt"])
    with pytest.raises(CorpusError, match="pipe: not a regular file"):
        expand_files([tmp_path / "pipe"])
    with pytest.raises(CorpusError, match="su\\*: matches only folders"):
        expand_files([str(tmp_path / "su*")])
    (tmp_path / "broken.txt").unlink()
    (tmp_path / "pipe").unlink()
    assert expand_files([str(tmp_path / "*")]) == [tmp_path / "a.txt"]


def _held(state: dict) -> int:
    """Sentences read and waiting for a row, in either state format."""
    return len(state.get("pending", [])) + sum(len(q) for q in state.get("queues", []))


def test_sentences_waiting_stay_under_one_chunk_and_a_pass_reads_each_once(tmp_path):
    """Dealt to rows in turn, sentences piled up behind rows that drew long ones (397 waiting after one pass of 3,000
    with chunks of 200; growing with the run, in memory and in every checkpoint), and one pass's batches read some
    sentences twice and others never. Rows take the next sentence when they need one, as bilm-tf's do."""
    import random

    rng = random.Random(0)
    lines = [" ".join(f"s{i}w{j}" for j in range(rng.choice([1, 2, 3, 40]))) for i in range(3000)]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = Vocabulary.build([["x"]])
    source = SentenceSource([tmp_path / "t.txt"], seed=1, chunk_size=200)
    batcher = LMBatcher(source, vocab, 16, 20)
    taken = []
    original = batcher._next_sentence
    batcher._next_sentence = lambda *row: (lambda s: taken.append(s) or s)(original(*row))
    per_pass = sum(len(line.split()) + 1 for line in lines)  # predictions in one pass
    done = 0
    while done < per_pass:
        done += batcher.next_batch().tokens
        assert _held(batcher.state_dict()) <= 200
    assert len({words[0].split("w")[0] for words in taken[: len(lines)]}) == len(lines)  # the first pass: each once


def test_a_state_with_per_row_queues_resumes_with_every_queued_sentence(tmp_path):
    batcher, vocab = _setup(tmp_path, rows=2, steps=3)
    state = batcher.state_dict()
    state.pop("pending"), state.pop("left")
    state.update(queues=[[["a", "b"], ["j"]], [["d", "e"]]], counter=3)
    batcher.load_state_dict(state)
    assert _words(batcher.next_batch(), vocab)[0] == [["<S>", "a", "b"], ["<S>", "d", "e"]]
    assert _words(batcher.next_batch(), vocab)[0][0] == ["<S>", "j", "<S>"]
    two_ranks = LMBatcher(batcher.source, vocab, 2, 3, rows=(0, 1))
    with pytest.raises(ValueError, match="cannot be shared out"):
        two_ranks.load_state_dict({**state, "current": [[]]})


def test_per_row_queues_of_several_processes_are_refused_in_one_line(tmp_path):
    from elmo.io.native import ModelFileError
    from elmo.training.checkpoint_fields import check_trainer_record

    batcher, _ = _setup(tmp_path, rows=2)
    queued = {**{k: v for k, v in batcher.state_dict().items() if k not in ("pending", "left")},
              "queues": [[], []], "counter": 0}
    record = {"step": 1, "tokens_seen": 8, "elapsed": 1.0, "world": 2, "data": [[queued, queued]] * 2}
    with pytest.raises(ModelFileError, match="per-row queues, which the processes of a resumed run cannot share"):
        check_trainer_record(record, tmp_path / "trainer.json")
    check_trainer_record({**record, "world": 1, "data": [[queued, queued]]}, tmp_path / "trainer.json")


@pytest.mark.parametrize("tokenizer, shown", [(lambda s: s.split(" "), "''"), (lambda s: [s], "'w1  w2 w3'")])
def test_a_token_that_is_empty_or_spaced_is_refused_naming_the_line(tmp_path, tokenizer, shown):
    """An empty token from a custom tokenizer (``s.split(" ")`` on two spaces) became the batcher's all-zero
    padding slot, with a real target; a token with spaces fits no vocabulary."""
    (tmp_path / "t.txt").write_text("a\nw1  w2 w3\n", encoding="utf-8")
    source = SentenceSource([tmp_path / "t.txt"], tokenizer, shuffle=False, loop=False)
    with pytest.raises(CorpusError, match=rf"t.txt, line 2: the tokenizer gave token \d as {shown}, empty or with"):
        source.next_chunk()
