"""Tokenizers for raw text: whitespace, a built-in English one, and Korean (eojeol, or morphemes via kiwipiepy).

The English tokenizer follows the Penn Treebank conventions of the 1B Word Benchmark text that ELMo was trained on
(punctuation split off, clitics such as ``n't`` and ``'s`` separate): ``"Don't stop."`` -> ``Do n't stop .``.
"""

from __future__ import annotations

import re
from typing import Callable

Tokenizer = Callable[[str], list[str]]

_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_EN_TOKEN = re.compile(
    r"""
    (?:[A-Za-z]\.){2,}                 # abbreviations with dots: U.S. e.g.
    | n't\b | N'T\b                    # negation clitic
    | '(?:s|re|ve|ll|d|m)\b | '(?:S|RE|VE|LL|D|M)\b   # other clitics
    | \d+(?:[.,:]\d+)*                 # numbers: 3.14 1,000 12:30
    | \w+(?:[-']\w+)*?(?=n't\b|N'T\b)  # the word before a negation clitic: do|n't
    | \w+(?:[-]\w+)*                   # words, hyphenated words
    | \.\.\.|--|[^\w\s]                # ellipsis, dash, any other single symbol
    """,
    re.VERBOSE,
)


def whitespace_tokenize(text: str) -> list[str]:
    return text.split()


def english_tokenize(text: str) -> list[str]:
    """PTB-style tokens of raw English text (HTML line breaks removed)."""
    return _EN_TOKEN.findall(_HTML_BREAK.sub(" ", text))


_KO_TOKEN = re.compile(r"\w+|[^\w\s]+")


def korean_tokenize(text: str) -> list[str]:
    """Eojeol (whitespace words) with runs of punctuation split off: ``"갔다..."`` -> ``갔다 ...``."""
    return _KO_TOKEN.findall(text)


def korean_morpheme_tokenizer() -> Tokenizer:
    """Morpheme tokens from kiwipiepy (``pip install elmo[korean]``); eojeol (whitespace) is the default."""
    try:
        from kiwipiepy import Kiwi
    except ImportError:
        raise ImportError("the Korean morpheme tokenizer needs kiwipiepy: pip install 'elmo[korean]' "
                          "(or use --tokenize ko, which splits on whitespace into eojeol)") from None
    kiwi = Kiwi()
    return lambda text: [token.form for token in kiwi.tokenize(text)]


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
    raise ValueError(f"unknown tokenizer {name!r}: choose whitespace, en, ko or ko-morph")
