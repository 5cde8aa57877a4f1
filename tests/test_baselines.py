"""Count-based baselines: proper distributions, and the orderings one expects on real text."""

import math

import numpy as np
import pytest

from elmo.data.vocab import Vocabulary
from elmo.errors import UsageError
from elmo.training.baselines import (MAX_TRIGRAM_VOCABULARY, KneserNeyTrigram, UnigramLM, baseline_perplexities,
                                     sentence_ids)

TRAIN = [s.split() for s in ["the cat sat on the mat", "the dog sat on the log", "a cat ate the fish",
                             "the cat sat", "a dog ran"]]


def _distribution(model, vocab, u, v):
    ids = np.array([vocab.id(u), vocab.id(v), 0], dtype=np.int64)
    total = 0.0
    for w in range(len(vocab)):
        ids[2] = w
        total += float(np.exp(model.log_probs(ids, np.array([False, False, True]))[0]))
    return total


def test_kneser_ney_sums_to_one_for_seen_and_unseen_contexts():
    vocab = Vocabulary.build(TRAIN + [["unseen"]])
    ids, mask = sentence_ids(vocab, TRAIN)
    model = KneserNeyTrigram(ids, mask, len(vocab))
    for u, v in (("the", "cat"), ("<S>", "<S>"), ("cat", "sat"), ("fish", "unseen"), ("dog", "the")):
        assert abs(_distribution(model, vocab, u, v) - 1.0) < 1e-9, (u, v)


def test_unigram_sums_to_one_and_counts_the_end_of_sentence():
    vocab = Vocabulary.build(TRAIN)
    ids, mask = sentence_ids(vocab, TRAIN)
    model = UnigramLM.fit(ids, mask, len(vocab))
    assert abs(np.exp(model.log_probs).sum() - 1.0) < 1e-12
    assert model.log_probs[vocab.eos] > model.log_probs[vocab.id("fish")]
    assert mask.sum() == sum(len(s) + 1 for s in TRAIN)


def test_trigram_beats_unigram_on_real_held_out_text(text_slices):
    train, dev, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    read = lambda p: [line.split() for line in p.read_text(encoding="utf-8").splitlines() if line.split()]
    unigram, trigram = baseline_perplexities(vocab, read(train), read(dev))
    assert trigram.forward < unigram.forward and trigram.backward < unigram.backward
    assert 10 < trigram.mean < unigram.mean < len(vocab)


def test_text_without_singletons_still_gives_a_finite_trigram_perplexity():
    """Duplicated text has no trigram seen once: n1/(n1+2 n2) would be 0 and leave unseen words no mass."""
    train = [["a", "b"], ["a", "b"]]
    results = baseline_perplexities(Vocabulary.build(train), train, [["b", "a"]])
    assert all(np.isfinite(r.forward) and np.isfinite(r.backward) for r in results)


def _textbook_kneser_ney(train: list[list[str]], vocab: Vocabulary):
    """Interpolated modified KN trigram written from Chen & Goodman's definition with dictionaries (independent of
    the vectorised module): raw trigram counts, continuation counts below, per order discounts D1, D2, D3+ from the
    counts of counts (one D = n1 / (n1 + 2 n2) for all where those misbehave)."""
    from collections import Counter, defaultdict

    known = set(vocab.words)

    def padded(sentence):
        return ["<S>", "<S>"] + [w if w in known else "<UNK>" for w in sentence] + ["</S>"]

    def discount(counts):  # count -> its discount: three of them (modified KN), or one for all if they misbehave
        n = Counter(counts)
        if all(n[k] for k in (1, 2, 3, 4)):
            y = n[1] / (n[1] + 2 * n[2])
            d = {k: k - (k + 1) * y * n[k + 1] / n[k] for k in (1, 2, 3)}
            if all(0 < d[k] <= k for k in d):
                return lambda c: d[min(c, 3)] if c else 0.0
        single = n[1] / (n[1] + 2 * n[2]) if n[1] else 0.5
        return lambda c: single if c else 0.0

    trigrams = defaultdict(Counter)  # (u, v) -> w -> c(uvw)
    for s in map(padded, train):
        for u, v, w in zip(s, s[1:], s[2:]):
            trigrams[(u, v)][w] += 1
    bigrams = defaultdict(Counter)  # v -> w -> |{u: c(uvw) > 0}|
    for (u, v), following in trigrams.items():
        for w in following:
            bigrams[v][w] += 1
    unigrams = Counter(w for following in bigrams.values() for w in following)  # w -> |{v: N1+(.vw) > 0}|
    levels = [(trigrams, discount([c for f in trigrams.values() for c in f.values()])),
              (bigrams, discount([c for f in bigrams.values() for c in f.values()]))]
    d1, total1 = discount(list(unigrams.values())), sum(unigrams.values())
    mass1 = sum(d1(c) for c in unigrams.values())

    def prob(u, v, w):
        p = max(unigrams[w] - d1(unigrams[w]), 0) / total1 + mass1 / total1 / len(vocab)
        for (table, d), history in zip(levels[::-1], (v, (u, v))):
            if history in table:
                following = table[history]
                n = sum(following.values())
                p = max(following[w] - d(following[w]), 0) / n + sum(map(d, following.values())) / n * p
        return p

    return lambda sentence: [math.log(prob(u, v, w)) for u, v, w in zip(*(padded(sentence)[i:] for i in range(3)))]


