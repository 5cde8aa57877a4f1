"""Tokenizers for raw text: whitespace, a built-in English one, and Korean (eojeol, or morphemes via kiwipiepy).

The English tokenizer follows the Penn Treebank conventions of the 1B Word Benchmark text that ELMo was trained on
(punctuation split off, clitics such as ``n't`` and ``'s`` separate, with straight or curly apostrophes):
``"Don't stop."`` -> ``Do n't stop .``. Two habits differ from the treebank and are kept because the shipped
English model's training text was tokenised this way: digits end a token (``1990s`` -> ``1990 s``) and an
apostrophe inside a name splits it (``O'Neil`` -> ``O ' Neil``). Combining marks, variation selectors, emoji
modifiers and zero-width joiners stay with the character they modify (``café`` written with a combining accent,
Devanagari vowel signs, ``👍🏽``, ZWJ emoji sequences and flags such as ``🇰🇷`` are single tokens).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

from elmo.errors import MissingDependencyError, UsageError

Tokenizer = Callable[[str], list[str]]

_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_EN_TOKEN = re.compile(
    r"""
    (?:[A-Za-z]\.){2,}                 # abbreviations with dots: U.S. e.g.
    | n['’]t\b | N['’]T\b                    # negation clitic
    | ['’](?:s|re|ve|ll|d|m)\b | ['’](?:S|RE|VE|LL|D|M)\b   # other clitics
    | \d+(?:[.,:]\d+)*                 # numbers: 3.14 1,000 12:30
    | \w+(?:[-'’]\w+)*?(?=n['’]t\b|N['’]T\b)  # the word before a negation clitic: do|n't
    | \w+(?:[-]\w+)*                   # words, hyphenated words
    | \.\.\.|--|[^\w\s]                # ellipsis, dash, any other single symbol
    """,
    re.VERBOSE,
)


def whitespace_tokenize(text: str) -> list[str]:
    return text.split()


def english_tokenize(text: str) -> list[str]:
    """PTB-style tokens of raw English text (HTML line breaks removed)."""
    return _keep_marks_attached(_EN_TOKEN, _HTML_BREAK.sub(" ", text))


_ZWJ = "\u200d"


def _is_attaching(char: str) -> bool:
    """A character that modifies the one before it: a combining mark, a variation selector, an emoji skin-tone
    modifier, or a zero-width joiner."""
    return (unicodedata.category(char) in ("Mn", "Mc", "Me") or char == _ZWJ
            or "\U0001F3FB" <= char <= "\U0001F3FF" or "\U000E0020" <= char <= "\U000E007F")


def _is_variation_selector(char: str) -> bool:
    """U+FE0E/U+FE0F after an emoji (❤️): a mark that ends the emoji; a word after it is another token."""
    return "\ufe00" <= char <= "\ufe0f" or "\U000E0100" <= char <= "\U000E01EF"


def _is_regional(char: str) -> bool:
    return "\U0001F1E6" <= char <= "\U0001F1FF"  # regional indicators: two of them make a flag


def _opens_a_flag(token: str) -> bool:
    """``token`` ends in an odd number of regional indicators: the next one completes its flag."""
    trailing = 0
    while trailing < len(token) and _is_regional(token[-1 - trailing]):
        trailing += 1
    return trailing % 2 == 1


def _keep_marks_attached(pattern: re.Pattern, text: str) -> list[str]:
    """``pattern``'s tokens, with a token of attaching characters glued to the token just before it; so is
    whatever directly follows a zero-width joiner (ZWJ emoji), the second regional indicator of a flag, and a word
    character directly after a combining mark
    (Devanagari and other scripts whose vowel signs are marks)."""
    tokens: list[str] = []
    end = -1
    for match in pattern.finditer(text):
        token = match.group()
        last_token = tokens[-1] if tokens else ""
        last = last_token[-1:]
        glued = (_is_attaching(token[0]) or last == _ZWJ
                 or (_is_regional(token[0]) and _opens_a_flag(last_token))
                 or (unicodedata.category(last or " ").startswith("M") and not _is_variation_selector(last)
                     and (token[0].isalnum() or token[0] == "_")))
        if tokens and match.start() == end and glued:
            tokens[-1] += token
        else:
            tokens.append(token)
        end = match.end()
    return tokens


_KO_TOKEN = re.compile(r"\w+|[^\w\s]+")


def korean_tokenize(text: str) -> list[str]:
    """Eojeol (whitespace words) with runs of punctuation split off: ``"갔다..."`` -> ``갔다 ...``. Hangul typed as
    separate jamo (NFD, from macOS file names and some web text) is composed first (NFC), as the training text is."""
    return _keep_marks_attached(_KO_TOKEN, unicodedata.normalize("NFC", text))


def korean_morpheme_tokenizer() -> Tokenizer:
    """Morpheme tokens from kiwipiepy (``pip install elmo[korean]``); eojeol (whitespace) is the default."""
    try:
        from kiwipiepy import Kiwi
    except ImportError:
        raise MissingDependencyError("the Korean morpheme tokenizer needs kiwipiepy: pip install 'elmo[korean]' "
                          "(or use --tokenize ko, which splits on whitespace into eojeol)") from None
    kiwi = Kiwi()
    return lambda text: [token.form for token in kiwi.tokenize(text)]


TOKENIZER_NAMES = ("whitespace", "en", "ko", "ko-morph")  # what --tokenize and get_tokenizer take


def get_tokenizer(name: str | None) -> Tokenizer:
    """``None``/"whitespace": pre-tokenised text; "en": English; "ko": eojeol, punctuation split off; "ko-morph": kiwipiepy morphemes."""
    if name in (None, "whitespace", "none"):
        return whitespace_tokenize
    if name == "en":
        return english_tokenize
    if name == "ko":
        return korean_tokenize
    if name == "ko-morph":
        return korean_morpheme_tokenizer()
    raise UsageError(f"unknown tokenizer {name!r}: choose {', '.join(TOKENIZER_NAMES)}")
