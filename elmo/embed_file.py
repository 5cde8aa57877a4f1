"""Embed a text file (one sentence per line) into an HDF5 file laid out like AllenNLP's ``allennlp elmo`` output.

One float32 dataset per line, named by its 0-based line number ("0", "1", ...) or by the sentence itself, plus a
``sentence_to_index`` JSON map (FORMAT.md §5). The input is streamed and each chunk is written as soon as it is
embedded, so memory stays flat however long the file is (only the sentence-to-index map grows, one short string per
line; ``forget_sentences`` drops it). The output appears only when complete (temporary file + rename).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Iterator, Literal

import h5py
import torch
from tqdm.auto import tqdm

from elmo.embed import run_batch
from elmo.io.atomic import atomic_path
from elmo.model.bilm import BiLM

OutputLayers = Literal["all", "top", "average"]


class InputFileError(ValueError):
    """Bad input text: names the file and line and says what to do."""


@dataclass
class Line:
    number: int  # 0-based line number, the dataset name
    text: str  # stripped
    tokens: list[str]


def read_lines(path: str | Path, errors: str = "strict") -> Iterator[Line]:
    """Stream a UTF-8 text file's lines (split on '\\n' only; CRLF accepted), stripped and whitespace-tokenised."""
    path = Path(path)
    with open(path, "rb") as f:
        for number, raw in enumerate(f):
            try:
                text = raw.decode("utf-8", errors=errors).strip()
            except UnicodeDecodeError as err:
                raise InputFileError(f"{path}, line {number + 1}: invalid UTF-8 at byte {err.start} "
                                     f"(use --errors replace to substitute U+FFFD)") from None
            yield Line(number, text, text.split())


def count_lines(path: str | Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) + _unterminated_last(path)


def _unterminated_last(path: str | Path) -> int:
    with open(path, "rb") as f:
        f.seek(0, 2)
        if f.tell() == 0:
            return 0
        f.seek(-1, 2)
        return int(f.read(1) != b"\n")


def embed_file(bilm: BiLM, input_path: str | Path, output_path: str | Path, layers: OutputLayers = "all",
               batch_size: int = 64, forget_sentences: bool = False, use_sentence_keys: bool = False,
               errors: str = "strict", progress: bool = True, device: str | torch.device = "cpu") -> int:
    """Embed every line of ``input_path`` into ``output_path``; returns the number of sentences.

    With a stateful ``bilm`` the lines run in file order, ``batch_size`` per batch, each line keeping its row
    (AllenNLP's exact behaviour). A deterministic ``bilm`` gives the same vectors however lines are grouped, so
    chunks of lines are sorted by length into batches for speed.
    """
    if layers not in ("all", "top", "average"):
        raise ValueError(f"layers must be 'all', 'top' or 'average', got {layers!r}")
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    bilm = bilm.to(device).eval()
    sentence_to_index: dict[str, str] = {}
    seen_keys: set[str] = set()
    total = count_lines(input_path)
    chunk_size = batch_size if bilm.stateful else max(batch_size * 16, 1024)
    lines = read_lines(input_path, errors)
    with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as out, \
            tqdm(total=total, unit="sent", disable=not progress, desc="embed") as bar:
        while chunk := list(islice(lines, chunk_size)):
            for line, array in zip(chunk, _embed_chunk(bilm, chunk, layers, batch_size, device)):
                key = _dataset_key(line, use_sentence_keys, seen_keys, input_path)
                out.create_dataset(key, data=array)
                if not (forget_sentences or use_sentence_keys):
                    sentence_to_index[line.text] = key  # a repeated sentence maps to its last line, as AllenNLP
            bar.update(len(chunk))
        if not (forget_sentences or use_sentence_keys):
            index = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
            index[0] = json.dumps(sentence_to_index)
    return total


def _embed_chunk(bilm: BiLM, chunk: list[Line], layers: OutputLayers, batch_size: int,
                 device: str | torch.device) -> list:
    if bilm.stateful:  # one batch, rows in file order
        return run_batch(bilm, [line.tokens for line in chunk], layers, device=device)
    order = sorted(range(len(chunk)), key=lambda i: -len(chunk[i].tokens))
    results: list = [None] * len(chunk)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        for i, array in zip(rows, run_batch(bilm, [chunk[i].tokens for i in rows], layers, device=device)):
            results[i] = array
    return results


def _dataset_key(line: Line, use_sentence_keys: bool, seen: set[str], path: str | Path) -> str:
    if not use_sentence_keys:
        return str(line.number)
    key = line.text
    where = f"{path}, line {line.number + 1}"
    if not key or key == "." or "/" in key:
        raise InputFileError(f"{where}: {key!r} cannot be an HDF5 dataset name ('/' separates groups); "
                             f"drop --use-sentence-keys to name datasets by line number")
    if key in seen:
        raise InputFileError(f"{where}: duplicate sentence {key[:60]!r} cannot be a key twice; "
                             f"drop --use-sentence-keys to name datasets by line number")
    seen.add(key)
    return key
