"""Typed model configuration, read from and written to bilm-tf's ``options.json``.

The options file is the only description of an official ELMo model, so the config mirrors its keys one to one
(docs/format.md §1). Keys the model does not need (training settings such as ``n_tokens_vocab``) are accepted with a
warning and dropped; wrong types fail with one line naming the key.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from elmo.errors import ElmoError
from elmo.limits import MAX_CONFIG_BYTES, MAX_PARAMETERS, MODEL_LIMITS
from elmo.text.tokenize import TOKENIZER_NAMES

#: Training-time keys bilm-tf writes next to ``lstm`` and ``char_cnn``; inference ignores them silently.
TRAINING_KEYS = frozenset(
    {
        "bidirectional", "dropout", "n_tokens_vocab", "unroll_steps", "batch_size", "n_epochs", "n_train_tokens",
        "n_negative_samples_batch", "all_clip_norm_val", "share_embedding_softmax",
    }
)
#: The key of config.json (and of the options.json we export) naming the tokenizer the model's text was split with
#: ("en", "ko" ...; absent or null: whitespace). It describes the model's input, not its shape: the loaders set
#: ``BiLM.tokenizer_name`` from it and ``save_model`` / ``export_official`` write it back.
TOKENIZER_KEY = "tokenizer"
#: Keys of our own model files beside the shape, read by the loaders; ``from_options`` passes over them silently.
MODEL_FILE_KEYS = frozenset({"format_version", TOKENIZER_KEY})
LSTM_KEYS = ("dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections")
CHAR_CNN_KEYS = ("embedding", "filters", "n_highway", "activation", "n_characters", "max_characters_per_token")
MAX_CLIP = 1e38  # a cell or projection clip, within float32's range (bilm-tf: 3)


class ConfigError(ElmoError, ValueError):
    """An options/config file that cannot describe a model (one line: which key, what was wrong)."""


@dataclass(frozen=True)
class CharCNNConfig:
    """The character encoder: embedding, convolutions, highway layers (docs/format.md §4.2)."""

    embedding_dim: int = 16  # E: size of one character embedding
    filters: tuple[tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
    n_highway: int = 2  # highway layers after the convolutions (0 = none)
    activation: str = "relu"  # after max-pooling each convolution; the highway layers always use relu
    n_characters: int = 262  # 261 raw character ids + the padding id 0 (training files say 261; we store 262)
    max_characters_per_token: int = 50  # W: character slots per token, including begin/end-of-word marks

    @property
    def n_filters(self) -> int:
        """F: total number of convolution outputs, the width of the highway layers."""
        return sum(num for _, num in self.filters)

    @property
    def max_filter_width(self) -> int:
        return max(width for width, _ in self.filters)


@dataclass(frozen=True)
class LSTMConfig:
    """One direction's LSTM stack (both directions share it; docs/format.md §4.3-4.4)."""

    dim: int = 4096  # C: memory cell size
    projection_dim: int = 512  # P: projected state size, also the token-vector size
    n_layers: int = 2  # L: layers per direction
    cell_clip: float | None = 3.0  # clip c to [-cell_clip, cell_clip]; None = no clip
    proj_clip: float | None = 3.0  # clip the projected output; None = no clip
    use_skip_connections: bool = True  # residual around every layer but the first


