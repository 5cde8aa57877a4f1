"""Streamed training text -> the bidirectional LM's batches (docs/training.md §2).

Each batch row is an endless stream of sentences, each written ``<S> w1 .. wn </S>``, cut into windows of
``unroll_steps`` tokens. The input is the stream, the target is the stream shifted by one; a sentence that does not
fit continues in the same row of the next batch, and the LSTM state of every row is carried from batch to batch
(truncated back-propagation through ``unroll_steps`` steps). ``</S>`` is never an input, so each sentence gives
n + 1 predictions. With 3 rows and unroll_steps = 5::

    row 0 stream:    <S> the cat sat . </S> <S> dogs bark </S> <S> a ...
    batch k    inputs   <S>  the  cat  sat  .
               targets  the  cat  sat  .    </S>
    batch k+1  inputs   <S>  dogs bark <S>  a        </S> is never an input: after "." comes the next <S>
               targets  dogs bark </S> a    ...

    rows 1 .. B-1 are independent streams of other sentences, batched side by side: (B, T) per batch.

The backward model reads every sentence reversed (``</S> wn .. w1 <S>``) from its own, separately shuffled
stream. A row that needs a sentence takes the next one of the shared stream (row 0 fills its window first, then row
1, ...), as bilm-tf's rows do: one pass over the text reads each sentence once. Every rank follows all R rows of the
global batch by their lengths, so a distributed run where rank r owns rows [r*B, (r+1)*B) reads a disjoint part of
the text and gives the same rows as one process with R rows. Text is read in chunks, shuffled within each chunk;
the sentences waiting for a row are at most one chunk, so memory does not grow with the corpus or the run.
"""

from __future__ import annotations

import glob
import os
import random
from array import array
from collections import deque
from itertools import chain
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import torch

from elmo.data.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS, word_to_char_bytes
from elmo.data.vocab import Vocabulary
from elmo.errors import ElmoError, InputTypeError
from elmo.io.text_lines import Utf8Lines, one_sentence
from elmo.text.tokenize import tokens_of


class CorpusError(ElmoError, ValueError):
    """Training text that cannot be read (names the file and line)."""


def expand_files(patterns: Sequence[str | Path]) -> list[Path]:
    """Files named directly or by glob patterns, in sorted order per pattern; an unmatched pattern is an error.
    A name that exists is taken literally (``corpus[1].txt`` is that file, not a pattern). Text is read more than
    once (passes, resumes), so a pipe, a device or a broken link is refused by name, never skipped; a pattern may
    match folders too (they are left out) but must match a file. One name given alone (``"a.txt"``, not
    ``["a.txt"]``) is refused: iterated, a string is its letters, read as the files "a", ".", "t" ..."""
    if isinstance(patterns, (str, bytes, os.PathLike)):
        raise InputTypeError(f"the text files are a list of names or patterns, got the single name {str(patterns)!r}:"
                             f" pass [{str(patterns)!r}]")
    files: list[Path] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_dir():
            raise CorpusError(f"{pattern}: is a folder; give its files, e.g. '{path / '*.txt'}' (quoted)")
        if os.path.lexists(path):
            files.append(_text_file(path))
            continue
        matched = [Path(m) for m in sorted(glob.glob(str(pattern), recursive=True))]
        if not matched:
            raise CorpusError(f"{pattern}: no such file (or the pattern matches nothing)")
        found = [_text_file(m) for m in matched if not m.is_dir()]
        if not found:
            raise CorpusError(f"{pattern}: matches only folders; give a pattern of files, e.g. "
                              f"'{Path(pattern) / '*.txt'}' (quoted)")
        files += found
    seen: dict[tuple[int, int], Path] = {}
    for path in files:  # a file named twice (also as a link, ./x or by a glob) would count twice
        info = path.stat()
        if (twin := seen.setdefault((info.st_dev, info.st_ino), path)) is not path:
            same = "" if str(twin) == str(path) else f" (the same file as {twin})"
            raise CorpusError(f"{path}: named twice{same}: its text would count twice; name it once")
    return files


def _text_file(path: Path) -> Path:
    """``path`` if it is a regular file (or a link to one), else a ``CorpusError`` that says what it is."""
    if path.is_file():
        return path
    if path.is_symlink() and not path.exists():
        raise CorpusError(f"{path}: a symbolic link to nothing; give the path of the text file")
    raise CorpusError(f"{path}: not a regular file (a pipe or a device); text is read more than once: save it to a "
                      f"file, or give it on standard input as -")


