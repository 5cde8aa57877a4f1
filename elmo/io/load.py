"""One entry point for every way of naming a model: a name, our directory, a training run, a folder of official
(bilm-tf, AllenNLP, S3-named) or NLPL files, an NLPL .zip, or the official options + weights pair."""

from __future__ import annotations

import os
from pathlib import Path

from elmo import pretrained
from elmo.errors import UsageError
from elmo.io import nlpl
from elmo.io.checkpoint import list_checkpoints
from elmo.io.native import ModelFileError, is_model_dir, load_model
from elmo.io.official import WeightFileError, describe_file, is_weight_file, load_official
from elmo.model.bilm import BiLM

LOOKED_FOR = ("config.json + model.safetensors (our format), checkpoint folders (a training run), options.json or "
              "*options*.json + a weights .hdf5 (bilm-tf, AllenNLP), options.json + model.hdf5 (NLPL)")
PATH_SUFFIXES = {".zip", ".hdf5", ".h5", ".json", ".safetensors"}  # a missing path ending so is not a model name


def load_bilm(model: str | Path | None = None, options: str | Path | None = None,
              weights: str | Path | None = None, stateful: bool = False) -> BiLM:
    """Load a biLM from ``model`` (a name such as "en", "ko" or "original", or a path: see ``load_path``) or from
    ``options`` + ``weights`` (the official pair). Nothing given: "en"."""
    if model is not None and (options is not None or weights is not None):
        raise UsageError("give either a model directory or --options and --weights, not both")
    if model is None and options is None and weights is None:
        model = pretrained.resolve(pretrained.DEFAULT_MODEL)["model"]  # shipped: a local folder "en" is not it
    elif model is not None and pretrained.is_model_name(str(model)):
        files = pretrained.resolve(str(model))
        model, options, weights = files.get("model"), files.get("options"), files.get("weights")
    if model is None:
        if options is None or weights is None:
            raise UsageError("no model: give a model directory, or both the options file and the weight file")
        return load_official(options, weights, stateful=stateful)
    return load_path(model, stateful=stateful)


def load_path(model: str | Path, stateful: bool = False) -> BiLM:
    """A biLM from a path: our model directory; a training run folder (its newest checkpoint); a folder holding an
    official pair (``options.json`` or ``*options*.json`` + the weights ``.hdf5``, picked by content where there
    are several .hdf5 files); an NLPL folder or .zip (its vocab.txt, if any, seeds the token cache)."""
    root = Path(model)
    if not root.exists():
        if _looks_like_name(str(model)):
            raise UsageError(pretrained.unknown_name_message(str(model), no_such_path=True))
        raise ModelFileError(f"{root}: no such file or folder")
    if root.is_file():
        kind = describe_file(root)
        if kind == "a zip archive":
            return _load_nlpl(nlpl.unpack_nlpl_zip(root), stateful)
        raise ModelFileError(f"{root}: {kind}, where a model folder, an NLPL .zip or a model name is expected; give "
                             f"the folder holding it, or an official pair as options= and weights= (--options/--weights)")
    if is_model_dir(root):
        return load_model(root, stateful=stateful)
    if (found := list_checkpoints(root)) and is_model_dir(found[-1]):
        return load_model(found[-1], stateful=stateful)  # a training run folder: its newest checkpoint
    pair = official_pair(root)
    if pair == (root / nlpl.OPTIONS_NAME, root / nlpl.WEIGHTS_NAME):
        return _load_nlpl(root, stateful)
    if pair is not None:
        return load_official(*pair, stateful=stateful)
    shadowed = (f"; a local {root} shadows the model name {str(model)!r}: run elsewhere or rename the folder to use "
                f"the named model" if str(model) in pretrained.known_names() else "")
    raise ModelFileError(f"{root}: not a model directory; looked for {LOOKED_FOR}{shadowed}")


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
        others = f" ({', '.join(p.name for p in hdf5)}: no bilm-tf weights in them)" if hdf5 else ""
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


def _load_nlpl(folder: Path, stateful: bool) -> BiLM:
    """An unpacked NLPL model: the official pair, with the token layer of its vocabulary's first words precomputed
    (exactly what the character CNN gives; only faster for those words)."""
    bilm = load_official(folder / nlpl.OPTIONS_NAME, folder / nlpl.WEIGHTS_NAME, stateful=stateful)
    if words := nlpl.vocab_words(folder):
        bilm.cache_tokens(words)
    return bilm  # tokenizer_name None (options.json names none): NLPL models split their text at whitespace


def _looks_like_name(text: str) -> bool:
    """True for something meant as a model name ("originl"), not a path ("./x", "a/b", "w.hdf5")."""
    return ("/" not in text and os.sep not in text and not text.startswith((".", "~"))
            and Path(text).suffix.lower() not in PATH_SUFFIXES)
