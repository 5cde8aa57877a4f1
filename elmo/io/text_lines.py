"""Text files read line by line — plain or gzip (told by the magic bytes) — decoded one line at a time.

Decoding per line, not per buffered block, is what lets an invalid-UTF-8 error name the line it is on: a text-mode
reader decodes kilobytes ahead and fails while the caller is still at an earlier line. Lines split on ``"\\n"`` only
(``str.splitlines`` would also split on U+2028/U+0085, which occur inside some texts).
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from elmo.errors import ElmoError, UsageError
from elmo.limits import MAX_LINE_BYTES

GZIP_MAGIC = b"\x1f\x8b"
READ_ERRORS = (EOFError, OSError, zlib.error)  # what a damaged or truncated gzip stream raises


class TextLineError(ElmoError, ValueError):
    """A line that cannot be read as UTF-8 text; the message starts with ``path, line N:``."""

    def __init__(self, path: str | Path, line: int, problem: str, hint: str) -> None:
        super().__init__(f"{path}, line {line}: {problem}; {hint}")
        self.path, self.line, self.problem, self.hint = str(path), line, problem, hint


class NotUtf8Error(TextLineError):
    """The line's bytes are not UTF-8 (``byte``: where in the line); ``errors="replace"`` would get past it."""

    def __init__(self, path: str | Path, line: int, byte: int) -> None:
        super().__init__(path, line, f"not valid UTF-8 (byte {byte} of the line)",
                         "save the file as UTF-8, or fix or drop the line")
        self.byte = byte


_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"), (b"\xff\xfe", "UTF-16LE"),
              (b"\xfe\xff", "UTF-16BE"))


def wide_encoding(first_line: bytes) -> tuple[str, str] | None:
    """(what it is, iconv's name for it) of the UTF-16 or UTF-32 encoding a file's first line (its bytes, up to and
    with the first ``b"\\n"``) is in, or None: told by a byte-order mark, or without one by a NUL byte in every
    other place (ASCII text as UTF-16). Such text is refused, not read as UTF-8: ASCII in UTF-16 is valid UTF-8
    with a NUL beside every letter (and one line more, the NUL after the last newline), and ``errors="replace"``
    would get past a byte-order mark into the same garbage."""
    for bom, encoding in _WIDE_BOMS:
        if first_line.startswith(bom):
            return encoding, encoding[:6]  # iconv reads the byte order from the mark
    body = first_line.removesuffix(b"\n")
    if len(body) >= 2 and body.strip(b"\x00"):  # "1" in UTF-16LE is b"1\x00": a first line of one character
        if not body[1::2].strip(b"\x00"):
            return "UTF-16LE (no byte-order mark)", "UTF-16LE"
        if not body[0::2].strip(b"\x00"):
            return "UTF-16BE (no byte-order mark)", "UTF-16BE"
    return None


