"""The inference fast paths below the model: pre-packed BLAS products and the token memo."""

from __future__ import annotations

import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.model import packed
from elmo.model.packed import RightMultiplier
from elmo.model.token_cache import TokenMemo
from tests.reference_engines import reference_char_encoder


LIBRARIES = {"onednn": packed.onednn_packing_available, "mkl": packed.mkl_packing_available}


def _only(monkeypatch, library):
    """Let RightMultiplier see only ``library`` (None: neither); skip if this PyTorch build lacks it."""
    if library is not None and not LIBRARIES[library]():
        pytest.skip(f"{library} packing is not available in this PyTorch build")
    for name in LIBRARIES:
        monkeypatch.setattr(packed, f"{name}_packing_available", lambda *dtype, name=name: name == library)


@pytest.mark.parametrize("library", ["onednn", "mkl", None])
@pytest.mark.parametrize("rows", [0, 1, 7, 32, 300])
def test_packed_products_match_plain_ones(rows, library, monkeypatch):
    _only(monkeypatch, library)
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(1024, 1100, generator=generator) / 30  # over MIN_PACKED_ELEMENTS: packed where possible
    x = torch.randn(rows, 1100, generator=generator)
    bias, per_row = torch.randn(1024, generator=generator), torch.randn(rows, 1024, generator=generator)
    multiply = RightMultiplier(weight)
    assert multiply.library == library and (multiply.packed is not None) == (library is not None)
    expected = x @ weight.t()
    for add, want in ((None, expected), (bias, expected + bias), (per_row, expected + per_row)):
        got = multiply(x, add)
        assert got.shape == (rows, 1024)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("intel", [True, False])
def test_the_packing_library_follows_the_cpu_and_the_row_count(intel, monkeypatch):
    """Products of a few rows: MKL first on Intel CPUs, oneDNN first elsewhere; products of many rows and matrices
    too small for MKL: oneDNN only."""
    monkeypatch.setattr(packed, "intel_cpu", lambda: intel)
    onednn = "onednn" if packed.onednn_packing_available() else None
    mkl = "mkl" if packed.mkl_packing_available() else None
    few_rows = (mkl or onednn) if intel else (onednn or mkl)
    assert RightMultiplier(torch.randn(1024, 1100)).library == few_rows
    assert RightMultiplier(torch.randn(1024, 1100), many_rows=True).library == onednn
    assert RightMultiplier(torch.randn(1024, 1100), dtype=torch.bfloat16).library == (
        "onednn" if packed.onednn_packing_available(torch.bfloat16) else None)
    shipped_size = RightMultiplier(torch.randn(4096, 128))  # the shipped models' recurrent matrix: oneDNN only
    assert shipped_size.library == onednn


def test_the_cpu_vendor_is_read_once_and_is_a_yes_or_no():
    assert packed.intel_cpu() in (True, False) and packed.intel_cpu() is packed.intel_cpu()


def test_small_matrices_are_not_packed():
    assert RightMultiplier(torch.randn(64, 16)).packed is None  # oneDNN's per-call cost; MKL would pad it to 8 MB


@pytest.mark.parametrize("library", ["onednn", None])
def test_bf16_products_packed_or_not_give_the_same_float32_result(library, monkeypatch):
    generator = torch.Generator().manual_seed(3)
    weight, x = torch.randn(1024, 1100, generator=generator) / 30, torch.randn(9, 1100, generator=generator)
    bias, per_row = torch.randn(1024, generator=generator), torch.randn(9, 1024, generator=generator)
    if library is not None and not packed.onednn_packing_available(torch.bfloat16):
        pytest.skip("oneDNN cannot pack bfloat16 here")
    _only(monkeypatch, None)
    plain = RightMultiplier(weight, dtype=torch.bfloat16)  # no library: a plain bf16 product
    _only(monkeypatch, library)
    bf16 = RightMultiplier(weight, dtype=torch.bfloat16)
    assert bf16.library == library
    for add in (None, bias, per_row):
        got, want = bf16(x, add), plain(x, add)
        assert got.dtype == torch.float32 and got.shape == (9, 1024)
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)  # bf16 products both (the same bits here)
    torch.testing.assert_close(bf16(x), x @ weight.t(), rtol=2e-2, atol=2e-2)


def test_token_memo_computes_each_word_once_and_evicts_the_least_recently_used():
    calls = []

    def compute(rows):  # a stand-in encoder: the row sum, recording how many rows it was asked for
        calls.append(len(rows))
        return rows.float().sum(1, keepdim=True).repeat(1, 3)

    memo = TokenMemo(capacity=3)
    a, b, c, d = (torch.full((1, 4), v) for v in (1, 2, 3, 4))
    out = memo.encode(torch.cat([a, b]), compute)
    assert calls == [2] and out[:, 0].tolist() == [4.0, 8.0]
    out = memo.encode(torch.cat([b, c]), compute)  # b remembered, c computed
    assert calls == [2, 1] and out[:, 0].tolist() == [8.0, 12.0] and len(memo) == 3
    memo.encode(a, compute)  # a is now the most recent; b the least
    memo.encode(d, compute)  # full: evicts b
    assert len(memo) == 3 and calls == [2, 1, 1]
    calls.clear()
    out = memo.encode(torch.cat([a, b, c, d]), compute)
    assert calls == [1] and out[:, 0].tolist() == [4.0, 8.0, 12.0, 16.0]  # only b recomputed, all values right


