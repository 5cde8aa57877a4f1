"""ELMo in pure PyTorch: the official weights, deterministic embeddings, downstream mixes."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

from elmo.config import CharCNNConfig, ConfigError, ElmoConfig, LSTMConfig
from elmo.data.chars import batch_to_ids
from elmo.embed import Embedder
from elmo.io.load import load_bilm
from elmo.io.native import load_model, save_model
from elmo.io.official import export_official, load_official
from elmo.model.bilm import BiLM, BiLMOutput, remove_sentence_boundaries
from elmo.downstream import Elmo
from elmo.model.mix import ComponentProjection, ScalarMix

__all__ = [
    "BiLM", "BiLMOutput", "CharCNNConfig", "ComponentProjection", "ConfigError", "Elmo", "ElmoConfig", "Embedder",
    "LSTMConfig", "ScalarMix", "batch_to_ids", "export_official", "load_bilm", "load_model", "load_official",
    "remove_sentence_boundaries", "save_model",
]


DISTRIBUTION = "elmo-bilm"  # the name on PyPI (pyproject.toml's project.name); the import name is elmo


def _version() -> str:
    """The installed package's version: written once, in pyproject.toml, and read from the package metadata
    ("0+unknown" when the package is imported from a source tree that was never installed)."""
    try:
        return _installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
