"""Walking an HDF5 file's datasets as the weight loaders read them: every name a dataset is reached by (soft links
included, links to other files refused), whether its values are stored in the file, and h5py's errors in a few
words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Collection

import h5py
import numpy as np


class ExternalLinkError(ValueError):
    """A dataset name that links to another file: the weights must be in the file given."""


def visit_datasets(path: Path, look: Callable[[h5py.Dataset], object],
                   wanted: Collection[str] = ()) -> dict[str, Any]:
    """``look(dataset)`` of every dataset of an hdf5 file, by its full path without the leading '/'.

    Every name in ``wanted`` (the names of the model's datasets) that leads to a dataset, through hard or soft links,
    is listed; a dataset that has such a name is listed under those only, any other under the first name found (a
    soft link to a dataset or a group counts as a name). A link to another file is refused: the weights must be in
    the file given. A soft link that leads nowhere, or round in a circle, names nothing."""
    found: dict[str, Any] = {}
    listed: dict[Any, list[str]] = {}  # each dataset (its HDF5 object id): the names it is listed under

    def add(name: str, dataset: object) -> None:
        if not isinstance(dataset, h5py.Dataset):
            return
        names = listed.setdefault(dataset.id, [])
        if name in names or (names and name not in wanted):
            return
        for other in [n for n in names if n not in wanted]:  # a model's name replaces any other
            names.remove(other)
            found.pop(other)
        names.append(name)
        found[name] = look(dataset)

    with h5py.File(path, "r") as f:
        f.visititems(add)  # every object once, by a hard link's name
        links: list[tuple[str, object]] = []
        f.visititems_links(lambda name, link: None if isinstance(link, h5py.HardLink) else links.append((name, link)))
        for name, link in links:  # all checked before any soft link is followed (it might lead through one)
            if isinstance(link, h5py.ExternalLink):
                raise ExternalLinkError(f"{name!r} is a link to another file ({link.filename}); copy its data into "
                                        f"this file")
        for name, _ in links:
            target = _get(f, name)
            add(name, target)
            if isinstance(target, h5py.Group):  # its datasets under this name too
                target.visititems(lambda inner, obj: add(f"{name}/{inner}", obj))
        for name in wanted:  # a model's name reached otherwise: a second hard link, a link inside a linked group
            if name not in found:
                add(name, _get(f, name))
    return found


def _get(f: h5py.File, name: str) -> object | None:
    """The object at ``name`` (links followed), or None where the path leads nowhere or round in a circle."""
    try:
        return f.get(name)
    except (KeyError, RuntimeError, OSError):
        return None


def storage_problem(dataset: h5py.Dataset) -> str | None:
    """Why the dataset's values would not come from the file itself (virtual, external, never written), or None."""
    if dataset.is_virtual:
        return "is virtual (its values live in other files)"
    if dataset.external:
        return "keeps its values in external files"
    if dataset.size == 0:
        return None
    layout = dataset.id.get_create_plist().get_layout()
    if layout == h5py.h5d.CHUNKED:
        chunks = int(np.prod([-(-n // c) for n, c in zip(dataset.shape, dataset.chunks)]))
        return None if dataset.id.get_num_chunks() == chunks else "has values that were never written"
    if layout == h5py.h5d.CONTIGUOUS and dataset.id.get_storage_size() < dataset.size * dataset.dtype.itemsize:
        return "has values that were never written"
    return None


def hdf5_problem(err: Exception) -> str:
    """h5py's reason in a few words ("truncated (5,000 of 450,896 bytes) ..."), not its internal call chain."""
    text = str(err)
    if cut := re.search(r"truncated file: eof = (\d+).*stored_eof = (\d+)", text):
        return (f"truncated ({int(cut[1]):,} of {int(cut[2]):,} bytes); the download may be incomplete: "
                f"download it again")
    inner = re.findall(r"\(([^()]+)\)", text)
    return f"{inner[-1] if inner else text.splitlines()[0] if text else type(err).__name__}; the file may be damaged"
