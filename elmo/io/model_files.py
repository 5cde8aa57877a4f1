"""``ModelFiles``: where one model's files are, whatever way it was named (``elmo.io.resolve`` finds them).

A model is a config (our ``config.json`` or the official ``options.json``) and its weights (``model.safetensors``
or a bilm-tf ``.hdf5``); a language model (a training checkpoint, an ``elmo export`` folder) also has its softmax
and the softmax's vocabulary beside them. The loaders (``elmo.io.load.load_files``,
``elmo.training.checkpoint.load_language_model``) build from a ``ModelFiles``; nothing else decides what a name or a
folder means.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elmo.config import file_tokenizer
from elmo.io.native import CONFIG_NAME, WEIGHTS_NAME, model_dir_tokenizer

SOFTMAX_NAME = "softmax.safetensors"
VOCAB_NAME = "vocab.txt"


@dataclass(frozen=True)
class ModelFiles:
    config: Path  # config.json (ours) or options.json (official)
    weights: Path  # model.safetensors (ours) or the weights .hdf5 (official)
    softmax: Path | None = None  # a language model's softmax.safetensors
    vocab: Path | None = None  # the softmax's words (vocab.txt), with the softmax
    cache_words: Path | None = None  # an NLPL model's vocab.txt: its first words' token vectors are precomputed
    name: str | None = None  # the registered name ("en", "original") it was resolved from, if any
    official: bool = False  # True: the official options.json + .hdf5 pair (bilm-tf, AllenNLP, NLPL); False: ours

    @property
    def folder(self) -> Path:
        return self.weights.parent

    def paths(self) -> tuple[Path, ...]:
        """Every file of the model that is there: what a command must never write over."""
        named = (self.config, self.weights, self.softmax, self.vocab, self.cache_words)
        return tuple(path for path in named if path is not None and path.is_file())

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer name ("en", "ko" ...) the config records, read as the loaders read it, without loading the
        weights; None: whitespace-split text. Read on demand, so a wrong file is refused by the loader first."""
        return file_tokenizer(self.config) if self.official else model_dir_tokenizer(self.folder)

    @classmethod
    def of_folder(cls, folder: Path, name: str | None = None) -> "ModelFiles":
        """Our model folder (or a checkpoint, or an exported language model): with its softmax and the softmax's
        vocabulary when a softmax is there (the loader refuses a softmax without its vocabulary)."""
        softmax = folder / SOFTMAX_NAME
        if not softmax.is_file():
            return cls(folder / CONFIG_NAME, folder / WEIGHTS_NAME, name=name)
        return cls(folder / CONFIG_NAME, folder / WEIGHTS_NAME, softmax, folder / VOCAB_NAME, name=name)
