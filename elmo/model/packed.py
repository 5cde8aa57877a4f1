"""Fixed weight matrices multiplied the fastest exact way this PyTorch build offers (inference only).

Every LSTM step multiplies a skinny batch of rows (n = 32: 32 x 512 by 512 x 16,384 for the original model) by the
same large matrix. A plain BLAS call re-packs that matrix into its internal panel layout on every call, which for so
few rows costs about as much as the arithmetic. Two libraries in PyTorch's CPU builds can pack a matrix once and reuse
the packed copy; the products stay float32, so results agree with ``addmm`` to float32 rounding (the bf16 mode's
bf16 copies are packed by oneDNN too; on the AMD EPYC they gave the same bits as its plain bf16 product):

* oneDNN (``torch.ops.mkldnn._reorder_linear_weight`` / ``_linear_pointwise``), used first: measured on an AMD EPYC
  (Zen 4) at n = 32, 2.6x MKL's packed product on the recurrent matrix (189 vs 73 GFLOP/s) and 1.8x on the
  projection, and above MKL's own 2,048 x 2,048 product (MKL takes a slower path on AMD CPUs);
* MKL (``cblas_sgemm_pack`` through ``torch.ops.mkl._mkl_linear``), used first on Intel CPUs for the products of a
  few rows (the per-step ones), and where oneDNN is missing: on an Intel Xeon with AMX (2 cores), at 8 / 16 / 32
  rows 1.32x / 1.13x / 1.11x oneDNN's packed product for the recurrent matrix (302 vs 272 GFLOP/s at 32) and
  1.42x / 1.17x / 1.10x for the projection, within a few per cent at 400-900 rows; on an Intel Xeon without AMX,
  within a few per cent of oneDNN, and 1.4x the unpacked product for the recurrent matrix.

oneDNN's packed product is also the fastest for a matrix multiplied by many rows at once (the input projections of
a whole layer: 2.5x ``addmm`` at 26 rows, 1.5x at 800 on the AMD EPYC), so those are packed too where oneDNN is
available. Where it is not, such a matrix is not packed (``many_rows=True``: MKL's packed product is no faster
there), and neither is a small matrix or one on another device: a contiguous transposed copy is used, which BLAS
multiplies faster than a transposed view; that path can also write into a caller's buffer (``out``).
"""

from __future__ import annotations

import functools
import platform
import threading
import warnings

import torch

_ROWS_HINT = 32  # both libraries ask for a row count to pack for; any count can use the packed copy (checked below)
MIN_PACKED_ELEMENTS = 1 << 20  # smaller matrices are not packed by MKL: it pads every packed matrix to at least 8 MB
ONE_ROW_BLOCKS = 2  # column blocks of a wide matrix's one-row product (``RightMultiplier(one_row_blocks=True)``)
NARROW_COLUMNS = 1_024  # a matrix with at most this many columns (the projection, 4,096 -> 512) is narrow: its
NARROW_BLOCK_WIDTH = 32  # one-row product runs over blocks of 32 columns instead (see ``one_row_block_count``)
TRANSPOSE_ROWS = 256  # rows of W transposed per copy when a block is made: a cache-sized piece (a whole-matrix
# transposing copy of W_hh, 16,384 x 512, took 34 ms; in pieces of 256 rows 26 ms; a plain copy 15 ms)
MIN_ONEDNN_ELEMENTS = 1 << 19  # below, oneDNN's ~15 us per call eats the gain (AMD EPYC, 8-32 rows: 4,096 x 128
# 2.2x plain mm, 128 x 1,024 1.1-1.3x, 64 x 256 slower)


@functools.cache
def mkl_packing_available() -> bool:
    """Whether ``torch.ops.mkl`` can pack a float32 matrix here and reuse it for any number of rows.

    ``_mkl_linear`` runs the packed product only when told the row count it was packed for, otherwise it falls back
    to an unpacked product. MKL packs the right-hand matrix in a layout that depends on its own shape only (the
    packed size is the same for every row count), so we pass the actual row count; checked here once, on products
    of several row counts against plain ``mm``.
    """
    try:
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(40, 24, generator=generator)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, _ROWS_HINT)
        for rows in (1, 3, _ROWS_HINT, 77):
            x = torch.randn(rows, 24, generator=generator)
            out = torch.ops.mkl._mkl_linear(x, packed, shape_of(weight), None, rows)
            if not torch.allclose(out, x @ weight.t(), rtol=1e-5, atol=1e-5):
                return False
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def shape_of(weight: torch.Tensor) -> torch.Tensor:
    """A tensor of ``weight``'s shape and dtype that holds no memory (one zero, expanded), for ``_mkl_linear``'s
    "original weight" argument: told the row count it packed for, the packed product reads only that argument's
    shape (it multiplies the original only when the row counts differ, which never happens here), so no second copy
    of the matrix is kept for it. ``mkl_packing_available`` checks products made this way."""
    return weight.new_zeros(()).expand(weight.shape)


