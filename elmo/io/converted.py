"""Official weights converted once: the first load of an ``options.json`` + ``.hdf5`` pair writes the model in our
format into the cache, and later loads of the same pair read that copy (a memory-mapped safetensors file) instead of
reading and rearranging the HDF5 datasets again.

The copy lives in ``$ELMO_CACHE/converted/<key>/`` (default ``~/.cache/elmo``), where the key is the sha256 of the
weight file and of the options file together, so an edited file never meets a stale copy. Hashing a weight file of
hundreds of MB takes a while, so ``index.json`` remembers each file's hash under its path, size, modification time,
inode and status change time. The key is taken before the files are read, and a copy is kept only if the files
still have it afterwards. Every write is atomic (a temporary folder renamed into place); ``clear()`` (``elmo cache
clear``) deletes the converted copies and nothing else. ``ELMO_CONVERT_CACHE=0`` turns the cache off. A copy is
trusted as any model in our format is (its header is checked on load, its values are not hashed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from elmo.errors import UsageError
from elmo.io.atomic import atomic_path, folder_bytes, is_temporary_name
from elmo.io.download import cache_dir, env_switch
from elmo.io.work_folder import file_sha256
from elmo.io.native import CONFIG_NAME, WEIGHTS_NAME

logger = logging.getLogger(__name__)
FOLDER = "converted"
INDEX = "index.json"


def enabled() -> bool:
    """Whether converted copies are kept and read: ``ELMO_CONVERT_CACHE`` on (the default) or off."""
    return env_switch("ELMO_CONVERT_CACHE", True)


def root() -> Path:
    return cache_dir() / FOLDER


def key(options_file: str | Path, weight_file: str | Path) -> str:
    """sha256 of the two files' hashes: the name of the pair's converted copy."""
    both = f"{_file_hash(Path(options_file))}:{_file_hash(Path(weight_file))}"
    return hashlib.sha256(both.encode()).hexdigest()


def pair_key(options_file: str | Path, weight_file: str | Path) -> str | None:
    """The pair's key, taken before its files are read (``store`` keeps a copy only under the key of what was read);
    None when the cache is off or a file is missing (the loader then says which)."""
    if not enabled() or not (Path(options_file).is_file() and Path(weight_file).is_file()):
        return None
    return key(options_file, weight_file)


def lookup(pair: str | None) -> Path | None:
    """The converted copy of the pair whose key is ``pair`` (``pair_key``), if one was made; None otherwise."""
    if pair is None:
        return None
    folder = root() / pair
    try:
        return folder if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() else None
    except OSError:  # a copy this user may not read: the official files are read instead
        return None


def store(pair: str | None, options_file: str | Path, weight_file: str | Path, write) -> Path | None:
    """Write the copy of the pair read under the key ``pair`` with ``write(folder)`` (our format's saver) into a
    temporary folder, then rename it into place. Nothing is kept when a file of the pair changed since its key was
    taken (a copy of what was read would be filed under the new bytes' key). A failure (a full disk, a read-only
    cache) is logged and costs nothing but the next load's speed."""
    if pair is None:
        return None
    try:
        if key(options_file, weight_file) != pair:
            logger.info("%s changed while it was read; no converted copy kept", weight_file)
            return None
    except OSError:  # moved or deleted meanwhile
        return None
    target = root() / pair
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name[:12]}.", suffix=LEFTOVER_SUFFIX, dir=target.parent))
        try:
            write(work)
            os.replace(work, target)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            if not target.is_dir():
                raise
        logger.info("converted %s once into %s; later loads read that copy", weight_file, target)
        return target
    except OSError as err:
        logger.warning("could not keep a converted copy of %s in %s (%s); loading works, only slower", weight_file,
                       target.parent, err.strerror or err)
        return None


def clear() -> tuple[int, int, int]:
    """Delete every converted copy, the leftovers of interrupted writes and the hash index, nothing else; returns
    (copies, leftovers, bytes) removed. An ``index.json`` that is not elmo's index (a user's file, a link, a
    folder) is kept."""
    folder = _existing_root()
    if folder is None:
        return 0, 0, 0
    copies = leftovers = size = 0
    for entry in _entries(folder, leftovers=True):
        size += folder_bytes(entry)
        shutil.rmtree(entry)
        copies += is_key(entry.name)
        leftovers += not is_key(entry.name)
    if _read_index(folder / INDEX) is None:
        logger.warning("%s: not elmo's hash index (a file of yours, a link or a folder); left as it is",
                       folder / INDEX)
    else:
        (folder / INDEX).unlink(missing_ok=True)
    return copies, leftovers, size


