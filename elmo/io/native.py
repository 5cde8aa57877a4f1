"""Our own model format: a directory with ``config.json`` (the options.json object) + ``model.safetensors``.

Never pickle: safetensors holds only tensors, JSON only plain data, so loading a file cannot run code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from elmo.config import ConfigError, ElmoConfig
from elmo.errors import ElmoError
from elmo.io.atomic import atomic_path
from elmo.model.bilm import BiLM

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1


class ModelFileError(ElmoError, ValueError):
    """A model directory whose files are missing, corrupt or do not match each other (one line)."""


def save_model(model: BiLM, out_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``model`` as a directory in our format; returns the directory.

    ``dtype=torch.float16`` halves the file (the shipped models use it); loading casts back to float32.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: _stored(v, dtype) for k, v in model.state_dict().items()}
    with atomic_path(out / WEIGHTS_NAME) as tmp:
        save_file(state, str(tmp), metadata={"format": "elmo", "version": str(FORMAT_VERSION)})
    config = {"format_version": FORMAT_VERSION, **model.config.to_options()}
    with atomic_path(out / CONFIG_NAME) as tmp:
        tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def _stored(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    tensor = tensor.detach().cpu()
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    return tensor.contiguous()


def is_model_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file()


def load_model(model_dir: str | Path, stateful: bool = False) -> BiLM:
    """Build from ``config.json``, then load ``model.safetensors`` strictly."""
    root = Path(model_dir)
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (root / name).is_file():
            raise ModelFileError(f"{root}: no {name}; a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    options = _read_json(root / CONFIG_NAME)
    version = options.pop("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ModelFileError(f"{root / CONFIG_NAME}: format_version {version!r} is not supported "
                             f"(this elmo reads {FORMAT_VERSION})")
    config = ElmoConfig.from_options(options, source=str(root / CONFIG_NAME))
    model = BiLM.from_config(config, stateful=stateful)
    try:
        state = load_file(str(root / WEIGHTS_NAME))
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFileError(f"{root / WEIGHTS_NAME}: not a readable safetensors file ({err})") from None
    load_state_strict(model, state, str(root / WEIGHTS_NAME))
    return model.eval()


def load_state_strict(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """``load_state_dict(strict=True)`` with one-line errors that name the tensor and both shapes."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    if missing:
        raise ModelFileError(f"{source}: tensor {missing[0]!r} is missing ({len(missing)} missing in all)")
    unexpected = [k for k in state if k not in expected]
    if unexpected:
        raise ModelFileError(f"{source}: unexpected tensor {unexpected[0]!r}; does config.json belong to it?")
    for name, value in state.items():
        if tuple(value.shape) != tuple(expected[name].shape):
            raise ModelFileError(f"{source}: tensor {name!r} has shape {tuple(value.shape)} where the config "
                                 f"implies {tuple(expected[name].shape)}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ModelFileError(f"{source}: tensor {name!r} holds NaN or infinite values")
    model.load_state_dict(state, strict=True)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data
