"""``-`` on the command line: standard input read once into a temporary file, outputs copied to standard output."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from elmo.cli.common import STDIO, CommandLineError

logger = logging.getLogger(__name__)


class Stdio:
    """``-`` on the command line: standard input copied once to a temporary file (some readers read their input
    twice, or need a name), and outputs written to a temporary file that is then copied to standard output.

    Messages that name the temporary copy are shown with ``<stdin>`` in its place (:meth:`display`).
    """

    def __init__(self) -> None:
        self._root: Path | None = None
        self._stdin: Path | None = None

    def _folder(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="elmo-stdio-"))
        return self._root

    def input(self, name: str) -> str:
        """``name``, or for ``-`` the path of a copy of standard input (made on first use: stdin is read once)."""
        if name != STDIO:
            return name
        if self._stdin is None:
            if sys.stdin is None:
                raise CommandLineError("-: there is no standard input to read; give a file name")
            if sys.stdin.isatty():
                logger.info("reading standard input (end it with Ctrl-D)")
            path = self._folder() / "stdin"
            with open(path, "wb") as f:
                shutil.copyfileobj(getattr(sys.stdin, "buffer", None) or _EncodedText(sys.stdin), f)
            self._stdin = path
        return str(self._stdin)

    def inputs(self, names: list[str]) -> list[str]:
        return [self.input(name) for name in names]

    @contextlib.contextmanager
    def output(self, name: str) -> Iterator[str]:
        """A path to write ``name`` to: ``name`` itself, or for ``-`` a temporary file copied to standard output
        once written (the writers write atomically, by name)."""
        if name != STDIO:
            yield name
            return
        path = self._folder() / "stdout"
        yield str(path)
        sys.stdout.flush()
        with open(path, "rb") as f:
            if buffer := getattr(sys.stdout, "buffer", None):
                shutil.copyfileobj(f, buffer)
                buffer.flush()
            else:
                sys.stdout.write(f.read().decode("utf-8"))

    def display(self, message: str) -> str:
        """``message`` with the temporary copy of standard input named ``<stdin>``."""
        if self._stdin is not None:
            for form in {str(self._stdin.resolve()), str(self._stdin)}:
                message = message.replace(form, "<stdin>")
        return message

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = self._stdin = None


class _EncodedText:
    """A text stream read as UTF-8 bytes (``shutil.copyfileobj`` source), for a ``sys.stdin`` without ``.buffer``."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size).encode("utf-8")


def written_to(name: str) -> str:
    """How a result line names an output: the file name, or standard output for ``-``."""
    return "standard output" if name == STDIO else name
