"""ELMo in pure PyTorch: the official weights, deterministic embeddings, downstream mixes.

The public names below load their modules (and torch) when first used, not when ``elmo`` is imported: the ``elmo``
command sets up its Ctrl-C handling before that second of loading (``elmo.launch``), and ``import elmo.X`` of one
module loads only what that module needs.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from elmo.config import CharCNNConfig, ConfigError, ElmoConfig, LSTMConfig
    from elmo.data.chars import batch_to_ids
    from elmo.downstream import Elmo
    from elmo.embed import Embedder
    from elmo.io.load import load_bilm
    from elmo.io.native import load_model, save_model
    from elmo.io.official import export_official, load_official
    from elmo.model.bilm import BiLM, BiLMOutput, remove_sentence_boundaries
    from elmo.model.mix import ComponentProjection, ScalarMix

_HOMES = {  # public name -> the module that defines it
    "CharCNNConfig": "elmo.config", "ConfigError": "elmo.config", "ElmoConfig": "elmo.config",
    "LSTMConfig": "elmo.config", "batch_to_ids": "elmo.data.chars", "Elmo": "elmo.downstream",
    "Embedder": "elmo.embed", "load_bilm": "elmo.io.load", "load_model": "elmo.io.native",
    "save_model": "elmo.io.native", "export_official": "elmo.io.official", "load_official": "elmo.io.official",
    "BiLM": "elmo.model.bilm", "BiLMOutput": "elmo.model.bilm", "remove_sentence_boundaries": "elmo.model.bilm",
    "ComponentProjection": "elmo.model.mix", "ScalarMix": "elmo.model.mix",
}
__all__ = [  # the names of _HOMES (a test checks), written out for readers and linters
    "BiLM", "BiLMOutput", "CharCNNConfig", "ComponentProjection", "ConfigError", "Elmo", "ElmoConfig", "Embedder",
    "LSTMConfig", "ScalarMix", "batch_to_ids", "export_official", "load_bilm", "load_model", "load_official",
    "remove_sentence_boundaries", "save_model",
]


def __getattr__(name: str) -> Any:
    """A public name, from its module on first use (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'elmo' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value  # later uses find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


DISTRIBUTION = "elmo-bilm"  # the name on PyPI (pyproject.toml's project.name); the import name is elmo


def _version() -> str:
    """The installed package's version: written once, in pyproject.toml, and read from the package metadata
    ("0+unknown" when the package is imported from a source tree that was never installed)."""
    try:
        return _installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
