"""``Embedder``: text in, numpy vectors out, in input order; the everyday API."""

from __future__ import annotations

import shutil
import tempfile
from itertools import islice
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from elmo.data.chars import batch_to_ids
from elmo.devices import check_device
from elmo.errors import InputTypeError, UsageError
from elmo.model.bilm import BiLM, remove_sentence_boundaries

Layers = Union[str, int]
Text = Union[str, Sequence[str], Sequence[Sequence[str]]]


class Embedder:
    """Embeds sentences with a biLM in deterministic mode, so results do not depend on batching.

    Sentences are sorted by length and grouped under a token budget (``max_tokens`` = rows x longest row), then
    returned in the order given.
    """

    def __init__(self, bilm: BiLM, tokenizer: Callable[[str], list[str]] | None = None, max_tokens: int = 8192,
                 max_batch_size: int = 128, device: str | torch.device = "cpu",
                 mix_weights: Sequence[float] | None = None, gamma: float = 1.0,
                 cache_words: Sequence[str] | None = None, precision: str = "fp32") -> None:
        if bilm.stateful:
            raise UsageError("Embedder sorts sentences into batches; give it a deterministic (stateful=False) biLM")
        check_device(device)
        if max_tokens < 1 or max_batch_size < 1:
            raise UsageError(f"max_tokens and max_batch_size must be >= 1, got {max_tokens} and {max_batch_size}")
        if isinstance(tokenizer, str):  # a name, as on the command line: "en", "ko", "whitespace" ...
            from elmo.text.tokenize import get_tokenizer

            tokenizer = get_tokenizer(tokenizer)
        if tokenizer is not None and not callable(tokenizer):
            raise InputTypeError(f"tokenizer must be a function str -> list[str] or a name, got {type(tokenizer).__name__}")
        self.bilm = bilm.to(device).eval()
        self.tokenizer = tokenizer or str.split
        self.max_tokens, self.max_batch_size = max_tokens, max_batch_size
        self.device = torch.device(device)
        n = bilm.config.n_output_layers
        weights = torch.zeros(n) if mix_weights is None else torch.tensor(list(mix_weights), dtype=torch.float)
        if weights.shape != (n,):
            raise UsageError(f"mix_weights needs {n} values (one per layer), got {len(weights)}")
        self.mix = gamma * torch.softmax(weights, dim=0)  # (L+1,)
        self.bilm.set_matmul_precision(precision)  # "bf16": faster on CPUs with bf16 units, vectors about 0.4 % off (BENCHMARKS.md)
        if cache_words is not None:  # token layer precomputed for these words; others go through the CNN
            self.bilm.cache_tokens(cache_words)

    @classmethod
    def from_pretrained(cls, model: str | Path | None = None, options: str | Path | None = None,
                        weights: str | Path | None = None, **kwargs) -> "Embedder":
        """From a name ("en" — the default —, "ko", "small", "original", ...), our model directory, or the
        official ``options`` + ``weights`` files. A shipped model brings the tokenizer its text was trained with."""
        from elmo import pretrained
        from elmo.io.load import load_bilm
        from elmo.text.tokenize import get_tokenizer

        if "tokenizer" not in kwargs and (tokenizer_name := pretrained.model_tokenizer(model, options, weights)):
            kwargs["tokenizer"] = get_tokenizer(tokenizer_name)
        return cls(load_bilm(model, options, weights), **kwargs)

    @property
    def dim(self) -> int:
        return self.bilm.config.output_dim

    def embed(self, sentences: Text, layers: Layers = "all", pooling: str | None = None,
              progress: bool = False) -> np.ndarray | list[np.ndarray]:
        """Vectors for one sentence (a string) or many (a list of strings or of token lists).

        layers: "all" -> (L+1, n, 2P); "top", "average", "mix" (the ``mix_weights``) or a layer index -> (n, 2P).
        pooling: None keeps one vector per token; "mean" or "max" pools over the tokens (padding never counts;
        an empty sentence pools to zeros). A single string gives one array; a list gives a list, in input order.
        """
        single = isinstance(sentences, str)
        token_lists = self.tokenize([sentences] if single else sentences)
        _check_layers(layers, self.bilm.config.n_output_layers)
        if pooling not in (None, "mean", "max"):
            raise UsageError(f"pooling must be None, 'mean' or 'max', got {pooling!r}")
        results: list[np.ndarray | None] = [None] * len(token_lists)
        bar = tqdm(total=len(token_lists), unit="sent", disable=not progress)
        for indices in self.batches(token_lists):
            for index, array in zip(indices, self.embed_tokens([token_lists[i] for i in indices], layers, pooling)):
                results[index] = array
            bar.update(len(indices))
        bar.close()
        return results[0] if single else results  # type: ignore[return-value]

    # ---- AllenNLP's ElmoEmbedder names (deterministic here: no warm-up batches needed) ----------------------------
    def embed_sentence(self, sentence: str | Sequence[str]) -> np.ndarray:
        """One sentence (tokens, or a string for the tokenizer) -> (L+1, n, 2P)."""
        return self.embed([sentence if isinstance(sentence, str) else list(sentence)])[0]

    def embed_batch(self, batch: Sequence[str | Sequence[str]]) -> list[np.ndarray]:
        """Sentences -> one (L+1, n, 2P) array each, in input order."""
        return self.embed([s if isinstance(s, str) else list(s) for s in batch])

    def embed_sentences(self, sentences: Iterable[str | Sequence[str]], batch_size: int = 64) -> Iterator[np.ndarray]:
        """Lazily, in input order, ``batch_size`` sentences at a time: any number of sentences in bounded memory."""
        if batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {batch_size}")
        iterator = iter(sentences)
        while chunk := list(islice(iterator, batch_size)):
            yield from self.embed_batch(chunk)

    def embed_file(self, input_file: str | Path | IO, output_file_path: str | Path, output_format: str = "all",
                   batch_size: int = 64, forget_sentences: bool = False, use_sentence_keys: bool = False,
                   progress: bool = True) -> int:
        """A text file (a path, or an open file as AllenNLP takes; one sentence per line, split by this embedder's
        tokenizer) -> HDF5 in AllenNLP's layout, or ``.npz``; ``output_format`` "all", "top" or "average". Returns
        the number of lines (``elmo embed``)."""
        from elmo.embed_file import embed_file

        if hasattr(input_file, "read"):  # the file is read twice (count, then embed): copy an open one first
            with tempfile.TemporaryDirectory() as folder:
                copy = Path(folder) / "input.txt"
                mode, encoding = ("wb", None) if isinstance(input_file.read(0), bytes) else ("w", "utf-8")
                with open(copy, mode, encoding=encoding) as out:
                    shutil.copyfileobj(input_file, out)
                return self.embed_file(copy, output_file_path, output_format, batch_size, forget_sentences,
                                       use_sentence_keys, progress)
        tokenizer = None if self.tokenizer is str.split else self.tokenizer
        return embed_file(self.bilm, input_file, output_file_path, output_format, batch_size, forget_sentences,
                          use_sentence_keys, progress=progress, device=self.device, tokenizer=tokenizer)

    def tokenize(self, sentences: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
        if isinstance(sentences, (str, bytes)) or sentences is None:
            raise InputTypeError(f"expected a list of sentences (strings or token lists), got {type(sentences).__name__}")
        out = []
        for index, sentence in enumerate(sentences):
            if isinstance(sentence, str):
                out.append(self.tokenizer(sentence))
            elif isinstance(sentence, (bytes, type(None))) or not hasattr(sentence, "__iter__"):
                raise InputTypeError(f"sentence {index}: expected a string or a list of tokens, got "
                                f"{type(sentence).__name__}")
            else:
                out.append(list(sentence))
        return out

    def batches(self, token_lists: Sequence[Sequence[str]]) -> Iterator[list[int]]:
        """Indices of sentences, longest first, in groups of at most ``max_batch_size`` rows and ``max_tokens``."""
        return length_batches([len(t) for t in token_lists], self.max_batch_size, self.max_tokens)

    def embed_tokens(self, batch: Sequence[Sequence[str]], layers: Layers = "all",
                     pooling: str | None = None) -> list[np.ndarray]:
        """One forward pass over ``batch`` as given (no sorting): a list of arrays, one per sentence."""
        return run_batch(self.bilm, batch, layers, pooling, self.mix, self.device)


def length_batches(lengths: Sequence[int], max_batch_size: int, max_tokens: int) -> Iterator[list[int]]:
    """Indices sorted longest first, grouped so that rows x longest row <= ``max_tokens`` (a longer sentence goes
    alone) and rows <= ``max_batch_size``: padding stays small and memory is bounded by the budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        longest = lengths[batch[0]] if batch else lengths[i]
        if batch and (len(batch) >= max_batch_size or (len(batch) + 1) * max(longest, 1) > max_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


@torch.inference_mode()
def run_batch(bilm: BiLM, batch: Sequence[Sequence[str]], layers: Layers = "all", pooling: str | None = None,
              mix: torch.Tensor | None = None, device: str | torch.device = "cpu") -> list[np.ndarray]:
    """One forward pass of ``bilm`` over ``batch`` in the given row order; one float32 array per sentence.

    In stateful mode the row order matters: row b continues from row b of the previous call.
    """
    ids = batch_to_ids(batch, bilm.config.char_cnn.max_characters_per_token).to(device)  # (B, T, W)
    out = bilm(ids)
    mask = out.mask[:, 2:]  # (B, T) real tokens, boundaries dropped
    stacked = torch.stack([remove_sentence_boundaries(layer, out.mask)[0] for layer in out.layers], 1)
    if mix is None:
        mix = torch.full((stacked.shape[1],), 1.0 / stacked.shape[1])
    selected = select_layers(stacked, layers, mix.to(stacked.device))  # (B, L+1, T, 2P) or (B, T, 2P)
    arrays = []
    for row, n in enumerate(mask.sum(1).tolist()):
        vectors = selected[row, ..., :n, :]  # (..., n, 2P)
        if pooling == "mean":
            vectors = vectors.sum(-2) / max(n, 1)
        elif pooling == "max":
            vectors = vectors.amax(-2) if n else vectors.sum(-2)
        arrays.append(vectors.float().cpu().numpy())
    return arrays


def select_layers(layers: torch.Tensor, which: Layers, mix: torch.Tensor) -> torch.Tensor:
    """(B, L+1, T, D) -> the requested view: "all" keeps the layer axis, anything else removes it."""
    if which == "all":
        return layers
    if which == "top":
        return layers[:, -1]
    if which == "average":
        return layers.mean(1)
    if which == "mix":
        return (layers * mix.view(1, -1, 1, 1)).sum(1)
    return layers[:, int(which)]


def _check_layers(layers: Layers, n_layers: int) -> None:
    if isinstance(layers, np.integer):
        layers = int(layers)
    if isinstance(layers, bool):  # an int to Python, but layers=True means nothing
        raise UsageError(f"layers must be 'all', 'top', 'average', 'mix' or an int, got {layers!r}")
    if isinstance(layers, str):
        if layers not in ("all", "top", "average", "mix"):
            raise UsageError(f"layers must be 'all', 'top', 'average', 'mix' or an int, got {layers!r}")
    elif not isinstance(layers, int) or not -n_layers <= layers < n_layers:
        raise UsageError(f"layers={layers!r}: this model has layers 0..{n_layers - 1}")
