"""Atomic file writes: write beside the target, then rename, so a crash never leaves half a file."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from safetensors import SafetensorError

from elmo.errors import ElmoError, InputTypeError, UsageError

_NO_SPACE = ("no space left on device", "errno = 28", "disk quota exceeded", "errno = 122")


class NotAFileError(ElmoError, OSError):
    """An output path that names something other than a regular file (a device, a pipe, a socket, a folder):
    replacing it with a file would destroy it."""


class DiskWriteError(ElmoError, OSError):
    """A file could not be written for a reason outside elmo (a full disk, an I/O error): one line naming the file
    and, for a full disk, how much space there is and how much was needed."""


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success it replaces ``target``, on error it is removed.

    The result gets the permissions a plain ``open(target, "w")`` would give it (the old file's mode when it
    replaces one, otherwise 0o666 minus the umask), not the private 0o600 of a temporary file. A symbolic link is
    written through (its target file is replaced, the link stays); a target that exists and is not a regular file
    (``/dev/null``, a pipe, a folder) is refused: the rename would put a file in its place.
    """
    target = writable_file(target)
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


STALE_SECONDS = 3600  # a temporary file or folder untouched this long belongs to a process that is gone
_RANDOM_NAME = set("abcdefghijklmnopqrstuvwxyz0123456789_")  # the 8 characters tempfile puts in its names


def is_temporary_name(name: str, prefix: str, suffix: str = ".tmp") -> bool:
    """Whether ``name`` is exactly what ``tempfile`` makes of ``prefix`` and ``suffix``: 8 random characters
    between them (a user's ".w.hdf5.my-notes.tmp" is not)."""
    middle = name[len(prefix) : len(name) - len(suffix)] if name.startswith(prefix) and name.endswith(suffix) else ""
    return len(name) == len(prefix) + 8 + len(suffix) and len(middle) == 8 and set(middle) <= _RANDOM_NAME


def remove_stale_temporaries(folder: str | Path, prefix: str) -> int:
    """Remove what killed writers left in ``folder`` (SIGKILL or a power cut give no chance to clean up): names of
    exactly ``prefix`` + tempfile's 8 random characters + ".tmp", plain files or folders (not links), untouched
    for ``STALE_SECONDS`` (a running write keeps touching them). Returns how many were removed."""
    folder, removed = Path(folder), 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        if not is_temporary_name(entry.name, prefix) or entry.is_symlink():
            continue
        try:
            touched = max([entry.stat().st_mtime] + [p.stat().st_mtime for p in entry.rglob("*")]
                          if entry.is_dir() else [entry.stat().st_mtime])
            if now - touched < STALE_SECONDS:
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            removed += 1
        except OSError:  # gone meanwhile, or not ours to remove: left
            continue
    return removed


@contextmanager
def new_folders(folder: str | Path) -> Iterator[Path]:
    """Make ``folder`` and its missing parents; if the block then fails, remove the ones made here that are still
    empty (a failed run leaves nothing behind; a folder that received something, such as resumable parts, stays)."""
    folder = Path(folder)
    made = make_folders(folder)
    try:
        yield folder
    except BaseException:
        remove_empty(made)
        raise


def make_folders(folder: str | Path) -> list[Path]:
    """Make ``folder`` and its missing parents; the ones made here, innermost first (for ``remove_empty``). A file
    where one of them belongs is a ``NotAFileError`` naming it (``mkdir``'s own error names only ``folder``)."""
    folder = Path(folder)
    missing = [p for p in (folder, *folder.parents) if not p.exists()]  # innermost first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotAFileError(file_in_the_way(folder)) from None
    return missing


def blocking_file(folder: str | Path) -> Path | None:
    """``folder`` or the first of the folders above it that exists and is not a folder (a file), or None."""
    folder = Path(folder)
    return next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)


def file_in_the_way(folder: str | Path) -> str | None:
    """Why the folder ``folder`` cannot be made, or None: it, or one of the folders above it, is something else
    than a folder (a file). One line naming both."""
    folder = Path(folder)
    blocking = blocking_file(folder)
    if blocking is None:
        return None
    if blocking == folder:
        return f"{folder}: is a file, where a folder is to be written: give a folder's path, or move the file away"
    return (f"{folder}: cannot be made, as {blocking} is a file, not a folder: give another folder, or move the file "
            f"away")


def remove_empty(made: list[Path]) -> None:
    """Remove the folders ``make_folders`` made that are still empty, innermost first (a folder that received
    something stays, and so do its parents)."""
    for folder in made:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            break