@functools.cache
def intel_cpu() -> bool:
    """Whether this is an Intel CPU, where MKL's packed product of a few rows is the faster one (module docstring)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return "GenuineIntel" in platform.processor()


@functools.cache
def onednn_packing_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether oneDNN can pack a matrix in ``dtype`` (float32, or bfloat16 for the bf16 mode) here and multiply any
    number of rows by the packed copy.

    Checked once per dtype, on products of several row counts against plain ``mm`` in the same dtype (the packed
    layout is chosen for a row count, ``_ROWS_HINT``; oneDNN takes any other count, measured at full speed from 7
    rows up).
    """
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(40, 24, generator=generator).to(dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, _ROWS_HINT)
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        for rows in (1, 3, _ROWS_HINT, 77):
            x = torch.randn(rows, 24, generator=generator).to(dtype)
            out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
            if not torch.allclose(out.float(), (x @ weight.t()).float(), rtol=tolerance, atol=tolerance):
                return False
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def one_row_block_count(out_features: int) -> int | None:
    """How many column blocks a matrix with ``out_features`` columns is held in for one-row products (None: none).

    Measured on the AMD EPYC (2 cores), original-size matrices streamed from memory: W_hh^T (512 x 16,384) in 2
    blocks (one per core) 23-33 GB/s against the packed product's 17-19; W_proj^T (4,096 x 512) in blocks of 32
    columns 17-40 GB/s against 14-18, where 2 blocks gave 12-14 (and W_hh^T in 32-column blocks 11-28)."""
    if out_features <= NARROW_COLUMNS:
        return out_features // NARROW_BLOCK_WIDTH if out_features % NARROW_BLOCK_WIDTH == 0 else None
    return ONE_ROW_BLOCKS if out_features % ONE_ROW_BLOCKS == 0 else None


def one_row_blocks_of(weight: torch.Tensor, count: int) -> torch.Tensor:
    """W (out, in) as ``count`` column blocks of W^T, (S, in, out / S): block s holds W's rows s w ... (s + 1) w - 1
    transposed. Blocks 32 columns wide (a narrow matrix) stream as fast when read as transposed views of a plain
    copy of W (measured: the same GB/s), which is cheaper to make; wider blocks are copied transposed, piece by
    piece."""
    out_features, in_features = weight.shape
    width = out_features // count
    if width == NARROW_BLOCK_WIDTH:
        return weight.clone(memory_format=torch.contiguous_format).view(count, width, in_features).transpose(1, 2)
    blocks = weight.new_empty(count, in_features, width)  # (S, in, w)
    for block in range(count):
        for start in range(0, width, TRANSPOSE_ROWS):
            rows = weight[block * width + start : block * width + min(start + TRANSPOSE_ROWS, width)]  # (r, in)
            blocks[block, :, start : start + rows.shape[0]].copy_(rows.t())
    return blocks


def packing_library(weight: torch.Tensor, dtype: torch.dtype | None = None, many_rows: bool = False) -> str | None:
    """Which library ``RightMultiplier`` packs ``weight`` with for products in ``dtype``: "onednn", "mkl", or None
    (a plain transposed copy). ``many_rows``: a matrix multiplied by many rows per call, packed by oneDNN only.
    A float32 matrix multiplied by a few rows at a time goes to MKL on Intel CPUs, to oneDNN elsewhere (module
    docstring); a fixed rule, so the same machine always takes the same path."""
    dtype = dtype or weight.dtype
    if not (weight.dtype == torch.float32 and dtype in (torch.float32, torch.bfloat16)
            and weight.device.type == "cpu"):
        return None
    mkl = (not many_rows and dtype == torch.float32 and weight.numel() >= MIN_PACKED_ELEMENTS
           and mkl_packing_available())
    if mkl and intel_cpu():
        return "mkl"
    if weight.numel() >= MIN_ONEDNN_ELEMENTS and onednn_packing_available(dtype):
        return "onednn"
    return "mkl" if mkl else None