@dataclass(frozen=True)
class ElmoConfig:
    """A whole biLM: character encoder + two LSTM stacks."""

    char_cnn: CharCNNConfig = field(default_factory=CharCNNConfig)
    lstm: LSTMConfig = field(default_factory=LSTMConfig)

    @property
    def output_dim(self) -> int:
        """Width of every output layer: forward half + backward half."""
        return 2 * self.lstm.projection_dim

    @property
    def n_output_layers(self) -> int:
        """Token layer + one per LSTM layer."""
        return self.lstm.n_layers + 1

    # ---- options.json ---------------------------------------------------------------------------------------
    @classmethod
    def from_options(cls, options: dict[str, Any], source: str = "options.json", strict: bool = False,
                     complete: bool = False) -> "ElmoConfig":
        """Build from a parsed options.json; ``source`` names the file in error messages. Unknown keys are
        dropped with a warning (released files carry extra ones), or refused with ``strict`` (our own configs,
        where an unknown key is a typo that would silently build another model). The keys of our model files
        (``MODEL_FILE_KEYS``: format_version, tokenizer) are not the shape's: passed over, read by the loaders.
        ``complete``: every key ``to_options`` writes must be there (our config.json, where a missing key is damage
        that a default would turn into another model); otherwise bilm-tf's defaults fill the optional ones."""
        if not isinstance(options, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(options).__name__}")
        _unknown(options, {"lstm", "char_cnn", *TRAINING_KEYS, *(() if strict else MODEL_FILE_KEYS)}, source, "",
                 strict)
        lstm = _section(options, "lstm", source)
        cnn = _section(options, "char_cnn", source)
        embedding = _section(cnn, "embedding", source, prefix="char_cnn.")
        for section, keys, prefix in ((lstm, LSTM_KEYS, "lstm."), (cnn, CHAR_CNN_KEYS, "char_cnn."),
                                      (embedding, ("dim",), "char_cnn.embedding.")):
            _keys(section, keys, source, prefix, strict, complete)

        filters_raw = _get(cnn, "filters", list, source, "char_cnn.")
        filters = []
        for item in filters_raw:
            if (not isinstance(item, (list, tuple)) or len(item) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in item)):
                raise ConfigError(f"{source}: char_cnn.filters must be a list of [width, num] positive ints, "
                                  f"got {item!r}")
            filters.append((int(item[0]), int(item[1])))
        _check_filters(filters, source)
        activation = _get(cnn, "activation", str, source, "char_cnn.", default="relu")
        if activation not in ("relu", "tanh"):
            raise ConfigError(f"{source}: char_cnn.activation must be 'relu' or 'tanh', got {activation!r}")
        n_characters = _get(cnn, "n_characters", int, source, "char_cnn.", default=262)
        if n_characters not in (261, 262):
            raise ConfigError(f"{source}: char_cnn.n_characters must be 261 or 262, got {n_characters}")
        width = _get(cnn, "max_characters_per_token", int, source, "char_cnn.", default=50)
        if width < 3:
            raise ConfigError(f"{source}: char_cnn.max_characters_per_token must be >= 3, got {width}")
        _at_most(width, "char_cnn.max_characters_per_token", source)
        if max(w for w, _ in filters) > width:
            raise ConfigError(f"{source}: a filter is wider than max_characters_per_token ({width})")
        char_cnn = CharCNNConfig(
            embedding_dim=_get(embedding, "dim", int, source, "char_cnn.embedding.", positive=True),
            filters=tuple(filters),
            n_highway=_get(cnn, "n_highway", int, source, "char_cnn.", default=0, non_negative=True),
            activation=activation,
            n_characters=262,  # 261 in training files means the same table; the padding row is added at load
            max_characters_per_token=width,
        )
        lstm_config = LSTMConfig(
            dim=_get(lstm, "dim", int, source, "lstm.", positive=True),
            projection_dim=_get(lstm, "projection_dim", int, source, "lstm.", positive=True),
            # bilm-tf reads options['lstm'].get('n_layers', 1); our own configs must say it
            n_layers=_get(lstm, "n_layers", int, source, "lstm.", positive=True,
                          **({} if strict else {"default": 1})),
            cell_clip=_clip(lstm, "cell_clip", source),
            proj_clip=_clip(lstm, "proj_clip", source),
            use_skip_connections=_get(lstm, "use_skip_connections", bool, source, "lstm.", default=False),
        )
        return _within_limits(cls(char_cnn=char_cnn, lstm=lstm_config), source)

    @property
    def parameter_count(self) -> int:
        """The biLM's parameters, computed from the shape alone (nothing is allocated)."""
        c, l = self.char_cnn, self.lstm
        f = c.n_filters
        cnn = c.n_characters * c.embedding_dim + sum(w * c.embedding_dim * n + n for w, n in c.filters)
        cnn += c.n_highway * 2 * (f * f + f) + f * l.projection_dim + l.projection_dim
        layer = 4 * l.dim * (2 * l.projection_dim) + 4 * l.dim + l.dim * l.projection_dim
        return cnn + 2 * l.n_layers * layer

    def to_options(self) -> dict[str, Any]:
        """The options.json object bilm-tf and AllenNLP read (n_characters 262, the inference value)."""
        c, l = self.char_cnn, self.lstm
        return {
            "lstm": {
                "dim": l.dim, "projection_dim": l.projection_dim, "n_layers": l.n_layers,
                "cell_clip": l.cell_clip, "proj_clip": l.proj_clip,
                "use_skip_connections": l.use_skip_connections,
            },
            "char_cnn": {
                "embedding": {"dim": c.embedding_dim},
                "filters": [list(f) for f in c.filters],
                "n_highway": c.n_highway, "activation": c.activation,
                "n_characters": 262, "max_characters_per_token": c.max_characters_per_token,
            },
        }

    @classmethod
    def from_file(cls, path: str | Path) -> "ElmoConfig":
        """Read an options.json (or our config.json, which holds the same object)."""
        return cls.from_options(read_options(Path(path)), source=str(path))

    def replace(self, **changes: Any) -> "ElmoConfig":
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokenizer_name(options: dict[str, Any], source: str) -> str | None:
    """The tokenizer an options/config object names (``TOKENIZER_KEY``): one of ``TOKENIZER_NAMES``, or None for
    whitespace-split text (key absent, null or "whitespace")."""
    name = options.get(TOKENIZER_KEY) if isinstance(options, dict) else None
    if name is None or name == "whitespace":
        return None
    if not isinstance(name, str) or name not in TOKENIZER_NAMES:
        raise ConfigError(f"{source}: {TOKENIZER_KEY} must be one of {', '.join(TOKENIZER_NAMES)} or null, "
                          f"got {name!r}; fix the key or remove it (whitespace-split text)")
    return name


