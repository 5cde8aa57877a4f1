"""Embed a text file (one sentence per line) into an HDF5 file laid out like AllenNLP's ``allennlp elmo`` output.

One float32 dataset per line, named by its 0-based line number ("0", "1", ...) or by the sentence itself, plus a
``sentence_to_index`` JSON map (FORMAT.md §5). The input is streamed and each chunk is written as soon as it is
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

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from elmo.batching import length_batches, run_batch
from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import (check_free_space, new_folders, path_argument, refuse_model_file, same_file,
                             writable_file)
from elmo.io.lock import lock_beside
from elmo.io.parts import FILE_OVERHEAD, LINE_OVERHEAD, META_KEY, PartStore
from elmo.io.work_folder import read_manifest
from elmo.io.text_lines import NotUtf8Error, TextLineError, TextScan, numbered_lines, scan_text
from elmo.limits import MAX_BATCH_SIZE, MAX_LINE_BYTES, MAX_TOKENS_PER_LINE, is_whole
from elmo.model.bilm import BiLM
from elmo.model.engine import InferenceEngine
from elmo.model.fingerprint import weights_sha256
from elmo.model.mix import check_flag, check_layers
from elmo.text.tokenize import english_tokenize, get_tokenizer, korean_tokenize, tokens_of, whitespace_tokenize

logger = logging.getLogger(__name__)

OutputLayers = Literal["all", "top", "average"]
OUTPUT_LAYERS = ("all", "top", "average")  # what an embedding file holds (a layer index or a mix: use Embedder)
Tokenize = Union[str, Callable[[str], list[str]], None]
MAX_TOKENS_PER_BATCH = 8192  # deterministic mode: rows x longest row per batch (a longer line runs alone)
CHUNK_BYTES = 256 << 20  # deterministic mode: a chunk's vectors (held until its part is written) stay under this
MAX_CHUNK_LINES = 16 * MAX_BATCH_SIZE  # ``chunk_size``'s upper bound


class InputFileError(ElmoError, ValueError):
    """Bad input text: names the file and line and says what to do."""


class NonFiniteVectorsError(ElmoError, ValueError):
    """The model gave NaN or infinite vectors (its weights overflow float32 on these lines)."""


@dataclass
class Line:
    number: int  # 0-based line number, the dataset name
    text: str  # stripped
    tokens: list[str]


def read_lines(path: str | Path, errors: str = "strict",
               tokenizer: Callable[[str], list[str]] | None = None) -> Iterator[Line]:
    """Stream a UTF-8 text file's lines (plain or gzip; split on '\\n' only; CRLF accepted), stripped and
    tokenised (whitespace unless a ``tokenizer`` is given). A line over ``MAX_LINE_BYTES`` bytes or
    ``MAX_TOKENS_PER_LINE`` tokens is an error naming it (elmo.limits)."""
    split = (lambda text: tokens_of(tokenizer, text)) if tokenizer is not None else str.split
    try:
        for number, text in numbered_lines(path, errors, MAX_LINE_BYTES):
            text = text.strip()
            tokens = split(text)
            if len(tokens) > MAX_TOKENS_PER_LINE:
                raise InputFileError(_too_many_tokens(path, number, len(tokens)))
            yield Line(number - 1, text, tokens)
    except NotUtf8Error as err:  # the one fault a flag can get past
        raise _not_utf8(path, err) from None
    except TextLineError as err:
        raise InputFileError(str(err)) from None


def _check_arguments(input_path: str | Path, output_path: str | Path, batch_size: int, chunk_size: int | None,
                     non_finite: str, errors: str, model_files: tuple[Path, ...]) -> tuple[Path, int, int | None]:
    """``embed_file``'s arguments, each refused in one line before anything is read or written; returns the file
    to write (``_check_paths``; a link: its target), which is none of the model's files (``BiLM.source_files``),
    and the batch and chunk sizes as Python ints (NumPy's would reach the run's JSON record)."""
    if not is_whole(batch_size, 1, MAX_BATCH_SIZE):
        raise UsageError(f"batch size must be a whole number in [1, {MAX_BATCH_SIZE:,}], got {batch_size!r}")
    if chunk_size is not None and not is_whole(chunk_size, 1, MAX_CHUNK_LINES):
        raise UsageError(f"chunk_size must be a whole number in [1, {MAX_CHUNK_LINES:,}] or None, got {chunk_size!r}")
    if isinstance(output_path, str) and output_path.endswith(("/", os.sep)):  # Path() would drop the slash
        raise UsageError(f"{output_path}: ends with a slash, a folder's name; give the output file's name")
    if non_finite not in ("error", "warn"):
        raise UsageError(f"non_finite must be 'error' or 'warn', got {non_finite!r}")
    check_errors(errors)
    target = _check_paths(path_argument(input_path, "embed_file: the input"),
                          path_argument(output_path, "embed_file: the output"))
    refuse_model_file(target, model_files)
    return target, int(batch_size), None if chunk_size is None else int(chunk_size)


def check_errors(errors: object) -> None:
    """``errors``: "strict" (stop at bytes that are not UTF-8) or "replace" (read them as U+FFFD); Python's other
    handlers would drop bytes from tokens or escape them, changing the user's words without a word."""
    if errors not in ("strict", "replace"):
        raise UsageError(f"errors must be 'strict' or 'replace', got {errors!r}")


def check_open_input(handle: object, output_path: str | Path) -> None:
    """An open input file (``Embedder.embed_file`` copies it first) that is the output file, refused as a named one
    is: by its name, or by its descriptor's device and inode."""
    output = path_argument(output_path, "embed_file: the output")
    name = getattr(handle, "name", None)
    same = isinstance(name, (str, os.PathLike)) and same_file(name, output)
    try:
        same = same or (output.exists() and os.path.samestat(os.fstat(handle.fileno()), output.stat()))
    except (AttributeError, OSError, ValueError):  # no descriptor (BytesIO, StringIO), or a closed file
        pass
    if same:
        raise InputFileError(f"{output}: the output would overwrite the input; give another output file")


def _not_utf8(path: str | Path, err: NotUtf8Error) -> InputFileError:
    return InputFileError(f"{path}, line {err.line}: invalid UTF-8 at byte {err.byte} "
                          f"(--errors replace, or errors='replace', substitutes U+FFFD)")


def _too_many_tokens(path: str | Path, line: int, tokens: int) -> str:
    return (f"{path}, line {line}: {tokens:,} tokens, above the limit of {MAX_TOKENS_PER_LINE:,} per line; "
            f"split it into sentences, one per line")


def embed_file(model: BiLM | InferenceEngine, input_path: str | Path, output_path: str | Path, layers: OutputLayers = "all",
               batch_size: int = 64, forget_sentences: bool = False, use_sentence_keys: bool = False,
               errors: str = "strict", progress: bool = True, device: str | torch.device = "cpu",
               resume: bool = False, chunk_size: int | None = None, tokenize: Tokenize = None,
               model_name: str | None = None, non_finite: str = "error", resumable: bool = True) -> int:
    """Embed every line of ``input_path`` into ``output_path``; returns the number of sentences written.

    Each line is split on whitespace unless ``tokenize`` asks for a tokenizer: None or "whitespace" (the default:
    pre-tokenised text, as AllenNLP), a name ("en", "ko", "ko-morph"), "model" for the model's own
    (``bilm.tokenizer_name``; whitespace when it has none), or a function str -> list[str]. ``model_name`` (a name
    or path) is recorded in the output with the weights' sha256, the layers and the tokenizer (module docstring).

    ``model``: an inference engine (used as it is), or a biLM (an fp32 engine is built on ``device``). With a
    stateful model the lines run in file order, ``batch_size`` per batch, each line keeping its row
    (AllenNLP's exact behaviour). A deterministic model gives the same vectors however lines are grouped, so
    chunks of lines are sorted by length into batches for speed.

    The whole input is decoded once before any work (a bad line fails in seconds), and the disk's free space is
    checked against an estimate of what the run writes. Progress is kept chunk by chunk in ``OUTPUT.parts/`` (a
    folder elmo owns: ``elmo.io.work_folder``); the parts are verified and merged into ``output_path`` at the end
    and removed. ``chunk_size`` (deterministic mode): lines read, length-sorted and saved at a time. ``resume=True``:
    a killed run continues after its last complete part (same input and settings); without it, leftover parts of
    elmo's are discarded. One run at a time writes an output (a lock beside it). NaN or infinite vectors are an
    error naming the lines (``non_finite="warn"``: a warning, and they are kept). ``resumable=False``: the input
    cannot be read again (the command line's copy of standard input), so a failed run removes its parts."""
    bilm = model.bilm if isinstance(model, InferenceEngine) else model
    # a str subclass (NumPy's) would reach the output file's attributes
    layers = str(check_layers(layers, bilm.config.n_output_layers, OUTPUT_LAYERS, index=False))
    forget_sentences, use_sentence_keys, resume = (check_flag(value, name, "embed_file") for value, name in (
        (forget_sentences, "forget_sentences"), (use_sentence_keys, "use_sentence_keys"), (resume, "resume")))
    output_path, batch_size, chunk_size = _check_arguments(input_path, output_path, batch_size, chunk_size,
                                                           non_finite, errors, bilm.source_files)
    split, tokenizer_name = resolve_tokenize(tokenize, bilm)
    with new_folders(Path(output_path).absolute().parent), lock_beside(output_path):
        scan = _scan_input(input_path, errors)
        if use_sentence_keys:  # a sentence that cannot be a key fails now, not after the chunks before it
            _check_keys(input_path, errors, str(output_path).lower().endswith(".npz"))
        engine = model if isinstance(model, InferenceEngine) else InferenceEngine.build(bilm, device=device)
        sha256 = weights_sha256(bilm)
        record = {"model": model_name, "weights_sha256": sha256, "layers": layers, "tokenizer": tokenizer_name}
        chunk_size, chunk_tokens = _chunking(engine, layers, batch_size, chunk_size, output_path, resume)
        _check_space(output_path, scan, bilm, layers, resume)
        # parts are numbered by chunk, and their numbers made by the engine's arithmetic: a resumed run agrees on both
        fingerprint = _run_fingerprint(engine, input_path, scan, layers, batch_size, use_sentence_keys, errors, sha256)
        parts = PartStore(Path(str(output_path) + ".parts"), fingerprint | {
            "tokenizer": tokenizer_name, "chunk_size": chunk_size, **engine.arithmetic(),
            **({"chunk_tokens": chunk_tokens} if chunk_tokens is not None else {})}, resume)
        try:
            index, chunks = _embed_into_parts(engine, parts, input_path, errors, split, (chunk_size, chunk_tokens),
                                              scan.lines, layers, batch_size, use_sentence_keys, progress, non_finite,
                                              keep_index=not (forget_sentences or use_sentence_keys))
        except BaseException as err:  # an error, or an interrupt (which even --quiet is told how to continue)
            parts.after_failure(resumable, interrupted=isinstance(err, KeyboardInterrupt))
            raise
        try:
            return parts.merge_into(output_path, index if not (forget_sentences or use_sentence_keys) else None,
                                    {k: v for k, v in record.items() if v is not None}, chunks, scan.lines)
        except KeyboardInterrupt:  # before the merged file's rename (after it, the merge finishes)
            parts.after_failure(resumable, interrupted=True)
            raise


def _embed_into_parts(engine: InferenceEngine, parts: PartStore, input_path: str | Path, errors: str,
                      split: Callable[[str], list[str]] | None, chunking: tuple[int, int | None], total: int,
                      layers: OutputLayers, batch_size: int, use_sentence_keys: bool, progress: bool,
                      non_finite: str, keep_index: bool) -> tuple[dict[str, str], int]:
    """Every chunk not finished by an earlier run, embedded into its part; (the sentence-to-index map, chunks)."""
    npz = str(parts.root).lower().endswith(".npz.parts")
    if engine.stateful and parts.completed:
        engine.carrier.state = _on_device(parts.carried_state(parts.completed - 1), engine.device)
    sentence_to_index: dict[str, str] = {}
    seen_keys: set[str] = set()
    lines = read_lines(input_path, errors, split)
    with tqdm(total=total, unit="sent", disable=not progress, desc="embed") as bar:
        number = 0
        for chunk in _chunks(lines, *chunking):
            keys = [_dataset_key(line, use_sentence_keys, seen_keys, input_path, npz) for line in chunk]
            if keep_index:
                for line, key in zip(chunk, keys):
                    sentence_to_index[line.text] = key  # a repeated sentence maps to its last line, as AllenNLP
            if number >= parts.completed:  # not done by an earlier, killed run
                arrays = _embed_chunk(engine, chunk, layers, batch_size)
                _check_finite(arrays, chunk, input_path, non_finite)
                parts.write(number, keys, arrays, engine.carrier.state if engine.stateful else None)
            number += 1
            bar.update(len(chunk))
    return sentence_to_index, number


def _check_keys(input_path: str | Path, errors: str, npz: bool) -> None:
    """Every line as a dataset name (``--use-sentence-keys``), checked in one pass before any work: a duplicate or
    an unusable sentence near the end of a long file would otherwise stop the run there, and no resume could pass
    it."""
    seen: set[str] = set()
    for line in read_lines(input_path, errors):
        _dataset_key(line, True, seen, input_path, npz)


def _chunking(engine: InferenceEngine, layers: OutputLayers, batch_size: int, chunk_size: int | None,
              output_path: Path, resume: bool) -> tuple[int, int | None]:
    """(lines, tokens) a chunk holds at most. Stateful: one batch in file order. Otherwise ``chunk_size`` lines
    (default 16 batches, at least 1,024) and CHUNK_BYTES of vectors, held until the chunk's part is written; a
    resumed run whose parts were cut by lines alone (an older elmo's) goes on cutting them so."""
    if engine.stateful:
        return batch_size, None
    lines = chunk_size or max(batch_size * 16, 1024)
    earlier = read_manifest(Path(str(output_path) + ".parts")) if resume else None
    if earlier is not None and "chunk_tokens" not in earlier["identity"]:
        return lines, None
    return lines, max(1, CHUNK_BYTES // _bytes_per_token(engine.bilm, layers))


def _chunks(lines: Iterator[Line], max_lines: int, max_tokens: int | None) -> Iterator[list[Line]]:
    """The lines in chunks of at most ``max_lines`` lines and (but for a single longer line) ``max_tokens`` tokens:
    the same chunks for the same input and settings, as a resumed run needs."""
    chunk: list[Line] = []
    tokens = 0
    for line in lines:
        if chunk and (len(chunk) == max_lines or (max_tokens is not None and tokens + len(line.tokens) > max_tokens)):
            yield chunk
            chunk, tokens = [], 0
        chunk.append(line)
        tokens += len(line.tokens)
    if chunk:
        yield chunk


def _bytes_per_token(bilm: BiLM, layers: OutputLayers) -> int:
    """Bytes of float32 vectors a token adds to the output: every layer's, or one."""
    return (bilm.config.n_output_layers if layers == "all" else 1) * bilm.config.output_dim * 4


def _scan_input(input_path: str | Path, errors: str) -> TextScan:
    """One decoding pass over the input before any work: lines, tokens (for the space estimate), and the first
    undecodable or oversized line as an error now."""
    try:
        scan = scan_text(input_path, errors, MAX_LINE_BYTES)
    except NotUtf8Error as err:
        raise _not_utf8(input_path, err) from None
    except TextLineError as err:
        raise InputFileError(str(err)) from None
    if scan.longest > MAX_TOKENS_PER_LINE:
        raise InputFileError(_too_many_tokens(input_path, scan.longest_line, scan.longest))
    if scan.carriage_return_line:  # AllenNLP's reader would start a new sentence there; whitespace splitting would not
        raise InputFileError(f"{input_path}, line {scan.carriage_return_line}: a carriage return (\\r) inside the "
                             f"line (old Mac line ends?); elmo reads one sentence per \\n: convert them first, "
                             f"e.g. tr '\\r' '\\n' < IN > OUT")
    return scan


def _check_space(output_path: str | Path, scan: TextScan, bilm: BiLM, layers: OutputLayers, resume: bool) -> None:
    """Refuse a run the disk cannot hold: the parts and then the merged file, each about the vectors' size."""
    vectors = scan.tokens * _bytes_per_token(bilm, layers) + scan.lines * LINE_OVERHEAD + FILE_OVERHEAD
    parts = Path(str(output_path) + ".parts")
    done = sum(p.stat().st_size for p in parts.glob("part-*.h5")) if resume and parts.is_dir() else 0
    check_free_space(output_path, max(2 * vectors - done, 0),
                     f"embedding {scan.lines:,} lines ({scan.tokens:,} tokens)")


def _check_finite(arrays: list[np.ndarray], chunk: list["Line"], input_path: str | Path, non_finite: str) -> None:
    """NaN or infinite vectors: an error naming the lines, or with ``non_finite="warn"`` a warning."""
    bad = [line.number + 1 for line, array in zip(chunk, arrays) if not np.isfinite(array).all()]
    if not bad:
        return
    shown = ", ".join(str(n) for n in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    message = (f"{input_path}, line{'s' if len(bad) > 1 else ''} {shown}: NaN or infinite vectors (the model's "
               f"weights overflow float32 on them)")
    if non_finite == "warn":
        logger.warning("%s; kept, as asked", message)
        return
    raise NonFiniteVectorsError(f"{message}; check the model, or pass --allow-non-finite to keep them")


def _check_paths(input_path: Path, output_path: Path) -> Path:
    """Refuse, before any work, an input that cannot be read twice and an output that is a folder or the input.
    Returns the file to write: the output itself, or the file a symbolic link names, so that the merge's rename
    replaces that file and keeps the link (renaming onto the link's name would put a file in the link's place and
    leave its target as it was), and the parts, the lock and the merged file lie beside it, on its file system."""
    if input_path.is_dir():
        raise InputFileError(f"{input_path}: is a folder; give a text file, one sentence per line")
    if input_path.exists() and not input_path.is_file():
        raise InputFileError(f"{input_path}: not a regular file (a pipe or device?); the input is read twice (to "
                             f"check it, then to embed it): save it to a file first")
    if output_path.is_dir():
        raise InputFileError(f"{output_path}: is a folder; give the output file's name (e.g. {output_path / 'out.hdf5'})")
    target = writable_file(output_path)  # not a device or a pipe, which the merged file's rename would replace
    if same_file(target, input_path):
        raise InputFileError(f"{output_path}: the output would overwrite the input; give another output file")
    parts = Path(str(target) + ".parts").resolve()
    if parts in input_path.resolve().parents:
        raise InputFileError(f"{input_path}: is inside {parts}, the folder where elmo keeps this output's parts; "
                             f"move the input, or choose another output file")
    return target


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


def _on_device(state, device: str | torch.device):
    """A carried state read back from a part (CPU tensors) moved to the device the model runs on."""
    return None if state is None else tuple(t.to(device) for t in state)


def _run_fingerprint(engine: InferenceEngine, input_path: str | Path, scan: TextScan, layers: str, batch_size: int,
                     use_sentence_keys: bool, errors: str, sha256: str) -> dict:
    """What a resumed run must share with the run that wrote the parts: the same text (its hash: lines swapped in a
    file of the same size and time would put vectors under other lines' keys), model, layers and settings."""
    return {"input": str(Path(input_path).resolve()), "input_size": Path(input_path).stat().st_size,
            "input_sha256": scan.sha256,
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


NPZ_MAX_KEY_BYTES = 65_535 - len(".npy")  # a zip entry's name is at most 65,535 bytes, and NumPy adds ".npy"


def _dataset_key(line: Line, use_sentence_keys: bool, seen: set[str], path: str | Path, npz: bool = False) -> str:
    if not use_sentence_keys:
        return str(line.number)
    key = line.text
    where = f"{path}, line {line.number + 1}"
    if not key or key == "." or "/" in key or "\0" in key:
        raise InputFileError(f"{where}: {key!r} cannot be an HDF5 dataset name (empty, '.', or holding '/' or "
                             f"a NUL character); "
                             f"drop --use-sentence-keys to name datasets by line number")
    if npz and (size := len(key.encode("utf-8"))) > NPZ_MAX_KEY_BYTES:
        raise InputFileError(f"{where}: a sentence of {size:,} bytes cannot name an entry of a "
                             f".npz archive (at most {NPZ_MAX_KEY_BYTES:,}); write .hdf5, or drop "
                             f"--use-sentence-keys to name datasets by line number")
    if npz and key == META_KEY:
        raise InputFileError(f"{where}: {key!r} is a name the .npz archive keeps for itself; "
                             f"drop --use-sentence-keys to name datasets by line number")
    if key in seen:
        raise InputFileError(f"{where}: duplicate sentence {key[:60]!r} cannot be a key twice; "
                             f"drop --use-sentence-keys to name datasets by line number")
    seen.add(key)
    return key
