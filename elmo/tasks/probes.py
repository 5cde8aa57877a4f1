"""The paper's layer analyses (section 5.3): what each biLM layer holds, read by deliberately simple probes.

* POS: a linear classifier on each layer's token vectors (and on a learned mix) — the paper finds the first
  LSTM layer best.
* WSD: 1-nearest-neighbour sense vectors — the mean vector of each WordNet sense over its SemCor occurrences — per
  layer; an instance takes the nearest sense of its lemma, or the first WordNet sense when SemCor never saw the
  lemma — the paper finds the top layer best.

Each is printed next to a static baseline: word2vec vectors trained with gensim on the same pretraining text (for
POS the word's vector; for WSD the mean vector of the words around it, since a static vector alone cannot tell
senses apart).
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from elmo.embed import Embedder
from elmo.errors import MissingDependencyError, UsageError
from elmo.io.atomic import atomic_path
from elmo.limits import MAX_WORD_VECTOR_DIM, is_digits, is_whole
from elmo.tasks import readers
from elmo.tasks.readers.common import iter_lines
from elmo.tasks.features import FeatureCache, cached_features
from elmo.tasks.heads import LayerInput

WINDOW = 5  # words on each side for the static WSD context vector
TIE = 1e-6  # cosine scores this close to the best are a tie (float rounding of identical sense vectors)


# ---- static baseline --------------------------------------------------------------------------------------------
def train_word2vec(sentences: Iterable[Sequence[str]], out: str | Path, dim: int = 256, epochs: int = 5,
                   min_count: int = 3, workers: int = 2, seed: int = 0) -> Path:
    """Skip-gram word2vec (gensim) on tokenised sentences, saved in the plain word2vec text format (no pickle)."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise MissingDependencyError("the static baseline needs gensim: pip install 'elmo-bilm[probe]'") from None

    if not is_whole(dim, 1, MAX_WORD_VECTOR_DIM):  # before gensim allocates words x dim, twice
        raise UsageError(f"dim must be a whole number from 1 to {MAX_WORD_VECTOR_DIM:,}, got {dim!r}")
    corpus = [list(s) for s in sentences if s]
    counts = Counter(token for sentence in corpus for token in sentence)
    if not any(count >= min_count for count in counts.values()):  # gensim would fail deep inside its training
        raise UsageError(f"no word occurs {min_count} times or more in the text ({sum(counts.values()):,} tokens), "
                         f"and word2vec leaves out rarer words: give more text")
    model = Word2Vec(corpus, vector_size=dim, window=WINDOW, min_count=min_count, sg=1, epochs=epochs,
                     workers=workers, seed=seed)
    out = Path(out)
    with atomic_path(out) as tmp:
        model.wv.save_word2vec_format(str(tmp))
    return out


