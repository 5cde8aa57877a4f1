"""One entry point for every way of naming a model: our directory, an official pair, or a folder holding one."""

from __future__ import annotations

from pathlib import Path

from elmo.errors import UsageError
from elmo.io.checkpoint import list_checkpoints
from elmo.io.native import is_model_dir, load_model
from elmo.io.official import WeightFileError, load_official
from elmo.model.bilm import BiLM


def load_bilm(model: str | Path | None = None, options: str | Path | None = None,
              weights: str | Path | None = None, stateful: bool = False) -> BiLM:
    """Load a biLM from ``model`` (a name such as "en", "ko" or "original"; our directory; or a folder with
    options.json and one .hdf5) or from ``options`` + ``weights`` (the official pair). Nothing given: "en"."""
    from elmo import pretrained

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
    root = Path(model)
    if is_model_dir(root):
        return load_model(root, stateful=stateful)
    if root.is_dir() and (found := list_checkpoints(root)) and is_model_dir(found[-1]):
        return load_model(found[-1], stateful=stateful)  # a training run folder: its newest checkpoint
    if root.is_dir() and (root / "options.json").is_file():
        candidates = sorted(root.glob("*.hdf5"))
        if len(candidates) != 1:
            raise WeightFileError(f"{root}: expected exactly one .hdf5 weight file beside options.json, "
                                  f"found {len(candidates)}")
        return load_official(root / "options.json", candidates[0], stateful=stateful)
    shadowed = (f"; a local {root} shadows the model name {str(model)!r}: run elsewhere or rename the folder to use "
                f"the named model" if str(model) in pretrained.known_names() and root.exists() else "")
    raise FileNotFoundError(f"{root}: not a model directory (config.json + model.safetensors, "
                            f"or options.json + one .hdf5){shadowed}")
