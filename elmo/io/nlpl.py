"""NLPL repository models (http://vectors.nlpl.eu/repository): a .zip of ``options.json`` + ``model.hdf5``
(bilm-tf layout) [+ ``vocab.txt``, ``meta.json``, ``README``], the format simple_elmo reads.

Hundreds of ELMo models for other languages are published this way. A zip is unpacked once into the cache
directory (``$ELMO_CACHE`` or ``~/.cache/elmo``), under a folder named by the zip's sha256: its members are
streamed to a temporary folder (never read whole into memory), each checked against the size the zip records
(a zip bomb stops there), and the folder is renamed into place only when complete; it is reused while each file
has the size the zip records (one cut short is unpacked again). The models were trained on
whitespace-tokenised text, so no tokenizer is attached.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
import zipfile
import zlib
from itertools import islice
from pathlib import Path

from elmo.config import ConfigError, ElmoConfig
from elmo.errors import UsageError
from elmo.io.atomic import folder_bytes, is_temporary_name, remove_stale_temporaries
from elmo.io.converted import is_key
from elmo.io.download import cache_dir
from elmo.io.work_folder import file_sha256
from elmo.io.file_kinds import HDF5_KIND, describe_file
from elmo.io.native import ModelFileError
from elmo.io.official import WeightFileError, check_datasets, check_storage, dataset_shapes

log = logging.getLogger(__name__)

OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "model.hdf5"
VOCAB_NAME = "vocab.txt"
MEMBERS = (OPTIONS_NAME, WEIGHTS_NAME, VOCAB_NAME, "meta.json", "README")  # what is extracted; anything else is not
MAX_MEMBER_BYTES = 16 << 30  # no published ELMo weight file comes near (the largest are about 400 MB)
MAX_RATIO = 1000  # uncompressed / compressed: weights barely compress, text about 4x; far more is a bomb
CACHE_WORDS = 2_000  # the vocabulary's first (most frequent) words whose token vectors are precomputed at load
CHUNK = 1 << 20


def is_nlpl_folder(folder: str | Path) -> bool:
    """True for a folder laid out as an unpacked NLPL zip: options.json beside model.hdf5."""
    folder = Path(folder)
    return (folder / OPTIONS_NAME).is_file() and (folder / WEIGHTS_NAME).is_file()


def vocab_words(path: str | Path, limit: int = CACHE_WORDS) -> list[str] | None:
    """The first ``limit`` distinct words of an NLPL model's vocab.txt (one per line, most frequent first, as
    bilm-tf writes it; <S>, </S> and <UNK> included), or None when there is none. Read leniently: the words only
    seed a cache, so a repeated or damaged line is skipped rather than refused."""
    path = Path(path)
    if not path.is_file():
        return None
    words: dict[str, None] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in islice(f, limit * 2):
            word = line.strip()
            if word and " " not in word and "\ufffd" not in word:
                words.setdefault(word)
            if len(words) >= limit:
                break
    return list(words) or None


def unpack_nlpl_zip(archive: str | Path) -> Path:
    """The unpacked folder of an NLPL model zip (options.json + model.hdf5 [+ vocab.txt ...]), extracted into the
    cache the first time and reused after (keyed by the zip's sha256)."""
    archive = Path(archive)
    root = unpacked_root()
    target = root / file_sha256(archive)
    try:
        with zipfile.ZipFile(archive) as z:
            members = _members(archive, z)
            if is_nlpl_folder(target) and _unpacked_whole(target, members):
                return target
            _check_sizes(archive, members.values(), root)
            root.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(root, f".{target.name[:16]}.")  # an earlier unpacking of it killed midway
            tmp = _temporary_folder(root, f".{target.name[:16]}.", archive)
            try:
                for name, info in members.items():
                    _extract(archive, z, info, tmp / name)
                _check_unpacked(archive, tmp)  # a damaged model is refused naming the zip, and nothing is kept
                if target.exists() and _unpacked_whole(target, members):  # another process finished first
                    return target
                if target.exists():  # ours, but a file was deleted or cut short since: unpacked afresh
                    _remove_unpacked(target)
                try:
                    os.rename(tmp, target)
                except OSError:  # another process finished first (a complete folder is only ever renamed in)
                    if not is_nlpl_folder(target):
                        raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:  # zlib: a damaged compressed member
        raise ModelFileError(f"{archive}: a damaged zip ({err}); download it again") from None
    except (NotImplementedError, RuntimeError) as err:  # an unsupported compression method, an encrypted member
        raise ModelFileError(f"{archive}: cannot unpack ({err}); unzip it yourself and give the folder") from None
    log.info("unpacked %s into %s", archive, target)
    return target


def _temporary_folder(root: Path, prefix: str, archive: Path) -> Path:
    """A new temporary folder in ``root`` to unpack ``archive`` into. One that cannot be made is an error naming
    ``root`` and what to do, not the random name it would have had."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=root))
    except OSError as err:
        why = (f"cannot unpack {archive.name} there ({err.strerror}): set ELMO_CACHE to a folder you can write, or "
               f"unzip it yourself and give the folder")
        raise type(err)(err.errno, why, str(root)) from None


def unpacked_root() -> Path:
    """Where NLPL zips are unpacked: ``$ELMO_CACHE/nlpl/<the zip's sha256>/``."""
    return cache_dir() / "nlpl"


def unpacked_copies() -> list[Path]:
    """The unpacked zips in the cache: folders named by a zip's sha256 holding nothing but a zip's members (a folder
    holding anything else, or a link, is not one of ours)."""
    root = unpacked_root()
    if root.exists() and not root.is_dir():  # listing it would report an empty cache that can never hold a copy
        raise UsageError(f"{root}: a file, where elmo keeps the NLPL zips it unpacks; move the file, or point "
                         f"ELMO_CACHE at another folder")
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_key(p.name) and _holds_only_members(p))


