"""``Embedder``: text in, numpy vectors out, in input order; the everyday API.

One input contract for every method: a ``str`` is raw text, split by the embedder's tokenizer (by default the
model's own, ``BiLM.tokenizer_name``; whitespace for a model without one); a list or tuple of strings given as one
sentence is used as given; a list of those (or of raw strings) is a batch. A flat list of two or more strings that all
look like single words is ambiguous (one tokenised sentence, or many one-word sentences?) and is refused unless
``split_into_words`` says which.
"""

from __future__ import annotations

import logging
import re
import tempfile
from functools import partial
from itertools import islice
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from elmo.batching import Layers, length_batches, run_batch
from elmo.data.chars import check_tokens, refuse_unordered
from elmo.devices import check_device
from elmo.embed_file import NonFiniteVectorsError, check_errors, check_open_input, embed_file
from elmo.errors import ElmoError, InputTypeError, UsageError
from elmo.io.load import load_bilm
from elmo.io.text_lines import copy_open_text
from elmo.io.resolve import model_reference
from elmo.model.bilm import BiLM
from elmo.limits import MAX_TOKENS_PER_LINE, is_whole
from elmo.model.engine import InferenceEngine
from elmo.model.mix import check_flag, check_layers, initial_mix, scalar_weights
from elmo.text.tokenize import get_tokenizer, tokens_of

Text = Union[str, Sequence[str], Sequence[Sequence[str]]]
_SPACE = re.compile(r"\s")
logger = logging.getLogger(__name__)


_UNORDERED = "a set of sentences has no order, so the results could not be in input order"


class Padded(NamedTuple):
    """Vectors of a batch in one array, as TF-Hub's ``elmo`` output and simple_elmo's ``get_elmo_vectors``."""

    vectors: np.ndarray  # (N, T, D), or (N, L+1, T, D) for layers="all"; float32, zeros past each sentence's length
    lengths: np.ndarray  # (N,) int64: tokens of each sentence


