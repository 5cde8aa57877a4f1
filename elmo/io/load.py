"""One loader for every way of naming a model: ``load_bilm`` resolves the name or path (``elmo.io.resolve``) and
builds the biLM from its files."""

from __future__ import annotations

import logging
from pathlib import Path

from elmo.config import ConfigError
from elmo.io import converted, nlpl
from elmo.io.model_files import ModelFiles
from elmo.io.native import ModelFileError, load_model, save_model
from elmo.io.official import load_official
from elmo.io.resolve import read_resolved
from elmo.model.bilm import BiLM

logger = logging.getLogger(__name__)


def load_bilm(model: str | Path | None = None, options: str | Path | None = None,
              weights: str | Path | None = None, stateful: bool = False) -> BiLM:
    """Load a biLM from ``model`` (a name such as "en", "ko" or "original", or a path: see
    ``elmo.io.resolve.resolve_path``) or from ``options`` + ``weights`` (the official pair). Nothing given: "en"."""
    return read_resolved(model, lambda files: load_files(files, stateful=stateful), options, weights)


def load_files(files: ModelFiles, stateful: bool = False) -> BiLM:
    """The biLM of resolved files: our format, or the official pair, read from its converted copy after the first
    time (``elmo.io.converted``). An NLPL model's vocabulary, if any, seeds the token cache of its inference
    engines: exactly what the character CNN gives, only faster for those words."""
    if not files.official:
        bilm = load_model(files.folder, stateful=stateful)
        bilm.source_files = files.paths()
        return bilm
    pair = converted.pair_key(files.config, files.weights)  # before any read: the copy is of what is read now
    copy = converted.lookup(pair)
    bilm = None
    if copy is not None:
        try:
            bilm = load_model(copy, stateful=stateful)
        except (ModelFileError, ConfigError, OSError) as err:  # the copy is ours (damaged, or unreadable): the
            if copy.is_dir():  # user's own files are fine, so they are read instead
                logger.warning("the converted copy of %s is damaged (%s); converting the official files again",
                               files.weights, err)
            else:  # cleared (`elmo cache clear`) while this process loaded it
                logger.info("the converted copy of %s is gone; converting the official files again", files.weights)
            converted.discard(copy)
    read = tuple(copy / name for name in converted.COPY_FILES) if bilm is not None else ()  # the copy it came from
    if bilm is None:
        bilm = load_official(files.config, files.weights, stateful=stateful)
        converted.store(pair, files.config, files.weights, lambda folder: save_model(bilm, folder))
    if files.cache_words is not None and (words := nlpl.vocab_words(files.cache_words)):
        bilm.cache_words = words  # an inference engine precomputes their token vectors
    bilm.source_files = files.paths() + read
    return bilm  # NLPL: tokenizer_name None (options.json names none), their text was split at whitespace