def test_kneser_ney_equals_a_textbook_implementation(text_slices):
    """Every log-probability, on a hand-made corpus (unseen words and contexts; too small for three discounts) and on
    a slice of real text (three discounts per order)."""
    train_file, dev_file, vocab_file = text_slices
    read = lambda p, n: [line.split() for line in p.read_text(encoding="utf-8").splitlines()[:n] if line.split()]
    cases = [(TRAIN, [["the", "cat", "ran"], ["a", "fish", "sat", "on", "a", "dog"], ["unseen", "the"]],
              Vocabulary.build(TRAIN + [["unseen"]])),
             (read(train_file, 400), read(dev_file, 60), Vocabulary.load(vocab_file))]
    for train, evaluate, vocab in cases:
        ids, mask = sentence_ids(vocab, train)
        ours = KneserNeyTrigram(ids, mask, len(vocab)).log_probs(*sentence_ids(vocab, evaluate))
        textbook = _textbook_kneser_ney(train, vocab)
        expected = np.array([lp for sentence in evaluate for lp in textbook(sentence)])
        assert ours.shape == expected.shape and np.abs(ours - expected).max() < 1e-9


def test_several_held_out_sets_score_as_each_alone(text_slices):
    """`elmo baselines --eval A B C` trains each direction's models once for all the sets."""
    from elmo.training.baselines import baseline_perplexities_of_sets

    train, dev, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    lines = [line.split() for line in dev.read_text(encoding="utf-8").splitlines() if line.split()]
    sets = [lines[:40], lines[40:60], lines[:5]]
    together = baseline_perplexities_of_sets(vocab, [line.split() for line in train.read_text().splitlines()], sets)
    alone = [baseline_perplexities(vocab, [line.split() for line in train.read_text().splitlines()], s) for s in sets]
    assert together == alone and len({r[1].forward for r in together}) == 3


def test_the_largest_vocabulary_gives_the_same_figures_whatever_the_word_order():
    """Trigram keys are (u V + v) V + w in int64: at V = 2^21 the largest key is 2^63 - 1. Beyond it keys wrapped
    around and the same text over the same words gave 30.9 or 676.1 as the words sat low or high in the list."""
    V = MAX_TRIGRAM_VOCABULARY
    rng = np.random.default_rng(0)
    words = rng.integers(0, 25, size=400)
    ids, mask = np.concatenate([[0, 0], words + 3]), np.concatenate([[False, False], np.ones(400, bool)])
    low, high = ids.copy(), np.where(ids >= 3, ids + (V - 30), ids)  # the same words at the end of the list
    figures = [KneserNeyTrigram(x[:300], mask[:300], V).perplexity(x[300:], mask[300:]) for x in (low, high)]
    assert math.isfinite(figures[0]) and abs(figures[0] - figures[1]) < 1e-9 * figures[0]


def test_a_vocabulary_beyond_the_trigram_keys_is_refused():
    vocab = Vocabulary(["<S>", "</S>", "<UNK>"] + [f"w{i}" for i in range(MAX_TRIGRAM_VOCABULARY - 2)], source="v.txt")
    with pytest.raises(UsageError, match=r"v.txt: 2,097,153 words.*at most 2,097,152"):
        baseline_perplexities(vocab, TRAIN, TRAIN)