def file_tokenizer(path: str | Path) -> str | None:
    """``tokenizer_name`` of an options.json or config.json file (None when it names none)."""
    return tokenizer_name(read_options(Path(path)), str(path))


def read_options(path: Path) -> Any:
    """The JSON value of an options.json or config.json, or one line saying why it cannot be read: not a regular
    file (a pipe would block, a device never end), larger than any model's settings, not UTF-8 or not JSON."""
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise ConfigError(f"{path}: not a regular file ({'a folder' if path.is_dir() else 'a pipe or a device'}); "
                          f"give the settings file itself")
    try:
        if (size := path.stat().st_size) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {size:,} bytes, more than any model's settings ({MAX_CONFIG_BYTES:,} at "
                              f"most); is this an options.json?")
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); is this an options.json?") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be an options file") from None
    except ValueError as err:  # e.g. an integer longer than Python converts (4,300 digits)
        raise ConfigError(f"{path}: not a readable options file ({err})") from None


# ---- size presets (docs/format.md §1, released configurations) -------------------------------------------------------

def _released(dim: int, projection_dim: int, n_highway: int) -> ElmoConfig:
    return ElmoConfig(CharCNNConfig(n_highway=n_highway), LSTMConfig(dim=dim, projection_dim=projection_dim))


PRESETS: dict[str, ElmoConfig] = {
    "small": _released(1024, 128, 1),  # 2x1024_128_2048cnn_1xhighway, 13.6 M parameters
    "medium": _released(2048, 256, 1),  # 2x2048_256_2048cnn_1xhighway, 28.0 M parameters
    "original": _released(4096, 512, 2),  # 2x4096_512_2048cnn_2xhighway, 93.6 M parameters
    # for tests and smoke runs: the model of `elmo train --config tiny`
    "tiny": ElmoConfig(CharCNNConfig(filters=((1, 32), (2, 32), (3, 64), (4, 128)), n_highway=1),
                       LSTMConfig(dim=256, projection_dim=64)),
}  # a name means one model: the training presets of these names (elmo/training/presets/*.toml) build the same


# ---- helpers --------------------------------------------------------------------------------------------------

def _at_most(value: int, key: str, source: str) -> None:
    """A size from the file against its limit (``elmo.limits.MODEL_LIMITS``), before anything is allocated."""
    if value > (limit := MODEL_LIMITS[key]):
        raise ConfigError(f"{source}: {key} is {_shown(value)}, above the limit of {limit:,}; is the file damaged?")


