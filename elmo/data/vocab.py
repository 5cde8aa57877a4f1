"""bilm-tf vocabulary files: ``<S>``, ``</S>``, ``<UNK>`` first, then words by descending frequency, one per line.

The frequency order matters: the log-uniform negative sampler assumes low ids are frequent words.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from elmo.data.chars import BOS_TOKEN, EOS_TOKEN
from elmo.io.atomic import atomic_path

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
# a share of <UNK> tokens above this in a text suggests another tokenizer or language than the vocabulary's
UNKNOWN_SHARE_WARNING = 0.10


class VocabError(ValueError):
    """A vocabulary file that cannot be used (names the file and line)."""


class Vocabulary:
    """Word <-> id, with out-of-vocabulary words mapped to ``<UNK>``."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        for special in SPECIALS:
            if special not in self.index:
                raise VocabError(f"vocabulary lacks {special}: a bilm-tf vocabulary starts with <S>, </S>, <UNK>")
        self.bos, self.eos, self.unk = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.words)

    def id(self, word: str) -> int:
        return self.index.get(word, self.unk)

    def ids(self, words: Iterable[str]) -> list[int]:
        return [self.index.get(w, self.unk) for w in words]

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        """Read one word per line; a repeated word is an error naming both lines."""
        path = Path(path)
        if path.is_dir():
            raise VocabError(f"{path}: is a folder; give the vocabulary file (e.g. {path / 'vocab.txt'})")
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as err:
            raise VocabError(f"{path}: not UTF-8 (byte {err.start})") from None
        words, seen = [], {}
        for number, line in enumerate(text.split("\n"), start=1):
            word = line.strip()
            if not word:
                continue
            if word in seen:
                raise VocabError(f"{path}, line {number}: {word!r} repeats line {seen[word]}; "
                                 f"every word must appear once")
            seen[word] = number
            words.append(word)
        if not words:
            raise VocabError(f"{path}: empty vocabulary")
        return cls(words)

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            tmp.write_text("\n".join(self.words) + "\n", encoding="utf-8")

    @classmethod
    def build(cls, sentences: Iterable[list[str]], min_count: int = 1, max_size: int | None = None) -> "Vocabulary":
        """From token lists: specials, then words seen at least ``min_count`` times, most frequent first
        (ties by first appearance), at most ``max_size`` words in all."""
        counts: Counter[str] = Counter()
        for tokens in sentences:
            counts.update(tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = [w for w, c in counts.most_common() if c >= min_count]
        if max_size is not None:
            if max_size <= len(SPECIALS):
                raise ValueError(f"max size {max_size} leaves no room for words beside the {len(SPECIALS)} special "
                                 f"tokens {', '.join(SPECIALS)}: give at least {len(SPECIALS) + 1}")
            ranked = ranked[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *ranked])
