"""Count-based baselines: proper distributions, and the orderings one expects on real text."""

import numpy as np

from elmo.data.vocab import Vocabulary
from elmo.training.baselines import KneserNeyTrigram, UnigramLM, baseline_perplexities, sentence_ids

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