class FolderInUseError(ElmoError, FileExistsError):
    """An output folder that holds files a whole-folder write did not make: replacing the folder would lose them."""


def check_replaceable_folder(folder: str | Path, names: tuple[str, ...]) -> None:
    """``atomic_folder``'s check, to run before the work: ``folder`` is absent, empty, or holds exactly ``names``
    (an earlier output of the same command, all regular files); otherwise ``FolderInUseError`` names what is there."""
    folder = Path(folder)
    check_name_room(folder)
    if folder.is_symlink():
        try:
            folder.resolve(strict=True)
        except (OSError, RuntimeError):  # dangling, or a loop of links (RuntimeError before Python 3.13)
            raise FolderInUseError(f"{folder}: a symbolic link that leads nowhere; give a folder's path") from None
    if not folder.exists():
        return
    if not folder.is_dir():
        raise FolderInUseError(f"{folder}: is a file; this command writes a folder of files: give a folder (a new "
                               f"or empty one)")
    entries = sorted(folder.iterdir())
    if not entries or ({p.name for p in entries} == set(names) and all(p.is_file() for p in entries)):
        return
    other = next((p for p in entries if p.name not in names or not p.is_file()), entries[0])
    raise FolderInUseError(f"{folder}: holds {other.name} and is not an earlier output of this command (which "
                           f"writes {', '.join(names)} as one folder); give a new or empty folder")


