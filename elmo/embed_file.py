"""Embed a text file (one sentence per line) into an HDF5 file laid out like AllenNLP's ``allennlp elmo`` output.

One float32 dataset per line, named by its 0-based line number ("0", "1", ...) or by the sentence itself, plus a
``sentence_to_index`` JSON map (docs/format.md §5). The input is streamed and each chunk is written as soon as it is
embedded, so memory stays flat however long the file is (only the sentence-to-index map grows, one short string per
line; ``forget_sentences`` drops it). The output appears only when complete (temporary file + rename). An output
name ending in ``.npz`` gives a NumPy archive with the same keys instead (``np.load(path)["0"]``).

Lines are split on whitespace (pre-tokenised text, as AllenNLP reads it) unless ``tokenize`` names a tokenizer. The
HDF5 file records what made it as attributes of the file (``h5py.File(path).attrs``): ``model`` (its name or path,
when known), ``weights_sha256`` (``weights_sha256()``: a fingerprint of the weights), ``layers`` and ``tokenizer``
("whitespace" or the tokenizer's name). A ``.npz`` archive holds the same record as JSON in a 0-d string array
``__meta__`` (``json.loads(str(np.load(path)["__meta__"]))``).
"""

from __future__ import annotations

import itertools
import json
import shutil
import zipfile
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Literal, Union

import h5py
import numpy as np
import torch
from tqdm.auto import tqdm

from elmo.batching import length_batches, run_batch
from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import atomic_path
from elmo.io.text_lines import NotUtf8Error, TextLineError, count_lines, numbered_lines
from elmo.model.bilm import BiLM
from elmo.model.engine import InferenceEngine
from elmo.model.fingerprint import weights_sha256
from elmo.model.mix import check_layers
from elmo.text.tokenize import english_tokenize, get_tokenizer, korean_tokenize, whitespace_tokenize

OutputLayers = Literal["all", "top", "average"]
OUTPUT_LAYERS = ("all", "top", "average")  # what an embedding file holds (a layer index or a mix: use Embedder)
Tokenize = Union[str, Callable[[str], list[str]], None]
META_KEY = "__meta__"  # the record of model, layers and tokenizer in a .npz archive
MAX_TOKENS_PER_BATCH = 8192  # deterministic mode: rows x longest row per batch (a longer line runs alone)


class InputFileError(ElmoError, ValueError):
    """Bad input text: names the file and line and says what to do."""


@dataclass
class Line:
    number: int  # 0-based line number, the dataset name
    text: str  # stripped
    tokens: list[str]


def read_lines(path: str | Path, errors: str = "strict",
               tokenizer: Callable[[str], list[str]] | None = None) -> Iterator[Line]:
    """Stream a UTF-8 text file's lines (plain or gzip; split on '\\n' only; CRLF accepted), stripped and
    tokenised (whitespace unless a ``tokenizer`` is given)."""
    split = tokenizer or str.split
    try:
        for number, text in numbered_lines(path, errors):
            text = text.strip()
            yield Line(number - 1, text, split(text))
    except NotUtf8Error as err:  # the one fault a flag can get past
        raise InputFileError(f"{path}, line {err.line}: invalid UTF-8 at byte {err.byte} "
                             f"(use --errors replace to substitute U+FFFD)") from None
    except TextLineError as err:
        raise InputFileError(str(err)) from None


