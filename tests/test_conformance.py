"""AllenNLP's ELMo fixtures reproduced (docs/format.md §6): the numbers users expect from the official weights."""

import json

import h5py
import numpy as np
import torch

from elmo.data.chars import batch_to_ids
from elmo.io.official import load_official
from elmo.model.bilm import remove_sentence_boundaries
from tests.conftest import FIXTURES, OPTIONS, WEIGHTS


def interleaved_batches():
    """Batch i holds sentences[0][i], sentences[1][i], sentences[2][i]: how the fixtures were made."""
    sentences = json.loads((FIXTURES / "sentences.json").read_text())
    return [[sentences[k][i].split() for k in range(3)] for i in range(10)]


def expected_top(k: int, i: int) -> np.ndarray:
    with h5py.File(FIXTURES / f"lm_embeddings_{k}.hdf5") as f:
        forward_backward = f[str(i)][()]  # (2, n, P)
    return np.concatenate([forward_backward[0], forward_backward[1]], axis=-1)  # (n, 2P)


def test_stateful_top_layer_matches_lm_embeddings(report):
    model = load_official(OPTIONS, WEIGHTS, stateful=True)
    worst = 0.0
    with torch.no_grad():
        for i, batch in enumerate(interleaved_batches()):
            out = model(batch_to_ids(batch))
            top, mask = remove_sentence_boundaries(out.layers[-1], out.mask)
            assert mask.sum(1).tolist() == [len(s) for s in batch]
            for k, sentence in enumerate(batch):
                worst = max(worst, float(np.abs(top[k, : len(sentence)].numpy() - expected_top(k, i)).max()))
    report("lm_embeddings top layer, stateful interleaved batches: max abs diff", worst)
    assert worst <= 2e-6


def test_without_carried_state_the_fixture_is_not_reproduced(fixture_model):
    """Guard: the comparison above is sensitive to the state (deterministic mode differs after batch 0)."""
    with torch.no_grad():
        batches = interleaved_batches()
        out = fixture_model(batch_to_ids(batches[1]))
    top, _ = remove_sentence_boundaries(out.layers[-1], out.mask)
    assert np.abs(top[0, : len(batches[1][0])].numpy() - expected_top(0, 1)).max() > 1e-2


def test_token_layer_matches_elmo_token_embeddings(fixture_model, report):
    vocab = (FIXTURES / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    rows = [vocab[i : i + 50] for i in range(0, len(vocab), 50)]  # as AllenNLP's test: rows of 50 words
    with torch.no_grad():
        out = fixture_model(batch_to_ids(rows))
    tokens, mask = remove_sentence_boundaries(out.token_vectors, out.mask)
    got = tokens[mask].numpy()  # (458, P), in vocabulary order
    with h5py.File(FIXTURES / "elmo_token_embeddings.hdf5") as f:
        expected = f["embedding"][()]
    assert got.shape == expected.shape == (len(vocab), 16)
    worst = float(np.abs(got - expected).max())
    report("token layer vs elmo_token_embeddings.hdf5: max abs diff", worst)
    assert worst <= 1e-6


def test_boundary_tokens_equal_literal_s_tokens(fixture_model):
    with torch.no_grad():
        auto = fixture_model(batch_to_ids([["word"]])).token_vectors[0]  # <S> word </S>
        literal = fixture_model(batch_to_ids([["<S>", "</S>"]])).token_vectors[0]  # <S> <S> </S> </S>
    assert torch.allclose(auto[0], literal[1], atol=1e-7, rtol=0)
    assert torch.allclose(auto[2], literal[2], atol=1e-7, rtol=0)
