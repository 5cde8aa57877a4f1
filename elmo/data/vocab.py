"""bilm-tf vocabulary files: ``<S>``, ``</S>``, ``<UNK>`` first, then words by descending frequency, one per line.

The frequency order matters: the log-uniform negative sampler assumes low ids are frequent words.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path
from typing import Iterable

from elmo.data.chars import BOS_TOKEN, EOS_TOKEN
from elmo.errors import ElmoError, InputTypeError, UsageError
from elmo.io.atomic import atomic_path
from elmo.io.text_lines import TextLineError, numbered_lines
from elmo.limits import is_whole

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
# a share of <UNK> tokens above this in a text suggests another tokenizer or language than the vocabulary's
UNKNOWN_SHARE_WARNING = 0.10


class VocabError(ElmoError, ValueError):
    """A vocabulary file that cannot be used (names the file and line)."""


def read_words(path: str | Path, rows: bool = True) -> list[str]:
    """One word per line (plain or gzip; blank lines after the last word ignored); a repeated word or a line that
    is not UTF-8 is an error naming the line. ``rows``: line i is word i (its softmax row, or its row of
    ``dump_token_embeddings``), so a blank line before a word is an error too: skipping it would give every later
    word the row of the line before it; without (a set of words, ``--cache-vocab``) blank lines are skipped. Spaces
    around a word are not part of it (as bilm-tf reads vocabularies)."""
    path = Path(path)
    if path.is_dir():
        example = "" if path.name == "vocab.txt" else f" (e.g. {path / 'vocab.txt'})"
        raise VocabError(f"{path}: is a folder, where a vocabulary file (one word per line) is expected; give the "
                         f"file{example}")
    words, seen, blank = [], {}, None  # blank: the first blank line since the last word
    try:
        for number, line in numbered_lines(path):
            word = line.strip()
            if not word:
                blank = blank or number
                continue
            if blank is not None and rows:
                raise VocabError(f"{path}, line {blank}: blank, before the word of line {number}; line i is word i "
                                 f"(its row), so a blank line would shift every word after it: remove the line")
            if "\r" in word:
                raise VocabError(f"{path}, line {number}: a carriage return inside the line (old Mac line endings?); "
                                 f"save the file with one word per line and \\n line endings")
            if len(word.split()) > 1:  # text is split at whitespace: such a word would never be found
                raise VocabError(f"{path}, line {number}: {word[:40]!r} holds a space or tab; a vocabulary has one "
                                 f"word per line and nothing else (counts beside the words come from a word list: "
                                 f"`elmo vocab build` writes a vocabulary)")
            if word in seen:
                raise VocabError(f"{path}, line {number}: {word!r} repeats line {seen[word]}; every word must "
                                 f"appear once")
            seen[word] = number
            words.append(word)
    except TextLineError as err:  # not UTF-8, damaged gzip: the message names the line
        raise VocabError(str(err)) from None
    if not words:
        raise VocabError(f"{path}: empty vocabulary")
    return words


def _refuse_bad_word(words: list, source: str | Path | None) -> None:
    """The error for the first word a vocabulary cannot hold: not a string; empty or holding whitespace (text is split
    at whitespace, so it is never met, and the saved file would not load again); or given twice (the second id would
    take every prediction of the word, and the first one's softmax row would never be trained or scored)."""
    where = f"{source}: " if source is not None else ""
    first: dict[str, int] = {}
    for number, word in enumerate(words):
        if not isinstance(word, str):
            raise InputTypeError(f"{where}vocabulary word {number} is {type(word).__name__}, not a string")
        if word.split() != [word]:
            raise VocabError(f"{where}vocabulary word {number} ({word!r}) is empty or holds whitespace; a word is one "
                             f"token of whitespace-split text")
        if (earlier := first.setdefault(word, number)) != number:
            raise VocabError(f"{where}{word!r} is vocabulary word {earlier} and again word {number}; every word must "
                             f"appear once")


class Vocabulary:
    """Word <-> id, with out-of-vocabulary words mapped to ``<UNK>``."""

    def __init__(self, words: Iterable[str], source: str | Path | None = None) -> None:
        """``source``: the file the words came from, named in errors."""
        if isinstance(words, (str, bytes)):  # its letters would be the words
            raise InputTypeError("Vocabulary takes a list of words, e.g. ['<S>', '</S>', '<UNK>', 'the'], not one "
                                 "string (Vocabulary.load reads a file)")
        self.words = list(words)
        self.source = source
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words) or not all(isinstance(w, str) and w.split() == [w] for w in self.words):
            _refuse_bad_word(self.words, source)
        for special in SPECIALS:
            if special not in self.index:
                where = f"{source}: " if source is not None else ""
                raise VocabError(f"{where}the vocabulary lacks {special}: a bilm-tf vocabulary starts with <S>, </S>, "
                                 f"<UNK>")
        self.bos, self.eos, self.unk = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.words)

    def id(self, word: str) -> int:
        return self.index.get(word, self.unk)

    def ids(self, words: Iterable[str]) -> list[int]:
        return [self.index.get(w, self.unk) for w in words]

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        """A bilm-tf vocabulary file (``read_words``; it must hold ``<S>``, ``</S>`` and ``<UNK>``)."""
        return cls(read_words(path), source=path)

    def save(self, path: str | Path) -> None:
        """One word per line; gzip-compressed when the name ends in .gz, as every reader here reads such a name."""
        data = ("\n".join(self.words) + "\n").encode("utf-8")
        with atomic_path(path) as tmp:
            tmp.write_bytes(gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)

    @classmethod
    def build(cls, sentences: Iterable[list[str]], min_count: int = 1, max_size: int | None = None) -> "Vocabulary":
        """From token lists: specials, then words seen at least ``min_count`` times, most frequent first
        (ties by first appearance), at most ``max_size`` words in all."""
        if isinstance(sentences, (str, bytes)):
            raise InputTypeError("Vocabulary.build takes token lists, e.g. [['the', 'cat'], ['a', 'dog']], not one "
                                 "string")
        for name, value in (("min_count", min_count), ("max_size", max_size)):
            if not is_whole(value, 1) and not (name == "max_size" and value is None):
                raise UsageError(f"Vocabulary.build: {name} must be a whole number of at least 1, got {value!r}")
        counts: Counter[str] = Counter()
        for row, tokens in enumerate(sentences):
            if isinstance(tokens, str):  # counted, it would be a vocabulary of letters
                raise InputTypeError(f"Vocabulary.build: sentence {row} is a string; pass its tokens, e.g. "
                                     f"{tokens.split()[:3]!r}")
            counts.update(tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = [w for w, c in counts.most_common() if c >= min_count]
        if max_size is not None:
            if max_size <= len(SPECIALS):
                raise UsageError(f"max size {max_size} leaves no room for words beside the {len(SPECIALS)} special "
                                 f"tokens {', '.join(SPECIALS)}: give at least {len(SPECIALS) + 1}")
            ranked = ranked[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *ranked])