class RightMultiplier:
    """``x -> x @ W^T (+ add)`` for one fixed weight W (out, in), held in the fastest layout for repeated use.

    ``dtype``: the dtype of the product (bf16 mode); the result comes back in ``x``'s dtype. Holds copies of the
    weight: an inference engine (``elmo.model.engine``) builds one per matrix.
    """

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype | None = None, many_rows: bool = False,
                 one_row_blocks: bool = False) -> None:
        self.dtype = dtype = dtype or weight.dtype
        self.packed, self.out_features = None, weight.shape[0]
        self.library = packing_library(weight, dtype, many_rows)
        # a one-row product (batch 1: x (1, 512) by W_hh^T (512, 16,384)) streams the matrix from memory; as column
        # blocks in one batched product it streams faster than the packed product, for one more copy of the matrix
        self.blocks = None
        count = one_row_block_count(self.out_features)
        if one_row_blocks and self.library is not None and dtype == torch.float32 and count:
            self.blocks = one_row_blocks_of(weight.detach(), count)  # (S, in, out / S)
        self.packing = threading.Lock()  # the packed copy of a matrix held in blocks is made on first use, once
        if self.library is not None:
            if self.blocks is None:
                self.packed = self._pack(weight.detach().to(dtype).contiguous())
        else:
            self.weight_t = weight.detach().t().to(dtype).contiguous()  # (in, out)

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """x (n, in) -> (n, out); ``add`` is a bias (out,) or a per-row term (n, out) added to the product.

        ``out``: a buffer (n, out) the result may be written into (the unpacked same-dtype path does; the others
        return a new tensor); use the returned tensor either way.
        """
        if self.blocks is not None and x.shape[0] == 1 and x.dtype == torch.float32:
            blocks = self.blocks.shape[0]
            rows = x.expand(blocks, 1, x.shape[1])  # (S, 1, in): the same row for every block
            if add is None:
                return torch.bmm(rows, self.blocks).view(1, -1)  # (S, 1, out / S) is (1, out) in memory
            return torch.baddbmm(add.expand(1, -1).reshape(blocks, 1, -1), rows, self.blocks).view(1, -1)
        if self.library is not None:
            if x.shape[0] == 0:  # the packed products refuse an empty input
                empty = x.new_zeros(0, self.out_features)
                return empty if add is None else empty + add
            bias = add if add is not None and add.dim() == 1 and self.dtype == x.dtype else None
            packed = self._packed()
            if self.library == "onednn":
                product = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype).contiguous(), packed,
                                                             bias, "none", [], "").to(x.dtype)  # bf16: float32 result
            else:  # told the row count, the packed product reads only the shape of the "original"
                product = torch.ops.mkl._mkl_linear(x.contiguous(), packed, self.shape, bias, x.shape[0])
            return product.add_(add) if add is not None and bias is None else product  # (n, out)
        if self.weight_t.dtype == x.dtype:
            if out is not None and out.dtype == x.dtype and out.device == x.device:
                return torch.mm(x, self.weight_t, out=out) if add is None else torch.addmm(add, x, self.weight_t,
                                                                                          out=out)
            return x @ self.weight_t if add is None else torch.addmm(add, x, self.weight_t)
        product = (x.to(self.weight_t.dtype) @ self.weight_t).to(x.dtype)  # bf16 product, float32 result
        return product if add is None else product + add


    def _pack(self, weight: torch.Tensor) -> torch.Tensor:
        """W (out, in), contiguous, in the product's dtype -> the library's packed copy."""
        if self.library == "onednn":
            return torch.ops.mkldnn._reorder_linear_weight(weight, _ROWS_HINT)
        self.shape = shape_of(weight)  # (out, in), no memory: see ``shape_of``
        return torch.ops.mkl._mkl_reorder_linear_weight(weight, _ROWS_HINT)

    def _packed(self) -> torch.Tensor:
        """The packed copy. A matrix held in one-row blocks is packed from them at its first product of several
        rows, not when the engine is built: a sentence at a time never needs it, and the first vector comes ~0.1 s
        sooner for the original-size model (the blocks are a copy, so this is still the weight it was built from)."""
        if self.packed is None:
            with self.packing:
                if self.packed is None:
                    weight = self.blocks.transpose(1, 2).reshape(self.out_features, -1).contiguous()  # (out, in)
                    self.packed = self._pack(weight)
        return self.packed


