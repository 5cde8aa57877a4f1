"""What a file is, judged by its first bytes, so that a refusal can say what was given ("a zip archive", "an
HTML/XML page") instead of a library's parse error; and whether an HDF5 file holds bilm-tf weights."""

from __future__ import annotations

from pathlib import Path

import h5py

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"
HDF5_KIND = "an HDF5 file"
JSON_KIND = "JSON text"


def describe_file(path: str | Path) -> str:
    """What a file is, judged by its first bytes ("an HDF5 file", "a safetensors file", "a zip archive", ...), so
    that a refusal can say what was given instead of a library's parse error."""
    path = Path(path)
    if path.is_dir():
        return "a folder"
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if not head:
        return "an empty file"
    if head.startswith(HDF5_MAGIC):
        return HDF5_KIND
    if head.startswith(ZIP_MAGIC) or head.startswith(b"PK\x05\x06"):
        return "a zip archive"
    if len(head) > 8 and head[8:9] == b"{" and 8 + int.from_bytes(head[:8], "little") <= size:
        return "a safetensors file"
    if head.startswith(b"\x1f\x8b"):
        return "a gzip file"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return JSON_KIND
    if text[:1] == b"<" and text[:9].lower().startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"<body")):
        return "an HTML/XML page (an error page saved in place of the download?)"
    if text[:4] == b"<S>\n":
        return "a vocabulary (one word per line)"
    if h5py.is_hdf5(str(path)):  # HDF5 behind a user block
        return HDF5_KIND
    return f"a file of another kind (it begins with {head[:8]!r})"


ADVICE = {  # what to do instead, for a file of each kind given as the weights
    "a safetensors file": "; our model.safetensors is loaded through its folder: give the folder as the model "
                          "(model=FOLDER, --model FOLDER)",
    "a zip archive": "; an NLPL model .zip is given as the model itself (model=FILE.zip, --model FILE.zip)",
    JSON_KIND: "; the weights are the .hdf5 file",
}


def hdf5_entries(path: str | Path) -> list[str] | None:
    """The top-level names of an HDF5 file (read without loading any data); None when h5py cannot open it."""
    try:
        with h5py.File(path, "r") as f:
            return list(f.keys())
    except (OSError, KeyError, RuntimeError, ValueError):
        return None


def holds_weights(entries: list[str]) -> bool:
    """True for the top-level names of a bilm-tf weight file (char_embed, CNN, CNN_high_0, CNN_proj, RNN_0 ...)."""
    return any(name == "char_embed" or name.startswith(("CNN", "RNN_")) for name in entries)


def is_weight_file(path: str | Path) -> bool | None:
    """True for an HDF5 file holding bilm-tf weights, False for any other file, None for an HDF5 file h5py cannot
    open (truncated or damaged: loading it names the problem)."""
    if describe_file(path) != HDF5_KIND:
        return False
    entries = hdf5_entries(path)
    return None if entries is None else holds_weights(entries)
