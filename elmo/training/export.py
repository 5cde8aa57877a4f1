"""From a training checkpoint to files people use: the official pair, our format with the softmax, token caches."""

from __future__ import annotations

from pathlib import Path

import h5py
import torch

from elmo.data.chars import batch_to_ids
from elmo.data.vocab import read_words
from elmo.errors import InputTypeError, UsageError
from elmo.io.atomic import (atomic_folder, atomic_path, check_free_space, check_replaceable_folder, path_argument,
                             refuse_model_file, same_file, writable_file, write_errors)
from elmo.io.official import export_official
from elmo.model.bilm import BiLM
from elmo.training.checkpoint import load_language_model, save_language_model


EXPORT_FILES = ("options.json", "weights.hdf5", "config.json", "model.safetensors", "softmax.safetensors",
                "vocab.txt")  # what `elmo export` writes, as one folder


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write ``out_dir`` as one folder: options.json + weights.hdf5 (official, for AllenNLP / bilm-tf /
    ``--options``) and config.json + model.safetensors + softmax.safetensors + vocab.txt (ours, to embed, score or
    train on). Both name the tokenizer of the training text (``bilm.tokenizer_name``), so embed / show / perplexity
    split raw text alike. The folder must be new, empty or an earlier export (replaced whole); a failure leaves it as
    it was (``elmo.io.atomic.atomic_folder``)."""
    out = path_argument(out_dir, "export_checkpoint out_dir")  # "" would be the current folder
    path_argument(checkpoint, "export_checkpoint checkpoint")
    check_replaceable_folder(out, EXPORT_FILES)  # before the checkpoint is read
    bilm, softmax, vocab = load_language_model(checkpoint)
    with atomic_folder(out, EXPORT_FILES) as tmp:
        export_official(bilm, tmp)
        save_language_model(tmp, bilm, softmax, vocab)
    return out


@torch.inference_mode()
def token_embeddings(bilm: BiLM, words: list[str], batch_size: int = 512) -> torch.Tensor:
    """The context-independent token layer of each word: (V, P), in the given order."""
    rows = []
    width = bilm.config.char_cnn.max_characters_per_token
    for start in range(0, len(words), batch_size):
        ids = batch_to_ids([[w] for w in words[start : start + batch_size]], width)[:, 0]  # (b, W)
        rows.append(bilm.char_encoder(ids))
    return torch.cat(rows) if rows else torch.zeros(0, bilm.config.lstm.projection_dim)


def dump_token_embeddings(bilm: BiLM, vocab_file: str | Path, out_file: str | Path) -> int:
    """bilm-tf's token-embedding cache: one dataset ``embedding`` (V, P), a row per word of ``vocab_file`` in its
    order. Any word list will do, as bilm-tf's (a task's words need no ``<S>``, ``</S>``, ``<UNK>``); each word once.
    ``out_file`` may not be ``vocab_file`` (also through a link): the list would be replaced by its own vectors."""
    writable_file(out_file)  # not a folder, a device or a pipe (before the work)
    if same_file(out_file, vocab_file):
        raise UsageError(f"{out_file}: is the vocabulary file it reads ({vocab_file}); writing would replace it: "
                         f"give another output file")
    if not isinstance(bilm, BiLM):
        raise InputTypeError(f"dump_token_embeddings takes a BiLM, got {type(bilm).__name__}")
    refuse_model_file(out_file, bilm.source_files)
    words = read_words(vocab_file)
    vectors = token_embeddings(bilm, words).float().numpy()  # (V, P)
    check_free_space(out_file, vectors.nbytes + (1 << 20), f"{len(words):,} token vectors")
    with write_errors(out_file), atomic_path(out_file) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("embedding", data=vectors)
    return len(words)
