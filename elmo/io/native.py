"""Our own model format: a directory with ``config.json`` (the options.json object) + ``model.safetensors``.

config.json also names the tokenizer the model's text was split with (``"tokenizer": "en"``; null: whitespace), so a
model carries it wherever it is copied: ``load_model`` sets ``BiLM.tokenizer_name`` from it, ``save_model`` writes it.

Never pickle: safetensors holds only tensors, JSON only plain data, so loading a file cannot run code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from elmo.config import TOKENIZER_KEY, ConfigError, ElmoConfig, read_options, tokenizer_name
from elmo.errors import ElmoError, InputTypeError, UsageError
from elmo.io.atomic import atomic_path, check_free_space, output_folder, path_argument, write_errors
from elmo.model.bilm import BiLM

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1
LEGACY_TOKENIZER_NAME = "tokenizer.json"  # {"tokenize": "en"}: where folders written before config.json named it


class ModelFileError(ElmoError, ValueError):
    """A model directory whose files are missing, corrupt or do not match each other (one line)."""


def save_model(model: BiLM, out_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``model`` as a directory in our format; returns the directory.

    ``dtype=torch.float16`` halves the file (the shipped models use it); loading casts back to float32.
    ``model.tokenizer_name`` goes into config.json, so the copy splits raw text as the original does.
    """
    if not isinstance(model, BiLM):
        raise InputTypeError(f"save_model takes a BiLM, got {type(model).__name__}")
    if dtype not in (None, torch.float32, torch.float16, torch.bfloat16):
        raise UsageError(f"save_model: dtype must be torch.float32, torch.float16 or torch.bfloat16, got {dtype!r}")
    out = output_folder(out_dir, "save_model's out_dir")
    state = {k: _stored(k, v, dtype) for k, v in model.state_dict().items()}
    check_free_space(out / WEIGHTS_NAME, sum(t.numel() * t.element_size() for t in state.values()) + (1 << 20),
                     "the model's weights")
    out.mkdir(parents=True, exist_ok=True)
    with write_errors(out / WEIGHTS_NAME), atomic_path(out / WEIGHTS_NAME) as tmp:  # safetensors' own error too
        # one metadata key: safetensors writes several in a random order, and the same model would hash differently
        save_file(state, str(tmp), metadata={"format": f"elmo {FORMAT_VERSION}"})
    config = {"format_version": FORMAT_VERSION, TOKENIZER_KEY: model.tokenizer_name, **model.config.to_options()}
    with atomic_path(out / CONFIG_NAME) as tmp:
        tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def _stored(name: str, tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A weight as it is written: on the CPU, in ``dtype``, and finite. A NaN or infinite value, or one beyond
    float16's range (65,504) cast to inf, would make a file that ``load_model`` refuses: refused here, before anything
    is written."""
    tensor = tensor.detach().cpu()
    if dtype is not None and tensor.is_floating_point():
        stored = tensor.to(dtype)
        if not all_finite(stored) and all_finite(tensor):
            raise UsageError(f"save_model: {name!r} holds values beyond {dtype}'s range (largest "
                             f"{torch.finfo(dtype).max:,.0f}), which would be stored as inf; save with "
                             f"dtype=torch.float32 or torch.bfloat16")
        tensor = stored
    check_finite_weight(name, tensor, "save_model")
    return tensor.contiguous()


def check_finite_weight(name: str, tensor: torch.Tensor, who: str) -> None:
    """Refuse to write a weight holding NaN or inf: the file would not load again (every reader refuses it)."""
    if tensor.is_floating_point() and not all_finite(tensor):
        raise UsageError(f"{who}: the model's {name!r} holds NaN or infinite values; a model written with them would "
                         f"not load again (was it trained or edited into NaN?)")


def is_model_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file()


def load_model(model_dir: str | Path, stateful: bool = False) -> BiLM:
    """Build from ``config.json``, then load ``model.safetensors`` strictly; ``tokenizer_name`` from config.json."""
    root = path_argument(model_dir, "load_model's model_dir")
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (root / name).is_file():
            raise ModelFileError(f"{root}: no {name}; a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    options = _read_json(root / CONFIG_NAME)
    version = options.pop("format_version", FORMAT_VERSION)
    if type(version) is not int or version != FORMAT_VERSION:  # not `true`, which equals 1
        raise ModelFileError(f"{root / CONFIG_NAME}: format_version {version!r} is not supported "
                             f"(this elmo reads {FORMAT_VERSION})")
    tokenizer = _stored_tokenizer(options, root)
    options.pop(TOKENIZER_KEY, None)
    # strict and complete: save_model writes every key, so an unknown or missing one is damage, not a default
    config = ElmoConfig.from_options(options, source=str(root / CONFIG_NAME), strict=True, complete=True)
    with torch.device("meta"):  # no memory, no random initialisation: the file's tensors become the parameters
        model = BiLM.from_config(config, stateful=stateful)
    model.tokenizer_name = tokenizer
    check_tensor_headers(root / WEIGHTS_NAME, model)  # before any tensor is read
    try:
        state = load_file(str(root / WEIGHTS_NAME))  # memory-mapped
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFileError(f"{root / WEIGHTS_NAME}: not a readable safetensors file ({err})") from None
    load_state_strict(model, state, str(root / WEIGHTS_NAME), assign=True)
    model.source_files = (root / CONFIG_NAME, root / WEIGHTS_NAME)
    return model.eval()


def model_dir_tokenizer(model_dir: str | Path) -> str | None:
    """The tokenizer a model directory names, read as ``load_model`` reads it, without loading the weights."""
    root = Path(model_dir)
    return _stored_tokenizer(_read_json(root / CONFIG_NAME), root)


def _stored_tokenizer(options: dict, root: Path) -> str | None:
    """config.json's tokenizer; for a folder written before config.json held it, its tokenizer.json."""
    if TOKENIZER_KEY in options:
        return tokenizer_name(options, str(root / CONFIG_NAME))
    legacy = root / LEGACY_TOKENIZER_NAME
    if not legacy.is_file():
        return None
    return tokenizer_name({TOKENIZER_KEY: _read_json(legacy).get("tokenize")}, str(legacy))


_FLOAT_TYPES = ("F16", "BF16", "F32", "F64")


def check_tensor_headers(path: Path, model: torch.nn.Module) -> None:
    """Every tensor a safetensors file declares (its header: names, shapes, types; no data read) is one ``model``
    has (built on the meta device: shapes only), of its shape, floating-point where the model's is."""
    expected = model.state_dict()
    try:
        with safe_open(str(path), framework="pt") as f:
            found = {name: (tuple(f.get_slice(name).get_shape()), f.get_slice(name).get_dtype()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFileError(f"{path}: not a readable safetensors file ({err})") from None
    _check_names_and_shapes(expected, {name: shape for name, (shape, _) in found.items()}, str(path))
    for name, (_, dtype) in found.items():
        if expected[name].is_floating_point() and dtype not in _FLOAT_TYPES:
            raise ModelFileError(f"{path}: tensor {name!r} holds {dtype} values where floating-point numbers are "
                                 f"expected; the file is damaged or not a model")


def _check_names_and_shapes(expected: dict[str, torch.Tensor], found: dict[str, tuple[int, ...]],
                            source: str) -> None:
    """The same tensor names as the model's, each of its shape, or one line naming the first difference."""
    missing = [k for k in expected if k not in found]
    if missing:
        raise ModelFileError(f"{source}: tensor {missing[0]!r} is missing ({len(missing)} missing in all)")
    unexpected = [k for k in found if k not in expected]
    if unexpected:
        raise ModelFileError(f"{source}: unexpected tensor {unexpected[0]!r}, not one of this model's; the file is "
                             f"damaged or belongs to another model")
    for name, shape in found.items():
        if tuple(shape) != tuple(expected[name].shape):
            raise ModelFileError(f"{source}: tensor {name!r} has shape {tuple(shape)} where the config implies "
                                 f"{tuple(expected[name].shape)}")


def all_finite(tensor: torch.Tensor) -> bool:
    """True if no value is NaN or infinite. The plain sum (one pass, no allocation) is finite unless a value is
    not or the sum overflows; only then is every value checked."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def load_state_strict(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str,
                      assign: bool = False) -> None:
    """``load_state_dict(strict=True)`` with one-line errors that name the tensor and both shapes. ``assign``: the
    tensors become the parameters (a model built on the meta device), instead of being copied into them; either way
    in the model's dtypes."""
    expected = model.state_dict()
    _check_names_and_shapes(expected, {name: tuple(value.shape) for name, value in state.items()}, source)
    for name, value in state.items():
        if expected[name].is_floating_point() and not value.is_floating_point():
            raise ModelFileError(f"{source}: tensor {name!r} holds {str(value.dtype).removeprefix('torch.')} values "
                                 f"where floating-point numbers are expected; the file is damaged or not a model")
    # in the model's dtype first (float16 files: float32), so that float64 values beyond its range, which become
    # infinite there, are caught by the check below
    state = {name: value.to(expected[name].dtype) for name, value in state.items()}
    for name, value in state.items():
        if value.is_floating_point() and not all_finite(value):
            raise ModelFileError(f"{source}: tensor {name!r} holds NaN or infinite values, or values beyond "
                                 f"{str(value.dtype).removeprefix('torch.')}'s range")
    model.load_state_dict(state, strict=True, assign=assign)


def _read_json(path: Path) -> dict:
    """A JSON object file of our model folder (config.json, tokenizer.json), read as options files are."""
    data = read_options(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data