def load_word_vectors(path: str | Path) -> dict[str, np.ndarray]:
    """word -> vector from a word2vec text file (first line: count and dimension; each line after it a word and
    its numbers, a trailing space allowed, as the original C tool writes them)."""
    hint = "give a word2vec text file (a first line 'COUNT DIM', then a word and DIM numbers per line)"
    vectors: dict[str, np.ndarray] = {}
    dim = count = 0
    lines_of: dict[str, int] = {}
    for number, line in iter_lines(path):  # line by line: a bad byte is an error naming its line
        if number == 1:
            header = line.split()
            if len(header) != 2 or not all(is_digits(h) for h in header) or int(header[1]) == 0:
                raise readers.DataFormatError(path, 1, f"the header {line[:60]!r} is not 'COUNT DIM'", hint)
            count, dim = int(header[0]), int(header[1])
            continue
        parts = line.rstrip(" ").split(" ")
        if len(parts) != dim + 1:
            raise readers.DataFormatError(path, number, f"{len(parts) - 1} values, expected {dim}", hint)
        if parts[0] in lines_of:  # keeping either vector would drop the other without a word
            raise readers.DataFormatError(path, number, f"the word {parts[0][:40]!r} again (line "
                                                        f"{lines_of[parts[0]]})", "give each word one vector")
        lines_of[parts[0]] = number
        try:
            vectors[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
        except ValueError:
            raise readers.DataFormatError(path, number, "a value that is not a number", hint) from None
        if not np.isfinite(vectors[parts[0]]).all():
            raise readers.DataFormatError(path, number, "a value that is NaN or infinite", hint)
    if not vectors:
        raise readers.DataFormatError(path, 1, "no word vectors in the file", hint)
    if len(vectors) != count:  # a file cut short (a full disk, an interrupted copy), or a header for another file
        raise readers.DataFormatError(path, 1, f"the header says {count:,} words and the file holds {len(vectors):,}",
                                      "the file is cut short or its header is wrong: write it again")
    return vectors


def static_token_vectors(vectors: dict[str, np.ndarray], tokens: Sequence[str]) -> np.ndarray:
    dim = len(next(iter(vectors.values())))
    zero = np.zeros(dim, dtype=np.float32)
    return np.stack([vectors.get(t, vectors.get(t.lower(), zero)) for t in tokens])  # (n, dim)


def warn_static_coverage(vectors: dict[str, np.ndarray], tokens: Sequence[str], least: float = 0.5) -> float:
    """The share of ``tokens`` the static vectors know (as written or lower-cased); under ``least``, a warning: the
    others are zero vectors, and a baseline of zeros says nothing about the vectors."""
    known = sum(1 for t in tokens if t in vectors or t.lower() in vectors) / max(len(tokens), 1)
    if known < least:
        warnings.warn(f"the static vectors know {known:.0%} of the probe's {len(tokens):,} tokens (the rest are zero "
                      f"vectors): the word2vec row measures little; train them on text like the probe's")
    return known


# ---- POS probe --------------------------------------------------------------------------------------------------
def _fit_linear(train_x: torch.Tensor, train_y: torch.Tensor, dev_x: torch.Tensor, dev_y: torch.Tensor,
                n_classes: int, epochs: int, mix: bool, seed: int = 0) -> float:
    """Softmax regression (optionally over a learned scalar mix of the layers); dev accuracy."""
    torch.manual_seed(seed)
    mixer = LayerInput(train_x.shape[1], "mix") if mix else None
    linear = torch.nn.Linear(train_x.shape[-1], n_classes)
    params = list(linear.parameters()) + (list(mixer.parameters()) if mixer else [])
    optimizer = torch.optim.Adam(params, lr=3e-3)
    read = (lambda x: mixer(x.unsqueeze(1)).squeeze(1)) if mixer else (lambda x: x)  # (N, L+1, D) -> (N, D)
    for _ in range(epochs):
        for batch in torch.randperm(len(train_x)).split(512):
            loss = torch.nn.functional.cross_entropy(linear(read(train_x[batch])), train_y[batch])
            if mixer:
                loss = loss + 0.001 * mixer.penalty()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        predicted = torch.cat([linear(read(x)).argmax(-1) for x in dev_x.split(4096)])
    return float((predicted == dev_y).float().mean())


def _token_matrix(cache: FeatureCache) -> torch.Tensor:
    return torch.from_numpy(cache.vectors.astype(np.float32))  # (N, L+1, D)


def probe_pos(embedder: Embedder, train_path: str | Path, dev_path: str | Path, cache_dir: str | Path,
              static: dict[str, np.ndarray] | None = None, max_sentences: int | None = None, epochs: int = 5,
              column: str = "upos", progress: bool = True) -> dict[str, float]:
    """Dev accuracy of a linear POS classifier on each layer, on the learned mix, and on static vectors."""
    train = readers.read_conllu(train_path, column)[:max_sentences]
    dev = readers.read_conllu(dev_path, column)
    for path, sentences in ((train_path, train), (dev_path, dev)):
        if not any(s.tokens for s in sentences):
            raise UsageError(f"{path}: no tagged tokens; the probe needs CoNLL-U sentences to train and score on")
    labels = sorted({t for s in train + dev for t in s.tags})
    _warn_dev_only_tags(dev_path, {t for s in train for t in s.tags}, [t for s in dev for t in s.tags])
    index = {t: i for i, t in enumerate(labels)}
    gold = lambda sentences: torch.tensor([index[t] for s in sentences for t in s.tags])  # noqa: E731
    train_y, dev_y = gold(train), gold(dev)
    train_x = _token_matrix(cached_features(embedder, [s.tokens for s in train], cache_dir, progress))
    dev_x = _token_matrix(cached_features(embedder, [s.tokens for s in dev], cache_dir, progress))
    results = {f"layer {k}": _fit_linear(train_x[:, k], train_y, dev_x[:, k], dev_y, len(labels), epochs, False)
               for k in range(train_x.shape[1])}
    results["mix"] = _fit_linear(train_x, train_y, dev_x, dev_y, len(labels), epochs, True)
    if static is not None:
        warn_static_coverage(static, [t for s in (*train, *dev) for t in s.tokens])
        to_matrix = lambda sentences: torch.from_numpy(np.concatenate(  # noqa: E731
            [static_token_vectors(static, s.tokens) for s in sentences]))
        results["word2vec"] = _fit_linear(to_matrix(train), train_y, to_matrix(dev), dev_y, len(labels), epochs,
                                          False)
    return results


def _warn_dev_only_tags(dev_path: str | Path, train_tags: set[str], dev_tags: list[str]) -> None:
    """Dev tags the training sentences never show count as errors in every row (no classifier can predict them):
    said with their share of the dev tokens, as `task train` says it (``--max-sentences`` makes them likelier)."""
    unseen = Counter(t for t in dev_tags if t not in train_tags)
    if unseen:
        names = sorted(unseen)
        warnings.warn(f"{dev_path}: {len(names)} tag(s) appear in the dev data but not in the training data, "
                      f"{sum(unseen.values()) / len(dev_tags):.1%} of the dev tokens, counted as errors: "
                      f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}")


# ---- WSD probe --------------------------------------------------------------------------------------------------
def _instance_vectors(cache: FeatureCache, sentences: Sequence[readers.WsdSentence]):
    """(sentence, token index, instance id, gold keys, (L+1, D) vectors) for every instance."""
    for i, sentence in enumerate(sentences):
        vectors = cache[i]  # (n, L+1, D)
        for token, instance_id, keys in sentence.instances:
            yield sentence, token, instance_id, keys, vectors[token]


def _static_context(static: dict[str, np.ndarray], tokens: Sequence[str], position: int) -> np.ndarray:
    window = [t for j, t in enumerate(tokens[max(0, position - WINDOW) : position + WINDOW + 1],
                                      start=max(0, position - WINDOW)) if j != position]
    return static_token_vectors(static, window or [tokens[position]]).mean(0)


def _normalise(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v, axis=-1, keepdims=True) + 1e-8)


