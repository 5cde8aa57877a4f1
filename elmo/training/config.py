"""Training configuration: a TOML file (or a named preset) with a [train] table and the model's [model.*] tables."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from elmo.config import PRESETS, ConfigError, ElmoConfig
from elmo.io.atomic import path_argument
from elmo.limits import MAX_BATCH_SIZE, MAX_COUNT, MAX_MINUTES, MAX_TRAINING_BATCH_TOKENS
from elmo.text.tokenize import TOKENIZER_NAMES

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
    zero_state_share: float = 1.0  # of the rows whose window begins a sentence: the share that starts it from zeros
    freeze_bilm_steps: int | None = None  # first batches that train the softmax alone (None: 0, or 1000 for a new
    # softmax over a pretrained biLM, --init-from a model without one: elmo.training.init_from)
    max_steps: int | None = None  # stop after this many batches (None: until max_minutes or forever)
    max_minutes: float | None = None  # stop after this much wall time
    checkpoint_every: int = 1250  # batches between checkpoints
    keep_checkpoints: int = 3  # how many recent checkpoints to keep
    log_every: int = 10  # batches between metrics-log lines
    seed: int = 0
    chunk_size: int = 20_000  # sentences read and shuffled at a time (bounds memory)
    max_bad_steps: int = 10  # stop after this many consecutive batches with a non-finite loss
    tokenize: str | None = None  # how raw lines are split (None: whitespace); recorded so the model is used alike

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "model"}
        return {"train": data, "model": self.model.to_options()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "TrainConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a training config holds the tables [train] and [model], got "
                              f"{type(data).__name__}")
        train = data.get("train", {})
        if not isinstance(train, dict):  # `train = 5` or [[train]]: dict() would fail, or pair up a table's keys
            raise ConfigError(f"{source}: [train] must be a table of settings (key = value lines), got "
                              f"{type(train).__name__}")
        known = {f.name for f in fields(cls)} - {"model"}
        unknown = sorted(set(train) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown training key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
        tables = sorted(set(data) - {"train", "model"})
        if tables:
            raise ConfigError(f"{source}: unknown table [{tables[0]}]; a training config has [train] and [model.*]")
        if "model" not in data:
            raise ConfigError(f"{source}: missing the [model.lstm] and [model.char_cnn] tables")
        config = cls(model=_model(data["model"], source), **train)
        config.check(source)
        return config

    def check(self, source: str = "config") -> None:
        """Every training setting of the right type and range, or a ConfigError naming the key."""
        if not isinstance(self.model, ElmoConfig):
            raise ConfigError(f"{source}: model must be an ElmoConfig (the model's sizes, e.g. elmo.config.PRESETS"
                              f"['tiny']), got {type(self.model).__name__}")
        for key, (kind, low, strict) in _RULES.items():
            value = getattr(self, key)
            if value is None and key in _OPTIONAL:
                continue
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ConfigError(f"{source}: training key {key!r} must be {'an integer' if kind is int else 'a number'}"
                                  f", got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"{source}: training key {key!r} must be a finite number, got {value!r}")
            if value < low or (strict and value == low):
                bound = f"greater than {low}" if strict else f"at least {low}"
                raise ConfigError(f"{source}: training key {key!r} must be {bound}, got {value!r}")
            if value > (high := _UPPER.get(key, MAX_COUNT)):
                raise ConfigError(f"{source}: training key {key!r} must be at most {high:,}, got {value!r}")
        if (tokens := self.batch_size * self.unroll_steps) > MAX_TRAINING_BATCH_TOKENS:  # each within its own limit
            raise ConfigError(f"{source}: batch_size x unroll_steps is {tokens:,} tokens a batch, above the limit of "
                              f"{MAX_TRAINING_BATCH_TOKENS:,} (its character ids alone would take "
                              f"{tokens * 800 / 1e9:,.0f} GB): give a smaller batch_size or unroll_steps")
        if self.tokenize is not None and self.tokenize not in TOKENIZER_NAMES:
            raise ConfigError(f"{source}: tokenize must be one of {', '.join(TOKENIZER_NAMES)}, got {self.tokenize!r}")
        if self.optimizer not in ("adagrad", "adam"):
            raise ConfigError(f"{source}: optimizer must be 'adagrad' or 'adam', got {self.optimizer!r}")
        if not 0 <= self.zero_state_share <= 1:
            raise ConfigError(f"{source}: training key 'zero_state_share' must be in [0, 1], got "
                              f"{self.zero_state_share!r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"{source}: training key 'dropout' must be in [0, 1), got {self.dropout!r}")

    def resumed(self, given: dict[str, Any]) -> "TrainConfig":
        """This (a checkpoint's) config continued with the settings ``given`` now (None: not given).

        How long to run and how often to checkpoint or log may change; a new stopping rule replaces the old one
        whole (``--max-minutes`` alone drops an earlier ``--max-steps``). Settings that fix the data order, the
        batch shapes, the optimiser or the model cannot change on an exact resume: asking for it is an error.
        """
        given = {k: v for k, v in given.items() if v is not None}
        if given.get("tokenize") == "whitespace" and self.tokenize is None:  # one way of splitting, said two ways
            del given["tokenize"]
        fixed = sorted(k for k in given if k not in RUN_SETTINGS and getattr(self, k) != given[k])
        if fixed:
            raise ConfigError(f"cannot change {', '.join(fixed)} when resuming (the checkpoint continues exactly "
                              f"as it was trained); drop those flags, or start a new run from its weights with "
                              f"--init-from")
        if "max_steps" in given or "max_minutes" in given:
            given = {"max_steps": None, "max_minutes": None} | given
        resumed = replace(self, **given)
        resumed.check("resumed run")
        return resumed

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any], source: str = "checkpoint") -> "TrainConfig":
        """A checkpoint's recorded config. A setting added after the checkpoint was written takes the value its run
        trained with (``ADDED_LATER``), not today's default: a resumed run continues as it was trained."""
        train = {**ADDED_LATER, **data.get("train", {})}
        return cls.from_dict({**data, "train": train}, source=source)

    @classmethod
    def load(cls, name_or_path: str | Path) -> "TrainConfig":
        """A preset name (tiny, small-cpu, small, medium, original) or a .toml / .json file."""
        path = path_argument(name_or_path, "TrainConfig.load")  # None or "" (an unset variable): one line
        if not path.is_file():  # a preset's name (a folder of that name in the working directory is not a config)
            preset = PRESET_DIR / f"{name_or_path}.toml"
            if not preset.exists():
                names = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.toml")))
                what = "is a folder, not a config file," if path.is_dir() else "no such file"
                raise ConfigError(f"{name_or_path}: {what} and not a preset (presets: {names})")
            path = preset
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text, object_pairs_hook=_unique_keys) if path.suffix == ".json" else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError, ConfigError) as err:
            raise ConfigError(f"{path}: {err}") from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); is this a training config?") from None
        except ValueError as err:  # e.g. an integer longer than Python converts (4,300 digits)
            raise ConfigError(f"{path}: not a readable training config ({err})") from None
        except OSError as err:
            raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
        except RecursionError:
            raise ConfigError(f"{path}: nested too deeply to be a training config") from None
        _check_optimizer_keys(data, str(path))
        return cls.from_dict(data, source=str(path))

    def replace(self, **changes: Any) -> "TrainConfig":
        """This config with ``changes`` (a None value leaves that setting as it is: a flag not given), checked like a
        config file: an unknown key or a value out of range is a ConfigError naming it, not a TypeError from the
        dataclass or a run that starts and fails inside torch (``batch_size=-1``) or trains otherwise (``optimizer
        ="sgd"`` would run Adagrad)."""
        known = {f.name for f in fields(self)}
        if unknown := sorted(set(changes) - known):
            raise ConfigError(f"TrainConfig.replace: unknown training key {unknown[0]!r}; known keys: "
                              f"{', '.join(sorted(known))}")
        changed = replace(self, **{k: v for k, v in changes.items() if v is not None})
        changed.check("TrainConfig.replace")
        return changed


