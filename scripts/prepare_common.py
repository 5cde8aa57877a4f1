"""What scripts/prepare_english.py and scripts/prepare_korean.py share: their inputs checked before any work, an
input that cannot be read as one line naming it, and their outputs written all or none."""

from __future__ import annotations

import csv
import gzip
import json
import zipfile
import zlib
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from elmo.cli.messages import one_line
from elmo.errors import ElmoError
from elmo.io.atomic import atomic_path, new_folders, write_errors


class DataFolderError(ElmoError, ValueError):
    """An input of the data folder missing, or not what it should be: one line naming it."""


def check_inputs(data: Path, names: Iterable[str]) -> None:
    """Refuse a data folder (``data``: its language's folder, en/ or ko/) that lacks one of the input files, before
    anything is read or written."""
    for name in names:
        if not (data / name).is_file():
            raise DataFolderError(f"{data / name}: no such file; check --data (the data folder, which holds "
                                  f"{data.name}/{name.split('/')[0]}/ and the other inputs)")


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn a data file that cannot be read as expected (not gzip or zip, damaged, not UTF-8, not JSON or TSV, a
    record of another shape, a field missing) into one line naming it."""
    try:
        yield
    except ElmoError:
        raise
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, UnicodeDecodeError, json.JSONDecodeError, csv.Error,
            KeyError, TypeError) as err:
        detail = f"no field {err}" if isinstance(err, KeyError) else one_line(err)
        raise DataFolderError(f"{path}: unreadable or not the expected data ({detail}); check --data") from None


def write_outputs(out: Path, texts: dict[str, str]) -> None:
    """Write each file of ``texts`` (name -> text; gzip for a name ending in .gz) into ``out``, each through a
    temporary file that replaces its name only once all are written; on a failure none is replaced, and the folders
    made for them are removed."""
    with new_folders(out), ExitStack() as stack:
        for name, text in texts.items():
            tmp = stack.enter_context(atomic_path(out / name))
            with write_errors(out / name):
                if name.endswith(".gz"):  # the header names the final file, as gzip.open(out / name) would
                    with open(tmp, "wb") as raw, gzip.GzipFile(name, "wb", fileobj=raw) as f:
                        f.write(text.encode("utf-8"))
                else:
                    tmp.write_text(text, encoding="utf-8")