def clear_unpacked() -> tuple[int, int]:
    """Delete the unpacked copies and the leftovers of killed unpackings, untouched for an hour (a younger one may
    be another process's unpacking under way): (folders, bytes) removed; the next load of a zip unpacks it again.
    Nothing else in the folder is touched; what another process removes meanwhile is skipped."""
    removed = size = 0
    root = unpacked_root()
    copies = unpacked_copies()  # (a link to a folder is followed, as for the converted copies)
    leftovers = [p for p in root.iterdir() if _is_leftover(p)] if root.is_dir() else []
    for folder in copies + leftovers:
        try:
            bytes_in = folder_bytes(folder)
            if folder in leftovers:
                remove_stale_temporaries(root, folder.name[:18])
            else:
                shutil.rmtree(folder)
        except OSError:
            continue
        if not folder.exists():
            removed, size = removed + 1, size + bytes_in
    return removed, size


def _is_leftover(path: Path) -> bool:
    """A temporary folder of ``unpack_nlpl_zip`` ("." + the key's first 16 hex digits + "." + 8 random + ".tmp")."""
    name = path.name
    return (len(name) > 18 and name[0] == "." and name[17] == "." and all(c in "0123456789abcdef" for c in name[1:17])
            and is_temporary_name(name, name[:18]) and path.is_dir() and not path.is_symlink())


def _holds_only_members(folder: Path) -> bool:
    if folder.is_symlink() or not folder.is_dir():
        return False
    entries = list(folder.iterdir())
    whole = {OPTIONS_NAME, WEIGHTS_NAME} <= {p.name for p in entries}  # an unpacked copy always holds both
    return whole and all(p.name in MEMBERS and p.is_file() and not p.is_symlink() for p in entries)


def _unpacked_whole(folder: Path, members: dict[str, zipfile.ZipInfo]) -> bool:
    """Whether every member is in ``folder`` at the size the zip records (a file cut short or deleted since the
    zip was unpacked would otherwise fail every load, the same zip always leading to the same folder)."""
    for name, info in members.items():
        path = folder / name
        if path.is_symlink() or not path.is_file() or path.stat().st_size != info.file_size:
            return False
    return True


