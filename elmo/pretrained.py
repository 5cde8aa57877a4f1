"""Models by name: the ones shipped inside the package ("en", "ko") and the official AllenNLP ones by URL.

Shipped models live in ``elmo/models/<name>/`` (config.json + float16 model.safetensors + MODEL_CARD.md) and need
no network. Official models are fetched once into the cache directory (``$ELMO_CACHE`` or ``~/.cache/elmo``) and
checked against their pinned sha256 before use. This release could not pin the official hashes (they were not
reachable where it was built), so an unpinned entry is only downloaded when the user allows it
(``ELMO_ALLOW_UNPINNED=1``); its hash is then recorded beside the file and checked on every later use
("trust on first use"). Offline, the error is one line saying how to pass local files instead.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from elmo.config import ConfigError, ElmoConfig
from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import atomic_path
from elmo.io.download import DownloadError, HashMismatchError, cache_dir, env_switch, fetch
from elmo.io.work_folder import file_sha256
from elmo.io.file_kinds import describe_file, is_weight_file
from elmo.io.model_files import ModelFiles
from elmo.io.official import load_official

SHIPPED_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = "en"
_S3 = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"


@dataclass(frozen=True)
class OfficialModel:
    """One official AllenNLP/bilm-tf model: its options.json and weights.hdf5 URLs with their sha256."""

    name: str
    folder: str  # the S3 folder and file prefix, e.g. 2x1024_128_2048cnn_1xhighway
    options_sha256: str | None = None
    weights_sha256: str | None = None

    @property
    def options_url(self) -> str:
        return f"{_S3}/{self.folder}/elmo_{self.folder}_options.json"

    @property
    def weights_url(self) -> str:
        return f"{_S3}/{self.folder}/elmo_{self.folder}_weights.hdf5"


OFFICIAL: dict[str, OfficialModel] = {
    model.name: model
    for model in (
        OfficialModel("small", "2x1024_128_2048cnn_1xhighway"),
        OfficialModel("medium", "2x2048_256_2048cnn_1xhighway"),
        OfficialModel("original", "2x4096_512_2048cnn_2xhighway"),
        OfficialModel("original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B"),
    )
}


def shipped_names() -> list[str]:
    """Names of the models inside the package (folders of elmo/models holding a model)."""
    if not SHIPPED_DIR.is_dir():
        return []
    return sorted(p.name for p in SHIPPED_DIR.iterdir() if (p / "config.json").is_file())


def known_names() -> list[str]:
    """Every name ``load_bilm`` accepts: the shipped models, then the official ones."""
    return shipped_names() + list(OFFICIAL)


def unknown_name_message(name: str, no_such_path: bool = False) -> str:
    """The one line for a name that is not a model's: the known names, the closest one (a typo?), and that a path
    works too (``no_such_path``: also say that no file or folder has that name)."""
    known = known_names()
    close = difflib.get_close_matches(name, known, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    where = " and not a model directory (no such path)" if no_such_path else ""
    return f"unknown model name {name!r}{where}: choose one of {', '.join(known)}{guess}, or give a path"


def is_model_name(name: str | Path) -> bool:
    """True for a registered name that is not also an existing path (a local folder always wins)."""
    return isinstance(name, str) and name in known_names() and not Path(name).exists()


def resolve(name: str, progress: bool = True) -> ModelFiles:
    """Local files for a model name: a shipped model's folder, or an official pair (downloaded once)."""
    if name in shipped_names():
        return ModelFiles.of_folder(SHIPPED_DIR / name, name=name)
    if name not in OFFICIAL:
        raise UsageError(unknown_name_message(name))
    entry = OFFICIAL[name]
    folder = cache_dir() / entry.folder
    made = not folder.exists()
    try:
        options, options_record = _fetch_pinned(entry.options_url, entry.options_sha256, folder, progress)
        weights, weights_record = _fetch_pinned(entry.weights_url, entry.weights_sha256, folder, progress)
        trusted_now = [(path, record) for path, record in ((options, options_record), (weights, weights_record))
                       if record is not None]
        if trusted_now:
            _check_pair(entry, options, weights, [path for path, _ in trusted_now])
    except BaseException:
        if made and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # made for this download, which kept nothing
        raise
    for path, record in trusted_now:
        with atomic_path(record) as tmp:
            tmp.write_text(file_sha256(path) + "\n", encoding="utf-8")
    return ModelFiles(options, weights, name=name, official=True)


