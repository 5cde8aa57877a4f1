"""Words to character ids, exactly as bilm-tf and AllenNLP (docs/format.md §3).

A token is its UTF-8 bytes framed by begin/end-of-word marks and padded to ``W`` = 50 slots. Every id is shifted
by one so that 0 can mean "no token here": a slot of fifty zeros is padding. The in-word padding character is a
real, learned embedding; only id 0 embeds to zeros.
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from typing import Sequence

import torch

from elmo.errors import InputTypeError, UsageError
from elmo.limits import MODEL_LIMITS, is_whole

# Raw ids (rows 0..260 of the official `char_embed` table). Bytes take 0..255.
BOS_CHAR = 256  # begin of sentence
EOS_CHAR = 257  # end of sentence
BOW_CHAR = 258  # begin of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # fills a word's remaining slots
N_RAW_CHARS = 261

MAX_CHARS = 50  # W: slots per token, marks included
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


# id c -> c + 1 as shared int objects: a row then holds references, not a new int for each id above 256 (the marks
# and every padding slot), which made a memo of 200,000 words' rows ~340 MB instead of ~90 MB
_SHIFTED = tuple(range(1, N_RAW_CHARS + 1))


def _special_row(char: int, width: int) -> tuple[int, ...]:
    return tuple(_SHIFTED[c] for c in (BOW_CHAR, char, EOW_CHAR) + (PAD_CHAR,) * (width - 3))


@lru_cache(maxsize=200_000)
def word_to_char_ids(word: str, width: int = MAX_CHARS) -> tuple[int, ...]:
    """The ``width`` shifted character ids (1..261) of one token.

    ``<S>`` and ``</S>`` get the sentence-boundary rows. A word holding what UTF-8 cannot encode (a lone surrogate,
    from bytes decoded with ``errors="surrogateescape"``) is refused: AllenNLP drops such characters, which would
    embed another word than the one given. Only the first ``width - 2`` bytes are kept, even if that cuts a
    multi-byte character.
    """
    if word == BOS_TOKEN:
        return _special_row(BOS_CHAR, width)
    if word == EOS_TOKEN:
        return _special_row(EOS_CHAR, width)
    try:
        data = word.encode("utf-8")[: width - 2]
    except UnicodeEncodeError as err:
        raise UsageError(f"the token {word[:60]!r} holds {word[err.start:err.end]!r}, a lone surrogate, not text "
                         f"UTF-8 can hold (bytes decoded with errors='surrogateescape', os.fsdecode or sys.argv?); "
                         f"decode the bytes as UTF-8 (errors='replace' marks bad ones with U+FFFD)") from None
    raw = (BOW_CHAR, *data, EOW_CHAR) + (PAD_CHAR,) * (width - 2 - len(data))
    return tuple(_SHIFTED[c] for c in raw)


@lru_cache(maxsize=200_000)
def word_to_char_bytes(word: str, width: int = MAX_CHARS) -> bytes:
    """``word_to_char_ids`` as ``width`` native int16 values in one bytes object: a batch's table of distinct words
    is then one ``b"".join`` instead of a Python-level copy of every id."""
    return array("h", word_to_char_ids(word, width)).tobytes()


BOS_IDS = torch.tensor(_special_row(BOS_CHAR, MAX_CHARS))  # (50,)
EOS_IDS = torch.tensor(_special_row(EOS_CHAR, MAX_CHARS))  # (50,)


def batch_to_ids(sentences: Sequence[Sequence[str]], width: int = MAX_CHARS) -> torch.LongTensor:
    """Character ids of a batch of tokenised sentences, left-aligned and zero-padded: (B, T, ``width``).

    ``T`` is the longest sentence's length (at least 1, so an all-empty batch still has a time axis). No sentence
    boundaries are added: the model adds ``<S>``/``</S>`` itself.
    """
    if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__iter__"):
        raise InputTypeError(f"batch_to_ids takes a list of token lists, e.g. [['Hello', 'world']], not "
                             f"{'a string' if isinstance(sentences, str) else type(sentences).__name__}")
    widest = MODEL_LIMITS["char_cnn.max_characters_per_token"]
    if not is_whole(width, 3, widest):
        raise UsageError(f"batch_to_ids: width is the model's characters per token, a whole number from 3 (the "
                         f"word's two marks and one byte) to {widest:,}, got {width!r}")
    refuse_unordered(sentences, "batch_to_ids takes a list of token lists; a set of sentences has no order, so the "
                                "rows would not match it")
    sentences = sentences if hasattr(sentences, "__len__") else list(sentences)  # a generator will do
    bad = next((row for row, s in enumerate(sentences) if s is None or not hasattr(s, "__len__")), None)
    if bad is not None:
        raise InputTypeError(f"sentence {bad} is {type(sentences[bad]).__name__}, not a list of tokens")
    for row, sentence in enumerate(sentences):
        refuse_unordered(sentence, f"sentence {row} is a set, whose tokens have no order")
    longest = max((len(s) for s in sentences), default=0)
    ids = torch.zeros(len(sentences), max(longest, 1), width, dtype=torch.long)  # (B, T, W)
    for row, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise InputTypeError(f"sentence {row} is a string; pass tokens, e.g. {sentence.split()[:3]!r}")
        if len(sentence):  # any sequence of strings (a list, a tuple, a numpy array)
            try:
                ids[row, : len(sentence)] = torch.tensor([word_to_char_ids(w, width) for w in sentence])
            except (AttributeError, TypeError):
                check_tokens(sentence, row)
                raise
    return ids


def refuse_unordered(value: object, why: str) -> None:
    """A set or frozenset, as a batch or a sentence, is refused: it is iterated in hash order, which changes from run
    to run, so tokens or rows would move."""
    if isinstance(value, (set, frozenset)):
        raise InputTypeError(f"{why}; pass a list")


def check_tokens(tokens: Sequence[object], row: int) -> None:
    """Refuse, naming sentence ``row`` and the position, a token that is not a string."""
    bad = next((position for position, token in enumerate(tokens) if not isinstance(token, str)), None)
    if bad is not None:
        raise InputTypeError(f"sentence {row}, token {bad}: {tokens[bad]!r} is not a string")


def check_id_dtype(dtype: torch.dtype, n_characters: int) -> None:
    """Refuse, in one line, an integer type too narrow for the model's ids (0 .. ``n_characters`` - 1): ids cast to
    uint8 or int8 have wrapped (the word marks 259 and 260 became 3 and 4), so they would embed other characters."""
    if torch.iinfo(dtype).max < n_characters - 1:
        raise UsageError(f"character ids of type {dtype} cannot hold this model's ids 0..{n_characters - 1} (the "
                         f"word marks are 259 to 261): ids cast to it have wrapped around; keep them in int16 or "
                         f"a wider type, as elmo.batch_to_ids makes them (int64)")


def check_char_ids(char_ids: torch.Tensor, n_characters: int, width: int) -> None:
    """Refuse, in one line, ids that are not (B, T, ``width``) (the model's characters per token: other widths gave
    other vectors or a shape error deep inside the CNN) or lie outside the character table (0 .. ``n_characters`` -
    1, where the embedding lookup would fail with a bare IndexError). One reduction over the ids: cheap beside the
    convolutions."""
    if char_ids.dim() != 3 or char_ids.shape[-1] != width:
        raise UsageError(f"character ids of shape {tuple(char_ids.shape)}: this model takes (sentences, tokens, "
                         f"{width}), {width} being its characters per token; build them with "
                         f"elmo.batch_to_ids(sentences{'' if width == MAX_CHARS else f', width={width}'})")
    if char_ids.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(char_ids))
    if low < 0 or high >= n_characters:
        raise UsageError(f"character id {high if high >= n_characters else low} is out of range: this model takes "
                         f"ids 0..{n_characters - 1} (0 = padding), as elmo.batch_to_ids makes them; build the ids "
                         f"with batch_to_ids instead of by hand")


def boundary_ids(width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``<S>`` and ``</S>`` rows for a given token width: two (W,) tensors."""
    if width == MAX_CHARS:
        return BOS_IDS, EOS_IDS
    return torch.tensor(_special_row(BOS_CHAR, width)), torch.tensor(_special_row(EOS_CHAR, width))


