"""What every reader shares: the error type, and the file read as numbered lines or blank-separated blocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from elmo.errors import ElmoError
from elmo.io.text_lines import TextLineError, numbered_lines


class DataFormatError(ElmoError, ValueError):
    """A dataset file is not in the expected format; the message reads ``path:line: what was wrong; what to do``."""

    def __init__(self, path: str | Path, line: int, problem: str, hint: str) -> None:
        super().__init__(f"{path}:{line}: {problem}; {hint}")
        self.path = str(path)
        self.line = line


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line)``, split on ``"\\n"`` only, one trailing ``"\\r"`` removed."""
    try:
        yield from numbered_lines(path)
    except TextLineError as err:
        raise DataFormatError(path, err.line, err.problem, err.hint) from None


def is_blank(line: str) -> bool:
    """Blank for sentence breaks: only spaces, tabs or BOMs (WNUT-17 train uses a lone TAB, its dev a lone BOM)."""
    return not line.strip(" \t\ufeff")


def iter_blocks(path: str | Path) -> Iterator[list[tuple[int, str]]]:
    """Yield the runs of non-blank numbered lines; blank lines separate them."""
    block: list[tuple[int, str]] = []
    for number, line in iter_lines(path):
        if is_blank(line):
            if block:
                yield block
            block = []
        else:
            block.append((number, line))
    if block:
        yield block
