"""Walking an HDF5 file's datasets as the weight loaders read them: every name a dataset is reached by (soft links
included, links to other files refused), whether its values are stored in the file, and h5py's errors in a few
words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Container

import h5py
import numpy as np


class ExternalLinkError(ValueError):
    """A dataset name that links to another file: the weights must be in the file given."""


def visit_datasets(path: Path, look: Callable[[h5py.Dataset], object], wanted: Container[str] = ()) -> dict[str, Any]:
    """``look(dataset)`` of every dataset of an hdf5 file, by its full path without the leading '/'.

    A soft link (another name inside the file) to a dataset or a group counts as a name of what it leads to. A dataset
    with several names is listed once: under a name in ``wanted`` where it has one (the names the model's datasets
    have), else under the first. A link to another file is refused: the weights must be in the file given."""
    found: dict[str, Any] = {}
    names: dict[Any, str] = {}  # each dataset (its HDF5 object id): the name it is listed under

    def add(name: str, dataset: object) -> None:
        if not isinstance(dataset, h5py.Dataset):
            return
        listed = names.get(dataset.id)
        if listed is None or (name in wanted and listed not in wanted):
            found.pop(listed, None)
            names[dataset.id] = name
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
            target = f.get(name)  # a soft link: None where it leads nowhere
            add(name, target)
            if isinstance(target, h5py.Group):  # its datasets under this name too (links inside it are not followed)
                target.visititems(lambda inner, obj: add(f"{name}/{inner}", obj))
    return found


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
