"""A work folder elmo owns: it holds a manifest that elmo wrote, and elmo deletes or reuses nothing else.

The manifest (``manifest.json``) names the folder's owner (``"owner": "elmo"``, the kind of work) and what the work
is (``identity``: the input, the model, the settings). Every file elmo finishes in it gets a record beside it
(``NAME.record.json``: its size, sha256 and what it holds), written after the file is in place, so a record never
lists an unfinished file (one small record per file: a run of thousands of parts never rewrites a growing list). A
folder without that manifest is the user's: a run refuses it in one line instead of deleting it. A run resumes only
a folder whose identity matches its own; removing a folder removes only elmo's recorded files, their records, the
manifest and the temporary files elmo's own writes leave behind, then the folder if that left it empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from elmo.errors import ElmoError
from elmo.io.atomic import atomic_path

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
OWNER = "elmo"
PIECE = re.compile(r"part-\d{8}\.h5")  # the names elmo gives the pieces of its work
RECORD = ".record.json"  # a piece's record: NAME.record.json
# the names of elmo's temporary files in its folders: a piece, the merged output or the manifest being written
# (``.NAME.tmp``), or ``atomic_path``'s ``.NAME.XXXXXXXX.tmp`` of the manifest or a record; a user's ".notes.tmp" is
# none of them
TEMPORARY = re.compile(r"\.(part-\d{8}\.h5(\.record\.json)?|manifest\.json|merged)(\.[a-z0-9_]{8})?\.tmp")


class WorkFolderError(ElmoError, ValueError):
    """A work folder elmo cannot use: not its own, another run's, or damaged (one line: the folder and what to do)."""


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The manifest elmo wrote in ``root``, with ``files``: the recorded pieces; None when there is no manifest of
    elmo's. A record that cannot be read is left out (its piece is redone)."""
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("owner") != OWNER or not isinstance(data.get("identity"), dict):
        return None
    data["files"] = {}
    for record in root.glob(f"part-*{RECORD}"):
        name = record.name[: -len(RECORD)]
        try:
            info = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if PIECE.fullmatch(name) and isinstance(info, dict) and isinstance(info.get("size"), int) \
                and isinstance(info.get("sha256"), str):
            data["files"][name] = info
    return data


class WorkFolder:
    """A folder of finished pieces of one piece of work (``kind``: e.g. "embedding parts"), owned by elmo.

    ``resume``: reuse a folder of the same ``identity`` (its verified files); otherwise an earlier folder of elmo's is
    cleared first. A folder that is not elmo's, or (with ``resume``) another work's, is refused.
    """

    def __init__(self, root: str | Path, kind: str, identity: dict[str, Any], resume: bool) -> None:
        self.root, self.kind, self.identity = Path(root), kind, identity
        self.files: dict[str, dict[str, Any]] = {}
        if self.root.exists() or self.root.is_symlink():
            found = self._claim(resume)
            if found is not None:
                self.files = found
        # the manifest's text first: an identity JSON cannot hold must not leave a folder without one, which no later
        # run could claim
        text = json.dumps({"owner": OWNER, "kind": self.kind, "identity": self.identity})
        if not self.root.is_dir():
            self.root.mkdir(parents=True)
        with atomic_path(self.root / MANIFEST) as tmp:
            tmp.write_text(text, encoding="utf-8")

    def _claim(self, resume: bool) -> dict[str, dict[str, Any]] | None:
        """The files of an existing folder to keep (resume), or None after clearing it; refuses a folder not ours."""
        manifest = read_manifest(self.root) if self.root.is_dir() and not self.root.is_symlink() else None
        if manifest is None:
            raise WorkFolderError(f"{self.root}: exists and is not a folder of {self.kind} that elmo wrote (no "
                                  f"manifest of elmo's in it); elmo will not delete or reuse it: move it away or "
                                  f"choose another output")
        if manifest.get("kind") != self.kind:
            raise WorkFolderError(f"{self.root}: holds another kind of work ({manifest.get('kind')}); move it "
                                  f"away or choose another output")
        if resume:
            found = manifest.get("identity", {})
            if found != self.identity:
                changed = sorted(k for k in set(self.identity) | set(found) if found.get(k) != self.identity.get(k))
                raise WorkFolderError(f"{self.root}: the interrupted run differs in {', '.join(changed)}; rerun it "
                                      f"with the same input, model and flags, or delete {self.root} to start over")
            self._remove_strays(manifest["files"])
            return manifest["files"]
        self.files = manifest["files"]
        self.remove(keep_folder=True)
        return None

    def path(self, name: str) -> Path:
        return self.root / name

    def verified(self, name: str) -> bool:
        """True when ``name`` is listed and its bytes are what was written (size and sha256)."""
        info, path = self.files.get(name), self.root / name
        if info is None or not path.is_file() or path.stat().st_size != info.get("size"):
            return False
        return file_sha256(path) == info.get("sha256")

    def add(self, name: str, **info: Any) -> None:
        """Record a finished file (already in place) with its size, sha256 and ``info``, in its own record written
        atomically."""
        path = self.root / name
        self.files[name] = {"size": path.stat().st_size, "sha256": file_sha256(path), **info}
        with atomic_path(self.root / f"{name}{RECORD}") as tmp:
            tmp.write_text(json.dumps(self.files[name]), encoding="utf-8")

    def forget(self, name: str) -> None:
        """Delete a recorded file and its record."""
        self.files.pop(name, None)
        (self.root / f"{name}{RECORD}").unlink(missing_ok=True)
        (self.root / name).unlink(missing_ok=True)

    def remove(self, keep_folder: bool = False) -> None:
        """Delete the listed files, the manifest and elmo's temporary files, then the folder if it is empty. Files
        elmo did not write stay, with a warning."""
        for name in list(self.files):
            self.forget(name)
        self._remove_strays({})
        if keep_folder:
            return
        (self.root / MANIFEST).unlink(missing_ok=True)
        left = sorted(p.name for p in self.root.iterdir()) if self.root.is_dir() else []
        if left:
            logger.warning("%s: kept, as it holds files elmo did not write (%s)", self.root, ", ".join(left[:3]))
            return
        os.rmdir(self.root)

    def _remove_strays(self, keep: dict[str, Any]) -> None:
        """elmo's temporary files (``.NAME.tmp``, ``.NAME.XXXX.tmp``), and pieces of its naming and their records
        not in ``keep`` (written by a run killed before the piece was recorded, or recorded unreadably)."""
        for path in self.root.iterdir():
            piece = path.name[: -len(RECORD)] if path.name.endswith(RECORD) else path.name
            ours = TEMPORARY.fullmatch(path.name) or (PIECE.fullmatch(piece) and piece not in keep)
            if ours and path.is_file() and not path.is_symlink():
                path.unlink(missing_ok=True)