def probe_wsd(embedder: Embedder, semcor_xml: str | Path, semcor_keys: str | Path, eval_xml: str | Path,
              eval_keys: str | Path, index_sense: str | Path, cache_dir: str | Path,
              static: dict[str, np.ndarray] | None = None, max_sentences: int | None = None,
              progress: bool = True) -> dict[str, float]:
    """F1 (Raganato et al. 2017's scorer: precision over the instances answered, recall over those with a gold
    key) of 1-NN sense vectors per layer, the layer mean, static context vectors, and the first-sense baseline
    alone. An instance whose lemma and part of speech WordNet's index lacks gets no answer."""
    index = readers.read_wordnet_index_sense(index_sense)
    train = readers.read_wsd_xml(semcor_xml, semcor_keys)[:max_sentences]
    test = readers.read_wsd_xml(eval_xml, eval_keys)
    for path, sentences in ((semcor_xml, train), (eval_xml, test)):
        empty = next((i for i, s in enumerate(sentences) if not s.tokens), None)
        if empty is not None:
            raise UsageError(f"{path}: <sentence> {empty + 1} (counting from 1) has no words; remove it")
    if not any(keys for sentence in train for _, _, keys in sentence.instances):
        raise UsageError(f"{semcor_keys}: no instance of {semcor_xml} has a gold key, so no sense vector can be "
                         f"learned; give the training set (SemCor) and its keys")
    if static is not None:
        warn_static_coverage(static, [t for s in (*train, *test) for t in s.tokens])
    train_cache = cached_features(embedder, [s.tokens for s in train], cache_dir, progress)
    test_cache = cached_features(embedder, [s.tokens for s in test], cache_dir, progress)
    n_layers = train_cache.n_layers
    readers_of = {f"layer {k}": (lambda v, k=k: v[k]) for k in range(n_layers)}
    readers_of["mean of layers"] = lambda v: v.mean(0)
    sums: dict[str, dict[str, np.ndarray]] = {name: defaultdict(lambda: 0.0) for name in readers_of}
    static_sums: dict[str, np.ndarray] = defaultdict(lambda: 0.0)
    for sentence, token, _, keys, vectors in _instance_vectors(train_cache, train):
        for key in keys[:1]:  # the first gold sense, as the paper's probe
            for name, read in readers_of.items():
                sums[name][key] = sums[name][key] + _normalise(read(vectors))
            if static is not None:
                static_sums[key] = static_sums[key] + _normalise(_static_context(static, sentence.tokens, token))
    results: dict[str, float] = {}
    instances = [i for i in _instance_vectors(test_cache, test) if i[3]]  # instances with a gold key
    if not instances:
        raise UsageError(f"{eval_keys}: no instance of {eval_xml} has a gold key; give the keys of that set")
    candidates = lambda s, t: index.get((s.lemmas[t].lower().replace(" ", "_"), s.pos[t]), [])  # noqa: E731
    for name, read in readers_of.items():
        results[name] = _f1(instances, candidates, sums[name], lambda s, t, v, read=read: read(v))
    if static is not None:
        results["word2vec (context)"] = _f1(instances, candidates, static_sums,
                                            lambda s, t, v: _static_context(static, s.tokens, t))
    results["first WordNet sense"] = _f1(instances, candidates, {}, lambda s, t, v: v[0])
    return results


def _f1(instances, candidates, sense_vectors: dict[str, np.ndarray], read) -> float:
    """F1 of the answers: each instance's nearest known sense vector (the first WordNet sense when none of its
    senses has a vector; no answer when WordNet lists none); a hit when it is one of the gold senses. Scores within
    TIE of the best count as a tie, won by the sense WordNet lists first (senses seen only with one word form have
    the same vector at the context-free layer 0, so float rounding alone would order them: 34.51 vs 35.16)."""
    correct = answered = 0
    for sentence, token, _, keys, vectors in instances:
        senses = candidates(sentence, token)
        known = [k for k in senses if k in sense_vectors]
        if known:
            query = _normalise(read(sentence, token, vectors))
            scores = np.array([float(np.dot(query, _normalise(sense_vectors[k]))) for k in known])
            guess = known[int(np.flatnonzero(scores >= scores.max() - TIE)[0])]
        else:
            guess = senses[0] if senses else None
        answered += guess is not None
        correct += guess in keys
    precision, recall = correct / max(answered, 1), correct / max(len(instances), 1)
    return 2 * precision * recall / (precision + recall) if correct else 0.0