def embed_file(model: BiLM | InferenceEngine, input_path: str | Path, output_path: str | Path, layers: OutputLayers = "all",
               batch_size: int = 64, forget_sentences: bool = False, use_sentence_keys: bool = False,
               errors: str = "strict", progress: bool = True, device: str | torch.device = "cpu",
               resume: bool = False, chunk_size: int | None = None, tokenize: Tokenize = None,
               model_name: str | None = None) -> int:
    """Embed every line of ``input_path`` into ``output_path``; returns the number of sentences.

    Each line is split on whitespace unless ``tokenize`` asks for a tokenizer: None or "whitespace" (the default:
    pre-tokenised text, as AllenNLP), a name ("en", "ko", "ko-morph"), "model" for the model's own
    (``bilm.tokenizer_name``; whitespace when it has none), or a function str -> list[str]. ``model_name`` (a name
    or path) is recorded in the output with the weights' sha256, the layers and the tokenizer (module docstring).

    ``model``: an inference engine (used as it is), or a biLM (an fp32 engine is built on ``device``). With a stateful model the lines run in file order, ``batch_size`` per batch, each line keeping its row
    (AllenNLP's exact behaviour). A deterministic model gives the same vectors however lines are grouped, so
    chunks of lines are sorted by length into batches for speed.

    Progress is kept chunk by chunk in ``OUTPUT.parts/`` (each part written atomically); the parts are merged into
    ``output_path`` at the end and removed. ``chunk_size`` (deterministic mode) is how many lines are read,
    length-sorted and saved at a time. With ``resume=True`` a killed run continues after its last complete
    part (same input and settings required); without it, leftover parts are discarded.
    """
    bilm = model.bilm if isinstance(model, InferenceEngine) else model
    check_layers(layers, bilm.config.n_output_layers, OUTPUT_LAYERS, index=False)
    if batch_size < 1:
        raise UsageError(f"batch size must be >= 1, got {batch_size}")
    _check_paths(Path(input_path), Path(output_path))
    split, tokenizer_name = resolve_tokenize(tokenize, bilm)
    engine = model if isinstance(model, InferenceEngine) else InferenceEngine.build(bilm, device=device)
    sha256 = weights_sha256(bilm)
    record = {"model": model_name, "weights_sha256": sha256, "layers": layers, "tokenizer": tokenizer_name}
    npz = str(output_path).lower().endswith(".npz")
    if engine.stateful:
        chunk_size = batch_size  # one batch per chunk, in file order
    chunk_size = chunk_size or max(batch_size * 16, 1024)
    # parts are numbered by chunk, and their numbers by precision: a resumed run must agree on both
    parts = PartStore(Path(str(output_path) + ".parts"),
                      _run_fingerprint(engine, input_path, layers, batch_size, use_sentence_keys, errors, sha256)
                      | {"tokenizer": tokenizer_name, "chunk_size": chunk_size, "precision": engine.precision},
                      resume)
    if engine.stateful and parts.completed:
        engine.carrier.state = _on_device(parts.carried_state(parts.completed - 1), engine.device)
    sentence_to_index: dict[str, str] = {}
    seen_keys: set[str] = set()
    total = count_lines(input_path)
    lines = read_lines(input_path, errors, split)
    with tqdm(total=total, unit="sent", disable=not progress, desc="embed") as bar:
        number = 0
        while chunk := list(islice(lines, chunk_size)):
            keys = [_dataset_key(line, use_sentence_keys, seen_keys, input_path, npz) for line in chunk]
            if not (forget_sentences or use_sentence_keys):
                for line, key in zip(chunk, keys):
                    sentence_to_index[line.text] = key  # a repeated sentence maps to its last line, as AllenNLP
            if number >= parts.completed:  # not done by an earlier, killed run
                arrays = _embed_chunk(engine, chunk, layers, batch_size)
                parts.write(number, keys, arrays, engine.carrier.state if engine.stateful else None)
            number += 1
            bar.update(len(chunk))
    parts.merge_into(output_path, None if forget_sentences or use_sentence_keys else sentence_to_index,
                     {k: v for k, v in record.items() if v is not None})
    return total


def _check_paths(input_path: Path, output_path: Path) -> None:
    """Refuse, before any work, an input that cannot be read twice and an output that is a folder or the input."""
    if input_path.exists() and not input_path.is_file():
        raise InputFileError(f"{input_path}: not a regular file (a pipe or device?); the input is read twice (to "
                             f"count lines, then to embed them): save it to a file first")
    if output_path.is_dir():
        raise InputFileError(f"{output_path}: is a folder; give the output file's name (e.g. {output_path / 'out.hdf5'})")
    if output_path.exists() and output_path.resolve() == input_path.resolve():
        raise InputFileError(f"{output_path}: the output would overwrite the input; give another output file")


def resolve_tokenize(tokenize: Tokenize, bilm: BiLM) -> tuple[Callable[[str], list[str]] | None, str]:
    """(the function that splits a line, None for whitespace; the name recorded in the output) for ``tokenize``."""
    if tokenize == "model":
        tokenize = bilm.tokenizer_name
    if tokenize is None or isinstance(tokenize, str):
        if tokenize in (None, "whitespace", "none"):
            return None, "whitespace"
        return get_tokenizer(tokenize), tokenize
    if not callable(tokenize):
        raise UsageError(f"tokenize must be a tokenizer name, 'model' or a function str -> list[str], "
                         f"got {type(tokenize).__name__}")
    known = {whitespace_tokenize: "whitespace", str.split: "whitespace", english_tokenize: "en",
             korean_tokenize: "ko"}
    return tokenize, known.get(tokenize, getattr(tokenize, "__name__", "custom"))