def _check_pair(entry: OfficialModel, options: Path, weights: Path, downloaded: list[Path]) -> None:
    """Before a first download is trusted (its hash recorded), the pair must load as every later use loads it: the
    weights of the options' shapes, every value finite. Another model's weights, or a damaged file, would otherwise be
    trusted and refused on every later use, with no way out; the files downloaded now are removed."""
    try:
        load_official(options, weights)
    except ElmoError as err:
        for path in downloaded:
            path.unlink(missing_ok=True)
        raise DownloadError(f"{entry.weights_url}: the download does not load with its options ({err}); nothing "
                            f"was kept: try again later, or download both files yourself and pass them "
                            f"(--options/--weights)") from None


def _fetch_pinned(url: str, sha256: str | None, folder: Path, progress: bool) -> tuple[Path, Path | None]:
    """``fetch`` with the registry's hash, or the hash recorded on first use when the registry has none: (the file,
    the hash record to write once the model's files load together, or None: pinned or already recorded)."""
    name = url.rsplit("/", 1)[-1]
    record = folder / (name + ".sha256")
    if sha256 is None and record.is_file():
        recorded = record.read_text(encoding="utf-8").strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", recorded):
            raise DownloadError(f"{record}: damaged hash record; delete it (and {folder / name}) to download again")
        try:
            return fetch(url, recorded, name=name, directory=folder, progress=progress), None
        except HashMismatchError:
            raise DownloadError(f"{url}: the download does not match the sha256 recorded on its first use in "
                                f"{record}; the file was not kept. If the server's file changed on purpose, delete "
                                f"that record (with ELMO_ALLOW_UNPINNED=1 the next download is trusted)") from None
    if sha256 is not None:
        return fetch(url, sha256.lower(), name=name, directory=folder, progress=progress), None
    if not env_switch("ELMO_ALLOW_UNPINNED", False):
        raise DownloadError(f"{url}: this release has no pinned sha256 for it; download it yourself and pass "
                            f"the local files (--options/--weights, or a folder holding options.json and the .hdf5 as "
                            f"--model or --init-from), or set ELMO_ALLOW_UNPINNED=1 to trust the first download")
    # a file without a record was never trusted: download afresh; it is replaced only by a complete download that
    # is what its name says
    path = fetch(url, None, name=name, directory=folder, progress=progress, verify=False, fresh=True,
                 check=lambda downloaded: _check_first_download(url, downloaded, options=name.endswith(".json")))
    return path, record


def _check_first_download(url: str, path: Path, options: bool) -> None:
    """Before an unpinned download is trusted (its hash recorded), check that it is what its name says: the options
    (``options``) a model's JSON, the weights bilm-tf's HDF5. A proxy's or a server's HTML page saved in its place
    would otherwise be trusted, and fail to load on every later use. Runs on the download before it takes the cached
    file's place, so a refused one leaves that file as it was."""
    if options:
        try:
            ElmoConfig.from_file(path)
            return
        except ConfigError:
            kind = describe_file(path)
    else:
        weights = is_weight_file(path)  # None: an HDF5 file h5py cannot open
        if weights:
            return
        kind = "an HDF5 file h5py cannot open (damaged or cut short)" if weights is None else describe_file(path)
    raise DownloadError(f"{url}: the download is {kind}, not the model's {'options' if options else 'weights'}; "
                        f"nothing was kept: try again later, or download it yourself and pass the local files")