CHUNK_TOKENS = 2_000_000  # a chunk of sentences ends once it holds this many tokens (memory, checkpoint size)


def open_text(path: Path) -> Utf8Lines:
    """A text file, plain or gzip, as UTF-8 lines split on '\\n' only; errors name their line."""
    return Utf8Lines(path)


class SentenceSource:
    """Tokenised sentences from files, in shuffled chunks; endless (``loop``) or one pass; resumable.

    With ``shuffle``, each epoch reads the files in its own random order (bilm-tf picks its shards at random, each
    direction independently: give the two directions different seeds) and shuffles each chunk of ``chunk_size``
    sentences (bilm-tf shuffles whole shards; chunks keep memory bounded, so split an ordered corpus into files or
    shuffle it once beforehand). Its position is (epoch, file index in the epoch's order, line within the file,
    chunks read): enough to re-open the files and skip to the same place. The file order is seeded by (seed,
    epoch) and each chunk's shuffle by (seed, chunks read), so no RNG state needs saving.
    """

    def __init__(self, files: Sequence[Path], tokenizer: Callable[[str], list[str]] = str.split, seed: int = 0,
                 chunk_size: int = 20_000, shuffle: bool = True, loop: bool = True,
                 limit: int | None = None, chunk_tokens: int = CHUNK_TOKENS, max_tokens: int | None = None) -> None:
        """``max_tokens``: a line of more tokens is refused, naming it (readers that hold a sentence whole, as
        ``zero_state_perplexity``; training streams a long line like any other text)."""
        if not files:
            raise CorpusError("no training files")
        self.files, self.tokenizer, self.seed = list(files), tokenizer, seed
        self.chunk_size, self.shuffle, self.loop = chunk_size, shuffle, loop
        self.chunk_tokens, self.max_tokens = chunk_tokens, max_tokens
        self.limit = limit  # one pass only: stop after this many sentences
        self.served = 0
        self.epoch = self.file_index = self.line = self.chunks = 0
        self._handle = None
        self._handle_pos: tuple[int, int] | None = None  # (file index, line) the open handle is at
        self._shuffle_files = shuffle  # False for positions saved before file orders were shuffled

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "file_index": self.file_index, "line": self.line, "chunks": self.chunks,
                "served": self.served, "file_order": "shuffled" if self._shuffle_files else "given"}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.file_index, self.line, self.chunks, self.served = (
            state[k] for k in ("epoch", "file_index", "line", "chunks", "served"))
        self._shuffle_files = self.shuffle and state.get("file_order", "given") == "shuffled"
        self._close()

    def file_order(self, epoch: int) -> list[Path]:
        """The files in the order epoch ``epoch`` reads them."""
        if not self._shuffle_files or len(self.files) < 2:
            return list(self.files)
        return random.Random(f"{self.seed}:files:{epoch}").sample(self.files, len(self.files))

    def next_chunk(self) -> list[list[str]] | None:
        """Up to ``chunk_size`` non-empty sentences, or None at the end of a single pass. A chunk ends at the end of
        a pass over the files (a short corpus is not repeated inside one chunk) and once it holds ``chunk_tokens``
        tokens (long lines do not make it huge): it is what memory and a checkpoint's queue hold."""
        sentences: list[list[str]] = []
        passes_without_text = 0
        wanted = self.chunk_size
        if self.limit is not None and not self.loop:
            wanted = min(wanted, self.limit - self.served)
        tokens_read = 0
        while len(sentences) < wanted and tokens_read < self.chunk_tokens:
            if self.file_index >= len(self.files):
                if not self.loop or sentences:
                    break
                if not sentences and passes_without_text:
                    raise CorpusError(f"{self.files[0]}: the training files hold no non-empty line")
                passes_without_text += 1
                self.epoch, self.file_index, self.line = self.epoch + 1, 0, 0
                self._close()
                continue
            handle = self._open()
            path = self.file_order(self.epoch)[self.file_index]
            for raw in handle:
                self.line += 1
                text = one_sentence(path, self.line, raw)  # old Mac line ends would merge sentences: refused
                try:
                    tokens = tokens_of(self.tokenizer, text)  # a list of strings: a string's letters are no tokens
                except Exception as err:  # a tokenizer plug-in failing on one line should say where
                    raise CorpusError(f"{path}, line {self.line}: tokenizer failed ({err})") from None
                bad = None if " ".join(tokens).split() == tokens else next(  # one split: fast on every line
                    k for k, token in enumerate(tokens) if token.split() != [token])
                if bad is not None:  # "" is also the batcher's empty slot; a spaced word no vocabulary can hold
                    raise CorpusError(f"{path}, line {self.line}: the tokenizer gave token {bad + 1} as "
                                      f"{tokens[bad]!r}, empty or with whitespace in it; a tokenizer must return "
                                      f"words without spaces (str.split() drops empty ones)")
                if self.max_tokens is not None and len(tokens) > self.max_tokens:
                    raise CorpusError(f"{path}, line {self.line}: {len(tokens):,} tokens, above the limit of "
                                      f"{self.max_tokens:,} per sentence; split it into sentences, one per line")
                if tokens:
                    sentences.append(tokens)
                    tokens_read += len(tokens)
                    if len(sentences) >= wanted or tokens_read >= self.chunk_tokens:
                        break
            else:
                self.file_index, self.line = self.file_index + 1, 0
                self._close()
                continue
            self._handle_pos = (self.file_index, self.line)
        if not sentences:
            return None
        self.served += len(sentences)
        if self.shuffle:
            random.Random(f"{self.seed}:{self.chunks}").shuffle(sentences)
        self.chunks += 1
        return sentences

    def _open(self):
        if self._handle is None or self._handle_pos != (self.file_index, self.line):
            self._close()
            path = self.file_order(self.epoch)[self.file_index]
            try:
                self._handle = open_text(path)
                for _ in range(self.line):  # resume: skip what was read before
                    next(self._handle)
            except (OSError, StopIteration) as err:
                raise CorpusError(f"{path}: cannot read at line {self.line + 1} ({err})") from None
            self._handle_pos = (self.file_index, self.line)
        return _lines_of(self._handle)

    def close(self) -> None:
        self._close()

    def __del__(self) -> None:
        self._close()

    def _close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._handle.close()
        self._handle, self._handle_pos = None, None


