"""Classification formats: SST PTB-style trees, the ``stsa.*`` sentence files, label/text TSV files (NSMC)."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from elmo.limits import is_digits
from elmo.tasks.readers.common import DataFormatError, is_blank, iter_lines


@dataclass
class LabelledText:
    """One text for classification; ``text`` is the raw text as in the file, ``label`` the label as a string."""

    text: str
    label: str
    line: int = field(default=0, compare=False)  # where it is in its file, counting from 1 (0: not from a file)


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
    for number, line in iter_lines(path):
        if is_blank(line):
            continue
        label, leaves = _parse_tree(line, path, number)
        items.append(LabelledText(" ".join(leaves), label, number))
    return items


def _parse_tree(line: str, path: str | Path, number: int) -> tuple[str, list[str]]:
    """The root label and the leaves of one bracketed tree; DataFormatError when it is not one well-formed tree."""
    def fail(problem: str) -> DataFormatError:
        return DataFormatError(path, number, problem, "each line must hold one tree like '(3 (2 It) (4 works))'")

    depth, root_label, expect_label, closed = 0, None, False, False
    leaves: list[str] = []
    children: list[int] = []  # per open node: its children (nodes and words) so far
    for token in _TREE_TOKEN.findall(line):
        if closed:
            raise fail(f"text {token!r} after the tree's closing parenthesis (unbalanced parentheses)")
        if token == "(":
            if expect_label:
                raise fail("a node without a label")
            if children:
                children[-1] += 1
            children.append(0)
            depth, expect_label = depth + 1, True
        elif token == ")":
            if expect_label:
                raise fail("an empty node '()'")
            if depth == 0:
                raise fail("unbalanced parentheses: ')' before any '('")
            if children.pop() == 0:
                raise fail("a node with a label but no words")
            depth -= 1
            closed = depth == 0
        elif expect_label:
            if token not in _SST_LABELS:
                raise fail(f"{'root' if root_label is None else 'node'} label {token!r} is not one of 0..4")
            root_label = token if root_label is None else root_label
            expect_label = False
        elif depth == 0:
            raise fail(f"text {token!r} outside the tree")
        else:
            children[-1] += 1
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
    for number, line in iter_lines(path):
        if is_blank(line):
            continue
        label, _, text = line.partition(" ")
        if not is_digits(label) or not text.strip():
            raise DataFormatError(path, number, f"expected 'label sentence', found {line[:60]!r}",
                                  "each line must be a numeric label, one space, then the sentence")
        items.append(LabelledText(" ".join(_unescape_ptb_leaf(t) for t in text.split(" ")), label, number))
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
    lines = iter_lines(path)
    first = next(lines, None)
    if first is None:
        raise DataFormatError(path, 1, "empty file", f"expected a header naming {text_column!r} and {label_column!r}")
    header = _split_tsv(first[1], path, 1)
    missing = [name for name in (text_column, label_column) if name not in header]
    if missing:
        raise DataFormatError(path, 1, f"no column {', '.join(map(repr, missing))} in the header (columns found: "
                              f"{', '.join(map(repr, header))})",
                              f"rename the header's columns to {text_column!r} and {label_column!r} (NSMC's "
                              f"'document' is its text), or from Python pass text_column=/label_column=")
    repeated = [name for name in (text_column, label_column) if header.count(name) > 1]
    if repeated:
        raise DataFormatError(path, 1, f"the header names column {repeated[0]!r} {header.count(repeated[0])} times",
                              "rename or remove the extra column, so that it is clear which one is meant")
    text_at, label_at = header.index(text_column), header.index(label_column)
    items: list[LabelledText] = []
    for number, line in lines:
        if not line:
            continue
        fields = _split_tsv(line, path, number)
        if len(fields) != len(header):
            raise DataFormatError(path, number, f"{len(fields)} TAB-separated fields, the header has {len(header)}",
                                  "TABs inside a text must be replaced (the file uses no quoting)")
        if not fields[label_at].strip():
            raise DataFormatError(path, number, f"empty {label_column!r}", "give every line its label")
        if not fields[text_at].strip():
            raise DataFormatError(path, number, f"empty {text_column!r}", "remove the line or give it its text")
        items.append(LabelledText(fields[text_at], fields[label_at], number))
    return items
