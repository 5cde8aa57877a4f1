"""An exclusive lock on an output (an embedding file, a training run folder): one writer at a time.

The lock is ``fcntl.flock`` on a small hidden file that holds the writer's process id. The kernel drops it when the
process ends, however it ends, so a killed run never leaves a lock behind (its file, if any, is taken over by the
next run and removed when that one finishes). A second writer gets one line: "in use by pid N".
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from pathlib import Path

from elmo.errors import ElmoError

logger = logging.getLogger(__name__)

_HELD: dict[str, "OutputLock"] = {}  # this process's locks by lock file: taking one again is allowed (re-entrant)


class InUseError(ElmoError, RuntimeError):
    """Another process is writing the same output."""


class NotWritableError(ElmoError, OSError):
    """The output's folder does not take new files (a read-only file system, no permission)."""


class OutputLock:
    """Hold ``lock_file`` exclusively; ``what`` names the output in the refusal. Re-entrant within one process."""

    def __init__(self, lock_file: str | Path, what: str) -> None:
        self.path, self.what = Path(lock_file), what
        self._fd: int | None = None
        self._count = 0

    def acquire(self) -> "OutputLock":
        """Take the lock, or raise :class:`InUseError` naming the process that holds it."""
        key = str(self.path.absolute())
        held = _HELD.get(key)
        if held is not None:
            held._count += 1
            return held
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:  # the first file elmo makes beside the output: name the output
                raise NotWritableError(f"{self.what}: cannot write in {self.path.parent} ({err.strerror or err}); "
                                       f"choose an output in a folder you can write to") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise InUseError(f"{self.what}: in use by pid {owner} (another elmo run is writing it); wait for it "
                                 f"to finish, or choose another output") from None
            try:  # the file may have been removed by the previous holder between open and flock: lock the new one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        found = os.pread(fd, 64, 0)
        if found and not re.fullmatch(rb"[0-9]+\n?", found):  # a file of the user's by that name: not taken over
            os.close(fd)
            raise InUseError(f"{self.path}: a file of that name is in the way of the lock (it holds no process id, "
                             f"so it is not a lock of elmo's); move it away")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd, self._count = fd, 1
        _HELD[key] = self
        return self

    def release(self) -> None:
        """Give the lock back (the last release of a re-entrant hold removes the lock file)."""
        self._count -= 1
        if self._count > 0 or self._fd is None:
            return
        _HELD.pop(str(self.path.absolute()), None)
        try:
            self.path.unlink(missing_ok=True)  # removed while still held: the next writer locks a fresh file
        except OSError as err:
            logger.debug("lock file %s not removed: %s", self.path, err)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        _HELD.get(str(self.path.absolute()), self).release()


def lock_beside(output: str | Path, what: str | None = None) -> OutputLock:
    """The lock of an output file: ``.NAME.lock`` in the same folder."""
    output = Path(output)
    return OutputLock(output.parent / f".{output.name}.lock", what or str(output))