class PartStore:
    """Finished chunks of an embedding run, one small HDF5 file each, written atomically."""

    def __init__(self, root: Path, fingerprint: dict, resume: bool) -> None:
        self.root = root
        manifest = root / "manifest.json"
        if root.exists() and resume and manifest.is_file():
            found = json.loads(manifest.read_text(encoding="utf-8"))
            if found != fingerprint:
                changed = sorted(k for k in fingerprint if found.get(k) != fingerprint[k])
                raise InputFileError(f"{root}: the interrupted run differs in {', '.join(changed)}; rerun it with the "
                                     f"same input, model and flags, or delete {root} to start over")
        elif root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True, exist_ok=True)
        with atomic_path(manifest) as tmp:
            tmp.write_text(json.dumps(fingerprint), encoding="utf-8")
        self.completed = 0  # parts 0 .. completed-1 exist
        while (self._path(self.completed)).is_file():
            self.completed += 1

    def _path(self, number: int) -> Path:
        return self.root / f"part-{number:08d}.h5"

    def write(self, number: int, keys: list[str], arrays: list[np.ndarray],
              state: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        with atomic_path(self._path(number)) as tmp, h5py.File(tmp, "w") as f:
            f.create_dataset("keys", data=keys, dtype=h5py.string_dtype())
            group = f.create_group("data")
            for i, array in enumerate(arrays):
                group.create_dataset(str(i), data=array)
            if state is not None:
                f.create_dataset("state_h", data=state[0].cpu().numpy())
                f.create_dataset("state_c", data=state[1].cpu().numpy())

    def carried_state(self, number: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        with h5py.File(self._path(number), "r") as f:
            if "state_h" not in f:
                return None
            return torch.from_numpy(f["state_h"][()]), torch.from_numpy(f["state_c"][()])

    def merge_into(self, output_path: str | Path, sentence_to_index: dict[str, str] | None,
                   attributes: dict[str, str] | None = None) -> None:
        """All parts into one file, in line order: HDF5 (AllenNLP's layout; ``attributes`` on the file), or a NumPy
        ``.npz`` archive with the same keys (``sentence_to_index`` then a 0-d string array holding the JSON, and
        ``attributes`` as JSON in ``__meta__``)."""
        write = _write_npz if str(output_path).lower().endswith(".npz") else _write_hdf5
        with atomic_path(output_path) as tmp:
            write(tmp, self._arrays(), None if sentence_to_index is None else json.dumps(sentence_to_index),
                  attributes or {})
        shutil.rmtree(self.root, ignore_errors=True)

    def _arrays(self) -> Iterator[tuple[str, np.ndarray]]:
        """(key, vectors) of every line, part by part: one part in memory at a time."""
        for number in itertools.count():
            path = self._path(number)
            if not path.is_file():
                return
            with h5py.File(path, "r") as part:
                for i, key in enumerate(part["keys"].asstr()[()]):
                    yield key, part["data"][str(i)][()]


def _write_hdf5(path: Path, arrays: Iterable[tuple[str, np.ndarray]], index_json: str | None,
                attributes: dict[str, str]) -> None:
    with h5py.File(path, "w") as out:
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
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, array in arrays:
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
        if index_json is not None:
            with archive.open("sentence_to_index.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.array(index_json), allow_pickle=False)
        if attributes:
            with archive.open(f"{META_KEY}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.array(json.dumps(attributes)), allow_pickle=False)


def _on_device(state, device: str | torch.device):
    """A carried state read back from a part (CPU tensors) moved to the device the model runs on."""
    return None if state is None else tuple(t.to(device) for t in state)


def _run_fingerprint(engine: InferenceEngine, input_path: str | Path, layers: str, batch_size: int, use_sentence_keys: bool,
                     errors: str, sha256: str) -> dict:
    stat = Path(input_path).stat()
    return {"input": str(Path(input_path).resolve()), "input_size": stat.st_size, "input_mtime": stat.st_mtime,
            "layers": layers, "batch_size": batch_size, "stateful": engine.stateful, "sentence_keys": use_sentence_keys,
            "errors": errors, "model": engine.config.to_options(), "weights_sha256": sha256}


def _embed_chunk(engine: InferenceEngine, chunk: list[Line], layers: OutputLayers, batch_size: int) -> list:
    # each chunk starts with an empty token memo, so a chunk's numbers never depend on the chunks before it: a
    # resumed run writes the same bits as an uninterrupted one
    engine.forget_tokens()
    if engine.stateful:  # one batch, rows in file order
        return run_batch(engine, [line.tokens for line in chunk], layers)
    results: list = [None] * len(chunk)
    for rows in length_batches([len(line.tokens) for line in chunk], batch_size, MAX_TOKENS_PER_BATCH):
        for i, array in zip(rows, run_batch(engine, [chunk[i].tokens for i in rows], layers)):
            results[i] = array
    return results


def _dataset_key(line: Line, use_sentence_keys: bool, seen: set[str], path: str | Path, npz: bool = False) -> str:
    if not use_sentence_keys:
        return str(line.number)
    key = line.text
    where = f"{path}, line {line.number + 1}"
    if not key or key == "." or "/" in key or "\0" in key:
        raise InputFileError(f"{where}: {key!r} cannot be an HDF5 dataset name (empty, '.', or holding '/' or "
                             f"a NUL character); "
                             f"drop --use-sentence-keys to name datasets by line number")
    if npz and key == META_KEY:
        raise InputFileError(f"{where}: {key!r} is a name the .npz archive keeps for itself; "
                             f"drop --use-sentence-keys to name datasets by line number")
    if key in seen:
        raise InputFileError(f"{where}: duplicate sentence {key[:60]!r} cannot be a key twice; "
                             f"drop --use-sentence-keys to name datasets by line number")
    seen.add(key)
    return key
