"""Tokenizers for raw text: whitespace, a built-in English one, and Korean (eojeol, or morphemes via kiwipiepy).

The English tokenizer follows the Penn Treebank conventions of the 1B Word Benchmark text that ELMo was trained on
(punctuation split off, clitics such as ``n't`` and ``'s`` separate, with straight or curly apostrophes):
``"Don't stop."`` -> ``Do n't stop .``. It is idempotent on text that is already tokenised that way: every line of
the 1B Word Benchmark held-out dev set comes back unchanged (tests/test_tokenizer_roundtrip.py), so a corpus can be
given to it whether or not it was tokenised before. For that, as the Moses tokenizer that made the 1B text does:

* a word keeps its final period when it is an abbreviation (``Mr.``, ``Dr.``, ``No. 5``, an initial ``J.``), when
  the word has periods inside (``U.S.``, ``p.m.``, ``www.bbc.co.uk.``), or when a lowercase word follows (``Inc.
  said``); otherwise the period is split off (``Mr. Smith went to Washington.`` -> ``Mr. Smith ... Washington .``);
* letters and digits, periods between them and hyphens stay in one token (``1990s``, ``11th``, ``3D``,
  ``guardian.co.uk``, ``18-year-old``, ``4-1``, ``needs--and``, ``mid-``);
* a clitic written apart (``won 't``) stays apart, and so does a word that starts with an apostrophe after a word
  (``O 'Neal``, as the 1B text splits ``O'Neal``), unless a closing quote follows it (``said 'no' twice``: quotes).

One habit of the shipped English model's training text stays: an apostrophe inside a name splits it (``O'Neil`` ->
``O ' Neil``). Combining marks, variation selectors, emoji modifiers and zero-width joiners stay with the character
they modify (``café`` written with a combining accent, Devanagari vowel signs, ``👍🏽``, ZWJ emoji sequences and flags
such as ``🇰🇷`` are single tokens).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable, Iterable, Iterator

from elmo.errors import InputTypeError, MissingDependencyError, UsageError

Tokenizer = Callable[[str], list[str]]

_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_EN_TOKEN = re.compile(
    r"""
    (?P<apart>(?<!\S)['’]\w+(?:-+\w+|\.\w+)*)  # after a space, a word that starts with an apostrophe: O 'Neal, won 't
    | n['’]t\b | N['’]T\b                    # negation clitic
    | ['’](?:s|re|ve|ll|d|m)\b | ['’](?:S|RE|VE|LL|D|M)\b   # other clitics
    | \w+(?:[-'’]\w+)*?(?=n['’]t\b|N['’]T\b)  # the word before a negation clitic: do|n't
    | (?P<word>(?:(?<!\S)(?:-+|\.))?          # a word: hyphens or a period may start it after a space (-5 .07)
        \w+(?:-+\w+|\.-*\w+|(?<=\d)[,:]\d\w*)*  # 1990s U.S U.S.-led 3.14 1,000ft 18-year-old needs--and
        (?:-+(?!\S))?)(?P<period>\.(?!\.))?    # mid- ; its final period, kept or split off by _keeps_period
    | \.{2,}|-{2,}|[^\w\s]                   # ellipsis, dashes, any other single symbol
    """,
    re.VERBOSE,
)
# a quote that closes: an apostrophe after a character, not followed by a word character (said 'no' twice)
_CLOSING_QUOTE = re.compile(r"[^\s'’]['’](?!\w)")
_NEXT_CHAR = re.compile(r"\s*(\S)")
# words whose period is part of them (the Moses tokenizer's English list, which made the 1B Word Benchmark text,
# and a few more); single capital letters (initials) too
_ABBREVIATIONS = frozenset("""
    Adj Adm Adv Apr Asst Aug Bart Bldg Brig Bros Capt Cmdr Col Comdr Con Corp Cpl DR Dec Dr Drs Ens Feb Gen Gov Hon
    Hosp Hr Insp Jan Jul Jun Lt MM MR MRS MS Maj Mar Messrs Mlle Mme Mr Mrs Ms Msgr Nos Nov Nr Oct Op Ord Pfc Ph Prof
    Pvt Rep Reps Res Rev Rs Rt Sen Sens Sep Sept Sfc Sgt Sr St Supt Surg e.g i.e rev v vs
    Inc Ltd Co Jr Mt Ft Fig Vol etc
""".split())
_NUMBER_ABBREVIATIONS = frozenset({"No", "Art", "pp"})  # an abbreviation only before a number: No. 5


def whitespace_tokenize(text: str) -> list[str]:
    return text.split()


def english_tokenize(text: str) -> list[str]:
    """PTB-style tokens of raw English text (HTML line breaks removed); text already tokenised so comes back as it
    was (see the module docstring)."""
    text = _HTML_BREAK.sub(" ", text)
    last_close = -1  # where the text's last closing quote starts
    if "'" in text or "’" in text:
        last_close = max((m.start() for m in _CLOSING_QUOTE.finditer(text)), default=-1)
    return _keep_marks_attached(text, _english_spans(text, 0, len(text), last_close))


def _english_spans(text: str, pos: int, endpos: int, last_close: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each English token of ``text[pos:endpos]``."""
    for match in _EN_TOKEN.finditer(text, pos, endpos):
        start, end = match.span()
        if match.lastgroup == "apart" and not _apart_from_a_word(text, start, last_close):
            yield start, start + 1  # an opening quote: split it off, and the rest as usual
            yield from _english_spans(text, start + 1, end, last_close)
        elif match.group("period") and not _keeps_period(match.group("word"), text, end):
            yield start, end - 1
            yield end - 1, end
        else:
            yield start, end


def _apart_from_a_word(text: str, start: int, last_close: int) -> bool:
    """The apostrophe at ``start`` (after a space) begins the second half of a word split apart (``O 'Neal``,
    ``won 't``): a letter or digit comes before the space, and no closing quote (at ``last_close``) after it."""
    before = start - 1
    while before >= 0 and text[before].isspace():
        before -= 1
    return before >= 0 and text[before].isalnum() and last_close <= start


def _keeps_period(word: str, text: str, end: int) -> bool:
    """Whether ``word``, directly followed by a period that ends at ``end``, keeps it (Moses' rule): abbreviations,
    initials and dotted words do, so does a word followed by a lowercase one; a sentence's last word does not."""
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isupper()) or ("." in word and _has_letter(word)):
        return True
    following = _NEXT_CHAR.match(text, end)
    next_char = following.group(1) if following else ""
    return next_char.islower() or (word in _NUMBER_ABBREVIATIONS and next_char.isdigit())


def _has_letter(word: str) -> bool:
    return any(char.isalpha() for char in word)


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


def _keep_marks_attached(text: str, spans: Iterable[tuple[int, int]]) -> list[str]:
    """The tokens at ``spans`` (start, end) of ``text``, with a token of attaching characters glued to the token
    just before it; so is whatever directly follows a zero-width joiner (ZWJ emoji), the second regional indicator of
    a flag, and a word character directly after a combining mark (Devanagari and other scripts whose vowel signs are
    marks)."""
    tokens: list[str] = []
    end = -1
    for start, stop in spans:
        token = text[start:stop]
        last_token = tokens[-1] if tokens else ""
        last = last_token[-1:]
        glued = (_is_attaching(token[0]) or last == _ZWJ
                 or (_is_regional(token[0]) and _opens_a_flag(last_token))
                 or (unicodedata.category(last or " ").startswith("M") and not _is_variation_selector(last)
                     and (token[0].isalnum() or token[0] == "_")))
        if tokens and start == end and glued:
            tokens[-1] += token
        else:
            tokens.append(token)
        end = stop
    return tokens


_KO_TOKEN = re.compile(r"\w+|[^\w\s]+")
# conjoining Hangul jamo (initial, medial and final consonants and vowels, old ones included), with the syllable
# before them that a final consonant may complete: what NFC composes into Hangul syllables
_JAMO_RUN = re.compile(r"[\uac00-\ud7a3]?[\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff]+")


def compose_hangul(text: str) -> str:
    """``text`` with Hangul typed as separate jamo composed into syllables (NFC on the jamo alone), every other
    character as it was: NFC of the whole text would also replace CJK compatibility ideographs (the Hanja of other
    readings, U+F900-U+FAFF) by their unified forms, the Greek question mark by a semicolon, the ohm sign by omega."""
    return _JAMO_RUN.sub(lambda match: unicodedata.normalize("NFC", match.group()), text)


def korean_tokenize(text: str) -> list[str]:
    """Eojeol (whitespace words) with runs of punctuation split off: ``"갔다..."`` -> ``갔다 ...``. Hangul typed as
    separate jamo (NFD, from macOS file names and some web text) is composed first, as the training text is; no
    other character is changed (``compose_hangul``)."""
    text = compose_hangul(text)
    return _keep_marks_attached(text, ((m.start(), m.end()) for m in _KO_TOKEN.finditer(text)))


def korean_morpheme_tokenizer() -> Tokenizer:
    """Morpheme tokens from kiwipiepy (``pip install 'elmo-bilm[korean]'``); eojeol (whitespace) is the default."""
    try:
        from kiwipiepy import Kiwi
    except ImportError:
        raise MissingDependencyError("the Korean morpheme tokenizer needs kiwipiepy: pip install 'elmo-bilm[korean]' "
                          "(or use --tokenize ko, which splits on whitespace into eojeol)") from None
    kiwi = Kiwi()
    return lambda text: [token.form for token in kiwi.tokenize(text)]


def tokens_of(tokenizer: Callable[[str], list[str]], text: str) -> list[str]:
    """``tokenizer(text)``, checked to be a list of strings: a user's tokenizer that returns None or a string would
    otherwise fail far away (or embed its characters one by one)."""
    tokens = tokenizer(text)
    if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
        got = "a list holding non-strings" if isinstance(tokens, list) else type(tokens).__name__
        raise InputTypeError(f"the tokenizer returned {got} for {text[:40]!r}; a tokenizer must return a list of "
                             f"strings")
    return tokens


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