def test_memo_follows_the_weights(fixture_model):
    ids = batch_to_ids([["the", "bank", "of", "the", "river"]])
    with torch.no_grad():
        before = fixture_model(ids).token_vectors
        projection = fixture_model.char_encoder.projection.weight
        saved = projection.clone()
        projection.mul_(2)
        try:
            after = fixture_model(ids).token_vectors
        finally:
            projection.copy_(saved)
        restored = fixture_model(ids).token_vectors
    assert not torch.allclose(before, after)  # not served from the memo of the old weights
    torch.testing.assert_close(restored, before, rtol=0, atol=1e-6)


def test_length_groups_keep_every_token_exact(fixture_model):
    """Tokens of very different lengths (1 byte, multibyte Korean, a word cut at 50 slots) encoded in length
    groups, each over its own trimmed character axis, with all filters as one product, equal one convolution per
    filter over all 50 slots: values and gradients."""
    from elmo.model.char_cnn import CharEncoder, length_groups

    words = ["a", "of", "bank", "은행에서", "internationalisation", "x" * 60, "riverbanks", "I", "."] * 8
    ids = batch_to_ids([words])[0]  # (72, 50)
    groups = length_groups(ids, 7)
    assert len(groups) >= 3 and sorted(torch.cat([rows for rows, _ in groups]).tolist()) == list(range(72))
    assert max(width for _, width in groups) == 50 and min(width for _, width in groups) <= 12
    torch.manual_seed(0)
    encoder = CharEncoder(fixture_model.char_encoder.config, 8).double()
    grads = []
    for run in (encoder, lambda ids: reference_char_encoder(encoder, ids)):
        encoder.zero_grad()
        out = run(ids)  # (72, 8)
        (out * torch.arange(72 * 8, dtype=torch.float64).view(72, 8)).sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in encoder.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=1e-12)
    for grouped, whole in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(grouped, whole, rtol=0, atol=1e-10)


