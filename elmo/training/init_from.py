"""Where a new run's weights come from (``elmo train --init-from``).

Two kinds of source:

* a language model — a training checkpoint, a run folder (its newest checkpoint) or an ``elmo export`` folder: the
  biLM, its softmax and its vocabulary, all kept;
* a biLM alone — a shipped model ("en", "ko"), an official model ("original" ...), our model folder, or a folder with
  the official options.json + one .hdf5. Published ELMo weights hold no softmax, so adapting them to new text needs a
  vocabulary (``--vocab``) and a new softmax; the trainer then freezes the biLM for ``freeze_bilm_steps`` batches
  while the new softmax learns to read it (why, with the measurements: docs/training.md §7).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from elmo.data.vocab import Vocabulary
from elmo import pretrained
from elmo.io.load import load_files
from elmo.io.model_files import ModelFiles
from elmo.io.resolve import read_resolved, resolve
from elmo.model.bilm import BiLM
from elmo.training.checkpoint import load_language_model

# batches with the biLM frozen when a run starts from a biLM without a softmax and the config does not say
# (docs/training.md §7)
DEFAULT_FREEZE_STEPS = 1000


@dataclass
class StartingWeights:
    bilm: BiLM
    softmax: dict[str, torch.Tensor] | None  # None: the source has none, the run makes a new one
    vocab: Vocabulary | None  # the softmax's words, when there is a softmax
    tokenize: str | None  # how the source's training text was split (None: whitespace or unknown)
    source: str
    split_by_function: bool = False  # the source's run split its text by a function (Trainer(tokenizer=...))


def has_softmax(source: str | Path) -> bool:
    """True for a checkpoint, a run folder or an exported LM folder (they carry softmax.safetensors + vocab.txt).
    A registered name never has one: it is not resolved, so nothing is downloaded to tell."""
    return not pretrained.is_model_name(str(source)) and resolve(source).softmax is not None


def starting_weights(source: str | Path) -> StartingWeights:
    """The weights (and, where there is one, the softmax and vocabulary) a new run starts from; the tokenizer is the
    one the loaded biLM names."""
    return read_resolved(source, lambda files: _starting_weights(files, str(source)))


def _starting_weights(files: ModelFiles, source: str) -> StartingWeights:
    if files.softmax is not None:
        bilm, softmax, vocab = load_language_model(files)
        return StartingWeights(bilm, softmax.state_dict(), vocab, bilm.tokenizer_name, source,
                               _split_by_function(files.folder))
    bilm = load_files(files)
    return StartingWeights(bilm, None, None, bilm.tokenizer_name, source)


def _split_by_function(folder: Path) -> bool:
    """Whether a checkpoint's text was split by a function (its trainer.json says so; it names no tokenizer for it)."""
    try:
        record = json.loads((folder / "trainer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # an export, or no checkpoint: nothing recorded
        return False
    return isinstance(record, dict) and record.get("tokenizer_function") is True