# settings added after the first checkpoints were written -> the behaviour of runs from before them
ADDED_LATER: dict[str, Any] = {"zero_state_share": 0.0,  # bilm-tf's way: every sentence continues the carried state
                               "freeze_bilm_steps": 0}
# settings a resumed run may change (the rest must match the checkpoint)
RUN_SETTINGS = ("max_steps", "max_minutes", "checkpoint_every", "keep_checkpoints", "log_every", "max_bad_steps",
                "zero_state_share")
_NUMBER = (int, float)
_RULES: dict[str, tuple[type | tuple, float, bool]] = {  # key -> (type, bound, whether the bound itself is excluded)
    "batch_size": (int, 1, False), "unroll_steps": (int, 1, False), "n_negative_samples": (int, 1, False),
    "learning_rate": (_NUMBER, 0, True), "initial_accumulator": (_NUMBER, 0, False), "clip_norm": (_NUMBER, 0, True),
    "dropout": (_NUMBER, 0, False), "max_steps": (int, 1, False), "max_minutes": (_NUMBER, 0, True),
    "checkpoint_every": (int, 1, False), "keep_checkpoints": (int, 1, False), "log_every": (int, 1, False),
    "seed": (int, 0, False), "chunk_size": (int, 1, False), "max_bad_steps": (int, 1, False),
    "zero_state_share": (_NUMBER, 0, False), "freeze_bilm_steps": (int, 0, False),
}
# upper bounds (elmo.limits): a setting above them asks for more memory or time than any machine has; others: MAX_COUNT
_UPPER = {"batch_size": MAX_BATCH_SIZE, "unroll_steps": 100_000, "n_negative_samples": 10_000_000,
          "max_minutes": MAX_MINUTES, "keep_checkpoints": 1_000_000, "chunk_size": 100_000_000, "seed": 2**62,
          "learning_rate": 1e6, "initial_accumulator": 1e6, "clip_norm": 1e12}
