"""An embedding run's finished chunks (``OUTPUT.parts/``), and their verified merge into the output file.

The folder is a :class:`elmo.io.work_folder.WorkFolder`: its manifest names the run (input, model, settings), and
every finished part has a record with its size, sha256, first line and number of lines. The merge checks every
expected part and every line before the output is renamed into place, and returns the number of lines it wrote: a
missing, damaged or short part is an error naming it, never a smaller file.
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

import h5py
import numpy as np
import torch

from elmo.errors import ElmoError
from elmo.io.atomic import check_free_space, new_file_mode, sync_folder, write_errors
from elmo.io.work_folder import WorkFolder

logger = logging.getLogger(__name__)

META_KEY = "__meta__"  # the record of model, layers and tokenizer in a .npz archive
KIND = "embedding parts"
MERGED = ".merged.tmp"  # the output being merged, inside the parts folder: a kill leaves it where a rerun clears it
# bytes beside the vectors: per line (its name and headers), and per file; an upper guess. libhdf5 can crash the
# process when the disk fills under it, so every write is checked against the free space first
LINE_OVERHEAD, FILE_OVERHEAD = 2048, 1 << 20


class MergeError(ElmoError, ValueError):
    """The finished parts do not add up to the whole input (a part missing, damaged or short)."""


def part_name(number: int) -> str:
    return f"part-{number:08d}.h5"


class PartStore:
    """Finished chunks of an embedding run, one small HDF5 file each, written atomically and listed in the folder's
    manifest. ``completed``: parts 0 .. completed-1 are finished and verified; later ones are redone."""

    def __init__(self, root: Path, fingerprint: dict, resume: bool) -> None:
        self.root = Path(root)
        self.folder = WorkFolder(self.root, KIND, fingerprint, resume)
        self.completed, self.lines_done = 0, 0
        while self._usable(self.completed):
            self.lines_done += self.folder.files[part_name(self.completed)]["lines"]
            self.completed += 1
        finished = {part_name(n) for n in range(self.completed)}
        for name in [n for n in self.folder.files if n not in finished]:
            self.folder.forget(name)  # after a gap or a damaged part: redone, in order

    def _usable(self, number: int) -> bool:
        """Part ``number`` is listed, undamaged, and follows the parts before it."""
        info = self.folder.files.get(part_name(number), {})
        return (info.get("first_line") == self.lines_done and isinstance(info.get("lines"), int)
                and self.folder.verified(part_name(number)))

    def _path(self, number: int) -> Path:
        return self.root / part_name(number)

    def write(self, number: int, keys: list[str], arrays: list[np.ndarray],
              state: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Part ``number`` (the lines after those of the parts before it), then its line in the manifest."""
        path = self._path(number)
        tmp = self.root / f".{path.name}.tmp"
        check_free_space(self.root, sum(a.nbytes for a in arrays) + LINE_OVERHEAD * len(keys) + FILE_OVERHEAD,
                         f"part {number} ({len(keys)} lines)")
        with write_errors(path):
            try:
                self._write_part(tmp, keys, arrays, state)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            self.folder.add(path.name, first_line=self.lines_done, lines=len(keys))
        self.lines_done += len(keys)
        self.completed = max(self.completed, number + 1)

    @staticmethod
    def _write_part(tmp: Path, keys: list[str], arrays: list[np.ndarray],
                    state: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """The part is built in memory and then written by Python: a disk that fills while it is written gives an
        OSError, where libhdf5 writing to disk itself can crash the process."""
        buffer = io.BytesIO()
        with h5py.File(buffer, "w") as f:
            f.create_dataset("keys", data=keys, dtype=h5py.string_dtype())
            group = f.create_group("data")
            for i, array in enumerate(arrays):
                group.create_dataset(str(i), data=array)
            if state is not None:
                f.create_dataset("state_h", data=state[0].cpu().numpy())
                f.create_dataset("state_c", data=state[1].cpu().numpy())
        with open(tmp, "wb") as out:
            out.write(buffer.getbuffer())
            out.flush()
            os.fsync(out.fileno())

    def carried_state(self, number: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        with h5py.File(self._path(number), "r") as f:
            if "state_h" not in f:
                return None
            return torch.from_numpy(f["state_h"][()]), torch.from_numpy(f["state_c"][()])

    def verify(self, parts: int, lines: int) -> None:
        """Every part 0 .. parts-1 present, undamaged, its lines following the previous part's, ``lines`` in all."""
        expected_first = 0
        for number in range(parts):
            name = part_name(number)
            if not self.folder.verified(name):
                what = "missing" if not self._path(number).exists() else "damaged (its checksum differs)"
                raise MergeError(f"{self._path(number)}: {what} ({number} of {parts} parts verified); nothing was "
                                 f"written to the output: rerun with --resume to redo it")
            info = self.folder.files[name]
            if info["first_line"] != expected_first:
                raise MergeError(f"{self._path(number)}: starts at line {info['first_line'] + 1}, where line "
                                 f"{expected_first + 1} was expected; rerun without --resume")
            expected_first += info["lines"]
        if expected_first != lines:
            raise MergeError(f"{self.root}: the parts hold {expected_first} lines of the input's {lines}; rerun "
                             f"without --resume")

    def merge_into(self, output_path: str | Path, sentence_to_index: dict[str, str] | None,
                   attributes: dict[str, str] | None = None, parts: int | None = None,
                   lines: int | None = None) -> int:
        """All ``parts`` (default: those finished) into one file, in line order, after checking that they hold
        ``lines`` lines; returns the number of lines written. HDF5 (AllenNLP's layout; ``attributes`` on the file),
        or a NumPy ``.npz`` archive with the same keys (``sentence_to_index`` then a 0-d string array holding the
        JSON, and ``attributes`` as JSON in ``__meta__``). The parts folder is removed afterwards."""
        parts = self.completed if parts is None else parts
        lines = self.lines_done if lines is None else lines
        self.verify(parts, lines)
        needed = sum(info["size"] for info in self.folder.files.values())
        check_free_space(output_path, needed + FILE_OVERHEAD, "the merged file")
        write = _write_npz if str(output_path).lower().endswith(".npz") else _write_hdf5
        tmp, counted, merged = self.root / MERGED, [0], None  # merged: (device, inode) of the file being renamed
        try:
            with write_errors(output_path, needed):
                write(tmp, self._arrays(parts, counted), None if sentence_to_index is None
                      else json.dumps(sentence_to_index), attributes or {})
                if counted[0] != lines:
                    raise MergeError(f"{self.root}: the parts held {counted[0]} lines where their manifest lists "
                                     f"{lines}; nothing was written to the output: rerun without --resume")
                os.chmod(tmp, Path(output_path).stat().st_mode & 0o7777 if Path(output_path).exists()
                         else new_file_mode())
                merged = _identity(tmp)
                os.replace(tmp, output_path)
                sync_folder(Path(output_path).parent)  # the rename on disk before the parts are deleted
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: before the rename it stops the merge, after it comes too late
            if merged is None or _identity(Path(output_path)) != merged:  # the output is not the merged file
                raise
            self._finish_after_interrupt(output_path)
            return counted[0]
        finally:
            tmp.unlink(missing_ok=True)
        try:
            self.folder.remove()
        except KeyboardInterrupt:
            self._finish_after_interrupt(output_path)
        return counted[0]

    def _finish_after_interrupt(self, output_path: str | Path) -> None:
        """An interrupt once the merged file had replaced the output: the output is whole, so the run is done (not
        "interrupted", which would send the user to a --resume with nothing left to do): the rename is synced and
        the parts are removed, as without it."""
        logger.info("%s is complete; an interrupt after its rename ends nothing", output_path)
        sync_folder(Path(output_path).parent)
        self.folder.remove()

    def discard(self) -> None:
        """Remove the folder and every part in it (a run whose input cannot be read again)."""
        self.folder.remove()

    def after_failure(self, resumable: bool, interrupted: bool) -> None:
        """After an error or an interrupt (``interrupted``: said even under --quiet): the finished parts stay for
        --resume, or go when the input cannot be read again (not ``resumable``)."""
        if not resumable:
            self.discard()
        elif not self.discard_if_empty():
            (logger.warning if interrupted else logger.info)("%s: the finished parts are kept; --resume continues "
                                                             "from them", self.root)

    def discard_if_empty(self) -> bool:
        """Remove the folder when no part was finished (a run that failed before its first part leaves nothing);
        True if it was removed."""
        if self.folder.files:
            return False
        self.folder.remove()
        return True

    def _arrays(self, parts: int, counted: list[int]) -> Iterator[tuple[str, np.ndarray]]:
        """(key, vectors) of every line, part by part: one part in memory at a time; ``counted[0]``: lines so far."""
        for number in range(parts):
            with h5py.File(self._path(number), "r") as part:
                for i, key in enumerate(part["keys"].asstr()[()]):
                    counted[0] += 1
                    yield key, part["data"][str(i)][()]


@contextmanager
def _durable(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for writing through Python, flushed and synced to disk when the block ends: a failed write
    (a full disk, a file size limit) is an ``OSError`` here, where libhdf5 writing on its own could crash the
    process, and the merged file is on disk before the parts it replaces are deleted."""
    with open(path, "w+b") as raw:
        yield raw
        raw.flush()
        os.fsync(raw.fileno())


def _write_hdf5(path: Path, arrays: Iterable[tuple[str, np.ndarray]], index_json: str | None,
                attributes: dict[str, str]) -> None:
    with _durable(path) as raw, h5py.File(raw, "w") as out:
        out.attrs.update(attributes)
        for key, array in arrays:
            out.create_dataset(key, data=array)
        if index_json is not None:
            index = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
            index[0] = index_json


def _write_npz(path: Path, arrays: Iterable[tuple[str, np.ndarray]], index_json: str | None,
               attributes: dict[str, str]) -> None:
    """What ``np.savez`` writes, one array at a time (np.savez needs them all in memory at once); ``attributes``
    as JSON in a 0-d string array ``__meta__`` (an archive has no attributes)."""
    with _durable(path) as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in arrays:
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
        if index_json is not None:
            with archive.open("sentence_to_index.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.array(index_json), allow_pickle=False)
        if attributes:
            with archive.open(f"{META_KEY}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.array(json.dumps(attributes)), allow_pickle=False)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, or None when it is missing: which file a name holds, across a rename."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
