"""What the command line shows on stderr: the library's log messages and warnings, and errors as one line."""

from __future__ import annotations

import errno
import logging
import sys

from elmo.errors import ElmoError


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a message is logged (tests and progress bars swap
    it), not the stream it was made with."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _MessageFormatter(logging.Formatter):
    """``elmo: message`` for information, ``elmo: warning: message`` for warnings (and so on up)."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        text = f"elmo: {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(quiet: bool = False, debug: bool = False) -> None:
    """Show the library's messages (the ``elmo`` loggers) on stderr: information and up, warnings and up with
    ``quiet``, everything with ``debug``. Called by :func:`elmo.cli.main`; the library itself never configures
    logging."""
    root = logging.getLogger("elmo")
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)  # main() may run more than once in a process (tests)
    handler = _StderrHandler()
    handler.setFormatter(_MessageFormatter())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the command line: the message alone, through logging (no source line)."""
    logging.getLogger("elmo").warning("%s", message)


_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_ENVIRONMENT_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)
_WHAT_TO_DO = {  # the system's words say what happened; these say what to do
    FileExistsError: ": it is in the way; give another path, or move it",
    NotADirectoryError: " (a part of the path is a file): give a folder's path, or move the file",
    IsADirectoryError: " (a folder is where a file is needed): give a file's path",
}


def users_to_fix(err: BaseException) -> bool:
    """True for an error the user can fix (ours, or the file system's: a missing file, no permission, a full
    disk): one line. False for anything else, a bug in elmo, which keeps its traceback."""
    if isinstance(err, ElmoError):
        return True
    return isinstance(err, OSError) and (isinstance(err, _ENVIRONMENT_ERRORS) or err.filename is not None
                                         or err.errno in _DISK_FULL)


def one_line(err: BaseException) -> str:
    """The error as one line: ours as written; an OSError from the system as ``file: what happened``."""
    if isinstance(err, OSError) and not isinstance(err, ElmoError) and err.strerror:
        names = " -> ".join(str(n) for n in (err.filename, err.filename2) if n is not None)
        what = err.strerror + _WHAT_TO_DO.get(type(err), "")
        return f"{names}: {what}" if names else what
    return " ".join(str(err).split("\n")) or type(err).__name__