@contextmanager
def atomic_folder(folder: str | Path, names: tuple[str, ...]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``folder`` to write ``names`` into; on success it becomes ``folder``
    (an earlier output there, checked by ``check_replaceable_folder``, is replaced as a whole), on error it is
    removed with any parent folders made for it. Readers never see a half-written folder or old and new files
    mixed."""
    check_replaceable_folder(folder, names)
    folder = Path(os.path.realpath(folder))  # a link to a folder: the folder is replaced, the link stays
    with new_folders(folder.parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        try:
            yield tmp
            missing = [name for name in names if not (tmp / name).is_file()]
            if missing:
                raise RuntimeError(f"{tmp}: {missing[0]} was not written")  # a bug of the caller's
            os.chmod(tmp, 0o777 & ~_umask())
            check_replaceable_folder(folder, names)  # again: something may have arrived meanwhile
            if folder.exists() and any(folder.iterdir()):
                _swap(folder, tmp)
            else:
                os.replace(tmp, folder)  # a new name, or onto an empty folder
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _swap(folder: Path, new: Path) -> None:
    """Put folder ``new`` in the place of ``folder`` (both in one parent), which is then deleted. An interrupt or an
    error before the new one is in place puts the earlier one back; once it is, the earlier one is deleted whole
    even if an interrupt comes meanwhile (which is raised after), so no hidden copy of it is left behind."""
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
    os.replace(folder, old)  # onto the empty placeholder
    try:
        os.replace(new, folder)
    except BaseException:
        os.replace(old, folder)
        raise
    try:
        shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(old, ignore_errors=True)
        raise


WORK_NAME_EXTRA = 14  # ".NAME.XXXXXXXX.tmp": the longest name elmo gives a temporary or lock file beside NAME


def check_name_room(path: str | Path) -> None:
    """Refuse an output name too long for the temporary and lock files elmo writes beside it (the file system's
    own error would name those files, not the user's)."""
    path = Path(path)
    try:
        limit = os.pathconf(path.parent if path.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    if (size := len(os.fsencode(path.name))) + WORK_NAME_EXTRA > limit:
        raise UsageError(f"{path}: a name of {size} bytes; elmo writes temporary and lock files beside it under "
                         f"names {WORK_NAME_EXTRA} bytes longer, past this file system's limit of {limit}: give a "
                         f"name of at most {limit - WORK_NAME_EXTRA} bytes")


def writable_file(target: str | Path) -> Path:
    """The path an atomic write of ``target`` replaces: ``target`` itself, or the file a symbolic link points to.
    Raises ``NotAFileError`` when that exists and is not a regular file."""
    target = Path(target)
    check_name_room(target)
    if target.is_symlink() and target.exists() and not target.is_file():  # e.g. /dev/stdout: its pipe has no path
        kind = "a folder" if target.is_dir() else "a device, a pipe or a socket, not a regular file"
        raise NotAFileError(f"{target}: leads to {kind}; writing would replace it: give the path of a file")
    if target.is_symlink():
        try:
            target = target.resolve(strict=False)
        except (RuntimeError, OSError):  # a loop of links
            raise NotAFileError(f"{target}: a symbolic link that leads back to itself; give the path of a file") from None
        if not target.parent.is_dir():
            raise NotAFileError(f"{target}: the symbolic link points into a folder that does not exist; fix the "
                                f"link or give another path")
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a device, a pipe or a socket)"
        raise NotAFileError(f"{target}: is {kind}; writing would replace it: give the path of a file")
    return target


def path_argument(value: object, what: str) -> Path:
    """A path given to the Python API (``str`` or ``os.PathLike``, not empty) as a ``Path``; anything else is an
    ``InputTypeError`` naming the argument (pathlib's own error names neither)."""
    if isinstance(value, str) and not value:
        raise UsageError(f"{what}: an empty path; give a file or folder name")
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise InputTypeError(f"{what} must be a path (str or pathlib.Path), got {type(value).__name__}")
    return Path(value)


def output_folder(value: object, what: str) -> Path:
    """``path_argument`` for a folder to write into: a file in its place is refused in one line."""
    folder = path_argument(value, what)
    if folder.exists() and not folder.is_dir():
        raise NotAFileError(f"{folder}: is a file; {what} is a folder to write into: give a folder's path")
    return folder


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when two names are one file: the same path after links are followed, or the same inode (a hard link)."""
    a, b = Path(a), Path(b)
    try:
        if a.resolve() == b.resolve():
            return True
        return os.path.samefile(a, b)
    except (OSError, RuntimeError):  # a missing file, or a loop of links (RuntimeError before Python 3.13)
        return False


def sync_file(path: str | Path) -> None:
    """Flush a written file's bytes to disk (before a rename makes it count, or older copies are deleted), where the
    file system allows it."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as err:
        if err.errno != errno.EINVAL:  # EINVAL: a file system that cannot sync; anything else is a failed write
            raise
    finally:
        os.close(descriptor)


def sync_folder(folder: str | Path) -> None:
    """Flush a folder's entries to disk (a rename into it survives a power cut), where the system allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def refuse_model_file(output: str | Path, model_files: Iterable[Path]) -> None:
    """A ``UsageError`` when ``output`` is (or links to) one of the files a model was loaded from
    (``BiLM.source_files``): writing would replace the model being used, as the command line refuses."""
    for file in model_files:
        if same_file(output, file):
            raise UsageError(f"{output}: is {file}, a file of the model in use; writing would replace it: give "
                             f"another output")


def new_file_mode() -> int:
    """0o666 minus the process umask."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def folder_bytes(folder: str | Path) -> int:
    """The bytes of the plain files in ``folder`` and below (links not followed): what deleting it frees."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())


def free_bytes(path: str | Path) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def size_text(n: float) -> str:
    """A byte count for people: "12.3 MB"."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} TB"


def check_free_space(path: str | Path, needed: int, what: str) -> None:
    """Refuse, before writing, work that needs more room than the disk has: one line with both figures."""
    free = free_bytes(path)
    if needed > free:
        raise DiskWriteError(f"{path}: {what} needs about {size_text(needed)}, and the disk has {size_text(free)} "
                             f"free; free some space or write elsewhere")


def is_disk_full(err: BaseException) -> bool:
    """True for an error that says the disk (or the quota) is full, from the OS or from a library's message."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return True
    return any(sign in str(err).lower() for sign in _NO_SPACE)


@contextmanager
def write_errors(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn a failed write inside the block (an OSError, or a library's error that says the disk is full) into one
    :class:`DiskWriteError` line naming ``path``; ``needed``: the bytes the whole write needs, to say so."""
    try:
        yield
    except DiskWriteError:
        raise
    except Exception as err:
        # safetensors reports a failed write as its own type: "I/O error: File too large (os error 27)"
        io_failure = isinstance(err, SafetensorError) and "i/o error" in str(err).lower()
        if not (isinstance(err, OSError) or is_disk_full(err) or io_failure):
            raise
        if is_disk_full(err):
            need = f"about {size_text(needed)} needed, " if needed else ""
            raise DiskWriteError(f"{path}: the disk is full ({need}{size_text(free_bytes(path))} free); free some "
                                 f"space or write elsewhere") from None
        first = " ".join(str(err).split())[:200]
        raise DiskWriteError(f"{path}: cannot write ({first})") from None
