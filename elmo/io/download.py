"""Downloads that are verified before use, and archive extraction that cannot escape its folder.

A file is fetched once into a cache directory (``$ELMO_CACHE`` or ``~/.cache/elmo``), streamed to a temporary
file with a progress bar, checked against its pinned sha256, and only then renamed into place; a mismatch deletes
the download. Offline, the error says how to pass local files instead.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import ssl
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import atomic_path, check_free_space, remove_stale_temporaries, write_errors
from elmo.io.work_folder import file_sha256
from elmo.limits import is_digits


class DownloadError(ElmoError, OSError):
    """A download that failed or did not match its checksum (one line, with what to do)."""


class HashMismatchError(DownloadError):
    """A complete download whose sha256 is not the expected one (nothing was kept)."""


BLOCK_BYTES = 1 << 16  # read at most this much at a time: the progress bar moves on a slow connection too
STALL_SECONDS = 300.0  # a server that sends under STALL_BYTES in this long is given up on (a read's own timeout
STALL_BYTES = 64 << 10  # only catches silence: one byte every 20 s would otherwise hold the command for ever)
LOCAL_FILES = "(--options/--weights, or a folder holding them as --model or --init-from)"


def cache_dir() -> Path:
    """``$ELMO_CACHE`` (``~`` expanded, made absolute: the cache must not move with the working folder), or
    ``~/.cache/elmo`` (also when the variable is set but empty or blank: " " would make a folder named " ")."""
    named = (os.environ.get("ELMO_CACHE") or "").strip()
    return Path(named or Path.home() / ".cache" / "elmo").expanduser().absolute()


ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_switch(name: str, default: bool) -> bool:
    """An on/off environment variable (``ELMO_CONVERT_CACHE``, ``ELMO_ALLOW_UNPINNED``): 1/true/yes/on or
    0/false/no/off in any case, ``default`` when unset or empty; any other value is refused in one line, since
    reading "false" as on (or "true" as off) would do the opposite of what was asked without a word."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ON or value in OFF:
        return value in ON
    raise UsageError(f"{name}={os.environ[name]!r}: not a switch; set it to 1 (on) or 0 (off), or unset it")


def fetch(url: str, sha256: str | None, name: str | None = None, directory: str | Path | None = None,
          progress: bool = True, timeout: float = 30.0, verify: bool = True, fresh: bool = False,
          check: Callable[[Path], None] | None = None) -> Path:
    """The verified local copy of ``url``: from the cache if present and intact, otherwise downloaded now. A file
    already there is replaced only by a complete download that passed every check (never deleted first: a failed
    download keeps it); a symbolic link there (a file of the user's, linked into the cache) is read, never written
    through or replaced.

    ``verify=False`` (no pinned hash; the caller records the hash itself) is only for trust-on-first-use;
    ``fresh``: download even when a file is there (one that was never verified); ``check(path)``: a further test of
    the downloaded file (raising a ``DownloadError``), run before it takes the cached file's place.
    """
    if verify and (not sha256 or len(sha256) != 64):
        raise DownloadError(f"{url}: no sha256 pinned, refusing to use an unverified download")
    target = Path(directory or cache_dir()) / (name or url.rstrip("/").rsplit("/", 1)[-1])
    if target.is_file() and not fresh and (not verify or file_sha256(target) == sha256):
        return target
    if target.is_symlink():
        why = "whose file does not match the pinned sha256" if verify else "to a file that was never verified"
        raise DownloadError(f"{target}: a symbolic link {why}; elmo writes no file through a link in its cache: "
                            f"remove the link (the file it points to stays) to download again")
    remove_stale_temporaries(target.parent, f".{target.name}.")  # an earlier download of it killed midway
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_path(target) as tmp:
            total = _declared_length(response)
            if total is not None:  # before the first byte: a cache on a small disk, or a size no disk holds
                check_free_space(target.parent, total, f"downloading {target.name}")
            digest, received = _receive(response, tmp, target, total, progress)
            if total is not None and received != total:  # the connection closed early
                raise DownloadError(f"{url}: received {received:,} of {total:,} bytes; the file was not kept: try "
                                    f"again")
            if verify and digest != sha256:
                raise HashMismatchError(f"{url}: sha256 {digest} does not match the pinned {sha256}; the file was not "
                                    f"kept")
            if check is not None:
                check(tmp)
    except FileNotFoundError as err:  # the temporary file went away under us (a cache cleaned meanwhile)
        raise DownloadError(f"{target}: the download's temporary file was removed while it ran ({err.strerror}); "
                            f"nothing was kept: try again") from None
    except urllib.error.HTTPError as err:  # the server answered: no use saying offline
        raise DownloadError(f"{url}: the server answered {err.code} ({err.reason}); nothing was kept: try again "
                            f"later, or download it yourself and pass the local files {LOCAL_FILES}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, ssl.SSLError) as err:
        reason = getattr(err, "reason", err)  # refused, unreachable, reset or garbled midway: nothing was kept
        raise DownloadError(f"{url}: cannot download ({reason}); nothing was kept: try again, or (offline) download "
                            f"it elsewhere and pass the local files {LOCAL_FILES}") from None
    return target


def _declared_length(response) -> int | None:
    """The response's Content-Length, or None when it gives none, or none that is a number of bytes (a server's
    "abc" or "-5" says nothing about the body: the hash still checks it)."""
    length = (response.headers.get("Content-Length") or "").strip()
    return int(length) if is_digits(length) else None


def _receive(response, tmp: Path, target: Path, total: int | None, progress: bool) -> tuple[str, int]:
    """Stream the body into ``tmp``: (sha256, bytes). A failed write (a full disk) is one line naming ``target``;
    a network error, raised by the reads outside ``write_errors``, comes through as it is, and so does a stall
    (under ``STALL_BYTES`` in ``STALL_SECONDS``)."""
    digest, received = hashlib.sha256(), 0
    window_start, window_bytes = time.monotonic(), 0
    with write_errors(target, total):
        out = open(tmp, "wb")
    try:
        with tqdm(total=total, unit="B", unit_scale=True, disable=not progress, desc=target.name) as bar:
            while block := response.read1(BLOCK_BYTES):  # what has arrived, up to a block
                with write_errors(target, total):
                    out.write(block)
                digest.update(block)
                received += len(block)
                bar.update(len(block))
                window_bytes += len(block)
                if time.monotonic() - window_start >= STALL_SECONDS:
                    if window_bytes < STALL_BYTES:
                        raise TimeoutError(f"{window_bytes:,} bytes in the last {STALL_SECONDS:g} s")
                    window_start, window_bytes = time.monotonic(), 0
    finally:
        with write_errors(target, total):
            out.close()
    return digest.hexdigest(), received


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
