"""The fast and alternative inference paths (``InferenceEngine``: precisions, token cache and memo, close, rebuild)
under misuse: a closed engine never runs half a model, an engine is a snapshot of every layer, the memo gives each
word its own vector from several threads at once, a bad precision is one error line, and a large cache word list is
built batch by batch."""

import sys
import threading
import tracemalloc

import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.embed import Embedder
from elmo.errors import ElmoError, UsageError
from elmo.model.engine import InferenceEngine
from elmo.model.token_cache import TokenMemo, build_token_cache
from tests.conftest import random_bilm, small_config

BATCH = [["The", "bank", "closed"], ["A", "river", "bank", "flooded", "."]]


def test_a_closed_engine_stays_closed_after_forget_tokens(tmp_path):
    """``embed_file`` empties the memo at every chunk: a closed engine then ran with no LSTM layers and wrote the
    token layer alone, (1, n, 2P) datasets where (L+1, n, 2P) belong, without a word."""
    embedder = Embedder(random_bilm(small_config()))
    embedder.engine.close()
    embedder.engine.forget_tokens()
    with pytest.raises(UsageError, match="closed; call rebuild"):
        embedder.embed(BATCH)
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    with pytest.raises(UsageError, match="closed; call rebuild"):
        embedder.embed_file(text, tmp_path / "out.hdf5", progress=False)
    with pytest.raises(UsageError, match="closed"):
        embedder.engine.run_stack(0, torch.zeros(1, 2, 8), [1, 1], [])
    embedder.engine.rebuild()
    assert embedder.embed(BATCH)[0].shape == (3, 3, 16)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_engine_keeps_the_token_layer_it_was_built_with(precision):
    """The engine ran the biLM's own character encoder: after the weights changed without ``rebuild()``, the token
    layer followed the new weights while the LSTMs kept the old ones (and remembered words kept their old vectors)."""
    bilm = random_bilm(small_config(), seed=7)
    ids = batch_to_ids(BATCH)
    engine = InferenceEngine.build(bilm, precision)
    before = [layer.clone() for layer in engine(ids).layers]
    engine.forget_tokens()
    with torch.no_grad():
        bilm.char_encoder.char_embedding.weight.mul_(1.5)
        bilm.char_encoder.convolutions[0].weight.mul_(0.5)
        bilm.char_encoder.projection.weight.mul_(2.0)
    for a, b in zip(before, engine(ids).layers):
        assert torch.equal(a, b)
    engine.rebuild()
    assert not torch.allclose(before[0], engine(ids).layers[0], atol=1e-3)  # rebuild reads the new weights


def test_an_engine_leaves_the_encoder_parameters_it_shares_as_they_are():
    bilm = random_bilm(small_config(), seed=8)
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    engine = InferenceEngine.build(bilm)
    engine(batch_to_ids(BATCH))
    assert engine.encoder is not bilm.char_encoder
    assert all(torch.equal(before[k], v) for k, v in bilm.state_dict().items())


def test_the_token_memo_gives_each_word_its_own_vector_from_two_threads():
    """Two threads took the same free slot, or read one another was refilling: other words' vectors in silence
    (5.7 off on the shipped model's vectors, two threads embedding 50 sentences each)."""
    width, dim = 6, 4
    pool = torch.randint(1, 200, (400, width), generator=torch.Generator().manual_seed(0))
    weights = torch.randn(width, dim, generator=torch.Generator().manual_seed(1))
    compute = lambda ids: ids.float() @ weights  # noqa: E731 (a word's vector: a function of its ids only)
    memo = TokenMemo(64)  # fewer slots than words: evictions as well
    wrong: list[int] = []

    def work(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        for _ in range(150):
            rows = pool[torch.randperm(len(pool), generator=generator)[:24]]
            wrong.append(int((memo.encode(rows, compute) != compute(rows)).any(1).sum()))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, as busy ones do
    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert sum(wrong) == 0


@pytest.mark.parametrize("precision", [["fp32"], {"bf16": 1}, 16, "fp16", "FP32"])
def test_a_precision_of_another_kind_is_one_error(precision):
    """A list or dict raised TypeError (unhashable) from the lookup, a traceback for a user's mistake."""
    with pytest.raises(ElmoError, match="precision must be one of fp32, bf16, int8"):
        Embedder(random_bilm(small_config()), precision=precision)


def test_a_large_cache_word_list_is_built_batch_by_batch():
    """Every word's ids were held as Python tuples at once (about 1.7 KB a word: 1.3 GB for a bilm-tf vocabulary),
    and kept by ``word_to_char_ids``' memo for good; now one batch's at a time."""
    words = [f"w{i}x" for i in range(20_000)]
    compute = lambda ids: ids[:, :4].float()  # noqa: E731
    tracemalloc.start()
    try:
        cache = build_token_cache(compute, words, 50, torch.device("cpu"), batch_size=512)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(cache) == len(words)
    assert peak < 12_000_000, f"{peak:,} bytes of Python objects for {len(words):,} words"
    found, index = cache.lookup(batch_to_ids([["w123x", "unknown"]])[0])
    assert found.tolist() == [True, False] and int(index[0]) == 123
    assert torch.equal(cache.vectors[123], compute(batch_to_ids([["w123x"]])[0])[0])
