"""The library's own error types: mistakes a user can fix (a bad file, a wrong argument, a missing package).

The command line prints an ``ElmoError`` as one line and exits 1; any other exception is a bug in elmo and keeps
its traceback. Each type also derives from the built-in error it refines (``ValueError``, ``TypeError`` ...), so
code that catches the built-in type keeps working.
"""

from __future__ import annotations


class ElmoError(Exception):
    """Base of every error that is the user's to fix; its message is one line that names the place and the fix."""


class UsageError(ElmoError, ValueError):
    """An argument or setting outside what the function or command accepts."""


class InputTypeError(ElmoError, TypeError):
    """A Python argument of the wrong type (a string where tokens are expected, ...)."""


class MissingDependencyError(ElmoError, ImportError):
    """An optional package that this feature needs is not installed."""