def discard(copy: Path) -> None:
    """Delete one converted copy that cannot be read (the next load converts the pair again); a folder holding
    anything but a copy's files is left as it is."""
    if not copy.is_dir():  # already gone (`elmo cache clear` in another process): nothing to do
        return
    try:
        if copy.parent == root() and is_key(copy.name) and not copy.is_symlink() and _holds_only_a_copy(copy) \
                and _is_complete(copy):
            shutil.rmtree(copy, ignore_errors=True)
    except OSError:  # one this user may not read or remove: left, the official files are read instead
        pass


def copies() -> list[Path]:
    """The converted copies in the cache (what ``clear`` deletes, but for leftovers of interrupted writes)."""
    folder = _existing_root()
    return sorted(_entries(folder, leftovers=False)) if folder is not None else []


def _existing_root() -> Path | None:
    """The folder of converted copies, or None when there is none yet; a cache path that is a file (``ELMO_CACHE``
    naming one) is an error: listing or clearing it would report an empty cache that can never hold a copy."""
    folder = root()
    there = next(p for p in (folder, *folder.parents) if p.exists())
    if not there.is_dir():
        raise UsageError(f"{there}: a file, where elmo's cache folder {cache_dir()} is expected (ELMO_CACHE, or "
                         f"~/.cache/elmo); move the file, or point ELMO_CACHE at a folder")
    return folder if there == folder else None


def _entries(folder: Path, leftovers: bool) -> Iterator[Path]:
    """Folders of ours in ``folder``: named by a key (or, with ``leftovers``, a temporary folder of ``store``),
    not a link, and holding nothing but a copy's files; a key-named folder holding more is left, with a warning."""
    for entry in folder.iterdir():
        named = is_key(entry.name) or (leftovers and entry.name.startswith(".") and _is_key_prefix(entry.name))
        if not named or entry.is_symlink() or not entry.is_dir():
            continue
        if _holds_only_a_copy(entry) and (not is_key(entry.name) or _is_complete(entry)):
            yield entry
        else:
            logger.warning("%s: named like a converted copy but is not one (other files, or not a whole copy); "
                           "left as it is", entry)


COPY_FILES = (CONFIG_NAME, WEIGHTS_NAME)  # what ``store``'s writer (our format's saver) puts in a copy


def _holds_only_a_copy(folder: Path) -> bool:
    """Whether every entry of ``folder`` is a plain file a copy consists of (or the saver's temporary file of
    one): the only folders ``clear`` deletes."""
    for entry in folder.iterdir():
        name = entry.name
        temporary = name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{f}.") for f in COPY_FILES)
        if entry.is_symlink() or not entry.is_file() or not (name in COPY_FILES or temporary):
            return False
    return True


def _is_complete(folder: Path) -> bool:
    """A key-named folder of ours always holds a whole copy (``store`` renames a finished one into place): an empty
    or partial one is not ours."""
    return all((folder / name).is_file() for name in COPY_FILES)


def is_key(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


LEFTOVER_SUFFIX = ".tmp"  # ``store``'s temporary folder: "." + the key's first 12 hex digits + "." + 8 random
# characters + ".tmp" (before the suffix was added: no ".tmp")


def _is_key_prefix(name: str) -> bool:
    """A temporary folder of ``store``, by its exact pattern (a user's ".0123456789ab.mine" is not one)."""
    prefix = name[:14]
    return (len(prefix) == 14 and prefix[0] == "." and prefix[13] == "."
            and all(c in "0123456789abcdef" for c in prefix[1:13])
            and (is_temporary_name(name, prefix, LEFTOVER_SUFFIX) or is_temporary_name(name, prefix, "")))


def _file_hash(path: Path) -> str:
    """sha256 of a file, remembered under its resolved path, size and modification time (in elmo's ``index.json``;
    an ``index.json`` that is not elmo's is neither replaced nor written through: the hash is computed each time)."""
    stat = path.stat()
    # the inode and the status change time too: `cp -p`, `rsync -a` or a tar keep a new file's size and mtime
    entry = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}|{stat.st_ctime_ns}"
    index_path = root() / INDEX
    index = _read_index(index_path)
    digest = index.get(entry) if index else None
    if digest is not None:
        return digest
    digest = file_sha256(path)
    if index is None:
        logger.debug("%s: not elmo's hash index; left as it is", index_path)
        return digest
    index[entry] = digest
    try:
        index_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(index_path) as tmp:
            tmp.write_text(json.dumps(index, indent=0), encoding="utf-8")
    except OSError:
        pass  # an unwritable cache: the hash is computed again next time
    return digest


def _read_index(path: Path) -> dict[str, str] | None:
    """elmo's hash index at ``path`` ({} when there is none), or None when something else has that name: a user's
    file, a link (writing it would write its target, outside the cache) or a folder, which elmo must not replace or
    delete. elmo writes its index whole (atomically), so its own is always a JSON object of hashes."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return None
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or not all(isinstance(k, str) and isinstance(v, str) and is_key(v)
                                              for k, v in index.items()):
        return None
    return index