def _lines_of(handle: Utf8Lines) -> Iterator[str]:
    for line in handle:  # not `yield from`: closing this generator must not close the shared handle
        yield line


@dataclass
class LMBatch:
    char_ids: torch.Tensor  # (B, T, W) inputs
    targets: torch.Tensor  # (B, T) next-token ids, -1 where a row has no more text (one-pass sources only)
    tokens: int  # real targets in the batch
    starts: torch.Tensor  # (B,) bool: the row's window begins with a sentence's first token


class LMBatcher:
    """Rows ``rows[0] <= r < rows[1]`` of a global batch of ``n_rows`` streams, ``unroll_steps`` tokens each.

    Rows take sentences as bilm-tf's do: one shared sequence, each row taking the next sentence when it needs one
    (row 0 fills its window, then row 1, ...), so the sentences waiting stay under one chunk however long the run,
    and one pass over the text reads each sentence once. Every process follows all ``n_rows`` rows by their
    lengths alone and keeps the words of its own, so the ranks' rows together are the global batch.
    """

    def __init__(self, source: SentenceSource, vocab: Vocabulary, n_rows: int, unroll_steps: int,
                 rows: tuple[int, int] | None = None, reverse: bool = False, width: int = MAX_CHARS) -> None:
        self.source, self.vocab, self.n_rows, self.steps = source, vocab, n_rows, unroll_steps
        self.rows = rows or (0, n_rows)
        self.reverse, self.width = reverse, width
        self.pending: deque[list[str]] = deque()  # sentences read and not yet taken by any row, in order
        # this process's rows: what is left of each one's sentence, boundaries included
        self.current: list[list[str]] = [[] for _ in range(self.rows[1] - self.rows[0])]
        self.left = [0] * n_rows  # every row: how many words of its sentence are left
        self.exhausted = False

    def state_dict(self) -> dict:
        return {"source": self.source.state_dict(), "pending": [list(s) for s in self.pending],
                "current": [list(c) for c in self.current], "left": list(self.left), "exhausted": self.exhausted}

    def load_state_dict(self, state: dict) -> None:
        if len(state["current"]) != len(self.current):
            raise ValueError(f"batcher state holds {len(state['current'])} rows, this batcher has {len(self.current)}")
        self.source.load_state_dict(state["source"])
        self.current = [list(c) for c in state["current"]]
        self.exhausted = state["exhausted"]
        if "queues" in state:  # per-row queues (sentences dealt to rows in turn): taken in their dealt order
            if self.rows != (0, self.n_rows):
                raise ValueError("per-row queues of one process's rows cannot be shared out among processes")
            queues = state["queues"]  # interleaved by place in each queue, as they were dealt
            self.pending = deque(list(q[k]) for k in range(max(map(len, queues), default=0))
                                 for q in queues if k < len(q))
            self.left = [len(c) for c in self.current]
        else:
            if len(state["left"]) != self.n_rows:
                raise ValueError(f"batcher state follows {len(state['left'])} rows, this batch has {self.n_rows}")
            self.pending = deque(list(s) for s in state["pending"])
            self.left = [int(n) for n in state["left"]]
            for row, words in enumerate(self.current):  # this process's rows: the count follows the words kept
                if not all(isinstance(w, str) for w in words):
                    raise ValueError(f"batcher row {self.rows[0] + row}: its sentence holds something other than words")
                if self.left[self.rows[0] + row] != len(words):
                    raise ValueError(f"batcher row {self.rows[0] + row}: left is {self.left[self.rows[0] + row]}, "
                                     f"but its sentence has {len(words)} words left")

    def _next_sentence(self) -> list[str] | None:
        """The next sentence of the shared sequence, without boundaries; None when a one-pass source is done."""
        while not self.pending:
            chunk = None if self.exhausted else self.source.next_chunk()
            if chunk is None:
                self.exhausted = True
                return None
            self.pending = deque(chunk)
        return self.pending.popleft()

    def _stream(self, sentence: list[str]) -> list[str]:
        """A sentence as its row reads it: with its boundaries, reversed for the backward stream."""
        words = [BOS_TOKEN, *sentence, EOS_TOKEN]
        return words[::-1] if self.reverse else words

    def next_batch(self) -> LMBatch | None:
        """The next window of every row; None when a one-pass source has nothing left for any row."""
        lo, hi = self.rows
        batch = hi - lo
        inputs = [[""] * self.steps for _ in range(batch)]
        targets = [[-1] * self.steps for _ in range(batch)]  # one tensor at the end: per-row tensors cost more
        real = 0
        starts = [self.left[lo + row] <= 1 for row in range(batch)]
        for global_row in range(self.n_rows):  # every row, in order: each takes the next sentence when it needs one
            mine, row, pos = lo <= global_row < hi, global_row - lo, 0
            while pos < self.steps:
                if self.left[global_row] <= 1:  # only the final boundary left: it is never an input
                    sentence = self._next_sentence()
                    if sentence is None:
                        if pos == 0 and mine:  # a one-pass source ran out: no text in this row
                            starts[row] = False
                        break
                    self.left[global_row] = len(sentence) + 2  # with <S> and </S>
                    if mine:  # another process's row needs only the length
                        self.current[row] = self._stream(sentence)
                take = min(self.left[global_row] - 1, self.steps - pos)
                if mine:
                    stream = self.current[row]
                    inputs[row][pos : pos + take] = stream[:take]
                    targets[row][pos : pos + take] = self.vocab.ids(stream[1 : take + 1])
                    self.current[row] = stream[take:]
                self.left[global_row] -= take
                pos += take
            real += pos if mine else 0
        if real == 0:
            return None
        # each distinct word converted once (running text repeats itself; building a tensor from nested Python
        # lists costs per element, so this is what keeps the batcher ahead of a GPU)
        distinct: dict[str, int] = {}
        index = _int64_tensor(distinct.setdefault(w, len(distinct)) for row in inputs for w in row)  # (B*T,)
        empty = bytes(2 * self.width)  # a padding slot (ids 0), only where a one-pass source ran out
        flat = bytearray(b"".join(word_to_char_bytes(w, self.width) if w else empty for w in distinct))  # int16 ids
        table = torch.frombuffer(flat, dtype=torch.int16).view(len(distinct), self.width).long()  # (U, W)
        ids = table[index].view(batch, self.steps, self.width)  # (B, T, W)
        target_ids = _int64_tensor(chain.from_iterable(targets)).view(batch, self.steps)  # (B, T)
        return LMBatch(ids, target_ids, real, torch.tensor(starts))  # (B, T, W), (B, T), (B,)


def _int64_tensor(values: Iterable[int]) -> torch.Tensor:
    """Python ints as a 1-d int64 tensor through an ``array`` (3.5x ``torch.tensor`` of a list of 640); not empty."""
    return torch.frombuffer(array("q", values), dtype=torch.int64)