class Embedder:
    """Embeds sentences with a biLM in deterministic mode, so results do not depend on batching (beyond float32
    rounding: the same batching gives the same bits). The one exception is ``precision="int8"``, which quantises
    each matrix product's inputs with a scale taken from the whole batch: a sentence's vectors then move by up to
    ~1 % (original-size model) or ~3.5 % (the shipped en) with the sentences batched beside it.

    Sentences are sorted by length and grouped under a token budget (``max_tokens`` = rows x longest row) and at
    most ``max_batch_size`` rows, then returned in the order given. ``tokenizer`` (a function or a name: "en",
    "ko", "ko-morph", "whitespace") splits raw-text input; by default it is the model's own (``bilm.tokenizer_name``,
    set by the loaders; whitespace when the model has none), so raw text is split as the model's training text was.
    ``mix_weights`` (one per layer, token layer first) are pre-softmax values, as AllenNLP's
    ``scalar_mix_parameters``: ``layers="mix"`` is ``gamma`` x the sum of ``softmax(mix_weights)[k]`` x layer k, so
    ``[0, 0, 0]`` is the average and ``[1, 2, 3]`` weighs the layers 0.09, 0.24, 0.67 (None: equal weights).

    The biLM itself is not changed (not moved, not put in eval mode): the embedder runs an ``InferenceEngine`` built
    from its weights as they are now (``embedder.engine``); after changing them, call ``embedder.engine.rebuild()``.
    NaN or infinite vectors are an error naming the sentences unless ``allow_non_finite=True`` (then a warning).
    """

    def __init__(self, bilm: BiLM, tokenizer: Callable[[str], list[str]] | str | None = None, max_tokens: int = 8192,
                 max_batch_size: int = 128, device: str | torch.device = "cpu",
                 mix_weights: Sequence[float] | None = None, gamma: float = 1.0,
                 cache_words: Sequence[str] | None = None, precision: str = "fp32",
                 allow_non_finite: bool = False) -> None:
        if not isinstance(bilm, BiLM):
            raise InputTypeError(f"Embedder takes a BiLM, got {type(bilm).__name__}; to load a model by name or path "
                                 f"use Embedder.from_pretrained(...)")
        if bilm.stateful:
            raise UsageError("Embedder sorts sentences into batches; give it a deterministic (stateful=False) biLM")
        if device is None:
            raise UsageError("device None: give a device name (cpu, cuda, cuda:1, mps)")
        check_device(device)
        if not (is_whole(max_tokens) and is_whole(max_batch_size)):
            raise UsageError(f"max_tokens and max_batch_size must be whole numbers >= 1, got {max_tokens!r} and "
                             f"{max_batch_size!r}")
        if tokenizer is None:  # the model's own: raw text split as its training text was
            tokenizer = getattr(bilm, "tokenizer_name", None) or "whitespace"
        if isinstance(tokenizer, str):  # a name, as on the command line: "en", "ko", "whitespace" ...
            tokenizer = get_tokenizer(tokenizer)
        if not callable(tokenizer):
            raise InputTypeError(f"tokenizer must be a function str -> list[str] or a name, got {type(tokenizer).__name__}")
        self.bilm = bilm  # not changed: inference runs on an engine built from it
        self.tokenizer = tokenizer
        self.model_name: str | None = None  # a name or path, when known (from_pretrained): recorded by embed_file
        self.max_tokens, self.max_batch_size = max_tokens, max_batch_size
        self.device = torch.device(device)
        n = bilm.config.n_output_layers
        self.mix = scalar_weights(initial_mix(n, mix_weights, gamma, "mix_weights"), float(gamma))  # (L+1,) fixed
        # NaN/inf vectors: a warning instead of an error
        self.allow_non_finite = check_flag(allow_non_finite, "allow_non_finite", "Embedder")
        # "bf16" / "int8": faster, vectors a little off (BENCHMARKS.md); cache_words: their token layer precomputed
        self.engine = InferenceEngine.build(bilm, precision, cache_words, device)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the engine out (its packed matrices and locks cannot be copied); the copy
        builds its own from the biLM's weights with the same settings."""
        engine = self.engine
        return {**self.__dict__, "engine": (engine.precision, engine.cache_words, engine.device, engine.stateful)}

    def __setstate__(self, state: dict) -> None:
        precision, cache_words, device, stateful = state.pop("engine")
        self.__dict__.update(state)
        self.engine = InferenceEngine.build(self.bilm, precision, cache_words, device, stateful)

    @classmethod
    def from_pretrained(cls, model: str | Path | None = None, options: str | Path | None = None,
                        weights: str | Path | None = None, **kwargs) -> "Embedder":
        """From a name ("en" — the default —, "ko", "small", "original", ...), our model directory, or the
        official ``options`` + ``weights`` files. Raw text goes through the model's own tokenizer
        (``bilm.tokenizer_name``) unless ``tokenizer=`` says otherwise; other keywords go to ``Embedder``."""
        if "stateful" in kwargs:  # a keyword of Elmo.from_pretrained and load_bilm, not of Embedder
            raise UsageError("Embedder runs every sentence from the zero state (it sorts sentences into batches), so "
                             "it takes no stateful=; for AllenNLP's carried state use Elmo.from_pretrained(..., "
                             "stateful=True) or `elmo embed --stateful`")
        embedder = cls(load_bilm(model, options, weights), **kwargs)
        embedder.model_name = model_reference(model, options, weights)
        return embedder

    @property
    def dim(self) -> int:
        return self.bilm.config.output_dim

    def embed(self, sentences: Text, layers: Layers = "all", pooling: str | None = None, progress: bool = False, *,
              batch_size: int | None = None, split_into_words: bool | None = None) -> np.ndarray | list[np.ndarray]:
        """Vectors for one sentence or many; each array is a compact copy that owns its memory.

        sentences: a string (raw text, for the tokenizer) or, with ``split_into_words=True``, one list of tokens ->
        one array; a list of strings and/or token lists -> a list of arrays, in input order. ``split_into_words``:
        None infers, refusing a flat list of two or more single words (one sentence or many?); True: strings are
        tokens, so a flat list of strings is ONE sentence and a list of lists a batch; False: strings are raw
        sentences. An empty list is an empty batch.
        layers: "all" -> (L+1, n, 2P); "top", "average", "mix" (the ``mix_weights``) or a layer index -> (n, 2P).
        pooling: None keeps one vector per token; "mean" or "max" pools over the tokens (padding never counts;
        an empty sentence pools to zeros). batch_size: rows per forward pass (default ``max_batch_size``; the
        ``max_tokens`` budget still applies, so a batch of long sentences has fewer rows).
        """
        layers = check_layers(layers, self.bilm.config.n_output_layers)
        if pooling not in (None, "mean", "max"):
            raise UsageError(f"pooling must be None, 'mean' or 'max', got {pooling!r}")
        single, token_lists = self._token_lists(sentences, split_into_words)
        results = self._in_order(token_lists, layers, pooling, batch_size, progress)
        return results[0] if single else results

    def encode(self, sentences: Text, layers: Layers = "average", pooling: str = "mean", *,
               batch_size: int | None = None, normalize: bool = False, progress: bool = False,
               split_into_words: bool | None = None) -> np.ndarray:
        """One pooled float32 vector per sentence, stacked: (N, 2P), or (N, L+1, 2P) for layers="all"; a single
        sentence (a string, or tokens with ``split_into_words=True``) gives (2P,) / (L+1, 2P), as
        sentence-transformers' ``encode`` does.

        The vectors are exactly ``embed(sentences, layers, pooling)``'s (same batching, same numbers). The default
        reading, "average" of all layers, is what TF-Hub's ``default`` output and simple_elmo's
        ``get_elmo_vector_average`` give and what ``elmo embed --average`` writes: the ELMo paper found every layer
        useful (the token layer for syntax, the top for meaning), and a fixed average needs no training, where
        "top" alone drops the lower layers and "mix" needs learned weights. pooling: "mean" or "max" over the
        tokens (an empty sentence gives zeros). batch_size: rows per forward pass, as in ``embed``.
        normalize: scale every vector to unit L2 length (zero vectors stay zero), for cosine similarity by dot
        product. Input forms and ``split_into_words``: as in ``embed``.
        """
        if pooling not in ("mean", "max"):
            raise UsageError(f"pooling must be 'mean' or 'max' (for token vectors use embed or embed_padded), "
                             f"got {pooling!r}")
        normalize = check_flag(normalize, "normalize", "encode")
        layers = check_layers(layers, self.bilm.config.n_output_layers)
        single, token_lists = self._token_lists(sentences, split_into_words)
        pooled = self._in_order(token_lists, layers, pooling, batch_size, progress)  # (2P,) or (L+1, 2P) each
        shape = (self.bilm.config.n_output_layers, self.dim) if layers == "all" else (self.dim,)
        out = np.stack(pooled) if pooled else np.zeros((0, *shape), np.float32)  # (N, 2P) or (N, L+1, 2P)
        if normalize:
            norms = np.linalg.norm(out, axis=-1, keepdims=True)  # (N, 1) or (N, L+1, 1)
            out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        return out[0] if single else out

    def embed_padded(self, sentences: Text, layers: Layers = "average", *, batch_size: int | None = None,
                     progress: bool = False, split_into_words: bool | None = None) -> Padded:
        """Token vectors of a batch in one zero-padded array: ``Padded(vectors, lengths)``.

        vectors: float32 (N, T, 2P) for one layer reading, (N, L+1, T, 2P) for "all" (the layer axis before the
        tokens, as in ``embed``'s (L+1, n, 2P)); T is the longest sentence; rows are zero past each length.
        lengths: int64 (N,). The numbers are exactly ``embed``'s. The default layers, "average", as ``encode``
        (TF-Hub's ``elmo`` output and simple_elmo's ``get_elmo_vectors`` give a layer average too). A single
        sentence is a batch of one. Input forms, ``split_into_words`` and ``batch_size``: as in ``embed``.
        """
        layers = check_layers(layers, self.bilm.config.n_output_layers)
        _, token_lists = self._token_lists(sentences, split_into_words)
        lengths = np.array([len(tokens) for tokens in token_lists], dtype=np.int64)  # (N,)
        longest = int(lengths.max(initial=0))
        n_layers = self.bilm.config.n_output_layers
        rows = (len(token_lists), n_layers) if layers == "all" else (len(token_lists),)
        vectors = np.zeros((*rows, longest, self.dim), dtype=np.float32)  # (N, T, 2P) or (N, L+1, T, 2P)
        for indices, arrays in self._batched(token_lists, layers, None, batch_size, progress):
            for index, array in zip(indices, arrays):
                vectors[index, ..., : array.shape[-2], :] = array  # (n, 2P) or (L+1, n, 2P)
        return Padded(vectors, lengths)

    # ---- AllenNLP's ElmoEmbedder names (deterministic here: no warm-up batches needed) ----------------------------
    def embed_sentence(self, sentence: str | Sequence[str]) -> np.ndarray:
        """One sentence (tokens, or a string for the tokenizer) -> (L+1, n, 2P)."""
        return self.embed(self.tokenize([sentence]), split_into_words=False)[0]

    def embed_batch(self, batch: Sequence[str | Sequence[str]]) -> list[np.ndarray]:
        """Sentences (token lists, or strings for the tokenizer) -> one (L+1, n, 2P) array each, in input order."""
        if isinstance(batch, str):
            raise InputTypeError("embed_batch takes a list of sentences; for one string use embed_sentence")
        return self.embed(self.tokenize(batch), split_into_words=False)

    def embed_sentences(self, sentences: Iterable[str | Sequence[str]], batch_size: int = 64) -> Iterator[np.ndarray]:
        """Lazily, in input order, ``batch_size`` sentences at a time: any number of sentences in bounded memory.
        An error names a sentence by its place in the whole input, not in the group of ``batch_size`` it came in."""
        if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__iter__"):
            raise InputTypeError(f"embed_sentences takes an iterable of sentences, got {type(sentences).__name__}; "
                                 f"for one string use embed_sentence")
        _check_batch_size(batch_size)
        refuse_unordered(sentences, _UNORDERED)
        iterator, first = iter(sentences), 0
        while chunk := list(islice(iterator, batch_size)):
            yield from self._in_order(self.tokenize(chunk, first=first), "all", None, None, False, first)
            first += len(chunk)

    def embed_file(self, input_file: str | Path | IO, output_file_path: str | Path, output_format: str = "all",
                   batch_size: int = 64, forget_sentences: bool = False, use_sentence_keys: bool = False,
                   progress: bool = True, *, tokenize: str | Callable[[str], list[str]] | None = None,
                   errors: str = "strict") -> int:
        """A text file (a path, or an open file as AllenNLP takes; one sentence per line) -> HDF5 in AllenNLP's
        layout, or ``.npz``; ``output_format`` "all", "top" or "average". Returns the number of lines (``elmo embed``).

        Lines are split on whitespace (pre-tokenised text, as AllenNLP and ``elmo embed`` read it), not by this
        embedder's tokenizer, unless ``tokenize`` asks: a name ("en", "ko", "ko-morph", "whitespace"), "model" for
        the model's own (``bilm.tokenizer_name``), or a function (``tokenize=embedder.tokenizer``). The HDF5 file
        records the model, its weights' sha256, the layers and the tokenizer as attributes (``embed_file``).
        ``errors="replace"`` reads bytes that are not UTF-8 as U+FFFD instead of stopping at them. A run that fails
        keeps its finished parts for ``elmo embed --resume`` when the input is a path; an open file is read from a
        temporary copy that no later run can read again, so its parts are removed."""
        write = partial(embed_file, self.engine, output_path=output_file_path, layers=output_format,
                        batch_size=batch_size, forget_sentences=forget_sentences, use_sentence_keys=use_sentence_keys,
                        errors=errors, progress=progress, device=self.device, tokenize=tokenize,
                        model_name=self.model_name, non_finite="warn" if self.allow_non_finite else "error")
        if not hasattr(input_file, "read"):
            return write(input_file)
        check_errors(errors)  # the file is read twice (count, then embed): an open one is copied first
        check_open_input(input_file, output_file_path)  # the copy is another file: compare the user's
        name = getattr(input_file, "name", "the open file")
        with tempfile.TemporaryDirectory() as folder:
            copy = Path(folder) / "input.txt"
            copy_open_text(input_file, name, copy)
            try:
                return write(copy, resumable=False)
            except ElmoError as err:  # name the user's file, not the temporary copy (gone by then)
                if err.args and isinstance(err.args[0], str):
                    err.args = (err.args[0].replace(str(copy), str(name)), *err.args[1:])
                raise

    def tokenize(self, sentences: Sequence[str] | Sequence[Sequence[str]], *, first: int = 0) -> list[list[str]]:
        """A batch as token lists: each string through the tokenizer, each token list as given. ``first``: the
        number of the batch's first sentence in the caller's input, so that an error names the right one."""
        if isinstance(sentences, (str, bytes)) or sentences is None or not _iterable(sentences):
            raise InputTypeError(f"expected a list of sentences (strings or token lists), got {type(sentences).__name__}")
        refuse_unordered(sentences, _UNORDERED)
        out = []
        for index, sentence in enumerate(sentences):
            if isinstance(sentence, str):
                out.append(tokens_of(self.tokenizer, sentence))
            elif isinstance(sentence, (bytes, type(None))) or not _iterable(sentence):
                raise InputTypeError(f"sentence {first + index}: expected a string or a list of tokens, got "
                                f"{type(sentence).__name__}")
            else:
                refuse_unordered(sentence, f"sentence {first + index} is a set, whose tokens have no order")
                tokens = list(sentence)
                check_tokens(tokens, first + index)  # here, where its place in the input is known (batches are sorted)
                out.append(tokens)
        return out

    def batches(self, token_lists: Sequence[Sequence[str]], batch_size: int | None = None) -> Iterator[list[int]]:
        """Indices of sentences, longest first, in groups of at most ``batch_size`` (default ``max_batch_size``)
        rows and ``max_tokens``."""
        if batch_size is None:
            batch_size = self.max_batch_size
        _check_batch_size(batch_size)
        return length_batches([len(t) for t in token_lists], int(batch_size), self.max_tokens)

    def embed_tokens(self, batch: Sequence[Sequence[str]], layers: Layers = "all",
                     pooling: str | None = None) -> list[np.ndarray]:
        """One forward pass over ``batch`` as given (no sorting): a list of arrays, one per sentence. Checked as
        ``embed`` checks: a sentence over the token limit is refused, NaN or infinite vectors are an error."""
        layers = check_layers(layers, self.bilm.config.n_output_layers)
        if pooling not in (None, "mean", "max"):
            raise UsageError(f"pooling must be None, 'mean' or 'max', got {pooling!r}")
        self._check_lengths(batch, 0)
        arrays = run_batch(self.engine, batch, layers, pooling, self.mix)  # checks the rest (batch_to_ids)
        self._check_finite(range(len(arrays)), arrays)
        return arrays

    def _token_lists(self, sentences: Text, split_into_words: bool | None) -> tuple[bool, list[list[str]]]:
        """(one sentence given?, token lists) under the input contract (module docstring)."""
        if split_into_words not in (None, True, False):
            raise InputTypeError(f"split_into_words must be None, True or False, got {split_into_words!r}")
        if isinstance(sentences, str):
            if split_into_words:
                raise InputTypeError("split_into_words=True takes tokens, got one string: pass its tokens "
                                     "(['He', 'went', ...]) or leave split_into_words out to tokenize the string")
            return True, [tokens_of(self.tokenizer, sentences)]
        if isinstance(sentences, bytes) or sentences is None or not _iterable(sentences):
            return False, self.tokenize(sentences)  # raises: says what a sentence list is
        refuse_unordered(sentences, _UNORDERED)
        items = list(sentences)
        strings = [isinstance(item, str) for item in items]
        if split_into_words and items and all(strings):
            return True, [list(items)]  # one tokenised sentence
        if split_into_words and any(strings):
            raise InputTypeError(f"sentence {strings.index(True)}: a string among token lists with "
                                 f"split_into_words=True; give every sentence as a list of tokens")
        if split_into_words is None and all(strings) and _looks_like_words(items):
            n, shown = len(items), ", ".join(repr(s) for s in items[:3]) + (", ..." if len(items) > 3 else "")
            raise UsageError(f"{n} strings without spaces ([{shown}]): one tokenised sentence or {n} one-word "
                             f"sentences? Pass one sentence as [[{shown}]] or with split_into_words=True; "
                             f"{n} one-word sentences with split_into_words=False")
        return False, self.tokenize(items)

    def _in_order(self, token_lists: list[list[str]], layers: Layers, pooling: str | None, batch_size: int | None,
                  progress: bool, first: int = 0) -> list[np.ndarray]:
        """``_batched``'s arrays put back in the order of ``token_lists``."""
        results: list[np.ndarray | None] = [None] * len(token_lists)
        for indices, arrays in self._batched(token_lists, layers, pooling, batch_size, progress, first):
            for index, array in zip(indices, arrays):
                results[index] = array
        return results  # type: ignore[return-value]

    def _batched(self, token_lists: list[list[str]], layers: Layers, pooling: str | None, batch_size: int | None,
                 progress: bool, first: int = 0) -> Iterator[tuple[list[int], list[np.ndarray]]]:
        """(indices, arrays) of each forward pass, longest sentences first; the one batching every method shares,
        so that ``embed``, ``encode`` and ``embed_padded`` give the same numbers. A sentence over
        ``MAX_TOKENS_PER_LINE`` tokens is refused before any work; NaN or infinite vectors are an error naming the
        sentences (``allow_non_finite=True``: a warning), numbered from ``first`` (``embed_sentences``' groups)."""
        self._check_lengths(token_lists, first)
        batches = self.batches(token_lists, batch_size)
        with tqdm(total=len(token_lists), unit="sent", disable=not progress) as bar:
            for indices in batches:
                arrays = run_batch(self.engine, [token_lists[i] for i in indices], layers, pooling, self.mix)
                self._check_finite([first + i for i in indices], arrays)
                yield indices, arrays
                bar.update(len(indices))

    @staticmethod
    def _check_lengths(token_lists: Sequence[Sequence[str]], first: int) -> None:
        """A sentence over ``MAX_TOKENS_PER_LINE`` tokens is refused before any work."""
        long = next((i for i, tokens in enumerate(token_lists)
                     if hasattr(tokens, "__len__") and len(tokens) > MAX_TOKENS_PER_LINE), None)
        if long is not None:
            raise UsageError(f"sentence {first + long}: {len(token_lists[long]):,} tokens, above the limit of "
                             f"{MAX_TOKENS_PER_LINE:,}; split it into sentences")

    def _check_finite(self, numbers: Iterable[int], arrays: Sequence[np.ndarray]) -> None:
        """NaN or infinite vectors: an error naming the sentences (their ``numbers`` in the input), or with
        ``allow_non_finite`` a warning."""
        bad = [number for number, array in zip(numbers, arrays) if not np.isfinite(array).all()]
        if bad:
            message = (f"sentence{'s' if len(bad) > 1 else ''} {', '.join(map(str, sorted(bad)[:5]))}: NaN "
                       f"or infinite vectors (the model's weights overflow float32 on them)")
            if not self.allow_non_finite:
                raise NonFiniteVectorsError(f"{message}; check the model, or pass allow_non_finite=True")
            logger.warning("%s; kept, as asked", message)


def _iterable(value: object) -> bool:
    """Iterable, as a sentence list or a token list is (a 0-d NumPy array has ``__iter__`` but cannot be)."""
    return hasattr(value, "__iter__") and not (isinstance(value, np.ndarray) and value.ndim == 0)


def _check_batch_size(batch_size: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise UsageError(f"batch_size must be a whole number >= 1 (sentences per forward pass), got {batch_size!r}")


def _looks_like_words(strings: Sequence[str]) -> bool:
    """Two or more non-empty strings and none with whitespace: could be one tokenised sentence."""
    return sum(1 for s in strings if s) >= 2 and not any(_SPACE.search(s) for s in strings)
