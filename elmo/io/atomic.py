"""Atomic file writes: write beside the target, then rename, so a crash never leaves half a file."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success it replaces ``target``, on error it is removed.

    The result gets the permissions a plain ``open(target, "w")`` would give it (the old file's mode when it
    replaces one, otherwise 0o666 minus the umask), not the private 0o600 of a temporary file.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, target.stat().st_mode & 0o7777 if target.exists() else new_file_mode())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def new_file_mode() -> int:
    """0o666 minus the process umask (read by setting it and putting it back)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask
