"""One resolver for every way of naming a model: ``resolve`` turns a name ("en", "original"), our folder, a training
checkpoint or run folder, a folder of official (bilm-tf, AllenNLP, S3-named) or NLPL files, an NLPL .zip, or the
official options + weights pair into a :class:`ModelFiles`. Every loader and entry point goes through it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, TypeVar

from elmo import pretrained
from elmo.errors import ElmoError, UsageError
from elmo.io import nlpl
from elmo.io.atomic import path_argument
from elmo.io.checkpoint import checkpoint_step, is_checkpoint, list_checkpoints, named_as_its_step
from elmo.io.model_files import ModelFiles
from elmo.io.file_kinds import HDF5_KIND, describe_file, is_weight_file
from elmo.io.native import CONFIG_NAME, WEIGHTS_NAME, ModelFileError, is_model_dir
from elmo.io.official import WeightFileError

LOOKED_FOR = ("config.json + model.safetensors (our format), checkpoint folders (a training run), options.json or "
              "*options*.json + a weights .hdf5 (bilm-tf, AllenNLP), options.json + model.hdf5 (NLPL)")
T = TypeVar("T")
PATH_SUFFIXES = {".zip", ".hdf5", ".h5", ".json", ".safetensors"}  # a missing path ending so is not a model name


def resolve(model: str | Path | None = None, options: str | Path | None = None,
            weights: str | Path | None = None) -> ModelFiles:
    """The files of ``model`` (a name such as "en", "ko" or "original", or a path: see ``resolve_path``) or of
    ``options`` + ``weights`` (the official pair). Nothing given: "en". A name is downloaded (once) here."""
    if model is not None and (options is not None or weights is not None):
        raise UsageError("give either a model directory or --options and --weights, not both")
    for value, what in ((model, "model"), (options, "options"), (weights, "weights")):
        if value is not None:
            path_argument(value, what)  # a name, or a path: a str or os.PathLike
    if model is None and options is None and weights is None:
        return pretrained.resolve(pretrained.DEFAULT_MODEL)  # shipped: a local folder "en" is not it
    if model is not None and pretrained.is_model_name(str(model)):
        return pretrained.resolve(str(model))
    if model is None:
        if options is None or weights is None:
            raise UsageError("no model: give a model directory, or both the options file and the weight file")
        for value in (options, weights):
            _refuse_url(value)
        return ModelFiles(Path(options), Path(weights), official=True)
    return resolve_path(model)


def _refuse_url(value: str | Path) -> None:
    """A URL given where a model's path goes: one line saying so (``Path()`` would fold its "//", and the message
    then name a path that was never given)."""
    if not Path(value).exists() and re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", str(value)):
        raise UsageError(f"{value}: a URL; models are not downloaded from addresses: download the file and give "
                         f"its path, or give a model name (`elmo info --help` lists them)")


NEWEST_TRIES = 3  # reads of a run folder's newest checkpoint, when a running training prunes the one being read


def read_resolved(model: str | Path | None, read: Callable[[ModelFiles], T], options: str | Path | None = None,
                  weights: str | Path | None = None, files: ModelFiles | None = None) -> T:
    """``read(resolve(model, options, weights))`` (``files``: what ``resolve`` gave a moment ago, read first). A run
    folder means its newest checkpoint; a run still training there with ``keep_checkpoints = 1`` deletes that one
    once it has saved the next, maybe while it is read: then the new newest is read (up to NEWEST_TRIES times),
    rather than failing on a file that was there a moment ago (``resolve`` itself lists the checkpoints again when
    the newest is gone between its listing and its check)."""
    for tries in range(1, NEWEST_TRIES + 1):
        files = files if files is not None and tries == 1 else resolve(model, options, weights)
        try:
            return read(files)
        except (ElmoError, OSError):
            if tries == NEWEST_TRIES or not _newer_than(files, model):
                raise
    raise AssertionError("unreachable")


def _newer_than(files: ModelFiles, model: str | Path | None) -> bool:
    """Whether ``files`` were a run folder's newest checkpoint, now gone, and the folder has a newer one."""
    step = checkpoint_step(files.folder) if model is not None and files.folder.parent == Path(model) else None
    if step is None or is_checkpoint(files.folder):
        return False
    found = list_checkpoints(model)
    return bool(found) and checkpoint_step(found[-1]) > step


def resolve_path(model: str | Path) -> ModelFiles:
    """The files at a path: our model directory; a training run folder (its newest checkpoint); a folder holding an
    official pair (``options.json`` or ``*options*.json`` + the weights ``.hdf5``, picked by content where there
    are several .hdf5 files); an NLPL folder or .zip (its vocab.txt, if any, seeds the token cache)."""
    root = Path(model)
    if not root.exists():
        _refuse_url(model)
        if _looks_like_name(str(model)):
            raise UsageError(pretrained.unknown_name_message(str(model), no_such_path=True))
        raise ModelFileError(f"{root}: no such file or folder")
    if root.is_file():
        kind = describe_file(root)
        if kind == "a zip archive":
            return _nlpl_files(nlpl.unpack_nlpl_zip(root))
        raise ModelFileError(f"{root}: {kind}, where a model folder, an NLPL .zip or a model name is expected; give "
                             f"the folder holding it, or an official pair as options= and weights= (--options/--weights)")
    if is_model_dir(root):
        return ModelFiles.of_folder(root)
    if found := list_checkpoints(root):  # a training run folder: its newest checkpoint
        return ModelFiles.of_folder(named_as_its_step(_newest_whole(root, found)))
    pair = official_pair(root)
    if pair == (root / nlpl.OPTIONS_NAME, root / nlpl.WEIGHTS_NAME):
        return _nlpl_files(root)
    if pair is not None:
        return ModelFiles(*pair, official=True)
    shadowed = (f"; a local {root} shadows the model name {str(model)!r}: run elsewhere or rename the folder to use "
                f"the named model" if str(model) in pretrained.known_names() else "")
    raise ModelFileError(f"{root}: not a model directory; looked for {LOOKED_FOR}{shadowed}")


def _newest_whole(root: Path, found: list[Path]) -> Path:
    """The newest of a run folder's checkpoints (``found``: its listing), holding its model. A run training there
    with ``keep_checkpoints = 1`` deletes it once it has saved the next, maybe right after the listing: the listing
    is then taken again (up to NEWEST_TRIES times). A newest checkpoint with a file missing and none newer is named."""
    for _ in range(NEWEST_TRIES):
        if is_model_dir(found[-1]):
            return found[-1]
        again = list_checkpoints(root)
        if not again or checkpoint_step(again[-1]) <= checkpoint_step(found[-1]):  # none newer: damaged, not pruned
            break
        found = again
    missing = next((name for name in (CONFIG_NAME, WEIGHTS_NAME) if not (found[-1] / name).is_file()), CONFIG_NAME)
    older = f" ({found[-2].name} is the one before it)" if len(found) > 1 else ""
    raise ModelFileError(f"{found[-1] / missing}: missing from the run's newest checkpoint; give an older checkpoint "
                         f"folder itself{older}, or move the damaged one out of the run")


def reference(model: str | Path | None) -> str:
    """How a record (a task model, an embedding file) names a model: a name stays a name (None: the default one);
    a path becomes absolute, so the record works from elsewhere."""
    if model is None:
        return pretrained.DEFAULT_MODEL
    return str(model) if pretrained.is_model_name(str(model)) else str(Path(model).resolve())


def resolve_reference(recorded: str) -> ModelFiles:
    """The files of a model as a record names it (``reference``): a registered name is that model even where a
    local folder has its name (a record names a folder by its absolute path, never by a bare name)."""
    if recorded in pretrained.known_names():
        return pretrained.resolve(recorded)
    return resolve(recorded)


def model_reference(model: str | Path | None, options: str | Path | None = None,
                    weights: str | Path | None = None) -> str:
    """``reference`` of a model given either way: the official pair as ``OPTIONS + WEIGHTS``, both absolute."""
    if options is not None or weights is not None:
        return f"{Path(options).resolve()} + {Path(weights).resolve()}"
    return reference(model)


def recorded_tokenizer(path: str | Path) -> str | None:
    """The tokenizer name ("en", "ko" ...) of the model folder at ``path`` without loading it (a model directory or
    checkpoint, a run directory's newest checkpoint, an official folder). None: whitespace-split text, or no model
    folder there."""
    path = Path(path)
    if not path.is_dir():
        return None
    try:
        files = resolve_path(path)
    except (ModelFileError, WeightFileError, UsageError):
        return None
    return files.tokenizer


def official_pair(folder: Path) -> tuple[Path, Path] | None:
    """The options file and weight file of the one official model in ``folder``; None when it holds neither.

    Weight files are told apart from other HDF5 files (AllenNLP's lm_embeddings_*.hdf5, token embedding dumps) by
    their datasets. One options file and one weight file go together whatever their names; with more, the S3
    names pair them (``X_options.json`` with ``X_weights.hdf5``), and several such pairs are refused.
    """
    options = sorted(p for p in folder.glob("*.json") if "options" in p.name and p.is_file())
    hdf5 = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".hdf5", ".h5") and p.is_file())
    weights = [p for p in hdf5 if is_weight_file(p) is not False]  # None: unreadable HDF5, loading names why
    if not options and not weights:
        return None
    if not weights:
        kinds = [f"{p.name}: {'no bilm-tf weights in it' if (kind := describe_file(p)) == HDF5_KIND else kind}"
                 for p in hdf5]  # an empty or damaged file says so
        others = f" ({'; '.join(kinds)})" if hdf5 else ""
        raise WeightFileError(f"{folder}: {options[0].name} but no weight file beside it{others}; add the weights "
                              f".hdf5 (the one with char_embed, CNN and RNN_0 datasets)")
    if not options:
        raise ModelFileError(f"{folder}: {weights[0].name} but no options file beside it; add the options.json "
                             f"that came with it")
    if len(options) == 1 and len(weights) == 1:
        return options[0], weights[0]
    pairs = [(o, w) for o in options for w in weights if o.name[: -len(".json")].replace("options", "weights") == w.stem]
    if len(pairs) == 1:
        return pairs[0]
    if pairs:
        listed = ", ".join(f"{o.name} + {w.name}" for o, w in pairs)
        raise UsageError(f"{folder}: holds {len(pairs)} models ({listed}); give one pair as options= and weights= "
                         f"(--options/--weights)")
    raise UsageError(f"{folder}: cannot tell which options file goes with which weights ("
                     f"{', '.join(p.name for p in options)}; {', '.join(p.name for p in weights)}); give the pair as "
                     f"options= and weights= (--options/--weights)")


def _nlpl_files(folder: Path) -> ModelFiles:
    """An unpacked NLPL model: the official pair, and its vocab.txt (if any) to seed the token cache."""
    vocab = folder / nlpl.VOCAB_NAME
    return ModelFiles(folder / nlpl.OPTIONS_NAME, folder / nlpl.WEIGHTS_NAME,
                      cache_words=vocab if vocab.is_file() else None, official=True)


def _looks_like_name(text: str) -> bool:
    """True for something meant as a model name ("originl"), not a path ("./x", "a/b", "w.hdf5")."""
    return ("/" not in text and os.sep not in text and not text.startswith((".", "~"))
            and Path(text).suffix.lower() not in PATH_SUFFIXES)
