"""Count-based baselines for perplexity: an add-one unigram and an interpolated modified Kneser-Ney trigram.

They use the biLM's vocabulary (out-of-vocabulary words are ``<UNK>``) and count what the biLM's perplexity counts:
every word and the closing boundary of each sentence, n + 1 predictions (the backward model reads sentences
reversed and predicts ``<S>`` last). Counting is vectorised with NumPy: an n-gram is one int64 key, so tens of
millions of tokens fit in memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from elmo.data.vocab import Vocabulary
from elmo.errors import UsageError

MAX_TRIGRAM_VOCABULARY = 1 << 21  # an n-gram (u, v, w) is the int64 key (u V + v) V + w: V^3 - 1 must fit in 2^63 - 1


def sentence_ids(vocab: Vocabulary, sentences: Iterable[list[str]], reverse: bool = False,
                 pad: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """All sentences as one id array ``<S> x pad, w1 .. wn, </S>`` each (reversed inside for the backward model),
    and a mask of the positions that are predictions (the words and the final boundary)."""
    start, end = (vocab.eos, vocab.bos) if reverse else (vocab.bos, vocab.eos)
    chunks, masks = [], []
    for tokens in sentences:
        ids = vocab.ids(tokens[::-1] if reverse else tokens)
        chunks.append(np.array([start] * pad + ids + [end], dtype=np.int64))
        masks.append(np.array([False] * pad + [True] * (len(ids) + 1)))
    if not chunks:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    return np.concatenate(chunks), np.concatenate(masks)


@dataclass
class UnigramLM:
    """p(w) = (count(w) + 1) / (N + V): add-one smoothing over the vocabulary (``<UNK>`` and ``</S>`` included)."""

    log_probs: np.ndarray  # (V,)

    @classmethod
    def fit(cls, ids: np.ndarray, mask: np.ndarray, vocab_size: int) -> "UnigramLM":
        counts = np.bincount(ids[mask], minlength=vocab_size).astype(np.float64)
        return cls(np.log((counts + 1.0) / (counts.sum() + vocab_size)))

    def perplexity(self, ids: np.ndarray, mask: np.ndarray) -> float:
        return math.exp(-float(self.log_probs[ids[mask]].mean()))


class KneserNeyTrigram:
    """Interpolated modified Kneser-Ney (Chen & Goodman 1998; KenLM's default): per order three discounts, for
    counts of 1, 2 and 3 or more, D_k = k - (k + 1) Y n_{k+1} / n_k with Y = n1 / (n1 + 2 n2) (n_k: how many
    n-grams of the order have count k). With D(c) the discount of count c (D(0) = 0) and the mass a history
    gives away, gamma(h) = sum over the words seen after h of D(count) / the history's total:

    p3(w|u,v) = max(c(uvw) - D3(c), 0) / c(uv.) + gamma3(uv) p2(w|v)                 (p2 if c(uv.) = 0)
    p2(w|v)   = max(N1+(.vw) - D2(N), 0) / N1+(.v.) + gamma2(v) p1(w)                 (continuation counts)
    p1(w)     = max(N1+(.w) - D1(N), 0) / N1+(..) + gamma1 / V

    Where the counts of counts do not give three discounts in (0, k] (small or duplicated text), one discount
    D = n1 / (n1 + 2 n2) (0.5 without singletons) serves every count: plain interpolated Kneser-Ney.
    """

    def __init__(self, ids: np.ndarray, mask: np.ndarray, vocab_size: int) -> None:
        V = self.V = vocab_size
        positions = np.nonzero(mask)[0]
        keys = (ids[positions - 2] * V + ids[positions - 1]) * V + ids[positions]
        trigrams, counts = np.unique(keys, return_counts=True)  # sorted distinct (u, v, w), c(uvw)
        self.trigram = _Level.of(trigrams, counts, V)
        bigrams, continuations = np.unique(trigrams % (V * V), return_counts=True)  # distinct (v, w), N1+(.vw)
        self.bigram = _Level.of(bigrams, continuations, V)
        uni_cont = np.bincount(bigrams % V, minlength=V)  # N1+(.w)
        self.d1 = _discounts(uni_cont[uni_cont > 0])
        discount = self.d1[np.minimum(uni_cont, 3)]  # (V,) 0 for words never seen
        total = float(uni_cont.sum())
        self.p1 = np.maximum(uni_cont - discount, 0) / total + discount.sum() / total / V

    def log_probs(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        V = self.V
        positions = np.nonzero(mask)[0]
        u, v, w = ids[positions - 2], ids[positions - 1], ids[positions]
        p = self.bigram.interpolate(v, v * V + w, self.p1[w])
        return np.log(self.trigram.interpolate(u * V + v, (u * V + v) * V + w, p))

    def perplexity(self, ids: np.ndarray, mask: np.ndarray) -> float:
        return math.exp(-float(self.log_probs(ids, mask).mean()))


@dataclass
class _Level:
    """One order above the unigrams: its distinct n-grams (sorted keys, history * V + word) with their counts (raw
    for trigrams, continuation counts for bigrams), and per history the total count and the mass it gives away."""

    keys: np.ndarray  # (K,) sorted
    counts: np.ndarray  # (K,) float64
    discounts: np.ndarray  # (4,) D(0), D(1), D(2), D(3+)
    histories: np.ndarray  # (H,) sorted
    totals: np.ndarray  # (H,) the history's total count
    masses: np.ndarray  # (H,) sum of D(count) over the words seen after the history

    @classmethod
    def of(cls, keys: np.ndarray, counts: np.ndarray, V: int) -> "_Level":
        discounts = _discounts(counts)
        histories, first = np.unique(keys // V, return_index=True)
        counts = counts.astype(np.float64)
        masses = np.add.reduceat(discounts[np.minimum(counts, 3).astype(np.int64)], first)
        return cls(keys, counts, discounts, histories, np.add.reduceat(counts, first), masses)

    def interpolate(self, history: np.ndarray, key: np.ndarray, lower: np.ndarray) -> np.ndarray:
        """max(c - D(c), 0) / total + mass / total * lower where the history was seen, else ``lower``."""
        h, seen = _lookup(self.histories, history)
        k, found = _lookup(self.keys, key)
        count = np.where(found, self.counts[k], 0.0)
        total = np.where(seen, self.totals[h], 1.0)
        mass = np.where(seen, self.masses[h], 0.0)
        discount = self.discounts[np.minimum(count, 3).astype(np.int64)]
        return np.where(seen, np.maximum(count - discount, 0) / total + mass / total * lower, lower)


def _discounts(counts: np.ndarray) -> np.ndarray:
    """(4,): the discount of a count of 0 (none), 1, 2 and 3 or more, from the counts of counts."""
    n1, n2, n3, n4 = (int((counts == k).sum()) for k in (1, 2, 3, 4))
    if n1 and n2 and n3 and n4:
        y = n1 / (n1 + 2 * n2)
        modified = np.array([0.0, 1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3])
        if all(0 < modified[k] <= k for k in (1, 2, 3)):
            return modified
    # No singletons (tiny or duplicated text) would give D = 0: no mass for unseen continuations, infinite perplexity.
    single = n1 / (n1 + 2 * n2) if n1 else 0.5
    return np.array([0.0, single, single, single])


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each key in a sorted array and whether it is there."""
    index = np.searchsorted(sorted_keys, keys)
    index = np.minimum(index, max(len(sorted_keys) - 1, 0))
    found = (sorted_keys[index] == keys) if len(sorted_keys) else np.zeros(len(keys), bool)
    return index, found


@dataclass
class BaselineResult:
    name: str
    forward: float
    backward: float

    @property
    def mean(self) -> float:
        return math.sqrt(self.forward * self.backward)


def check_trigram_vocabulary(vocab: Vocabulary) -> None:
    """A UsageError naming the vocabulary when its size is beyond the trigram keys' reach: keys past 2^63 wrap around,
    and the figures then depend on the order of the words (wrong, with no error)."""
    if len(vocab) > MAX_TRIGRAM_VOCABULARY:
        raise UsageError(f"{vocab.source or 'the vocabulary'}: {len(vocab):,} words; the Kneser-Ney baseline counts "
                         f"trigrams of vocabularies of at most {MAX_TRIGRAM_VOCABULARY:,} words: use a smaller one "
                         f"(`elmo vocab build --max-size {MAX_TRIGRAM_VOCABULARY}`)")


def baseline_perplexities(vocab: Vocabulary, train: Iterable[list[str]], evaluate: list[list[str]]) -> list[BaselineResult]:
    """Unigram and KN-trigram perplexities of ``evaluate``, each direction trained on ``train``."""
    return baseline_perplexities_of_sets(vocab, train, [evaluate])[0]


def baseline_perplexities_of_sets(vocab: Vocabulary, train: Iterable[list[str]],
                                  sets: Sequence[list[list[str]]]) -> list[list[BaselineResult]]:
    """``baseline_perplexities`` of several held-out sets, the models of each direction trained once for all."""
    check_trigram_vocabulary(vocab)
    train = list(train)
    results = [{"unigram": [], "kn-trigram": []} for _ in sets]
    for reverse in (False, True):
        ids, mask = sentence_ids(vocab, train, reverse)
        unigram, trigram = UnigramLM.fit(ids, mask, len(vocab)), KneserNeyTrigram(ids, mask, len(vocab))
        del ids, mask
        for evaluate, result in zip(sets, results):
            test_ids, test_mask = sentence_ids(vocab, evaluate, reverse)
            result["unigram"].append(unigram.perplexity(test_ids, test_mask))
            result["kn-trigram"].append(trigram.perplexity(test_ids, test_mask))
        del unigram, trigram
    return [[BaselineResult(name, *values) for name, values in result.items()] for result in results]