@pytest.mark.parametrize("rows", [1, 2, 5])
@pytest.mark.parametrize("library", ["onednn", "mkl"])
@pytest.mark.parametrize("shape, count", [((2048, 512), packed.ONE_ROW_BLOCKS), ((512, 2048), 16)])
def test_one_row_blocks_give_the_plain_product(rows, library, shape, count, monkeypatch):
    """A matrix held also in column blocks (batch 1's faster one-row product: 2 blocks of a wide matrix, 32-column
    blocks of a narrow one) multiplies like ``addmm``: with no addend, a bias and a per-row term; more rows take the
    packed product, by either library."""
    _only(monkeypatch, library)
    torch.manual_seed(6)
    out, inner = shape
    weight, x = torch.randn(out, inner) / 16, torch.randn(rows, inner)  # large enough to be packed
    bias, per_row = torch.randn(out), torch.randn(rows, out)
    multiplier = RightMultiplier(weight, one_row_blocks=True)
    assert multiplier.library == library
    assert multiplier.blocks is not None and multiplier.blocks.shape == (count, inner, out // count)
    assert multiplier.packed is None  # packed from the blocks at the first product of several rows
    other_copies = [name for name, value in vars(multiplier).items()
                    if isinstance(value, torch.Tensor) and value is not multiplier.blocks]
    assert other_copies == []  # the blocks are its one copy of W until then (no unused transposed copy)
    weight_at_build = weight.clone()
    weight.mul_(2.0)  # the multiplier holds the weight it was built from, packed early or late
    for add, want in ((None, x @ weight_at_build.t()), (bias, torch.addmm(bias, x, weight_at_build.t())),
                      (per_row, torch.addmm(per_row, x, weight_at_build.t()))):
        torch.testing.assert_close(multiplier(x, add), want, rtol=0, atol=1e-5)
    assert (multiplier.packed is not None) == (rows > 1)
    if library == "mkl" and rows > 1:  # MKL's "original weight" argument is a shape alone: no second copy of W
        assert multiplier.shape.shape == weight.shape and multiplier.shape.untyped_storage().nbytes() <= 4


def test_how_many_one_row_blocks():
    assert packed.one_row_block_count(16_384) == packed.ONE_ROW_BLOCKS  # W_hh^T of the original model
    assert packed.one_row_block_count(512) == 512 // packed.NARROW_BLOCK_WIDTH  # its W_proj^T
    assert packed.one_row_block_count(500) is None and packed.one_row_block_count(4_097) is None


@pytest.mark.parametrize("shape, count", [((2048, 256), 2), ((1500, 64), 2), ((512, 1024), 16)])
def test_one_row_blocks_hold_the_columns_of_the_transposed_matrix(shape, count):
    """Block s is columns s w ... (s + 1) w - 1 of W^T, whichever way it was made (transposed piece by piece, some
    pieces shorter than TRANSPOSE_ROWS, or as views of a copy); and it is a copy: W may change afterwards."""
    weight = torch.randn(*shape)
    blocks = packed.one_row_blocks_of(weight, count)
    expected = weight.t().reshape(shape[1], count, -1).permute(1, 0, 2)
    assert torch.equal(blocks, expected)
    weight.add_(1.0)
    assert not torch.equal(blocks, weight.t().reshape(shape[1], count, -1).permute(1, 0, 2))


@pytest.mark.parametrize("shape", [(0, 9, 16), (1, 1, 4), (7, 13, 24), (50, 9, 256)])
def test_max_over_positions_is_max_over_dim_1_in_values_and_gradients(shape):
    """The char CNN's max-pool (a channels-last pool forward, a scatter backward) against ``max(dim=1)``: the same
    values, and every gradient in the first arg-max slot, ties included (the last positions repeat one value, as
    windows wholly in a token's padding do); without gradients, the same values from ``amax``."""
    from elmo.model.char_cnn import max_over_positions

    generator = torch.Generator().manual_seed(shape[0])
    values = torch.randn(*shape, generator=generator, dtype=torch.float64)
    if shape[1] >= 3:
        values[:, -3:] = values[:, -1:].clone()  # three tied positions
    values[: shape[0] // 2, :, 0] = values[: shape[0] // 2, :1, 0]  # a feature whose positions all tie
    grad = torch.randn(shape[0], shape[2], generator=generator, dtype=torch.float64)
    expected_input, got_input = values.clone().requires_grad_(), values.clone().requires_grad_()
    expected = expected_input.max(dim=1).values
    got = max_over_positions(got_input)
    expected.backward(grad)
    got.backward(grad)
    assert torch.equal(got, expected) and torch.equal(got_input.grad, expected_input.grad)
    with torch.no_grad():
        assert torch.equal(max_over_positions(values), expected.detach())


@pytest.mark.parametrize("high", [262, 1 << 20])  # character ids, and ids that need more than int16 keys
def test_unique_rows_gives_each_distinct_row_once_and_where_every_row_went(high):
    from elmo.model.char_cnn import unique_rows

    generator = torch.Generator().manual_seed(high)
    distinct = torch.randint(0, high, (40, 9), generator=generator)
    distinct[1] = distinct[0]
    distinct[1, -1] += 1 << 16 if high > 1 << 16 else 0  # the same row modulo 2^16: only whole ids keep them apart
    ids = distinct[torch.randint(0, 40, (300,), generator=generator)]  # (300, 9) with repeats
    unique, inverse = unique_rows(ids)
    assert torch.equal(unique[inverse], ids)
    assert len(unique) == len({tuple(row) for row in ids.tolist()})


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
@pytest.mark.parametrize("rows", [0, 1, 2, 40])
def test_distinct_rows_multiplies_each_distinct_row_once_and_gives_every_row_its_product(rows, precision):
    from elmo.model.engine import PRECISIONS

    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(1024, 1100, generator=generator) / 30
    words = torch.randn(max(rows // 3, 1), 1100, generator=generator)  # (U, in): rows repeat them
    x = words[torch.randint(0, words.shape[0], (rows,), generator=generator)]  # (n, in)
    if rows == 2:
        x = words[:1].expand(2, -1).clone()  # two equal rows: one product
    bias = torch.randn(1024, generator=generator)
    inner = packed.right_multiplier(weight, PRECISIONS[precision][1], many_rows=True)
    seen = []
    spy = lambda rows_in, add=None, out=None: seen.append(rows_in.shape[0]) or inner(rows_in, add, out=out)
    multiply = packed.DistinctRows(spy)
    want = inner(x, bias)  # every row multiplied, repeats included
    for out in (None, torch.empty(rows, 1024)):
        got = multiply(x, bias, out=out)
        assert got.shape == (rows, 1024)
        # float32 rounding apart: a product's blocking may change with the number of rows
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        if out is not None and 0 < torch.unique(x, dim=0).shape[0] < rows and precision != "int8":
            assert got.data_ptr() == out.data_ptr()  # written into the caller's buffer
    multiplied = rows if rows < 2 else torch.unique(x, dim=0).shape[0]  # fewer than 2 rows: passed through
    assert seen == [multiplied] * 2


def test_only_each_stacks_first_layer_multiplies_distinct_rows(fixture_model):
    from elmo.model.engine import InferenceEngine

    engine = InferenceEngine.build(fixture_model)
    for stack in engine.layers:
        kinds = [type(layer.products[0]) for layer in stack]
        assert kinds[0] is packed.DistinctRows and packed.DistinctRows not in kinds[1:]
