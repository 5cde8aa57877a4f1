"""Readers for the downstream datasets, in the formats they are published in.

* NER: CoNLL-2003 (``word POS chunk NER``, IOB1 -> BIO), WNUT-17 (``token<TAB>tag``, BIO), KMOU 2016klp (Korean,
  morpheme lines, returned per eojeol or per morpheme).
* POS: CoNLL-U (UD EWT, UD Korean-GSD), UPOS or XPOS.
* Sentiment: SST PTB-style trees, the ``stsa.*`` sentence files (``label text``), label/text TSV files (NSMC).
* WSD: Raganato et al.'s unified framework (``*.data.xml`` + ``*.gold.key.txt``) and WordNet 3.0 ``index.sense``.

Every reader takes a plain or gzipped file (detected by its magic bytes), splits lines on ``"\\n"`` only
(``str.splitlines`` would also split on U+2028/U+0085, which occur inside some texts) and drops one trailing
``"\\r"`` per line (KMOU has CRLF endings). Anything malformed raises :class:`DataFormatError`, whose message starts
with ``path:line:`` so the offending line can be opened directly.
"""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from elmo.errors import ElmoError, UsageError
from elmo.io.text_lines import TextLineError, numbered_lines

__all__ = [
    "DataFormatError",
    "LabelledText",
    "TaggedSentence",
    "WsdSentence",
    "first_sense",
    "iob1_to_bio",
    "read_conll2003",
    "read_conllu",
    "read_kmou_ner",
    "read_label_text_tsv",
    "read_sst_trees",
    "read_stsa",
    "read_wnut17",
    "read_wordnet_index_sense",
    "read_wsd_keys",
    "read_wsd_xml",
]


# ---- types -------------------------------------------------------------------------------------------------------
@dataclass
class TaggedSentence:
    """One sentence for sequence labelling: ``tags[i]`` labels ``tokens[i]`` (BIO for NER, UPOS/XPOS for POS)."""

    tokens: list[str]
    tags: list[str]


@dataclass
class LabelledText:
    """One text for classification; ``text`` is the raw text as in the file, ``label`` the label as a string."""

    text: str
    label: str


@dataclass
class WsdSentence:
    """One WSD sentence: every token with its lemma and POS, and the instances to disambiguate.

    ``instances`` holds ``(token index, instance id, gold sense keys)``; the key list is empty when no gold key is
    known (e.g. no key file was given). ``sentence_id`` is the ``<sentence id=...>`` attribute.
    """

    tokens: list[str]
    lemmas: list[str]
    pos: list[str]
    instances: list[tuple[int, str, list[str]]]
    sentence_id: str = ""


class DataFormatError(ElmoError, ValueError):
    """A dataset file is not in the expected format; the message reads ``path:line: what was wrong; what to do``."""

    def __init__(self, path: str | Path, line: int, problem: str, hint: str) -> None:
        super().__init__(f"{path}:{line}: {problem}; {hint}")
        self.path = str(path)
        self.line = line


