"""Training configuration: a TOML file (or a named preset) with a [train] table and the model's [model.*] tables."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from elmo.config import ConfigError, ElmoConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass(frozen=True)
class TrainConfig:
    model: ElmoConfig = field(default_factory=ElmoConfig)
    batch_size: int = 128  # rows (parallel streams) per process; the global batch is batch_size x processes
    unroll_steps: int = 20  # tokens per row per batch: the truncated-BPTT length
    n_negative_samples: int = 8192  # sampled-softmax negatives per batch (full softmax when >= vocabulary size)
    optimizer: str = "adagrad"  # "adagrad" (bilm-tf) or "adam"
    learning_rate: float = 0.2
    initial_accumulator: float = 1.0  # Adagrad's starting accumulator
    clip_norm: float = 10.0  # global gradient-norm clip, applied to the gradient of loss x unroll_steps
    dropout: float = 0.1  # on every LSTM layer's input and on the top output before the softmax
    max_steps: int | None = None  # stop after this many batches (None: until max_minutes or forever)
    max_minutes: float | None = None  # stop after this much wall time
    checkpoint_every: int = 1250  # batches between checkpoints
    keep_checkpoints: int = 3  # how many recent checkpoints to keep
    log_every: int = 10  # batches between metrics-log lines
    seed: int = 0
    chunk_size: int = 20_000  # sentences read and shuffled at a time (bounds memory)
    max_bad_steps: int = 10  # stop after this many consecutive batches with a non-finite loss

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "model"}
        return {"train": data, "model": self.model.to_options()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "TrainConfig":
        train = dict(data.get("train", {}))
        known = {f.name for f in fields(cls)} - {"model"}
        unknown = sorted(set(train) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown training key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
        if "model" not in data:
            raise ConfigError(f"{source}: missing the [model.lstm] and [model.char_cnn] tables")
        config = cls(model=ElmoConfig.from_options(data["model"], source=source), **train)
        if config.optimizer not in ("adagrad", "adam"):
            raise ConfigError(f"{source}: optimizer must be 'adagrad' or 'adam', got {config.optimizer!r}")
        return config

    @classmethod
    def load(cls, name_or_path: str | Path) -> "TrainConfig":
        """A preset name (tiny, small-cpu, small, medium, original) or a .toml / .json file."""
        path = Path(name_or_path)
        if not path.exists():
            preset = PRESET_DIR / f"{name_or_path}.toml"
            if not preset.exists():
                names = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))
                raise ConfigError(f"{name_or_path}: no such file or preset (presets: {names})")
            path = preset
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"{path}: {err}") from None
        return cls.from_dict(data, source=str(path))

    def replace(self, **changes: Any) -> "TrainConfig":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})
