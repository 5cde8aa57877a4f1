"""Splitting running text into sentences: a small rule-based splitter, good enough for LM training text."""

from __future__ import annotations

import re

_BREAK = re.compile(r"<br\s*/?>|\n+", re.IGNORECASE)
# end punctuation (optionally closed by quotes or brackets), whitespace, then something that can start a sentence
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|Mt|No|Vol|Inc|Ltd|Co)|\b[A-Z])\.$")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph; HTML line breaks and newlines always end one."""
    sentences: list[str] = []
    for block in _BREAK.split(text):
        start = 0
        for match in _BOUNDARY.finditer(block):
            candidate = block[start : match.start()].rstrip()
            if _ABBREVIATION.search(candidate):
                continue  # "Mr. Smith", "U. S. Grant": not an end
            sentences.append(block[start : match.end()].strip())
            start = match.end()
        rest = block[start:].strip()
        if rest:
            sentences.append(rest)
    return [s for s in sentences if s]