_OPTIONAL = {"max_steps", "max_minutes", "freeze_bilm_steps"}  # None: no limit (freeze_bilm_steps: the default)
_TRAIN_KEYS = {f.name for f in fields(TrainConfig)} - {"model"}  # the keys of [train]


def _check_optimizer_keys(data: Any, source: str) -> None:
    """A config file that sets ``initial_accumulator`` (Adagrad's) for ``optimizer = "adam"`` is refused: Adam has
    no accumulator, so the run would train without the setting it was given. Checked on files only: a checkpoint
    records every key, the unused one included."""
    train = data.get("train") if isinstance(data, dict) else None
    if isinstance(train, dict) and train.get("optimizer") == "adam" and "initial_accumulator" in train:
        raise ConfigError(f"{source}: initial_accumulator is Adagrad's starting accumulator, and optimizer = \"adam\" "
                          f"has none: remove it, or use optimizer = \"adagrad\"")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of the pairs, refusing a key given twice: ``json`` keeps the last value, so the first one
    would be dropped without a word (TOML refuses a repeated key itself)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ConfigError(f"the key {key!r} is given twice in one object ({data[key]!r}, then {value!r}); "
                              f"keep one")
        data[key] = value
    return data


def _model(table: Any, source: str) -> ElmoConfig:
    """The [model] table: ``preset = "small"`` (a size from ``elmo.config.PRESETS``, the one table of named sizes)
    or the full [model.lstm] and [model.char_cnn] tables, and nothing else: a training setting there (bilm-tf's
    options.json keeps ``dropout`` and ``unroll_steps`` beside the sizes) would otherwise be passed over unread,
    and the run would train with the [train] value or the default."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [model] must be a table: preset = NAME, or the [model.lstm] and "
                          f"[model.char_cnn] tables; got {type(table).__name__}")
    if "preset" in table:
        name, rest = table["preset"], sorted(set(table) - {"preset"})
        if rest:
            raise ConfigError(f"{source}: [model] has preset = {name!r} and {rest[0]!r}; give a preset or the "
                              f"[model.lstm] and [model.char_cnn] tables, not both")
        if not isinstance(name, str) or name not in PRESETS:
            raise ConfigError(f"{source}: [model] preset {name!r} is not a model size; known: {', '.join(PRESETS)}")
        return PRESETS[name]
    if extra := sorted(set(table) - {"lstm", "char_cnn"}):
        where = ("a training setting: move it to [train]" if extra[0] in _TRAIN_KEYS else
                 "not read there: [model] holds the [model.lstm] and [model.char_cnn] tables only (or a preset)")
        raise ConfigError(f"{source}: [model] holds {extra[0]!r}, {where}")
    return ElmoConfig.from_options(table, source=source, strict=True)