class Int8RightMultiplier:
    """``x -> x @ W^T (+ add)`` with W quantised to int8 per output row (symmetric) and x quantised per call
    (PyTorch's dynamic quantisation, oneDNN kernels: int8 matrix units where the CPU has them). An optional fast
    mode, not exact: about 2e-2 relative error per product (benchmarks/inference.py prints the model's error)."""

    def __init__(self, weight: torch.Tensor) -> None:
        if weight.device.type != "cpu":
            raise RuntimeError("the int8 mode runs on the CPU only; use fp32 or bf16 on other devices")
        weight = weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
        engine = "onednn" if "onednn" in torch.backends.quantized.supported_engines else "x86"
        previous = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = engine
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PyTorch marks quantized tensors as deprecated; still the API
                quantized = torch.quantize_per_channel(weight, scales, torch.zeros_like(scales, dtype=torch.long),
                                                       0, torch.qint8)
                self.packed = torch.ops.quantized.linear_prepack(quantized, None)
        except (RuntimeError, AttributeError) as error:
            raise RuntimeError(f"int8 matrix products are not available in this PyTorch build: {error}") from error
        finally:
            torch.backends.quantized.engine = previous

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """As ``RightMultiplier.__call__``; ``out`` is not used (the quantized product allocates its own)."""
        product = torch.ops.quantized.linear_dynamic(x.float().contiguous(), self.packed, True)  # (n, out)
        return product if add is None else product.add_(add)


def right_multiplier(weight: torch.Tensor, dtype: torch.dtype | None = None, many_rows: bool = False,
                     one_row_blocks: bool = False) -> RightMultiplier | Int8RightMultiplier:
    """The inference multiplier for ``weight`` in the given matmul dtype (None: the weight's own; torch.bfloat16;
    torch.qint8: dynamic int8 quantisation). ``many_rows`` for a matrix multiplied by many rows per call (packed by
    oneDNN only: MKL's packed product is no faster there and cannot write into a buffer); ``one_row_blocks`` for a
    matrix multiplied by one row (batch 1), held also in column blocks (``one_row_block_count``)."""
    if dtype == torch.qint8:
        return Int8RightMultiplier(weight)
    return RightMultiplier(weight, dtype, many_rows, one_row_blocks)


class FrozenLinear:
    """``x -> x W^T + b`` with an ``nn.Linear``'s weights as they are now, held as a ``RightMultiplier`` of a matrix
    multiplied by many rows at once (inference: the character encoder's highway and projection layers, one row per
    distinct token; oneDNN's packed 2,048 x 2,048 product is 2.3x ``nn.Linear`` at 33 rows, 1.4x at 800, AMD EPYC)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        self.product = RightMultiplier(linear.weight.detach(), many_rows=True)
        self.bias = linear.bias.detach().clone() if linear.bias is not None else None  # (out,)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (n, in) -> (n, out)."""
        return self.product(x, self.bias)


class AutogradRightMultiplier:
    """The same call for training: ``x @ W^T (+ add)`` through autograd, W a contiguous transposed copy made once
    per forward pass (faster per step than multiplying by a transposed view)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight_t = weight.t().contiguous()  # (in, out)

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """As ``RightMultiplier.__call__``; ``out`` is not used (autograd needs a new tensor)."""
        return x @ self.weight_t if add is None else torch.addmm(add, x, self.weight_t)


class DistinctRows:
    """A multiplier that multiplies each distinct row of x once and copies the results to the repeats (inference).

    The first LSTM layer's inputs are token vectors, and running text repeats its words: in a batch of 32 sentences
    of the 1B Word Benchmark about half of the positions repeat an earlier one (boundaries, "the", ","), so the
    layer's input projections, the largest single product of the layer, need about half the work. Equal rows get
    equal products (a row's product does not depend on the other rows), so the result is the same. Above the first
    layer the inputs depend on their context and do not repeat: use the multiplier itself there.
    """

    def __init__(self, product: RightMultiplier | Int8RightMultiplier) -> None:
        self.product = product

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """As ``RightMultiplier.__call__``; ``add`` is a bias (out,) or None."""
        if x.shape[0] < 2:
            return self.product(x, add, out=out)
        distinct, inverse = torch.unique(x, dim=0, return_inverse=True)  # (U, in), (n,)
        if distinct.shape[0] == x.shape[0]:
            return self.product(x, add, out=out)
        products = self.product(distinct, add)  # (U, out)
        if out is not None and out.dtype == products.dtype and out.device == products.device:
            return torch.index_select(products, 0, inverse, out=out)  # (n, out)
        return products.index_select(0, inverse)  # (n, out)