def _remove_unpacked(folder: Path) -> None:
    """Remove an unpacked folder that no longer matches its zip, if it holds nothing but a zip's members; a folder
    holding anything else is the user's now: one line naming it, nothing deleted."""
    entries = list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else None
    if entries is None or any(p.name not in MEMBERS or p.is_symlink() or not p.is_file() for p in entries):
        raise ModelFileError(f"{folder}: the unpacked copy of this zip no longer matches it and holds other things; "
                             f"move what is yours out of it and delete the folder to unpack the zip again")
    shutil.rmtree(folder)


def _check_unpacked(archive: Path, folder: Path) -> None:
    """The unpacked options.json is a model's and model.hdf5 holds its datasets (names, shapes and types, from the
    headers), or one line naming the zip and the member."""
    weights = folder / WEIGHTS_NAME
    if (kind := describe_file(weights)) != HDF5_KIND:
        raise ModelFileError(f"{archive}: its {WEIGHTS_NAME} is not HDF5 weights but {kind}; the zip is damaged or "
                             f"not an NLPL model: download it again")
    try:
        with warnings.catch_warnings():  # unknown keys are reported when the model is loaded, not here too
            warnings.simplefilter("ignore")
            config = ElmoConfig.from_file(folder / OPTIONS_NAME)
        check_datasets(weights, config, dataset_shapes(weights, config))
        check_storage(weights, config)
    except (ConfigError, WeightFileError) as err:
        message = str(err)
        for name in (OPTIONS_NAME, WEIGHTS_NAME):
            message = message.replace(str(folder / name), f"{archive} ({name} inside it)")
        raise ModelFileError(f"{message}; the zip is damaged or not an NLPL model") from None


def _members(archive: Path, z: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The zip entries to extract, by the plain name they get (at the top level or inside one folder)."""
    found: dict[str, list[zipfile.ZipInfo]] = {}
    for info in z.infolist():
        name = info.filename.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        if name in MEMBERS and not info.is_dir():
            found.setdefault(name, []).append(info)
    for name in (OPTIONS_NAME, WEIGHTS_NAME):
        if len(found.get(name, [])) != 1:
            listed = ", ".join(info.filename for info in z.infolist()[:6]) or "nothing"
            problem = "no" if name not in found else f"{len(found[name])} copies of"
            raise ModelFileError(f"{archive}: {problem} {name} (it holds {listed}); an NLPL ELMo zip holds "
                                 f"options.json + model.hdf5 once each")
    return {name: infos[0] for name, infos in found.items() if len(infos) == 1}


def _check_sizes(archive: Path, members, root: Path) -> None:
    """Refuse members larger than any ELMo file, compressed beyond what real files allow, or not fitting on disk."""
    total = 0
    for info in members:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MAX_MEMBER_BYTES or (info.file_size > CHUNK and ratio > MAX_RATIO):
            raise ModelFileError(f"{archive}: member {info.filename!r} claims {info.file_size:,} bytes from "
                                 f"{info.compress_size:,} compressed; not an ELMo model (a zip bomb?), not extracted")
        total += info.file_size
    existing = next(p for p in (root, *root.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if total > free:
        raise ModelFileError(f"{archive}: unpacking needs {total:,} bytes and {existing} has {free:,} free; free some "
                             f"space or set ELMO_CACHE to a larger disk")


def _extract(archive: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path) -> None:
    """Stream one member to ``out``, stopping as soon as it exceeds the size the zip records for it."""
    written = 0
    with z.open(info) as src, open(out, "wb") as dst:
        while block := src.read(CHUNK):
            written += len(block)
            if written > info.file_size:
                raise ModelFileError(f"{archive}: member {info.filename!r} unpacks to more than the {info.file_size:,} "
                                     f"bytes it records; a damaged or malicious zip, not extracted")
            dst.write(block)
    if written != info.file_size:
        raise ModelFileError(f"{archive}: member {info.filename!r} unpacks to {written:,} of its {info.file_size:,} "
                             f"bytes; the zip is damaged: download it again")