def _shown(value: object) -> str:
    """A value from a file as a message shows it: a number of hundreds of digits by its start and length."""
    number = isinstance(value, int) and not isinstance(value, bool)
    text = f"{value:,}" if number else repr(value)
    if len(text) <= 60:
        return text
    return f"{text[:24]}... ({len(str(abs(value)))} digits)" if number else f"{text[:24]}... ({len(text)} characters)"


def _within_limits(config: ElmoConfig, source: str) -> ElmoConfig:
    """``config`` if every size and the parameter count are within ``elmo.limits``, else a ConfigError."""
    c, l = config.char_cnn, config.lstm
    for key, value in (("char_cnn.embedding.dim", c.embedding_dim), ("char_cnn.n_highway", c.n_highway),
                       ("lstm.dim", l.dim), ("lstm.projection_dim", l.projection_dim), ("lstm.n_layers", l.n_layers)):
        _at_most(value, key, source)
    if (n := config.parameter_count) > MAX_PARAMETERS:
        raise ConfigError(f"{source}: describes a model of {n:,} parameters, above the limit of {MAX_PARAMETERS:,}; "
                          f"is the file damaged?")
    return config


def _check_filters(filters: list[tuple[int, int]], source: str) -> None:
    if not filters:
        raise ConfigError(f"{source}: char_cnn.filters is empty")
    _at_most(len(filters), "char_cnn.filters", source)
    for width, num in filters:
        _at_most(width, "char_cnn.filter_width", source)
        _at_most(num, "char_cnn.filter_num", source)
    _at_most(sum(num for _, num in filters), "char_cnn.n_filters", source)


def _section(obj: dict, key: str, source: str, prefix: str = "") -> dict:
    if key not in obj:
        raise ConfigError(f"{source}: missing key {prefix}{key}")
    value = obj[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {prefix}{key} must be an object, got {type(value).__name__}")
    return value


def _keys(section: dict, keys: tuple[str, ...], source: str, prefix: str, strict: bool, complete: bool) -> None:
    """A section's unknown keys (``_unknown``) and, when it must be ``complete``, a missing one: one line."""
    _unknown(section, set(keys), source, prefix, strict)
    if complete and (missing := [key for key in keys if key not in section]):
        raise ConfigError(f"{source}: missing key {prefix}{missing[0]}; the file is damaged")


def _unknown(obj: dict, known: set[str], source: str, prefix: str, strict: bool) -> None:
    for key in obj:
        if key in known:
            continue
        if strict:
            raise ConfigError(f"{source}: unknown key {prefix}{key}; known: {', '.join(sorted(known - TRAINING_KEYS))}")
        warnings.warn(f"{source}: unknown key {prefix}{key} ignored", stacklevel=3)


_MISSING = object()


def _get(obj: dict, key: str, kind: type, source: str, prefix: str, default: Any = _MISSING,
         positive: bool = False, non_negative: bool = False) -> Any:
    if key not in obj or obj[key] is None:
        if default is _MISSING:
            raise ConfigError(f"{source}: missing key {prefix}{key}")
        return default
    value = obj[key]
    # bool is a subclass of int in Python: keep the two apart, so `"n_layers": true` is an error
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is int and isinstance(value, float) and value.is_integer():
        value, ok = int(value), True
    if not ok:
        raise ConfigError(f"{source}: {prefix}{key} must be {kind.__name__}, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{source}: {prefix}{key} must be positive, got {value!r}")
    if non_negative and value < 0:
        raise ConfigError(f"{source}: {prefix}{key} must be 0 or more, got {value!r}")
    return value


def _clip(obj: dict, key: str, source: str) -> float | None:
    value = obj.get(key)
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: lstm.{key} must be a number or null, got {value!r}")
    if value < 0 or value > MAX_CLIP or not math.isfinite(value):  # compared first: a 400-digit int has no float
        raise ConfigError(f"{source}: lstm.{key} must be a finite number from 0 to {MAX_CLIP:g} (0 or null: no clip), "
                          f"got {_shown(value)}")
    return float(value) if value > 0 else None  # 0 means "no clip" in bilm-tf