class _GzipOver(gzip.GzipFile):
    """A gzip stream over a file opened for it, closing that file too (``gzip.GzipFile(fileobj=...)`` leaves it
    open)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def open_binary(path: str | Path) -> BinaryIO:
    """The file's bytes, gunzipped if it is gzip. The file is opened once and its first bytes are looked at without
    being consumed, so a pipe (``<(...)``, ``/dev/stdin``, a named FIFO) is read whole: opening it a second time
    lost what the first look had buffered (4 KiB) or waited for ever for another writer."""
    raw = open(path, "rb")
    try:
        if raw.peek(2)[:2] == GZIP_MAGIC:
            return _GzipOver(raw)
    except BaseException:
        raw.close()
        raise
    return raw


class Utf8Lines:
    """Iterate a file's lines as ``str`` (with their ``"\\n"``), decoding each line on its own.

    ``number`` is the 1-based number of the last line returned. A UTF-8 error or a damaged gzip stream raises
    :class:`TextLineError` naming that line. ``errors`` is ``bytes.decode``'s (``"replace"`` substitutes U+FFFD).
    A UTF-8 byte-order mark at the start of the file is dropped; a UTF-16 or UTF-32 file (``wide_encoding``) is a
    :class:`TextLineError` at line 1, with or without ``errors="replace"``.
    """

    def __init__(self, path: str | Path, errors: str = "strict", max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path, self.errors, self.number = Path(path), errors, 0
        self.max_line_bytes = max_line_bytes  # a longer line is refused (its bytes are not read whole): a 1.5 GB
        # line of a 7 MB gzip file, or /dev/zero named as a vocabulary, ends in one line, not a MemoryError
        self._file = open_binary(path)

    def __iter__(self) -> "Utf8Lines":
        return self

    def __next__(self) -> str:
        try:
            raw = self._file.readline(self.max_line_bytes + 1)
        except READ_ERRORS as err:
            raise TextLineError(self.path, self.number + 1, f"damaged gzip data ({err})",
                                "download or compress the file again") from None
        if not raw:
            raise StopIteration
        self.number += 1
        if len(raw) > self.max_line_bytes and not raw.endswith(b"\n"):
            raise TextLineError(self.path, self.number, f"longer than {self.max_line_bytes:,} bytes",
                                "split it into sentences, one per line")
        if self.number == 1 and (wide := wide_encoding(raw)):
            raise TextLineError(self.path, 1, f"{wide[0]} text, not UTF-8",
                                f"save the file as UTF-8, e.g. iconv -f {wide[1]} -t UTF-8 IN > OUT")
        try:
            return raw.decode("utf-8-sig" if self.number == 1 else "utf-8", errors=self.errors)
        except UnicodeDecodeError as err:
            raise NotUtf8Error(self.path, self.number, err.start) from None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Utf8Lines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def numbered_lines(path: str | Path, errors: str = "strict",
                   max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """``(1-based number, line)`` with the ``"\\n"`` and one trailing ``"\\r"`` removed (``max_line_bytes``: a
    longer line is an error naming it)."""
    with Utf8Lines(path, errors, max_line_bytes) as lines:
        for line in lines:
            yield lines.number, line.removesuffix("\n").removesuffix("\r")


def sentence_lines(path: str | Path, errors: str = "strict",
                   max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """``numbered_lines`` of a file of one sentence per line: a carriage return inside a line (old Mac line ends)
    is an error naming it, since AllenNLP's reader would start a new sentence there and whitespace splitting would
    not (the same rule as ``elmo embed``'s)."""
    for number, line in numbered_lines(path, errors, max_line_bytes):
        yield number, one_sentence(path, number, line)


def one_sentence(path: str | Path, number: int, line: str) -> str:
    """Line ``number`` of ``path`` as one sentence: without its ``"\\n"`` and one trailing ``"\\r"``; a carriage
    return left inside it is a :class:`TextLineError` naming the line."""
    text = line.removesuffix("\n").removesuffix("\r")
    if "\r" in text:
        raise TextLineError(path, number, "a carriage return (\\r) inside the line (old Mac line ends?)",
                            "elmo reads one sentence per \\n: convert them first, e.g. tr '\\r' '\\n' < IN > OUT")
    return text


def count_lines(path: str | Path) -> int:
    """Lines in the file (an unterminated last line counts), without decoding."""
    count, last = 0, b"\n"
    with open_binary(path) as f:
        try:
            while chunk := f.read(1 << 20):
                count += chunk.count(b"\n")
                last = chunk[-1:]
        except READ_ERRORS as err:
            raise TextLineError(path, count + 1, f"damaged gzip data ({err})",
                                "download or compress the file again") from None
    return count + (last != b"\n")


@dataclass
class TextScan:
    """What one streaming pass over a text file found (:func:`scan_text`)."""

    lines: int
    tokens: int  # whitespace-separated, all lines together
    longest: int  # whitespace-separated tokens of the longest line
    longest_line: int  # its 1-based number (0 for an empty file)
    carriage_return_line: int = 0  # the first line with a "\r" inside it, not as part of its line end (0: none)
    sha256: str = ""  # of the decoded text: a resumed run checks it is the same text, not just the same size


def scan_text(path: str | Path, errors: str = "strict", max_line_bytes: int = MAX_LINE_BYTES) -> TextScan:
    """Decode every line once, before any work is done on the file: the first line that cannot be read raises its
    :class:`TextLineError` now (seconds), not after the lines before it were processed (hours)."""
    tokens = longest = longest_line = carriage_return_line = 0
    digest = hashlib.sha256()
    with Utf8Lines(path, errors, max_line_bytes) as lines:
        for line in lines:
            digest.update(line.encode("utf-8", "surrogatepass"))
            n = len(line.split())
            tokens += n
            if n > longest:
                longest, longest_line = n, lines.number
            if not carriage_return_line and "\r" in line and "\r" in line.removesuffix("\n").removesuffix("\r"):
                carriage_return_line = lines.number
        return TextScan(lines.number, tokens, longest, longest_line, carriage_return_line, digest.hexdigest())


def copy_open_text(handle: IO, name: str, copy: Path) -> None:
    """An open file (text or binary) copied to ``copy`` as UTF-8 bytes, so that it can be read twice. Refused in one
    line, naming the file as ``name``: a handle that cannot be read (closed, open for writing), text its own
    encoding cannot decode, a lone surrogate, and a lone ``\\r`` that text mode turned into a line break (as a
    named file's is: every later line would shift)."""
    try:
        binary = isinstance(handle.read(0), bytes)
    except (ValueError, OSError) as err:  # closed, or open for writing only (io.UnsupportedOperation)
        raise UsageError(f"{name}: cannot be read ({err}); pass a file open for reading, or its path") from None
    try:
        with open(copy, "wb" if binary else "w", encoding=None if binary else "utf-8") as out:
            shutil.copyfileobj(handle, out)
    except UnicodeEncodeError as err:  # a lone surrogate: text decoded with errors="surrogateescape"
        raise UsageError(f"{name}: holds {err.object[err.start:err.end]!r}, a lone surrogate, not text UTF-8 can "
                         f"hold (bytes decoded with errors='surrogateescape'?); open it as UTF-8, or in binary mode "
                         f"and pass errors='replace'") from None
    except UnicodeDecodeError as err:  # the handle's own decoding
        raise UsageError(f"{name}: not text in the encoding it was opened with ({err.reason} at byte {err.start} "
                         f"of a read); open it with encoding='utf-8', or in binary mode and pass errors='replace'") \
            from None
    seen = getattr(handle, "newlines", None)  # the line ends that reading in text mode translated
    if "\r" in ((seen,) if isinstance(seen, str) else seen or ()):
        raise UsageError(f"{name}: a carriage return (\\r) inside a line (old Mac line ends?), which reading the "
                         f"open file turned into a line break; elmo reads one sentence per \\n: convert them first "
                         f"(tr '\\r' '\\n'), or pass the file's path")
