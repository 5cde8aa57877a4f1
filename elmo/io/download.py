"""Downloads that are verified before use, and archive extraction that cannot escape its folder.

A file is fetched once into a cache directory (``$ELMO_CACHE`` or ``~/.cache/elmo``), streamed to a temporary
file with a progress bar, checked against its pinned sha256, and only then renamed into place; a mismatch deletes
the download. Offline, the error says how to pass local files instead.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tqdm.auto import tqdm

from elmo.errors import ElmoError
from elmo.io.atomic import atomic_path
from elmo.io.work_folder import file_sha256


class DownloadError(ElmoError, OSError):
    """A download that failed or did not match its checksum (one line, with what to do)."""


def cache_dir() -> Path:
    """``$ELMO_CACHE`` (``~`` expanded, made absolute: the cache must not move with the working folder), or
    ``~/.cache/elmo`` (also when the variable is set but empty)."""
    return Path(os.environ.get("ELMO_CACHE") or Path.home() / ".cache" / "elmo").expanduser().absolute()


def fetch(url: str, sha256: str | None, name: str | None = None, directory: str | Path | None = None,
          progress: bool = True, timeout: float = 30.0, verify: bool = True, fresh: bool = False) -> Path:
    """The verified local copy of ``url``: from the cache if present and intact, otherwise downloaded now. A file
    already there is replaced only by a complete download (never deleted first: a failed download keeps it).

    ``verify=False`` (no pinned hash; the caller records the hash itself) is only for trust-on-first-use;
    ``fresh``: download even when a file is there (one that was never verified).
    """
    if verify and (not sha256 or len(sha256) != 64):
        raise DownloadError(f"{url}: no sha256 pinned, refusing to use an unverified download")
    target = Path(directory or cache_dir()) / (name or url.rstrip("/").rsplit("/", 1)[-1])
    if target.is_file() and not fresh and (not verify or file_sha256(target) == sha256):
        return target
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_path(target) as tmp:
            total = int(response.headers.get("Content-Length") or 0) or None
            digest, received = hashlib.sha256(), 0
            with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                                              desc=target.name) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(len(block))
            if total is not None and received != total:  # the connection closed early
                raise DownloadError(f"{url}: received {received:,} of {total:,} bytes; the file was not kept: try "
                                    f"again")
            if verify and digest.hexdigest() != sha256:
                raise DownloadError(f"{url}: sha256 {digest.hexdigest()} does not match the pinned {sha256}; "
                                    f"the file was not kept")
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(f"{url}: cannot download ({reason}); offline, download it elsewhere and pass the "
                            f"local files (--options/--weights, or a folder holding them as --model or --init-from)"
                            ) from None
    return target


def safe_extract(archive: str | Path, destination: str | Path) -> list[Path]:
    """Extract a .tar(.gz) or .zip into ``destination``, refusing absolute paths, ``..``, links and devices."""
    archive, destination = Path(archive), Path(destination).resolve()
    destination.mkdir(parents=True, exist_ok=True)

    def checked(name: str) -> Path:
        path = (destination / name).resolve()
        if not path.is_relative_to(destination):
            raise DownloadError(f"{archive}: member {name!r} would be written outside {destination}; not extracted")
        return path

    written = []
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            members = z.infolist()
            for member in members:
                checked(member.filename)
            for member in members:
                written.append(Path(z.extract(member, destination)))
        return written
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            checked(member.name)
            if not (member.isfile() or member.isdir()):
                raise DownloadError(f"{archive}: member {member.name!r} is a link or device; not extracted")
        for member in members:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: the stdlib's own safety net too
                tar.extract(member, destination, filter="data")
            else:  # pragma: no cover
                tar.extract(member, destination)
            written.append(destination / member.name)
    return written
