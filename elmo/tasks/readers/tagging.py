"""Tagging formats: CoNLL-2003 and WNUT-17 (NER), CoNLL-U (POS), KMOU 2016klp (Korean NER)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from elmo.errors import UsageError
from elmo.limits import is_digits
from elmo.tasks.readers.common import DataFormatError, iter_blocks


@dataclass
class TaggedSentence:
    """One sentence for sequence labelling: ``tags[i]`` labels ``tokens[i]`` (BIO for NER, UPOS/XPOS for POS)."""

    tokens: list[str]
    tags: list[str]


# ---- CoNLL-2003 / WNUT-17 ----------------------------------------------------------------------------------------
def iob1_to_bio(tags: list[str]) -> list[str]:
    """Convert IOB1 tags to BIO (IOB2): an ``I-X`` that starts an entity (after ``O`` or another type) becomes ``B-X``.

    ``B-X`` (IOB1's marker between two adjacent entities of one type) stays ``B-X``; BIO input comes back unchanged,
    so the function is safe on files that are already BIO.
    """
    bio: list[str] = []
    previous = "O"
    for tag in tags:
        if not is_bio_tag(tag):
            raise UsageError(f"not an IOB tag: {tag!r} (expected 'O', 'B-TYPE' or 'I-TYPE')")
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        bio.append(tag)
        previous = tag
    return bio


def is_bio_tag(tag: str) -> bool:
    """O, or B-TYPE / I-TYPE: a tag of the BIO scheme NER data and span F1 use."""
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _read_column_file(path: str | Path, separator: str, columns: str) -> list[TaggedSentence]:
    """Sentences of a CoNLL-style column file: first column the token, last the tag; ``-DOCSTART-`` lines skipped."""
    names = columns.split()
    sentences: list[TaggedSentence] = []
    for block in iter_blocks(path):
        tokens: list[str] = []
        tags: list[str] = []
        for number, line in block:
            # trailing spaces (some editors and converters leave them) are not an empty last column
            fields = (line.rstrip(" ") if separator == " " else line).split(separator)
            if len(fields) != len(names):
                raise DataFormatError(path, number, f"expected {len(names)} {separator!r}-separated columns "
                                      f"({' '.join(names)}), found {len(fields)} in {line!r}",
                                      "fix the line or check that this is the right reader for the file")
            if fields[0] == "-DOCSTART-":
                continue
            if not fields[0]:
                raise DataFormatError(path, number, "an empty token", "give every line a token before its tag")
            if not is_bio_tag(fields[-1]):
                raise DataFormatError(path, number, f"bad tag {fields[-1]!r}", "tags must be O, B-TYPE or I-TYPE")
            tokens.append(fields[0])
            tags.append(fields[-1])
        if tokens:
            sentences.append(TaggedSentence(tokens, tags))
    return sentences


def read_conll2003(path: str | Path) -> list[TaggedSentence]:
    """CoNLL-2003 NER (``word POS chunk NER`` per line, space-separated) with the NER tags converted to BIO.

    ``-DOCSTART-`` lines are skipped and a blank line ends a sentence. The tags are run through :func:`iob1_to_bio`
    (the shared copy is in fact already BIO; the conversion leaves BIO unchanged).
    """
    return [TaggedSentence(s.tokens, iob1_to_bio(s.tags)) for s in _read_column_file(path, " ", "word POS chunk NER")]


def read_wnut17(path: str | Path) -> list[TaggedSentence]:
    """WNUT-17 NER (``token<TAB>BIO-tag`` per line); a blank, TAB-only or BOM-only line ends a sentence.

    Tokens are kept as in the file (one dev token carries a U+FEFF).
    """
    return _read_column_file(path, "\t", "token tag")


# ---- CoNLL-U -----------------------------------------------------------------------------------------------------
_CONLLU_COLUMNS = {"upos": 3, "xpos": 4}


def read_conllu(path: str | Path, column: str = "upos") -> list[TaggedSentence]:
    """CoNLL-U sentences as (word form, ``column``) pairs, ``column`` being ``"upos"`` or ``"xpos"``.

    Comment lines (``#``), multiword-token ranges (``3-4``) and empty nodes (``5.1``) are skipped, so the tokens are
    the syntactic words, which is what UD's POS tags label.
    """
    if column not in _CONLLU_COLUMNS:
        raise UsageError(f"column must be one of {sorted(_CONLLU_COLUMNS)}, not {column!r}")
    index = _CONLLU_COLUMNS[column]
    sentences: list[TaggedSentence] = []
    for block in iter_blocks(path):
        tokens: list[str] = []
        tags: list[str] = []
        for number, line in block:
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 10:
                raise DataFormatError(path, number, f"expected 10 TAB-separated CoNLL-U fields, found {len(fields)}",
                                      "fix the line (fields are separated by single TABs, '_' for empty)")
            if "-" in fields[0] or "." in fields[0]:
                continue
            if fields[0] != str(len(tokens) + 1):  # IDs count the words of one sentence from 1
                raise DataFormatError(path, number, f"word ID {fields[0]} where {len(tokens) + 1} was expected",
                                      "a blank line is missing between two sentences"
                                      if fields[0] == "1" else "number the words of each sentence 1, 2, 3, ...")
            if not fields[1] or not fields[index]:
                raise DataFormatError(path, number, f"an empty {'FORM' if not fields[1] else column.upper()} field",
                                      "CoNLL-U writes '_' for a field without a value")
            if fields[index] == "_":  # no value: training on it would score every "_" as a perfect tag
                other = "xpos" if column == "upos" else "upos"
                raise DataFormatError(path, number, f"no {column.upper()} tag ('_')",
                                      f"this data has no {column.upper()} tags: use its {other.upper()} column "
                                      f"(probe pos --column {other}; task --format "
                                      f"{'conllu-xpos' if other == 'xpos' else 'conllu'}) or other data")
            tokens.append(fields[1])
            tags.append(fields[index])
        if len(tokens) > 1 and all(token == "_" for token in tokens):  # one "_" may be the underscore itself
            raise DataFormatError(path, number, "a sentence whose every word form is '_'",
                                  "this treebank does not distribute its text: add the words first (its README says "
                                  "how), or use other data")
        if tokens:
            sentences.append(TaggedSentence(tokens, tags))
    return sentences


# ---- KMOU NER ----------------------------------------------------------------------------------------------------
@dataclass
class _Morpheme:
    eojeol: int
    form: str
    tag: str  # BIO, e.g. "B-PS", "I-PS", "O"


def read_kmou_ner(path: str | Path, morphemes: bool = False) -> list[TaggedSentence]:
    """KMOU 2016klp NER, tagged per eojeol (default) or per morpheme (``morphemes=True``), BIO with types PS/LC/OG/DT/TI.

    A sentence block is ``; raw sentence``, ``$marked sentence``, then ``eojeol_no<TAB>morpheme<TAB>POS<TAB>tag``
    lines (tag ``B_X``, untyped ``I`` continuing the open entity, or ``O``). Morpheme tags become ``B-X``/``I-X``/``O``.

    Eojeol level: the tokens are the space-separated words of the raw sentence line, and each eojeol takes the BIO
    tag of its first morpheme that is not ``O`` (``O`` if none). An ``I-X`` eojeol that does not follow an ``X``
    eojeol becomes ``B-X`` (the previous eojeol's first entity had another type), so the result is valid BIO. A
    second entity starting inside the same eojeol (``한·미·일``) is merged into the first: eojeols are the unit.
    If the raw line's word count differs from the number of eojeols (never in the shared train/dev files), the
    eojeol tokens fall back to the concatenated morpheme forms (which differ from the surface, e.g. ``이+ㄴ``).
    """
    sentences: list[TaggedSentence] = []
    joined: list[int] = []  # the first lines of sentences whose tokens are joined morpheme forms
    for block in iter_blocks(path):
        raw, morphs = _parse_kmou_block(path, block)
        if morphemes:
            sentences.append(TaggedSentence([m.form for m in morphs], [m.tag for m in morphs]))
            continue
        sentences.append(_kmou_eojeols(raw, morphs))
        if sentences[-1].tokens != [word for word in raw.split(" ") if word]:
            joined.append(block[0][0])
    if joined:
        warnings.warn(f"{path}: {len(joined):,} sentence(s) whose raw line has another number of words than its "
                      f"eojeols (the first at line {joined[0]}): their tokens are the joined morpheme forms, not the "
                      f"words of the sentence that `elmo task predict` will see")
    return sentences


def _parse_kmou_block(path: str | Path, block: list[tuple[int, str]]) -> tuple[str, list[_Morpheme]]:
    """The raw sentence and the morphemes of one KMOU sentence block, tags converted to BIO and checked."""
    (first_no, first), *rest = block
    if not first.startswith("; "):
        raise DataFormatError(path, first_no, f"a sentence must start with '; raw sentence', found {first[:40]!r}",
                              "check the blank line before it (one blank line between sentences)")
    if not rest or not rest[0][1].startswith("$"):
        where = rest[0][0] if rest else first_no
        raise DataFormatError(path, where, "the '; raw sentence' line must be followed by a '$marked sentence' line",
                              "restore the '$' line")
    morphs: list[_Morpheme] = []
    open_type: str | None = None
    for number, line in rest[1:]:
        morph = _parse_kmou_morpheme(path, number, line, morphs[-1].eojeol if morphs else 0, open_type)
        open_type = None if morph.tag == "O" else morph.tag[2:]
        morphs.append(morph)
    if not morphs:
        raise DataFormatError(path, first_no, "a sentence without morpheme lines", "add its morpheme lines")
    return first[2:], morphs


def _parse_kmou_morpheme(path: str | Path, number: int, line: str, previous_eojeol: int,
                         open_type: str | None) -> _Morpheme:
    """One ``eojeol_no<TAB>morpheme<TAB>POS<TAB>tag`` line; eojeol numbers must run 1, 1, 2, ... without gaps."""
    fields = line.split("\t")
    if len(fields) != 4:
        raise DataFormatError(path, number, f"expected 4 TAB-separated fields (eojeol_no morpheme POS tag), "
                              f"found {len(fields)}", "fix the morpheme line")
    eojeol, form, _, tag = fields
    if not is_digits(eojeol) or int(eojeol) not in (previous_eojeol, previous_eojeol + 1) or int(eojeol) == 0:
        raise DataFormatError(path, number, f"eojeol number {eojeol!r} after {previous_eojeol}",
                              "eojeol numbers must start at 1 and grow by at most 1")
    if tag == "O":
        bio = "O"
    elif tag.startswith("B_") and len(tag) > 2:
        bio = "B-" + tag[2:]
    elif tag == "I" and open_type is not None:
        bio = "I-" + open_type
    elif tag == "I":
        raise DataFormatError(path, number, "tag I outside an entity (after O or at the sentence start)",
                              "an entity must start with B_TYPE")
    else:
        raise DataFormatError(path, number, f"unknown tag {tag!r}", "tags are B_PS/B_LC/B_OG/B_DT/B_TI, I or O")
    return _Morpheme(int(eojeol), form, bio)


def _kmou_eojeols(raw: str, morphs: list[_Morpheme]) -> TaggedSentence:
    """Group morphemes into eojeols: raw-line words as tokens (or joined forms), first entity tag per eojeol."""
    groups: list[list[_Morpheme]] = []
    for morph in morphs:
        if morph.eojeol > len(groups):
            groups.append([])
        groups[-1].append(morph)
    words = [word for word in raw.split(" ") if word]
    if len(words) != len(groups):
        words = ["".join(m.form for m in group) for group in groups]
    tags = [next((m.tag for m in group if m.tag != "O"), "O") for group in groups]
    return TaggedSentence(words, iob1_to_bio(tags))