# ---- line access -------------------------------------------------------------------------------------------------
def _iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line)``, split on ``"\\n"`` only, one trailing ``"\\r"`` removed."""
    try:
        yield from numbered_lines(path)
    except TextLineError as err:
        raise DataFormatError(path, err.line, err.problem, err.hint) from None


def _is_blank(line: str) -> bool:
    """Blank for sentence breaks: only spaces, tabs or BOMs (WNUT-17 train uses a lone TAB, its dev a lone BOM)."""
    return not line.strip(" \t\ufeff")


def _iter_blocks(path: str | Path) -> Iterator[list[tuple[int, str]]]:
    """Yield the runs of non-blank numbered lines; blank lines separate them."""
    block: list[tuple[int, str]] = []
    for number, line in _iter_lines(path):
        if _is_blank(line):
            if block:
                yield block
            block = []
        else:
            block.append((number, line))
    if block:
        yield block


# ---- CoNLL-2003 / WNUT-17 ----------------------------------------------------------------------------------------
def iob1_to_bio(tags: list[str]) -> list[str]:
    """Convert IOB1 tags to BIO (IOB2): an ``I-X`` that starts an entity (after ``O`` or another type) becomes ``B-X``.

    ``B-X`` (IOB1's marker between two adjacent entities of one type) stays ``B-X``; BIO input comes back unchanged,
    so the function is safe on files that are already BIO.
    """
    bio: list[str] = []
    previous = "O"
    for tag in tags:
        if not _is_bio_tag(tag):
            raise UsageError(f"not an IOB tag: {tag!r} (expected 'O', 'B-TYPE' or 'I-TYPE')")
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        bio.append(tag)
        previous = tag
    return bio


def _is_bio_tag(tag: str) -> bool:
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _read_column_file(path: str | Path, separator: str, columns: str) -> list[TaggedSentence]:
    """Sentences of a CoNLL-style column file: first column the token, last the tag; ``-DOCSTART-`` lines skipped."""
    names = columns.split()
    sentences: list[TaggedSentence] = []
    for block in _iter_blocks(path):
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
            if not _is_bio_tag(fields[-1]):
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
    for block in _iter_blocks(path):
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
            tokens.append(fields[1])
            tags.append(fields[index])
        if tokens:
            sentences.append(TaggedSentence(tokens, tags))
    return sentences


# ---- SST ---------------------------------------------------------------------------------------------------------
_TREE_TOKEN = re.compile(r"\(|\)|[^() ]+")
_PTB_LEAF_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
                     "``": '"', "''": '"', "`": "'"}
_SST_LABELS = frozenset("01234")


def read_sst_trees(path: str | Path) -> list[LabelledText]:
    """SST PTB-style trees, one per line: label = the root's label (``"0"``..``"4"``), text = the leaves joined by spaces.

    Leaves are written back as plain text, the way the biLM saw text in training: the PTB escapes become the
    characters they stand for (-LRB- -> "(", the opening and closing double quotes (two backquotes, two apostrophes)
    -> '"', one backquote -> "'", backslash-slash -> "/", backslash-star -> "*"). Only spaces separate tree tokens,
    so a leaf with a no-break space (8\xa01\\/2) stays one leaf (8\xa01/2).
    """
    items: list[LabelledText] = []
    for number, line in _iter_lines(path):
        if _is_blank(line):
            continue
        label, leaves = _parse_tree(line, path, number)
        items.append(LabelledText(" ".join(leaves), label))
    return items


def _parse_tree(line: str, path: str | Path, number: int) -> tuple[str, list[str]]:
    """The root label and the leaves of one bracketed tree; DataFormatError when it is not one well-formed tree."""
    def fail(problem: str) -> DataFormatError:
        return DataFormatError(path, number, problem, "each line must hold one tree like '(3 (2 It) (4 works))'")

    depth, root_label, expect_label, closed = 0, None, False, False
    leaves: list[str] = []
    for token in _TREE_TOKEN.findall(line):
        if closed:
            raise fail(f"text {token!r} after the tree's closing parenthesis (unbalanced parentheses)")
        if token == "(":
            if expect_label:
                raise fail("a node without a label")
            depth, expect_label = depth + 1, True
        elif token == ")":
            if expect_label:
                raise fail("an empty node '()'")
            if depth == 0:
                raise fail("unbalanced parentheses: ')' before any '('")
            depth -= 1
            closed = depth == 0
        elif expect_label:
            root_label = token if root_label is None else root_label
            expect_label = False
        elif depth == 0:
            raise fail(f"text {token!r} outside the tree")
        else:
            leaves.append(_unescape_ptb_leaf(token))
    if depth > 0:
        raise fail(f"unbalanced parentheses: {depth} '(' never closed")
    if root_label not in _SST_LABELS:
        raise fail(f"root label {root_label!r} is not one of 0..4")
    if not leaves:
        raise fail("a tree without leaves")
    return root_label, leaves


def _unescape_ptb_leaf(leaf: str) -> str:
    """One PTB token as plain text (bracket names in either case: the stsa files are lower-cased)."""
    return (_PTB_LEAF_ESCAPES.get(leaf.upper() if leaf.startswith("-") else leaf)
            or leaf.replace("\\/", "/").replace("\\*", "*"))


def read_stsa(path: str | Path) -> list[LabelledText]:
    """The ``stsa.fine.*`` / ``stsa.binary.*`` sentence files: ``label<space>sentence`` per line, no header.

    The sentences are lower-cased and tokenised as in the file; PTB escapes become plain text as in
    ``read_sst_trees`` (-lrb- -> "(", two backquotes -> '"', ...), so both readers give the same text.
    """
    items: list[LabelledText] = []
    for number, line in _iter_lines(path):
        if _is_blank(line):
            continue
        label, _, text = line.partition(" ")
        if not label.isdigit() or not text.strip():
            raise DataFormatError(path, number, f"expected 'label sentence', found {line[:60]!r}",
                                  "each line must be a numeric label, one space, then the sentence")
        items.append(LabelledText(" ".join(_unescape_ptb_leaf(t) for t in text.split(" ")), label))
    return items


# ---- label/text TSV (NSMC) ---------------------------------------------------------------------------------------
def _split_tsv(line: str, path: str | Path, number: int) -> list[str]:
    """One TSV line split by the csv module (TAB, no quoting); csv errors (a CR inside a field) become DataFormatError."""
    try:
        return next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE), [])
    except csv.Error as error:
        raise DataFormatError(path, number, f"unreadable TSV line ({error})",
                              "remove stray carriage returns / oversized fields from the line") from None


def read_label_text_tsv(path: str | Path, text_column: str = "text",
                        label_column: str = "label") -> list[LabelledText]:
    """A TAB-separated file with a header line (NSMC: ``id text label``); returns its text and label columns.

    No quoting is applied (quotes are part of the text); empty lines are skipped; every other line must have as
    many fields as the header.
    """
    lines = _iter_lines(path)
    first = next(lines, None)
    if first is None:
        raise DataFormatError(path, 1, "empty file", f"expected a header naming {text_column!r} and {label_column!r}")
    header = _split_tsv(first[1], path, 1)
    missing = [name for name in (text_column, label_column) if name not in header]
    if missing:
        raise DataFormatError(path, 1, f"no column {', '.join(map(repr, missing))} in the header (columns found: "
                              f"{', '.join(map(repr, header))})", "pass text_column=/label_column= matching the header")
    text_at, label_at = header.index(text_column), header.index(label_column)
    items: list[LabelledText] = []
    for number, line in lines:
        if not line:
            continue
        fields = _split_tsv(line, path, number)
        if len(fields) != len(header):
            raise DataFormatError(path, number, f"{len(fields)} TAB-separated fields, the header has {len(header)}",
                                  "TABs inside a text must be replaced (the file uses no quoting)")
        items.append(LabelledText(fields[text_at], fields[label_at]))
    return items


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
    for block in _iter_blocks(path):
        raw, morphs = _parse_kmou_block(path, block)
        if morphemes:
            sentences.append(TaggedSentence([m.form for m in morphs], [m.tag for m in morphs]))
        else:
            sentences.append(_kmou_eojeols(raw, morphs))
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
    if not eojeol.isdigit() or int(eojeol) not in (previous_eojeol, previous_eojeol + 1) or int(eojeol) == 0:
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


# ---- WSD (Raganato et al. unified framework) and WordNet ---------------------------------------------------------
_WN_SS_TYPE_POS = {"1": "NOUN", "2": "VERB", "3": "ADJ", "4": "ADV", "5": "ADJ"}


def read_wsd_keys(path: str | Path) -> dict[str, list[str]]:
    """A ``*.gold.key.txt`` file: ``instance_id sense_key [sense_key ...]`` per line -> {instance id: keys}."""
    keys: dict[str, list[str]] = {}
    for number, line in _iter_lines(path):
        if _is_blank(line):
            continue
        instance, *senses = [part for part in line.split(" ") if part]
        if not senses:
            raise DataFormatError(path, number, f"instance {instance!r} has no sense key",
                                  "each line must be 'instance_id sense_key [sense_key ...]'")
        if instance in keys:
            raise DataFormatError(path, number, f"instance {instance!r} listed twice", "merge its keys on one line")
        keys[instance] = senses
    return keys


def read_wsd_xml(xml_path: str | Path, keys_path: str | Path | None = None) -> list[WsdSentence]:
    """The sentences of a unified-framework ``*.data.xml`` file, with gold keys from ``keys_path`` when given.

    ``<wf>`` and ``<instance>`` elements are the tokens, in order; token text is kept as written (SemCor multiword
    tokens contain spaces, ``took place``). Instances without a gold key get an empty key list. The XML is fed to
    ``ElementTree.XMLPullParser`` line by line so errors can name the line.
    """
    keys = read_wsd_keys(keys_path) if keys_path is not None else {}
    parser = ET.XMLPullParser(events=("start", "end"))
    sentences: list[WsdSentence] = []
    current: WsdSentence | None = None
    number = 0
    for number, line in _iter_lines(xml_path):
        for event, element in _feed_xml(parser, line + "\n", xml_path, number):
            current = _wsd_event(event, element, current, sentences, keys, xml_path, number)
    _feed_xml(parser, None, xml_path, number)
    return sentences


def _feed_xml(parser: ET.XMLPullParser, data: str | None, path: str | Path,
              number: int) -> list[tuple[str, ET.Element]]:
    """Feed ``data`` (or close the parser when None) and return the new events; XML errors become DataFormatError."""
    try:
        if data is None:
            parser.close()
        else:
            parser.feed(data)
        return list(parser.read_events())
    except ET.ParseError as error:
        line = error.position[0] if error.position and error.position[0] else number
        raise DataFormatError(path, line, f"malformed XML ({error})", "fix the XML at that line") from None


def _wsd_event(event: str, element: ET.Element, current: WsdSentence | None, sentences: list[WsdSentence],
               keys: dict[str, list[str]], path: str | Path, number: int) -> WsdSentence | None:
    """Apply one parser event; returns the sentence being built (None between sentences)."""
    if element.tag == "sentence" and event == "start":
        if current is not None:
            raise DataFormatError(path, number, "<sentence> inside another <sentence>", "close the previous one")
        return WsdSentence([], [], [], [], sentence_id=element.get("id", ""))
    if element.tag == "sentence":
        sentences.append(current)
        element.clear()
        return None
    if element.tag in ("wf", "instance") and event == "end":
        if current is None:
            raise DataFormatError(path, number, f"<{element.tag}> outside a <sentence>", "put it inside a sentence")
        _add_wsd_token(current, element, keys, path, number)
    return current


def _add_wsd_token(sentence: WsdSentence, element: ET.Element, keys: dict[str, list[str]], path: str | Path,
                   number: int) -> None:
    """Append one ``<wf>``/``<instance>`` token (and its instance entry) to ``sentence``."""
    lemma, pos, text = element.get("lemma"), element.get("pos"), element.text
    if lemma is None or pos is None or not text:
        raise DataFormatError(path, number, f"<{element.tag}> without lemma, pos or text",
                              "every token needs lemma=\"...\" pos=\"...\" and its word as text")
    if element.tag == "instance":
        instance = element.get("id")
        if not instance:
            raise DataFormatError(path, number, "<instance> without an id", "add id=\"...\"")
        sentence.instances.append((len(sentence.tokens), instance, list(keys.get(instance, []))))
    sentence.tokens.append(text)
    sentence.lemmas.append(lemma)
    sentence.pos.append(pos)


def read_wordnet_index_sense(path: str | Path) -> dict[tuple[str, str], list[str]]:
    """WordNet 3.0 ``index.sense`` -> {(lemma, POS): sense keys in sense-number order (first = most frequent)}.

    Lines are ``sense_key synset_offset sense_number tag_cnt``; the lemma is the key before ``%`` and the digit
    after it is the synset type: 1 NOUN, 2 VERB, 3 and 5 (satellite) ADJ, 4 ADV.
    """
    ranked: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for number, line in _iter_lines(path):
        if _is_blank(line):
            continue
        fields = line.split(" ")
        lemma, _, lex = fields[0].partition("%")
        if len(fields) != 4 or not lemma or lex[:1] not in _WN_SS_TYPE_POS or not fields[2].isdigit():
            raise DataFormatError(path, number, f"not an index.sense line: {line[:60]!r}",
                                  "expected 'lemma%ss_type:lex_filenum:lex_id:head:head_id offset sense_no tag_cnt'")
        ranked.setdefault((lemma, _WN_SS_TYPE_POS[lex[0]]), []).append((int(fields[2]), fields[0]))
    return {key: [sense for _, sense in sorted(senses)] for key, senses in ranked.items()}


def first_sense(index: dict[tuple[str, str], list[str]], lemma: str, pos: str) -> str | None:
    """The WordNet first sense key of ``lemma`` (lower-cased, spaces as ``_``) with POS NOUN/VERB/ADJ/ADV, or None."""
    senses = index.get((lemma.lower().replace(" ", "_"), pos))
    return senses[0] if senses else None