def add_sentence_boundaries(char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Wrap every row as ``<S> w_1 .. w_n </S>``: (B, T, W) -> ids (B, T + 2, W) and lengths (B,) = n + 2.

    An empty row becomes ``<S> </S>`` (docs/format.md §4.1): it still runs, and yields no output vectors. Rows must
    be padded on the right (tokens first, then all-zero slots), as ``batch_to_ids`` makes them: a row padded on the
    left or between tokens is refused, since its length, mask and ``</S>`` would be wrong.
    """
    batch, steps, width = char_ids.shape
    real = (char_ids > 0).any(-1)  # (B, T) slots holding a token
    gaps = real[:, 1:] & ~real[:, :-1]  # (B, T-1) a token right after a padding slot
    if bool(gaps.any()):
        row, slot = (int(v) for v in gaps.nonzero()[0])
        raise UsageError(f"character ids: row {row} has padding at position {slot} before a token; rows must be "
                         f"padded on the right (tokens first, then all-zero slots), as elmo.batch_to_ids makes them")
    lengths = real.sum(-1)  # (B,) real tokens per row
    bos, eos = boundary_ids(width)
    out = char_ids.new_zeros(batch, steps + 2, width)  # (B, T+2, W)
    out[:, 1 : steps + 1] = char_ids
    out[:, 0] = bos.to(char_ids.device)
    out[torch.arange(batch, device=char_ids.device), lengths + 1] = eos.to(char_ids.device)
    return out, lengths + 2
